"""The filters' verdict as a function of a node's requested resources and pod count.

A preemption dry run asks the profile's filters about each candidate node after removing its
victims and again after adding each one back (kube-scheduler's SelectVictimsOnNode), on a copy of
the node. For most pods the only filter that reads the node's pods is NodeResourcesFit, and it reads
just the sum of their requests and their number; the others that run read only the Node. Then the
dry run can keep that tally instead of the copy, and this module gives it the filters' verdict on
the tally: exactly :meth:`Framework.run_filter_with_nominated`'s on the copy (the same filters in
profile order, the first rejection stamped with its plugin, nominated pods of at least the pod's
priority counted first). The filters that read only the Node answer once per node: the tally does
not change what they read.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from custom_scheduler.api.model import Pod
from custom_scheduler.api.resources import Resources
from custom_scheduler.framework import interface as fi
from custom_scheduler.framework.types import SUCCESS, Code, CycleState, NodeInfo, Status

#: A RequestsFilterPlugin's ``filter_requested``.
_ByRequests = Callable[[CycleState, Pod, NodeInfo, Resources, int], Status]

#: One active filter: its name, its Filter, and its ``filter_requested`` (None when it reads only
#: the Node, and its Filter is asked once per node).
_Step = tuple[str, Callable[[CycleState, Pod, NodeInfo], Status], "_ByRequests | None"]


def requests_fit(
    filters: Sequence[fi.FilterPlugin],
    state: CycleState,
    pod: Pod,
    extensions_see_added_pods: bool,
    nominated: Callable[[str], Sequence[Pod]],
) -> fi.RequestsFit | None:
    """:data:`~custom_scheduler.framework.interface.RequestsFit` for ``pod`` over the profile's
    ``filters`` (those ``state`` skips left out), or None when a filter reads more of the node's
    pods than the tally holds or a PreFilter extension must follow the pods removed and added."""
    if extensions_see_added_pods:
        return None
    steps: list[_Step] = []
    for p in filters:
        if p.name in state.skip_filter:
            continue
        if getattr(p, "filter_reads_node_only", False):
            steps.append((p.name, p.filter, None))
        elif (by_requests := getattr(p, "filter_requested", None)) is not None:
            steps.append((p.name, p.filter, by_requests))
        else:
            return None
    return lambda state, ni: _node_fit(steps, state, pod, ni, nominated(ni.name))


def _node_fit(
    steps: Sequence[_Step], state: CycleState, pod: Pod, ni: NodeInfo, nominated: Sequence[Pod]
) -> fi.NodeFit:
    """The verdict on ``ni`` for a tally: the node-only filters asked now, in order up to the first
    that rejects (the verdict of every tally reaching it), the others on each tally."""
    on_tally: list[tuple[str, _ByRequests]] = []
    node_verdict: Status = SUCCESS
    for name, on_node, on_requests in steps:
        if on_requests is not None:
            on_tally.append((name, on_requests))
            continue
        try:
            st = on_node(state, pod, ni)
        except Exception as e:
            node_verdict = Status.from_exception(e, name)
            break
        if st.code is not Code.SUCCESS:
            node_verdict = st.with_plugin(name)
            break

    def run(requested: Resources, count: int) -> Status:
        for name, by_requests in on_tally:  # as run_filter: the first rejection, stamped
            try:
                st = by_requests(state, pod, ni, requested, count)
            except Exception as e:
                return Status.from_exception(e, name)
            if st.code is not Code.SUCCESS:
                return st.with_plugin(name)
        return node_verdict

    add = [p for p in nominated if p.priority >= pod.priority and p.uid != pod.uid]
    if not add:
        return run
    extra = Resources()
    for p in add:
        extra.add(p.requests)

    def with_nominated(requested: Resources, count: int) -> Status:
        more = requested.copy()  # the node with them added must fit first, as upstream's copy
        more.add(extra)
        if not (st := run(more, count + len(add))).is_success:
            return st
        return run(requested, count)

    return with_nominated
