"""NodeResourcesBalancedAllocation: v1.37's score of the change in balance, over actual requests."""

from __future__ import annotations

from typing import Any

import pytest

from custom_scheduler.api.model import Node
from custom_scheduler.errors import ConfigError
from custom_scheduler.framework.types import SKIP, SUCCESS, CycleState
from custom_scheduler.plugins import node_resources_balanced_allocation as ba
from custom_scheduler.plugins.resource_allocation import ResourceSpec
from tests.builders import make_node
from tests.unit.plugins.support import containers, fake_handle, node_info

NO_RESOURCES: tuple[dict[str, str], ...] = ()
CPU_ONLY = ({"cpu": "1000m", "memory": "0"}, {"cpu": "2000m", "memory": "0"})
CPU_AND_MEMORY = ({"cpu": "1000m", "memory": "2000"}, {"cpu": "2000m", "memory": "3000"})
MEMORY_ONLY = ({"memory": "2000"}, {"memory": "3000"})
WITH_GPU = ba.NodeResourcesBalancedAllocationArgs(
    (ResourceSpec("cpu"), ResourceSpec("memory"), ResourceSpec("nvidia.com/gpu"))
)


def node(cpu: int, mem: int, scalar: dict[str, str] | None = None) -> Node:
    cap = {"cpu": f"{cpu}m", "memory": str(mem), "pods": "110"} | (scalar or {})
    return make_node(f"n-{cpu}-{mem}").capacity_named(cap).build()


def run(args: ba.NodeResourcesBalancedAllocationArgs | None, pod: Any, nodes: Any) -> list[int]:
    infos = [node_info(n, *(containers(*c).build() for c in existing)) for n, existing in nodes]
    pl = ba.NodeResourcesBalancedAllocation(args, fake_handle(infos))
    state = CycleState()
    p = containers(*pod).build()
    assert pl.pre_score(state, p, infos) == SUCCESS
    got = [pl.score(state, p, ni) for ni in infos]
    assert list(pl.score_batch(state, p, infos)) == got
    return got


# The cases of v1.37's balanced_allocation_test.go (the score of the change in balance the pod
# makes: 50 + (50 + with − without) / 2), then ours. "87 -> 100" reads: balance 100 without the pod,
# 87 with it.
@pytest.mark.parametrize(
    ("args", "pod", "nodes", "want"),
    [
        # 0 -> 0.75 vs 0 -> 0.5: 100 -> 87, score 68; 0.5 vs 0.5: 100 -> 100, score 75.
        pytest.param(
            None,
            CPU_AND_MEMORY,
            [(node(4000, 10000), []), (node(6000, 10000), [])],
            [68, 75],
            id="nothing-scheduled-resources-requested-differently-sized-nodes",
        ),
        # 0.3/0 -> 0.6/0.25: 85 -> 82, 73; 0.3/0.25 -> 0.6/0.5: 97 -> 95, 74.
        pytest.param(
            None,
            CPU_AND_MEMORY,
            [(node(10000, 20000), [CPU_ONLY]), (node(10000, 20000), [CPU_AND_MEMORY])],
            [73, 74],
            id="resources-requested-pods-scheduled-with-resources",
        ),
        # 85 -> 82, 73; 0.3/0.1 -> 0.6/0.2: 90 -> 80, 70.
        pytest.param(
            None,
            CPU_AND_MEMORY,
            [(node(10000, 20000), [CPU_ONLY]), (node(10000, 50000), [CPU_AND_MEMORY])],
            [73, 70],
            id="differently-sized-machines-with-pods",
        ),
        # 1/0 -> 1/1: 50 -> 100, the maximum 100; 0/0 -> 0/1: 100 -> 50, the minimum 50.
        pytest.param(
            None,
            MEMORY_ONLY,
            [(node(3000, 5000), [CPU_ONLY]), (node(3000, 5000), [])],
            [100, 50],
            id="nodes-reach-min-and-max-score",
        ),
        # 0.5/0 -> 1/0: 75 -> 50, 62; 0.5/0.5 -> 1/0.5: 100 -> 75, 62 (fractions are capped at 1).
        pytest.param(
            None,
            CPU_ONLY,
            [(node(6000, 10000), [CPU_ONLY]), (node(6000, 10000), [CPU_AND_MEMORY])],
            [62, 62],
            id="requested-resources-at-node-capacity",
        ),
        # cpu 0.857, memory 0.125, gpu 3/8 -> 4/8: 69 -> 70, 75; gpu 0 -> 1/8: 62 -> 65, 76.
        pytest.param(
            WITH_GPU,
            ({"cpu": "0", "memory": "0", "nvidia.com/gpu": "1"},),
            [
                (
                    node(3500, 40000, {"nvidia.com/gpu": "8"}),
                    [({"cpu": "1000m", "memory": "2000"}, {"cpu": "2000m", "memory": "3000", "nvidia.com/gpu": "3"})],
                ),
                (node(3500, 40000, {"nvidia.com/gpu": "8"}), [CPU_AND_MEMORY]),
            ],
            [75, 76],
            id="requested-scalar-resource-included",
        ),
        # The gpu is left out when the pod requests none: 100 -> 63, 56 on both nodes.
        pytest.param(
            WITH_GPU,
            CPU_AND_MEMORY,
            [(node(3500, 40000, {"nvidia.com/gpu": "8"}), []), (node(3500, 40000), [])],
            [56, 56],
            id="unrequested-scalar-resource-excluded",
        ),
        # Ours: resources with allocatable 0 are left out; no two fractions, balance 100 -> 100, 75.
        pytest.param(
            None,
            CPU_AND_MEMORY,
            [(node(0, 0), [CPU_ONLY]), (node(0, 10000), [CPU_AND_MEMORY])],
            [75, 75],
            id="zero-node-resources",
        ),
        # Actual requests, no 100m/200Mi defaults: a container without requests adds nothing.
        pytest.param(None, ({}, {"cpu": "1000m"}), [(node(4000, 10000), [])], [68], id="actual-requests-no-defaults"),
        # Three fractions 0.25, 0.5, 0.75: population std 0.2041, 100 -> 79, score 64.
        pytest.param(
            WITH_GPU,
            ({"cpu": "1000m", "memory": "5000", "nvidia.com/gpu": "3"},),
            [(node(4000, 10000, {"nvidia.com/gpu": "4"}), [])],
            [64],
            id="three-resources-population-std",
        ),
        # One resource: balance always 100, score 75 whatever the utilisation.
        pytest.param(
            ba.NodeResourcesBalancedAllocationArgs((ResourceSpec("cpu"),)),
            CPU_AND_MEMORY,
            [(node(4000, 10000), [])],
            [75],
            id="single-resource",
        ),
    ],
)
def test_score(args: Any, pod: Any, nodes: Any, want: list[int]) -> None:
    assert run(args, pod, nodes) == want


def test_best_effort_pod_is_skipped_at_pre_score() -> None:
    """v1.37 skips the plugin for a pod requesting none of the resources (it logs no score for it);
    without PreScore, Score answers 0."""
    infos = [node_info(node(4000, 10000)), node_info(node(4000, 10000), containers(*CPU_ONLY).build())]
    pl = ba.NodeResourcesBalancedAllocation(None, fake_handle(infos))
    pod = containers({}, {}).build()
    state = CycleState()
    assert pl.pre_score(state, pod, infos) == SKIP
    assert [pl.score(CycleState(), pod, ni) for ni in infos] == [0, 0]
    assert list(pl.score_batch(CycleState(), pod, infos)) == [0, 0]


def test_score_without_pre_score() -> None:
    """Upstream's "if PreScore not called" case: the same scores."""
    infos = [
        node_info(node(10000, 20000), containers(*CPU_ONLY).build()),
        node_info(node(10000, 20000), containers(*CPU_AND_MEMORY).build()),
    ]
    pl = ba.NodeResourcesBalancedAllocation(None, fake_handle(infos))
    pod = containers(*CPU_AND_MEMORY).build()
    assert [pl.score(CycleState(), pod, ni) for ni in infos] == [73, 74]


def test_parse_args_defaults() -> None:
    want = ba.NodeResourcesBalancedAllocationArgs((ResourceSpec("cpu", 1), ResourceSpec("memory", 1)))
    assert ba.parse_args(None, "a") == want
    assert ba.parse_args({"resources": []}, "a") == want
    got = ba.parse_args(
        {"resources": [{"name": "cpu"}, {"name": "memory", "weight": 0}, {"name": "nvidia.com/gpu", "weight": 1}]}, "a"
    )
    assert got.resources == (ResourceSpec("cpu", 1), ResourceSpec("memory", 1), ResourceSpec("nvidia.com/gpu", 1))


@pytest.mark.parametrize(
    ("raw", "want"),
    [
        pytest.param(
            {"resources": [{"name": "cpu", "weight": 2}]},
            [("a.resources[0].weight", "must be 1")],
            id="weight-must-be-one",
        ),
        pytest.param(
            {"resources": [{"name": "cpu"}, {"name": "cpu"}]},
            [("a.resources[1].name", 'Duplicate value: "cpu"')],
            id="duplicate-resource",
        ),
        pytest.param(
            {"resources": [{"weight": 1}]}, [("a.resources[0].name", "resource name is required")], id="name-required"
        ),
        pytest.param({"resources": "cpu"}, [("a.resources", "must be a list, got str")], id="resources-not-a-list"),
        pytest.param({"shape": []}, [("a.shape", "unknown field (known fields: resources)")], id="unknown-field"),
    ],
)
def test_parse_args_errors(raw: dict[str, Any], want: list[tuple[str, str]]) -> None:
    with pytest.raises(ConfigError) as exc:
        ba.parse_args(raw, "a")
    assert [(e.path, e.message) for e in exc.value.errors] == want
