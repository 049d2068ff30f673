"""Leader election on a ``coordination.k8s.io/v1`` Lease, following client-go's algorithm.

Why it exists: with two or more replicas exactly one may schedule, or two schedulers would place
pods against two different views of the cluster. The Python client's own elector has no release
on shutdown, no jitter, judges expiry on the holder's wall clock and never maintains
``leaseTransitions`` (../shared/docs/python-client.md §6), so this is a small re-implementation
of client-go's ``tools/leaderelection`` on raw JSON.

The algorithm (one *try* = :meth:`LeaderElector.try_acquire_or_renew`):

- **Fast path**: a leader whose last observation is still valid PUTs its cached Lease with a new
  ``renewTime``. If that fails it falls through to the slow path.
- **Slow path**: GET the Lease; create it when it does not exist. When the record differs from the
  last one seen, remember it together with the *local monotonic time* of that observation. Expiry
  is judged as ``observed_at + leaseDurationSeconds`` on our own clock, never from the holder's
  ``renewTime``, so clock skew between replicas does not matter.
- If another identity holds an unexpired Lease: back off. Otherwise PUT ourselves as holder,
  carrying the ``resourceVersion`` we read (optimistic concurrency: a 409 means another candidate
  won the race). ``acquireTime`` and ``leaseTransitions`` are kept while we were already the
  holder; on a change of holder ``leaseTransitions`` goes up by one.

The loop (:meth:`LeaderElector.run`): try every ``retryPeriod`` with up to 1.2 x jitter until the
Lease is ours, call ``on_started_leading``, then renew every ``retryPeriod``. A renewal round that
has not succeeded within ``renewDeadline`` ends the leadership: ``is_leader`` turns false at
once and ``on_stopped_leading`` runs. The elector never campaigns again after that (kube-scheduler
exits and lets the Deployment restart it). On ``stop`` a leader releases the Lease as client-go's
``ReleaseOnCancel`` does (``holderIdentity: ""``, ``leaseDurationSeconds: 1``), so a standby takes
over within about one ``retryPeriod`` instead of a whole ``leaseDuration``.

Timestamps are ``MicroTime``: RFC 3339 UTC with exactly six fractional digits, formatted here
(``datetime.isoformat`` drops the fraction when it is zero, which the API server rejects).

Fencing (kube-scheduler's behaviour, stricter than client-go's loop): a renewal that *sees another
holder* ends leadership at once instead of retrying until ``renewDeadline`` (the Lease is gone; a
retry cannot win it back before it expires), and a renewal round that reaches its deadline ends it
too. Either way the elector revokes the :class:`~custom_scheduler.framework.fence.Fence` it was given before
anything else happens, so binding cycles queued or sleeping in retries stop writing at that
instant, not when ``on_stopped_leading`` has stopped the loop.

Deliberately not here: coordinated leader election (``preferredHolder``/``strategy``, 1.31+),
ConfigMap or Endpoints locks, and any decision about what to do with the process when
leadership is lost (that belongs to the caller's ``on_stopped_leading``).
"""

from __future__ import annotations

import random
import socket
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any
from urllib.parse import quote

import structlog

from custom_scheduler.config.schema import LeaderElectionConfig
from custom_scheduler.framework.fence import Fence
from custom_scheduler.kube import api_errors
from custom_scheduler.kube.client import KubeClient

log = structlog.get_logger("custom_scheduler.server.leader")

#: client-go's ``JitterFactor``: acquire attempts wait ``retryPeriod x (1 + rand x 1.2)``, and
#: ``renewDeadline`` must exceed ``retryPeriod x 1.2``.
JITTER_FACTOR = 1.2

MICROTIME_FORMAT = "%Y-%m-%dT%H:%M:%S.%fZ"


def microtime(t: datetime) -> str:
    """Format ``t`` as a Kubernetes ``MicroTime``: UTC, always six fractional digits."""
    if t.tzinfo is not None:
        t = t.astimezone(UTC)
    return t.strftime(MICROTIME_FORMAT)


def default_identity() -> str:
    """``<hostname>_<uuid>``, as kube-scheduler builds it: unique even across restarts of a pod."""
    return f"{socket.gethostname()}_{uuid.uuid4()}"


def lease_path(namespace: str, name: str = "") -> str:
    p = f"/apis/coordination.k8s.io/v1/namespaces/{quote(namespace)}/leases"
    return f"{p}/{quote(name)}" if name else p


@dataclass(frozen=True, slots=True)
class LeaseRecord:
    """The leader-election fields of a Lease's ``spec`` (client-go's ``LeaderElectionRecord``)."""

    holder_identity: str = ""
    lease_duration_seconds: int = 0
    acquire_time: str = ""
    renew_time: str = ""
    lease_transitions: int = 0

    @classmethod
    def from_lease(cls, lease: dict[str, Any]) -> LeaseRecord:
        spec = lease.get("spec") or {}
        return cls(
            holder_identity=str(spec.get("holderIdentity") or ""),
            lease_duration_seconds=int(spec.get("leaseDurationSeconds") or 0),
            acquire_time=str(spec.get("acquireTime") or ""),
            renew_time=str(spec.get("renewTime") or ""),
            lease_transitions=int(spec.get("leaseTransitions") or 0),
        )

    def to_spec(self) -> dict[str, Any]:
        spec: dict[str, Any] = {
            "holderIdentity": self.holder_identity,
            "leaseDurationSeconds": self.lease_duration_seconds,
            "leaseTransitions": self.lease_transitions,
        }
        if self.acquire_time:
            spec["acquireTime"] = self.acquire_time
        if self.renew_time:
            spec["renewTime"] = self.renew_time
        return spec


def validate(config: LeaderElectionConfig) -> None:
    """Raise ``ValueError`` unless ``leaseDuration > renewDeadline > 1.2 x retryPeriod > 0``."""
    if config.retry_period <= 0:
        raise ValueError(f"retryPeriod must be positive, got {config.retry_period:g}s")
    if config.lease_duration <= config.renew_deadline:
        raise ValueError(
            f"leaseDuration ({config.lease_duration:g}s) must be greater than renewDeadline "
            f"({config.renew_deadline:g}s)"
        )
    if config.renew_deadline <= JITTER_FACTOR * config.retry_period:
        raise ValueError(
            f"renewDeadline ({config.renew_deadline:g}s) must be greater than {JITTER_FACTOR} x retryPeriod "
            f"({JITTER_FACTOR * config.retry_period:g}s)"
        )
    if not config.resource_name or not config.resource_namespace:
        raise ValueError("resourceName and resourceNamespace must be set")


class LeaderElector:
    """Campaigns for, holds and releases one Lease. Thread-safe; :meth:`run` blocks its thread.

    Args:
        client: an API client allowed to get/create/update the Lease.
        config: durations and the Lease's name and namespace.
        identity: this candidate's holder identity; default ``<hostname>_<uuid>``.
        release_on_stop: release the Lease when :meth:`run` is stopped while leading (client-go's
            ``ReleaseOnCancel``). Tests turn it off to emulate a crashed leader.
        on_leader_change: called with ``True``/``False`` whenever leadership starts or ends (wire
            the leadership gauges here).
        on_slow_path: called when the leader renews by the slow path (a GET before the PUT,
            client-go's ``leader_election_slowpath_total``).
        clock: monotonic seconds, for observation times and deadlines.
        now: wall-clock time, only for the ``acquireTime``/``renewTime`` stamps.
        rng: randomness for the acquire jitter.
        fence: revoked the moment leadership is lost or given up; the binding path consults it.
    """

    def __init__(
        self,
        client: KubeClient,
        config: LeaderElectionConfig,
        identity: str | None = None,
        *,
        release_on_stop: bool = True,
        on_leader_change: Callable[[bool], None] | None = None,
        on_slow_path: Callable[[], None] | None = None,
        clock: Callable[[], float] = time.monotonic,
        now: Callable[[], datetime] = lambda: datetime.now(UTC),
        rng: random.Random | None = None,
        fence: Fence | None = None,
    ) -> None:
        validate(config)
        self.fence = fence if fence is not None else Fence()
        self.client = client
        self.config = config
        self.identity = identity or default_identity()
        self.fence.holder = self.identity
        self.release_on_stop = release_on_stop
        self._on_leader_change = on_leader_change
        self._on_slow_path = on_slow_path
        self._clock = clock
        self._now = now
        self._rng = rng or random.Random()
        self._path = lease_path(config.resource_namespace, config.resource_name)
        self._lock = threading.RLock()
        self._lease: dict[str, Any] | None = None  # the last Lease object read or written
        self._observed = LeaseRecord()
        self._observed_at = 0.0  # monotonic time at which _observed was first seen
        self._leading = False
        self._released = threading.Event()

    # -- state ------------------------------------------------------------------------------------
    @property
    def is_leader(self) -> bool:
        """True from a successful acquire until a renewal round fails, a stop, or a release."""
        return self._leading

    @property
    def observed_record(self) -> LeaseRecord:
        """The Lease record as last seen by this candidate (for logs and tests)."""
        return self._observed

    @property
    def lease_name(self) -> str:
        return f"{self.config.resource_namespace}/{self.config.resource_name}"

    def check(self, max_tolerable_expired: float = 10.0) -> bool:
        """Health check for ``/healthz`` (client-go's ``HealthzAdaptor``).

        False only when this replica believes it leads but has not renewed for longer than
        ``leaseDuration + max_tolerable_expired``: the renew loop is wedged, and a liveness probe
        should restart the process. Standbys are always healthy.
        """
        if not self._leading:
            return True
        return self._clock() <= self._observed_at + self.config.lease_duration + max_tolerable_expired

    def _set_leading(self, leading: bool) -> None:
        if self._leading == leading:
            return
        self._leading = leading
        if self._on_leader_change is not None:
            try:
                self._on_leader_change(leading)
            except Exception:
                log.exception("leader_change_hook_failed")

    # -- one attempt ------------------------------------------------------------------------------
    def _timeout(self) -> tuple[float, float]:
        # Bound each request well inside renewDeadline so a hung connection cannot make a leader
        # outlive its deadline by much (one try makes at most three requests).
        read = max(1.0, self.config.renew_deadline / 3)
        return (min(5.0, read), read)

    def _record(self, *, renewing: bool) -> LeaseRecord:
        """The record to write: a renewal keeps acquireTime and transitions; a takeover bumps them."""
        stamp = microtime(self._now())
        if renewing:
            return LeaseRecord(
                holder_identity=self.identity,
                lease_duration_seconds=max(1, round(self.config.lease_duration)),
                acquire_time=self._observed.acquire_time or stamp,
                renew_time=stamp,
                lease_transitions=self._observed.lease_transitions,
            )
        return LeaseRecord(
            holder_identity=self.identity,
            lease_duration_seconds=max(1, round(self.config.lease_duration)),
            acquire_time=stamp,
            renew_time=stamp,
            lease_transitions=self._observed.lease_transitions + 1,
        )

    def _observe(self, lease: dict[str, Any]) -> None:
        self._lease = lease
        rec = LeaseRecord.from_lease(lease)
        if rec != self._observed:
            self._observed = rec
            self._observed_at = self._clock()

    def _put(self, record: LeaseRecord) -> bool:
        assert self._lease is not None
        meta = self._lease.get("metadata") or {}
        body = {
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            # name + resourceVersion: the PUT succeeds only if nobody wrote since our read.
            "metadata": {**meta, "resourceVersion": meta.get("resourceVersion", "")},
            "spec": {**(self._lease.get("spec") or {}), **record.to_spec()},
        }
        return self._write("update", lambda: self.client.put(self._path, body, timeout=self._timeout()))

    def _write(self, verb: str, send: Callable[[], dict[str, Any]]) -> bool:
        """``send`` one write of the Lease; True with what the server returned observed. A Conflict
        is a lost race, not a failure (another candidate wrote since our read, or created the Lease
        first): the caller simply does not hold it this round."""
        try:
            written = send()
        except api_errors.Conflict:
            log.debug(f"lease_{verb}_conflict", lease=self.lease_name, identity=self.identity)
            return False
        except api_errors.KubeError as e:
            log.warning(f"lease_{verb}_failed", lease=self.lease_name, error=str(e)[:200])
            return False
        self._observe(written)
        return True

    def try_acquire_or_renew(self) -> bool:
        """One attempt to acquire or renew the Lease; True if this candidate holds it afterwards."""
        with self._lock:
            if self._released.is_set():
                return False
            i_hold = self._observed.holder_identity == self.identity
            # Fast path: our own observation is still valid; skip the GET.
            if (
                i_hold
                and self._lease is not None
                and self._clock() < self._observed_at + self._observed.lease_duration_seconds
                and self._put(self._record(renewing=True))
            ):
                return True
            # Slow path.
            try:
                lease = self.client.get(self._path, timeout=self._timeout())
            except api_errors.NotFound:
                return self._create()
            except api_errors.KubeError as e:
                log.warning("lease_get_failed", lease=self.lease_name, error=str(e)[:200])
                return False
            self._observe(lease)
            holder = self._observed.holder_identity
            if holder == self.identity and self._on_slow_path is not None:
                self._on_slow_path()  # the holder renews by the slow path (client-go: IsLeader)
            if (
                holder
                and holder != self.identity
                and self._clock() < self._observed_at + self._observed.lease_duration_seconds
            ):
                return False
            return self._put(self._record(renewing=holder == self.identity))

    def _create(self) -> bool:
        stamp = microtime(self._now())
        record = LeaseRecord(
            holder_identity=self.identity,
            lease_duration_seconds=max(1, round(self.config.lease_duration)),
            acquire_time=stamp,
            renew_time=stamp,
            lease_transitions=0,
        )
        body = {
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": {"name": self.config.resource_name, "namespace": self.config.resource_namespace},
            "spec": record.to_spec(),
        }
        path = lease_path(self.config.resource_namespace)
        return self._write("create", lambda: self.client.post(path, body, timeout=self._timeout()))

    # -- release ----------------------------------------------------------------------------------
    def release(self) -> bool:
        """Give the Lease up now, if we hold it: ``holderIdentity ""``, ``leaseDurationSeconds 1``.

        After this the elector never renews again (a running :meth:`run` ends, calling
        ``on_stopped_leading``). Returns True when the Lease was released or was not ours.
        """
        with self._lock:
            self._released.set()
            self.fence.revoke("lease released")
            was_leading = self._leading
            self._set_leading(False)
            if self._observed.holder_identity != self.identity or self._lease is None:
                return True
            stamp = microtime(self._now())
            record = LeaseRecord(
                holder_identity="",
                lease_duration_seconds=1,
                acquire_time=stamp,
                renew_time=stamp,
                lease_transitions=self._observed.lease_transitions,
            )
            ok = self._put(record)
        if ok:
            log.info("leader_released", lease=self.lease_name, identity=self.identity)
        elif was_leading:
            log.warning("leader_release_failed", lease=self.lease_name, identity=self.identity)
        return ok

    # -- the loop ---------------------------------------------------------------------------------
    def _wait(self, seconds: float, stop: threading.Event) -> bool:
        """Sleep up to ``seconds``; True if ``stop`` or a release ended the wait early."""
        return stop.wait(max(0.0, seconds)) or self._released.is_set()

    def _acquire(self, stop: threading.Event) -> bool:
        period = self.config.retry_period
        log.info("leader_election_started", lease=self.lease_name, identity=self.identity)
        while not stop.is_set() and not self._released.is_set():
            if self.try_acquire_or_renew():
                return True
            if self._wait(period * (1.0 + self._rng.random() * JITTER_FACTOR), stop):
                break
        return False

    def _renew_round(self, stop: threading.Event) -> bool:
        """Retry every ``retryPeriod`` until a renewal succeeds (True), ``renewDeadline`` passes or
        another holder is seen (False; the fence is revoked first in both cases)."""
        deadline = self._clock() + self.config.renew_deadline
        while True:
            if self.try_acquire_or_renew():
                return True
            holder = self._observed.holder_identity
            if holder and holder != self.identity:
                self._lose(f"lease held by {holder}")
                return False
            remaining = deadline - self._clock()
            if remaining > 0 and self._wait(min(self.config.retry_period, remaining), stop):
                return False  # stopped or released, not lost
            if self._clock() >= deadline:
                self._lose(f"renew deadline of {self.config.renew_deadline:g}s passed")
                return False

    def _lose(self, reason: str) -> None:
        """Leadership is gone: revoke the fence (binds stop now), then turn ``is_leader`` false."""
        if self.fence.revoke(reason):
            log.error("leader_fenced", lease=self.lease_name, identity=self.identity, reason=reason)
        self._set_leading(False)

    def run(
        self,
        on_started_leading: Callable[[], None],
        on_stopped_leading: Callable[[], None],
        stop: threading.Event,
    ) -> None:
        """Campaign, lead and renew until ``stop`` is set or leadership is lost; then return.

        ``on_started_leading`` runs on this thread once the Lease is acquired and must return
        promptly (start threads; don't block). ``on_stopped_leading`` runs once when leadership
        ends, whether lost (``stop`` not set: the caller should stop scheduling at once and exit
        non-zero) or stopped (``stop`` set: the Lease has been released first when
        ``release_on_stop``). It is not called if this candidate never led. The elector does not
        campaign again after leading once, as client-go.
        """
        if not self._acquire(stop):
            log.info("leader_election_stopped", lease=self.lease_name, identity=self.identity)
            return
        self._set_leading(True)
        log.info(
            "leader_acquired",
            lease=self.lease_name,
            identity=self.identity,
            transitions=self._observed.lease_transitions,
        )
        try:
            on_started_leading()
        except Exception:
            # client-go runs the callback in its own goroutine; a crash there must not leave a
            # leader that renews forever without scheduling (python-client #2075): give up.
            log.exception("on_started_leading_failed", lease=self.lease_name)
            self.release()
            self._stopped(on_stopped_leading)
            return
        lost = False
        while not stop.is_set() and not self._released.is_set():
            if self._wait(self.config.retry_period, stop):
                break
            if not self._renew_round(stop):
                if stop.is_set() or self._released.is_set():
                    break
                lost = True
                break
        if lost:
            self._lose("renewal failed")
            log.error(
                "leader_lost",
                lease=self.lease_name,
                identity=self.identity,
                holder=self._observed.holder_identity,
                renew_deadline=self.config.renew_deadline,
            )
        elif self.release_on_stop:
            self.release()
        else:
            self._set_leading(False)
        self._stopped(on_stopped_leading)

    def _stopped(self, on_stopped_leading: Callable[[], None]) -> None:
        try:
            on_stopped_leading()
        except Exception:
            log.exception("on_stopped_leading_failed", lease=self.lease_name)
