"""Sums over every pod of every snapshot row, kept across cycles and updated per pod.

Why: InterPodAffinity adds up, over all nodes and the pods on them, which existing pods match
the incoming pod (and which of their terms match it). :class:`~custom_scheduler.framework.arrays.RowTally`
keeps such sums across cycles and re-reads a row whose NodeInfo generation moved. That is enough
while nodes hold a few pods; but a node holding thousands (scheduler_perf's EventHandlingPodAdd
puts 1500 pods with affinity terms on each of two nodes) changes with every bind, and re-reading
it whole cost a quarter of the daemon's CPU there. Here each row keeps its entries per pod, and a
changed row is compared with the NodeInfo last read for it: only pods that are new, gone or
replaced (a different ``Pod`` object under the same uid) are matched again.

What it relies on, as the snapshot guarantees: a snapshot row is a NodeInfo *copy* that is
replaced, never changed in place, when its node changes (so the copy read last time still holds the
old pods), and ``Pod`` objects are replaced, never changed in place, when a pod changes. A row whose
NodeInfo is the same object as last time, whose ``Node`` object changed (labels may differ), or
that the gate kept out before or now, is read whole again. A pod's entries may depend only on the
pod and the node's labels (``entry`` gets only those).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Hashable, Mapping, Sequence
from itertools import chain, compress
from operator import is_not
from typing import Any, NamedTuple

from custom_scheduler.api.model import Pod
from custom_scheduler.framework.arrays import Entries, NodeArrays, apply_entries
from custom_scheduler.framework.types import NodeInfo

#: The pods of a node that can contribute (all of them, or an index such as those with affinity).
PodsOf = Callable[[NodeInfo], Mapping[str, Pod]]
#: The node's labels when its pods can contribute at all (else None): the one per-node test.
Gate = Callable[[NodeInfo], Mapping[str, str] | None]
#: One pod's (key, amount) entries on a node with these labels.
Entry = Callable[[Mapping[str, str], Pod], Entries]


class PodRows(NamedTuple):
    """What a tally sums: per node, ``entry`` of each of ``pods_of`` its pods, where ``gate`` lets
    the node contribute at all."""

    pods_of: PodsOf
    gate: Gate
    entry: Entry


def row_entries(rows: PodRows) -> Callable[[NodeInfo], Entries]:
    """The same contributions as one row function (a full pass over a node's pods), for callers
    without a snapshot (explain, simulate, stub handles) and for tests comparing both."""
    pods_of, gate, entry = rows

    def row(ni: NodeInfo) -> Entries:
        labels = gate(ni)
        if labels is None:
            return ()
        out: list[tuple[Any, int]] = []
        for p in pods_of(ni).values():
            out.extend(entry(labels, p))
        return tuple(out)

    return row


class _Entry:
    __slots__ = ("counts", "gens", "layout", "read", "rows", "sums")

    def __init__(self, cols: NodeArrays, node_list: Sequence[NodeInfo], pods_of: PodsOf, gate: Gate, entry: Entry):
        self.layout = cols.layout
        self.gens = cols.gen.copy()
        self.sums: dict[Hashable, int] = {}
        self.counts: dict[Hashable, int] = {}
        self.read: list[NodeInfo] = list(node_list)
        self.rows = [_whole_row(ni, pods_of, gate, entry) for ni in node_list]
        for row in self.rows:
            for e in row.values():
                self.apply(e, 1)

    def apply(self, entries: Entries, sign: int) -> None:
        apply_entries(self.sums, self.counts, entries, sign)


def _whole_row(ni: NodeInfo, pods_of: PodsOf, gate: Gate, entry: Entry) -> dict[str, Entries]:
    labels = gate(ni)
    if labels is None:
        return {}
    out: dict[str, Entries] = {}
    for uid, p in pods_of(ni).items():
        e = entry(labels, p)
        if e:
            out[uid] = e
    return out


class PodTally:
    """Kept sums for a few keys (least recently used dropped), each over all rows of the snapshot
    columns ``cols``; see the module docstring. A re-laid-out snapshot starts a key over."""

    def __init__(self, size: int = 64) -> None:
        self._size = size
        self._by_key: OrderedDict[Hashable, _Entry] = OrderedDict()

    def totals(
        self,
        key: Hashable,
        cols: NodeArrays,
        node_list: Sequence[NodeInfo],
        rows: PodRows,
    ) -> dict[Any, int]:
        """Every key some pod currently contributes to, with its sum (0 included, as a full pass
        building the same dict would list it)."""
        kept = self._by_key.get(key)
        if kept is None or kept.layout != cols.layout:
            kept = _Entry(cols, node_list, *rows)
            self._by_key[key] = kept
            if len(self._by_key) > self._size:
                self._by_key.popitem(last=False)
        else:
            for r in (cols.gen != kept.gens).nonzero()[0].tolist():
                _update_row(kept, r, node_list[r], *rows)
                kept.gens[r] = cols.gen[r]
            self._by_key.move_to_end(key)
        return dict(kept.sums)


def _update_row(kept: _Entry, r: int, ni: NodeInfo, pods_of: PodsOf, gate: Gate, entry: Entry) -> None:
    """Bring row ``r`` from the NodeInfo read last to ``ni``. New entries are all computed before
    any sum changes, so an exception leaves the kept sums as they were."""
    prev, old = kept.read[r], kept.rows[r]
    labels = gate(ni)
    if prev is ni or prev.node is not ni.node or labels is None or gate(prev) is None:
        new = _whole_row(ni, pods_of, gate, entry)
        for e in old.values():
            kept.apply(e, -1)
        for e in new.values():
            kept.apply(e, 1)
        kept.rows[r], kept.read[r] = new, ni
        return
    now, before = pods_of(ni), pods_of(prev)
    # The uids whose Pod object is not the one read last time (new ones included), in C.
    changed = list(compress(now, map(is_not, now.values(), map(before.get, now))))
    gone = before.keys() - now.keys()
    fresh = [(uid, entry(labels, now[uid])) for uid in changed]
    for uid in chain(gone, changed):
        e = old.pop(uid, ())
        if e:
            kept.apply(e, -1)
    for uid, e in fresh:
        if e:
            old[uid] = e
            kept.apply(e, 1)
    kept.read[r] = ni
