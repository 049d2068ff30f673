"""Recording :class:`~custom_scheduler.core.ports.Observer` s for tests that check what the cycles report."""

from __future__ import annotations

import threading

from custom_scheduler.core.ports import Observer


class RetriesSeen(Observer):
    """The retries of each successful bind call, in the order pods were bound (bind threads append)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.retries: list[int] = []

    def bound(self, profile: str, seconds: float, retries: int) -> None:
        with self._lock:
            self.retries.append(retries)
