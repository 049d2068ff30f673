"""Snapshot nodes with their nominated pods added, kept across scheduling cycles.

Filtering a pod on a node that holds pods nominated to it (preemptors waiting for their victims to
go) runs the filters on a copy of the node with those pods added (kube-scheduler's
RunFilterPluginsWithNominatedPods). During a wave of preemptions hundreds of nodes hold one, and
every following preemptor's first attempt copied each of them again: a third of that attempt. The
copy depends only on the node and the pods added, so it is kept while both stay the same.

Only for the snapshot's own NodeInfos: they change generation whenever they change. A preemption
dry run's node copy keeps its source's generation while it removes and adds back victims, so it
must never be looked up here.
"""

from __future__ import annotations

from collections.abc import Container, Sequence

from custom_scheduler.api.model import Pod
from custom_scheduler.framework.types import NodeInfo


class NominatedViews:
    """One copy per node name: (source NodeInfo, its generation, the added pods as given, their
    UIDs) -> copy."""

    __slots__ = ("_views",)

    def __init__(self) -> None:
        self._views: dict[str, tuple[NodeInfo, int, Sequence[Pod], tuple[str, ...], NodeInfo]] = {}

    def with_pods(self, node_info: NodeInfo, add: Sequence[Pod]) -> NodeInfo:
        """``node_info`` with ``add`` added; the same object while neither changed. Callers
        must not modify it (filters only read), nor ``add`` after the call: the same sequence
        object (the nominator's tuple, kept while the node's nominations are) is taken as the
        same pods without comparing their UIDs."""
        got = self._views.get(node_info.name)
        if got is not None and got[0] is node_info and got[1] == node_info.generation:
            if got[2] is add:
                return got[4]
            uids = tuple(p.uid for p in add)
            if got[3] == uids:
                return got[4]
        else:
            uids = tuple(p.uid for p in add)
        view = node_info.clone()
        for p in add:
            view.add_pod(p)
        self._views[node_info.name] = (node_info, node_info.generation, add, uids, view)
        return view

    def retain(self, names: Container[str]) -> None:
        """Forget the nodes that hold no nominated pod any more (bounded by the nodes that do)."""
        for name in [n for n in self._views if n not in names]:
            del self._views[name]
