"""DynamicResources' binding conditions (DRADeviceBindingConditions, beta and on in 1.37).

A device published with ``bindingConditions`` (and optionally ``bindingFailureConditions`` and
``bindsToNode``) is not usable the moment it is allocated: its driver (or a controller) must first
prepare it, e.g. attach a fabric device to the chosen node, and report that by setting those
conditions in the claim's ``status.devices[].conditions``. The allocator copies the device's
condition types into the allocation result; PreBind writes the allocation (with
``allocationTimestamp``) and then waits, before the pod is bound, until for every allocated device
with binding conditions

- all of its binding conditions are True: the pod is bound;
- one of its binding failure conditions is True: PreBind fails with upstream's
  ``device binding failed: claim=<name>, reason=<reason>, message="<message>"``;
- ``bindingTimeout`` (DynamicResourcesArgs, default 10 minutes) passed since the allocation:
  ``device binding timeout: claim=<name>`` (or ``device binding timeout: context deadline
  exceeded`` when PreBind's own wait of the same length ends first).

A failed or timed-out PreBind un-reserves the pod (Unreserve takes it out of ``reservedFor``); the
allocation stays, and the next attempt's Filter finds that claim unavailable on every node, so
PostFilter deallocates it (:mod:`custom_scheduler.plugins.dra_postfilter`), as upstream.

Upstream polls the claims every 5 seconds from a PreBind goroutine. Here the wait holds no thread:
:class:`BindingWaiter` re-checks a pod's claims on each claim event of the DRA store, and a single
thread wakes for deadlines and for the same 5 s sweep, resolving the Future the binding cycle
continues from (as VolumeBinding's PreBind wait does).
"""

from __future__ import annotations

import contextlib
import threading
import time
import weakref
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any

import structlog

from custom_scheduler.api import dra
from custom_scheduler.api.model import parse_time
from custom_scheduler.framework import dra_store as fdra
from custom_scheduler.framework.types import SUCCESS, Status

log = structlog.get_logger("custom_scheduler.plugins.dra_binding")

#: Upstream's poll interval in PreBind (``wait.PollUntilContextTimeout(ctx, 5*time.Second, ...)``).
POLL_INTERVAL = 5.0
ERR_TIMEOUT = "device binding timeout"
ERR_FAILED = "device binding failed"
#: The Normal event PreBind records before it waits (reason, action and note as upstream).
EVENT_REASON = "BindingConditionsPending"
EVENT_NOTE = "waiting for binding conditions for device on node {node}"


class BindingFailed(Exception):
    """A binding failure condition is True, or the binding timed out: the message is upstream's."""


def _device_status(claim: dra.ResourceClaim, r: dra.DeviceResult) -> Mapping[str, Any] | None:
    for d in (claim.raw.get("status") or {}).get("devices") or ():
        if d.get("driver") == r.driver and d.get("pool") == r.pool and d.get("device") == r.device:
            return d  # type: ignore[no-any-return]
    return None


def _condition(status: Mapping[str, Any], kind: str) -> Mapping[str, Any] | None:
    for c in status.get("conditions") or ():
        if c.get("type") == kind:
            return c  # type: ignore[no-any-return]
    return None


def claim_ready(claim: dra.ResourceClaim) -> bool:
    """``isClaimReadyForBinding``: True when every binding condition of every allocated device is
    True (or there are none); raises BindingFailed when a binding failure condition is True."""
    if claim.allocation is None:
        return False
    for r in claim.allocation.results:
        if not r.binding_conditions:
            continue
        st = _device_status(claim, r)
        if st is None:
            return False
        for kind in r.binding_failure_conditions:
            c = _condition(st, kind)
            if c is not None and c.get("status") == "True":
                raise BindingFailed(
                    f'{ERR_FAILED}: claim={claim.name}, reason={c.get("reason", "")}, message="{c.get("message", "")}"'
                )
        for kind in r.binding_conditions:
            c = _condition(st, kind)
            if c is None or c.get("status") != "True":
                return False
    return True


def claim_timed_out(claim: dra.ResourceClaim, timeout: float, now: float | None = None) -> bool:
    """``isClaimTimeout``: an allocation with binding conditions older than ``timeout`` seconds."""
    alloc = claim.allocation
    if alloc is None or not alloc.timestamp or not any(r.binding_conditions for r in alloc.results):
        return False
    at = parse_time(alloc.timestamp)
    return at is not None and at + timeout < (time.time() if now is None else now)


def unavailable(claim: dra.ResourceClaim, timeout: float) -> bool:
    """Filter's test of an allocated claim: binding failed, or still not ready past its timeout."""
    try:
        return not claim_ready(claim) and claim_timed_out(claim, timeout)
    except BindingFailed:
        return True


def has_binding_conditions(claims: Sequence[dra.ResourceClaim]) -> bool:
    return any(r.binding_conditions for c in claims if c.allocation is not None for r in c.allocation.results)


def pods_ready(claims: Sequence[dra.ResourceClaim], timeout: float, now: float | None = None) -> bool:
    """``isPodReadyForBinding`` on the claims as the store has them now; raises BindingFailed."""
    for c in claims:
        if not claim_ready(c):
            if claim_timed_out(c, timeout, now):
                raise BindingFailed(f"{ERR_TIMEOUT}: claim={c.name}")
            return False
    return True


def now_rfc3339() -> str:
    """``metav1.Now()`` as the API server stores it (seconds)."""
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


@dataclass(slots=True)
class _Wait:
    keys: tuple[tuple[str, str], ...]
    timeout: float
    deadline: float
    future: Future[Status]


class BindingWaiter:
    """The pods whose PreBind waits for binding conditions, re-checked on claim events, every
    :data:`POLL_INTERVAL` and at their deadline, on one thread started at the first wait."""

    def __init__(self, store: fdra.DRAStore, clock: Callable[[], float] = time.monotonic) -> None:
        self._store = store
        self._clock = clock
        self._lock = threading.Condition()
        self._waits: dict[int, _Wait] = {}
        self._seq = 0
        self._poked = False
        self._thread: threading.Thread | None = None
        store.add_listener(self._on_event)

    def wait(self, claims: Sequence[dra.ResourceClaim], timeout: float) -> Future[Status]:
        """A Future resolved with SUCCESS once ``claims`` are ready, or with upstream's error."""
        fut: Future[Status] = Future()
        fut.set_running_or_notify_cancel()
        keys = tuple((c.namespace, c.name) for c in claims)
        with self._lock:
            self._seq += 1
            self._waits[self._seq] = _Wait(keys, timeout, self._clock() + timeout, fut)
            self._poke()
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="dra-binding-waiter", daemon=True)
                self._thread.start()
        return fut

    def pending(self) -> int:
        with self._lock:
            return len(self._waits)

    def _on_event(self, kind: str, old: Any, new: Any) -> None:
        if kind == fdra.CLAIM:
            with self._lock:
                self._poke()

    def _poke(self) -> None:
        if self._waits:
            self._poked = True
            self._lock.notify()

    def check(self) -> None:
        """Decide every wait that can be decided now (the thread's step; tests call it)."""
        with self._lock:
            waits = list(self._waits.items())
            self._poked = False
        now = self._clock()
        for wid, w in waits:
            result = self._outcome(w, now)
            if result is None:
                continue
            with self._lock:
                self._waits.pop(wid, None)
            if not result.is_success:
                log.info("dra_binding_failed", claims=[f"{ns}/{n}" for ns, n in w.keys], reason=result.message)
            with contextlib.suppress(Exception):  # set once: the wait left _waits under the lock
                w.future.set_result(result)

    def _outcome(self, w: _Wait, now: float) -> Status | None:
        claims = []
        for ns, name in w.keys:
            c = self._store.get_claim(ns, name)
            if c is None:
                return Status.as_error(f'resourceclaim.resource.k8s.io "{name}" not found')
            claims.append(c)
        try:
            if pods_ready(claims, w.timeout):
                return SUCCESS
        except BindingFailed as e:
            return Status.as_error(str(e))
        if now >= w.deadline:
            return Status.as_error(f"{ERR_TIMEOUT}: context deadline exceeded")
        return None

    def _run(self) -> None:
        while True:
            with self._lock:
                if not self._poked:
                    soonest = min((w.deadline for w in self._waits.values()), default=None)
                    left = POLL_INTERVAL if soonest is None else min(POLL_INTERVAL, soonest - self._clock())
                    self._lock.wait(max(0.01, left))
            try:
                self.check()
            except Exception:
                log.exception("dra_binding_waiter_crashed")


_WAITERS: weakref.WeakKeyDictionary[fdra.DRAStore, BindingWaiter] = weakref.WeakKeyDictionary()
_WAITERS_LOCK = threading.Lock()


def waiter_for(store: fdra.DRAStore) -> BindingWaiter:
    """The one waiter of a store: plugins are rebuilt on a config reload, the store and its
    listener registration are not."""
    with _WAITERS_LOCK:
        w = _WAITERS.get(store)
        if w is None:
            w = _WAITERS[store] = BindingWaiter(store)
        return w
