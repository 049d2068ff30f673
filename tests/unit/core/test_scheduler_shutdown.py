"""``Scheduler.shutdown(timeout)``: in-flight binds are waited for, but no longer than the timeout."""

from __future__ import annotations

import threading
import time

from custom_scheduler.core import queue as q
from custom_scheduler.core.binding import Assumed
from custom_scheduler.core.cache import Cache
from custom_scheduler.core.scheduler import Scheduler


def _scheduler() -> Scheduler:
    queue = q.SchedulingQueue(lambda a, b: a.timestamp < b.timestamp)
    return Scheduler(profiles={}, cache=Cache(), queue=queue, writer=None, bind_workers=1)


def test_shutdown_waits_for_in_flight_binds() -> None:
    sched = _scheduler()
    finished = threading.Event()

    def bind() -> None:
        time.sleep(0.2)
        finished.set()

    sched.binding.executor.submit(bind)
    assert sched.shutdown(timeout=10)
    assert finished.is_set()


def test_shutdown_honours_its_timeout() -> None:
    sched = _scheduler()
    gate = threading.Event()

    def hang() -> None:  # a bind that hangs until the test lets it go
        gate.wait()

    sched.binding.executor.submit(hang)
    t0 = time.monotonic()
    assert not sched.shutdown(timeout=0.2)
    assert time.monotonic() - t0 < 2.0
    gate.set()  # let the pool thread go


def test_a_crashed_binding_cycle_runs_unreserve() -> None:
    """What Reserve assumed (PVs, devices) must not outlive a binding cycle that raised."""
    from typing import Any, cast

    from custom_scheduler.framework.types import CycleState
    from tests.builders import make_pod

    sched = _scheduler()
    calls: list[tuple[str, str]] = []

    class Fwk:
        def run_unreserve(self, state: CycleState, pod: Any, node: str) -> None:
            calls.append((pod.name, node))

    pod = make_pod("p").build()
    qpi = q.QueuedPodInfo(pod, 0.0)

    def blow_up(a: Assumed) -> None:
        raise RuntimeError("bind plugin blew up")

    sched.binding._guard(Assumed(cast(Any, Fwk()), CycleState(), qpi, pod, "n1", 0, 0.0), blow_up)
    assert calls == [("p", "n1")]
    assert sched.queue.where(pod.uid) is q.SubQueue.BACKOFF
    sched.shutdown(timeout=1)
