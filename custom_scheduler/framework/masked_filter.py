"""Filter for every node of a snapshot at once: the masked pass of :meth:`Framework.filter_many`.

Kept apart from :mod:`custom_scheduler.framework.runtime` because it is a role of its own with its
own contract: the filters that declare :class:`~custom_scheduler.framework.interface.FilterMaskPlugin`
are evaluated over the snapshot's columns and ANDed, the others run per node on the rows the mask
lets through, and the result (feasible nodes, the count processed) is exactly that of the per-node
loop. When every node is rejected, each one's status is the loop's too: only the filters a mask
says a row passes are not called, and a filter that gives its statuses from the columns
(:class:`~custom_scheduler.framework.interface.FilterStatusesPlugin`) is not called per row.
Whenever the loop would say more (a plugin raised, a row has no Node), this pass answers None and
the caller runs the loop.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping, Sequence
from typing import cast

import numpy as np

from custom_scheduler.api.model import Pod
from custom_scheduler.framework import arrays
from custom_scheduler.framework import interface as fi
from custom_scheduler.framework.types import SUCCESS, Code, CycleState, NodeInfo, Snapshot, Status


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
    steps = _steps(filters, masks, state, pod, snap)
    masked = None if steps is None else _combined_mask(steps)
    if steps is None or masked is None:
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
        # Every node rejected: each one's reason, or the per-node loop when a plugin raised.
        got_all = _statuses_and_rows(steps, state, pod, snap, start)
        return None if got_all is None or got_all[1] else ([], got_all[0], n)
    processed = (last - start) % n + 1 if last >= 0 else n
    return arrays.NodeRows(feasible, snap.arrays, rows), {}, processed


def whole_pass(
    filters: Sequence[fi.FilterPlugin],
    masks: Mapping[str, fi.FilterMaskPlugin],
    state: CycleState,
    pod: Pod,
    snap: Snapshot,
    start: int,
    exempt: Collection[str],
    fewer_than: int,
    held: Mapping[str, NodeInfo],
) -> tuple[dict[str, Status], list[int]] | None:
    """A whole pass over ``snap`` as the per-node loop makes it from row ``start`` when fewer than
    ``fewer_than`` rows (the ``exempt`` and ``held`` nodes' aside) pass the masks: every rejected
    row's status in the loop's order, and the rows that pass every filter, in that order. The
    ``exempt`` nodes get neither. None when as many rows pass the masks (the loop may stop early),
    a row has no Node or a plugin raised.

    For pods nominated to nodes (kube-scheduler's RunFilterPluginsWithNominatedPods): ``held``
    maps a node to its copy with them added, and such a node gets the status of the copy when the
    filters reject the copy, else its own (:func:`_on_copy`); the caller's state must be what the
    filters see on the copy (no PreFilter extension to tell of the added pods). A node whose
    nominated pods only the caller can add is ``exempt``: the filters rejecting it without them
    also reject it with them, so the masks decide the others at once."""
    if snap.arrays is None or snap.arrays.missing.any():
        return None
    steps = _steps(filters, masks, state, pod, snap)
    masked = None if steps is None else _combined_mask(steps)
    if steps is None or masked is None:
        return None
    mask = masked[0]
    skip = [snap.positions[name] for name in exempt if name in snap.positions]
    copies = {snap.positions[name]: view for name, view in held.items() if name in snap.positions}
    if skip or copies:
        mask = mask.copy()
        mask[[*skip, *copies]] = False
    if int(np.count_nonzero(mask)) >= fewer_than:
        return None
    return _statuses_and_rows(steps, state, pod, snap, start, frozenset(skip), copies)


def _statuses_and_rows(
    steps: Sequence[_Step],
    state: CycleState,
    pod: Pod,
    snap: Snapshot,
    start: int,
    skip: Collection[int] = (),
    copies: Mapping[int, NodeInfo] | None = None,
) -> tuple[dict[str, Status], list[int]] | None:
    """Each row's status from the first filter (in profile order) that rejects it, and the rows
    none rejects: the filters a mask says a row passes are not called, the others run as in the
    per-node loop until one rejects. A mask-rejected row's status comes from that plugin's own
    Filter (its reasons), so only the skipped calls differ from the loop. A row with a copy in
    ``copies`` is first filtered on the copy. None when a plugin raised or answered ERROR (the
    loop reports it with its node)."""
    success, error = Code.SUCCESS, Code.ERROR
    rows = [
        (
            name,
            p.filter,
            None if m is None else m.tolist(),
            _given(fm, m, state, pod, snap),
            bool(getattr(p, "filter_reads_node_only", False)),
        )
        for name, p, m, fm in steps
    ]
    node_list = snap.node_list
    n = len(node_list)
    out: dict[str, Status] = {}
    passed: list[int] = []
    for i in [*range(start, n), *range(start)]:  # the loop's order: its statuses in that order
        if i in skip:
            continue
        ni = node_list[i]
        if copies and (view := copies.get(i)) is not None:
            got = _on_copy(rows, state, pod, i, ni, view)
            if got is None:
                return None
            if got.code is not success:
                out[ni.name] = got
                continue
        for name, fn, passes, given, _ in rows:
            if passes is not None and passes[i]:
                continue
            # The given status inline: this runs for every rejected row of the snapshot.
            st = given[i] if given is not None else _status(fn, None, i, state, pod, ni)
            if st is None or st.code is error:
                return None
            if st.code is not success:
                out[ni.name] = st if st.plugin == name else st.with_plugin(name)
                break
        else:
            passed.append(i)
    return out, passed


#: One filter as the whole pass runs it: name, Filter, its mask as a list (or None), the statuses
#: its plugin gives for the rows its mask rejects (or None), whether it reads only the Node.
_Row = tuple[str, Callable[[CycleState, Pod, NodeInfo], Status], "list[bool] | None", "dict[int, Status] | None", bool]


def _on_copy(rows: Sequence[_Row], state: CycleState, pod: Pod, i: int, ni: NodeInfo, view: NodeInfo) -> Status | None:
    """The filters' status on ``view``, row ``i``'s node with pods added: a filter that reads only
    the Node answers from its mask (and its statuses) for the row, as on the node itself; the
    others run on the copy. The first rejection, stamped; SUCCESS when none; None on an error."""
    for name, fn, passes, given, node_only in rows:
        if node_only and passes is not None:
            if passes[i]:
                continue
            target = ni
        else:
            target = view
        st = _status(fn, given if node_only else None, i, state, pod, target)
        if st is None:
            return None
        if st.code is not Code.SUCCESS:
            return None if st.code is Code.ERROR else st.with_plugin(name)
    return SUCCESS


def _status(
    fn: Callable[[CycleState, Pod, NodeInfo], Status],
    given: Mapping[int, Status] | None,
    i: int,
    state: CycleState,
    pod: Pod,
    target: NodeInfo,
) -> Status | None:
    """Row ``i``'s status from one filter: the one its plugin gave from the columns, else its
    Filter's on ``target``; None when the Filter raised (the per-node loop reports it)."""
    if given is not None:
        return given[i]
    try:
        return fn(state, pod, target)
    except Exception:
        return None


#: Fewer rejected rows than this and a FilterStatusesPlugin's columns are not consulted: its
#: column work (a dozen array operations) costs more than a few per-node Filter calls, as on the
#: one- and two-node clusters the event-handling workloads begin with.
GIVEN_FROM_ROWS = 32


def _given(
    fm: fi.FilterMaskPlugin | None, mask: arrays.Mask | None, state: CycleState, pod: Pod, snap: Snapshot
) -> dict[int, Status] | None:
    """The statuses a :class:`~custom_scheduler.framework.interface.FilterStatusesPlugin` gives
    for the rows its mask rejects, by row; None (its Filter is called per row) when it has none,
    raised, or answered None or too few, or its mask rejects fewer than :data:`GIVEN_FROM_ROWS`
    rows. They are taken as its Filter's, as its masks are (an
    ERROR among them makes the pass answer None, as a Filter's does)."""
    given = getattr(fm, "filter_statuses", None)  # the protocol's method, without isinstance's cost
    if mask is None or given is None:
        return None
    rejected = np.flatnonzero(~mask)
    if len(rejected) < GIVEN_FROM_ROWS:
        return None
    try:
        got = cast("Sequence[Status] | None", given(state, pod, snap, rejected))
    except Exception:
        return None
    if got is None or len(got) != len(rejected):
        return None
    return dict(zip(rejected.tolist(), got, strict=True))


#: One active filter with its verdict over the snapshot's rows: a mask, or None (no mask: it runs
#: per node), and the plugin that gave the mask. Filters whose mask passes every row are left out
#: when they read only the Node.
_Step = tuple[str, fi.FilterPlugin, "arrays.Mask | None", "fi.FilterMaskPlugin | None"]


def _steps(
    filters: Sequence[fi.FilterPlugin],
    masks: Mapping[str, fi.FilterMaskPlugin],
    state: CycleState,
    pod: Pod,
    snap: Snapshot,
) -> list[_Step] | None:
    """The active filters in profile order with their masks; None when one raised (the per-node
    loop reports the error with its node)."""
    steps: list[_Step] = []
    for p in filters:
        if p.name in state.skip_filter:
            continue
        fm = masks.get(p.name)
        try:
            m = fm.filter_mask(state, pod, snap) if fm is not None else None
        except Exception:
            return None
        if m is True and getattr(p, "filter_reads_node_only", False):
            continue  # it passes every node, and so every copy of one
        if m is True:
            m = np.ones(len(snap.node_list), dtype=np.bool_)  # a copy with pods added may still fail it
        steps.append((p.name, p, np.zeros(len(snap.node_list), dtype=np.bool_) if m is False else m, fm))
    return steps


def _combined_mask(steps: Sequence[_Step]) -> tuple[arrays.Mask, list[fi.FilterPlugin]] | None:
    """The steps' masks ANDed over the snapshot's rows, and the filters that gave none
    (they run per node on the rows the mask lets through). None when no filter gave a mask (the
    per-node loop is as fast)."""
    mask: arrays.Mask | None = None
    rest: list[fi.FilterPlugin] = []
    for _, p, m, _ in steps:
        if m is None:
            rest.append(p)
        else:
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
