"""The unschedulable pods: rejected pods waiting for a reason to retry (upstream's
``unschedulable_entities.go``).

A map by uid, indexed by the plugins that rejected each pod. Pods wait here after plugins rejected
them, until a cluster event that one of those plugins cares about (:meth:`UnschedulablePods.candidates`
narrows to the pods whose rejecting plugins registered for it, before their hints are asked), a
change to themselves, or
``max_in_unschedulable`` seconds (:meth:`UnschedulablePods.timed_out`, the leftover flush). Pods
that PreEnqueue rejected wait here too, flagged ``gated``; those gated by SchedulingGates are
never moved by events or by time, because only the pod's own update can remove a gate (upstream
skips them too, kubernetes#124384).

Not thread-safe on its own: :class:`~custom_scheduler.core.queue.SchedulingQueue` holds its one
lock around every call.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Hashable, Iterator

from custom_scheduler.api import model
from custom_scheduler.core.queued_pod_info import QueuedPodInfo

#: The PreEnqueue plugin whose rejections only the pod's own update can lift, so cluster events and
#: the leftover flush skip the pods it gated. Spelled out so this module imports no plugin; a test
#: keeps it equal to ``plugins.scheduling_gates.NAME``.
SCHEDULING_GATES = "SchedulingGates"


def waits_for_own_update(qpi: QueuedPodInfo) -> bool:
    """Gated by SchedulingGates: no cluster event and no timeout can help, only an update of the pod."""
    return qpi.gating_plugin == SCHEDULING_GATES


class UnschedulablePods:
    """The unschedulable map, gated pods included.

    Args:
        clock: seconds; a pod's wait is measured from its ``timestamp`` on it.
        max_in_unschedulable: how long a pod may wait before the leftover flush retries it
            anyway (podMaxInUnschedulablePodsDuration).
    """

    def __init__(
        self,
        *,
        clock: Callable[[], float],
        max_in_unschedulable: float,
        pod_keys: Callable[[str, model.Pod], frozenset[Hashable] | None] | None = None,
    ) -> None:
        self._clock = clock
        self._max_in_unschedulable = max_in_unschedulable
        self._pods: dict[str, QueuedPodInfo] = {}
        # uid sets by rejecting plugin ("" for pods no plugin rejected), and each uid's keys there.
        self._by_plugin: dict[str, set[str]] = {}
        self._keys: dict[str, tuple[str, ...]] = {}
        # The keyed index (cluster_events.PodKeysFn): per plugin, the uids of its pods that have
        # keys, and key -> uids; each uid's (plugin, keys) to undo it.
        self._pod_keys = pod_keys
        self._keyed: dict[str, set[str]] = {}
        self._by_key: dict[str, dict[Hashable, set[str]]] = {}
        self._waits_on: dict[str, list[tuple[str, frozenset[Hashable]]]] = {}
        self.incoming: Counter[str] = Counter()
        """Pods that entered, gated or not, by event (``scheduler_queue_incoming_pods_total``)."""

    def __len__(self) -> int:
        return len(self._pods)

    def __contains__(self, uid: object) -> bool:
        return uid in self._pods

    def __iter__(self) -> Iterator[QueuedPodInfo]:
        """Insertion order, over a copy."""
        return iter(list(self._pods.values()))

    def get(self, uid: str) -> QueuedPodInfo | None:
        return self._pods.get(uid)

    def add(self, qpi: QueuedPodInfo, event: str) -> None:
        """Park a pod that is in no sub-queue (gated or rejected)."""
        self._pods[qpi.uid] = qpi
        self.reindex(qpi)
        self.incoming[event] += 1

    def reindex(self, qpi: QueuedPodInfo) -> None:
        """Index ``qpi`` under its rejecting plugins (again: PreEnqueue may have added one)."""
        self._unindex(qpi.uid)
        uid = qpi.uid
        keys = tuple(qpi.unschedulable_plugins) or ("",)
        self._keys[uid] = keys
        for plugin in keys:
            self._by_plugin.setdefault(plugin, set()).add(uid)
        if self._pod_keys is None:
            return
        waits: list[tuple[str, frozenset[Hashable]]] = []
        for plugin in keys:
            got = self._pod_keys(plugin, qpi.pod) if plugin else None
            if got is None:
                continue
            waits.append((plugin, got))
            self._keyed.setdefault(plugin, set()).add(uid)
            index = self._by_key.setdefault(plugin, {})
            for key in got:
                index.setdefault(key, set()).add(uid)
        if waits:
            self._waits_on[uid] = waits

    def rekey(self) -> None:
        """Recompute every pod's keys (the plugins' registrations changed: a config reload)."""
        for qpi in list(self._pods.values()):
            self.reindex(qpi)

    def _unindex(self, uid: str) -> None:
        for plugin in self._keys.pop(uid, ()):
            self._by_plugin[plugin].discard(uid)
        for plugin, got in self._waits_on.pop(uid, ()):
            self._keyed[plugin].discard(uid)
            index = self._by_key[plugin]
            for key in got:
                members = index.get(key)
                if members is not None:
                    members.discard(uid)
                    if not members:
                        del index[key]

    def remove(self, uid: str) -> QueuedPodInfo | None:
        qpi = self._pods.pop(uid, None)
        if qpi is not None:
            self._unindex(uid)
        return qpi

    def gated(self) -> list[QueuedPodInfo]:
        """The pods PreEnqueue holds back."""
        return [qpi for qpi in self._pods.values() if qpi.gated]

    def gated_count(self) -> int:
        return sum(1 for qpi in self._pods.values() if qpi.gated)

    def candidates(
        self,
        interested: Callable[[str], bool] | None,
        pre_check: Callable[[model.Pod], bool] | None,
        targets: Callable[[str], frozenset[str] | None] | None = None,
        event_keys: Callable[[str], frozenset[Hashable] | None] | None = None,
    ) -> list[QueuedPodInfo]:
        """The pods a cluster event may concern, before their hints are asked: not gated by
        SchedulingGates, rejected by a plugin ``interested`` accepts (any, when None; a pod with
        no recorded plugin always) and, when that plugin's ``targets`` names pods, one of them,
        and when ``event_keys`` gives the event's keys for that plugin, one without keys or sharing
        one with the event; and passing ``pre_check`` (when given)."""
        if interested is None:
            pool: list[QueuedPodInfo] = list(self._pods.values())
        else:
            uids: set[str] = set()
            for plugin, members in self._by_plugin.items():
                if members and (not plugin or interested(plugin)):
                    # A plugin that names the pods the change concerns narrows its bucket to them.
                    only = targets(plugin) if targets is not None and plugin else None
                    concerned = members if only is None else members & only
                    if event_keys is not None and plugin and plugin in self._keyed:
                        concerned = self._sharing_a_key(plugin, concerned, event_keys(plugin))
                    uids |= concerned
            pool = [self._pods[uid] for uid in uids]
        return [qpi for qpi in pool if not waits_for_own_update(qpi) and (pre_check is None or pre_check(qpi.pod))]

    def _sharing_a_key(self, plugin: str, members: set[str], keys: frozenset[Hashable] | None) -> set[str]:
        """``members`` less those whose keys ``keys`` misses (None: all of them)."""
        if keys is None:
            return members
        index = self._by_key[plugin]
        kept = members - self._keyed[plugin]  # no keys: any change may concern them
        for key in keys:
            found = index.get(key)
            if found:
                kept |= found & members
        return kept

    def timed_out(self) -> list[QueuedPodInfo]:
        """The pods that have waited longer than ``max_in_unschedulable`` (never those gated by
        SchedulingGates: time does not remove a gate)."""
        now = self._clock()
        return [
            qpi
            for qpi in self._pods.values()
            if now - qpi.timestamp > self._max_in_unschedulable and not waits_for_own_update(qpi)
        ]
