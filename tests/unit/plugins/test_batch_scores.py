"""The declared fast paths (the daemon's hot path) give exactly what the per-node methods give.

For the resource plugins the per-node side is independent of the fast one: ``NodeResourcesFit.filter``
and both ``score`` methods read only the NodeInfo they are given, while ``filter_mask`` and
``score_batch`` on :class:`~custom_scheduler.framework.arrays.NodeRows` read the snapshot's numpy
columns. The score formulas are written once (for Python numbers and for arrays), so these tests
check what can differ: the columns against the NodeInfo fields, row alignment, the int64/float64
operations against Python's, left-out resources, and every strategy and resource list.
"""

from __future__ import annotations

from typing import Any

import hypothesis.strategies as st
from hypothesis import given, settings

from custom_scheduler.api.model import Pod
from custom_scheduler.core.cache import Cache
from custom_scheduler.framework import arrays
from custom_scheduler.framework import interface as fi
from custom_scheduler.framework.handle import SnapshotHandle
from custom_scheduler.framework.types import CycleState, NodeInfo, Snapshot
from custom_scheduler.plugins import image_locality, taint_toleration
from custom_scheduler.plugins import node_resources_balanced_allocation as nrba
from custom_scheduler.plugins import node_resources_fit as nrf
from tests.builders import make_node, make_pod

CPU = st.integers(0, 16000)
MEM = st.integers(0, 64 * 1024)  # MiB
EPH = st.integers(0, 100)  # GiB
GPU = "nvidia.com/gpu"
NONE = "example.com/none"  # requested by some pods, on no node
#: Resource lists to score on: the default, one resource, and lists with left-out entries.
RESOURCE_LISTS = [
    ("cpu", "memory"),
    ("cpu",),
    ("memory", "cpu"),
    ("cpu", "memory", GPU),
    ("cpu", "memory", "ephemeral-storage", GPU, NONE),
    ("cpu", "pods", GPU),
]


@st.composite
def cluster(draw: Any) -> tuple[Snapshot, Pod]:
    """A cache snapshot (with its columns) of random nodes and pods, and an incoming pod; some
    nodes have no cpu, no memory or GPUs, and requests may exceed what a node has."""
    cache = Cache()
    for i in range(draw(st.integers(1, 8))):
        b = make_node(f"n{i}").capacity(
            cpu=f"{draw(CPU)}m", memory=f"{draw(MEM)}Mi", pods="110", **{"ephemeral-storage": f"{draw(EPH)}Gi"}
        )
        if draw(st.booleans()):
            b.capacity_named({GPU: str(draw(st.integers(0, 8)))})
        cache.add_node(b.build())
        for j in range(draw(st.integers(0, 4))):
            p = make_pod(f"p{i}-{j}")
            if draw(st.booleans()):
                p.req(cpu=f"{draw(CPU)}m")
            if draw(st.booleans()):
                p.req(memory=f"{draw(MEM)}Mi")
            if draw(st.booleans()):
                p.req_named({"ephemeral-storage": f"{draw(EPH)}Gi"})
            if draw(st.booleans()):
                p.req_named({GPU: str(draw(st.integers(1, 4)))})
            cache.add_pod(p.node(f"n{i}").build())
    pod = make_pod("x")
    if draw(st.booleans()):
        pod.req(cpu=f"{draw(CPU)}m")
    if draw(st.booleans()):
        pod.req(memory=f"{draw(MEM)}Mi")
    if draw(st.booleans()):
        pod.req_named({"ephemeral-storage": f"{draw(EPH)}Gi"})
    for name in draw(st.lists(st.sampled_from([GPU, NONE]), max_size=2, unique=True)):
        pod.req_named({name: str(draw(st.integers(1, 4)))})
    snap = cache.snapshot()
    assert snap.arrays is not None
    return snap, pod.build()


def _fit_args(strategy: str, names: tuple[str, ...], weights: list[int]) -> nrf.NodeResourcesFitArgs:
    raw: dict[str, Any] = {
        "type": strategy,
        "resources": [{"name": n, "weight": w} for n, w in zip(names, weights, strict=False)],
    }
    if strategy == nrf.REQUESTED_TO_CAPACITY_RATIO:
        raw["requestedToCapacityRatio"] = {"shape": [{"utilization": 0, "score": 0}, {"utilization": 100, "score": 10}]}
    return nrf.parse_args({"scoringStrategy": raw}, "args")


def _rows(snap: Snapshot, nodes: list[NodeInfo]) -> arrays.NodeRows:
    rows = arrays.rows_for(snap, nodes)
    assert rows is not None
    return rows


@settings(max_examples=200, deadline=None)
@given(
    cluster(),
    st.sampled_from([nrf.LEAST_ALLOCATED, nrf.MOST_ALLOCATED, nrf.REQUESTED_TO_CAPACITY_RATIO]),
    st.sampled_from(RESOURCE_LISTS),
    st.lists(st.integers(1, 100), min_size=5, max_size=5),
    st.booleans(),
)
def test_fit_score_batch_on_columns_equals_per_node_score(
    c: tuple[Snapshot, Pod], strategy: str, names: tuple[str, ...], weights: list[int], pre_score: bool
) -> None:
    snap, pod = c
    plugin = nrf.NodeResourcesFit(_fit_args(strategy, names, weights), SnapshotHandle(snap, profile_name="t"))
    state = CycleState()
    if pre_score:  # without PreScore both paths compute the pod's requests themselves
        plugin.pre_score(state, pod, snap.node_list)
    part = snap.node_list[::2]  # not every row, and not in row order after the first
    want = [plugin.score(state, pod, ni) for ni in part]
    assert list(map(int, plugin.score_batch(state, pod, _rows(snap, part)))) == want
    assert list(map(int, plugin.score_batch(state, pod, list(reversed(part))))) == want[::-1]


@settings(max_examples=200, deadline=None)
@given(cluster(), st.sampled_from(RESOURCE_LISTS), st.booleans())
def test_balanced_score_batch_on_columns_equals_per_node_score(
    c: tuple[Snapshot, Pod], names: tuple[str, ...], pre_score: bool
) -> None:
    snap, pod = c
    args = nrba.parse_args({"resources": [{"name": n, "weight": 1} for n in names]}, "args")
    plugin = nrba.NodeResourcesBalancedAllocation(args, SnapshotHandle(snap, profile_name="t"))
    state = CycleState()
    if pre_score and not plugin.pre_score(state, pod, snap.node_list).is_success:
        return  # best effort: skipped at PreScore, neither path runs
    nodes = snap.node_list[::-1]
    want = [plugin.score(state, pod, ni) for ni in nodes]
    assert list(map(int, plugin.score_batch(state, pod, _rows(snap, nodes)))) == want


@settings(max_examples=200, deadline=None)
@given(cluster(), st.lists(st.sampled_from(["example.com/ignored", GPU]), max_size=1))
def test_fit_filter_mask_equals_per_node_filter(c: tuple[Snapshot, Pod], ignored: list[str]) -> None:
    snap, pod = c
    plugin = nrf.NodeResourcesFit(
        nrf.parse_args({"ignoredResources": ignored}, "args"), SnapshotHandle(snap, profile_name="t")
    )
    state = CycleState()
    assert plugin.pre_filter(state, pod, snap.node_list).is_success
    mask = plugin.filter_mask(state, pod, snap)
    assert not isinstance(mask, bool)
    assert mask is not None
    assert mask.tolist() == [plugin.filter(state, pod, ni).is_success for ni in snap.node_list]


def test_resource_plugins_declare_their_fast_paths() -> None:
    fit = nrf.NodeResourcesFit(None, SnapshotHandle(Snapshot(), profile_name="t"))
    bal = nrba.NodeResourcesBalancedAllocation(None, SnapshotHandle(Snapshot(), profile_name="t"))
    assert isinstance(fit, fi.FilterMaskPlugin)
    assert isinstance(fit, fi.BatchScorePlugin)
    assert isinstance(bal, fi.BatchScorePlugin)
    assert not isinstance(bal, fi.FilterMaskPlugin)


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
