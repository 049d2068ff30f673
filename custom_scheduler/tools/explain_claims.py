"""Which ResourceClaim keeps a pod off a node: the particulars behind DynamicResources' reasons.

DynamicResources says "cannot allocate all claims" or "resourceclaim not available on the node"
without naming the claim. Here each of the pod's claims is looked up in the cluster state's raw
DRA objects and judged against the node: a claim not created yet (from its template) or missing,
one already allocated to devices the node cannot reach (its allocation's node selector: which
term, which field or label), one not allocated (what it asks for, and what the node publishes in
its ResourceSlices). Pure: raw API objects in, lines out; the allocation search itself stays the
plugin's.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from custom_scheduler.api.model import Pod
from custom_scheduler.framework.types import NodeInfo
from custom_scheduler.tools.explain_reasons import term_misses

JSONDict = dict[str, Any]


@dataclass(frozen=True, slots=True)
class ClaimFacts:
    """The cluster's ResourceClaims (by ``namespace/name``) and ResourceSlices."""

    claims: Mapping[str, JSONDict] = field(default_factory=dict)
    slices: tuple[JSONDict, ...] = ()

    @classmethod
    def of(cls, docs: Iterable[Mapping[str, Any]]) -> ClaimFacts:
        claims: dict[str, JSONDict] = {}
        slices: list[JSONDict] = []
        for d in docs:
            meta = d.get("metadata") or {}
            if d.get("kind") == "ResourceClaim":
                claims[f"{meta.get('namespace') or 'default'}/{meta.get('name', '')}"] = dict(d)
            elif d.get("kind") == "ResourceSlice":
                slices.append(dict(d))
        return cls(claims, tuple(slices))


def _wants(claim: Mapping[str, Any]) -> str:
    """``gpu: 2 x class gpu`` for each request (``firstAvailable``: the alternatives' classes)."""
    parts = []
    for r in ((claim.get("spec") or {}).get("devices") or {}).get("requests") or ():
        if r.get("firstAvailable"):
            classes = " or ".join(str(s.get("deviceClassName", "")) for s in r["firstAvailable"])
            parts.append(f"{r.get('name', '')}: one of class {classes}")
            continue
        ex = r.get("exactly") or {}
        amount = "all" if ex.get("allocationMode") == "All" else str(ex.get("count") or 1)
        parts.append(f"{r.get('name', '')}: {amount} x class {ex.get('deviceClassName', '')}")
    return "; ".join(parts) or "no devices"


def _published(node: str, slices: Iterable[Mapping[str, Any]]) -> str:
    """What the node's own ResourceSlices offer, by driver (devices of shared pools not counted)."""
    count: Counter[str] = Counter()
    for s in slices:
        spec = s.get("spec") or {}
        if spec.get("nodeName") == node:
            count[str(spec.get("driver", ""))] += len(spec.get("devices") or ())
    if not count:
        return "the node publishes no ResourceSlice of its own"
    return "the node publishes " + ", ".join(f"{n} device(s) of {d}" for d, n in sorted(count.items()))


def _judge(key: str, claim: Mapping[str, Any], ni: NodeInfo, facts: ClaimFacts) -> str:
    if (claim.get("metadata") or {}).get("deletionTimestamp"):
        return f"ResourceClaim {key} is being deleted"
    allocation = (claim.get("status") or {}).get("allocation")
    if not allocation:
        return f"ResourceClaim {key} is not allocated; it asks for {_wants(claim)}; {_published(ni.name, facts.slices)}"
    terms = (allocation.get("nodeSelector") or {}).get("nodeSelectorTerms")
    labels = ni.node.labels if ni.node else {}
    misses = term_misses([t for t in terms if isinstance(t, Mapping)], ni.name, labels, "term") if terms else None
    if misses:
        return f"ResourceClaim {key} is allocated to devices this node cannot reach ({misses[0].detail})"
    return f"ResourceClaim {key} is allocated to devices this node reaches"


def details(pod: Pod, ni: NodeInfo, facts: ClaimFacts) -> list[str]:
    """For each of the pod's claims: what about it keeps the pod off ``ni``."""
    out = []
    for c in pod.resource_claims:
        if not c.claim:
            out.append(f"claim {c.name}: its ResourceClaim is not created from the template yet")
            continue
        key = f"{pod.namespace}/{c.claim}"
        claim = facts.claims.get(key)
        found = f"ResourceClaim {key} does not exist" if claim is None else _judge(key, claim, ni, facts)
        out.append(f"claim {c.name}: {found}")
    return out
