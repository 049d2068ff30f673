"""The accelerator fragmentation families of ``/metrics`` (server/metrics.py AcceleratorMetrics):
absent until the daemon sets a source, filled from it at each scrape, and a failing source costs
only these families."""

from __future__ import annotations

from custom_scheduler.framework import fragmentation as frag
from custom_scheduler.framework.types import NodeInfo
from custom_scheduler.server.metrics import Metrics
from tests.builders import make_node, make_pod

GPU = "nvidia.com/gpu"


def _nodes(used: dict[str, int]) -> list[NodeInfo]:
    out = []
    for name, n in used.items():
        ni = NodeInfo(make_node(name).label("topology.kubernetes.io/zone", "z1").capacity_named({GPU: "8"}).build())
        for i in range(n):
            ni.add_pod(make_pod(f"{name}-{i}").uid(f"{name}-{i}").req_named({GPU: "1"}).node(name).build())
        out.append(ni)
    return out


def test_no_source_no_families() -> None:
    m = Metrics(process_collectors=False)
    assert m.sample("custom_scheduler_accelerators_free", {"resource": GPU}) is None
    assert b"custom_scheduler_accelerators_free" not in m.render()[0]


def test_families_follow_the_source_at_each_scrape() -> None:
    m = Metrics(process_collectors=False)
    nodes = _nodes({"a": 7, "b": 6})
    m.track_accelerators(lambda: frag.fragmentation(nodes))
    r = {"resource": GPU}
    assert m.sample("custom_scheduler_accelerators_free", r) == 3
    assert m.sample("custom_scheduler_accelerators_allocatable", r) == 16
    assert m.sample("custom_scheduler_accelerator_largest_free_block", r) == 2
    assert m.sample("custom_scheduler_accelerators_stranded", {**r, "size": "2"}) == 1
    assert m.sample("custom_scheduler_accelerators_stranded", {**r, "size": "8"}) == 3
    assert m.sample("custom_scheduler_accelerator_hostable_pods", {**r, "size": "2"}) == 1
    assert m.sample("custom_scheduler_accelerator_domain_free", {**r, "domain": "z1"}) == 3
    nodes[0].remove_pod(nodes[0].pods["a-0"])
    assert m.sample("custom_scheduler_accelerators_free", r) == 4  # read again at the next scrape


def test_a_failing_source_costs_only_its_families() -> None:
    m = Metrics(process_collectors=False)

    def broken() -> list[frag.ResourceFragmentation]:
        raise RuntimeError("boom")

    m.track_accelerators(broken)
    body, _ = m.render()
    assert b"scheduler_pending_pods" in body
    assert b"custom_scheduler_accelerators_free" not in body
