"""SIGTERM and SIGINT for the daemon, handled outside the signal handler.

Why not a Python handler that sets the stop event: CPython runs a handler in the main thread,
between two of its bytecodes, and ``threading.Event.set`` takes the event's lock, which is not
re-entrant. When the main thread holds that lock at that moment (inside ``Event.wait``, or inside
the first signal's own ``set()`` when a second signal follows, as ``timeout(1)`` sends one to the
process and one to its group), the handler waits for a lock its own thread holds: the daemon hung
for ever on SIGTERM. Here the handler does nothing in Python; the interpreter's C handler writes
the signal number to a pipe (``signal.set_wakeup_fd``) and a thread that reads it does the rest,
where taking a lock is safe.

As kube-scheduler (``k8s.io/apiserver``'s signal handler): the first signal starts a graceful stop,
a second one exits at once with status 1.
"""

from __future__ import annotations

import os
import signal
import threading
from collections.abc import Callable, Sequence
from typing import Any

import structlog

log = structlog.get_logger("custom_scheduler.server.signals")

STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)


def _ignore(signum: int, frame: Any) -> None:
    """The Python-level handler: nothing (the reading thread acts), but not the default action."""


class SignalWatcher:
    """Calls ``on_first`` with the first stop signal's name, then ``on_second`` on the next one.

    ``install`` must run in the main thread (``signal`` only allows it there)."""

    def __init__(self, on_first: Callable[[str], None], on_second: Callable[[], None] | None = None) -> None:
        self._on_first = on_first
        self._on_second = on_second or (lambda: os._exit(1))
        self._received = 0

    def install(self, signals: Sequence[signal.Signals] = STOP_SIGNALS) -> None:
        read_end, write_end = os.pipe()
        os.set_blocking(write_end, False)  # the C handler must never block on a full pipe
        signal.set_wakeup_fd(write_end, warn_on_full_buffer=False)
        wanted = {int(s) for s in signals}
        for s in signals:
            signal.signal(s, _ignore)
        threading.Thread(target=self._read, args=(read_end, wanted), name="signals", daemon=True).start()

    def _read(self, fd: int, wanted: set[int]) -> None:
        while True:
            try:
                data = os.read(fd, 64)
            except InterruptedError:
                continue
            if not data:
                return
            for signum in data:
                if signum in wanted:
                    self._deliver(signum)

    def _deliver(self, signum: int) -> None:
        self._received += 1
        name = signal.Signals(signum).name
        if self._received == 1:
            log.info("signal_received", signal=name)
            self._on_first(name)
        else:
            log.warning("second_signal_exiting", signal=name)
            self._on_second()
