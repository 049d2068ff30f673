"""Placement checks of the scheduler_perf workloads that :func:`bench.workloads.placement` does not
make: host ports, required pod affinity, volumes. Each takes the round's nodes and its final pods
(bound or not) and returns the number of violations; a :class:`~bench.workloads.Workload` names its
checks in ``checks`` and the harness adds them to the round's violations, the same for both
schedulers. Pure, so each can be shown to flag what it claims to (tests/unit/bench/test_perf_checks.py).
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from bench.perf_objects import CSI_ALLOCATABLE
from bench.workloads import _matches

JSON = dict[str, Any]
CheckFn = Callable[[Sequence[JSON], Sequence[JSON]], int]


def _bound(nodes: Sequence[JSON], pods: Sequence[JSON]) -> tuple[dict[str, JSON], list[JSON]]:
    by_name = {n["metadata"]["name"]: n for n in nodes}
    return by_name, [p for p in pods if p["spec"].get("nodeName") in by_name]


def _host_ports(pod: JSON) -> Iterator[tuple[str, str, int]]:
    for c in pod["spec"].get("containers") or ():
        for port in c.get("ports") or ():
            if port.get("hostPort"):
                yield port.get("hostIP") or "0.0.0.0", port.get("protocol") or "TCP", int(port["hostPort"])


def host_port_conflicts(nodes: Sequence[JSON], pods: Sequence[JSON]) -> int:
    """Two pods on one node with the same host port (and protocol and host IP): each one beyond
    the first is a violation (NodePorts' rule)."""
    _, bound = _bound(nodes, pods)
    seen = Counter((p["spec"]["nodeName"], *hp) for p in bound for hp in _host_ports(p))
    return sum(c - 1 for c in seen.values() if c > 1)


def _required_affinity_terms(pod: JSON) -> list[JSON]:
    aff = (pod["spec"].get("affinity") or {}).get("podAffinity") or {}
    return list(aff.get("requiredDuringSchedulingIgnoredDuringExecution") or ())


def pod_affinity_unmet(nodes: Sequence[JSON], pods: Sequence[JSON]) -> int:
    """A bound pod with a required pod-affinity term and no pod matching the term's selector in its
    topology domain (the pod itself counts when it matches: the first of a group that is affine to
    itself may start the domain), or on a node without the term's topology key."""
    by_name, bound = _bound(nodes, pods)

    def domain(p: JSON, key: str) -> str | None:
        value = (by_name[p["spec"]["nodeName"]]["metadata"].get("labels") or {}).get(key)
        return str(value) if value is not None else None

    index: dict[str, dict[str, list[JSON]]] = {}
    out = 0
    for p in bound:
        for term in _required_affinity_terms(p):
            key = term["topologyKey"]
            if key not in index:
                index[key] = defaultdict(list)
                for q in bound:
                    d = domain(q, key)
                    if d is not None:
                        index[key][d].append(q)
            d = domain(p, key)
            ns = p["metadata"].get("namespace")
            candidates = index[key].get(d, []) if d is not None else []
            if not any(
                q["metadata"].get("namespace") == ns
                and _matches(term["labelSelector"], q["metadata"].get("labels") or {})
                for q in candidates
            ):
                out += 1
    return out


def _claims(pod: JSON) -> list[str]:
    return [
        v["persistentVolumeClaim"]["claimName"]
        for v in pod["spec"].get("volumes") or ()
        if v.get("persistentVolumeClaim")
    ]


def shared_claims(nodes: Sequence[JSON], pods: Sequence[JSON]) -> int:
    """A claim in use by more than one bound pod (the workloads' claims are each one pod's: the
    ReadWriteOncePod ones must be, VolumeRestrictions' rule), each pod beyond the first."""
    _, bound = _bound(nodes, pods)
    users = Counter((p["metadata"].get("namespace"), c) for p in bound for c in _claims(p))
    return sum(n - 1 for n in users.values() if n > 1)


def volume_limit_exceeded(nodes: Sequence[JSON], pods: Sequence[JSON]) -> int:
    """Claims on a node beyond its CSI volume limit (allocatable ``attachable-volumes-csi-*``, what
    its CSINode says too): NodeVolumeLimits' rule, each volume over the limit."""
    by_name, bound = _bound(nodes, pods)
    per_node: dict[str, set[tuple[Any, str]]] = defaultdict(set)
    for p in bound:
        per_node[p["spec"]["nodeName"]].update((p["metadata"].get("namespace"), c) for c in _claims(p))
    out = 0
    for name, claims in per_node.items():
        limit = (by_name[name]["status"].get("allocatable") or {}).get(CSI_ALLOCATABLE)
        if limit is not None:
            out += max(0, len(claims) - int(limit))
    return out
