"""The decision pipeline: node sampling, selection, FitError messages, runtime error handling."""

from __future__ import annotations

import random
from typing import Any, ClassVar

import hypothesis.strategies as st
import pytest
from hypothesis import given

from custom_scheduler.api.model import Pod
from custom_scheduler.config import load_config
from custom_scheduler.core.algorithm import Algorithm, num_feasible_nodes_to_find
from custom_scheduler.core.cache import Cache
from custom_scheduler.framework.profiles import build_frameworks
from custom_scheduler.framework.registry import PluginSpec, Registry
from custom_scheduler.framework.runtime import Framework, FrameworkError, ScoredNode
from custom_scheduler.framework.types import Code, CycleState, FitError, NodeInfo, Snapshot, Status
from custom_scheduler.plugins.builtin import full_registry
from tests.builders import make_node, make_pod

DEFAULT = "apiVersion: kubescheduler.config.k8s.io/v1\nkind: KubeSchedulerConfiguration\n"


@pytest.mark.parametrize(
    ("nodes", "pct", "want"),
    [
        pytest.param(50, 0, 50, id="small cluster: all nodes"),
        pytest.param(99, 0, 99, id="just below the minimum"),
        pytest.param(500, 0, 230, id="500 nodes: 46%"),
        pytest.param(1000, 0, 420, id="1000 nodes: 42%"),
        pytest.param(3000, 0, 780, id="3000 nodes: 26%"),
        pytest.param(5000, 0, 500, id="5000 nodes: 10%"),
        pytest.param(10000, 0, 500, id="floor at 5%"),
        pytest.param(1000, 100, 1000, id="100% means all"),
        pytest.param(1000, 5, 100, id="never fewer than 100"),
        pytest.param(1000, 30, 300, id="configured percentage"),
    ],
)
def test_num_feasible_nodes_to_find(nodes: int, pct: int, want: int) -> None:
    assert num_feasible_nodes_to_find(nodes, pct) == want


@given(st.lists(st.integers(0, 1200), min_size=1, max_size=30), st.integers(0, 2**32))
def test_select_returns_a_top_scoring_node(totals: list[int], seed: int) -> None:
    scored = [ScoredNode(f"n{i}", t) for i, t in enumerate(totals)]
    chosen = Algorithm(random.Random(seed)).select(scored)
    assert next(s.total for s in scored if s.name == chosen) == max(totals)


@given(st.lists(st.integers(0, 50), min_size=1, max_size=30), st.integers(0, 2**32))
def test_fast_path_selects_exactly_like_the_detailed_path(totals: list[int], seed: int) -> None:
    """select_index (totals only) makes the same random draws and choice as select (ScoredNodes)."""
    scored = [ScoredNode(f"n{i}", t) for i, t in enumerate(totals)]
    assert f"n{Algorithm(random.Random(seed)).select_index(totals)}" == Algorithm(random.Random(seed)).select(scored)


def test_score_totals_equal_the_detailed_totals() -> None:
    fwk, snap = _setup(
        *(make_node(f"n{i}").capacity(cpu=str(2 + i), memory=f"{4 + i}Gi", pods="20") for i in range(6)),
        pods=[make_pod(f"e{i}").req(cpu=f"{100 * i}m", memory=f"{200 * i}Mi").node(f"n{i}") for i in range(6)],
    )
    pod = make_pod().req(cpu="300m", memory="1Gi").build()
    state = CycleState()
    assert fwk.run_pre_filter(state, pod, snap.node_list).is_success
    assert fwk.run_pre_score(state, pod, snap.node_list).is_success
    detailed = [s.total for s in fwk.run_score(state, pod, snap.node_list)]
    assert fwk.run_score_totals(state, pod, snap.node_list).tolist() == detailed
    assert len(set(detailed)) > 1


def test_ties_are_broken_uniformly() -> None:
    alg = Algorithm(random.Random(7))
    scored = [ScoredNode(f"n{i}", 10) for i in range(4)]
    counts = {f"n{i}": 0 for i in range(4)}
    for _ in range(4000):
        counts[alg.select(scored)] += 1
    assert all(800 < c < 1200 for c in counts.values()), counts


def _setup(*nodes: Any, pods: Any = ()) -> tuple[Framework, Snapshot]:
    """Nodes and bound pods go through the cache (never into a snapshot's NodeInfos directly: the
    snapshot's columns would not see them)."""
    cache = Cache()
    for n in nodes:
        cache.add_node(n.build())
    for p in pods:
        cache.add_pod(p.build())
    snap = cache.snapshot()
    cfg = load_config(DEFAULT, full_registry())
    fwk = build_frameworks(cfg.profiles, full_registry(), snap, client=None)["custom-scheduler"]
    return fwk, snap


def test_fit_error_message_matches_kube_scheduler() -> None:
    fwk, snap = _setup(
        make_node("a").capacity(cpu="1", memory="1Gi", pods="10"),
        make_node("b").capacity(cpu="1", memory="1Gi", pods="10"),
        make_node("c").capacity(cpu="8", memory="1Gi", pods="10").taint("dedicated", "gpu"),
        make_node("d").capacity(cpu="8", memory="1Gi", pods="10").unschedulable(),
    )
    pod = make_pod("big").req(cpu="4").build()
    with pytest.raises(FitError) as e:
        Algorithm().schedule(fwk, CycleState(), pod, snap)
    assert str(e.value) == (
        "0/4 nodes are available: 1 node(s) had untolerated taint(s), 1 node(s) were unschedulable, 2 Insufficient cpu."
    )
    assert e.value.rejecting_plugins == {"NodeResourcesFit", "TaintToleration", "NodeUnschedulable"}


def test_histogram_sorts_as_strings_like_kube_scheduler() -> None:
    pod = make_pod().build()
    statuses = {f"n{i}": Status.unschedulable("Insufficient cpu") for i in range(10)}
    statuses.update({f"m{i}": Status.unschedulable("Insufficient memory") for i in range(2)})
    assert str(FitError(pod, 12, statuses)) == "0/12 nodes are available: 10 Insufficient cpu, 2 Insufficient memory."


def test_post_filter_message_is_appended_without_another_period() -> None:
    """v1.37's FitError.Error appends PostFilter's message as is (it ends with its own period); the
    1.2x releases added one more ("scheduling.."), which the conformance test caught."""
    pod = make_pod().build()
    fit = FitError(pod, 2, {f"n{i}": Status.unschedulable("Insufficient cpu") for i in range(2)})
    fit.post_filter_msg = "preemption: 0/2 nodes are available: 2 No preemption victims found for incoming pod."
    assert str(fit) == (
        "0/2 nodes are available: 2 Insufficient cpu. "
        "preemption: 0/2 nodes are available: 2 No preemption victims found for incoming pod."
    )


def test_no_nodes() -> None:
    fwk, snap = _setup()
    with pytest.raises(FitError) as e:
        Algorithm().schedule(fwk, CycleState(), make_pod().build(), snap)
    assert str(e.value) == "no nodes available to schedule pods"


def test_least_allocated_prefers_the_emptier_node_and_rotates_start() -> None:
    fwk, snap = _setup(
        make_node("busy").capacity(cpu="4", memory="8Gi", pods="10"),
        make_node("idle").capacity(cpu="4", memory="8Gi", pods="10"),
        pods=[make_pod("x").req(cpu="3", memory="6Gi").node("busy")],
    )
    alg = Algorithm(random.Random(1))
    res = alg.schedule(fwk, CycleState(), make_pod().req(cpu="100m").build(), snap, detail=True)
    assert res.node == "idle"
    assert res.feasible == 2
    assert {s.name: s.weighted["NodeResourcesFit"] for s in res.scores}["idle"] > 0
    assert alg.next_start == 0  # both nodes processed: wrapped around


def test_nominated_node_is_tried_first() -> None:
    fwk, snap = _setup(make_node("a"), make_node("b"))
    pod = make_pod().nominated("b").build()
    for seed in range(5):
        assert Algorithm(random.Random(seed)).schedule(fwk, CycleState(), pod, snap).node == "b"


def test_nominated_higher_priority_pod_reserves_its_room() -> None:
    fwk, snap = _setup(make_node("a").capacity(cpu="1", memory="1Gi", pods="10"))
    reserved = make_pod("preemptor").priority(100).req(cpu="800m").build()
    low = make_pod("low").priority(1).req(cpu="500m").build()
    with pytest.raises(FitError):
        Algorithm().schedule(fwk, CycleState(), low, snap, {"a": [reserved]})
    assert Algorithm().schedule(fwk, CycleState(), low, snap, {}).node == "a"


class _Boom:
    name: ClassVar[str] = "Boom"

    def __init__(self, args: Any, handle: Any) -> None: ...

    def filter(self, state: CycleState, pod: Pod, node_info: NodeInfo) -> Status:
        raise ZeroDivisionError("bug")

    def score(self, state: CycleState, pod: Pod, node_info: NodeInfo) -> int:
        return 101


def test_plugin_exception_becomes_error_status_and_bad_score_is_rejected() -> None:
    reg = Registry(full_registry())
    reg.register(PluginSpec("Boom", _Boom))
    snap = Cache().snapshot()
    cfg = load_config(
        DEFAULT + "profiles:\n- schedulerName: custom-scheduler\n  plugins:\n"
        "    filter: {disabled: [{name: '*'}], enabled: [{name: Boom}]}\n"
        "    score: {disabled: [{name: '*'}], enabled: [{name: Boom, weight: 1}]}\n",
        reg,
    )
    fwk = build_frameworks(cfg.profiles, reg, snap, client=None)["custom-scheduler"]
    ni = NodeInfo(make_node("n").build())
    st_ = fwk.run_filter(CycleState(), make_pod().build(), ni)
    assert st_.code is Code.ERROR
    assert st_.plugin == "Boom"
    assert "ZeroDivisionError" in st_.message
    with pytest.raises(FrameworkError, match=r'plugin "Boom" returns an invalid score 101'):
        fwk.run_score(CycleState(), make_pod().build(), [ni])


def _pinned_to(*names: str) -> dict[str, Any]:
    return {"matchFields": [{"key": "metadata.name", "operator": "In", "values": list(names)}]}


@pytest.mark.parametrize(
    ("pinned", "want"),
    [
        pytest.param(
            ("a",),
            "0/3 nodes are available: 1 Insufficient cpu, 2 node(s) didn't satisfy plugin(s) [NodeAffinity].",
            id="one node named: only NodeAffinity narrowed",
        ),
        pytest.param(
            ("gone",),
            "0/3 nodes are available: 3 node(s) didn't satisfy plugin(s) [NodeAffinity].",
            id="a node not in the cluster",
        ),
    ],
)
def test_prefilter_message_names_only_the_plugins_that_narrowed(pinned: tuple[str, ...], want: str) -> None:
    """kube-scheduler 1.37 names the PreFilter plugins whose result excluded nodes (its
    pluginsWithNodes), not every PreFilter plugin of the profile (the differential found it)."""
    fwk, snap = _setup(*(make_node(n).capacity(cpu="1", memory="1Gi", pods="10") for n in ("a", "b", "c")))
    assert len(fwk.pre_filter) > 1  # the default profile: a message naming them all would differ
    pod = make_pod("p").req(cpu="2").required_node_affinity(_pinned_to(*pinned)).build()
    state = CycleState()
    with pytest.raises(FitError) as e:
        Algorithm().schedule(fwk, state, pod, snap)
    assert str(e.value) == want
    assert state.narrowed_by == ("NodeAffinity",)


def test_prefilter_results_that_do_not_intersect_fail_as_upstream() -> None:
    """Two PreFilter results with nothing in common fail PreFilter itself, with upstream's message."""
    fwk, snap = _setup(make_node("a"), make_node("b"))

    class Narrow:
        def __init__(self, name: str, keep: str) -> None:
            self.name, self.keep = name, keep

        def pre_filter(self, state: CycleState, pod: Pod, nodes: Any) -> Status:
            state.restrict_nodes([self.keep])
            return Status()

    fwk.pre_filter = [Narrow("Zeta", "a"), Narrow("Alpha", "b")]  # type: ignore[list-item]
    state = CycleState()
    st = fwk.run_pre_filter(state, make_pod("p").build(), snap.node_list)
    assert st.code is Code.UNSCHEDULABLE_AND_UNRESOLVABLE
    assert st.message == "node(s) didn't satisfy plugin(s) [Alpha Zeta] simultaneously"
    assert state.narrowed_by == ("Alpha", "Zeta")
    fwk.pre_filter = [Narrow("Only", "a"), Narrow("Only", "a")]  # type: ignore[list-item]
    st = fwk.run_pre_filter(CycleState(), make_pod("p").build(), snap.node_list)
    assert st.is_success


@pytest.mark.parametrize(
    "allowed",
    [
        {"n03", "n17"},  # a few: looked up by name (a DaemonSet pod's one node)
        {f"n{i:02d}" for i in range(20) if i % 4},  # most: one pass over the positions
        {"n05", "gone"},  # a name the snapshot lacks
        set(),
    ],
)
def test_prefilter_candidates_on_the_snapshot_equal_the_plain_pass(allowed: set[str]) -> None:
    """The nodes PreFilter leaves and the reasons of those it excludes are the same, in the same
    order, whether read through the snapshot's positions or node by node."""
    from custom_scheduler.core.algorithm import _prefilter_candidates

    fwk, snap = _setup(*(make_node(f"n{i:02d}").capacity(cpu="4", memory="8Gi", pods="10") for i in range(20)))
    results = []
    for with_snap in (snap, None):
        state = CycleState()
        state.node_names = set(allowed)
        statuses: dict[str, Status] = {}
        kept = _prefilter_candidates(fwk, state, snap.node_list, statuses, with_snap)
        results.append(([ni.name for ni in kept], list(statuses.items())))
    assert results[0] == results[1]
    assert set(results[0][0]) == allowed & set(snap.node_infos)
    assert len(results[0][1]) == 20 - len(results[0][0])
