"""What ``explain`` can say beyond upstream's reason strings, and the smallest change that would
make a node fit.

Upstream's FailedScheduling message is deliberately terse ("node(s) had untolerated taint(s)",
"Insufficient cpu") and the daemon keeps it so, word for word. An operator asking *why* wants the
particulars the plugins computed and threw away: which taint, which affinity term and label, short
by how much of which resource, which volume or claim. This module re-derives them from the pod and
the node (the same facts the plugins read), so the event text stays upstream's while ``explain``
says more. Everything here is pure: a pod and a :class:`NodeInfo` in, strings out.

:func:`node_fix` turns the same facts into "what would make it fit" on one node: the resources to
free, the taints to tolerate, the labels to add or remove. A failing plugin this module does not
understand (inter-pod affinity, spreading, ports...) is listed as such rather than guessed at, and
ranks the node lower (:func:`best_fixes`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from custom_scheduler.api import labels
from custom_scheduler.api.model import HostPort, Pod, Taint, tolerates_all
from custom_scheduler.api.resources import CPU, EPHEMERAL_STORAGE, MEMORY
from custom_scheduler.framework.types import NodeInfo

#: Plugin names (spelled here, not imported, so the pure module needs no plugin).
FIT, TAINTS, AFFINITY, UNSCHEDULABLE = "NodeResourcesFit", "TaintToleration", "NodeAffinity", "NodeUnschedulable"
PORTS, NODE_NAME = "NodePorts", "NodeName"
_ANY_IP = "0.0.0.0"
VOLUME_PLUGINS = ("VolumeBinding", "VolumeRestrictions", "VolumeZone", "NodeVolumeLimits")
DRA = "DynamicResources"

_HARD_EFFECTS = ("NoSchedule", "NoExecute")
_REQUIRED = "requiredDuringSchedulingIgnoredDuringExecution"
_BYTES = ((1 << 40, "Ti"), (1 << 30, "Gi"), (1 << 20, "Mi"), (1 << 10, "Ki"))


# -- amounts ------------------------------------------------------------------------------------------


def format_amount(resource: str, amount: int) -> str:
    """An amount in the units the API speaks: cores for cpu (``1.5``), binary suffixes for bytes
    (``1.5Gi``), a plain count otherwise. Rounded to two decimals: this is for reading."""
    if resource == CPU:
        return _decimal(amount / 1000)
    if resource in (MEMORY, EPHEMERAL_STORAGE):
        for size, suffix in _BYTES:
            if abs(amount) >= size:
                return _decimal(amount / size) + suffix
        return str(amount)
    return str(amount)


def _decimal(x: float) -> str:
    text = f"{x:.2f}".rstrip("0").rstrip(".")
    return "0" if text == "-0" else text


@dataclass(frozen=True, slots=True)
class Shortfall:
    """One resource the node lacks for the pod: what it asks, what is free, the node's total."""

    resource: str
    requested: int
    free: int
    allocatable: int

    @property
    def short_by(self) -> int:
        return self.requested - self.free

    def __str__(self) -> str:
        f = format_amount
        r = self.resource
        return f"{r}: requests {f(r, self.requested)}, free {f(r, self.free)} of {f(r, self.allocatable)}"


def shortfalls(pod: Pod, ni: NodeInfo) -> list[Shortfall]:
    """Every resource NodeResourcesFit finds short on ``ni`` (the pod count included), with the
    amounts. Ignored extended resources are not known here: a resource the plugin ignores may
    appear, which only ever happens for a pod already rejected for another reason."""
    alloc, used, req = ni.allocatable, ni.requested, pod.requests
    out: list[Shortfall] = []
    if len(ni.pods) + 1 > alloc.allowed_pods:
        out.append(Shortfall("pods", 1, alloc.allowed_pods - len(ni.pods), alloc.allowed_pods))  # one slot
    names = [CPU, MEMORY, EPHEMERAL_STORAGE, *sorted(n for n, q in req.scalar.items() if q)]
    for name in names:
        want, total = req.get(name), alloc.get(name)
        free = total - used.get(name)
        if want > 0 and want > free:
            out.append(Shortfall(name, want, free, total))
    return out


# -- taints and labels --------------------------------------------------------------------------------


def taint_text(t: Taint) -> str:
    """``key=value:effect`` (``key:effect`` without a value), as kubectl prints taints."""
    return f"{t.key}={t.value}:{t.effect}" if t.value else f"{t.key}:{t.effect}"


def untolerated_taints(pod: Pod, ni: NodeInfo) -> list[Taint]:
    """The node's NoSchedule/NoExecute taints that none of the pod's tolerations tolerates."""
    taints = ni.node.taints if ni.node else ()
    return [t for t in taints if t.effect in _HARD_EFFECTS and not tolerates_all(pod.tolerations, t)]


def _requirement_text(r: labels.Requirement) -> str:
    values = ", ".join(sorted(r.values))
    return f"{r.key} {r.operator} [{values}]" if values else f"{r.key} {r.operator}"


def _has(node_labels: Mapping[str, str], key: str) -> str:
    return f"node has {key}={node_labels[key]}" if key in node_labels else f"node has no label {key}"


def _label_change(r: labels.Requirement) -> str:
    """The label edit that satisfies one requirement."""
    if r.operator == labels.IN:
        return f"label {r.key}={sorted(r.values)[0]}"
    if r.operator == labels.EXISTS:
        return f"label {r.key} (any value)"
    if r.operator in (labels.NOT_IN, labels.DOES_NOT_EXIST):
        return f"remove label {r.key}" + (f" (or set it outside {sorted(r.values)})" if r.values else "")
    bound = next(iter(r.values), "")
    return f"label {r.key} {'>' if r.operator == labels.GT else '<'} {bound}"


@dataclass(frozen=True, slots=True)
class LabelMiss:
    """A nodeSelector entry or affinity requirement the node fails: the text, the label edit."""

    detail: str
    change: str


def _required_terms(pod: Pod) -> list[Mapping[str, Any]] | None:
    na = (pod.affinity or {}).get("nodeAffinity")
    req = na.get(_REQUIRED) if isinstance(na, Mapping) else None
    if not isinstance(req, Mapping):
        return None
    return [t for t in req.get("nodeSelectorTerms") or () if isinstance(t, Mapping)]


def label_misses(pod: Pod, ni: NodeInfo) -> list[LabelMiss]:
    """Why NodeAffinity rejects ``ni``: each nodeSelector entry the node lacks, then, when no
    required term matches, each term's failing requirements (terms are ORed: the term with the
    fewest failures is the one whose edits are proposed, the others are listed for the record)."""
    node_labels = ni.node.labels if ni.node else {}
    name = ni.name
    out = [
        LabelMiss(f"nodeSelector {k}={v}: {_has(node_labels, k)}", f"label {k}={v}")
        for k, v in sorted(pod.node_selector.items())
        if node_labels.get(k) != v
    ]
    terms = _required_terms(pod)
    return out if terms is None else out + (term_misses(terms, name, node_labels, "required term") or [])


def term_misses(
    terms: Sequence[Mapping[str, Any]], name: str, node_labels: Mapping[str, str], what: str
) -> list[LabelMiss] | None:
    """Why no node selector term of ``terms`` (ORed) matches the node: None when one does, else
    the failing requirements of each, the term with the fewest first (its edits are the ones
    proposed; the others are listed for the record). ``what`` names a term in the text."""
    per_term: list[list[LabelMiss]] = []
    for i, doc in enumerate(terms, 1):
        try:
            term = labels.compile_node_selector_term(doc)
        except labels.SelectorError as e:
            per_term.append([LabelMiss(f"{what} {i}: invalid ({e})", "")])
            continue
        if term.matches(name, node_labels):
            return None
        misses = [
            LabelMiss(f"{what} {i}: {_requirement_text(r)}: {_has(node_labels, r.key)}", _label_change(r))
            for r in term.expressions
            if not r.matches(node_labels)
        ]
        misses += [
            LabelMiss(f"{what} {i}: {_requirement_text(r)}: node name is {name}", "")
            for r in term.fields
            if not r.matches({"metadata.name": name})
        ]
        per_term.append(misses or [LabelMiss(f"{what} {i}: empty (matches no node)", "")])
    if not per_term:
        return []
    best = min(per_term, key=lambda ms: (any(not m.change for m in ms), len(ms)))
    return best + [LabelMiss(m.detail, "") for ms in per_term if ms is not best for m in ms]


# -- ports and names ---------------------------------------------------------------------------------


def _port_clash(a: HostPort, b: HostPort) -> bool:
    """NodePorts' rule: same protocol and port, on the same address or the wildcard one."""
    if a.port <= 0 or (a.protocol, a.port) != (b.protocol, b.port):
        return False
    ips = (a.ip or _ANY_IP, b.ip or _ANY_IP)
    return _ANY_IP in ips or ips[0] == ips[1]


def port_conflicts(pod: Pod, ni: NodeInfo) -> list[tuple[HostPort, list[str]]]:
    """Each host port of the pod that the node's pods already use, with those pods."""
    out = []
    for want in pod.host_ports:
        users = sorted(p.key for p in ni.pods.values() if any(_port_clash(want, have) for have in p.host_ports))
        if users:
            out.append((want, users))
    return out


def _port_text(hp: HostPort) -> str:
    return f"hostPort {hp.port}/{hp.protocol}" + (f" on {hp.ip}" if hp.ip and hp.ip != _ANY_IP else "")


# -- volumes and claims -------------------------------------------------------------------------------


def volume_claims(pod: Pod) -> list[str]:
    """The pod's PVCs (by the volume that uses each): what the volume plugins judged."""
    return [f"volume {v.name}: PVC {v.claim}" for v in pod.volumes if v.claim]


def resource_claims(pod: Pod) -> list[str]:
    """The pod's ResourceClaims: what DynamicResources judged (a template's claim once resolved)."""
    return [
        f"claim {c.name}: ResourceClaim {c.claim}" if c.claim else f"claim {c.name}: not yet created from its template"
        for c in pod.resource_claims
    ]


# -- per plugin ---------------------------------------------------------------------------------------


def _fit_details(pod: Pod, ni: NodeInfo) -> list[str]:
    return [str(s) for s in shortfalls(pod, ni)]


def _taint_details(pod: Pod, ni: NodeInfo) -> list[str]:
    return [f"untolerated taint {taint_text(t)}" for t in untolerated_taints(pod, ni)]


def _affinity_details(pod: Pod, ni: NodeInfo) -> list[str]:
    return [m.detail for m in label_misses(pod, ni)]


def _unschedulable_details(pod: Pod, ni: NodeInfo) -> list[str]:
    return ["node is cordoned (spec.unschedulable)"] if ni.node and ni.node.unschedulable else []


def _port_details(pod: Pod, ni: NodeInfo) -> list[str]:
    return [f"{_port_text(hp)} is used by {', '.join(users)}" for hp, users in port_conflicts(pod, ni)]


def _name_details(pod: Pod, ni: NodeInfo) -> list[str]:
    return [f"the pod names node {pod.node_name} (spec.nodeName)"] if pod.node_name and pod.node_name != ni.name else []


def _volume_details(pod: Pod, ni: NodeInfo) -> list[str]:
    return volume_claims(pod)


def _claim_details(pod: Pod, ni: NodeInfo) -> list[str]:
    return resource_claims(pod)


_DETAILS: dict[str, Callable[[Pod, NodeInfo], list[str]]] = {
    FIT: _fit_details,
    TAINTS: _taint_details,
    AFFINITY: _affinity_details,
    UNSCHEDULABLE: _unschedulable_details,
    PORTS: _port_details,
    NODE_NAME: _name_details,
    DRA: _claim_details,
    **dict.fromkeys(VOLUME_PLUGINS, _volume_details),
}


def details(plugin: str, pod: Pod, ni: NodeInfo) -> list[str]:
    """The particulars behind ``plugin``'s rejection of ``pod`` on ``ni`` ([] when this module knows
    nothing more than the plugin's own reason)."""
    derive = _DETAILS.get(plugin)
    return derive(pod, ni) if derive is not None else []


# -- what would make it fit ---------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class NodeFix:
    """The smallest change that lets ``node`` take the pod, as far as this module can tell:
    ``changes`` it can name; ``unknown`` the failing plugins it cannot turn into a change."""

    node: str
    changes: tuple[str, ...] = ()
    unknown: tuple[str, ...] = ()
    shortfalls: tuple[Shortfall, ...] = field(default=(), compare=False)

    def to_dict(self) -> dict[str, Any]:
        return {"node": self.node, "changes": list(self.changes), "unknown": list(self.unknown)}

    def text(self) -> str:
        parts = list(self.changes) + [f"pass {p} (no simple change known)" for p in self.unknown]
        return f"{self.node}: " + "; ".join(parts)


def node_fix(pod: Pod, ni: NodeInfo, failing: Sequence[str]) -> NodeFix:
    """What ``ni`` needs so that every plugin in ``failing`` (the node's failed Filter plugins)
    passes: free the resources it is short by, tolerate (or remove) its taints, fix its labels,
    uncordon it."""
    changes: list[str] = []
    unknown: list[str] = []
    found: tuple[Shortfall, ...] = ()
    for plugin in failing:
        if plugin == FIT and (found := tuple(shortfalls(pod, ni))):
            changes += [_resource_change(s) for s in found]
        elif plugin == TAINTS and (taints := untolerated_taints(pod, ni)):
            changes += [f"tolerate taint {taint_text(t)}" for t in taints]
        elif plugin == AFFINITY and (edits := [m.change for m in label_misses(pod, ni) if m.change]):
            changes += edits
        elif plugin == UNSCHEDULABLE and ni.node and ni.node.unschedulable:
            changes.append("uncordon the node")
        elif plugin == PORTS and (clashes := port_conflicts(pod, ni)):
            changes += [f"free {_port_text(hp)} (used by {', '.join(users)})" for hp, users in clashes]
        else:
            unknown.append(plugin)
    return NodeFix(ni.name, tuple(changes), tuple(unknown), found)


def _resource_change(s: Shortfall) -> str:
    """Free what the node is short by; when the request exceeds the whole node, no eviction helps."""
    if s.requested > s.allocatable:
        want, total = format_amount(s.resource, s.requested), format_amount(s.resource, s.allocatable)
        return f"{s.resource}: requests {want}, more than the node's {total} in all (no eviction makes room)"
    return f"free {format_amount(s.resource, s.short_by)} {s.resource} ({s})"


def _rank(fix: NodeFix) -> tuple[int, int, float, str]:
    """Fewest unknowns, then fewest changes, then the smallest relative shortfall."""
    relative = sum(s.short_by / s.allocatable if s.allocatable > 0 else 1.0 for s in fix.shortfalls)
    return (len(fix.unknown), len(fix.changes), relative, fix.node)


def best_fixes(fixes: Sequence[NodeFix], limit: int = 3) -> list[NodeFix]:
    """The ``limit`` nodes closest to fitting, best first."""
    return sorted(fixes, key=_rank)[:limit]
