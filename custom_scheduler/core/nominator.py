"""Nominated pods: preemptors waiting for their victims to go, per nominated node.

After a preemption the preemptor is nominated to a node but not yet bound. Until it is, every
other pod of lower priority filtered on that node must fit *with the nominated pod's resources
reserved* (kube-scheduler's ``RunFilterPluginsWithNominatedPods``), or the freed room would be taken
by someone else and the preemption wasted.
"""

from __future__ import annotations

import threading

from custom_scheduler.api.model import Pod


class Nominator:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._node_of: dict[str, str] = {}
        self._pods: dict[str, dict[str, Pod]] = {}

    def add(self, pod: Pod, node: str) -> None:
        with self._lock:
            self._remove_locked(pod.uid)
            self._node_of[pod.uid] = node
            self._pods.setdefault(node, {})[pod.uid] = pod

    def remove(self, pod: Pod) -> None:
        with self._lock:
            self._remove_locked(pod.uid)

    def _remove_locked(self, uid: str) -> None:
        node = self._node_of.pop(uid, None)
        if node is not None:
            pods = self._pods.get(node)
            if pods is not None:
                pods.pop(uid, None)
                if not pods:
                    del self._pods[node]

    def node_of(self, uid: str) -> str | None:
        with self._lock:
            return self._node_of.get(uid)

    def by_node(self) -> dict[str, list[Pod]]:
        """A copy, for one scheduling cycle."""
        with self._lock:
            if not self._pods:
                return {}
            return {n: list(p.values()) for n, p in self._pods.items()}

    def pods_on(self, node: str) -> list[Pod]:
        with self._lock:
            return list(self._pods.get(node, {}).values())
