"""The scheduler extender wire protocol (``k8s.io/kube-scheduler/extender/v1``), without I/O.

What goes out (``ExtenderArgs``, ``ExtenderBindingArgs``, ``ExtenderPreemptionArgs``) and the
checks on what comes back (``ExtenderFilterResult``, ``HostPriorityList``,
``ExtenderBindingResult``, ``ExtenderPreemptionResult``), as pure functions so every malformed
answer can be tested from a table. An answer that is not what the protocol says raises
:class:`ExtenderError` with a message naming the extender; :mod:`~custom_scheduler.framework.extender`
turns that into a value for its callers.

The field names are the Go structs' (no JSON tags: ``Pod``, ``NodeNames``, ``FailedNodes``...), and
answers are read as Go's ``encoding/json`` reads them: an exact key first, else one equal but for
case, and ``null`` as absent.

The pod and nodes sent are rebuilt from the scheduler's projections (:mod:`custom_scheduler.api.model`),
which keep what scheduling reads (metadata, labels, the pod's requests, affinity, tolerations, the
node's allocatable, taints, labels) rather than the whole object; the daemon sends the pod as the
API server has it when it can (see ``Extenders.pod_json``).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from custom_scheduler.api.model import Node, Pod
from custom_scheduler.api.resources import Resources

__all__ = [
    "EXTENDER_NAME",
    "MAX_EXTENDER_PRIORITY",
    "ExtenderError",
    "FilterAnswer",
    "MetaVictims",
    "binding_args",
    "encode",
    "filter_args",
    "node_to_json",
    "parse_binding",
    "parse_filter",
    "parse_preemption",
    "parse_priorities",
    "pod_to_json",
    "preemption_args",
]

#: The highest priority an extender gives a node (``extenderv1.MaxExtenderPriority``); scores are
#: scaled by ``MaxNodeScore / MaxExtenderPriority`` (10) before the weight.
MAX_EXTENDER_PRIORITY = 10
#: The fake plugin name a pod rejected by extenders records (upstream's ``framework.ExtenderName``).
EXTENDER_NAME = "Extender"

JSON = dict[str, Any]


class ExtenderError(RuntimeError):
    """An extender call failed or answered outside the protocol; the message names the extender."""


@dataclass(frozen=True, slots=True)
class FilterAnswer:
    """What a filter call left: the nodes that pass (by name, in the extender's order) and the
    reasons of those that failed, resolvable or not."""

    nodes: tuple[str, ...]
    failed: Mapping[str, str]
    failed_unresolvable: Mapping[str, str]


@dataclass(frozen=True, slots=True)
class MetaVictims:
    """One node's victims in a preemption answer: pod UIDs and the PDB violations."""

    uids: tuple[str, ...]
    num_pdb_violations: int


# --- out -----------------------------------------------------------------------------------------


def _quantities(r: Resources) -> dict[str, str]:
    out: dict[str, str] = {}
    if r.milli_cpu:
        out["cpu"] = f"{r.milli_cpu}m"
    if r.memory:
        out["memory"] = str(r.memory)
    if r.ephemeral_storage:
        out["ephemeral-storage"] = str(r.ephemeral_storage)
    out.update((k, str(v)) for k, v in sorted(r.scalar.items()))
    return out


def _dropping_empty(doc: JSON) -> JSON:
    return {k: v for k, v in doc.items() if v not in (None, "", {}, [], ())}


def pod_to_json(pod: Pod) -> JSON:
    """A v1 Pod rebuilt from the projection: its requests as one container's."""
    meta = _dropping_empty(
        {
            "name": pod.name,
            "namespace": pod.namespace,
            "uid": pod.uid,
            "resourceVersion": pod.resource_version,
            "labels": dict(pod.labels),
            "annotations": dict(pod.annotations),
        }
    )
    spec = _dropping_empty(
        {
            "schedulerName": pod.scheduler_name,
            "nodeName": pod.node_name,
            "priority": pod.priority,
            "priorityClassName": pod.priority_class_name,
            "preemptionPolicy": pod.preemption_policy,
            "nodeSelector": dict(pod.node_selector),
            "affinity": pod.affinity,
            "tolerations": [
                _dropping_empty({"key": t.key, "operator": t.operator, "value": t.value, "effect": t.effect})
                for t in pod.tolerations
            ],
            "topologySpreadConstraints": list(pod.topology_spread_constraints),
        }
    )
    spec["containers"] = [{"name": "requests", "resources": {"requests": _quantities(pod.requests)}}]
    status = _dropping_empty({"phase": pod.phase, "nominatedNodeName": pod.nominated_node_name})
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec, "status": status}


def node_to_json(node: Node) -> JSON:
    """A v1 Node rebuilt from the projection (capacity reported as allocatable)."""
    alloc = _quantities(node.allocatable)
    if node.allocatable.allowed_pods:
        alloc["pods"] = str(node.allocatable.allowed_pods)
    meta = _dropping_empty(
        {"name": node.name, "uid": node.uid, "resourceVersion": node.resource_version, "labels": dict(node.labels)}
    )
    spec = _dropping_empty(
        {
            "unschedulable": node.unschedulable,
            "taints": [_dropping_empty({"key": t.key, "value": t.value, "effect": t.effect}) for t in node.taints],
        }
    )
    images = [{"names": [name], "sizeBytes": size} for name, size in node.images.items()]
    status = _dropping_empty({"capacity": alloc, "allocatable": alloc, "images": images})
    return {"metadata": meta, "spec": spec, "status": status}


def encode(doc: object) -> bytes:
    return json.dumps(doc, separators=(",", ":")).encode()


def filter_args(pod: JSON, nodes: Sequence[JSON] | None, names: Sequence[str] | None) -> JSON:
    """``ExtenderArgs``: the full NodeList, or only the names for a ``nodeCacheCapable`` extender."""
    return {
        "Pod": pod,
        "Nodes": None if nodes is None else {"metadata": {}, "items": list(nodes)},
        "NodeNames": None if names is None else list(names),
    }


def binding_args(pod: Pod, node: str) -> JSON:
    """``ExtenderBindingArgs``."""
    return {"PodName": pod.name, "PodNamespace": pod.namespace, "PodUID": pod.uid, "Node": node}


def preemption_args(
    pod: JSON, victims: Mapping[str, tuple[Sequence[JSON], Sequence[str], int]], node_cache_capable: bool
) -> JSON:
    """``ExtenderPreemptionArgs``: per node (victim pods as JSON, their UIDs, PDB violations); the
    UIDs only (``NodeNameToMetaVictims``) for a ``nodeCacheCapable`` extender."""
    if node_cache_capable:
        meta = {
            node: {"Pods": [{"UID": uid} for uid in uids], "NumPDBViolations": pdb}
            for node, (_, uids, pdb) in victims.items()
        }
        return {"Pod": pod, "NodeNameToVictims": None, "NodeNameToMetaVictims": meta}
    full = {node: {"Pods": list(pods), "NumPDBViolations": pdb} for node, (pods, _, pdb) in victims.items()}
    return {"Pod": pod, "NodeNameToVictims": full, "NodeNameToMetaVictims": None}


# --- in ------------------------------------------------------------------------------------------


def _decode(body: bytes, ext: str, verb: str) -> Any:
    try:
        return json.loads(body)
    except ValueError as e:
        raise ExtenderError(f'extender "{ext}" {verb}: invalid JSON in the answer: {e}') from None


def _field(doc: Mapping[str, Any], name: str) -> Any:
    """``doc[name]`` as Go's decoder finds it: exact key, else a key equal ignoring case."""
    if name in doc:
        return doc[name]
    low = name.lower()
    return next((v for k, v in doc.items() if isinstance(k, str) and k.lower() == low), None)


def _object(body: bytes, ext: str, verb: str, what: str) -> Mapping[str, Any]:
    doc = _decode(body, ext, verb)
    if doc is None:
        return {}
    if not isinstance(doc, dict):
        raise ExtenderError(f'extender "{ext}" {verb}: expected {what} object, got {type(doc).__name__}')
    return doc


def _string_map(value: Any, ext: str, verb: str, what: str) -> dict[str, str]:
    if value is None:
        return {}
    if not isinstance(value, dict) or not all(isinstance(v, str) for v in value.values()):
        raise ExtenderError(f'extender "{ext}" {verb}: {what} must map node names to strings')
    return value


def _error_string(doc: Mapping[str, Any], ext: str, verb: str) -> None:
    err = _field(doc, "Error")
    if err is not None and not isinstance(err, str):
        raise ExtenderError(f'extender "{ext}" {verb}: Error must be a string')
    if err:
        raise ExtenderError(f'extender "{ext}" {verb}: {err}')


def _answered_names(doc: Mapping[str, Any], ext: str, verb: str, node_cache_capable: bool) -> list[Any]:
    """The names of the nodes that passed: ``NodeNames`` from a node-cache-capable extender, else
    ``Nodes.items[].metadata.name``; neither means none passed (as upstream reads it)."""
    names = _field(doc, "NodeNames")
    if node_cache_capable and names is not None:
        if not isinstance(names, list):
            raise ExtenderError(f'extender "{ext}" {verb}: NodeNames must be a list')
        return names
    nodes = _field(doc, "Nodes")
    if nodes is None:
        return []
    items = _field(nodes, "items") if isinstance(nodes, dict) else None
    if not isinstance(items, list | None) or not all(isinstance(n, dict) for n in items or ()):
        raise ExtenderError(f'extender "{ext}" {verb}: Nodes must be a NodeList')
    return [(_field(n, "metadata") or {}).get("name") for n in items or ()]


def parse_filter(body: bytes, ext: str, verb: str, sent: Sequence[str], node_cache_capable: bool) -> FilterAnswer:
    """An ``ExtenderFilterResult``; every node it lets through must be one of ``sent``."""
    doc = _object(body, ext, verb, "an ExtenderFilterResult")
    _error_string(doc, ext, verb)
    known = set(sent)
    names = _answered_names(doc, ext, verb, node_cache_capable)
    for name in names:
        if not isinstance(name, str) or name not in known:
            raise ExtenderError(
                f'extender "{ext}" claims a filtered node "{name}" which is not found in the input node list'
            )
    return FilterAnswer(
        tuple(names),
        _string_map(_field(doc, "FailedNodes"), ext, verb, "FailedNodes"),
        _string_map(_field(doc, "FailedAndUnresolvableNodes"), ext, verb, "FailedAndUnresolvableNodes"),
    )


def _int64(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and -(2**63) <= value < 2**63


def parse_priorities(body: bytes, ext: str, verb: str) -> list[tuple[str, int]]:
    """A ``HostPriorityList``: ``[{"Host": name, "Score": n}]`` (hosts not sent are ignored later)."""
    doc = _decode(body, ext, verb)
    if doc is None:
        return []
    if not isinstance(doc, list) or not all(isinstance(h, dict) for h in doc):
        raise ExtenderError(f'extender "{ext}" {verb}: expected a HostPriorityList (a list of Host/Score)')
    out = []
    for item in doc:
        host, score = _field(item, "Host"), _field(item, "Score")
        score = 0 if score is None else score
        if not isinstance(host, str | None) or not _int64(score):
            raise ExtenderError(f'extender "{ext}" {verb}: invalid HostPriority {item!r:.200}')
        out.append((host or "", int(score)))
    return out


def parse_binding(body: bytes, ext: str, verb: str) -> None:
    """An ``ExtenderBindingResult``: raises when it carries an ``Error``."""
    _error_string(_object(body, ext, verb, "an ExtenderBindingResult"), ext, verb)


def parse_preemption(body: bytes, ext: str, verb: str) -> dict[str, MetaVictims]:
    """An ``ExtenderPreemptionResult``: ``NodeNameToMetaVictims`` (always UIDs, whatever was sent)."""
    doc = _object(body, ext, verb, "an ExtenderPreemptionResult")
    meta = _field(doc, "NodeNameToMetaVictims")
    if meta is None:
        return {}
    if not isinstance(meta, dict):
        raise ExtenderError(f'extender "{ext}" {verb}: NodeNameToMetaVictims must be an object')
    out: dict[str, MetaVictims] = {}
    for node, raw in meta.items():
        victims = raw or {}
        pods = _field(victims, "Pods") if isinstance(victims, dict) else None
        pdb = _field(victims, "NumPDBViolations") if isinstance(victims, dict) else None
        pdb = 0 if pdb is None else pdb
        if not isinstance(victims, dict) or not isinstance(pods, list | None) or not _int64(pdb):
            raise ExtenderError(f'extender "{ext}" {verb}: invalid MetaVictims for node "{node}"')
        uids = tuple(_field(p, "UID") if isinstance(p, dict) else None for p in pods or ())
        if not all(isinstance(u, str) for u in uids):
            raise ExtenderError(f'extender "{ext}" {verb}: invalid MetaPod for node "{node}"')
        out[node] = MetaVictims(uids, int(pdb))  # type: ignore[arg-type]
    return out
