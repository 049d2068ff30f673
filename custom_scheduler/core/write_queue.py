"""The API writer's queue: Events may be dropped under load, a pod's status never is.

client-go's event broadcaster drops Events when its buffer is full, and so does the writer. A
pod's ``PodScheduled`` condition and ``nominatedNodeName`` are another matter: cluster-autoscaler
scales up for pods whose condition says Unschedulable, and people and tools read why a pod waits
there. kube-scheduler never drops those writes; its API dispatcher (SchedulerAsyncAPICalls) keeps
one pending call per pod and merges a newer one into it. Here writes under a key (the pod's uid)
work the same way: a newer write replaces the queued one and moves to the back, so the pod's
last state is written last, and the queue holds at most one status write per pod. Only unkeyed
writes (Events, series updates) count against the bound.
"""

from __future__ import annotations

import itertools
import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable

Write = tuple[Callable[[], None], bool]
"""The write to perform, and whether it writes to the API (the fence is asked first) or not (a
flush marker)."""

_UNKEYED = object()


class WriteQueue:
    """FIFO of pending writes for one writer thread; see the module docstring."""

    def __init__(self, max_unkeyed: int) -> None:
        self._max = max_unkeyed
        self._items: OrderedDict[Hashable, Write] = OrderedDict()
        self._unkeyed = 0
        self._seq = itertools.count()
        self._cond = threading.Condition()
        self._closed = False

    def put(self, fn: Callable[[], None], *, write: bool = True, key: Hashable | None = None) -> bool:
        """Queue ``fn``; False when it was dropped (unkeyed, with ``max_unkeyed`` waiting)."""
        with self._cond:
            if key is None:
                if self._unkeyed >= self._max:
                    return False
                self._unkeyed += 1
                key = (_UNKEYED, next(self._seq))
            self._items[key] = (fn, write)
            self._items.move_to_end(key)
            self._cond.notify()
            return True

    def put_marker(self, fn: Callable[[], None]) -> None:
        """Queue ``fn`` after everything queued so far, never dropped (a flush)."""
        self.put(fn, write=False, key=object())

    def get(self) -> Write | None:
        """The oldest write, waiting for one; None once closed and drained."""
        with self._cond:
            while not self._items:
                if self._closed:
                    return None
                self._cond.wait()
            key, item = self._items.popitem(last=False)
            if isinstance(key, tuple) and key[0] is _UNKEYED:
                self._unkeyed -= 1
            return item

    def close(self) -> None:
        """No more writes: :meth:`get` returns what is left, then None."""
        with self._cond:
            self._closed = True
            self._cond.notify_all()
