"""Which Services, ReplicationControllers, ReplicaSets and StatefulSets select a pod.

PodTopologySpread's system default constraints (hostname maxSkew 3, zone maxSkew 5, both
ScheduleAnyway) spread a pod away from the other pods *of the same workload*; kube-scheduler
defines that workload as the union of the selectors of every Service, ReplicationController,
ReplicaSet and StatefulSet in the pod's namespace that selects the pod (``helper.DefaultSelector``).
This module keeps those selectors, compiled, indexed by namespace: from four informers for the
daemon (:class:`DefaultSelectors`), or from fixed lists of objects for the offline tools, which read
a snapshot file or one LIST of a live cluster (:class:`StaticSelectors`). Both answer through the
same index, so ``explain`` and ``simulate`` spread a pod exactly as the daemon does.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from custom_scheduler.api import labels
from custom_scheduler.api.model import Pod
from custom_scheduler.core.informers import Informer
from custom_scheduler.kube.client import KubeClient

#: (API path, whether spec.selector is a plain label map rather than a LabelSelector)
SOURCES = {
    "services": ("/api/v1/services", True),
    "replicationcontrollers": ("/api/v1/replicationcontrollers", True),
    "replicasets": ("/apis/apps/v1/replicasets", False),
    "statefulsets": ("/apis/apps/v1/statefulsets", False),
}

#: The ``kind`` of each source's objects -> its key in :data:`SOURCES` (objects read from files name
#: their kind, not the API path they came from).
KINDS = {
    "Service": "services",
    "ReplicationController": "replicationcontrollers",
    "ReplicaSet": "replicasets",
    "StatefulSet": "statefulsets",
}


@dataclass(frozen=True, slots=True)
class Workload:
    kind: str
    namespace: str
    name: str
    selector: labels.Selector | None  # None: selects nothing (no or empty selector)
    resource_version: str = ""

    @property
    def key(self) -> str:
        return f"{self.kind}/{self.namespace}/{self.name}"


def _project(kind: str, plain_map: bool) -> Any:
    def project(doc: dict[str, Any]) -> Workload:
        meta = doc.get("metadata") or {}
        raw = (doc.get("spec") or {}).get("selector")
        selector: labels.Selector | None = None
        if raw:
            try:
                selector = labels.selector_from_set(raw) if plain_map else labels.compile_selector(raw)
            except labels.SelectorError:
                selector = None
            if selector is not None and selector.is_empty:
                selector = None  # an empty selector would select every pod: kube ignores it
        ns, name, rv = meta.get("namespace", ""), meta.get("name", ""), meta.get("resourceVersion", "")
        return Workload(kind, ns, name, selector, rv)

    return project


class _Index:
    """Sink keeping the workloads of each namespace."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.by_ns: dict[str, dict[str, Workload]] = {}

    def on_add(self, w: Workload) -> None:
        with self.lock:
            self.by_ns.setdefault(w.namespace, {})[w.key] = w

    def on_update(self, old: Workload, new: Workload) -> None:
        self.on_add(new)

    def on_delete(self, w: Workload) -> None:
        with self.lock:
            ns = self.by_ns.get(w.namespace)
            if ns is not None:
                ns.pop(w.key, None)

    def select(self, pod: Pod) -> labels.Selector | None:
        """The union of the selectors of ``pod``'s namespace that select it; None when none does."""
        reqs: list[labels.Requirement] = []
        with self.lock:
            workloads = list(self.by_ns.get(pod.namespace, {}).values())
        for w in workloads:
            if w.selector is not None and w.selector.matches(pod.labels):
                reqs.extend(w.selector.requirements)
        return labels.Selector(tuple(reqs)) if reqs else None


class DefaultSelectors:
    def __init__(self, client: KubeClient, **informer_kw: Any) -> None:
        self._index = _Index()
        self.informers = [
            Informer(client, path, _project(name, plain), lambda w: w.key, self._index, name=name, **informer_kw)
            for name, (path, plain) in SOURCES.items()
        ]

    def for_pod(self, pod: Pod) -> labels.Selector | None:
        """The union of the selectors that select ``pod``; None when nothing selects it."""
        return self._index.select(pod)


class StaticSelectors:
    """:class:`DefaultSelectors` over a fixed set of API objects (JSON dicts), for tools without
    informers: the same projection (an empty, absent or invalid selector selects nothing) and the
    same union, so their PodTopologySpread default constraints are the daemon's.

    Each object is indexed by its ``kind`` (see :data:`KINDS`); objects of other kinds are ignored,
    so a whole snapshot or ``kubectl get ... -o yaml`` List can be passed as it is.
    """

    def __init__(self, objects: Iterable[Mapping[str, Any]]) -> None:
        self._index = _Index()
        projections = {kind: _project(source, SOURCES[source][1]) for kind, source in KINDS.items()}
        for doc in objects:
            project = projections.get(str(doc.get("kind") or ""))
            if project is not None:
                self._index.on_add(project(doc))

    def for_pod(self, pod: Pod) -> labels.Selector | None:
        """The union of the selectors that select ``pod``; None when nothing selects it."""
        return self._index.select(pod)
