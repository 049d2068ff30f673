"""Which volume or claim keeps a pod off a node: the particulars behind the volume plugins' reasons.

VolumeBinding says "node(s) didn't match PersistentVolume's node affinity", VolumeZone "node(s)
had no available volume zone", and neither names the claim, the volume or the label. Here each of
the pod's PVCs is followed to its PersistentVolume in the cluster state's raw objects and checked
against the node as those plugins check it: a missing or unbound claim (and its StorageClass's
binding mode), a bound volume that does not exist, a volume's required node affinity (which term,
which label), its zone/region labels against the node's. Pure: raw API objects in, lines out.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from custom_scheduler.api.model import Pod
from custom_scheduler.framework.types import NodeInfo
from custom_scheduler.tools.explain_reasons import term_misses

JSONDict = dict[str, Any]

#: The labels VolumeZone compares (a PV's value may list several zones joined by ``__``).
ZONE_LABELS = (
    "topology.kubernetes.io/zone",
    "topology.kubernetes.io/region",
    "failure-domain.beta.kubernetes.io/zone",
    "failure-domain.beta.kubernetes.io/region",
)


@dataclass(frozen=True, slots=True)
class VolumeFacts:
    """The cluster's claims (by ``namespace/name``), volumes and StorageClasses (by name)."""

    pvcs: Mapping[str, JSONDict] = field(default_factory=dict)
    pvs: Mapping[str, JSONDict] = field(default_factory=dict)
    classes: Mapping[str, JSONDict] = field(default_factory=dict)

    @classmethod
    def of(cls, docs: Iterable[Mapping[str, Any]]) -> VolumeFacts:
        """From a cluster state's storage objects (other kinds are ignored)."""
        pvcs: dict[str, JSONDict] = {}
        pvs: dict[str, JSONDict] = {}
        classes: dict[str, JSONDict] = {}
        for d in docs:
            meta = d.get("metadata") or {}
            name = str(meta.get("name") or "")
            if d.get("kind") == "PersistentVolumeClaim":
                pvcs[f"{meta.get('namespace') or 'default'}/{name}"] = dict(d)
            elif d.get("kind") == "PersistentVolume":
                pvs[name] = dict(d)
            elif d.get("kind") == "StorageClass":
                classes[name] = dict(d)
        return cls(pvcs, pvs, classes)


def _spec(doc: Mapping[str, Any]) -> Mapping[str, Any]:
    s = doc.get("spec")
    return s if isinstance(s, Mapping) else {}


def _unbound(claim: str, pvc: Mapping[str, Any], facts: VolumeFacts) -> str:
    sc_name = _spec(pvc).get("storageClassName")
    if not sc_name:
        return f"PVC {claim} is unbound and names no StorageClass: it waits for a matching PV"
    sc = facts.classes.get(str(sc_name))
    if sc is None:
        return f"PVC {claim} is unbound; its StorageClass {sc_name} does not exist"
    if sc.get("volumeBindingMode") == "WaitForFirstConsumer":
        return (
            f"PVC {claim} is unbound (StorageClass {sc_name} binds on first use): neither a matching PV "
            "nor provisioning fits this node"
        )
    return (
        f"PVC {claim} is unbound and StorageClass {sc_name} binds Immediately: the PV controller has not bound it yet"
    )


def _zone_conflicts(pv_name: str, pv: Mapping[str, Any], node_labels: Mapping[str, str]) -> list[str]:
    out = []
    pv_labels = (pv.get("metadata") or {}).get("labels") or {}
    for key in ZONE_LABELS:
        want = pv_labels.get(key)
        if want is None:
            continue
        allowed = set(str(want).split("__"))
        have = node_labels.get(key)
        if have not in allowed:
            where = f"node has {key}={have}" if have is not None else f"node has no label {key}"
            out.append(f"PV {pv_name} is in {key}={'|'.join(sorted(allowed))}: {where}")
    return out


def _bound(claim: str, pv_name: str, facts: VolumeFacts, ni: NodeInfo) -> list[str]:
    pv = facts.pvs.get(pv_name)
    if pv is None:
        return [f"PVC {claim} is bound to PV {pv_name}, which does not exist"]
    node_labels = ni.node.labels if ni.node else {}
    out = _zone_conflicts(pv_name, pv, node_labels)
    required = ((_spec(pv).get("nodeAffinity") or {}).get("required") or {}).get("nodeSelectorTerms")
    if isinstance(required, list):
        misses = term_misses(
            [t for t in required if isinstance(t, Mapping)], ni.name, node_labels, "node affinity term"
        )
        out += [f"PV {pv_name} (PVC {claim}) {m.detail}" for m in misses or ()]
    return out


def details(pod: Pod, ni: NodeInfo, facts: VolumeFacts) -> list[str]:
    """For each of the pod's PVCs: what about it keeps the pod off ``ni``; a claim with nothing
    found against this node is still named (another check, e.g. a volume limit, may be the one)."""
    out: list[str] = []
    for v in pod.volumes:
        if not v.claim:
            continue
        claim = f"{pod.namespace}/{v.claim}"
        pvc = facts.pvcs.get(claim)
        found: list[str]
        if pvc is None:
            found = [f"PVC {claim} does not exist"]
        elif (pvc.get("metadata") or {}).get("deletionTimestamp"):
            found = [f"PVC {claim} is being deleted"]
        elif pv_name := str(_spec(pvc).get("volumeName") or ""):
            found = _bound(claim, pv_name, facts, ni)
        else:
            found = [_unbound(claim, pvc, facts)]
        out += [f"volume {v.name}: {f}" for f in found] or [f"volume {v.name}: PVC {claim}"]
    return out
