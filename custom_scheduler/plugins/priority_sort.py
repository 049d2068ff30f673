"""PrioritySort: the queue order, higher ``spec.priority`` first, then first come first served.

kube-scheduler has exactly one QueueSort plugin per scheduler (all profiles share the active queue),
and this is it by default. The tie-break on the queue timestamp (when the pod was last added to the
queue, not its creation time) keeps equal-priority pods FIFO, so a pod that keeps failing cannot
starve the ones behind it: each retry re-enters with a fresh timestamp.
"""

from __future__ import annotations

from typing import Any, ClassVar

from custom_scheduler.api.model import Pod
from custom_scheduler.framework import registry
from custom_scheduler.framework.interface import Handle

NAME = "PrioritySort"


class PrioritySort:
    """Orders the active queue by priority, then by queue timestamp."""

    name: ClassVar[str] = NAME

    def __init__(self, args: Any, handle: Handle) -> None:
        del args, handle

    def less(self, a: Pod, a_ts: float, b: Pod, b_ts: float) -> bool:
        """Whether ``a`` (queued at ``a_ts``) should be popped before ``b`` (queued at ``b_ts``)."""
        return a.priority > b.priority or (a.priority == b.priority and a_ts < b_ts)


SPEC = registry.PluginSpec(NAME, factory=PrioritySort, parse_args=registry.no_args)
