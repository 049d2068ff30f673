"""DefaultPreemption: args, eligibility, victim selection, node choice, the decision and messages.

The pure parts (:mod:`custom_scheduler.plugins.preemption.selection`) are tested on NodeInfos and a
real profile's filters; the plugin end to end through :class:`Algorithm` and the framework's
PostFilter. The plugin only decides: its :class:`PostFilterResult` names the node, the victims and
the nominations to clear, and a recording fake client proves it writes nothing. Carrying the
decision out (the API calls) is :class:`~custom_scheduler.framework.evictor.ApiEvictor`'s,
tested in ``tests/unit/framework/test_evictor.py``.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from typing import Any, cast

import pytest

from custom_scheduler.api.model import Pod, PodDisruptionBudget, pdb_from_json, pod_from_json
from custom_scheduler.config import load_config
from custom_scheduler.core.algorithm import Algorithm
from custom_scheduler.core.cache import Cache
from custom_scheduler.errors import ConfigError
from custom_scheduler.framework.handle import SnapshotHandle
from custom_scheduler.framework.interface import PostFilterResult, RequestsFit
from custom_scheduler.framework.profiles import build_frameworks
from custom_scheduler.framework.runtime import Framework
from custom_scheduler.framework.types import SUCCESS, Code, CycleState, FitError, NodeInfo, Snapshot, Status
from custom_scheduler.plugins import default_preemption as dp
from custom_scheduler.plugins.builtin import full_registry
from custom_scheduler.plugins.preemption import selection
from custom_scheduler.plugins.preemption.selection import Candidate, Victims
from tests.builders import NodeBuilder, PodBuilder, make_node, make_pod
from tests.fake_api import FakeClient

DEFAULT = "apiVersion: kubescheduler.config.k8s.io/v1\nkind: KubeSchedulerConfiguration\n"
T0 = "2024-01-01T00:00:00Z"


def ts(minute: int) -> str:
    return f"2024-01-01T00:{minute:02d}:00Z"


def running(name: str, node: str, priority: int, cpu: str = "1", start: str = T0, **labels: str) -> PodBuilder:
    return make_pod(name).node(node).priority(priority).req(cpu=cpu).start_time(start).labels(**labels)


def build(b: PodBuilder, *, disruption_target: bool = False) -> Pod:
    """The scheduler's view of ``b``, optionally with the condition preemption puts on victims."""
    obj = b.obj()
    obj["metadata"].setdefault("uid", f"uid-{obj['metadata']['name']}")
    if disruption_target:
        obj.setdefault("status", {}).setdefault("conditions", []).append(
            {"type": "DisruptionTarget", "status": "True", "reason": "PreemptionByScheduler"}
        )
    return pod_from_json(obj)


def pdb(
    name: str, allowed: int, namespace: str = "default", disrupted: Sequence[str] = (), **match: str
) -> PodDisruptionBudget:
    return pdb_from_json(
        {
            "metadata": {"name": name, "namespace": namespace},
            "spec": {"selector": {"matchLabels": match}},
            "status": {"disruptionsAllowed": allowed, "disruptedPods": dict.fromkeys(disrupted, T0)},
        }
    )


def keys(pods: Sequence[Pod]) -> list[str]:
    return [p.key for p in pods]


class Env:
    """A snapshot, the default profile (DefaultPreemption included), PDBs, nominations, events.

    ``client`` is handed to the framework like the daemon's: the plugin must still write nothing.
    ``seed`` seeds the cycle state's RNG, the plugin's only random source (the candidate offset)."""

    def __init__(
        self,
        nodes: Sequence[NodeBuilder],
        pods: Sequence[Pod] = (),
        *,
        pdbs: Sequence[PodDisruptionBudget] = (),
        nominated: dict[str, list[Pod]] | None = None,
        client: FakeClient | None = None,
        config: str = DEFAULT,
        seed: int = 0,
    ) -> None:
        cache = Cache()
        for n in nodes:
            cache.add_node(n.build())
        for p in pods:
            cache.add_pod(p)
        self.snap: Snapshot = cache.snapshot()
        self.nominated = nominated or {}
        self.client = client
        cfg = load_config(config, full_registry())
        self.fwk: Framework = build_frameworks(cfg.profiles, full_registry(), self.snap, client=client)[
            "custom-scheduler"
        ]
        handle = cast(SnapshotHandle, self.fwk.handle)
        handle.pdb_lister = lambda: list(pdbs)
        handle.nominated_lister = lambda node: list(self.nominated.get(node, ()))
        self.events: list[tuple[str, dict[str, Any]]] = []
        handle.event_sink = lambda pod, **kw: self.events.append((pod.key, kw))
        self.handle = handle
        self.seed = seed

    def node(self, name: str) -> NodeInfo:
        ni = self.snap.get(name)
        assert ni is not None
        return ni

    def preempt(self, pod: Pod) -> tuple[PostFilterResult, str]:
        """Schedule ``pod`` (which must not fit), run PostFilter; the result and the final FitError text."""
        state = CycleState(rng=random.Random(self.seed))
        with pytest.raises(FitError) as e:
            Algorithm(random.Random(0)).schedule(self.fwk, state, pod, self.snap, self.nominated)
        fit = e.value
        result = self.fwk.run_post_filter(state, pod, fit.statuses)
        if result.message:
            fit.post_filter_msg = result.message
        return result, str(fit)


# --- args ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("raw", "want"),
    [
        pytest.param(None, dp.DefaultPreemptionArgs(10, 100), id="defaults"),
        pytest.param({}, dp.DefaultPreemptionArgs(10, 100), id="empty"),
        pytest.param(
            {"minCandidateNodesPercentage": 0, "minCandidateNodesAbsolute": 5},
            dp.DefaultPreemptionArgs(0, 5),
            id="percentage-zero-ok",
        ),
        pytest.param(
            {"minCandidateNodesPercentage": 100, "minCandidateNodesAbsolute": 0},
            dp.DefaultPreemptionArgs(100, 0),
            id="absolute-zero-ok",
        ),
        pytest.param(
            {"kind": "DefaultPreemptionArgs", "apiVersion": "kubescheduler.config.k8s.io/v1"},
            dp.DefaultPreemptionArgs(),
            id="kind-and-apiversion-accepted",
        ),
    ],
)
def test_parse_args(raw: dict[str, Any] | None, want: dp.DefaultPreemptionArgs) -> None:
    assert dp.parse_args(raw, "args") == want


@pytest.mark.parametrize(
    ("raw", "want"),
    [
        pytest.param(
            {"minCandidateNodesPercentage": 101},
            ["args.minCandidateNodesPercentage: Invalid value: 101: not in valid range [0, 100]"],
            id="percentage-above-100",
        ),
        pytest.param(
            {"minCandidateNodesPercentage": -1},
            ["args.minCandidateNodesPercentage: Invalid value: -1: not in valid range [0, 100]"],
            id="percentage-negative",
        ),
        pytest.param(
            {"minCandidateNodesAbsolute": -1},
            ["args.minCandidateNodesAbsolute: Invalid value: -1: not in valid range [0, inf)"],
            id="absolute-negative",
        ),
        pytest.param(
            {"minCandidateNodesPercentage": 0, "minCandidateNodesAbsolute": 0},
            [
                "args.minCandidateNodesPercentage: Invalid value: 0: cannot be zero at the same time as "
                "minCandidateNodesAbsolute",
                "args.minCandidateNodesAbsolute: Invalid value: 0: cannot be zero at the same time as "
                "minCandidateNodesPercentage",
            ],
            id="both-zero",
        ),
        pytest.param(
            {"minCandidateNodesPercentage": "10"},
            ["args.minCandidateNodesPercentage: must be an integer, got str"],
            id="wrong-type",
        ),
        pytest.param(
            {"minCandidates": 1},
            [
                "args.minCandidates: unknown field "
                "(known fields: minCandidateNodesPercentage, minCandidateNodesAbsolute)"
            ],
            id="unknown-field",
        ),
    ],
)
def test_parse_args_errors(raw: dict[str, Any], want: list[str]) -> None:
    with pytest.raises(ConfigError) as e:
        dp.parse_args(raw, "args")
    assert [str(err) for err in e.value.errors] == want


def test_registered_and_enabled_by_default_with_config_args() -> None:
    cfg = load_config(
        DEFAULT
        + "profiles:\n- schedulerName: custom-scheduler\n  pluginConfig:\n  - name: DefaultPreemption\n"
        + "    args: {minCandidateNodesAbsolute: 3}\n",
        full_registry(),
    )
    prof = cfg.profiles[0]
    # Upstream's default profile: DynamicResources (deallocation) runs before preemption.
    assert [r.name for r in prof.plugins["postFilter"]] == ["DynamicResources", "DefaultPreemption"]
    assert prof.plugin_args["DefaultPreemption"] == dp.DefaultPreemptionArgs(10, 3)


@pytest.mark.parametrize(
    ("nodes", "pct", "absolute", "want"),
    [
        pytest.param(10, 10, 100, 10, id="small-cluster-all"),
        pytest.param(1000, 10, 100, 100, id="absolute-floor"),
        pytest.param(5000, 10, 100, 500, id="percentage-above-floor"),
        pytest.param(1000, 0, 5, 5, id="percentage-zero"),
        pytest.param(50, 100, 0, 50, id="absolute-zero"),
        pytest.param(7, 50, 0, 3, id="truncating-division"),
    ],
)
def test_num_candidates(nodes: int, pct: int, absolute: int, want: int) -> None:
    assert selection.num_candidates(nodes, pct, absolute) == want


# --- eligibility ---------------------------------------------------------------------------------


def _eligibility_env() -> Env:
    return Env(
        [make_node("n1"), make_node("n2")],
        [
            build(running("terminating-low", "n1", 1).terminating(), disruption_target=True),
            build(running("terminating-no-condition", "n2", 1).terminating()),
        ],
    )


@pytest.mark.parametrize(
    ("preemptor", "statuses", "want"),
    [
        pytest.param(make_pod().priority(10), {}, "", id="plain-pod-eligible"),
        pytest.param(
            make_pod().priority(10).preemption_policy("Never"), {}, dp.MSG_NOT_ELIGIBLE_NEVER, id="policy-never"
        ),
        pytest.param(
            make_pod().priority(10).preemption_policy("PreemptLowerPriority"), {}, "", id="policy-preempt-lower"
        ),
        pytest.param(
            make_pod().priority(10).nominated("n1"),
            {"n1": Status.unschedulable("Insufficient cpu")},
            dp.MSG_NOT_ELIGIBLE_TERMINATING,
            id="victim-still-terminating-on-nominated-node",
        ),
        pytest.param(
            make_pod().priority(10).nominated("n1"),
            {},
            dp.MSG_NOT_ELIGIBLE_TERMINATING,
            id="nominated-node-without-status",
        ),
        pytest.param(
            make_pod().priority(10).nominated("n1"),
            {"n1": Status.unresolvable("node(s) didn't match Pod's node affinity/selector")},
            "",
            id="nominated-node-now-unresolvable",
        ),
        pytest.param(
            make_pod().priority(1).nominated("n1"),
            {"n1": Status.unschedulable("Insufficient cpu")},
            "",
            id="terminating-pod-not-lower-priority",
        ),
        pytest.param(
            make_pod().priority(10).nominated("n2"),
            {"n2": Status.unschedulable("Insufficient cpu")},
            "",
            id="terminating-without-disruption-target",
        ),
        pytest.param(
            make_pod().priority(10).nominated("gone"),
            {},
            "",
            id="nominated-node-not-in-snapshot",
        ),
    ],
)
def test_eligibility(preemptor: PodBuilder, statuses: dict[str, Status], want: str) -> None:
    env = _eligibility_env()
    assert dp.eligibility(env.handle, preemptor.build(), statuses) == want


# --- victims on one node -------------------------------------------------------------------------


def _select(env: Env, pod: Pod, node: str, pdbs: Sequence[PodDisruptionBudget] = ()) -> tuple[Victims | None, Status]:
    state = CycleState()
    st = env.fwk.run_pre_filter(state, pod, env.snap.node_list)
    assert st.is_success
    return selection.select_victims_on_node(env.handle, state, pod, env.node(node).clone(), pdbs, now=1e10)


def _names(victims: Victims | None) -> list[str]:
    assert victims is not None
    return [p.name for p in victims.pods]


def test_only_strictly_lower_priority_pods_are_victims() -> None:
    env = Env(
        [make_node("n").capacity(cpu="2", memory="8Gi", pods="110")],
        [build(running("equal", "n", 10)), build(running("lower", "n", 9))],
    )
    victims, st = _select(env, make_pod("p").priority(10).req(cpu="1").build(), "n")
    assert st == SUCCESS
    assert _names(victims) == ["lower"]
    # Needing the whole node: the equal-priority pod stays, so the node cannot help.
    victims, st = _select(env, make_pod("p").priority(10).req(cpu="2").build(), "n")
    assert victims is None
    assert st.code is Code.UNSCHEDULABLE
    assert st.reasons == ("Insufficient cpu",)


def test_no_lower_priority_pod_means_no_victims() -> None:
    env = Env([make_node("n")], [build(running("high", "n", 100))])
    victims, st = _select(env, make_pod("p").priority(10).req(cpu="4").build(), "n")
    assert victims is None
    assert st == Status.unresolvable("No preemption victims found for incoming pod")


def test_reprieve_keeps_more_important_pods_and_evicts_the_fewest_needed() -> None:
    """Pods are added back most important first; a pod stays a victim only if it breaks the fit."""
    env = Env(
        [make_node("n").capacity(cpu="4", memory="8Gi", pods="110")],
        [
            build(running("p1", "n", 1, cpu="1")),
            build(running("p2", "n", 2, cpu="1")),
            build(running("p3", "n", 3, cpu="2")),
        ],
    )
    victims, st = _select(env, make_pod("p").priority(10).req(cpu="1").build(), "n")
    assert st.is_success
    assert _names(victims) == ["p1"]
    # Two cpus needed: p3 (most important) is reprieved first, so both p2 and p1 go.
    victims, _ = _select(env, make_pod("p").priority(10).req(cpu="2").build(), "n")
    assert _names(victims) == ["p2", "p1"]


def test_equal_priority_the_later_started_pod_is_evicted() -> None:
    env = Env(
        [make_node("n").capacity(cpu="2", memory="8Gi", pods="110")],
        [build(running("old", "n", 1, start=ts(1))), build(running("new", "n", 1, start=ts(30)))],
    )
    victims, _ = _select(env, make_pod("p").priority(10).req(cpu="1").build(), "n")
    assert _names(victims) == ["new"]


@pytest.mark.parametrize(
    ("pdbs", "cpu", "want_victims", "want_violations"),
    [
        pytest.param([], "1", ["new"], 0, id="no-pdb-later-started-goes"),
        pytest.param([pdb("b", 0, app="new")], "1", ["old"], 0, id="pdb-protected-pod-reprieved-first"),
        pytest.param([pdb("b", 1, app="new")], "1", ["new"], 0, id="pdb-with-room-changes-nothing"),
        pytest.param([pdb("b", 0, app="new")], "2", ["old", "new"], 1, id="violation-counted-victims-sorted"),
        pytest.param(
            [pdb("b", 0, app="new", disrupted=["new"])], "1", ["new"], 0, id="already-disrupted-pod-not-violating"
        ),
        pytest.param([pdb("b", 0, namespace="other", app="new")], "1", ["new"], 0, id="pdb-of-other-namespace"),
        pytest.param(
            [pdb_from_json({"metadata": {"name": "e", "namespace": "default"}, "spec": {"selector": {}}})],
            "1",
            ["new"],
            0,
            id="empty-selector-matches-nothing",
        ),
    ],
)
def test_pdb_aware_victim_selection(
    pdbs: list[PodDisruptionBudget], cpu: str, want_victims: list[str], want_violations: int
) -> None:
    env = Env(
        [make_node("n").capacity(cpu="2", memory="8Gi", pods="110")],
        [
            build(running("old", "n", 1, start=ts(1), app="old")),
            build(running("new", "n", 1, start=ts(30), app="new")),
        ],
    )
    victims, st = _select(env, make_pod("p").priority(10).req(cpu=cpu).build(), "n", pdbs)
    assert st.is_success
    assert _names(victims) == want_victims
    assert victims is not None
    assert victims.num_pdb_violations == want_violations


def test_split_by_pdb_violation_counts_cumulatively() -> None:
    pods = [build(running(f"w{i}", "n", 1, app="web")) for i in range(3)]
    violating, others = selection.split_by_pdb_violation(pods, [pdb("web", 2, app="web")])
    assert [p.name for p in violating] == ["w2"]
    assert [p.name for p in others] == ["w0", "w1"]
    unlabelled = build(make_pod("bare").node("n").priority(1))
    violating, others = selection.split_by_pdb_violation([unlabelled], [pdb("web", 0, app="web")])
    assert (violating, [p.name for p in others]) == ([], ["bare"])


class RecordingRunner:
    """A DryRunner over NodeResourcesFit-like cpu accounting that records extension calls."""

    def __init__(self, cpu_capacity: int) -> None:
        self.capacity = cpu_capacity
        self.calls: list[tuple[str, str]] = []

    def run_filter_with_nominated(self, state: CycleState, pod: Pod, node_info: NodeInfo) -> Status:
        self.calls.append(("filter", str(len(node_info.pods))))
        if node_info.requested.milli_cpu + pod.requests.milli_cpu <= self.capacity:
            return SUCCESS
        return Status.unschedulable("Insufficient cpu")

    def run_pre_filter_extension_add_pod(
        self, state: CycleState, pod: Pod, pod_to_add: Pod, node_info: NodeInfo
    ) -> Status:
        self.calls.append(("add", pod_to_add.name))
        return SUCCESS

    def run_pre_filter_extension_remove_pod(
        self, state: CycleState, pod: Pod, pod_to_remove: Pod, node_info: NodeInfo
    ) -> Status:
        self.calls.append(("remove", pod_to_remove.name))
        return SUCCESS

    def extensions_see_added_pods(self, state: CycleState) -> bool:
        return True  # every call recorded

    def requests_fit(self, state: CycleState, pod: Pod) -> RequestsFit | None:
        return None  # the dry run on the node: every call recorded


def test_prefilter_extensions_follow_every_removal_and_reprieve() -> None:
    ni = NodeInfo(make_node("n").build())
    ni.add_pod(build(running("a", "n", 2, cpu="1")))
    ni.add_pod(build(running("b", "n", 1, cpu="1")))
    runner = RecordingRunner(cpu_capacity=2000)
    victims, st = selection.select_victims_on_node(
        runner, CycleState(), make_pod("p").priority(5).req(cpu="1").build(), ni, (), now=0
    )
    assert st.is_success
    assert _names(victims) == ["b"]
    assert runner.calls == [
        ("remove", "a"),
        ("remove", "b"),
        ("filter", "0"),
        ("add", "a"),
        ("filter", "1"),
        ("add", "b"),
        ("filter", "2"),
        ("remove", "b"),
    ]


def test_no_extension_is_told_when_none_follows_the_pod() -> None:
    """With every PreFilter extension skipped for the pod, the dry run makes no calls to them (they
    would do nothing), and picks the same victims."""

    class Untold(RecordingRunner):
        def extensions_see_added_pods(self, state: CycleState) -> bool:
            return False

    ni = NodeInfo(make_node("n").build())
    ni.add_pod(build(running("a", "n", 2, cpu="1")))
    ni.add_pod(build(running("b", "n", 1, cpu="1")))
    runner = Untold(cpu_capacity=2000)
    victims, st = selection.select_victims_on_node(
        runner, CycleState(), make_pod("p").priority(5).req(cpu="1").build(), ni, (), now=0
    )
    assert st.is_success
    assert _names(victims) == ["b"]
    assert runner.calls == [("filter", "0"), ("filter", "1"), ("filter", "2")]


def test_prefilter_extension_failure_is_an_error() -> None:
    class Failing(RecordingRunner):
        def run_pre_filter_extension_remove_pod(
            self, state: CycleState, pod: Pod, pod_to_remove: Pod, node_info: NodeInfo
        ) -> Status:
            return Status.unschedulable("boom")

    ni = NodeInfo(make_node("n").build())
    ni.add_pod(build(running("a", "n", 1)))
    victims, st = selection.select_victims_on_node(
        Failing(4000), CycleState(), make_pod("p").priority(5).build(), ni, (), now=0
    )
    assert victims is None
    assert st.code is Code.ERROR
    assert st.message == "removing pod default/a from node n: boom"


def test_topology_spread_state_follows_the_dry_run() -> None:
    """Evicting a matching lower-priority pod lowers its domain's count (RemovePod extension):
    zone z1 holds 2 matching pods, z2 none, maxSkew 2, so one of the two must go."""
    env = Env(
        [make_node("a").label("zone", "z1"), make_node("b").label("zone", "z2")],
        [
            build(running("a1", "a", 1, cpu="100m", app="web")),
            build(running("a2", "a", 1, cpu="100m", app="web")),
            build(running("b-high", "b", 100, cpu="4")),
        ],
    )
    pod = (
        make_pod("p")
        .priority(10)
        .req(cpu="100m")
        .labels(app="web")
        .spread(2, "zone", selector={"matchLabels": {"app": "web"}})
        .build()
    )
    result, _ = env.preempt(pod)
    assert result.status.is_success
    assert result.nominated_node_name == "a"
    assert keys(result.victims) == ["default/a2"]


# --- dry run -------------------------------------------------------------------------------------


def _five_nodes() -> Env:
    nodes = [make_node(f"n{i}").capacity(cpu="1", memory="8Gi", pods="110") for i in range(5)]
    pods = [build(running(f"v{i}", f"n{i}", 1, app=f"g{i}")) for i in range(5)]
    return Env(nodes, pods)


def test_dry_run_starts_at_the_offset_and_stops_at_enough_candidates() -> None:
    env = _five_nodes()
    pod = make_pod("p").priority(10).req(cpu="1").build()
    state = CycleState()
    env.fwk.run_pre_filter(state, pod, env.snap.node_list)
    nodes = sorted(env.snap.node_list, key=lambda n: n.name)
    cands, statuses = selection.dry_run_preemption(env.handle, state, pod, nodes, [], 3, 2)
    assert [c.node for c in cands] == ["n3", "n4"]
    assert statuses == {}
    cands, _ = selection.dry_run_preemption(env.handle, state, pod, nodes, [], 4, 3)
    assert [c.node for c in cands] == ["n4", "n0", "n1"]


def test_dry_run_keeps_looking_for_a_pdb_clean_candidate() -> None:
    env = _five_nodes()
    pod = make_pod("p").priority(10).req(cpu="1").build()
    state = CycleState()
    env.fwk.run_pre_filter(state, pod, env.snap.node_list)
    nodes = sorted(env.snap.node_list, key=lambda n: n.name)
    pdbs = [pdb("g0", 0, app="g0"), pdb("g1", 0, app="g1")]
    cands, _ = selection.dry_run_preemption(env.handle, state, pod, nodes, pdbs, 0, 1)
    # n0 violates (kept, capped at 1 per group), n1 violates (dropped), n2 is clean: stop. Clean first.
    assert [(c.node, c.victims.num_pdb_violations) for c in cands] == [("n2", 0), ("n0", 1)]


def test_dry_run_leaves_the_snapshot_untouched() -> None:
    env = _five_nodes()
    before = {ni.name: (sorted(ni.pods), ni.requested.milli_cpu) for ni in env.snap.node_list}
    result, _ = env.preempt(make_pod("p").priority(10).req(cpu="1").build())
    assert result.status.is_success
    assert {ni.name: (sorted(ni.pods), ni.requested.milli_cpu) for ni in env.snap.node_list} == before


# --- choosing the node ---------------------------------------------------------------------------


def _cand(node: str, *victims: tuple[int, int], violations: int = 0) -> Candidate:
    """A candidate whose victims are (priority, start minute) pairs, most important first."""
    pods = tuple(
        build(make_pod(f"{node}-{i}").priority(prio).start_time(ts(minute))) for i, (prio, minute) in enumerate(victims)
    )
    return Candidate(node, Victims(pods, violations))


MIN_INT32 = -(2**31)


@pytest.mark.parametrize(
    ("candidates", "want"),
    [
        pytest.param([_cand("a", (1, 0), violations=1), _cand("b", (5, 0))], "b", id="1-fewest-pdb-violations"),
        pytest.param([_cand("a", (5, 0)), _cand("b", (3, 0), (3, 0))], "b", id="2-lowest-highest-priority-victim"),
        pytest.param([_cand("a", (5, 0), (4, 0)), _cand("b", (5, 0), (1, 0))], "b", id="3-smallest-sum-of-priorities"),
        pytest.param(
            [_cand("a", (-5, 0), (-5, 0)), _cand("b", (-5, 0))],
            "b",
            id="3-sum-offset-makes-negative-priorities-add-up",
        ),
        pytest.param([_cand("a", (7, 0), (MIN_INT32, 0)), _cand("b", (7, 0))], "b", id="4-fewest-victims-on-equal-sum"),
        pytest.param(
            [_cand("a", (5, 10), (5, 40)), _cand("b", (5, 20), (5, 30))],
            "b",
            id="5-latest-earliest-start-of-top-victims",
        ),
        pytest.param(
            [_cand("a", (5, 30), (1, 0)), _cand("b", (5, 20), (1, 50))],
            "a",
            id="5-only-highest-priority-victims-count",
        ),
        pytest.param([_cand("a", (5, 0)), _cand("b", (5, 0)), _cand("c", (5, 0))], "a", id="6-first-remaining"),
        pytest.param([_cand("only", (1, 0))], "only", id="single"),
    ],
)
def test_pick_one_node(candidates: list[Candidate], want: str) -> None:
    chosen = selection.pick_one_node(candidates, now=1e10)
    assert chosen is not None
    assert chosen.node == want


def test_pick_one_node_of_nothing() -> None:
    assert selection.pick_one_node([]) is None


# --- post_filter end to end ----------------------------------------------------------------------


def _two_node_env(client: FakeClient | None = None, **kw: Any) -> Env:
    """n-low holds pods of priority 1 and 2, n-mid one of priority 5; the preemptor needs 2 cpus."""
    return Env(
        [
            make_node("n-low").capacity(cpu="2", memory="8Gi", pods="110"),
            make_node("n-mid").capacity(cpu="2", memory="8Gi", pods="110"),
        ],
        [
            build(running("low-1", "n-low", 1)),
            build(running("low-2", "n-low", 2)),
            build(running("mid", "n-mid", 5, cpu="2")),
        ],
        client=client,
        **kw,
    )


@pytest.mark.parametrize("with_client", [True, False], ids=["daemon", "offline"])
def test_preemption_decides_node_victims_and_lost_nominations_and_writes_nothing(with_client: bool) -> None:
    """The decision is the same with or without a client, and the plugin sends nothing either way:
    evicting and clearing nominations are the evictor's (tests/unit/framework/test_evictor.py)."""
    client = FakeClient() if with_client else None
    lower = make_pod("waiting-low").priority(3).req(cpu="1").build()
    higher = make_pod("waiting-high").priority(50).build()  # no requests: does not block n-low
    env = _two_node_env(client, nominated={"n-low": [lower, higher]})
    preemptor = make_pod("vip").priority(10).req(cpu="2").scheduler("custom-scheduler").build()
    result, message = env.preempt(preemptor)

    assert result.status == SUCCESS
    assert result.nominated_node_name == "n-low"
    assert result.message == ""
    assert message == "0/2 nodes are available: 2 Insufficient cpu."
    # Most important victim first; the objects are the snapshot's (uid preconditions need them).
    assert keys(result.victims) == ["default/low-2", "default/low-1"]
    assert [v.uid for v in result.victims] == ["uid-low-2", "uid-low-1"]
    assert result.num_pdb_violations == 0
    # The lower-priority pod nominated to n-low loses its nomination; the higher one keeps it.
    assert [p.uid for p in result.cleared_nominations] == [lower.uid]
    assert env.events == []
    if client is not None:
        assert client.calls == []


def test_the_preemptor_itself_is_never_a_cleared_nomination() -> None:
    """A preemptor already nominated to the chosen node keeps its nomination (it is re-recorded,
    not cleared), even though it is in the nominator's list for that node."""
    preemptor = make_pod("vip").priority(10).req(cpu="2").nominated("n-low").build()
    lower = make_pod("waiting-low").priority(3).req(cpu="1").build()
    env = _two_node_env(nominated={"n-low": [preemptor, lower]})
    result, _ = env.preempt(preemptor)
    assert result.nominated_node_name == "n-low"
    assert [p.uid for p in result.cleared_nominations] == [lower.uid]


@pytest.mark.parametrize(
    ("env_factory", "pod", "want"),
    [
        pytest.param(
            _two_node_env,
            make_pod("p").priority(1).req(cpu="2"),
            "0/2 nodes are available: 2 Insufficient cpu. "
            "preemption: 0/2 nodes are available: 2 No preemption victims found for incoming pod.",
            id="no-lower-priority-pods",
        ),
        pytest.param(
            _two_node_env,
            make_pod("p").priority(10).req(cpu="3"),
            # More than the nodes can allocate at all: NodeResourcesFit says UnschedulableAndUnresolvable
            # (v1.34+), so preemption does not even try them.
            "0/2 nodes are available: 2 Insufficient cpu. "
            "preemption: 0/2 nodes are available: 2 Preemption is not helpful for scheduling.",
            id="too-big-even-for-an-empty-node",
        ),
        pytest.param(
            _two_node_env,
            make_pod("p").priority(10).req(cpu="2").preemption_policy("Never"),
            "0/2 nodes are available: 2 Insufficient cpu. preemption: not eligible due to preemptionPolicy=Never.",
            id="policy-never",
        ),
        pytest.param(
            lambda: Env(
                [
                    make_node("small").capacity(cpu="1", memory="8Gi", pods="110"),
                    make_node("tainted").taint("dedicated", "gpu"),
                    make_node("busy").capacity(cpu="2", memory="8Gi", pods="110"),
                ],
                [build(running("tiny", "small", 1, cpu="500m")), build(running("high", "busy", 100, cpu="2"))],
            ),
            make_pod("p").priority(10).req(cpu="2"),
            # "small" (1 cpu) cannot hold 2 cpu even empty: Unresolvable, so not tried, like the taint.
            "0/3 nodes are available: 1 node(s) had untolerated taint(s), 2 Insufficient cpu. "
            "preemption: 0/3 nodes are available: 1 No preemption victims found for incoming "
            "pod, 2 Preemption is not helpful for scheduling.",
            id="mixed-reasons",
        ),
        pytest.param(
            lambda: Env([make_node("tainted").taint("dedicated", "gpu")]),
            make_pod("p").priority(10),
            "0/1 nodes are available: 1 node(s) had untolerated taint(s). "
            "preemption: 0/1 nodes are available: 1 Preemption is not helpful for scheduling.",
            id="no-candidate-nodes",
        ),
    ],
)
def test_failure_messages(env_factory: Any, pod: PodBuilder, want: str) -> None:
    env = env_factory()
    result, message = env.preempt(pod.build())
    assert result.status.code is Code.UNSCHEDULABLE
    assert result.nominated_node_name == ""
    assert message == want
    assert (result.victims, result.cleared_nominations, result.num_pdb_violations) == ((), (), 0)


def test_waiting_on_terminating_victims_keeps_the_nomination() -> None:
    client = FakeClient()
    env = Env(
        [make_node("n").capacity(cpu="2", memory="8Gi", pods="110")],
        [build(running("going", "n", 1, cpu="2").terminating(), disruption_target=True)],
        client=client,
    )
    result, message = env.preempt(make_pod("vip").priority(10).req(cpu="2").nominated("n").build())
    assert result.status.code is Code.UNSCHEDULABLE
    assert message == (
        "0/1 nodes are available: 1 Insufficient cpu. "
        "preemption: not eligible due to a terminating pod on the nominated node."
    )
    assert (result.nominated_node_name, result.victims, result.cleared_nominations) == ("", (), ())
    assert client.calls == []


def test_a_nominated_pod_that_cannot_preempt_gets_an_unschedulable_result() -> None:
    """The plugin's part of dropping a nomination that cannot work: an unschedulable result with no
    node and nothing written. The scheduling cycle then drops the nomination and the evictor nulls
    it in the API (``test_evictor.py``: clearing a nomination)."""
    client = FakeClient()
    env = Env([make_node("n").capacity(cpu="1", memory="8Gi", pods="110")], client=client)
    pod = make_pod("vip").priority(10).req(cpu="2").nominated("n").build()
    result, message = env.preempt(pod)
    assert result.status.code is Code.UNSCHEDULABLE
    assert (result.nominated_node_name, result.victims, result.cleared_nominations) == ("", (), ())
    assert message == (
        "0/1 nodes are available: 1 Insufficient cpu. "
        "preemption: 0/1 nodes are available: 1 Preemption is not helpful for scheduling."
    )
    assert client.calls == []


def test_victims_already_terminating_are_still_victims() -> None:
    """A terminating lower-priority pod still holds its resources, so the dry run counts it among
    the victims; the evictor is the one that sends it no second request (``test_evictor.py``)."""
    env = Env(
        [make_node("n").capacity(cpu="2", memory="8Gi", pods="110")],
        [build(running("going", "n", 1).terminating()), build(running("staying", "n", 1, start=ts(5)))],
    )
    result, _ = env.preempt(make_pod("vip").priority(10).req(cpu="2").build())
    assert result.nominated_node_name == "n"
    assert sorted(keys(result.victims)) == ["default/going", "default/staying"]
    assert [v.deleting for v in sorted(result.victims, key=lambda v: v.name)] == [True, False]


def test_pdb_clean_node_is_preferred_end_to_end() -> None:
    env = Env(
        [
            make_node("guarded").capacity(cpu="1", memory="8Gi", pods="110"),
            make_node("free").capacity(cpu="1", memory="8Gi", pods="110"),
        ],
        [
            build(running("db", "guarded", 1, app="db")),
            build(running("batch", "free", 5, app="batch")),
        ],
        pdbs=[pdb("db", 0, app="db")],
    )
    result, _ = env.preempt(make_pod("vip").priority(10).req(cpu="1").build())
    # "free" has the higher-priority victim, but evicting from "guarded" would violate the PDB.
    assert result.nominated_node_name == "free"
    assert (keys(result.victims), result.num_pdb_violations) == (["default/batch"], 0)


def test_pdb_violation_is_reported_when_unavoidable() -> None:
    env = Env(
        [make_node("guarded").capacity(cpu="1", memory="8Gi", pods="110")],
        [build(running("db", "guarded", 1, app="db"))],
        pdbs=[pdb("db", 0, app="db")],
    )
    result, _ = env.preempt(make_pod("vip").priority(10).req(cpu="1").build())
    assert result.nominated_node_name == "guarded"
    assert (keys(result.victims), result.num_pdb_violations) == (["default/db"], 1)


def _four_tied_nodes(seed: int) -> Env:
    """Four identical candidates and one wanted: only the random offset picks the node."""
    return Env(
        [make_node(f"n{i}").capacity(cpu="1", memory="8Gi", pods="110") for i in range(4)],
        [build(running(f"v{i}", f"n{i}", 1)) for i in range(4)],
        config=DEFAULT
        + "profiles:\n- schedulerName: custom-scheduler\n  pluginConfig:\n  - name: DefaultPreemption\n"
        + "    args: {minCandidateNodesPercentage: 0, minCandidateNodesAbsolute: 1}\n",
        seed=seed,
    )


def test_random_offset_comes_from_the_cycle_state_rng() -> None:
    pod = make_pod("vip").priority(10).req(cpu="1").build()
    chosen = {seed: _four_tied_nodes(seed).preempt(pod)[0].nominated_node_name for seed in range(20)}
    # All candidates tie; with one candidate wanted, the offset decides: different seeds reach
    # different nodes, and the same seed the same node (a seeded explain/simulate reproduces it).
    assert len(set(chosen.values())) > 1
    assert all(_four_tied_nodes(seed).preempt(pod)[0].nominated_node_name == chosen[seed] for seed in (0, 7, 13))


@pytest.mark.parametrize(
    ("uid", "code", "reasons"),
    [
        pytest.param("running", Code.UNSCHEDULABLE_AND_UNRESOLVABLE, (dp.WAITING_FOR_PREEMPTION,), id="held-back"),
        pytest.param("other", Code.SUCCESS, (), id="passes"),
    ],
)
def test_pre_enqueue_holds_a_pod_back_while_its_own_preemption_runs(uid: str, code: Code, reasons: tuple[str]) -> None:
    """Upstream's PreEnqueue with asynchronous preemption: only the preemptor whose victims are
    still being evicted waits; the evictor's completion releases it."""
    handle = SnapshotHandle(Snapshot(), profile_name="p", preempting=lambda u: u == "running")
    st = dp.DefaultPreemption(None, handle).pre_enqueue(make_pod("x").uid(uid).build())
    assert (st.code, st.reasons) == (code, reasons)
    assert st.plugin == (dp.NAME if reasons else "")
