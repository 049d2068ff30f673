"""Filter for every node of a snapshot at once: the masked pass of :meth:`Framework.filter_many`.

Kept apart from :mod:`custom_scheduler.framework.runtime` because it is a role of its own with its
own contract: the filters that declare :class:`~custom_scheduler.framework.interface.FilterMaskPlugin`
are evaluated over the snapshot's columns and ANDed, the others run per node on the rows the mask
lets through, and the result (feasible nodes, the count processed) is exactly that of the per-node
loop. Whenever that loop would say more (a plugin raised, a row has no Node, every node was
rejected and each one's reason is wanted), this pass answers None and the caller runs the loop.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from custom_scheduler.api.model import Pod
from custom_scheduler.framework import arrays
from custom_scheduler.framework import interface as fi
from custom_scheduler.framework.types import Code, CycleState, NodeInfo, Snapshot, Status


def filter_masked(
    filters: Sequence[fi.FilterPlugin],
    masks: Mapping[str, fi.FilterMaskPlugin],
    state: CycleState,
    pod: Pod,
    snap: Snapshot,
    start: int,
    want: int,
) -> tuple[list[NodeInfo], dict[str, Status], int] | None:
    """:meth:`Framework.filter_many`'s result over ``snap.node_list`` from row ``start``
    (wrapping) until ``want`` pass, or None to take the per-node loop. ``masks`` are the filters
    (by name) that declare a mask.

    A NodeInfo without its Node gets an error or a reason from each filter, which only the
    per-node loop gives: with such a row the snapshot is not masked (plugins' masks may then
    assume every row has a Node)."""
    if snap.arrays.missing.any():
        return None
    masked = _combined_mask(filters, masks, state, pod, snap)
    if masked is None:
        return None
    mask, rest = masked
    n = len(snap.node_list)
    idx = np.flatnonzero(mask)
    if start:
        k = int(np.searchsorted(idx, start))
        idx = np.concatenate((idx[k:], idx[:k]))
    node_list = snap.node_list
    if rest:
        got = _filter_rows(rest, state, pod, node_list, idx.tolist(), want)
        if got is None:
            return None  # a plugin raised: the per-node loop reports the error with its node
        feasible, rows, last = got
    else:
        rows = idx[:want].tolist()
        feasible = [node_list[i] for i in rows]
        last = rows[-1] if len(rows) >= want else -1
    if not feasible:
        return None  # every node rejected: the per-node loop gives each one's reason
    processed = (last - start) % n + 1 if last >= 0 else n
    return arrays.NodeRows(feasible, snap.arrays, rows), {}, processed


def _combined_mask(
    filters: Sequence[fi.FilterPlugin],
    masks: Mapping[str, fi.FilterMaskPlugin],
    state: CycleState,
    pod: Pod,
    snap: Snapshot,
) -> tuple[arrays.Mask, list[fi.FilterPlugin]] | None:
    """The active filters' masks ANDed over the snapshot's rows, and the filters that gave
    none (they run per node on the rows the mask lets through). None when no filter gave a
    mask (the per-node loop is as fast) or one raised (it reports the error with its node)."""
    mask: arrays.Mask | None = None
    rest: list[fi.FilterPlugin] = []
    for p in filters:
        if p.name in state.skip_filter:
            continue
        fm = masks.get(p.name)
        try:
            m = fm.filter_mask(state, pod, snap) if fm is not None else None
        except Exception:
            return None  # not lost: the per-node loop runs instead and reports it with its node
        if m is None:
            rest.append(p)
        elif m is False:
            mask = np.zeros(len(snap.node_list), dtype=np.bool_)
        elif m is not True:
            mask = m if mask is None else mask & m
    return None if mask is None else (mask, rest)


def _filter_rows(
    plugins: Sequence[fi.FilterPlugin],
    state: CycleState,
    pod: Pod,
    node_list: Sequence[NodeInfo],
    rows: Sequence[int],
    want: int,
) -> tuple[list[NodeInfo], list[int], int] | None:
    """The per-node filters over the rows a mask let through, in order, until ``want`` pass:
    (feasible nodes, their rows, the row where ``want`` was reached or -1). None when a plugin
    raised or answered ERROR, which must fail the attempt (upstream aborts the search on it)
    rather than count as one more rejected node."""
    success, error = Code.SUCCESS, Code.ERROR
    fns = [p.filter for p in plugins]
    feasible: list[NodeInfo] = []
    kept: list[int] = []
    for i in rows:
        ni = node_list[i]
        try:
            for fn in fns:  # a plain loop, not any(): this runs per node on the hot path
                code = fn(state, pod, ni).code
                if code is not success:
                    if code is error:
                        return None  # as for a raise: the per-node loop reports it
                    break
            else:
                feasible.append(ni)
                kept.append(i)
                if len(feasible) >= want:
                    return feasible, kept, i
        except Exception:
            return None  # not lost: the caller falls back to the per-node loop, which reports it
    return feasible, kept, -1
