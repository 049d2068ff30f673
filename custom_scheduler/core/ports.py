"""What the scheduling and binding cycles need from the world, as Protocols.

The daemon, ``simulate`` and ``explain`` run the same cycles (:mod:`custom_scheduler.core.cycle`,
:mod:`custom_scheduler.core.binding`); they differ only in the ports they plug in:

=============  ==========================================  ==========================================
port           daemon                                      offline (simulate, shadow mode)
=============  ==========================================  ==========================================
queue          :class:`~core.queue.SchedulingQueue`        the same class, on a virtual clock
nominator      :class:`~core.nominator.Nominator`          the same class
events         :class:`~core.events.Writer` (API writer)   :class:`RecordingEvents`
binding        a thread pool running binding cycles        inline: decisions confirmed at once
evictor        :class:`~framework.evictor.ApiEvictor`      ``MemoryEvictor`` / ``NoEvictor``
clock          ``time.monotonic``                          a virtual clock
=============  ==========================================  ==========================================

The queue and the nominator are in-memory structures in every mode, so they are the real classes;
the Protocols name the part of them the cycles use, which is what a fake in a component test must
provide.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from custom_scheduler.api.model import Pod
from custom_scheduler.core.queued_pod_info import QueuedPodInfo
from custom_scheduler.framework.cluster_events import ClusterEvent

Clock = Callable[[], float]


class QueuePort(Protocol):
    @property
    def scheduling_cycle(self) -> int: ...

    def done(self, uid: str) -> None: ...

    def add_backoff(self, qpi: Any) -> object: ...

    def add_unschedulable_if_not_present(self, qpi: Any, pod_scheduling_cycle: int) -> object: ...

    def delete(self, pod: Pod | str) -> bool: ...

    def move_all_to_active_or_backoff(
        self,
        event: ClusterEvent,
        old: Any = None,
        new: Any = None,
        pre_check: Callable[[Pod], bool] | None = None,
    ) -> int: ...

    def activate(self, pods: Sequence[Pod]) -> int: ...

    def take_members(self, match: Callable[[Pod], bool]) -> list[Any]:
        """The other queued members of a group, in flight for one group cycle."""
        ...


class NominatorPort(Protocol):
    def add(self, pod: Pod, node: str) -> None: ...

    def remove(self, pod: Pod) -> None: ...

    def node_of(self, uid: str) -> str | None: ...

    def by_node(self) -> dict[str, tuple[Pod, ...]]: ...


class EventSink(Protocol):
    """Events and the PodScheduled condition (asynchronous in the daemon: never blocks a cycle)."""

    def event(self, pod: Pod, *, type_: str, reason: str, action: str, note: str, controller: str = "") -> None: ...

    def pod_condition(
        self, pod: Pod, *, status: str, reason: str, message: str, nominated: str | None = None
    ) -> None: ...

    def nominate(self, pod: Pod, node: str) -> None:
        """Set ``status.nominatedNodeName`` alone (NominatedNodeNameForExpectation)."""
        ...


@dataclass(slots=True)
class RecordedEvent:
    pod: str
    type: str
    reason: str
    note: str


@dataclass(slots=True)
class RecordingEvents:
    """An in-memory :class:`EventSink`: what the daemon would have written (simulate, tests)."""

    events: list[RecordedEvent] = field(default_factory=list)
    conditions: dict[str, tuple[str, str, str]] = field(default_factory=dict)
    nominations: dict[str, str] = field(default_factory=dict)

    def event(self, pod: Pod, *, type_: str, reason: str, action: str, note: str, controller: str = "") -> None:
        self.events.append(RecordedEvent(pod.key, type_, reason, note))

    def pod_condition(self, pod: Pod, *, status: str, reason: str, message: str, nominated: str | None = None) -> None:
        self.conditions[pod.key] = (status, reason, message)
        if nominated is not None:
            if nominated:
                self.nominations[pod.key] = nominated
            else:
                self.nominations.pop(pod.key, None)

    def nominate(self, pod: Pod, node: str) -> None:
        self.nominations[pod.key] = node

    def last(self, pod_key: str) -> RecordedEvent | None:
        for e in reversed(self.events):
            if e.pod == pod_key:
                return e
        return None


class Observer:
    """Hooks for metrics; the default does nothing (tests and simulate need none)."""

    #: Whether the cycles should draw, per cycle, whether to time each plugin (upstream's 10 %
    #: sample). Off by default: the draw takes a number from the cycle's random source, which
    #: would shift a seeded simulate's tie-breaks for metrics nobody reads.
    samples_plugins = False

    def attempt(self, profile: str, result: str, seconds: float) -> None:
        """One scheduling attempt ended (``scheduler_schedule_attempts_total``): ``scheduled`` once
        bound, ``unschedulable`` or ``error`` when it failed in either cycle; ``seconds`` since
        the cycle started (upstream's PodScheduled / PodUnschedulable / PodScheduleError)."""

    def algorithm(self, seconds: float) -> None:
        """The scheduling algorithm of one cycle (snapshot, PreFilter to Score, and PostFilter
        when it failed) took ``seconds`` (``scheduler_scheduling_algorithm_duration_seconds``)."""

    def pod_scheduled(self, profile: str, attempts: int, since_first_attempt: float | None) -> None:
        """A pod was bound after ``attempts`` attempts, ``since_first_attempt`` seconds after its
        first (``scheduler_pod_scheduling_attempts``, ``scheduler_pod_scheduling_sli_duration_seconds``)."""

    def bound(self, profile: str, seconds: float, retries: int) -> None: ...

    def pending(self, counts: Mapping[str, int]) -> None: ...

    def preemption(self, profile: str, victims: int) -> None:
        """PostFilter ran (``scheduler_preemption_attempts_total``); ``victims`` it chose."""

    def group_attempt(self, profile: str, result: str, seconds: float) -> None:
        """One PodGroup scheduling attempt (``scheduler_podgroup_schedule_attempts_total``)."""


class Hints(Protocol):
    """The queueing hints of the pods' profiles, as the scheduling queue asks them (under its lock:
    cheap, and never calling the queue); :class:`~custom_scheduler.core.assembly.QueueHooks`
    forwards them to the scheduler's profiles."""

    def interested(self, event: ClusterEvent) -> Callable[[str], bool]:
        """Which rejecting plugins ``event`` may concern (a name no profile knows counts)."""
        ...

    def worth(self, qpi: QueuedPodInfo, event: ClusterEvent, old: Any, new: Any) -> bool:
        """Whether ``event`` may make ``qpi`` (rejected by its ``unschedulable_plugins``) schedulable."""
        ...

    def targets(self, plugin: str, event: ClusterEvent, old: Any, new: Any) -> frozenset[str] | None:
        """The UIDs of the pods ``plugin`` rejected that ``event`` can concern (None: any)."""
        ...

    def pod_keys(self, plugin: str, pod: Pod) -> frozenset[Hashable] | None:
        """The keys ``pod``, rejected by ``plugin``, waits on in its profile (None: unkeyed)."""
        ...

    def event_keys(self, plugin: str, event: ClusterEvent, old: Any, new: Any) -> frozenset[Hashable] | None:
        """The keys ``event`` carries for ``plugin``'s pods, over every profile (None: any pod)."""
        ...
