"""Stop signals (server.signals) in a child process: a signal that arrives while the main thread
holds the stop event's lock still stops it (a Python-level handler calling ``Event.set`` hung for
ever there), and a second signal exits at once, as kube-scheduler's does."""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap
from collections.abc import Iterator

import pytest

CHILD = textwrap.dedent(
    """
    import os, signal, sys, threading, time
    from custom_scheduler.server import logs
    from custom_scheduler.server.signals import SignalWatcher

    logs.setup("error")  # the watcher's own log lines stay out of the child's stdout

    stop = threading.Event()
    def first(name):
        print("first", name, flush=True)
        stop.set()
    def second():
        print("second", flush=True)
        os._exit(3)
    SignalWatcher(first, second).install()
    mode = sys.argv[1]
    if mode == "locked":
        # The signal arrives while this thread holds the event's lock: a handler that ran here
        # and called stop.set() would wait for this very thread.
        with stop._cond:
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(0.3)
    print("ready", flush=True)
    while not stop.wait(0.001):  # takes and drops the event's lock a thousand times a second
        pass
    if mode == "slow":
        time.sleep(60)  # a long graceful stop: the second signal must not wait for it
    print("done", flush=True)
    """
)


@pytest.fixture
def child() -> Iterator[list[subprocess.Popen[str]]]:
    procs: list[subprocess.Popen[str]] = []
    yield procs
    for p in procs:
        if p.poll() is None:
            p.kill()
            p.wait(10)


def _start(procs: list[subprocess.Popen[str]], mode: str) -> subprocess.Popen[str]:
    p = subprocess.Popen(
        [sys.executable, "-c", CHILD, mode],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    procs.append(p)
    return p


def _line(p: subprocess.Popen[str]) -> str:
    assert p.stdout is not None
    return p.stdout.readline().strip()


def test_a_signal_while_the_main_thread_holds_the_stop_events_lock_still_stops(
    child: list[subprocess.Popen[str]],
) -> None:
    p = _start(child, "locked")
    assert p.wait(20) == 0, "the child hung on its own lock"
    assert p.stdout is not None
    assert p.stdout.read().split("\n")[:3] == ["first SIGTERM", "ready", "done"]


def test_one_signal_stops_gracefully(child: list[subprocess.Popen[str]]) -> None:
    p = _start(child, "graceful")
    assert _line(p) == "ready"
    p.send_signal(signal.SIGINT)
    assert _line(p) == "first SIGINT"
    assert _line(p) == "done"
    assert p.wait(20) == 0


def test_a_second_signal_exits_at_once(child: list[subprocess.Popen[str]]) -> None:
    p = _start(child, "slow")
    assert _line(p) == "ready"
    p.send_signal(signal.SIGTERM)
    assert _line(p) == "first SIGTERM"
    p.send_signal(signal.SIGTERM)
    assert _line(p) == "second"
    assert p.wait(20) == 3
