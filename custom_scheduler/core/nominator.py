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
    """Per node, its nominated pods (by UID) and the same as one tuple, rebuilt only when that
    node's nominations change: each scheduling cycle takes a copy of the whole map
    (:meth:`by_node`), and during a wave of preemptions hundreds of nodes hold one, so the copy is
    one dict copy of shared tuples rather than a list per node; and a node's tuple stays the same
    object while its nominations do (the filter's kept copies of holders match it by identity)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._node_of: dict[str, str] = {}
        self._pods: dict[str, dict[str, Pod]] = {}
        self._tuples: dict[str, tuple[Pod, ...]] = {}

    def add(self, pod: Pod, node: str) -> None:
        with self._lock:
            self._remove_locked(pod.uid)
            self._node_of[pod.uid] = node
            pods = self._pods.setdefault(node, {})
            pods[pod.uid] = pod
            self._tuples[node] = tuple(pods.values())

    def remove(self, pod: Pod) -> None:
        with self._lock:
            self._remove_locked(pod.uid)

    def _remove_locked(self, uid: str) -> None:
        node = self._node_of.pop(uid, None)
        if node is not None:
            pods = self._pods.get(node)
            if pods is not None:
                pods.pop(uid, None)
                if pods:
                    self._tuples[node] = tuple(pods.values())
                else:
                    del self._pods[node]
                    self._tuples.pop(node, None)

    def node_of(self, uid: str) -> str | None:
        with self._lock:
            return self._node_of.get(uid)

    def by_node(self) -> dict[str, tuple[Pod, ...]]:
        """A copy, for one scheduling cycle (the tuples are shared: never modified)."""
        with self._lock:
            return dict(self._tuples)

    def pods_on(self, node: str) -> tuple[Pod, ...]:
        with self._lock:
            return self._tuples.get(node, ())
