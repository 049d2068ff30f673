"""Pods waiting at Permit: upstream's ``waitingPodsMap`` and ``waitingPod``.

A Permit plugin that answers ``Code.WAIT`` parks the (already assumed) pod here. The binding cycle
then waits on :meth:`WaitingPodMap.wait_future`: a Future resolved when every waiting plugin has
called ``allow`` (SUCCESS), when one calls ``reject`` (Unschedulable with its message), or when the
shortest of the plugins' timeouts passes (Unschedulable ``rejected due to timeout after waiting
<t> at plugin <p>``, upstream's wording). No thread is parked per pod: one timer thread serves every
deadline, and the binding cycle continues as the Future's callback, as for PreBind waits.

The map is shared by a profile's plugins through the Handle; its methods are thread-safe (plugins
call ``allow`` on the scheduling thread, timers fire on theirs, the binding cycle reads the Future).
"""

from __future__ import annotations

import heapq
import itertools
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import Future

from custom_scheduler.api.model import Pod
from custom_scheduler.framework.types import SUCCESS, Code, Status

#: Upstream caps a Permit wait at 15 minutes whatever the plugin asks.
MAX_TIMEOUT = 15 * 60.0


def _format_wait(seconds: float) -> str:
    """Go's time.Duration formatting for the timeout message (``10s``, ``1m30s``, ``500ms``)."""
    if seconds < 1:
        return f"{round(seconds * 1000)}ms"
    whole = round(seconds)
    m, s = divmod(whole, 60)
    h, m = divmod(m, 60)
    if h:
        return f"{h}h{m}m{s}s"
    if m:
        return f"{m}m{s}s"
    return f"{s}s"


class WaitingPod:
    """One pod parked at Permit; see the module docstring."""

    __slots__ = ("_future", "_lock", "_node", "_pending", "_pod", "deadline", "timeout", "timeout_plugin")

    def __init__(self, pod: Pod, node_name: str, waits: Mapping[str, float], now: float) -> None:
        self._pod = pod
        self._node = node_name
        self._pending = dict(waits)
        self._lock = threading.Lock()
        self._future: Future[Status] = Future()
        # The earliest deadline decides, and names its plugin in the message.
        plugin, timeout = min(waits.items(), key=lambda kv: (min(kv[1], MAX_TIMEOUT), kv[0]))
        self.timeout = min(max(timeout, 0.0), MAX_TIMEOUT)
        self.timeout_plugin = plugin
        self.deadline = now + self.timeout

    @property
    def pod(self) -> Pod:
        return self._pod

    @property
    def node_name(self) -> str:
        return self._node

    @property
    def future(self) -> Future[Status]:
        return self._future

    def pending_plugins(self) -> Sequence[str]:
        with self._lock:
            return sorted(self._pending)

    def allow(self, plugin: str) -> None:
        with self._lock:
            self._pending.pop(plugin, None)
            if self._pending or self._future.done():
                return
            self._future.set_result(SUCCESS)

    def reject(self, plugin: str, message: str) -> None:
        with self._lock:
            if self._future.done():
                return
            self._future.set_result(Status(Code.UNSCHEDULABLE, (message,), plugin))

    def expire(self) -> None:
        self.reject(
            self.timeout_plugin,
            f"rejected due to timeout after waiting {_format_wait(self.timeout)} at plugin {self.timeout_plugin}",
        )


class WaitingPodMap:
    """The profile's waiting pods, keyed by uid, with one timer thread for their deadlines.

    ``clock`` is injectable so unit tests and ``simulate`` can expire waits without sleeping;
    :meth:`expire_due` is what the timer thread runs, and what an offline driver calls.
    """

    def __init__(self, clock: Callable[[], float] = time.monotonic, *, timer_thread: bool = True) -> None:
        self._clock = clock
        self._pods: dict[str, WaitingPod] = {}
        self._lock = threading.Condition()
        self._deadlines: list[tuple[float, int, str]] = []
        self._seq = itertools.count()
        self._timer_thread = timer_thread
        self._thread: threading.Thread | None = None
        self._closed = False

    def add(self, pod: Pod, node_name: str, waits: Mapping[str, float]) -> WaitingPod:
        wp = WaitingPod(pod, node_name, waits, self._clock())
        with self._lock:
            self._pods[pod.uid] = wp
            heapq.heappush(self._deadlines, (wp.deadline, next(self._seq), pod.uid))
            if self._timer_thread and self._thread is None and not self._closed:
                self._thread = threading.Thread(target=self._run, name="permit-timers", daemon=True)
                self._thread.start()
            self._lock.notify_all()
        # Gone from the map as soon as its wait ends, however it ends.
        uid = pod.uid

        def forget(_f: Future[Status]) -> None:
            self._remove(uid, wp)

        wp.future.add_done_callback(forget)
        return wp

    def _remove(self, uid: str, wp: WaitingPod) -> None:
        with self._lock:
            if self._pods.get(uid) is wp:
                del self._pods[uid]

    def get(self, uid: str) -> WaitingPod | None:
        with self._lock:
            return self._pods.get(uid)

    def __iter__(self) -> Iterator[WaitingPod]:
        with self._lock:
            return iter(list(self._pods.values()))

    def __len__(self) -> int:
        with self._lock:
            return len(self._pods)

    def wait_future(self, uid: str) -> Future[Status] | None:
        wp = self.get(uid)
        return None if wp is None else wp.future

    def expire_due(self) -> int:
        """Reject every wait whose deadline has passed; returns how many."""
        now = self._clock()
        due: list[WaitingPod] = []
        with self._lock:
            while self._deadlines and self._deadlines[0][0] <= now:
                _, _, uid = heapq.heappop(self._deadlines)
                wp = self._pods.get(uid)
                if wp is not None and wp.deadline <= now:
                    due.append(wp)
        for wp in due:
            wp.expire()
        return len(due)

    def next_deadline(self) -> float | None:
        with self._lock:
            live = [d for d, _, uid in self._deadlines if uid in self._pods]
            return min(live) if live else None

    def reject_all(self, message: str) -> None:
        """Shutdown or leadership loss: end every wait (the binding cycles then undo)."""
        for wp in list(self):
            wp.reject("", message)

    def close(self) -> None:
        with self._lock:
            self._closed = True
            self._lock.notify_all()

    def _run(self) -> None:
        while True:
            with self._lock:
                if self._closed:
                    return
                while self._deadlines and self._deadlines[0][2] not in self._pods:
                    heapq.heappop(self._deadlines)
                wait = None if not self._deadlines else max(0.0, self._deadlines[0][0] - self._clock())
                if wait is None or wait > 0:
                    self._lock.wait(timeout=wait if wait is not None else 1.0)
                    continue
            self.expire_due()
