"""Writing a gang's reservation onto its PodGroup, off the scheduling thread (issue #28, item 3).

GangScheduling decides a reservation inside a group cycle; the annotation that makes it durable
(:mod:`custom_scheduler.framework.reservation_annotation`) must not cost that cycle a round trip. So
:meth:`ReservationWrites.put` only records what the annotation should be, and one worker thread
sends the patches:

- **Coalesced**: per PodGroup only the latest wish is kept (a reservation made and ended before
  the worker got to it is one removal, not two writes).
- **Rate-limited**: at most one patch per ``interval`` for the whole writer (reservations are rare;
  a burst of them after a restart must not crowd the API server).
- **Retried**: a failed patch (transport error, 5xx, 429, RBAC) is logged and tried again after
  1, 2, 4 … up to 60 s while the wish stands; a later wish replaces it. Nothing raises into the
  scheduler. A 404 (the PodGroup is gone) and a 400/422 (the server refuses the value) end it.
- **Fenced**: each patch asks ``fence.admit()`` right before the request, as binds do, so a leader
  that lost its Lease writes nothing more (the new leader owns the annotations from then on).

The patch is a JSON merge patch of ``metadata.annotations`` on the PodGroup itself, for both
APIs: the ``/status`` subresource resets metadata (``ResetObjectMetaForStatus`` on the native
PodGroup, the CRD status strategy on scheduler-plugins'), so the ServiceAccount needs ``patch`` on
``podgroups`` (``manifests/rbac.yaml``). Without an API client (offline tools, shadow mode) nothing is
written. The worker starts on the first wish and ends when none is left, so a configuration reload
(new plugins, new writers) leaves no idle thread behind.
"""

from __future__ import annotations

import math
import threading
import time
from dataclasses import dataclass
from typing import Any, Literal

import structlog

from custom_scheduler.api import podgroup as gang
from custom_scheduler.framework.clusterapi import api_errors
from custom_scheduler.framework.reservation_annotation import ANNOTATION

log = structlog.get_logger("custom_scheduler.plugins.gang_reservations")

#: At most ten patches a second from one writer.
DEFAULT_INTERVAL = 0.1
#: The first retry after a failure, doubled up to the cap.
RETRY_BASE = 1.0
RETRY_MAX = 60.0

Outcome = Literal["written", "skipped", "fenced", "gone", "refused", "failed"]


def podgroup_path(group: str) -> str | None:
    """The PodGroup object of the gang key ``api:namespace/name`` (None for a malformed key)."""
    api, _, key = group.partition(":")
    namespace, _, name = key.partition("/")
    if api not in (gang.NATIVE, gang.CRD) or not namespace or not name:
        return None
    version = gang.group_version(gang.NATIVE if api == gang.NATIVE else gang.CRD)
    return f"/apis/{version}/namespaces/{namespace}/podgroups/{name}"


def patch_body(value: str | None) -> dict[str, Any]:
    """Set the annotation to ``value``, or remove it (None: a merge patch's null deletes the key)."""
    return {"metadata": {"annotations": {ANNOTATION: value}}}


@dataclass(slots=True)
class _Wish:
    value: str | None
    due: float
    attempt: int = 0


class ReservationWrites:
    """The annotation writer of one GangScheduling; see the module docstring. ``handle`` is the
    plugin's Handle: its ``client`` (None: write nothing) and ``fence`` are read per patch."""

    def __init__(
        self,
        handle: Any,
        *,
        interval: float = DEFAULT_INTERVAL,
        retry_base: float = RETRY_BASE,
        retry_max: float = RETRY_MAX,
    ) -> None:
        self._handle = handle
        self._interval = interval
        self._retry = (retry_base, retry_max)
        self._cv = threading.Condition()
        self._wishes: dict[str, _Wish] = {}
        self._thread: threading.Thread | None = None
        self._busy = 0
        self._last = -math.inf
        self.results: list[tuple[str, Outcome]] = []  # the last few (group, outcome), newest last

    @property
    def _client(self) -> Any:
        return getattr(self._handle, "client", None)

    def put(self, group: str, value: str | None) -> None:
        """The annotation of gang ``group`` should be ``value`` (None: absent). Returns at once."""
        if self._client is None:
            return
        with self._cv:
            self._wishes[group] = _Wish(value, time.monotonic())
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="reservation-annotations", daemon=True)
                self._thread.start()
            self._cv.notify_all()

    # -- one patch --------------------------------------------------------------------------------
    def write(self, group: str, value: str | None) -> Outcome:
        """Send one patch now, on the caller's thread; never raises."""
        client, path = self._client, podgroup_path(group)
        if client is None or path is None:
            return self._record(group, "skipped")
        fence = getattr(self._handle, "fence", None)
        if fence is not None and not fence.admit():
            return self._record(group, "fenced")
        try:
            client.patch(path, patch_body(value), timeout=(5.0, 15.0))
        except api_errors.NotFound:
            return self._record(group, "gone")
        except api_errors.ApiError as e:
            if e.status in (400, 422):
                log.warning("gang_reservation_annotation_refused", group=group, error=str(e)[:300])
                return self._record(group, "refused")
            log.warning("gang_reservation_annotation_failed", group=group, error=str(e)[:300])
            return self._record(group, "failed")
        except api_errors.KubeError as e:
            log.warning("gang_reservation_annotation_failed", group=group, error=str(e)[:300])
            return self._record(group, "failed")
        return self._record(group, "written")

    def _record(self, group: str, outcome: Outcome) -> Outcome:
        with self._cv:
            self.results.append((group, outcome))
            del self.results[:-64]
        return outcome

    # -- the worker -------------------------------------------------------------------------------
    def _next(self) -> tuple[str, _Wish] | None:
        """Under the lock: wait for the earliest wish that is due (and the rate limit); None when
        there is none left (the worker then ends)."""
        while self._wishes:
            group, wish = min(self._wishes.items(), key=lambda kv: kv[1].due)
            now = time.monotonic()
            at = max(wish.due, self._last + self._interval)
            if at <= now:
                del self._wishes[group]
                self._last = now
                return group, wish
            self._cv.wait(at - now)
        return None

    def _run(self) -> None:
        while True:
            with self._cv:
                got = self._next()
                if got is None:
                    self._thread = None
                    self._cv.notify_all()
                    return
                self._busy += 1
            group, wish = got
            outcome: Outcome = "failed"
            try:
                outcome = self.write(group, wish.value)
            except Exception:  # a bug here must not end the worker with wishes queued
                log.exception("gang_reservation_annotation_crashed", group=group)
            finally:
                with self._cv:
                    self._busy -= 1
                    if outcome == "failed" and group not in self._wishes:  # not replaced meanwhile
                        delay = min(self._retry[0] * 2**wish.attempt, self._retry[1])
                        self._wishes[group] = _Wish(wish.value, time.monotonic() + delay, wish.attempt + 1)
                    self._cv.notify_all()

    def flush(self, timeout: float = 5.0) -> bool:
        """Wait until no wish is left and no patch is in flight; False on timeout (for tests and
        a clean stop: wishes being retried count as left)."""
        deadline = time.monotonic() + timeout
        with self._cv:
            while self._wishes or self._busy:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._cv.wait(left)
            return True

    def pending(self) -> dict[str, str | None]:
        with self._cv:
            return {g: w.value for g, w in self._wishes.items()}
