"""NodeUnschedulable: cordoned nodes (``spec.unschedulable``) take only pods that tolerate it.

``kubectl cordon`` sets ``spec.unschedulable``; the node lifecycle controller mirrors it as the taint
``node.kubernetes.io/unschedulable:NoSchedule``. A pod tolerating that taint (DaemonSet pods do) may
still land on a cordoned node, which is why the check is expressed as a toleration match rather than
a plain flag test. Eviction cannot uncordon a node, so the rejection is UnschedulableAndUnresolvable.
"""

from __future__ import annotations

from typing import Any, ClassVar

from custom_scheduler.api.model import Node, Pod, Taint, tolerates_all
from custom_scheduler.framework import cluster_events as ce
from custom_scheduler.framework import registry
from custom_scheduler.framework.arrays import Mask, NodeArrays
from custom_scheduler.framework.interface import Handle
from custom_scheduler.framework.types import SUCCESS, Code, CycleState, NodeInfo, Snapshot, Status
from custom_scheduler.plugins import signers

NAME = "NodeUnschedulable"

ERR_REASON_UNSCHEDULABLE = "node(s) were unschedulable"
ERR_REASON_UNKNOWN_CONDITION = "node(s) had unknown conditions"

#: The taint a cordoned node is treated as carrying.
UNSCHEDULABLE_TAINT = Taint("node.kubernetes.io/unschedulable", "", "NoSchedule")


_REJECT = Status(Code.UNSCHEDULABLE_AND_UNRESOLVABLE, (ERR_REASON_UNSCHEDULABLE,), NAME)  # shared, pre-stamped


class NodeUnschedulable:
    """Filter: reject cordoned nodes unless the pod tolerates the unschedulable taint."""

    name: ClassVar[str] = NAME
    #: Its Filter reads only the Node, never the pods on it (see ``FilterMaskPlugin``).
    filter_reads_node_only: ClassVar[bool] = True

    def __init__(self, args: Any, handle: Handle) -> None:
        del args, handle

    def sign_pod(self, pod: Pod) -> signers.Fragments:
        """What this plugin reads of the pod (opportunistic batching)."""
        return signers.tolerations(pod)

    def events_to_register(self) -> list[ce.ClusterEventWithHint]:
        """A node added schedulable or uncordoned; the pod given a toleration of the cordon taint."""
        return [
            ce.ClusterEventWithHint(
                ce.ClusterEvent(ce.Resource.NODE, ce.Action.ADD | ce.Action.UPDATE_NODE_TAINT), _after_node_change
            ),
            ce.ClusterEventWithHint(
                ce.ClusterEvent(ce.Resource.TARGET_POD, ce.Action.UPDATE_POD_TOLERATION), _after_toleration_change
            ),
        ]

    def filter(self, state: CycleState, pod: Pod, node_info: NodeInfo) -> Status:
        node = node_info.node
        if node is None:
            return Status.unresolvable(ERR_REASON_UNKNOWN_CONDITION)
        if not node.unschedulable or tolerates_all(pod.tolerations, UNSCHEDULABLE_TAINT):
            return SUCCESS
        return _REJECT

    def filter_mask(self, state: CycleState, pod: Pod, snap: Snapshot) -> Mask | bool | None:
        """:meth:`filter` for every snapshot node at once (True: all pass)."""
        a: NodeArrays = snap.arrays
        if tolerates_all(pod.tolerations, UNSCHEDULABLE_TAINT):
            return True
        mask: Mask = a.unschedulable == 0
        return mask


def _after_node_change(pod: Pod, old: Node | None, new: Node) -> ce.Hint:
    uncordoned = old.unschedulable and not new.unschedulable if old is not None else not new.unschedulable
    return ce.Hint.QUEUE if uncordoned else ce.Hint.SKIP


def _after_toleration_change(pod: Pod, old: Pod, new: Pod) -> ce.Hint:
    return ce.Hint.QUEUE if tolerates_all(new.tolerations, UNSCHEDULABLE_TAINT) else ce.Hint.SKIP


SPEC = registry.PluginSpec(NAME, factory=NodeUnschedulable, parse_args=registry.no_args)
