"""The daemon's vectorised filter path (masks over the snapshot's columns, per-node filters only
where masks let nodes through) finds exactly the nodes the per-node loop finds, in the same order,
and processes the same number of nodes, for any cluster, pod and start index."""

from __future__ import annotations

import random
from typing import Any
from unittest import mock

import hypothesis.strategies as st
from hypothesis import given, settings

from custom_scheduler.api.model import Pod
from custom_scheduler.config import load_config
from custom_scheduler.core.algorithm import Algorithm, _whole_pass
from custom_scheduler.core.cache import Cache
from custom_scheduler.framework import masked_filter
from custom_scheduler.framework.profiles import build_frameworks
from custom_scheduler.framework.runtime import Framework
from custom_scheduler.framework.types import Code, CycleState, Snapshot, Status
from custom_scheduler.plugins.builtin import full_registry
from tests.builders import make_node, make_pod

DEFAULT = "apiVersion: kubescheduler.config.k8s.io/v1\nkind: KubeSchedulerConfiguration\n"
TAINTS = [("dedicated", "infra", "NoSchedule"), ("gpu", "", "NoExecute"), ("soft", "", "PreferNoSchedule")]


@st.composite
def scenario(draw: Any) -> tuple[Framework, Snapshot, Pod, int, int]:  # noqa: C901 -- a hypothesis strategy: one draw per field of the cluster
    cache = Cache()
    n = draw(st.integers(1, 12))
    for i in range(n):
        cpu, mem, pods = draw(st.integers(0, 4000)), draw(st.integers(0, 4096)), draw(st.integers(0, 4))
        b = make_node(f"n{i}").capacity(cpu=f"{cpu}m", memory=f"{mem}Mi", pods=str(pods))
        for key, value, effect in draw(st.lists(st.sampled_from(TAINTS), max_size=2, unique=True)):
            b.taint(key, value, effect)
        if draw(st.booleans()):
            b.label("disktype", "ssd")
        if draw(st.booleans()):
            b.capacity_named({"nvidia.com/gpu": str(draw(st.integers(0, 4)))})
        zone = draw(st.sampled_from(["z1", "z2", "", None]))  # "" is a value; None: no label
        if zone is not None:
            b.label("zone", zone)
        if draw(st.integers(0, 5)) == 0:
            b.unschedulable()
        cache.add_node(b.build())
        for j in range(draw(st.integers(0, 2))):
            p = make_pod(f"p{i}-{j}").req(cpu=f"{draw(st.integers(0, 2000))}m").label("app", "web")
            if draw(st.booleans()):
                p.req_named({"nvidia.com/gpu": str(draw(st.integers(1, 2)))})
            cache.add_pod(p.node(f"n{i}").build())
    snap = cache.snapshot()
    cfg = load_config(DEFAULT, full_registry())
    fwk = build_frameworks(cfg.profiles, full_registry(), snap, client=None)["custom-scheduler"]
    pod = make_pod("x")
    if draw(st.booleans()):
        pod.req(cpu=f"{draw(st.integers(0, 3000))}m", memory=f"{draw(st.integers(0, 3000))}Mi")
    extended = draw(st.sampled_from([None, "nvidia.com/gpu", "example.com/none"]))  # the last: on no node
    if extended is not None:
        pod.req_named({extended: str(draw(st.integers(1, 3)))})
    for key, value, effect in draw(st.lists(st.sampled_from(TAINTS), max_size=3, unique=True)):
        pod.toleration(key, value, effect, operator="Equal" if value else "Exists")
    if draw(st.integers(0, 5)) == 0:
        pod.toleration("node.kubernetes.io/unschedulable", "", "NoSchedule", operator="Exists")
    if draw(st.booleans()):
        pod.node_selector(disktype="ssd")  # NodeAffinity has no mask: the mixed path
    if draw(st.booleans()):  # PodTopologySpread (and its per-domain mask)
        pod.label("app", "web").spread(draw(st.integers(1, 2)), "zone", selector={"matchLabels": {"app": "web"}})
    if draw(st.integers(0, 5)) == 0:
        pod.node(f"n{draw(st.integers(0, n))}")  # spec.nodeName, possibly of no node
    return fwk, snap, pod.build(), draw(st.integers(0, n - 1)), draw(st.integers(1, n))


#: How a cycle may run the masked pass: sampled for plugin metrics (every filter wrapped in a
#: timer that must forward the masks, column statuses and ``filter_reads_node_only``) or not, and
#: with a FilterStatusesPlugin's column statuses taken from any number of rejected rows (these
#: clusters are smaller than ``GIVEN_FROM_ROWS``) or from that many only.
MODES = st.tuples(st.booleans(), st.sampled_from([0, masked_filter.GIVEN_FROM_ROWS]))


@settings(max_examples=300, deadline=None)
@given(scenario(), MODES)
def test_vectorised_filtering_equals_the_per_node_loop(
    s: tuple[Framework, Snapshot, Pod, int, int], mode: tuple[bool, int]
) -> None:
    fwk, snap, pod, start, want = s
    timed, given_from = mode
    results = []
    for vectorised in (False, True):
        state = CycleState()
        state.record_plugin_metrics = timed and vectorised
        st = fwk.run_pre_filter(state, pod, snap.node_list)
        if not st.is_success:
            return  # rejected before Filter: no filtering to compare
        with mock.patch.object(masked_filter, "GIVEN_FROM_ROWS", given_from):
            feasible, statuses, processed = fwk.filter_many(
                state,
                pod,
                snap.node_list,
                start=start,
                want=want,
                snap=snap if vectorised else None,
                need_statuses=not vectorised,
            )
        results.append(([ni.name for ni in feasible], processed, statuses))
    (want_names, want_processed, want_statuses), (got_names, got_processed, got_statuses) = results
    assert got_names == want_names
    assert got_processed == want_processed
    if not got_names:  # nothing feasible: every node's status, as the loop gives them and in its order
        assert _statuses(got_statuses) == _statuses(want_statuses)


def _statuses(statuses: dict[str, Status]) -> list[tuple[str, Code, tuple[str, ...], str]]:
    return [(name, s.code, s.reasons, s.plugin) for name, s in statuses.items()]


@settings(max_examples=300, deadline=None)
@given(
    scenario(),
    st.lists(st.tuples(st.integers(0, 11), st.integers(-1, 1), st.integers(0, 2500)), max_size=6),
    MODES,
)
def test_filtering_with_nominated_pods_equals_the_per_node_loop(
    s: tuple[Framework, Snapshot, Pod, int, int], nominees: list[tuple[int, int, int]], mode: tuple[bool, int]
) -> None:
    """The daemon's search with pods nominated to nodes (the masks decide the nodes holding none,
    those holding one get their pass with them added, kept across cycles) against upstream's
    per-node RunFilterPluginsWithNominatedPods: the same feasible nodes (here fewer than the loop
    stops at), count and statuses."""
    with mock.patch.object(masked_filter, "GIVEN_FROM_ROWS", mode[1]):
        _nominated_oracle(s, nominees, mode[0])


def _nominated_oracle(
    s: tuple[Framework, Snapshot, Pod, int, int], nominees: list[tuple[int, int, int]], timed: bool
) -> None:
    fwk, snap, pod, start, _ = s
    nominated: dict[str, list[Pod]] = {}
    for k, (i, rel, cpu) in enumerate(nominees):
        if i < len(snap.node_list):
            other = make_pod(f"nom{k}").req(cpu=f"{cpu}m").priority(pod.priority + rel).build()
            nominated.setdefault(snap.node_list[i].name, []).append(other)
    state = CycleState()
    if not fwk.run_pre_filter(state, pod, snap.node_list).is_success:
        return
    order = [*snap.node_list[start:], *snap.node_list[:start]]
    want_statuses: dict[str, Status] = {}
    want_names: list[str] = []
    for ni in order:
        st_ = fwk.run_filter_with_nominated(state, pod, ni, nominated.get(ni.name, ()))
        if st_.is_success:
            want_names.append(ni.name)
        else:
            want_statuses[ni.name] = st_
    state.record_plugin_metrics = timed
    counted = any(p.priority >= pod.priority for pods in nominated.values() for p in pods)
    algo = Algorithm(random.Random(1), percentage_of_nodes_to_score=100)
    for _ in range(2):  # the second time from the views kept by the first
        algo.next_start = start
        rejected: dict[str, Status] = {}
        feasible, processed = algo._find_feasible(fwk, state, pod, snap.node_list, nominated, rejected, False, snap)
        assert [ni.name for ni in feasible] == want_names
        assert processed == len(snap.node_list)
        if counted or not want_names:  # without nominated pods, a success reports no rejections
            assert _statuses(rejected) == _statuses(want_statuses)
    # A smaller ``want`` (the loop stops at the want-th fitting node): the whole pass answers only
    # when the loop would still go through every node, and then as it does.
    want = s[4]
    relevant = {k: [p for p in v if p.priority >= pod.priority] for k, v in nominated.items()}
    whole = _whole_pass(fwk, state, pod, snap, start, want, {k: v for k, v in relevant.items() if v}, algo.views)
    if whole is not None:
        assert len(want_names) < want
        assert [ni.name for ni in whole[0]] == want_names
        assert _statuses(whole[1]) == _statuses(want_statuses)


def test_the_daemon_path_is_vectorised_and_hands_its_rows_to_the_scorers() -> None:
    from custom_scheduler.framework import arrays

    cache = Cache()
    for b in (
        make_node("a").capacity(cpu="2", memory="1Gi", pods="10"),
        make_node("b").capacity(cpu="2", memory="1Gi", pods="10").taint("dedicated", "infra"),
        make_node("c").capacity(cpu="2", memory="1Gi", pods="10"),
    ):
        cache.add_node(b.build())
    snap = cache.snapshot()
    fwk = build_frameworks(load_config(DEFAULT, full_registry()).profiles, full_registry(), snap, client=None)[
        "custom-scheduler"
    ]
    pod = make_pod("x").req(cpu="1").build()
    state = CycleState()
    assert fwk.run_pre_filter(state, pod, snap.node_list).is_success
    feasible, statuses, processed = fwk.filter_many(
        state, pod, snap.node_list, start=1, want=3, snap=snap, need_statuses=False
    )
    assert [ni.name for ni in feasible] == ["c", "a"]
    assert processed == 3
    assert statuses == {}  # not computed on success: only the per-node loop explains rejections
    assert isinstance(feasible, arrays.NodeRows)  # the rows the masks found, for the batch scorers
    assert feasible.cols is snap.arrays
    assert feasible.rows.tolist() == [2, 0]


_PODS = [
    make_pod("sel").node_selector(disktype="ssd").build(),
    make_pod("aff")
    .required_node_affinity({"matchExpressions": [{"key": "zone", "operator": "NotIn", "values": ["z2"]}]})
    .build(),
    make_pod("spread")
    .label("app", "web")
    .spread(1, "zone", selector={"matchLabels": {"app": "web"}})
    .node_selector(disktype="ssd")
    .build(),
    make_pod("plain").req(cpu="500m").build(),
    make_pod("gpu").req_named({"nvidia.com/gpu": "2"}).build(),
]
STEPS = st.one_of(
    st.tuples(st.just("pod"), st.integers(0, 7)),
    st.tuples(st.just("label"), st.integers(0, 7), st.sampled_from(["z1", "z2", "", None]), st.booleans()),
    st.tuples(st.just("node"), st.integers(8, 9)),
    st.tuples(st.just("gpu"), st.integers(0, 7), st.integers(0, 3)),
    st.tuples(st.just("gpu-pod"), st.integers(0, 7)),
)


def _labelled(i: int, zone: str | None, ssd: bool, gpus: int = 0) -> Any:
    b = make_node(f"n{i}").capacity(cpu="4", memory="8Gi", pods="20")
    if gpus:
        b.capacity_named({"nvidia.com/gpu": str(gpus)})
    if zone is not None:
        b.label("zone", zone)
    if ssd:
        b.label("disktype", "ssd")
    return b.build()


@settings(max_examples=100, deadline=None)
@given(st.lists(STEPS, max_size=15), st.integers(0, 9))
def test_memoised_masks_follow_the_cluster_across_cycles(steps: list[tuple[Any, ...]], start: int) -> None:
    """One framework and one snapshot over many cycles, as in the daemon: per-node memos (node
    affinity verdicts, domain ids) stay exact while nodes are relabelled, added and filled."""
    cache = Cache()
    for i in range(8):
        cache.add_node(_labelled(i, ["z1", "z2"][i % 2], i % 3 == 0))
    snap = Snapshot()
    cache.update_snapshot(snap)
    fwk = build_frameworks(load_config(DEFAULT, full_registry()).profiles, full_registry(), snap, client=None)[
        "custom-scheduler"
    ]
    for k, step in enumerate([("none",), *steps]):
        if step[0] == "pod":
            cache.add_pod(make_pod(f"w{k}").label("app", "web").req(cpu="100m").node(f"n{step[1]}").build())
        elif step[0] == "label":
            cache.update_node(_labelled(step[1], step[2], step[3]))
        elif step[0] == "node":
            cache.add_node(_labelled(step[1], "z1", True))
        elif step[0] == "gpu":  # a resource name may first appear in an incremental update
            cache.update_node(_labelled(step[1], "z2", False, gpus=step[2]))
        elif step[0] == "gpu-pod":
            cache.add_pod(make_pod(f"g{k}").req_named({"nvidia.com/gpu": "1"}).node(f"n{step[1]}").build())
        cache.update_snapshot(snap)
        n = len(snap.node_list)
        for pod in _PODS:
            got = []
            for vectorised in (False, True):
                state = CycleState()
                if not fwk.run_pre_filter(state, pod, snap.node_list).is_success:
                    break
                feasible, _, processed = fwk.filter_many(
                    state,
                    pod,
                    snap.node_list,
                    start=start % n,
                    want=n,
                    snap=snap if vectorised else None,
                    need_statuses=not vectorised,
                )
                got.append(([ni.name for ni in feasible], processed))
            if len(got) == 2:
                assert got[1] == got[0], (pod.name, step)


def test_the_whole_pass_leaves_it_to_the_loop_once_as_many_nodes_fit_as_it_stops_at() -> None:
    """Two nodes, one full, the other holding a nominated pod that leaves room: with ``want`` 1
    the loop stops at the holder (rejecting nothing before it), so the whole pass must not answer
    with every node's status."""
    cache = Cache()
    cache.add_node(make_node("n0").capacity(cpu="4", memory="8Gi", pods="10").build())
    cache.add_node(make_node("n1").capacity(cpu="1", memory="8Gi", pods="10").build())
    snap = cache.snapshot()
    fwk = build_frameworks(load_config(DEFAULT, full_registry()).profiles, full_registry(), snap, client=None)[
        "custom-scheduler"
    ]
    pod = make_pod("x").req(cpu="2").build()
    nominee = make_pod("nom").req(cpu="1").build()
    state = CycleState()
    assert fwk.run_pre_filter(state, pod, snap.node_list).is_success
    views = Algorithm().views
    assert _whole_pass(fwk, state, pod, snap, 0, 1, {"n0": [nominee]}, views) is None
    feasible, statuses = _whole_pass(fwk, state, pod, snap, 0, 2, {"n0": [nominee]}, views) or ([], {})
    assert [ni.name for ni in feasible] == ["n0"]
    assert list(statuses) == ["n1"]
