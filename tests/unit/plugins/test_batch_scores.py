"""The batch scorers (the daemon's hot path) give exactly the per-node scores, for any input."""

from __future__ import annotations

from typing import Any

import hypothesis.strategies as st
from hypothesis import given, settings

from custom_scheduler.framework.types import CycleState, NodeInfo
from custom_scheduler.plugins import node_resources_balanced_allocation as nrba
from custom_scheduler.plugins import node_resources_fit as nrf
from tests.builders import make_node, make_pod

CPU = st.integers(0, 16000)
MEM = st.integers(0, 64 * 1024)  # MiB


@st.composite
def cluster(draw: Any) -> tuple[list[NodeInfo], Any]:
    nodes = []
    for i in range(draw(st.integers(1, 8))):
        b = make_node(f"n{i}").capacity(cpu=f"{draw(CPU)}m", memory=f"{draw(MEM)}Mi", pods="110")
        ni = NodeInfo(b.build())
        for j in range(draw(st.integers(0, 4))):
            p = make_pod(f"p{i}-{j}")
            if draw(st.booleans()):
                p.req(cpu=f"{draw(CPU)}m")
            if draw(st.booleans()):
                p.req(memory=f"{draw(MEM)}Mi")
            ni.add_pod(p.node(ni.name).build())
        nodes.append(ni)
    pod = make_pod("x")
    if draw(st.booleans()):
        pod.req(cpu=f"{draw(CPU)}m")
    if draw(st.booleans()):
        pod.req(memory=f"{draw(MEM)}Mi")
    return nodes, pod.build()


@settings(max_examples=150)
@given(cluster(), st.sampled_from(["LeastAllocated", "MostAllocated"]), st.integers(1, 100), st.integers(1, 100))
def test_fit_batch_equals_per_node(c: tuple[list[NodeInfo], Any], strategy: str, w1: int, w2: int) -> None:
    nodes, pod = c
    args = nrf.parse_args(
        {
            "scoringStrategy": {
                "type": strategy,
                "resources": [{"name": "cpu", "weight": w1}, {"name": "memory", "weight": w2}],
            }
        },
        "args",
    )
    plugin = nrf.NodeResourcesFit(args, None)  # type: ignore[arg-type]
    state = CycleState()
    plugin.pre_score(state, pod, nodes)
    assert plugin.score_batch(state, pod, nodes) == [plugin.score(state, pod, ni) for ni in nodes]


@settings(max_examples=150)
@given(cluster())
def test_balanced_batch_equals_per_node(c: tuple[list[NodeInfo], Any]) -> None:
    nodes, pod = c
    plugin = nrba.NodeResourcesBalancedAllocation(None, None)  # type: ignore[arg-type]
    state = CycleState()
    plugin.pre_score(state, pod, nodes)
    assert plugin.score_batch(state, pod, nodes) == [plugin.score(state, pod, ni) for ni in nodes]


class _Handle:
    def __init__(self, nodes: list[NodeInfo]) -> None:
        self.nodes = nodes

    def snapshot_nodes(self) -> list[NodeInfo]:
        return self.nodes


@settings(max_examples=100)
@given(
    st.lists(
        st.tuples(
            st.lists(
                st.sampled_from([("a", "PreferNoSchedule"), ("b", "PreferNoSchedule"), ("c", "NoSchedule")]),
                max_size=3,
                unique=True,
            ),
            st.lists(st.sampled_from(["img-a:1", "img-b:1"]), max_size=2, unique=True),
        ),
        min_size=1,
        max_size=6,
    ),
    st.lists(st.sampled_from(["a", "b"]), max_size=2, unique=True),
    st.lists(st.sampled_from(["img-a:1", "img-b:1", "img-c:1"]), min_size=0, max_size=3),
)
def test_taint_and_image_batches_equal_per_node(
    spec: list[tuple[list[tuple[str, str]], list[str]]], tolerated: list[str], images: list[str]
) -> None:
    from custom_scheduler.core.cache import Cache
    from custom_scheduler.plugins import image_locality, taint_toleration

    cache = Cache()
    for i, (taints, imgs) in enumerate(spec):
        b = make_node(f"n{i}")
        for key, effect in taints:
            b.taint(key, "", effect)
        for img in imgs:
            b.image(img, 300 * 1024 * 1024)
        cache.add_node(b.build())
    nodes = cache.snapshot().node_list
    pod_b = make_pod("x")
    for key in tolerated:
        pod_b.toleration(key, "", "PreferNoSchedule", operator="Exists")
    for j, img in enumerate(images):
        pod_b.image(img, 0) if j == 0 else pod_b.req(container=j).image(img, j)
    pod = pod_b.build()
    state = CycleState()
    tt = taint_toleration.TaintToleration(None, None)  # type: ignore[arg-type]
    tt.pre_score(state, pod, nodes)
    assert tt.score_batch(state, pod, nodes) == [tt.score(state, pod, ni) for ni in nodes]
    il = image_locality.ImageLocality(None, _Handle(nodes))  # type: ignore[arg-type]
    assert il.score_batch(state, pod, nodes) == [il.score(state, pod, ni) for ni in nodes]


@settings(max_examples=150)
@given(cluster(), st.sampled_from(["LeastAllocated", "MostAllocated"]), st.integers(1, 100), st.integers(1, 100))
def test_vectorised_paths_over_snapshot_columns_equal_the_scalar_ones(
    c: tuple[list[NodeInfo], Any], strategy: str, w1: int, w2: int
) -> None:
    """Through a real cache snapshot (numpy columns): Fit's filter verdicts and both resource
    scorers give exactly what the per-node code gives."""
    from custom_scheduler.core.cache import Cache
    from custom_scheduler.framework.handle import SnapshotHandle

    nodes, pod = c
    cache = Cache()
    for ni in nodes:
        assert ni.node is not None
        cache.add_node(ni.node)
        for p in ni.pods.values():
            cache.add_pod(p)
    snap = cache.snapshot()
    assert snap.arrays is not None
    handle = SnapshotHandle(snap, profile_name="t")
    args = nrf.parse_args(
        {"scoringStrategy": {"type": strategy, "resources": [{"name": "cpu", "weight": w1},
                                                              {"name": "memory", "weight": w2}]}},
        "args",
    )
    fit = nrf.NodeResourcesFit(args, handle)
    bal = nrba.NodeResourcesBalancedAllocation(None, handle)
    state = CycleState()
    fit.pre_filter(state, pod, snap.node_list)
    assert state.get(nrf.FAST_FILTER_KEY) is not None
    for ni in snap.node_list:
        want = nrf.insufficient_resources(state.read(nrf.PRE_FILTER_KEY), ni)
        assert fit.filter(state, pod, ni).reasons == tuple(want)
    fit.pre_score(state, pod, snap.node_list)
    bal.pre_score(state, pod, snap.node_list)
    part = snap.node_list[::2]
    assert list(map(int, fit.score_batch(state, pod, part))) == [fit.score(state, pod, ni) for ni in part]
    assert list(map(int, bal.score_batch(state, pod, part))) == [bal.score(state, pod, ni) for ni in part]
