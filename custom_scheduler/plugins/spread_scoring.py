"""PodTopologySpread's Score and NormalizeScore arithmetic, for one node and for all of them.

Why a module of its own: Score runs on every feasible node of every pod, so the plugin scores all
nodes in one call (the framework's batch path) with the constraint data looked up once per pod,
not once per node, and normalises plain ints without building a NodeScore per node. The per-node
form (preemption's dry runs, custom frameworks) is the same loop over one node; a property test
checks both against upstream's NormalizeScore loop.

The formula is upstream's: ``round(Σ count·weight + maxSkew - 1)`` over the constraints whose
topology key the node carries, where ``count`` is the domain's matching pods (the node's own for
the hostname key) and ``weight = ln(domains + 2)``; then ``MaxNodeScore·(max + min - s) / max``,
so the emptiest domain scores 100, and nodes PreScore ignored (missing a key a constraint
requires) score 0 and count for neither min nor max.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence

from custom_scheduler.framework.types import MAX_NODE_SCORE, NodeInfo
from custom_scheduler.plugins.spread_tally import LABEL_HOSTNAME, Constraint, Counter

#: Per constraint: (topology key, maxSkew - 1, domain -> count, weight, the node's own counter for
#: the hostname key, else None).
Term = tuple[str, int, Mapping[str, int], float, Counter | None]


def terms(
    constraints: Sequence[Constraint],
    counts: Sequence[Mapping[str, int]],
    weights: Sequence[float],
    counters: Sequence[Counter],
) -> list[Term]:
    """What scoring one node needs of each constraint, looked up once per pod."""
    out: list[Term] = []
    for i, c in enumerate(constraints):
        own = counters[i] if c.topology_key == LABEL_HOSTNAME else None
        out.append((c.topology_key, c.max_skew - 1, counts[i], weights[i], own))
    return out


def node_score(ts: Sequence[Term], node_info: NodeInfo) -> int:
    """One node's raw score (the caller has checked it has a Node and is not ignored)."""
    return node_scores(ts, (), (node_info,))[0]


def node_scores(ts: Sequence[Term], ignored: Collection[str], nodes: Sequence[NodeInfo]) -> list[int]:
    """Every node's raw score, 0 for nodes without a Node or ignored by PreScore (written out in
    one loop: a call per node was half of this)."""
    out: list[int] = []
    append = out.append
    for ni in nodes:
        node = ni.node
        if node is None or (ignored and node.name in ignored):
            append(0)
            continue
        labels = node.labels
        total = 0.0
        for key, extra, by_value, weight, counter in ts:
            value = labels.get(key)
            if value is None:
                continue
            n = counter(ni) if counter is not None else by_value.get(value, 0)
            total += n * weight + extra
        whole = int(total)  # Go's math.Round for total >= 0: floor, then halves away from zero
        append(whole + 1 if total - whole >= 0.5 else whole)
    return out


def scored_domains(
    nodes: Sequence[NodeInfo], keys: Sequence[str], *, require_all: bool
) -> tuple[list[dict[str, int]], set[str]]:
    """PreScore's domains: per constraint, each value of its key among the nodes that count
    (mapped to 0, for the counts to fill; none for the hostname key, counted per node), and the
    names of the nodes ignored because they lack a key while ``require_all``."""
    counts: list[dict[str, int]] = [{} for _ in keys]
    domain_keys = [(counts[i], k) for i, k in enumerate(keys) if k != LABEL_HOSTNAME]
    ignored: set[str] = set()
    for ni in nodes:
        node = ni.node
        if node is None:
            continue
        labels = node.labels
        if require_all and not all(k in labels for k in keys):
            ignored.add(node.name)
            continue
        for by_value, k in domain_keys:
            by_value.setdefault(labels.get(k, ""), 0)
    return counts, ignored


def normalize(raw: Sequence[int], ignored: Sequence[bool] | None) -> list[int]:
    """NormalizeScore on plain ints; ``ignored`` flags the nodes PreScore ignored (None: none)."""
    kept = raw if ignored is None else [s for s, skip in zip(raw, ignored, strict=True) if not skip]
    if not kept:
        return [0] * len(raw)
    lowest = min(kept)
    highest = max(kept)  # raw scores are never negative
    if highest == 0:
        out = [MAX_NODE_SCORE] * len(raw)
    else:
        top = highest + lowest
        out = [MAX_NODE_SCORE * (top - s) // highest for s in raw]
    if ignored is not None:
        out = [0 if skip else s for s, skip in zip(out, ignored, strict=True)]
    return out
