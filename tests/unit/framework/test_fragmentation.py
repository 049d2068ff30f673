"""Stranded accelerators (framework/fragmentation.py): each number checked on small clusters whose
answer is worked out by hand, the configuration's bad input, and the daemon's view of a cache."""

from __future__ import annotations

import pytest

from custom_scheduler.core.cache import Cache
from custom_scheduler.framework import fragmentation as frag
from custom_scheduler.framework.types import NodeInfo, Snapshot
from custom_scheduler.plugins.accelerators import AcceleratorIsolationArgs
from tests.builders import make_node, make_pod

GPU = "nvidia.com/gpu"


def _node(name: str, gpus: int, used: int = 0, *, zone: str = "", cordoned: bool = False) -> NodeInfo:
    b = make_node(name).capacity_named({"cpu": "64", "memory": "256Gi", "pods": "110", GPU: str(gpus)})
    if zone:
        b = b.label("topology.kubernetes.io/zone", zone)
    if cordoned:
        b = b.unschedulable()
    ni = NodeInfo(b.build())
    for i in range(used):
        ni.add_pod(make_pod(f"{name}-p{i}").uid(f"{name}-p{i}").req_named({GPU: "1"}).node(name).build())
    return ni


CASES = [
    # (id, nodes, free, largest, stranded by size, hostable by size)
    ("empty cluster", [], 0, 0, {1: 0, 2: 0, 4: 0, 8: 0}, {1: 0, 2: 0, 4: 0, 8: 0}),
    ("whole nodes", [_node("a", 8), _node("b", 8)], 16, 8, {1: 0, 2: 0, 4: 0, 8: 0}, {1: 16, 2: 8, 4: 4, 8: 2}),
    (
        "one free on each of eight nodes",
        [_node(f"n{i}", 8, used=7) for i in range(8)],
        8,
        1,
        {1: 0, 2: 8, 4: 8, 8: 8},
        {1: 8, 2: 0, 4: 0, 8: 0},
    ),
    (
        "mixed: 3, 5, full, whole",
        [_node("a", 8, 5), _node("b", 8, 3), _node("c", 8, 8), _node("d", 8)],
        16,
        8,
        {1: 0, 2: 0, 4: 3, 8: 8},
        {1: 16, 2: 1 + 2 + 4, 4: 0 + 1 + 2, 8: 1},
    ),
    (
        "cordoned node counts for nothing",
        [_node("a", 8, cordoned=True), _node("b", 4, 1)],
        3,
        3,
        {1: 0, 2: 0, 4: 3, 8: 3},
        {1: 3, 2: 1, 4: 0, 8: 0},
    ),
    (
        "node without GPUs is ignored",
        [NodeInfo(make_node("cpu").capacity(cpu="8").build()), _node("g", 2, 1)],
        1,
        1,
        {1: 0, 2: 1, 4: 1, 8: 1},
        {1: 1, 2: 0, 4: 0, 8: 0},
    ),
]


@pytest.mark.parametrize(
    ("nodes", "free", "largest", "stranded", "hostable"), [c[1:] for c in CASES], ids=[c[0] for c in CASES]
)
def test_fragmentation_numbers(
    nodes: list[NodeInfo], free: int, largest: int, stranded: dict[int, int], hostable: dict[int, int]
) -> None:
    (f,) = frag.fragmentation(nodes)
    assert (f.resource, f.free, f.largest_free_block) == (GPU, free, largest)
    assert dict(f.stranded) == stranded
    assert dict(f.hostable) == hostable


def test_overcommitted_node_is_zero_free_not_negative() -> None:
    ni = _node("a", 2, used=3)
    assert frag.node_free(ni, GPU) == 0


def test_domains_sum_their_nodes_and_skip_unlabelled_ones() -> None:
    nodes = [_node("a", 8, 7, zone="z1"), _node("b", 8, 6, zone="z1"), _node("c", 8, 0, zone="z2"), _node("d", 8, 4)]
    (f,) = frag.fragmentation(nodes)
    assert dict(f.domains) == {"z1": frag.DomainFree(3, 2), "z2": frag.DomainFree(8, 8)}
    assert f.free == 15  # the unlabelled node still counts cluster-wide
    (no_domains,) = frag.fragmentation(nodes, frag.FragmentationConfig(domain_label=""))
    assert not no_domains.domains


def test_several_resources_in_config_order() -> None:
    b = make_node("x").capacity_named({"cpu": "8", GPU: "4", "amd.com/gpu": "2"}).build()
    cfg = frag.FragmentationConfig(resources=("amd.com/gpu", GPU), sizes=(2,))
    got = frag.fragmentation([NodeInfo(b)], cfg)
    assert [(f.resource, f.free, dict(f.hostable)) for f in got] == [("amd.com/gpu", 2, {2: 1}), (GPU, 4, {2: 2})]


@pytest.mark.parametrize(
    ("env", "sizes", "label", "problem"),
    [
        ({}, (1, 2, 4, 8), "topology.kubernetes.io/zone", ""),
        ({frag.ENV_SIZES: "8, 2,2"}, (2, 8), "topology.kubernetes.io/zone", ""),
        ({frag.ENV_SIZES: "2,x"}, (1, 2, 4, 8), "topology.kubernetes.io/zone", "'x' is not an integer"),
        ({frag.ENV_SIZES: "0"}, (1, 2, 4, 8), "topology.kubernetes.io/zone", "must be positive"),
        ({frag.ENV_SIZES: " , "}, (1, 2, 4, 8), "topology.kubernetes.io/zone", "no request sizes"),
        ({frag.ENV_DOMAIN_LABEL: "rack"}, (1, 2, 4, 8), "rack", ""),
    ],
)
def test_config_from_env_keeps_defaults_on_bad_input(
    env: dict[str, str], sizes: tuple[int, ...], label: str, problem: str
) -> None:
    cfg, problems = frag.config_from_env(environ=env)
    assert (cfg.sizes, cfg.domain_label) == (sizes, label)
    assert (problem in problems[0]) if problem else problems == []


def test_profile_resources_follow_accelerator_isolation_args() -> None:
    args: list[dict[str, object]] = [
        {"AcceleratorIsolation": AcceleratorIsolationArgs(resources=("a.com/gpu", GPU))},
        {"Other": None},
    ]
    assert frag.profile_resources(args) == ("a.com/gpu", GPU)
    assert frag.profile_resources([{}]) == frag.DEFAULT_RESOURCES


def test_daemon_view_reads_the_cache_as_it_changes_and_leaves_the_primary_snapshot_alone(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv(frag.ENV_SIZES, "1,bad")
    cache = Cache()
    primary = Snapshot()
    view, problems = frag.daemon_view(cache.update_snapshot, primary, [])
    assert len(problems) == 1
    assert frag.ENV_SIZES in problems[0]
    cache.add_node(make_node("a").capacity_named({"cpu": "8", GPU: "8"}).build())
    pod = make_pod("p").uid("p").req_named({GPU: "3"}).node("a").build()
    cache.add_pod(pod)
    (f,) = view()
    assert (f.free, f.largest_free_block) == (5, 5)
    cache.remove_pod(pod)
    (f,) = view()
    assert f.free == 8
    # The scheduling loop's snapshot is still the one the cache tracks changes for.
    cache.update_snapshot(primary)
    assert primary.node_infos["a"].requested.scalar.get(GPU, 0) == 0
