"""The topology-gangs workload's shape and placement checks (bench/topology.py), pure: the
benchmark judges both schedulers with these, so each check must flag what it claims to and only
that."""

from __future__ import annotations

import math
from typing import Any

import pytest

from bench import topology as topo
from bench import workloads
from custom_scheduler.api.podgroup import native_from_json
from tests.builders import make_node, make_pod

B, R = topo.BLOCK, topo.RACK


def _node(name: str, rack: str, block: str, gpus: int = 8) -> dict[str, Any]:
    return (
        make_node(name)
        .capacity(cpu="64", memory="512Gi", pods="110", **{"nvidia.com/gpu": str(gpus)})
        .labels(**{topo.ZONE: "z0", B: block, R: rack})
        .obj()
    )


def _member(name: str, node: str, gpus: int) -> dict[str, Any]:
    pod = make_pod(name).uid(f"uid-{name}").obj()
    pod["spec"]["containers"][0]["resources"] = {"requests": {"nvidia.com/gpu": str(gpus)}}
    pod["spec"]["nodeName"] = node
    return pod


@pytest.mark.parametrize(
    ("n_nodes", "rack_of_last", "block_of_last"),
    [
        (5000, "z3-b19-r499", "z3-b19"),  # 4 zones x 5 blocks x 25 racks x 10 hosts
        (1000, "z3-b19-r99", "z3-b19"),  # 5 racks a block
        (20, "z0-b1-r1", "z0-b1"),  # smoke: a rack a block, one zone
    ],
)
def test_node_levels_nest_hosts_in_racks_in_blocks_in_zones(
    n_nodes: int, rack_of_last: str, block_of_last: str
) -> None:
    labels = [topo.node_levels(i, n_nodes) for i in range(n_nodes)]
    assert labels[-1][R] == rack_of_last
    assert labels[-1][B] == block_of_last
    # every rack is inside one block, every block inside one zone, and a rack holds 10 hosts
    racks: dict[str, set[tuple[str, str]]] = {}
    for lab in labels:
        racks.setdefault(lab[R], set()).add((lab[B], lab[topo.ZONE]))
    assert all(len(parents) == 1 for parents in racks.values())
    assert len(racks) == math.ceil(n_nodes / topo.HOSTS_PER_RACK)


@pytest.mark.parametrize(("n_pods", "n_nodes"), [(3000, 5000), (3000, 1000), (40, 20), (7, 20)])
def test_gang_shapes_stay_within_the_pods_a_block_and_a_rack(n_pods: int, n_nodes: int) -> None:
    shapes = topo.gang_shapes(n_pods, n_nodes, seed=1)
    assert sum(size for size, _ in shapes) <= n_pods
    assert n_pods - sum(size for size, _ in shapes) < min(s for s, _ in topo.GANG_SIZES)
    block_gpus = topo.racks_per_block(n_nodes) * topo.HOSTS_PER_RACK * topo.GPUS_PER_NODE
    for size, gpus in shapes:
        assert 8 <= size <= 128
        assert size * gpus <= max(block_gpus, size)
        if size * gpus > topo.HOSTS_PER_RACK * topo.GPUS_PER_NODE:
            assert gpus == 1  # only a gang too large for a rack at 1 GPU a member exceeds it
    assert topo.gang_shapes(n_pods, n_nodes, seed=1) == shapes  # deterministic per seed


def test_workload_pod_groups_require_a_block_natively_and_prefer_a_rack_by_annotation() -> None:
    """Both readers see the same request: our PodGroup parser (required from the native field,
    preferred from the annotation) and upstream's, which reads only topology[0].key."""
    wl = workloads.build(topo.NAME, 200, 64, "r1")
    assert wl.pod_groups
    assert sum(len(m) for m in wl.gang_members().values()) == len(wl.pods) <= 64
    for pg in wl.pod_groups:
        doc = {**pg, "metadata": {**pg["metadata"], "namespace": "ns"}}
        parsed = native_from_json(doc)
        assert (parsed.topology_required, parsed.topology_preferred) == (B, R), parsed
        assert pg["spec"]["schedulingConstraints"] == {"topology": [{"key": B}]}
    for node in wl.nodes:
        assert node["status"]["allocatable"]["nvidia.com/gpu"] == "8"
        assert {topo.ZONE, B, R} <= node["metadata"]["labels"].keys()


LABELS = {
    "n1": {B: "b0", R: "r0", topo.HOST: "n1"},
    "n2": {B: "b0", R: "r0", topo.HOST: "n2"},
    "n3": {B: "b0", R: "r1", topo.HOST: "n3"},
    "n4": {B: "b1", R: "r2", topo.HOST: "n4"},
}


@pytest.mark.parametrize(
    ("placed", "want"),
    [
        ({"a": "n1", "b": "n1"}, {B: 1, R: 1, topo.HOST: 1}),  # one node
        ({"a": "n1", "b": "n2"}, {B: 1, R: 1, topo.HOST: 2}),  # one rack, two hosts
        ({"a": "n1", "b": "n3"}, {B: 1, R: 2, topo.HOST: 2}),  # one block, two racks
        ({"a": "n1", "b": "n4"}, {B: 2, R: 2, topo.HOST: 2}),  # split across blocks
        ({"a": "n1"}, {B: 1, R: 1, topo.HOST: 1}),  # an unbound member adds no domain
        ({}, {B: 0, R: 0, topo.HOST: 0}),  # nothing bound
        ({"a": "n1", "b": "unlabelled"}, {B: 2, R: 2, topo.HOST: 2}),  # no label: a domain of its own
    ],
)
def test_gang_spans_count_distinct_domains_of_bound_members(placed: dict[str, str], want: dict[str, int]) -> None:
    spans = topo.gang_spans({"g": ["a", "b"]}, placed, LABELS, levels=(B, R, topo.HOST))
    assert spans == {"g": want}


def test_tightness_shares_over_whole_gangs_and_violations_over_all() -> None:
    spans = {
        "in-rack": {B: 1, R: 1},
        "in-block": {B: 1, R: 3},
        "split": {B: 2, R: 2},
        "partial-split": {B: 2, R: 2},  # not whole, still a violation
    }
    got = topo.tightness(spans, ["in-rack", "in-block", "split"], levels=(B, R), required=B)
    assert got["gangs_whole"] == 3
    assert got["one_rack_share"] == pytest.approx(1 / 3)
    assert got["one_block_share"] == pytest.approx(2 / 3)
    assert got["mean_racks"] == pytest.approx(2.0)
    assert got["max_racks"] == 3
    assert got["split_required"] == 2


def test_tightness_without_whole_gangs_is_nan_not_a_perfect_score() -> None:
    got = topo.tightness({"g": {B: 1, R: 1}}, [], levels=(B, R), required=B)
    assert math.isnan(got["one_rack_share"])
    assert got["gangs_whole"] == 0
    assert got["split_required"] == 0


def test_fragmentation_after_counts_stranded_gpus_per_request_size() -> None:
    """n1: 8 - 7 = 1 free; n2: 8 - 4 = 4 free; n3 wholly free; n4 (block b1) 8 - 6 = 2 free."""
    nodes = [_node("n1", "r0", "b0"), _node("n2", "r0", "b0"), _node("n3", "r1", "b0"), _node("n4", "r2", "b1")]
    pods = [_member("p1", "n1", 7), _member("p2", "n2", 4), _member("p4", "n4", 6), _member("gone", "", 8)]
    got = topo.fragmentation_after(nodes, pods)
    assert (got["capacity"], got["free"], got["largest_free_block"]) == (32, 15, 8)
    assert got["free_in_whole_nodes"] == 8
    assert got["stranded"] == {"1": 0, "2": 1, "4": 3, "8": 7}
    assert got["hostable"] == {"1": 15, "2": 2 + 4 + 1, "4": 1 + 2, "8": 1}
    assert (got["blocks_hosting_8"], got["blocks_hosting_2"]) == (1, 2)


def test_report_judges_the_final_pods() -> None:
    nodes = [_node("n1", "r0", "b0"), _node("n2", "r0", "b0"), _node("n4", "r2", "b1")]
    pods = [_member("a0", "n1", 1), _member("a1", "n2", 1), _member("b0", "n1", 1), _member("b1", "n4", 1)]
    pods.append(_member("c0", "", 1))
    got = topo.report({"a": ["a0", "a1"], "b": ["b0", "b1"], "c": ["c0"]}, nodes, pods)
    assert got["gangs_whole"] == 2
    assert got["split_required"] == 1
    assert got["one_rack_share"] == pytest.approx(0.5)
    assert got["fragmentation"]["free"] == 24 - 4
