"""A scheduling decision as a record entry, and a shadow decision compared with the real binding.

Pure: no I/O, no clock. The daemon's recorder (:mod:`custom_scheduler.server.decision_log`)
turns each cycle's :class:`~custom_scheduler.core.decision.Decision` into entries here, the ring
(:mod:`custom_scheduler.core.decision_store`) stores them, and ``why`` / ``shadow-report`` read
them back. One place owns the entry's shape, so writer and readers cannot drift apart.

An entry is a small JSON object with short keys (tens of thousands are kept, compressed, in a
few ConfigMaps, so every byte counts):

- ``t`` Unix time, ``k`` namespace/name, ``u`` uid, ``p`` profile, ``e`` what happened:
- ``scheduled`` / ``waiting``: ``n`` node, ``f`` feasible nodes, ``v`` evaluated, ``s`` its total
  score, ``top`` its highest weighted plugin scores, ``ru`` the runner-up (node, total, top);
- ``unschedulable``: ``m`` the FailedScheduling message, ``why`` {plugin: {reason: nodes}},
  ``nom`` the node a preemption nominated, ``victims`` the pods it preempts there;
- ``error``: ``m``;
- ``preempted``: a victim's entry, ``by`` the preemptor, ``n`` the node;
- ``bound``: ``n`` the node the pod was bound to, ``by`` who bound it as far as we can tell;
- ``shadow``: ``res`` agree | disagree | shadow-unschedulable | missed, ``n`` the shadow's node,
  ``real`` the real one, ``why`` one line, ``cmp`` [[plugin, score on shadow's node, on real]].
"""

from __future__ import annotations

import heapq
import operator
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from custom_scheduler.core.decision import Decision
from custom_scheduler.framework.scoring import ScoredNode
from custom_scheduler.framework.types import Status

#: How many plugin scores an entry keeps per node (the ones that weighed most).
TOP_PLUGINS = 3
#: Messages are cut here: a FitError over thousands of nodes stays one histogram line, but an
#: extender's or plugin's error text is unbounded.
MAX_MESSAGE = 1024
#: Results of a shadow comparison (the metric's ``result`` label).
AGREE, DISAGREE, SHADOW_UNSCHEDULABLE, MISSED = "agree", "disagree", "shadow-unschedulable", "missed"
SHADOW_RESULTS = (AGREE, DISAGREE, SHADOW_UNSCHEDULABLE, MISSED)
#: Decision results worth an entry: ``skipped`` (not ours, already assumed) says nothing.
RECORDED = frozenset({"scheduled", "waiting", "unschedulable", "error"})

Entry = dict[str, Any]
_TOTAL = operator.attrgetter("total")


def _top(sn: ScoredNode, n: int = TOP_PLUGINS) -> list[list[Any]]:
    """The plugins that added most to ``sn``'s total, as [plugin, weighted score] pairs."""
    ranked = sorted(sn.weighted.items(), key=lambda kv: (-kv[1], kv[0]))[:n]
    return [[name, score] for name, score in ranked]


def _chosen_and_runner_up(scores: Sequence[ScoredNode], chosen: str) -> tuple[ScoredNode | None, ScoredNode | None]:
    """The chosen node's scores and the best other node's, from the few highest totals (the
    chosen node is one of them unless many tie; then a full scan finds it). Runs per decision, so
    the selection is done by :func:`heapq.nlargest`, not a Python loop over every node."""
    best = heapq.nlargest(3, scores, key=_TOTAL)
    mine = next((sn for sn in best if sn.name == chosen), None)
    if mine is None:
        mine = next((sn for sn in scores if sn.name == chosen), None)
    return mine, next((sn for sn in best if sn.name != chosen), None)


def reasons_by_plugin(statuses: Mapping[str, Status]) -> dict[str, dict[str, int]]:
    """{plugin: {reason: number of nodes}}: the FitError's histogram, kept apart per plugin."""
    counts: Counter[tuple[str, str]] = Counter()
    for st in statuses.values():
        for reason in st.reasons or ("(no reason given)",):
            counts[(st.plugin or "(unattributed)", reason)] += 1
    out: dict[str, dict[str, int]] = {}
    for (plugin, reason), n in sorted(counts.items()):
        out.setdefault(plugin, {})[reason] = n
    return out


def decision_entries(d: Decision, *, t: float, profile: str) -> list[Entry]:
    """The entries one decision makes: its own, plus one per pod its preemption evicts.

    Empty for a decision that says nothing about the pod (``skipped``)."""
    if d.result not in RECORDED:
        return []
    e: Entry = {"t": round(t, 3), "k": d.pod, "u": d.uid, "p": profile, "e": d.result}
    out = [e]
    if d.result in ("scheduled", "waiting"):
        e["n"] = d.node
        _add_scores(e, d)
    elif d.result == "unschedulable":
        e["m"] = d.message[:MAX_MESSAGE]
        if d.statuses:
            e["why"] = reasons_by_plugin(d.statuses)
        post = d.post_filter
        if post is not None and post.status.is_success and post.nominated_node_name:
            e["nom"] = post.nominated_node_name
            e["victims"] = [v.key for v in post.victims]
            for v in post.victims:
                out.append(
                    {"t": e["t"], "k": v.key, "u": v.uid, "p": v.scheduler_name, "e": "preempted", "by": d.pod}
                    | {"n": post.nominated_node_name}
                )
    else:
        e["m"] = d.message[:MAX_MESSAGE]
    return out


def _add_scores(e: Entry, d: Decision) -> None:
    res = d.schedule
    if res is None:
        return
    e["f"], e["v"] = res.feasible, res.evaluated
    chosen, ru = _chosen_and_runner_up(res.scores, d.node)
    if chosen is None:
        return  # scored without detail (totals only), or a nominated node taken without scoring
    e["s"], e["top"] = chosen.total, _top(chosen)
    if ru is not None:
        e["ru"] = {"n": ru.name, "s": ru.total, "top": _top(ru)}


def bound_entry(*, t: float, key: str, uid: str, profile: str, node: str, by: str) -> Entry:
    """A pod seen bound (by the watch): where, and by whom as far as this daemon knows."""
    return {"t": round(t, 3), "k": key, "u": uid, "p": profile, "e": "bound", "n": node, "by": by}


@dataclass(frozen=True, slots=True)
class ShadowOutcome:
    """A shadow decision against the pod's real binding."""

    result: str
    shadow_node: str
    real_node: str
    reason: str
    plugins: list[list[Any]] = field(default_factory=list)
    """[plugin, weighted score on the shadow's node, on the real node] where they differ."""

    def entry(self, *, t: float, key: str, uid: str, profile: str) -> Entry:
        e: Entry = {"t": round(t, 3), "k": key, "u": uid, "p": profile, "e": "shadow", "res": self.result}
        e |= {"n": self.shadow_node, "real": self.real_node, "why": self.reason[:MAX_MESSAGE]}
        if self.plugins:
            e["cmp"] = self.plugins
        return e


#: A shadow decision keeps per-plugin scores for this many of its best nodes (totals for all):
#: enough to explain a real scheduler that chose among the good nodes, at a bounded memory cost.
DETAIL_NODES = 32
#: Rejections kept per shadow decision (the real node may be among them); more are dropped.
MAX_STATUSES = 1000


@dataclass(frozen=True, slots=True)
class ShadowView:
    """What a comparison needs of a shadow decision, kept until the pod is bound: a slim copy,
    since a decision's full score detail (every plugin on every scored node) is too big to keep
    for thousands of pending pods."""

    result: str
    node: str
    message: str
    feasible: int
    totals: dict[str, int]
    weighted: dict[str, dict[str, int]]
    statuses: Mapping[str, Status]


def shadow_view(d: Decision) -> ShadowView:
    """The slim copy of ``d`` that :func:`compare` reads."""
    res = d.schedule
    scores = res.scores if res is not None else []
    best = heapq.nlargest(DETAIL_NODES, scores, key=_TOTAL)
    statuses: Mapping[str, Status] = res.statuses if res is not None and len(res.statuses) <= MAX_STATUSES else {}
    return ShadowView(
        d.result,
        d.node,
        d.message[:MAX_MESSAGE],
        res.feasible if res is not None else 0,
        {sn.name: sn.total for sn in scores},
        {sn.name: dict(sn.weighted) for sn in best},
        statuses,
    )


def compare(v: ShadowView | None, real_node: str) -> ShadowOutcome:
    """What the shadow decided for a pod against the node it was really bound to, and why they differ.

    ``v`` is the shadow's last decision for the pod (None: the pod was bound before the shadow
    decided). A disagreement is explained by the per-plugin scores of both nodes when the shadow
    scored both, else by the real node's rejection, else by its absence from the nodes scored.
    """
    if v is None:
        return ShadowOutcome(MISSED, "", real_node, "bound before the shadow decided")
    if v.result not in ("scheduled", "waiting"):
        return ShadowOutcome(SHADOW_UNSCHEDULABLE, "", real_node, v.message or v.result)
    if v.node == real_node:
        return ShadowOutcome(AGREE, v.node, real_node, "same node")
    return ShadowOutcome(DISAGREE, v.node, real_node, *_why_other(v, real_node))


def _why_other(v: ShadowView, real_node: str) -> tuple[str, list[list[Any]]]:
    mine, real = v.weighted.get(v.node), v.weighted.get(real_node)
    totals = f"shadow scored {v.node} {v.totals.get(v.node)} vs {real_node} {v.totals.get(real_node)}"
    if mine is not None and real is not None:
        plugins = sorted(set(mine) | set(real))
        rows = [(p, mine.get(p, 0), real.get(p, 0)) for p in plugins]
        diff = sorted((r for r in rows if r[1] != r[2]), key=lambda r: (r[2] - r[1], r[0]))
        lead = ", ".join(f"{p} {a} vs {b}" for p, a, b in diff[:TOP_PLUGINS]) or "equal plugin scores (a tie)"
        return f"{totals}: {lead}", [list(r) for r in diff]
    if real_node in v.totals:
        return f"{totals} ({real_node} not among its {DETAIL_NODES} best: no per-plugin detail kept)", []
    st = v.statuses.get(real_node)
    if st is not None:
        why = "; ".join(st.reasons) or st.code.name
        return f"{real_node} is infeasible for the shadow: {st.plugin or 'a filter'}: {why}", []
    if not v.totals:
        return f"shadow chose {v.node} without scoring (one feasible node, or no score detail)", []
    return (
        f"{real_node} was not among the {v.feasible} feasible nodes the shadow scored (filtered out or not sampled)",
        [],
    )


def entries_for(entries: Iterable[Entry], key: str) -> list[Entry]:
    """The entries about pod ``key`` (namespace/name), in recorded order (any uid: a pod deleted
    and re-created under the same name shows both)."""
    return [e for e in entries if e.get("k") == key]


@dataclass(slots=True)
class ProfileAgreement:
    """Shadow comparisons of one profile."""

    counts: Counter[str] = field(default_factory=Counter)
    disagreements: list[Entry] = field(default_factory=list)

    @property
    def compared(self) -> int:
        return self.counts[AGREE] + self.counts[DISAGREE] + self.counts[SHADOW_UNSCHEDULABLE]

    @property
    def agreement(self) -> float | None:
        """Share of the compared pods where the shadow chose the real node (None: none compared)."""
        return self.counts[AGREE] / self.compared if self.compared else None


def agreement(entries: Iterable[Entry]) -> dict[str, ProfileAgreement]:
    """Shadow comparisons per profile: counts by result and the pods the shadow placed otherwise
    (disagree and shadow-unschedulable), oldest first. Each pod (uid) counts once, by its last
    comparison: a recorder that restarted may have compared it again."""
    latest: dict[str, Entry] = {}
    for e in entries:
        if e.get("e") == "shadow":
            latest[str(e.get("u") or e.get("k"))] = e
    out: dict[str, ProfileAgreement] = {}
    for e in latest.values():
        pa = out.setdefault(str(e.get("p", "")), ProfileAgreement())
        res = str(e.get("res", ""))
        pa.counts[res] += 1
        if res in (DISAGREE, SHADOW_UNSCHEDULABLE):
            pa.disagreements.append(e)
    return dict(sorted(out.items()))
