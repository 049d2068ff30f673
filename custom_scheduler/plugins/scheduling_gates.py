"""SchedulingGates: a pod with ``spec.schedulingGates`` is not ready to be scheduled.

Gates are names that an external controller (a quota manager, a provisioner, a gang scheduler)
puts on a pod at creation and removes when the pod may be scheduled. kube-scheduler checks them at
PreEnqueue, before the pod ever enters activeQ: a gated pod costs no scheduling cycle, gets no
``FailedScheduling`` event and no ``PodScheduled`` condition from the scheduler (the API server
itself sets ``PodScheduled=False, reason SchedulingGated`` on creation). The queue keeps it aside as
*gated* and looks at it again only when the pod itself is updated, since no other cluster event can
remove a gate; the update that removes the last gate sends it straight to activeQ.

The rejection is UnschedulableAndUnresolvable: nothing the scheduler can do (preemption included)
opens a gate. The message is upstream's, a Go ``%v`` of the gate names:
``waiting for scheduling gates: [example.com/a example.com/b]``.
"""

from __future__ import annotations

from typing import Any, ClassVar

from custom_scheduler.api.model import Pod
from custom_scheduler.framework import cluster_events as ce
from custom_scheduler.framework import registry
from custom_scheduler.framework.interface import Handle
from custom_scheduler.framework.types import SUCCESS, Status

NAME = "SchedulingGates"


def gated_message(gates: tuple[str, ...]) -> str:
    """kube-scheduler's message for a pod waiting on ``gates`` (Go's ``%v`` of a []string)."""
    return f"waiting for scheduling gates: [{' '.join(gates)}]"


class SchedulingGates:
    """PreEnqueue: Success without gates, UnschedulableAndUnresolvable while any gate remains."""

    name: ClassVar[str] = NAME

    def __init__(self, args: Any, handle: Handle) -> None:
        del args, handle

    def events_to_register(self) -> list[ce.ClusterEventWithHint]:
        """Only the pod's own update can remove its last gate."""
        event = ce.ClusterEvent(ce.Resource.TARGET_POD, ce.Action.UPDATE_POD_SCHEDULING_GATES_ELIMINATED)
        return [ce.ClusterEventWithHint(event, _after_gates_eliminated)]

    def pre_enqueue(self, pod: Pod) -> Status:
        if not pod.scheduling_gates:
            return SUCCESS
        return Status.unresolvable(gated_message(pod.scheduling_gates)).with_plugin(NAME)


def _after_gates_eliminated(pod: Pod, old: Pod, new: Pod) -> ce.Hint:
    return ce.Hint.SKIP if new.scheduling_gates else ce.Hint.QUEUE


SPEC = registry.PluginSpec(NAME, factory=SchedulingGates, parse_args=registry.no_args)
