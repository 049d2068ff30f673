"""The leadership fence: a value the binding path consults before every write that places a pod.

Why it exists: a leader that loses its Lease must not bind one more pod, or two schedulers place
pods against two views of the cluster. The elector learns of the loss (a renewal that sees
another holder, or a renew deadline that passes) on its own thread; binding cycles run on a
pool. Setting a process-wide "stop" event is not enough: cycles already queued in the pool, and
a bind sleeping between retries, would still POST. So every Binding POST asks the fence first
(:meth:`Fence.admit`), right before the request, and the elector revokes the fence the moment
it observes the loss (:meth:`Fence.revoke`).

The check is an in-memory flag behind an uncontended lock: no API call, about a microsecond.
The lock makes "admit" and "revoke" totally ordered, so :meth:`Fence.report` can say exactly how
many writes were admitted before the revocation and that none was admitted after it (tests prove
fencing with that figure instead of racing timestamps). A request admitted just before the
revocation still reaches the server; that is the same window kube-scheduler has, and it is
bounded by the remaining ``leaseDuration - renewDeadline`` during which no one else can lead.

The fence is owned by the :class:`~custom_scheduler.server.app.App` and handed to the elector, the
scheduler and every framework Handle, so it is a value passed around, never a global: a process
without leader election simply never revokes it.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass


class FencedOff(Exception):
    """Raised inside a write path when the fence refuses it (leadership is gone)."""


@dataclass(frozen=True, slots=True)
class FenceReport:
    """What the fence has seen, as a value (for logs, metrics and tests).

    ``admitted`` counts every write admitted so far; ``admitted_before_revoke`` the writes
    admitted when the revocation happened (equal to ``admitted`` once revoked, by construction);
    ``refused`` the writes turned away after it. ``revoked_at`` is on the fence's monotonic clock.
    """

    held: bool
    reason: str
    revoked_at: float | None
    admitted: int
    admitted_before_revoke: int
    refused: int


class Fence:
    """Leadership as a token: held until :meth:`revoke`, then never again (a new leader is a new
    process, as with kube-scheduler). Thread-safe."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._lock = threading.Lock()
        self._held = True
        self._reason = ""
        self._revoked_at: float | None = None
        self._admitted = 0
        self._admitted_before_revoke = 0
        self._refused = 0
        #: Who holds the leadership this fence stands for: the elector's Lease identity ("" without
        #: leader election). Records the leader writes into the cluster name it.
        self.holder = ""

    @property
    def held(self) -> bool:
        """True until revoked. A plain read: for loops deciding whether to take more work."""
        return self._held

    def admit(self) -> bool:
        """Ask to perform one write now; False (and counted as refused) once revoked.

        Call it immediately before sending the request, and again before every retry.
        """
        with self._lock:
            if not self._held:
                self._refused += 1
                return False
            self._admitted += 1
            return True

    def revoke(self, reason: str) -> bool:
        """End leadership for this process; True the first time, False if already revoked."""
        with self._lock:
            if not self._held:
                return False
            self._held = False
            self._reason = reason
            self._revoked_at = self._clock()
            self._admitted_before_revoke = self._admitted
            return True

    def report(self) -> FenceReport:
        with self._lock:
            return FenceReport(
                held=self._held,
                reason=self._reason,
                revoked_at=self._revoked_at,
                admitted=self._admitted,
                admitted_before_revoke=self._admitted if self._held else self._admitted_before_revoke,
                refused=self._refused,
            )
