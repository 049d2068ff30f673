"""Carrying out a preemption that PostFilter decided: evict the victims, clear nominations.

DefaultPreemption only decides (its :class:`~custom_scheduler.framework.interface.PostFilterResult`
names the node, the victims and the nominations to clear). The scheduling cycle records the
preemptor's nomination in memory at once and hands the rest to an :class:`Evictor`:

- :class:`ApiEvictor` (the daemon) runs the API calls on its own pool, off the scheduling thread,
  as kube-scheduler's asynchronous preemption (beta since 1.33): for every victim, PATCH its status
  with ``DisruptionTarget=True`` (reason ``PreemptionByScheduler``), DELETE it gracefully with a
  uid precondition, and emit a ``Preempted`` event; then null ``status.nominatedNodeName`` of the
  lower-priority pods that lost their nomination. Until that finishes the preemptor is *running a
  preemption* (:meth:`Evictor.running`): the scheduler's PreEnqueue keeps it out of activeQ, so it
  cannot preempt again on another node before its victims are marked (upstream's
  ``IsPodRunningPreemption`` check), and ``on_done`` requeues it after.
- :class:`MemoryEvictor` (``simulate``) removes the victims from the in-memory cluster at once.

Fencing: a leader that lost its Lease stops before each write.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from typing import Any, Protocol

import structlog
import tenacity

from custom_scheduler.api.model import Pod
from custom_scheduler.framework.clusterapi import STRATEGIC_PATCH_CT, ClusterClient, api_errors, pod_path
from custom_scheduler.framework.fence import Fence

log = structlog.get_logger("custom_scheduler.preemption")

DISRUPTION_TARGET = "DisruptionTarget"
REASON_PREEMPTION_BY_SCHEDULER = "PreemptionByScheduler"
DISRUPTION_MESSAGE_FORMAT = "{scheduler}: preempting to accommodate a higher priority pod"
EVENT_REASON = "Preempted"
#: Preemptors whose victims :meth:`ApiEvictor.running` keeps watching, at most (oldest dropped).
MAX_WATCHED = 4096
EVENT_ACTION = "Preempting"
EVENT_NOTE_FORMAT = "Preempted by pod {uid} on node {node}"

#: Victims are evicted in parallel with at most this many API calls in flight (kube-scheduler's
#: parallelism default).
PARALLELISM = 16

EventSink = Callable[..., None]
"""``sink(pod, type_=, reason=, action=, note=, controller=)``: the event recorder (the
``controller`` is the preemptor's profile, the reporting scheduler)."""

DoneCallback = Callable[[Pod, bool], None]
"""``on_done(preemptor, ok)``: the evictions ended (``ok``: every victim is gone or going)."""


class Evictor(Protocol):
    def start(self, preemptor: Pod, node: str, victims: Sequence[Pod], cleared: Sequence[Pod]) -> None:
        """Evict ``victims`` for ``preemptor`` nominated to ``node`` and clear ``cleared``'s
        nominations; returns at once in the daemon (the work runs elsewhere)."""
        ...

    def clear_nominations(self, pods: Sequence[Pod]) -> None:
        """Null ``status.nominatedNodeName`` of ``pods`` (a nomination that can no longer work)."""
        ...

    def running(self, uid: str) -> bool:
        """True while the evictions for preemptor ``uid`` are still being sent (and, where the
        evictor can see the cluster, until the informers show each victim terminating or gone)."""
        ...


class ApiEvictor:
    """The daemon's evictor: the API calls run on a small pool; see the module docstring."""

    def __init__(
        self,
        client: ClusterClient,
        *,
        fence: Fence,
        events: EventSink | None = None,
        on_done: DoneCallback | None = None,
        workers: int = PARALLELISM,
        lookup: Callable[[str], Pod | None] | None = None,
    ) -> None:
        self.client = client
        self.fence = fence
        self.events = events
        self.on_done = on_done
        # The scheduler's view of a pod by uid (its cache): with it, a preemptor stays running
        # until that view shows its victims terminating or gone (upstream's
        # lastVictimsPendingPreemption). The deletes' answers come before the informers' events,
        # and a gang retried in that window saw its victims still running and preempted again.
        self.lookup = lookup
        self._victims: dict[str, tuple[str, ...]] = {}
        # One preemption at a time per thread; each fans its victims out to a pool of its own.
        self._pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="preempt")
        self._lock = threading.Lock()
        self._running: set[str] = set()

    def running(self, uid: str) -> bool:
        with self._lock:
            if uid in self._running:
                return True
            victims = self._victims.get(uid)
        if victims is None or self.lookup is None:
            return False
        for v in victims:
            pod = self.lookup(v)
            if pod is not None and not pod.deleting:
                return True
        with self._lock:
            self._victims.pop(uid, None)
        return False

    def start(self, preemptor: Pod, node: str, victims: Sequence[Pod], cleared: Sequence[Pod]) -> None:
        with self._lock:
            self._running.add(preemptor.uid)
        try:
            self._pool.submit(self._run, preemptor, node, tuple(victims), tuple(cleared))
        except RuntimeError:  # shut down: nothing more is sent
            with self._lock:
                self._running.discard(preemptor.uid)

    def _run(self, preemptor: Pod, node: str, victims: tuple[Pod, ...], cleared: tuple[Pod, ...]) -> None:
        ok = False
        try:
            # A victim already terminating needs no second request.
            todo = [v for v in victims if not v.deleting]
            if len(todo) > 1:
                with ThreadPoolExecutor(min(PARALLELISM, len(todo)), thread_name_prefix="evict") as pool:
                    problems = list(pool.map(lambda v: self._evict(preemptor, node, v), todo))
            else:
                problems = [self._evict(preemptor, node, v) for v in todo]
            failed = [p for p in problems if p]
            if failed:
                log.warning("preemption_failed", pod=preemptor.key, node=node, errors=failed[:5])
            else:
                self._clear_now(cleared)
                ok = True
                if todo and self.lookup is not None:
                    with self._lock:
                        self._victims[preemptor.uid] = tuple(v.uid for v in todo)
                        while len(self._victims) > MAX_WATCHED:  # preemptors never asked again
                            del self._victims[next(iter(self._victims))]
        except Exception:
            log.exception("preemption_crashed", pod=preemptor.key)
        finally:
            with self._lock:
                self._running.discard(preemptor.uid)
            if self.on_done is not None:
                try:
                    self.on_done(preemptor, ok)
                except Exception:
                    log.exception("preemption_done_callback_failed", pod=preemptor.key)

    def _evict(self, preemptor: Pod, node: str, victim: Pod) -> str:
        """Mark ``victim`` as a disruption target, delete it, record the event; an error text or ""."""
        condition = {
            "type": DISRUPTION_TARGET,
            "status": "True",
            "reason": REASON_PREEMPTION_BY_SCHEDULER,
            "message": DISRUPTION_MESSAGE_FORMAT.format(scheduler=preemptor.scheduler_name),
            "lastTransitionTime": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        }
        patch = {"metadata": {"uid": victim.uid}, "status": {"conditions": [condition]}}
        delete_opts = {"apiVersion": "v1", "kind": "DeleteOptions", "preconditions": {"uid": victim.uid}}
        try:
            if not self.fence.admit():
                return f"leadership lost: not preempting pod {victim.key}"
            _retrying(self.client.patch, pod_path(victim.namespace, victim.name, "status"), patch, STRATEGIC_PATCH_CT)
            if not self.fence.admit():
                return f"leadership lost: not preempting pod {victim.key}"
            _retrying(self.client.delete, pod_path(victim.namespace, victim.name), delete_opts)
        except (api_errors.NotFound, api_errors.Conflict):
            # Gone already, or replaced by a new pod of the same name: nothing to preempt.
            log.info("preemption_victim_gone", pod=victim.key, preemptor=preemptor.key)
            return ""
        except api_errors.KubeError as e:
            log.warning("preemption_victim_failed", pod=victim.key, preemptor=preemptor.key, error=str(e)[:300])
            return f"preempting pod {victim.key}: {e}"
        if self.events is not None:
            self.events(
                victim,
                type_="Normal",
                reason=EVENT_REASON,
                action=EVENT_ACTION,
                note=EVENT_NOTE_FORMAT.format(uid=preemptor.uid, node=node),
                controller=preemptor.scheduler_name,
            )
        return ""

    def clear_nominations(self, pods: Sequence[Pod]) -> None:
        """Queued on the pool: the scheduling cycle calls this and must not wait for the API."""
        todo = tuple(pods)
        if not todo:
            return
        try:
            self._pool.submit(self._clear_now, todo)
        except RuntimeError:
            # Shut down: the daemon is stopping, and nothing more is sent.
            log.info("clear_nominated_node_dropped", pods=[p.key for p in todo], reason="evictor shut down")

    def _clear_now(self, pods: Sequence[Pod]) -> None:
        for p in pods:
            if not self.fence.admit():
                return
            try:
                _retrying(
                    self.client.patch,
                    pod_path(p.namespace, p.name, "status"),
                    {"metadata": {"uid": p.uid}, "status": {"nominatedNodeName": None}},
                    STRATEGIC_PATCH_CT,
                )
            except (api_errors.NotFound, api_errors.Conflict):
                # Gone, or replaced by a new pod of the same name (uid precondition): it has no
                # nomination left to clear.
                log.info("clear_nominated_node_gone", pod=p.key)
            except api_errors.KubeError as e:
                log.warning("clear_nominated_node_failed", pod=p.key, error=str(e)[:300])

    def shutdown(self, wait: bool = False) -> None:
        """Stop: with ``wait``, let queued work finish; without, drop what has not started (the
        process is exiting, and no preemptor stays marked as running)."""
        self._pool.shutdown(wait=wait, cancel_futures=not wait)
        if not wait:
            with self._lock:
                self._running.clear()


class MemoryEvictor:
    """``simulate``'s evictor: victims leave the in-memory cluster at once (no graceful
    termination offline) through ``on_victim(victim, preemptor, node)``, which records them and
    feeds the scheduler's pod-deleted sink."""

    def __init__(self, on_victim: Callable[[Pod, Pod, str], None]) -> None:
        self.on_victim = on_victim

    def start(self, preemptor: Pod, node: str, victims: Sequence[Pod], cleared: Sequence[Pod]) -> None:
        for v in victims:
            self.on_victim(v, preemptor, node)

    def clear_nominations(self, pods: Sequence[Pod]) -> None:
        return None

    def running(self, uid: str) -> bool:
        return False


class NoEvictor:
    """Shadow mode and explain: the decision is reported, nothing is evicted."""

    def start(self, preemptor: Pod, node: str, victims: Sequence[Pod], cleared: Sequence[Pod]) -> None:
        log.info("preemption_planned", pod=preemptor.key, node=node, victims=[v.key for v in victims], offline=True)

    def clear_nominations(self, pods: Sequence[Pod]) -> None:
        return None

    def running(self, uid: str) -> bool:
        return False


def _retrying(fn: Callable[..., Any], *args: Any) -> Any:
    """``fn(*args)``, retried briefly on transient API errors (connection, 429, 5xx)."""
    retryer = tenacity.Retrying(
        retry=tenacity.retry_if_exception(api_errors.is_retryable),
        wait=tenacity.wait_exponential_jitter(multiplier=0.05, max=1.0, jitter=0.05),
        stop=tenacity.stop_after_attempt(3),
        reraise=True,
    )
    return retryer(fn, *args)
