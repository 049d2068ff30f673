"""The indexed binary heap under activeQ and backoffQ (upstream's ``backend/heap``), and what the
two queues do alike on top of it.

Apart from both queues because they differ only in the order they give it; indexed by uid so
that an update (re-sift one entry) or a delete (a pod removed from the cluster, or taken for a
group cycle) costs O(log n) rather than a scan and a re-heapify. :class:`HeapQueue` is the part of
a sub-queue that does not depend on that order (membership, push with the shared insertion
sequence, the incoming counter), so activeQ and backoffQ add only their own policy.
"""

from __future__ import annotations

import itertools
from collections import Counter
from collections.abc import Callable, Iterator

from custom_scheduler.api import model
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

    def _put(self, i: int, qpi: QueuedPodInfo) -> None:
        """Store ``qpi`` at slot ``i`` and index it there: every move of a sift goes through here,
        so the uid index never disagrees with the list."""
        self._items[i] = qpi
        self._pos[qpi.uid] = i

    def _up(self, i: int) -> bool:
        """Sift the entry at ``i`` towards the root; whether it moved."""
        items, before = self._items, self._before
        item, start = items[i], i
        while i > 0 and before(item, items[parent := (i - 1) // 2]):
            self._put(i, items[parent])
            i = parent
        self._put(i, item)
        return i != start

    def _down(self, i: int) -> None:
        """Sift the entry at ``i`` towards the leaves."""
        items, before = self._items, self._before
        n, item = len(items), items[i]
        while (child := 2 * i + 1) < n:
            if child + 1 < n and before(items[child + 1], items[child]):
                child += 1
            if not before(items[child], item):
                break
            self._put(i, items[child])
            i = child
        self._put(i, item)


class HeapQueue:
    """A sub-queue kept in a :class:`PodHeap`: what activeQ and backoffQ share.

    Args:
        before: the sub-queue's order (the heap's).
        seq: the insertion sequence shared by activeQ and backoffQ, which breaks ties in both
            orders, so entries from both compare (a group cycle orders members taken from each).
    """

    def __init__(self, before: Before, seq: itertools.count[int]) -> None:
        self._heap = PodHeap(before)
        self._seq = seq
        self.incoming: Counter[str] = Counter()
        """Pods that entered this sub-queue, by event (``scheduler_queue_incoming_pods_total``)."""

    def __len__(self) -> int:
        return len(self._heap)

    def __contains__(self, uid: object) -> bool:
        return uid in self._heap

    def __iter__(self) -> Iterator[QueuedPodInfo]:
        """Heap (not pop) order, over a copy."""
        return iter(self._heap)

    def get(self, uid: str) -> QueuedPodInfo | None:
        return self._heap.get(uid)

    def remove(self, uid: str) -> QueuedPodInfo | None:
        return self._heap.remove(uid)

    def push(self, qpi: QueuedPodInfo, event: str) -> None:
        """Add a pod that is in no sub-queue (for activeQ, one PreEnqueue already passed)."""
        qpi.seq = next(self._seq)
        self._heap.push(qpi)
        self.incoming[event] += 1

    def update(self, pod: model.Pod) -> bool:
        """Replace a queued pod's object; False if it is not here. The position stays: override
        where the order reads the pod."""
        qpi = self._heap.get(pod.uid)
        if qpi is None:
            return False
        qpi.pod = pod
        return True
