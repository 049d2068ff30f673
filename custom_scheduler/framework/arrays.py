"""Per-node columns of a snapshot, as numpy arrays, for vectorised filters and scores, and the
per-row memos built on them.

Why: the resource filter and the resource scorers are the same few integer operations on every
node, and in Python they cost 1-2 µs per node per plugin. Kept as columns aligned with
``Snapshot.node_list`` (row ``i`` is ``node_list[i]``), they are computed for all nodes in a few
numpy operations per pod. The cache updates only the rows of nodes that changed. Besides
resources, the columns hold what the filter masks need (unschedulable, taint-set ids) and each
row's NodeInfo generation, which lets :class:`RowMemo` (per-node verdicts) and :class:`RowTally`
(sums over all nodes) keep their answers across cycles and re-read only the rows that changed.

Exactness: the columns are int64 (milli-CPU, bytes, counts); the integer formulas use floor
division on non-negative values (equal to Go's truncation), and the float formulas do the same
IEEE operations in the same order as the scalar code, so the results are identical (property
tests compare both paths).

A row is only valid for the exact NodeInfo object at that position: callers that hold a modified
copy (preemption's dry runs, nominated pods) check identity and fall back to the scalar path.

The framework owns the columns: it hands them to plugins through the declared fast paths
(:class:`~custom_scheduler.framework.interface.FilterMaskPlugin` gets the snapshot,
:class:`~custom_scheduler.framework.interface.BatchScorePlugin` gets :class:`NodeRows`).
"""

from __future__ import annotations

import itertools
from collections import OrderedDict
from collections.abc import Callable, Hashable, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from custom_scheduler.api.model import Taint
from custom_scheduler.framework.types import NodeInfo, Snapshot

Column = npt.NDArray[np.int64]
Mask = npt.NDArray[np.bool_]
Rows = npt.NDArray[np.intp]

_FIELDS = (
    "alloc_cpu",
    "alloc_mem",
    "alloc_eph",
    "allowed_pods",
    "req_cpu",
    "req_mem",
    "req_eph",
    "nz_cpu",
    "nz_mem",
    "pod_count",
)


_LAYOUTS = itertools.count(1)


class NodeArrays:
    """Resource columns for the nodes of one snapshot, plus what the vectorised filters need.

    Besides the integer resource columns: ``unschedulable`` (0/1), ``missing`` (1 where the
    NodeInfo has no Node object) and ``taint_set``, an id into :attr:`taint_sets` (the distinct
    taint tuples of the snapshot's nodes, id 0 = no taints), so a pod's tolerations are checked
    once per distinct taint set instead of once per node.
    """

    __slots__ = (
        *_FIELDS,
        "size",
        "unschedulable",
        "missing",
        "taint_set",
        "taint_sets",
        "_taint_ids",
        "gen",
        "layout",
        "scalar_alloc",
        "scalar_req",
    )

    def __init__(self, size: int = 0) -> None:
        self.size = size
        for f in _FIELDS:
            setattr(self, f, np.zeros(size, dtype=np.int64))
        self.unschedulable: Column = np.zeros(size, dtype=np.int64)
        self.missing: Column = np.zeros(size, dtype=np.int64)
        self.taint_set: Column = np.zeros(size, dtype=np.int64)
        self.taint_sets: list[tuple[Taint, ...]] = [()]
        self._taint_ids: dict[tuple[Taint, ...], int] = {(): 0}
        self.gen: Column = np.zeros(size, dtype=np.int64)
        """Each row's NodeInfo generation: which rows changed since a plugin last looked."""
        self.layout = next(_LAYOUTS)
        """Changes when rows are re-assigned to nodes (a rebuild): per-row memos start over."""
        self.scalar_alloc: dict[str, Column] = {}
        """Extended resources (GPUs, hugepages, ...): allocatable and requested, by name, for every
        name any node has or any pod requests; rows without it hold 0."""
        self.scalar_req: dict[str, Column] = {}

    def rebuild(self, nodes: Sequence[NodeInfo]) -> None:
        self.size = len(nodes)
        rows = [_row(ni) for ni in nodes]
        cols = list(zip(*rows, strict=True)) if rows else [()] * len(_FIELDS)
        for f, col in zip(_FIELDS, cols, strict=True):
            setattr(self, f, np.fromiter(col, dtype=np.int64, count=self.size))
        self.taint_sets = [()]
        self._taint_ids = {(): 0}
        n = self.size
        self.unschedulable = np.fromiter((bool(ni.node and ni.node.unschedulable) for ni in nodes), np.int64, n)
        self.missing = np.fromiter((ni.node is None for ni in nodes), np.int64, n)
        self.taint_set = np.fromiter((self._taint_id(ni) for ni in nodes), np.int64, n)
        self.gen = np.fromiter((ni.generation for ni in nodes), np.int64, n)
        self.layout = next(_LAYOUTS)
        self.scalar_alloc, self.scalar_req = {}, {}
        for i, ni in enumerate(nodes):
            self._set_scalars(i, ni)

    def set_row(self, i: int, ni: NodeInfo) -> None:
        for f, v in zip(_FIELDS, _row(ni), strict=True):
            getattr(self, f)[i] = v
        self.unschedulable[i] = bool(ni.node and ni.node.unschedulable)
        self.missing[i] = ni.node is None
        self.taint_set[i] = self._taint_id(ni)
        self.gen[i] = ni.generation
        for col in (*self.scalar_alloc.values(), *self.scalar_req.values()):
            col[i] = 0
        self._set_scalars(i, ni)

    def _set_scalars(self, i: int, ni: NodeInfo) -> None:
        alloc = ni.node.allocatable.scalar if ni.node is not None else {}
        for target, values in ((self.scalar_alloc, alloc), (self.scalar_req, ni.requested.scalar)):
            for name, v in values.items():
                if name not in self.scalar_alloc:  # a new resource name: both columns, all 0
                    self.scalar_alloc[name] = np.zeros(self.size, dtype=np.int64)
                    self.scalar_req[name] = np.zeros(self.size, dtype=np.int64)
                target[name][i] = v

    def _taint_id(self, ni: NodeInfo) -> int:
        taints = tuple(ni.node.taints) if ni.node is not None else ()
        got = self._taint_ids.get(taints)
        if got is None:
            got = self._taint_ids[taints] = len(self.taint_sets)
            self.taint_sets.append(taints)
        return got

    # typed accessors (mypy cannot see slot values set through setattr)
    def col(self, name: str) -> Column:
        c: Column = getattr(self, name)
        return c


def _row(ni: NodeInfo) -> tuple[int, ...]:
    node = ni.node
    alloc = node.allocatable if node is not None else None
    req = ni.requested
    return (
        alloc.milli_cpu if alloc else 0,
        alloc.memory if alloc else 0,
        alloc.ephemeral_storage if alloc else 0,
        alloc.allowed_pods if alloc else 0,
        req.milli_cpu,
        req.memory,
        req.ephemeral_storage,
        ni.non_zero_milli_cpu,
        ni.non_zero_memory,
        len(ni.pods),
    )


def positions_of(
    nodes: Sequence[NodeInfo], node_list: Sequence[NodeInfo], positions: dict[str, int]
) -> list[int] | None:
    """Rows of ``nodes`` in the snapshot, or None if any of them is not the snapshot's own object."""
    out = []
    get = positions.get
    for ni in nodes:
        i = get(ni.name)
        if i is None or node_list[i] is not ni:
            return None
        out.append(i)
    return out


def snapshot_of(handle: object) -> Snapshot | None:
    """The handle's current snapshot if it has columns (test stubs and None handles have none).

    For plugins that read the whole snapshot outside the declared fast paths (PreFilter tallies);
    filter masks get the snapshot from the framework and batch scorers get :class:`NodeRows`."""
    fn = getattr(handle, "current_snapshot", None)
    if fn is None:
        return None
    snap: Snapshot = fn()
    return snap if snap.arrays is not None else None


class NodeRows(list[NodeInfo]):
    """Nodes that are rows of a snapshot's columns: ``self[k]`` is described by row ``rows[k]``
    of ``cols``.

    Why: the framework knows which rows the nodes it scores are (the vectorised filter found them
    by row; otherwise it looks them up once), so it hands them to the batch scorers with the nodes
    instead of each plugin finding the snapshot and the rows again. It is a plain list of the
    snapshot's own NodeInfos otherwise, valid for the cycle it was made in (the cache re-lays the
    rows between cycles). Slicing or copying gives a plain list, which scorers treat per node.
    """

    __slots__ = ("cols", "rows")

    def __init__(self, nodes: Sequence[NodeInfo], cols: NodeArrays, rows: Sequence[int] | npt.NDArray[np.intp]) -> None:
        super().__init__(nodes)
        self.cols = cols
        self.rows: npt.NDArray[np.intp] = np.asarray(rows, dtype=np.intp)
        if len(self.rows) != len(self):
            raise ValueError(f"{len(self)} nodes but {len(self.rows)} rows")


def rows_for(snap: Snapshot, nodes: Sequence[NodeInfo]) -> NodeRows | None:
    """``nodes`` as :class:`NodeRows` of ``snap``'s columns, or None when the snapshot has no
    columns or some node is not the snapshot's own object (a modified copy has no row)."""
    cols: NodeArrays | None = snap.arrays
    if cols is None:
        return None
    if isinstance(nodes, NodeRows) and nodes.cols is cols:
        return nodes
    rows = positions_of(nodes, snap.node_list, snap.positions)
    return None if rows is None else NodeRows(nodes, cols, rows)


class RowMemo:
    """Per-row values of a function of one node, kept across cycles for a few keys.

    Why: a filter verdict that depends only on the node (labels, name), such as whether it
    satisfies a Deployment's required node affinity, is the same for every replica; computing it
    per node per pod is most of the filter time on big clusters. Rows whose NodeInfo generation
    moved since the last call are recomputed (generations move on any change, pods included, so
    this over-approximates and is exact); a re-laid-out snapshot starts over. Callers must not
    modify the arrays returned.
    """

    def __init__(self, size: int = 64) -> None:
        self._size = size
        self._by_key: OrderedDict[Hashable, tuple[int, Column, npt.NDArray[Any]]] = OrderedDict()

    def values(
        self,
        key: Hashable,
        cols: NodeArrays,
        node_list: Sequence[NodeInfo],
        fn: Callable[[NodeInfo], Any],
        dtype: type[np.generic] = np.bool_,
    ) -> npt.NDArray[Any]:
        got = self._by_key.get(key)
        if got is None or got[0] != cols.layout:
            values = np.fromiter((fn(ni) for ni in node_list), dtype, len(node_list))
            self._by_key[key] = (cols.layout, cols.gen.copy(), values)
            if len(self._by_key) > self._size:
                self._by_key.popitem(last=False)
            return values
        _, gens, values = got
        changed = np.flatnonzero(cols.gen != gens)
        if len(changed):
            values = values.copy()  # earlier answers may still be held by a cycle state
            for r in changed.tolist():
                values[r] = fn(node_list[r])
            gens[changed] = cols.gen[changed]
            self._by_key[key] = (cols.layout, gens, values)
        self._by_key.move_to_end(key)
        return values


Entries = tuple[tuple[Any, int], ...]
"""One row's contribution to a :class:`RowTally`: (key, amount) entries; a key may repeat."""


class _TallyEntry:
    __slots__ = ("counts", "gens", "layout", "rows", "sums")

    def __init__(self, cols: NodeArrays, node_list: Sequence[NodeInfo], fn: Callable[[NodeInfo], Entries]) -> None:
        self.layout = cols.layout
        self.gens = cols.gen.copy()
        self.sums: dict[Hashable, int] = {}
        self.counts: dict[Hashable, int] = {}
        self.rows = [fn(ni) for ni in node_list]
        for row in self.rows:
            self.apply(row, 1)

    def apply(self, row: Entries, sign: int) -> None:
        apply_entries(self.sums, self.counts, row, sign)


def apply_entries(sums: dict[Hashable, int], counts: dict[Hashable, int], entries: Entries, sign: int) -> None:
    """Add (``sign`` 1) or take away (-1) one row's or pod's entries; ``counts`` says how many
    contributions each key has, so a key nothing contributes to any more is forgotten (its sum is
    then back to 0), as a full pass would never have listed it."""
    for k, v in entries:
        n = counts.get(k, 0) + sign
        if n:
            sums[k] = sums.get(k, 0) + sign * v
            counts[k] = n
        else:
            del sums[k], counts[k]


class RowTally:
    """Sums over all snapshot rows of per-row entries, kept across cycles for a few keys.

    Why: several PreFilter/PreScore steps add up, over every node and every pod on it, what
    matches the incoming pod; replicas of one workload ask the same question and between two of
    them only the node that took the last one changed. Rows whose NodeInfo generation moved are
    re-read (their old entries subtracted, the new ones added); a re-laid-out snapshot starts over.
    The answer lists every key that some row currently contributes to, even with a sum of 0, as a
    full pass building the same dict would.
    """

    def __init__(self, size: int = 64) -> None:
        self._size = size
        self._by_key: OrderedDict[Hashable, _TallyEntry] = OrderedDict()

    def totals(
        self, key: Hashable, cols: NodeArrays, node_list: Sequence[NodeInfo], fn: Callable[[NodeInfo], Entries]
    ) -> dict[Any, int]:
        entry = self._by_key.get(key)
        if entry is None or entry.layout != cols.layout:
            entry = _TallyEntry(cols, node_list, fn)
            self._by_key[key] = entry
            if len(self._by_key) > self._size:
                self._by_key.popitem(last=False)
        else:
            changed = np.flatnonzero(cols.gen != entry.gens)
            for r in changed.tolist():
                row = fn(node_list[r])  # first: if it raises, the entry is still consistent
                entry.apply(entry.rows[r], -1)
                entry.rows[r] = row
                entry.apply(row, 1)
                entry.gens[r] = cols.gen[r]
            self._by_key.move_to_end(key)
        return dict(entry.sums)
