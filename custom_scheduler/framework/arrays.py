"""Per-node resource columns of a snapshot, as numpy arrays, for vectorised filters and scores.

Why: the resource filter and the resource scorers are the same few integer operations on every
node, and in Python they cost 1-2 µs per node per plugin. Kept as columns aligned with
``Snapshot.node_list`` (row ``i`` is ``node_list[i]``), they are computed for all nodes in a few
numpy operations per pod. The cache updates only the rows of nodes that changed.

Exactness: the columns are int64 (milli-CPU, bytes, counts); the integer formulas use floor
division on non-negative values (equal to Go's truncation), and the float formulas do the same
IEEE operations in the same order as the scalar code, so the results are identical (property
tests compare both paths).

A row is only valid for the exact NodeInfo object at that position: callers that hold a modified
copy (preemption's dry runs, nominated pods) check identity and fall back to the scalar path.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

from custom_scheduler.framework.types import CycleState, NodeInfo, Snapshot, StateKey

Column = npt.NDArray[np.int64]

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


class NodeArrays:
    """Resource columns for the nodes of one snapshot."""

    __slots__ = (*_FIELDS, "size")

    def __init__(self, size: int = 0) -> None:
        self.size = size
        for f in _FIELDS:
            setattr(self, f, np.zeros(size, dtype=np.int64))

    def rebuild(self, nodes: Sequence[NodeInfo]) -> None:
        self.size = len(nodes)
        rows = [_row(ni) for ni in nodes]
        cols = list(zip(*rows, strict=True)) if rows else [()] * len(_FIELDS)
        for f, col in zip(_FIELDS, cols, strict=True):
            setattr(self, f, np.fromiter(col, dtype=np.int64, count=self.size))

    def set_row(self, i: int, ni: NodeInfo) -> None:
        for f, v in zip(_FIELDS, _row(ni), strict=True):
            getattr(self, f)[i] = v

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
    """The handle's current snapshot if it has columns (test stubs and None handles have none)."""
    fn = getattr(handle, "current_snapshot", None)
    if fn is None:
        return None
    snap: Snapshot = fn()
    return snap if snap.arrays is not None else None


Rows = tuple[NodeArrays, npt.NDArray[np.intp]]
_ROWS_KEY: StateKey[tuple[Sequence[NodeInfo], Rows | None]] = StateKey("arrays.rows")


def rows_of(handle: object, nodes: Sequence[NodeInfo], state: CycleState | None = None) -> Rows | None:
    """The columns and the row index of each of ``nodes``, or None to use the scalar path.

    With ``state``, the answer is remembered for this very ``nodes`` list, which the framework
    passes to every score plugin of the cycle.
    """
    if state is not None:
        cached = state.get(_ROWS_KEY)
        if cached is not None and cached[0] is nodes:
            return cached[1]
    snap = snapshot_of(handle)
    result: Rows | None = None
    if snap is not None:
        rows = positions_of(nodes, snap.node_list, snap.positions)
        if rows is not None:
            result = (snap.arrays, np.asarray(rows, dtype=np.intp))
    if state is not None:
        state.write(_ROWS_KEY, (nodes, result))
    return result
