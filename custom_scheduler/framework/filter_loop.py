"""The per-node Filter loop: the reference every faster filter path must equal.

Kept apart from :mod:`custom_scheduler.framework.runtime` (the extension points) and
:mod:`custom_scheduler.framework.masked_filter` (the passes over a snapshot's columns, which fall
back to this loop whenever they could say less): upstream's findNodesThatPassFilters, node by node
from a rotating start until enough nodes pass.
"""

from __future__ import annotations

from collections.abc import Sequence

from custom_scheduler.api.model import Pod
from custom_scheduler.framework import interface as fi
from custom_scheduler.framework.types import Code, CycleState, NodeInfo, Status


def filter_nodes(
    filters: Sequence[fi.FilterPlugin], state: CycleState, pod: Pod, nodes: Sequence[NodeInfo], start: int, want: int
) -> tuple[list[NodeInfo], dict[str, Status], int]:
    """``filters`` (less those PreFilter skipped for this pod) on ``nodes`` from index ``start``
    (wrapping) until ``want`` pass: (feasible nodes, each rejected node's status stamped with its
    plugin, nodes processed). A plugin's exception is an ERROR status for that node; an ERROR ends
    the search there, as upstream cancels it."""
    skip = state.skip_filter
    fns = [(p.name, p.filter) for p in filters if p.name not in skip]
    success = Code.SUCCESS
    feasible: list[NodeInfo] = []
    statuses: dict[str, Status] = {}
    # One rotated copy of the list (C speed) instead of index arithmetic per node.
    order = [*nodes[start:], *nodes[:start]] if start else nodes
    processed = 0
    name = ""
    for processed, ni in enumerate(order, 1):  # noqa: B007 - read after the loop
        try:
            for name, fn in fns:
                st = fn(state, pod, ni)
                if st.code is not success:
                    statuses[ni.name] = st if st.plugin == name else st.with_plugin(name)
                    break
            else:
                feasible.append(ni)
                if len(feasible) >= want:
                    break
                continue
            if st.code is Code.ERROR:
                break  # upstream cancels the search: the attempt fails with this error
        except Exception as e:
            statuses[ni.name] = Status.from_exception(e, name)
            break
    return feasible, statuses, processed
