"""The demo's topology scenario (issue #28): gangs kept inside one rack, or one block when no rack fits.

Five tainted 8-CPU nodes in two blocks (``example.com/block``) of racks (``example.com/rack``)::

    block b1: rack r1 = topo-1, topo-2   rack r2 = topo-3, topo-4
    block b2: rack r3 = topo-5

Both gangs *require* one block (the native ``spec.schedulingConstraints.topology``, the field
kube-scheduler's TopologyAwareWorkloadScheduling reads) and *prefer* one rack (our
``custom-scheduler.io/topology-preferred`` annotation):

- ``rack-job`` (first wave): 3 members × 4 CPUs = 12, which fits in rack r1 or r2 but not in r3
  (8 CPUs): it lands in one rack, r1 (equal leftovers are broken by the domain's value);
- ``block-job`` (second wave, after rack-job is bound): 5 × 4 = 20 CPUs, more than any rack
  holds, so GangScheduling climbs to the block level; only b1 has 20 free (r1's 4 + r2's 16),
  so it spans both of b1's racks and never b2.

Kept apart from ``demo.py`` (which registers it with a few lines) so the demo module stays one
file per concern; the pod factory is passed in, as ``demo._pod`` lives there.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

SCENARIO = "topology"
TITLE = "gangs that require a block and prefer a rack: one fits a rack, the other climbs to a block"
BLOCK = "example.com/block"
RACK = "example.com/rack"
LEVELS = ("topology.kubernetes.io/zone", BLOCK, RACK)
TAINT = {"key": "demo/topology", "value": "true", "effect": "NoSchedule"}
#: node -> (block, rack)
LAYOUT: dict[str, tuple[str, str]] = {
    "topo-1": ("b1", "r1"),
    "topo-2": ("b1", "r1"),
    "topo-3": ("b1", "r2"),
    "topo-4": ("b1", "r2"),
    "topo-5": ("b2", "r3"),
}
GANGS = {"rack-job": 3, "block-job": 5}

#: GangScheduling's args for the demo profile (appended to its ``pluginConfig``); the reservation
#: threshold stays at its default, longer than the demo runs, so no other scenario reserves.
PLUGIN_CONFIG = f"""\
  - name: GangScheduling
    args: {{topologyLevels: [{", ".join(LEVELS)}]}}
"""

PodFactory = Callable[..., dict[str, Any]]
NodeFactory = Callable[..., dict[str, Any]]


def nodes(make_node: NodeFactory) -> list[dict[str, Any]]:
    """The five nodes, tainted so that only this scenario's pods go there."""
    return [
        make_node(name, "8", "16Gi", labels={BLOCK: block, RACK: rack, "demo/topology": "true"}, taints=[TAINT])
        for name, (block, rack) in LAYOUT.items()
    ]


def pod_groups(namespace: str) -> list[dict[str, Any]]:
    """One native PodGroup per gang: quorum = its size, required block, preferred rack."""
    return [
        {
            "apiVersion": "scheduling.k8s.io/v1beta1",
            "kind": "PodGroup",
            "metadata": {
                "name": job,
                "namespace": namespace,
                "annotations": {"custom-scheduler.io/topology-preferred": RACK},
            },
            "spec": {
                "schedulingPolicy": {"gang": {"minCount": size}},
                "schedulingConstraints": {"topology": [{"key": BLOCK}]},
            },
        }
        for job, size in GANGS.items()
    ]


def _members(make_pod: PodFactory, job: str) -> list[dict[str, Any]]:
    on_topo: dict[str, Any] = {
        "nodeSelector": {"demo/topology": "true"},
        "tolerations": [{"key": "demo/topology", "operator": "Exists", "effect": "NoSchedule"}],
    }
    return [
        make_pod(f"{job}-{i}", SCENARIO, cpu="4", mem="1Gi", schedulingGroup={"podGroupName": job}, **on_topo)
        for i in range(GANGS[job])
    ]


def first_wave(make_pod: PodFactory) -> list[dict[str, Any]]:
    return _members(make_pod, "rack-job")


def second_wave(make_pod: PodFactory) -> list[dict[str, Any]]:
    """Created once the first wave settled, so rack-job has taken its rack."""
    return _members(make_pod, "block-job")


def domains(result: Mapping[str, str], job: str) -> tuple[set[str], set[str]]:
    """(blocks, racks) ``job``'s members landed in, from the demo's pod -> node result (a member
    not on a topology node shows as its result text, so a check on the sets fails loudly)."""
    where = [result.get(f"{job}-{i}", "missing") for i in range(GANGS[job])]
    blocks = {LAYOUT[n][0] if n in LAYOUT else n for n in where}
    racks = {LAYOUT[n][1] if n in LAYOUT else n for n in where}
    return blocks, racks


def notes(events: Iterable[Mapping[str, Any]]) -> list[str]:
    """The gangs' ``Scheduled`` events (on the PodGroup), which name the domain each landed in,
    as the report's lines for this scenario: ``rack-job: Successfully assigned 3 pod(s) of pod
    group demo/rack-job: placed in example.com/rack=r1 (...)``."""
    out = []
    for e in events:
        regarding = e.get("regarding") or {}
        if e.get("reason") == "Scheduled" and regarding.get("kind") == "PodGroup" and regarding.get("name") in GANGS:
            out.append(f"{regarding['name']}: {e.get('note', '')}")
    return sorted(out)
