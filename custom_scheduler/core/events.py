"""Kubernetes Events (``events.k8s.io/v1``) and pod status writes, off the scheduling thread.

Why a background writer: the scheduling cycle must never wait on the API. Events and the
``PodScheduled`` condition are queued here and written by two worker threads: one for Events, one
for pods' status (each in its own order), so a burst of failures has its conditions written while
its Events are, as kube-scheduler's API dispatcher writes them concurrently; tools wait on the
condition (cluster-autoscaler, upstream's ``Attempted`` barrier), not on the Event. When too many Events
wait, a new one is dropped and counted (as client-go's broadcaster does) rather than blocking; a
pod's status write is never dropped, a newer one replaces it (:mod:`.write_queue`).

Event storms: a pod that keeps failing while it backs off would emit one ``FailedScheduling`` per
attempt. Like client-go's ``tools/events``, repeats of the same (pod, reason, note) within
:data:`SERIES_WINDOW` update the first event's ``series`` (count, lastObservedTime) instead of
creating new events, and those PATCHes are themselves limited to one per :data:`SERIES_PATCH_EVERY`.
"""

from __future__ import annotations

import secrets
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Protocol

import structlog

from custom_scheduler.api.model import Pod
from custom_scheduler.core.write_queue import WriteQueue
from custom_scheduler.framework.fence import Fence
from custom_scheduler.kube import api_errors
from custom_scheduler.kube.client import STRATEGIC_PATCH_CT, KubeClient, pod_path

log = structlog.get_logger("custom_scheduler.events")

MAX_NOTE = 1024
SERIES_WINDOW = 600.0
SERIES_PATCH_EVERY = 30.0
CACHE_SIZE = 4096


class Regarding(Protocol):
    """What an Event is about: a pod, or a PodGroup (anything namespaced with these fields)."""

    @property
    def namespace(self) -> str: ...

    @property
    def name(self) -> str: ...

    @property
    def uid(self) -> str: ...

    @property
    def resource_version(self) -> str: ...


def micro_time(ts: float | None = None) -> str:
    """MicroTime with exactly six fractional digits, which the API server requires."""
    dt = datetime.fromtimestamp(ts if ts is not None else time.time(), UTC)
    return dt.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def rfc3339(ts: float | None = None) -> str:
    return datetime.fromtimestamp(ts if ts is not None else time.time(), UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def truncate_note(note: str) -> str:
    return note if len(note) <= MAX_NOTE else note[: MAX_NOTE - 4] + " ..."


@dataclass(slots=True)
class _Series:
    name: str
    namespace: str
    count: int
    first: float
    last_patch: float
    pending: bool = False


class Writer:
    """Two background threads that perform queued API writes: Events (and their series updates)
    on one, pods' status patches on the other."""

    def __init__(
        self,
        client: KubeClient,
        *,
        reporting_controller: str = "custom-scheduler",
        instance: str = "",
        max_queue: int = 10000,
        on_dropped: Callable[[], None] | None = None,
        dry_run: bool = False,
        fence: Fence | None = None,
    ) -> None:
        self.client = client
        # Asked right before each write: once leadership is lost, what is still queued is dropped
        # (the next leader reports on these pods itself).
        self.fence = fence
        self.fenced_writes = 0
        self.controller = reporting_controller
        self.instance = (instance or f"{reporting_controller}-{secrets.token_hex(4)}")[:128]
        self._q = WriteQueue(max_queue)  # Events and series updates: dropped when full
        self._status_q = WriteQueue(max_queue)  # pods' status, keyed: replaced, never dropped
        self._series: OrderedDict[tuple[str, str, str], _Series] = OrderedDict()
        self._lock = threading.Lock()
        self._threads: list[threading.Thread] = []
        self._on_dropped = on_dropped or (lambda: None)
        self.dropped = 0
        self.dry_run = dry_run

    def start(self) -> None:
        for name, q in (("api-writer", self._q), ("api-status-writer", self._status_q)):
            t = threading.Thread(target=self._run, args=(q,), name=name, daemon=True)
            t.start()
            self._threads.append(t)

    def stop(self, timeout: float = 5.0) -> None:
        """Flush what is queued (up to ``timeout`` in all), then stop."""
        deadline = time.monotonic() + timeout
        for q in (self._q, self._status_q):
            q.close()
        for t in self._threads:
            t.join(max(0.0, deadline - time.monotonic()))  # still busy after it: the daemon thread is left

    def flush(self, timeout: float = 10.0) -> None:
        """Wait until everything queued so far has been written (tests, shutdown)."""
        deadline = time.monotonic() + timeout
        done = [threading.Event() for _ in range(2)]
        self._q.put_marker(done[0].set)
        self._status_q.put_marker(done[1].set)
        for d in done:
            d.wait(max(0.0, deadline - time.monotonic()))

    def _submit(self, fn: Callable[[], None], *, key: tuple[str, str] | None = None) -> None:
        """Queue a write; ``key`` (a pod's status) makes it one that is replaced, never dropped."""
        if self.dry_run:
            return
        if key is not None:
            self._status_q.put(fn, key=key)
        elif not self._q.put(fn):
            self.dropped += 1
            self._on_dropped()

    def _run(self, q: WriteQueue) -> None:
        while True:
            item = q.get()
            if item is None:
                return
            fn, write = item
            if write and self.fence is not None and not self.fence.admit():
                with self._lock:
                    self.fenced_writes += 1
                    first = self.fenced_writes == 1
                if first:
                    log.info("api_writes_fenced", reason="leadership lost: queued events and conditions dropped")
                continue
            try:
                fn()
            except api_errors.ApiError as e:
                if isinstance(e, api_errors.NotFound) or e.namespace_terminating:
                    # The pod (or its namespace) is being deleted: nothing left to report on.
                    log.debug("api_write_skipped_object_gone", error=str(e)[:300])
                else:
                    log.warning("api_write_failed", error=str(e)[:300])
            except api_errors.KubeError as e:
                log.warning("api_write_failed", error=str(e)[:300])
            except Exception:
                log.exception("api_write_crashed")

    # -- events -----------------------------------------------------------------------------------
    def event(
        self,
        pod: Regarding,
        *,
        type_: str,
        reason: str,
        action: str,
        note: str,
        controller: str = "",
        kind: str = "Pod",
        api_version: str = "v1",
    ) -> None:
        """Record an Event about ``pod`` (or another namespaced object: a PodGroup, with its
        ``kind`` and ``api_version``); repeats within the series window are counted, not re-posted."""
        note = truncate_note(note)
        controller = controller or self.controller
        key = (pod.uid, reason, note)
        now = time.time()
        with self._lock:
            s = self._series.get(key)
            if s is not None and now - s.first < SERIES_WINDOW:
                s.count += 1
                self._series.move_to_end(key)
                if s.pending or now - s.last_patch < SERIES_PATCH_EVERY:
                    s.pending = True
                    return
                s.last_patch = now
                series = s
                created = False
            else:
                # Registered before the POST is written, so repeats that arrive meanwhile join it.
                series = _Series(f"{pod.name}.{time.time_ns():x}", pod.namespace, 1, now, now)
                self._series[key] = series
                while len(self._series) > CACHE_SIZE:
                    self._series.popitem(last=False)
                created = True
        if created:
            ref = (api_version, kind)
            self._submit(
                lambda: self._create_event(pod, type_, reason, action, note, controller, series.name, now, ref)
            )
        else:
            self._submit(lambda: self._patch_series(series))

    def _create_event(
        self,
        pod: Regarding,
        type_: str,
        reason: str,
        action: str,
        note: str,
        controller: str,
        name: str,
        now: float,
        ref: tuple[str, str] = ("v1", "Pod"),
    ) -> None:
        body: dict[str, Any] = {
            "apiVersion": "events.k8s.io/v1",
            "kind": "Event",
            "metadata": {"name": name, "namespace": pod.namespace},
            "eventTime": micro_time(now),
            "reportingController": controller,
            "reportingInstance": self.instance,
            "action": action,
            "reason": reason,
            "type": type_,
            "note": note,
            "regarding": {
                "apiVersion": ref[0],
                "kind": ref[1],
                "namespace": pod.namespace,
                "name": pod.name,
                "uid": pod.uid,
                "resourceVersion": pod.resource_version,
            },
        }
        self.client.post(f"/apis/events.k8s.io/v1/namespaces/{pod.namespace}/events", body)

    def _patch_series(self, s: _Series) -> None:
        with self._lock:
            s.pending = False
            count = s.count
        body = {"series": {"count": count, "lastObservedTime": micro_time()}}
        try:
            self.client.patch(
                f"/apis/events.k8s.io/v1/namespaces/{s.namespace}/events/{s.name}",
                body,
                content_type="application/merge-patch+json",
            )
        except api_errors.NotFound:
            pass  # the Event is gone (its TTL ran out): the count goes with it; a repeat after the window posts anew

    # -- pod status -------------------------------------------------------------------------------
    def nominate(self, pod: Pod, node: str) -> None:
        """PATCH ``status.nominatedNodeName`` (uid-preconditioned; a pod gone meanwhile is fine)."""
        patch = {"metadata": {"uid": pod.uid}, "status": {"nominatedNodeName": node}}

        def write() -> None:
            try:
                self.client.patch(pod_path(pod.namespace, pod.name, "status"), patch, STRATEGIC_PATCH_CT)
            except (api_errors.NotFound, api_errors.Conflict):
                pass  # gone, or replaced by a pod of the same name: nothing to nominate
            except api_errors.ApiError as e:
                if e.status != 422:
                    raise
                # Bound before this write landed (the API server refuses a nomination on a bound
                # pod): the nomination it announced is moot, the bind won.
                log.debug("nomination_after_bind", pod=pod.key, node=node)

        self._submit(write, key=("nominated", pod.uid))

    def pod_condition(self, pod: Pod, *, status: str, reason: str, message: str, nominated: str | None = None) -> None:
        """PATCH ``PodScheduled`` (and optionally ``nominatedNodeName``) when something changed."""
        cond = pod.scheduled_condition
        if cond == (status, reason, message) and nominated is None:
            return
        patch: dict[str, Any] = {
            "status": {
                "conditions": [
                    {
                        "type": "PodScheduled",
                        "status": status,
                        "reason": reason,
                        "message": message,
                        "lastProbeTime": None,
                        "lastTransitionTime": rfc3339(),
                    }
                ]
            }
        }
        if nominated is not None:
            patch["status"]["nominatedNodeName"] = nominated or None
        self._submit(lambda: self._write_unbound(pod, patch), key=("condition", pod.uid))

    def _write_unbound(self, pod: Pod, patch: dict[str, Any], attempts: int = 3) -> None:
        """PATCH the status of a pod that is not bound, never of one that is. The write runs on
        this writer's thread, possibly after the pod's next attempt bound it (a preemptor binds
        milliseconds after its victims go): written then, ``PodScheduled=False`` would overwrite the
        binding's ``True`` for good (kube-scheduler writes it synchronously, before any retry). So
        the patch carries the pod's resourceVersion as a precondition; on a conflict the pod is
        read again, and the write is dropped if it is bound (or replaced), else retried."""
        path = pod_path(pod.namespace, pod.name, "status")
        rv = pod.resource_version
        for _ in range(attempts):
            meta: dict[str, Any] = {"uid": pod.uid}
            if rv:
                meta["resourceVersion"] = rv
            try:
                self.client.patch(path, {**patch, "metadata": meta}, STRATEGIC_PATCH_CT)
                return
            except api_errors.NotFound:
                return  # the pod is gone: there is no condition left to report
            except api_errors.Conflict:
                try:
                    cur = self.client.get(pod_path(pod.namespace, pod.name))
                except api_errors.NotFound:
                    return
                if (cur.get("spec") or {}).get("nodeName") or (cur.get("metadata") or {}).get("uid") != pod.uid:
                    return  # bound since (or a new pod of that name): nothing to report
                rv = str((cur.get("metadata") or {}).get("resourceVersion") or "")
        log.info("pod_condition_dropped", pod=pod.key, reason="the pod kept changing")
