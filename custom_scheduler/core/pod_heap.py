"""The indexed binary heap under activeQ and backoffQ (upstream's ``backend/heap``).

Apart from both queues because they differ only in the order they give it; indexed by uid so
that an update (re-sift one entry) or a delete (a pod removed from the cluster, or taken for a
group cycle) costs O(log n) rather than a scan and a re-heapify.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

from custom_scheduler.core.queued_pod_info import QueuedPodInfo

Before = Callable[[QueuedPodInfo, QueuedPodInfo], bool]
"""The heap's order: whether the first entry comes out before the second."""


class PodHeap:
    """A binary heap of QueuedPodInfo indexed by uid, so update and delete are O(log n)."""

    __slots__ = ("_before", "_items", "_pos")

    def __init__(self, before: Before) -> None:
        self._before = before
        self._items: list[QueuedPodInfo] = []
        self._pos: dict[str, int] = {}

    def __len__(self) -> int:
        return len(self._items)

    def __contains__(self, uid: object) -> bool:
        return uid in self._pos

    def __iter__(self) -> Iterator[QueuedPodInfo]:
        """The entries in heap (not pop) order, over a copy: callers may remove while iterating."""
        return iter(list(self._items))

    def get(self, uid: str) -> QueuedPodInfo | None:
        i = self._pos.get(uid)
        return None if i is None else self._items[i]

    def peek(self) -> QueuedPodInfo | None:
        return self._items[0] if self._items else None

    def push(self, qpi: QueuedPodInfo) -> None:
        self._items.append(qpi)
        self._pos[qpi.uid] = len(self._items) - 1
        self._up(len(self._items) - 1)

    def pop(self) -> QueuedPodInfo:
        return self._remove_at(0)

    def remove(self, uid: str) -> QueuedPodInfo | None:
        i = self._pos.get(uid)
        return None if i is None else self._remove_at(i)

    def fix(self, uid: str) -> None:
        """Restore the heap order after the entry's sort key changed."""
        i = self._pos[uid]
        if not self._up(i):
            self._down(i)

    def _remove_at(self, i: int) -> QueuedPodInfo:
        items = self._items
        last = items.pop()
        if i == len(items):
            del self._pos[last.uid]
            return last
        removed = items[i]
        del self._pos[removed.uid]
        items[i] = last
        self._pos[last.uid] = i
        if not self._up(i):
            self._down(i)
        return removed

    def _up(self, i: int) -> bool:
        items, pos, before = self._items, self._pos, self._before
        item, start = items[i], i
        while i > 0:
            parent = (i - 1) // 2
            if not before(item, items[parent]):
                break
            items[i] = items[parent]
            pos[items[i].uid] = i
            i = parent
        items[i] = item
        pos[item.uid] = i
        return i != start

    def _down(self, i: int) -> None:
        items, pos, before = self._items, self._pos, self._before
        n, item = len(items), items[i]
        while (child := 2 * i + 1) < n:
            if child + 1 < n and before(items[child + 1], items[child]):
                child += 1
            if not before(items[child], item):
                break
            items[i] = items[child]
            pos[items[i].uid] = i
            i = child
        items[i] = item
        pos[item.uid] = i
