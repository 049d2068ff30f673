"""NodeUnschedulable: cordoned nodes (``spec.unschedulable``) take only pods that tolerate it.

``kubectl cordon`` sets ``spec.unschedulable``; the node lifecycle controller mirrors it as the taint
``node.kubernetes.io/unschedulable:NoSchedule``. A pod tolerating that taint (DaemonSet pods do) may
still land on a cordoned node, which is why the check is expressed as a toleration match rather than
a plain flag test. Eviction cannot uncordon a node, so the rejection is UnschedulableAndUnresolvable.
"""

from __future__ import annotations

from typing import Any, ClassVar

from custom_scheduler.api.model import Pod, Taint, tolerates_all
from custom_scheduler.framework import registry
from custom_scheduler.framework.arrays import Mask, NodeArrays
from custom_scheduler.framework.interface import Handle
from custom_scheduler.framework.types import SUCCESS, Code, CycleState, NodeInfo, Snapshot, Status

NAME = "NodeUnschedulable"

ERR_REASON_UNSCHEDULABLE = "node(s) were unschedulable"
ERR_REASON_UNKNOWN_CONDITION = "node(s) had unknown conditions"

#: The taint a cordoned node is treated as carrying.
UNSCHEDULABLE_TAINT = Taint("node.kubernetes.io/unschedulable", "", "NoSchedule")


_REJECT = Status(Code.UNSCHEDULABLE_AND_UNRESOLVABLE, (ERR_REASON_UNSCHEDULABLE,), NAME)  # shared, pre-stamped


class NodeUnschedulable:
    """Filter: reject cordoned nodes unless the pod tolerates the unschedulable taint."""

    name: ClassVar[str] = NAME

    def __init__(self, args: Any, handle: Handle) -> None:
        del args, handle

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


SPEC = registry.PluginSpec(NAME, factory=NodeUnschedulable, parse_args=registry.no_args)
