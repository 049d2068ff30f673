"""simulate and explain with gangs (issue #16): all-or-nothing placement, the barrier, the groups
section, PodGroups in snapshot files and from a live cluster, the explain note."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from custom_scheduler import config
from custom_scheduler.api import podgroup as gang
from custom_scheduler.framework.registry import Registry
from custom_scheduler.kube import api_errors as kerrors
from custom_scheduler.plugins.gang_scheduling import ERR_REASON_TOO_FEW, no_group_message
from custom_scheduler.tools import main, report, snapshot
from custom_scheduler.tools.explain import explain_pod, format_explanation
from custom_scheduler.tools.simulate import format_result, simulate
from custom_scheduler.tools.simulation_result import SimulationResult
from tests.builders import PodBuilder, PodGroupBuilder, make_crd_pod_group, make_node, make_pod, make_pod_group

GANG_CONFIG_TEXT = snapshot.DEFAULT_CONFIG_TEXT + (
    "profiles:\n- schedulerName: custom-scheduler\n  plugins: {multiPoint: {enabled: [{name: GangScheduling}]}}\n"
)
APIS = [pytest.param("native", id="native-podgroup"), pytest.param("crd", id="scheduler-plugins-crd")]
API_VERSION = {"native": gang.NATIVE_GROUP_VERSION, "crd": gang.CRD_GROUP_VERSION}


@pytest.fixture(scope="module")
def gang_config(registry: Registry) -> config.SchedulerConfig:
    return config.load_config(GANG_CONFIG_TEXT, registry)


def group(api: str, name: str, min_count: int) -> PodGroupBuilder:
    return make_crd_pod_group(name, min_member=min_count) if api == "crd" else make_pod_group(name, min_count=min_count)


def member(api: str, name: str, group_name: str, cpu: str = "1") -> PodBuilder:
    b = make_pod(name).req(cpu=cpu)
    return b.pod_group_label(group_name) if api == "crd" else b.scheduling_group(group_name)


def state_of(*groups: PodGroupBuilder, cpu: str = "3", pods: tuple[PodBuilder, ...] = ()) -> snapshot.ClusterState:
    return snapshot.ClusterState(
        nodes=[make_node("n1").capacity(cpu=cpu, memory="8Gi", pods="20").obj()],
        pods=[p.obj() for p in pods],
        pod_groups=[g.obj() for g in groups],
        source="test",
    )


def run(state: snapshot.ClusterState, pods: list[PodBuilder], cfg: Any, reg: Registry) -> SimulationResult:
    return simulate(state, [p.obj() for p in pods], cfg, reg, seed=7)


def results(res: SimulationResult) -> dict[str, tuple[str, str]]:
    return {o.pod: (o.result, o.message) for o in res.outcomes}


# -- all or nothing ---------------------------------------------------------------------------------


@pytest.mark.parametrize("api", APIS)
def test_two_gangs_that_fit_alone_but_not_together(
    api: str, gang_config: config.SchedulerConfig, registry: Registry
) -> None:
    """3 CPUs, two gangs of 2 x 1 CPU: the first is placed whole, the second not at all (it
    would fit half): every member of it is unschedulable with the group's message."""
    state = state_of(group(api, "a", 2), group(api, "b", 2))
    pods = [member(api, f"{g}{i}", g) for g in "ab" for i in range(2)]
    res = run(state, pods, gang_config, registry)
    assert res.placement_map() == {"default/a0": "n1", "default/a1": "n1"}
    got = results(res)
    message = got["default/b0"][1]
    assert message.startswith("pod group default/b is unschedulable: minCount (2) cannot be satisfied")
    assert "Insufficient cpu" in message
    assert got["default/b0"] == got["default/b1"] == ("unschedulable", message)
    assert [o.attempts for o in res.outcomes] == [1, 1, 1, 1]
    groups = {g.key: g for g in res.groups}
    assert (groups["default/a"].result, groups["default/a"].placed, groups["default/a"].message) == (
        "scheduled",
        2,
        "",
    )
    assert (groups["default/b"].result, groups["default/b"].placed, groups["default/b"].message) == (
        "unschedulable",
        0,
        message,
    )
    # Nothing of the second gang holds room: one CPU is still free.
    assert res.after[0].cpu.requested == 2000


@pytest.mark.parametrize(
    ("groups", "pods", "want"),
    [
        pytest.param(
            (),
            [member("native", f"m{i}", "missing") for i in range(2)],
            ("gated", None, no_group_message("missing")),
            id="podgroup-missing",
        ),
        pytest.param(
            (make_crd_pod_group("few", min_member=3),),
            [member("crd", f"m{i}", "few") for i in range(2)],
            ("gated", 3, ERR_REASON_TOO_FEW),
            id="fewer-members-than-minCount",
        ),
        pytest.param(
            (make_pod_group("one", min_count=3),),
            [member("native", "m0", "one"), member("native", "m1", "one").gates("example.com/hold")],
            ("waiting", 3, "minCount (3) is not yet satisfied: 2 scheduled, 1 remaining"),
            id="short-of-minCount-with-a-member-to-come",
        ),
    ],
)
def test_group_outcomes(
    groups: tuple[PodGroupBuilder, ...],
    pods: list[PodBuilder],
    want: tuple[str, int | None, str],
    gang_config: config.SchedulerConfig,
    registry: Registry,
) -> None:
    """The barrier gates every member (with GangScheduling's message); a gang placed short of
    minCount while a member may still come waits at Permit when the simulation ends. The third
    case has one member bound in the snapshot already: it counts towards the quorum."""
    bound = member("native", "m-bound", "one").node("n1")
    state = state_of(*groups, cpu="8", pods=(bound,))
    res = run(state, pods, gang_config, registry)
    (g,) = res.groups
    assert (g.result, g.min_count, g.message) == want
    assert g.pods == [f"default/m{i}" for i in range(len(pods))]
    got = results(res)
    if want[0] == "gated":
        assert all(got[p] == ("gated", want[2]) for p in g.pods)
        assert res.placements == []
    else:
        assert got["default/m0"] == ("waiting", "waiting at Permit (GangScheduling) when the simulation ended")
        assert got["default/m1"] == ("gated", "waiting for scheduling gates: [example.com/hold]")
        assert (g.members, g.placed) == (3, 1)
        assert res.to_dict()["waitingPods"] == [{"pod": "default/m0", "node": "n1", "message": got["default/m0"][1]}]


def test_without_gang_scheduling_members_go_one_by_one(registry: Registry) -> None:
    """A profile that disables GangScheduling (the default profile has it, as upstream's with
    GenericWorkload): half a gang is placed, and a note says why."""
    no_gangs = config.load_config(
        "apiVersion: kubescheduler.config.k8s.io/v1\nkind: KubeSchedulerConfiguration\n"
        "profiles: [{schedulerName: custom-scheduler, plugins: {multiPoint: {disabled: [{name: GangScheduling}]}}}]\n",
        registry,
    )
    state = state_of(make_pod_group("a", min_count=2), cpu="1")
    res = run(state, [member("native", f"a{i}", "a") for i in range(2)], no_gangs, registry)
    assert [o.result for o in res.outcomes] == ["scheduled", "unschedulable"]
    assert any("does not enable GangScheduling" in n for n in res.notes)
    assert res.groups[0].result == "unschedulable"
    assert res.groups[0].message.startswith("0/1 nodes are available: 1 Insufficient cpu.")


# -- output -----------------------------------------------------------------------------------------


def test_groups_section_in_every_output(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], gang_config: config.SchedulerConfig, registry: Registry
) -> None:
    state = state_of(make_pod_group("a", min_count=2), make_crd_pod_group("b", min_member=2))
    pods = [member("native", f"a{i}", "a") for i in range(2)] + [member("crd", f"b{i}", "b") for i in range(2)]
    res = run(state, pods, gang_config, registry)
    d = json.loads(format_result(res, "json"))
    assert [(g["key"], g["api"], g["minCount"], g["result"], g["placed"], g["members"]) for g in d["groups"]] == [
        ("default/a", gang.NATIVE_GROUP_VERSION, 2, "scheduled", 2, 2),
        ("default/b", gang.CRD_GROUP_VERSION, 2, "unschedulable", 0, 2),
    ]
    assert d["groups"][1]["message"] == d["unschedulablePods"][0]["message"]
    assert yaml.safe_load(format_result(res, "yaml")) == d
    text = format_result(res, "table")
    flat = " ".join(text.split())
    assert f"default/a {gang.NATIVE_GROUP_VERSION} 2 2/2 scheduled" in flat
    assert f"default/b {gang.CRD_GROUP_VERSION} 2 0/2 unschedulable" in flat
    assert "0/2 unschedulable default/b pod group default/b is unschedulable" in flat
    assert max(len(line) for line in text.splitlines()) <= 100
    assert "<h2>Pod groups</h2>" in report.simulation_html(d)

    # The CLI, from files: the snapshot carries the PodGroups, the pods file the members.
    cluster, pods_file = tmp_path / "cluster.yaml", tmp_path / "pods.yaml"
    cluster.write_text(snapshot.dump_yaml({"nodes": state.nodes, "podGroups": state.pod_groups}))
    pods_file.write_text(yaml.safe_dump_all([p.obj() for p in pods]))
    cfg = tmp_path / "config.yaml"
    cfg.write_text(GANG_CONFIG_TEXT)
    argv = ["simulate", "--cluster", str(cluster), "--pods", str(pods_file), "--config", str(cfg), "-o", "json"]
    capsys.readouterr()  # the log lines of the run above
    assert main([*argv, "--seed", "7"]) == 0
    assert json.loads(capsys.readouterr().out)["groups"] == d["groups"]


# -- PodGroups in the cluster state -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("doc", "api", "min_count"),
    [
        pytest.param(make_pod_group("g", min_count=4).obj(), gang.NATIVE, 4, id="native"),
        pytest.param(make_crd_pod_group("g", min_member=2).obj(), gang.CRD, 2, id="crd"),
        pytest.param(
            {k: v for k, v in make_pod_group("g", min_count=3).obj().items() if k != "apiVersion"},
            gang.NATIVE,
            3,
            id="native-without-apiVersion",
        ),
        pytest.param(
            {k: v for k, v in make_crd_pod_group("g", min_member=5).obj().items() if k != "apiVersion"},
            gang.CRD,
            5,
            id="crd-without-apiVersion",
        ),
    ],
)
def test_snapshot_files_carry_both_apis(tmp_path: Path, doc: dict[str, Any], api: gang.Api, min_count: int) -> None:
    path = tmp_path / "cluster.yaml"
    path.write_text(yaml.safe_dump_all([make_node("n1").obj(), doc]))
    state = snapshot.load_cluster(str(path))
    m = member("crd" if api == gang.CRD else "native", "m", "g")
    store = state.gang_store([snapshot.to_pod(m.obj())])
    (pg,) = store.groups()
    assert (pg.api, pg.key, pg.min_count) == (api, "default/g", min_count)
    assert store.member_count(pg) == 1
    # And written back by `snapshot`, managedFields stripped.
    state.pod_groups[0]["metadata"]["managedFields"] = [{"manager": "x"}]
    out = snapshot.snapshot_document(state)["podGroups"]
    assert [o["metadata"]["name"] for o in out] == ["g"]
    assert "managedFields" not in out[0]["metadata"]


def test_a_malformed_podgroup_in_a_file_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "cluster.yaml"
    bad = make_pod_group("g").set("spec.schedulingPolicy.gang.minCount", 0).obj()
    path.write_text(yaml.safe_dump_all([make_node("n1").obj(), bad]))
    with pytest.raises(snapshot.ToolError, match=r"podgroup default/g: spec\.schedulingPolicy\.gang\.minCount"):
        snapshot.load_cluster(str(path))


def test_gang_store_members_are_counted_once() -> None:
    """The tool's own copy of a pod replaces the state's (same UID, or same name without one);
    simulate leaves the state's pending pods out."""
    bound = member("native", "bound", "g").uid("u-bound").node("n1")
    pending = member("native", "pending", "g").uid("u-pending")
    state = state_of(make_pod_group("g", min_count=3), pods=(bound, pending))
    store = state.gang_store([snapshot.to_pod(member("native", "pending", "g").obj())])
    (pg,) = store.groups()
    assert sorted(p.name for p in store.members(pg)) == ["bound", "pending"]
    assert store.placed(pg) == frozenset({"u-bound"})
    assert [p.name for p in state.gang_store(pending=False).members(pg)] == ["bound"]


class _Client:
    """The LIST answers of a cluster: ``served`` maps a path to its items or an exception."""

    host = "fake"

    def __init__(self, served: dict[str, Any]) -> None:
        self.served = served

    def get(self, path: str, query: Any = None, timeout: Any = None) -> dict[str, Any]:
        got = self.served.get(path, [])
        if isinstance(got, Exception):
            raise got
        return {"items": [dict(o) for o in got], "metadata": {}}


def _items(b: PodGroupBuilder) -> dict[str, Any]:
    """A LIST item: the API server leaves kind and apiVersion out of built-in lists' items."""
    return {k: v for k, v in b.obj().items() if k not in ("kind", "apiVersion")}


@pytest.mark.parametrize(
    ("native", "crd", "keys", "warnings"),
    [
        pytest.param(
            [_items(make_pod_group("n", min_count=2))],
            [make_crd_pod_group("c", min_member=3).obj()],
            [(gang.NATIVE, "default/n"), (gang.CRD, "default/c")],
            [],
            id="both-served",
        ),
        pytest.param(
            kerrors.NotFound(404, "the server could not find the requested resource"),
            kerrors.NotFound(404, "the server could not find the requested resource"),
            [],
            [],
            id="neither-served-is-fine",
        ),
        pytest.param(
            [_items(make_pod_group("bad").set("spec.schedulingPolicy", {}))],
            kerrors.ApiError(403, "forbidden"),
            [],
            ["skipped a malformed scheduling.k8s.io/v1beta1 podgroup", "cannot list scheduling.x-k8s.io/v1alpha1"],
            id="malformed-and-forbidden-are-warnings",
        ),
    ],
)
def test_live_podgroups(
    native: list[dict[str, Any]] | Exception,
    crd: list[dict[str, Any]] | Exception,
    keys: list[tuple[gang.Api, str]],
    warnings: list[str],
) -> None:
    state = snapshot.fetch_live(_Client({gang.NATIVE_PATH: native, gang.CRD_PATH: crd}))
    assert [(pg.api, pg.key) for pg in state.gang_store().groups()] == keys
    got = [w for w in state.warnings if "podgroup" in w]
    assert len(got) == len(warnings)
    for w, want in zip(got, warnings, strict=True):
        assert w.startswith(want), w


# -- explain ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("groups", "others", "want", "text"),
    [
        pytest.param(
            (make_pod_group("g", min_count=3),),
            2,
            {"minCount": 3, "members": 3, "placed": 1, "heldByBarrier": False, "barrierMessage": ""},
            "Gang: pod group default/g (scheduling.k8s.io/v1beta1), minCount 3: 3 members exist, 1 placed; "
            "the barrier lets it in.",
            id="enough-members",
        ),
        pytest.param(
            (make_pod_group("g", min_count=5),),
            2,
            {"minCount": 5, "members": 3, "placed": 1, "heldByBarrier": True, "barrierMessage": ERR_REASON_TOO_FEW},
            "Gang: pod group default/g (scheduling.k8s.io/v1beta1), minCount 5: 3 members exist, 1 placed; "
            "the PreEnqueue barrier holds the pod.",
            id="too-few-members",
        ),
        pytest.param(
            (),
            0,
            {
                "minCount": None,
                "members": 0,
                "placed": 0,
                "heldByBarrier": True,
                "barrierMessage": no_group_message("g"),
            },
            "Gang: pod group default/g (scheduling.k8s.io/v1beta1) does not exist; the PreEnqueue barrier "
            "holds the pod.",
            id="no-podgroup",
        ),
    ],
)
def test_explain_notes_the_gang(
    groups: tuple[PodGroupBuilder, ...],
    others: int,
    want: dict[str, Any],
    text: str,
    gang_config: config.SchedulerConfig,
    registry: Registry,
) -> None:
    """``others`` members besides the explained one: the first bound, the rest pending."""
    pods = [
        member("native", f"o{i}", "g").node("n1") if i == 0 else member("native", f"o{i}", "g") for i in range(others)
    ]
    state = state_of(*groups, cpu="8", pods=tuple(pods))
    ex = explain_pod(state, member("native", "me", "g").obj(), gang_config, registry, seed=1)
    d = ex.to_dict()
    assert {k: d["gang"][k] for k in want} == want
    assert d["gang"]["key"] == "default/g"
    assert d["gang"]["gangScheduling"] is True
    assert (d["gated"] is not None) == want["heldByBarrier"]
    flat = " ".join(format_explanation(ex, "table").split())
    assert text in flat
    if want["heldByBarrier"]:
        assert d["gated"]["plugin"] == "GangScheduling"
        assert "until its PodGroup exists and has minCount members" in flat
    else:
        assert ex.node == "n1"


def test_explain_of_a_pod_without_a_group_has_no_gang_note(
    gang_config: config.SchedulerConfig, registry: Registry
) -> None:
    ex = explain_pod(state_of(), make_pod("alone").obj(), gang_config, registry)
    assert ex.to_dict()["gang"] is None
    assert "Gang:" not in format_explanation(ex, "table")
