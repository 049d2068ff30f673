"""Calling a store's change listeners: one listener's failure is logged and contained.

The volume, DRA and gang stores are fed by informer threads (or a snapshot loader) and tell their
listeners (the queue's requeue hooks) of each change. A listener that raises must neither stop
the ones after it nor reach the feeder, whose next event would otherwise be lost with it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any


def notify(
    listeners: Iterable[Callable[..., object]], args: tuple[Any, ...], log: Any, event: str, **context: Any
) -> None:
    """``fn(*args)`` for every listener in order; one that raises is logged as ``event`` with its
    traceback and ``context``, and the rest still run."""
    for fn in listeners:
        try:
            fn(*args)
        except Exception:
            log.exception(event, **context)
