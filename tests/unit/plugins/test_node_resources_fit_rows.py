"""NodeResourcesFit's statuses from the snapshot's columns (``filter_statuses``) are exactly its
per-node Filter's (reasons in order, code, plugin) on every row its mask rejects: for any nodes,
pods on them and request, ephemeral storage, extended resources on some nodes or none, and
resources DynamicResources is delegated."""

from __future__ import annotations

from typing import Any

import hypothesis.strategies as st
import numpy as np
from hypothesis import given, settings

from custom_scheduler.api.model import node_from_json, pod_from_json
from custom_scheduler.framework.arrays import NodeArrays
from custom_scheduler.framework.handle import SnapshotHandle
from custom_scheduler.framework.types import CycleState, NodeInfo, Snapshot
from custom_scheduler.plugins import node_resources_fit as nrf
from tests.builders import make_node, make_pod

GPU, FOO = "example.com/gpu", "example.com/foo"  # FOO: on no node


@st.composite
def cluster(draw: Any) -> list[NodeInfo]:
    nodes = []
    for i in range(draw(st.integers(1, 10))):
        b = make_node(f"n{i}").capacity(
            cpu=f"{draw(st.integers(0, 3000))}m",
            memory=f"{draw(st.integers(0, 3000))}Mi",
            pods=str(draw(st.integers(0, 3))),
        )
        if draw(st.booleans()):
            b.capacity_named({"ephemeral-storage": f"{draw(st.integers(0, 3000))}Mi"})
        if draw(st.booleans()):
            b.capacity_named({GPU: str(draw(st.integers(0, 3)))})
        ni = NodeInfo(node_from_json(b.obj()))
        for j in range(draw(st.integers(0, 2))):
            p = make_pod(f"p{i}-{j}").node(f"n{i}").req(cpu=f"{draw(st.integers(0, 1500))}m")
            if draw(st.booleans()):
                p.req_named({GPU: str(draw(st.integers(1, 2)))})
            ni.add_pod(p.build())
        nodes.append(ni)
    return nodes


@st.composite
def request(draw: Any) -> tuple[dict[str, str], frozenset[str]]:
    req: dict[str, str] = {}
    for name, unit in (("cpu", "m"), ("memory", "Mi"), ("ephemeral-storage", "Mi")):
        if draw(st.booleans()):
            req[name] = f"{draw(st.integers(0, 3500))}{unit}"
    for name in (GPU, FOO):
        if draw(st.booleans()):
            req[name] = str(draw(st.integers(1, 4)))
    return req, frozenset(draw(st.lists(st.sampled_from([GPU, FOO]), unique=True)))


@settings(max_examples=400, deadline=None)
@given(cluster(), request())
def test_statuses_from_the_columns_equal_the_per_node_filter(
    nodes: list[NodeInfo], req: tuple[dict[str, str], frozenset[str]]
) -> None:
    requests, delegated = req
    pod = pod_from_json(make_pod("x").req_named(requests).obj())
    s = nrf.compute_pre_filter_state(pod, dra_backed=delegated.__contains__)
    state = CycleState()
    state.write(nrf.PRE_FILTER_KEY, s)
    plugin = nrf.NodeResourcesFit(None, SnapshotHandle(Snapshot(node_infos={}, node_list=[]), profile_name="p"))
    cols = NodeArrays()
    cols.rebuild(nodes)
    mask = nrf.fits_mask(s, cols)
    assert [bool(x) for x in mask] == [plugin.filter(state, pod, ni).is_success for ni in nodes]
    rows = np.flatnonzero(~mask)
    got = nrf.rejections_of_rows(s, cols, rows)
    assert got is not None
    want = [plugin.filter(state, pod, nodes[i]) for i in rows.tolist()]
    assert [(x.code, x.reasons, x.plugin) for x in got] == [(x.code, x.reasons, nrf.NAME) for x in want]


def test_a_row_the_mask_passes_gets_no_status() -> None:
    """A row with no reason (a caller that passed a row its mask lets through) makes the whole
    answer None: the framework then calls Filter per row."""
    ni = NodeInfo(node_from_json(make_node("n0").capacity(cpu="2", memory="1Gi", pods="5").obj()))
    s = nrf.compute_pre_filter_state(pod_from_json(make_pod("x").req(cpu="1").obj()))
    cols = NodeArrays()
    cols.rebuild([ni])
    assert nrf.rejections_of_rows(s, cols, np.array([0], dtype=np.intp)) is None
