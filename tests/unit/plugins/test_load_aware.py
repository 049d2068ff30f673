"""NodeLoad: score from measured usage + estimate, thresholds, stale/missing metrics, bursts, args."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from structlog.testing import capture_logs

from custom_scheduler.api.model import Pod
from custom_scheduler.errors import ConfigError
from custom_scheduler.framework import loadmetrics
from custom_scheduler.framework.loadmetrics import StaticSource
from custom_scheduler.framework.types import SKIP, SUCCESS, Code, CycleState, NodeInfo, Status
from custom_scheduler.plugins import load_aware as la
from custom_scheduler.plugins.load_aware import NodeLoadArgs
from custom_scheduler.plugins.resource_allocation import ResourceSpec
from tests.builders import NodeBuilder, make_node, make_pod
from tests.unit.plugins.support import fake_handle, node_info

NOW = 1_700_000_000.0
#: The sources the plugins under test read through their Handle.
SOURCES = loadmetrics.Sources()


class Clock:
    def __init__(self, t: float = NOW) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


@pytest.fixture
def source() -> Iterator[tuple[StaticSource, str]]:
    """A StaticSource installed under a name unique to the test."""
    name = f"test-{uuid.uuid4().hex[:8]}"
    src = StaticSource(clock=lambda: NOW)
    SOURCES.install(src, name)
    yield src, name
    SOURCES.uninstall(name)


def plugin(name: str, clock: Clock | None = None, **kw: Any) -> la.NodeLoad:
    return la.NodeLoad(NodeLoadArgs(metrics_source=name, **kw), fake_handle(metrics=SOURCES), clock=clock or Clock())


def node(name: str, cpu: str = "4", memory: str = "8Gi") -> NodeInfo:
    return node_info(make_node(name).capacity(cpu=cpu, memory=memory, pods="110").build())


def pod(cpu: str = "400m", memory: str = "800Mi") -> Pod:
    return make_pod().req(cpu=cpu, memory=memory).build()


def score(pl: la.NodeLoad, p: Pod, ni: NodeInfo) -> int:
    state = CycleState()
    assert pl.pre_score(state, p, [ni]) == SUCCESS
    return pl.score(state, p, ni)


def filter_(pl: la.NodeLoad, p: Pod, ni: NodeInfo) -> Status:
    state = CycleState()
    pre = pl.pre_filter(state, p, [ni])
    if pre.is_skip:
        return SUCCESS
    return pl.filter(state, p, ni)


# --- score ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("usage", "kw", "want"),
    [
        # 4 cpu / 8Gi node, pod 400m / 800Mi. cpu (0+400)/4000 = 10%, memory 800/8192 = 9%: 100 - 19//2.
        pytest.param(("0", "0"), {}, 91, id="idle"),
        # (2000+400)/4000 = 60%, (4096+800)/8192 = 59%: 100 - 119//2 = 41.
        pytest.param(("2", "4Gi"), {}, 41, id="half-used"),
        pytest.param(("4", "8Gi"), {}, 0, id="saturated-caps-at-100"),
        pytest.param(("8", "16Gi"), {}, 0, id="over-saturated"),
        # Weights cpu 3, memory 1: (3*60 + 59)//4 = 59 → 41; cpu 90% (3.2 + 0.4): (3*90 + 9)//4 = 69 → 31.
        pytest.param(
            ("3200m", "0"),
            {"resources": (ResourceSpec("cpu", 3), ResourceSpec("memory", 1))},
            31,
            id="weighted-cpu",
        ),
        pytest.param(("3200m", "0"), {"resources": (ResourceSpec("memory", 1),)}, 91, id="memory-only"),
    ],
)
def test_score(source: tuple[StaticSource, str], usage: tuple[str, str], kw: dict[str, Any], want: int) -> None:
    src, name = source
    src.set("n", cpu=usage[0], memory=usage[1])
    assert score(plugin(name, **kw), pod(), node("n")) == want


def test_pods_without_requests_count_with_non_zero_defaults(source: tuple[StaticSource, str]) -> None:
    src, name = source
    src.set("n", cpu="0", memory="0")
    # 100m of 4000 = 2%, 200Mi of 8Gi = 2%: 98.
    assert score(plugin(name), make_pod().build(), node("n")) == 98


def test_less_loaded_node_scores_higher(source: tuple[StaticSource, str]) -> None:
    src, name = source
    src.set("busy", cpu="3", memory="6Gi")
    src.set("idle", cpu="200m", memory="1Gi")
    pl = plugin(name)
    assert score(pl, pod(), node("idle")) > score(pl, pod(), node("busy"))


@pytest.mark.parametrize(
    ("setup", "want_log"),
    [
        pytest.param(lambda src: None, la.MISSING, id="missing"),
        pytest.param(lambda src: src.set("n", cpu="4", memory="8Gi", timestamp=NOW - 181), la.STALE, id="stale"),
    ],
)
def test_missing_or_stale_metrics_score_neutral_and_log_once(
    source: tuple[StaticSource, str], setup: Any, want_log: str
) -> None:
    src, name = source
    setup(src)
    pl = plugin(name)
    with capture_logs() as logs:
        assert score(pl, pod(), node("n")) == 50
        assert score(pl, pod(), node("n")) == 50
        assert filter_(plugin(name, thresholds=(("cpu", 10),)), pod(), node("n")) == SUCCESS
    mine = [e for e in logs if e["event"] == "node_load_metrics_unusable" and e.get("node") == "n"]
    assert len(mine) == 2  # one per plugin instance, not one per call
    assert mine[0]["reason"] == want_log
    assert mine[0]["log_level"] == "warning"
    src.set("n", cpu="0", memory="0")
    with capture_logs() as logs:
        assert score(pl, pod(), node("n")) == 91
    assert [e["event"] for e in logs] == ["node_load_metrics_available"]


def test_sample_just_within_stale_after_is_used(source: tuple[StaticSource, str]) -> None:
    src, name = source
    src.set("n", cpu="0", memory="0", timestamp=NOW - 180)
    assert score(plugin(name), pod(), node("n")) == 91


def test_no_source_installed_scores_neutral() -> None:
    pl = plugin(f"absent-{uuid.uuid4().hex}", neutral_score=30)
    with capture_logs() as logs:
        assert score(pl, pod(), node("n")) == 30
        assert score(pl, pod(), node("m")) == 30
    assert [e["reason"] for e in logs] == [la.NO_SOURCE]


def test_node_without_allocatable_scores_neutral(source: tuple[StaticSource, str]) -> None:
    src, name = source
    src.set("n", cpu="1", memory="1Gi")
    empty = node_info(NodeBuilder("n").capacity(pods="10").build())
    pl = plugin(name)
    with capture_logs() as logs:
        for _ in range(3):
            assert score(pl, pod(), empty) == 50
    assert [(e["event"], e["reason"]) for e in logs] == [("node_load_metrics_unusable", la.NO_CAPACITY)]


def test_score_without_pre_score(source: tuple[StaticSource, str]) -> None:
    src, name = source
    src.set("n", cpu="0", memory="0")
    assert plugin(name).score(CycleState(), pod(), node("n")) == 91


# --- estimate ------------------------------------------------------------------------------------


def test_pods_added_after_the_sample_are_estimated(source: tuple[StaticSource, str]) -> None:
    src, name = source
    ni = node("n")
    ni.add_pod(pod("1", "1Gi"))  # there at sample time: its usage is in the sample
    src.set("n", cpu="1", memory="1Gi")
    pl = plugin(name)
    assert pl.node_load(ni, NOW) == {"cpu": 1000, "memory": 2**30}  # baseline taken now
    ni.add_pod(pod("2", "2Gi"))  # bound after the sample
    assert pl.node_load(ni, NOW) == {"cpu": 3000, "memory": 3 * 2**30}
    # A newer sample (which shows the new pod) resets the baseline.
    src.set("n", cpu="3", memory="3Gi", timestamp=NOW + 30)
    assert pl.node_load(ni, NOW + 31) == {"cpu": 3000, "memory": 3 * 2**30}


def test_pods_placed_by_us_since_the_window_start_are_estimated_even_in_the_baseline(
    source: tuple[StaticSource, str],
) -> None:
    src, name = source
    clock = Clock(NOW)
    pl = plugin(name, clock)
    ni = node("n")
    early, late = pod("1", "1Gi"), pod("2", "2Gi")
    clock.t = NOW - 100
    pl.reserve(CycleState(), early, "n")
    ni.add_pod(early)
    clock.t = NOW - 5
    pl.reserve(CycleState(), late, "n")
    ni.add_pod(late)
    # The sample (taken at NOW over a 15s window) arrives after both were placed: both are in the
    # baseline, but `late` started inside the window, so its usage is not (fully) in the sample.
    src.set("n", cpu="1", memory="1Gi", timestamp=NOW, window=15.0)
    clock.t = NOW + 1
    assert pl.node_load(ni, clock.t) == {"cpu": 3000, "memory": 3 * 2**30}
    pl.unreserve(CycleState(), late, "n")
    assert pl.node_load(ni, clock.t) == {"cpu": 1000, "memory": 2**30}


def test_estimate_can_be_switched_off(source: tuple[StaticSource, str]) -> None:
    src, name = source
    src.set("n", cpu="1", memory="1Gi")
    pl = plugin(name, estimate_pods=False)
    ni = node("n")
    pl.node_load(ni, NOW)
    ni.add_pod(pod("2", "2Gi"))
    assert pl.node_load(ni, NOW) == {"cpu": 1000, "memory": 2**30}


def burst(pl: la.NodeLoad, infos: list[NodeInfo], n: int) -> dict[str, int]:
    """Schedule ``n`` pods one by one on the best-scoring node, as the scheduler does (assume +
    reserve), with no new sample in between; return pods per node."""
    placed = {ni.name: 0 for ni in infos}
    for _ in range(n):
        p = pod("1", "1Gi")
        state = CycleState()
        pl.pre_score(state, p, infos)
        best = max(infos, key=lambda ni: pl.score(state, p, ni))
        pl.reserve(state, p, best.name)
        best.add_pod(p)
        placed[best.name] += 1
    return placed


def test_burst_does_not_pile_onto_the_node_that_looked_idle(source: tuple[StaticSource, str]) -> None:
    src, name = source
    src.set("idle", cpu="0", memory="0")
    src.set("warm", cpu="4", memory="8Gi")  # 50% of 8 cpu / 16Gi
    infos = [node("idle", "8", "16Gi"), node("warm", "8", "16Gi")]
    # Each pod adds 12.5% cpu and 6.25% memory to its node's estimated load: the idle node takes six
    # until its estimate passes the warm node's 50%, then they alternate.
    assert burst(plugin(name), infos, 8) == {"idle": 7, "warm": 1}
    assert burst(plugin(name), [node("idle", "8", "16Gi"), node("warm", "8", "16Gi")], 10) == {"idle": 8, "warm": 2}


def test_without_the_estimate_a_burst_piles_onto_the_idle_node(source: tuple[StaticSource, str]) -> None:
    src, name = source
    src.set("idle", cpu="0", memory="0")
    src.set("warm", cpu="4", memory="8Gi")
    infos = [node("idle", "8", "16Gi"), node("warm", "8", "16Gi")]
    assert burst(plugin(name, estimate_pods=False), infos, 8) == {"idle": 8, "warm": 0}


def test_reserve_prunes_old_placements(source: tuple[StaticSource, str]) -> None:
    _, name = source
    clock = Clock(NOW)
    pl = plugin(name, clock)
    old = pod()
    pl.reserve(CycleState(), old, "n")
    clock.t = NOW + 180 + 600 + la._PRUNE_EVERY + 1
    pl.reserve(CycleState(), pod(), "n")
    assert old.uid not in pl._placed
    assert len(pl._placed) == 1


# --- filter --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("usage", "thresholds", "want"),
    [
        pytest.param(("3", "1Gi"), (("cpu", 80),), SUCCESS, id="at-75-below-80"),
        pytest.param(("3200m", "1Gi"), (("cpu", 80),), SUCCESS, id="exactly-80-is-not-above"),
        pytest.param(
            ("3201m", "1Gi"),
            (("cpu", 80),),
            Status.unresolvable("node(s) are overloaded: cpu usage above 80%"),
            id="above-80",
        ),
        pytest.param(
            ("4", "8Gi"),
            (("cpu", 80), ("memory", 90)),
            Status.unresolvable(
                "node(s) are overloaded: cpu usage above 80%", "node(s) are overloaded: memory usage above 90%"
            ),
            id="every-reason",
        ),
        pytest.param(("4", "1Gi"), (("memory", 90),), SUCCESS, id="only-configured-resources"),
    ],
)
def test_filter(
    source: tuple[StaticSource, str], usage: tuple[str, str], thresholds: tuple[tuple[str, int], ...], want: Status
) -> None:
    src, name = source
    src.set("n", cpu=usage[0], memory=usage[1])
    assert filter_(plugin(name, thresholds=thresholds), pod(), node("n")) == want


def test_filter_counts_the_estimate_not_the_incoming_pod(source: tuple[StaticSource, str]) -> None:
    src, name = source
    src.set("n", cpu="2", memory="0")
    pl = plugin(name, thresholds=(("cpu", 80),))
    ni = node("n")
    assert filter_(pl, pod("3"), ni) == SUCCESS  # 50% now; the incoming 3 cpu is not counted
    ni.add_pod(pod("1500m"))  # placed since the sample: 87.5%
    st = filter_(pl, pod(), ni)
    assert st.code is Code.UNSCHEDULABLE_AND_UNRESOLVABLE


def test_pre_filter_skips_without_thresholds(source: tuple[StaticSource, str]) -> None:
    _, name = source
    assert plugin(name).pre_filter(CycleState(), pod(), []) == SKIP
    assert plugin(name).filter(CycleState(), pod(), node("n")) == SUCCESS
    assert plugin(name, thresholds=(("cpu", 80),)).pre_filter(CycleState(), pod(), []) == SUCCESS


# --- args ----------------------------------------------------------------------------------------


def test_args_defaults() -> None:
    assert la.parse_args(None, "a") == NodeLoadArgs()
    d = NodeLoadArgs()
    assert (d.stale_after, d.refresh_interval, d.neutral_score, d.estimate_pods) == (180.0, 30.0, 50, True)


def test_args_full_and_round_trip() -> None:
    got = la.parse_args(
        {
            "kind": "NodeLoadArgs",
            "resources": [{"name": "cpu", "weight": 2}, {"name": "memory", "weight": 1}],
            "thresholds": {"cpu": 85, "memory": 90},
            "staleAfter": "2m",
            "refreshInterval": "15s",
            "neutralScore": 40,
            "estimatePods": False,
            "metricsSource": "prometheus",
        },
        "a",
    )
    assert got == NodeLoadArgs(
        (ResourceSpec("cpu", 2), ResourceSpec("memory", 1)),
        (("cpu", 85), ("memory", 90)),
        120.0,
        15.0,
        40,
        False,
        "prometheus",
    )
    assert la.parse_args(got.to_config(), "a") == got


def test_args_errors_all_reported_with_paths() -> None:
    with pytest.raises(ConfigError) as exc:
        la.parse_args(
            {
                "resources": [{"name": "gpu"}, {"name": "cpu", "weight": 101}, {"name": "cpu"}],
                "thresholds": {"cpu": 0, "memory": "90", "disk": 50},
                "staleAfter": "soon",
                "refreshInterval": 30,
                "neutralScore": 101,
                "estimatePods": "yes",
                "metricsSource": "",
            },
            "pc.args",
        )
    got = {str(e) for e in exc.value.errors}
    assert got == {
        'pc.args.resources[0].name: Unsupported value: "gpu": supported values: "cpu", "memory"',
        "pc.args.resources[1].weight: must be in the range 1-100",
        'pc.args.resources[2].name: Duplicate value: "cpu"',
        "pc.args.thresholds.cpu: must be an integer percentage in the range 1-100",
        "pc.args.thresholds.memory: must be an integer percentage in the range 1-100",
        'pc.args.thresholds.disk: Unsupported resource: supported values: "cpu", "memory"',
        'pc.args.staleAfter: invalid duration "soon" (expected e.g. "15s", "1m30s", "500ms")',
        'pc.args.refreshInterval: must be a duration string such as "30s"',
        "pc.args.neutralScore: must be in the range 0-100",
        "pc.args.estimatePods: must be a boolean",
        "pc.args.metricsSource: must not be empty",
    }


def test_helpers() -> None:
    assert la.utilisation_percent(5, 0) == 0
    assert la.utilisation_percent(150, 100) == 100
    assert la.load_score({"cpu": 1}, {"cpu": 0, "memory": 0}, la.DEFAULT_RESOURCES) is None
