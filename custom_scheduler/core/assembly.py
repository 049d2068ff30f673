"""One wiring of the scheduling queue, the profiles' frameworks and the scheduler.

The three need each other: the queue asks the profiles for its order (QueueSort) and whether a pod
may enter activeQ (PreEnqueue); the frameworks' Handles need the queue's ``activate`` and the
nominator; the :class:`~custom_scheduler.core.scheduler.Scheduler` needs the queue and the
frameworks, and is what knows the *current* profiles (a config reload swaps them there). So one of
them must be built before what it asks exists. Here the queue is, with a :class:`QueueHooks` as
its callbacks, bound to the scheduler as soon as it exists, before any pod is queued.

:func:`assemble` is that order, in one place: the daemon's composition root
(:class:`custom_scheduler.server.app.App`) and ``simulate``
(:class:`custom_scheduler.tools.simulate.Simulation`) both call it and differ only in what they
plug in: how the frameworks are built (:data:`FrameworkFactory`: with an API client, or over a
snapshot file), the :class:`Ports` the decisions go to, and the clock.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from custom_scheduler.api.model import Pod
from custom_scheduler.config.gates import DEFAULT_GATES, FeatureGates
from custom_scheduler.config.schema import SchedulerConfig
from custom_scheduler.core import queue as q
from custom_scheduler.core.algorithm import Algorithm
from custom_scheduler.core.binding import Executor
from custom_scheduler.core.cache import Cache
from custom_scheduler.core.cycle import Decision
from custom_scheduler.core.nominator import Nominator
from custom_scheduler.core.ports import Clock, EventSink, Observer
from custom_scheduler.core.scheduler import Scheduler
from custom_scheduler.framework.cluster_events import ClusterEvent
from custom_scheduler.framework.evictor import Evictor, NoEvictor
from custom_scheduler.framework.fence import Fence
from custom_scheduler.framework.runtime import Framework
from custom_scheduler.framework.types import Snapshot


class QueueHooks:
    """The queue's callbacks into the profiles, made before the scheduler that answers them.

    The queue is built first (the frameworks need its ``activate``), so its ``less`` and
    ``pre_enqueue`` are this object's methods, forwarded to the scheduler once :meth:`bind` names
    it. Nothing is queued before that: :func:`assemble` binds before it returns.
    """

    __slots__ = ("_scheduler",)

    def __init__(self) -> None:
        self._scheduler: Scheduler | None = None

    def bind(self, scheduler: Scheduler) -> None:
        self._scheduler = scheduler

    def _bound(self) -> Scheduler:
        if self._scheduler is None:
            raise RuntimeError("the queue asked its profiles before the scheduler was assembled")
        return self._scheduler

    def less(self, a: q.QueuedPodInfo, b: q.QueuedPodInfo) -> bool:
        return self._bound().queue_less(a, b)

    def pre_enqueue(self, pod: Pod) -> str | None:
        return self._bound().pre_enqueue(pod)

    # The queue's Hints protocol.
    def interested(self, event: ClusterEvent) -> Callable[[str], bool]:
        return self._bound().hints_interested(event)

    def worth(self, qpi: q.QueuedPodInfo, event: ClusterEvent, old: Any, new: Any) -> bool:
        return self._bound().hints_worth(qpi, event, old, new)

    def targets(self, plugin: str, event: ClusterEvent, old: Any, new: Any) -> frozenset[str] | None:
        return self._bound().hints_targets(plugin, event, old, new)

    def pod_keys(self, plugin: str, pod: Pod) -> frozenset[Hashable] | None:
        return self._bound().hints_pod_keys(plugin, pod)

    def event_keys(self, plugin: str, event: ClusterEvent, old: Any, new: Any) -> frozenset[Hashable] | None:
        return self._bound().hints_event_keys(plugin, event, old, new)


@dataclass(frozen=True, slots=True)
class FrameworkInputs:
    """What the frameworks' Handles get from the scheduling side: the snapshot each cycle
    refreshes, the nominator's pods per node, and the queue's ``activate`` (a plugin that knows
    pods can make progress, e.g. a gang's other members). A config reload builds its new frameworks
    over the same inputs."""

    snapshot: Snapshot
    nominated: Callable[[str], Sequence[Pod]]
    activate: Callable[[Sequence[Pod]], object]
    #: Whether a pod's own preemption is still being carried out (the evictor's), for
    #: DefaultPreemption's PreEnqueue.
    preempting: Callable[[str], bool]


#: Builds the frameworks of ``config``'s profiles over the inputs (the daemon's, or offline ones).
FrameworkFactory = Callable[[SchedulerConfig, FrameworkInputs], Mapping[str, Framework]]


@dataclass(frozen=True, slots=True)
class Ports:
    """Where the scheduler's decisions go. The daemon's reach the API server (the event writer,
    the evictor, a bind pool); ``simulate``'s stay in memory (a recorder, victims removed from
    the cache, binds confirmed at once). Unset ones take the :class:`Scheduler`'s defaults."""

    events: EventSink | None
    evictor: Evictor | None = None
    executor: Executor | None = None
    confirm: Callable[[Pod, str], None] | None = None
    observer: Observer | None = None
    on_decision: Callable[[Decision], None] | None = None
    fence: Fence | None = None
    rng: random.Random | None = None
    dry_run: bool = False
    gates: FeatureGates = DEFAULT_GATES
    """kube-scheduler's feature gates this implementation follows (``run --feature-gates``)."""


@dataclass(frozen=True, slots=True)
class Assembly:
    """The assembled parts: the scheduler, and what it was built over."""

    scheduler: Scheduler
    queue: q.SchedulingQueue
    inputs: FrameworkInputs


def assemble(
    config: SchedulerConfig,
    cache: Cache,
    frameworks: FrameworkFactory,
    ports: Ports,
    *,
    clock: Clock = time.monotonic,
) -> Assembly:
    """The queue (on ``clock``, with ``config``'s backoffs), the frameworks ``frameworks`` builds
    over it, and the scheduler running them against ``cache`` and ``ports``, in that order."""
    hooks = QueueHooks()
    queue = q.SchedulingQueue(
        hooks.less,
        clock=clock,
        initial_backoff=float(config.pod_initial_backoff_seconds),
        max_backoff=float(config.pod_max_backoff_seconds),
        pre_enqueue=hooks.pre_enqueue,
        hints=hooks,
        pop_from_backoff=ports.gates.scheduler_pop_from_backoff_q,
    )
    nominator = Nominator()
    evictor = ports.evictor if ports.evictor is not None else NoEvictor()
    inputs = FrameworkInputs(Snapshot(), nominator.pods_on, queue.activate, evictor.running)
    scheduler = Scheduler(
        profiles=frameworks(config, inputs),
        cache=cache,
        queue=queue,
        writer=ports.events,
        algorithm=Algorithm(percentage_of_nodes_to_score=config.percentage_of_nodes_to_score),
        nominator=nominator,
        snapshot=inputs.snapshot,
        dry_run=ports.dry_run,
        observer=ports.observer,
        on_decision=ports.on_decision,
        fence=ports.fence,
        evictor=evictor,
        executor=ports.executor,
        confirm=ports.confirm,
        rng=ports.rng,
        clock=clock,
        batching=ports.gates.opportunistic_batching,
    )
    hooks.bind(scheduler)
    return Assembly(scheduler, queue, inputs)
