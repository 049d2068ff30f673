"""NodeResourcesBalancedAllocation: the v1.28+ standard-deviation formula over actual requests."""

from __future__ import annotations

from typing import Any

import pytest

from custom_scheduler.errors import ConfigError
from custom_scheduler.framework.types import SUCCESS, CycleState
from custom_scheduler.model import Node
from custom_scheduler.plugins import node_resources_balanced_allocation as ba
from custom_scheduler.plugins.resource_allocation import ResourceSpec
from tests.builders import make_node
from tests.unit.plugins.support import containers, fake_handle, node_info

NO_RESOURCES: tuple[dict[str, str], ...] = ()
CPU_ONLY = ({"cpu": "1000m", "memory": "0"}, {"cpu": "2000m", "memory": "0"})
CPU_AND_MEMORY = ({"cpu": "1000m", "memory": "2000"}, {"cpu": "2000m", "memory": "3000"})


def node(cpu: int, mem: int, scalar: dict[str, str] | None = None) -> Node:
    cap = {"cpu": f"{cpu}m", "memory": str(mem), "pods": "110"} | (scalar or {})
    return make_node(f"n-{cpu}-{mem}").capacity_named(cap).build()


def run(args: ba.NodeResourcesBalancedAllocationArgs | None, pod: Any, nodes: Any) -> list[int]:
    infos = [node_info(n, *(containers(*c).build() for c in existing)) for n, existing in nodes]
    pl = ba.NodeResourcesBalancedAllocation(args, fake_handle(infos))
    state = CycleState()
    p = containers(*pod).build()
    assert pl.pre_score(state, p, infos) == SUCCESS
    return [pl.score(state, p, ni) for ni in infos]


@pytest.mark.parametrize(
    ("args", "pod", "nodes", "want"),
    [
        pytest.param(
            None,
            NO_RESOURCES,
            [(node(4000, 10000), []), (node(4000, 10000), [])],
            [100, 100],
            id="nothing-scheduled-nothing-requested",
        ),
        # 0.75 vs 0.5: std 0.125 → 87; 0.5 vs 0.5 → 100.
        pytest.param(
            None,
            CPU_AND_MEMORY,
            [(node(4000, 10000), []), (node(6000, 10000), [])],
            [87, 100],
            id="differently-sized-machines",
        ),
        pytest.param(
            None,
            NO_RESOURCES,
            [(node(4000, 10000), [NO_RESOURCES]), (node(4000, 10000), [NO_RESOURCES])],
            [100, 100],
            id="no-resources-requested-pods-scheduled",
        ),
        # 0.6 vs 0 → 70; 0.6 vs 0.25 → 82.
        pytest.param(
            None,
            NO_RESOURCES,
            [(node(10000, 20000), [CPU_ONLY, CPU_ONLY]), (node(10000, 20000), [CPU_ONLY, CPU_AND_MEMORY])],
            [70, 82],
            id="pods-scheduled-with-resources",
        ),
        # 0.6 vs 0.25 → 82; 0.6 vs 0.5 → 95.
        pytest.param(
            None,
            CPU_AND_MEMORY,
            [(node(10000, 20000), [CPU_ONLY]), (node(10000, 20000), [CPU_AND_MEMORY])],
            [82, 95],
            id="resources-requested-pods-scheduled",
        ),
        # 0.6 vs 0.2 → 80.
        pytest.param(
            None,
            CPU_AND_MEMORY,
            [(node(10000, 20000), [CPU_ONLY]), (node(10000, 50000), [CPU_AND_MEMORY])],
            [82, 80],
            id="differently-sized-machines-with-pods",
        ),
        # Fractions are capped at 1 (v1.20 scored such nodes 0): 1 vs 0 → 50, 1 vs 0.5 → 75.
        pytest.param(
            None,
            CPU_ONLY,
            [(node(4000, 10000), [CPU_ONLY]), (node(4000, 10000), [CPU_AND_MEMORY])],
            [50, 75],
            id="requested-exceeds-capacity-capped",
        ),
        # Resources with allocatable 0 are skipped: no fractions, std 0.
        pytest.param(
            None,
            NO_RESOURCES,
            [(node(0, 0), [CPU_ONLY]), (node(0, 0), [CPU_AND_MEMORY])],
            [100, 100],
            id="zero-node-resources",
        ),
        # Actual requests, no 100m/200Mi defaults: an empty container adds nothing.
        pytest.param(None, ({},), [(node(4000, 10000), [])], [100], id="actual-requests-no-defaults"),
        # Unrequested extended resources are left out.
        pytest.param(
            ba.NodeResourcesBalancedAllocationArgs(
                (ResourceSpec("cpu"), ResourceSpec("memory"), ResourceSpec("nvidia.com/gpu"))
            ),
            CPU_AND_MEMORY,
            [(node(4000, 10000, {"nvidia.com/gpu": "4"}), [])],
            [87],
            id="unrequested-extended-resource-excluded",
        ),
        # Three fractions 0.25, 0.5, 0.75: population std 0.2041 → 79.
        pytest.param(
            ba.NodeResourcesBalancedAllocationArgs(
                (ResourceSpec("cpu"), ResourceSpec("memory"), ResourceSpec("nvidia.com/gpu"))
            ),
            ({"cpu": "1000m", "memory": "5000", "nvidia.com/gpu": "3"},),
            [(node(4000, 10000, {"nvidia.com/gpu": "4"}), [])],
            [79],
            id="three-resources-population-std",
        ),
        # One resource: std 0 → 100 whatever the utilisation.
        pytest.param(
            ba.NodeResourcesBalancedAllocationArgs((ResourceSpec("cpu"),)),
            CPU_AND_MEMORY,
            [(node(4000, 10000), [])],
            [100],
            id="single-resource",
        ),
    ],
)
def test_score(args: Any, pod: Any, nodes: Any, want: list[int]) -> None:
    assert run(args, pod, nodes) == want


def test_score_without_pre_score() -> None:
    ni = node_info(node(4000, 10000))
    pl = ba.NodeResourcesBalancedAllocation(None, fake_handle([ni]))
    assert pl.score(CycleState(), containers(*CPU_AND_MEMORY).build(), ni) == 87


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
