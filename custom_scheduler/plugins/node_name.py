"""NodeName: a pod that names its node (``spec.nodeName``) fits only that node.

The scheduler normally only sees pods without ``spec.nodeName``, but the filter still matters: the
same pipeline runs for ``explain`` and ``simulate`` on arbitrary pods, and preemption re-runs filters
on pods that may carry a name. The rejection is UnschedulableAndUnresolvable because evicting pods
never changes a node's name.
"""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np

from custom_scheduler.api.model import Pod
from custom_scheduler.framework import cluster_events as ce
from custom_scheduler.framework import registry
from custom_scheduler.framework.arrays import Mask
from custom_scheduler.framework.interface import Handle
from custom_scheduler.framework.types import SUCCESS, Code, CycleState, NodeInfo, Snapshot, Status
from custom_scheduler.plugins import signers

NAME = "NodeName"

ERR_REASON = "node(s) didn't match the requested node name"


def fits(pod: Pod, node_info: NodeInfo) -> bool:
    """Whether ``pod`` names no node or names this one."""
    return not pod.node_name or pod.node_name == node_info.name


_REJECT = Status(Code.UNSCHEDULABLE_AND_UNRESOLVABLE, (ERR_REASON,), NAME)  # shared, pre-stamped


class NodeName:
    """Filter: ``spec.nodeName`` must be empty or equal to the node's name."""

    name: ClassVar[str] = NAME
    #: Its Filter reads only the Node, never the pods on it (see ``FilterMaskPlugin``).
    filter_reads_node_only: ClassVar[bool] = True

    def __init__(self, args: Any, handle: Handle) -> None:
        del args, handle

    def sign_pod(self, pod: Pod) -> signers.Fragments:
        """What this plugin reads of the pod (opportunistic batching)."""
        return signers.node_name(pod)

    def events_to_register(self) -> list[ce.ClusterEventWithHint]:
        """Only a new node can be the one the pod names (no hint: always worth a retry)."""
        return [ce.ClusterEventWithHint(ce.NODE_ADD)]

    def filter(self, state: CycleState, pod: Pod, node_info: NodeInfo) -> Status:
        if fits(pod, node_info):
            return SUCCESS
        return _REJECT

    def filter_mask(self, state: CycleState, pod: Pod, snap: Snapshot) -> Mask | bool | None:
        """:meth:`filter` for every snapshot node at once (True: all pass)."""
        if not pod.node_name:
            return True
        mask = np.zeros(len(snap.node_list), dtype=np.bool_)
        i = snap.positions.get(pod.node_name)
        if i is not None:
            mask[i] = True
        return mask


SPEC = registry.PluginSpec(NAME, factory=NodeName, parse_args=registry.no_args)
