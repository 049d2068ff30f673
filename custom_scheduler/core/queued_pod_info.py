"""A pending pod as the scheduling queue holds it: the pod plus its queueing history.

Its own module (upstream's ``framework.QueuedPodInfo``) because every part of the queue holds
these entries (the active, backoff and unschedulable sub-queues and :mod:`~custom_scheduler.core.queue`
that composes them) and the cycles read and annotate them; :mod:`custom_scheduler.core.queue`
re-exports it, which is where the rest of the package imports it from.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

from custom_scheduler.api import model


@dataclass(slots=True, eq=False)
class QueuedPodInfo:
    """A pod plus its queueing history. Identity-compared; keyed by ``pod.uid``."""

    pod: model.Pod
    timestamp: float
    """When the pod was last added to the queue (clock seconds); QueueSort and backoff read it."""
    attempts: int = 0
    """Scheduling attempts so far, counted on every pop."""
    initial_attempt_timestamp: float | None = None
    """When the pod was first popped, for the pod-scheduling-duration metric."""
    unschedulable_plugins: set[str] = field(default_factory=set)
    """Plugins that rejected the last attempt; cleared on pop, filled by the failure handler."""
    seq: int = 0
    """Insertion sequence, the heaps' last tie-breaker (FIFO among equals)."""
    gating_plugin: str = ""
    """The PreEnqueue plugin that rejected the pod the last time PreEnqueue ran ("" when it passed;
    kube-scheduler's ``GatingPlugin``). It is also added to ``unschedulable_plugins``, so events
    that plugin cares about move the pod. Only ever set while the pod waits in unschedulable."""

    @property
    def uid(self) -> str:
        return self.pod.uid

    @property
    def gated(self) -> bool:
        """Held back by PreEnqueue (kube-scheduler's ``Gated``): never popped until it passes."""
        return bool(self.gating_plugin)


# Fields that change without the pod's scheduling requirements changing (status and bookkeeping);
# everything else in model.Pod is spec or metadata, which kube-scheduler's isPodUpdated compares.
_STATUS_FIELDS = frozenset(
    {"resource_version", "phase", "start_time", "nominated_node_name", "scheduled_condition", "disruption_target"}
)
_SPEC_FIELDS = tuple(f.name for f in dataclasses.fields(model.Pod) if f.name not in _STATUS_FIELDS)


def spec_signature(pod: model.Pod) -> tuple[object, ...]:
    """The values of every field of ``pod`` that can affect where (or whether) it schedules."""
    return tuple(getattr(pod, name) for name in _SPEC_FIELDS)


def may_have_become_schedulable(old: model.Pod, new: model.Pod) -> bool:
    """Whether ``new`` differs from ``old`` in more than status and resourceVersion."""
    return spec_signature(old) != spec_signature(new)
