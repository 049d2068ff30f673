"""Informers: keep a store of compact Pods and Nodes and tell the scheduler what changed.

Each informer owns a :class:`~custom_scheduler.kube.watch.Reflector`. It projects every JSON
object into the model once, keeps the last version per key, and calls ``on_add`` /
``on_update(old, new)`` / ``on_delete`` on its sink. After a re-list (410 Gone), ``replace``
diffs the new list against the store, so objects that vanished while the watch was down produce
deletes and nothing is lost.

Pods are listed with ``status.phase!=Succeeded,status.phase!=Failed`` as kube-scheduler does:
a pod that finishes leaves the watch's view and arrives here as a delete, freeing its resources.
"""

from __future__ import annotations

import gc
import threading
from collections.abc import Callable
from typing import Any, Generic, Protocol, TypeVar

import structlog

from custom_scheduler.kube.client import KubeClient
from custom_scheduler.kube.watch import Reflector
from custom_scheduler.model import Node, Pod, node_from_json, pod_from_json

log = structlog.get_logger("custom_scheduler.informers")

T = TypeVar("T")
T_contra = TypeVar("T_contra", contravariant=True)

POD_FIELD_SELECTOR = "status.phase!=Succeeded,status.phase!=Failed"


class Sink(Protocol[T_contra]):
    def on_add(self, obj: T_contra) -> None: ...

    def on_update(self, old: T_contra, new: T_contra) -> None: ...

    def on_delete(self, obj: T_contra) -> None: ...


class Informer(Generic[T]):
    def __init__(
        self,
        client: KubeClient,
        path: str,
        project: Callable[[dict[str, Any]], T],
        key: Callable[[T], str],
        sink: Sink[T],
        *,
        field_selector: str = "",
        name: str,
        metrics_relist: Callable[[str], None] | None = None,
        metrics_restart: Callable[[str], None] | None = None,
        read_timeout: float = 90.0,
    ) -> None:
        self._project: Callable[[dict[str, Any]], T] = project
        self._key: Callable[[T], str] = key
        self._sink: Sink[T] = sink
        self._lock = threading.Lock()
        self.store: dict[str, T] = {}
        self.name = name
        self.reflector = Reflector(
            client,
            path,
            self,
            field_selector=field_selector,
            name=name,
            on_relist=metrics_relist,
            on_restart=metrics_restart,
            read_timeout=read_timeout,
        )

    @property
    def synced(self) -> threading.Event:
        return self.reflector.synced

    def start(self) -> None:
        self.reflector.start()

    def stop(self) -> None:
        self.reflector.stop()

    # -- Handler protocol (called on the reflector thread) ----------------------------------------
    def replace(self, items: list[dict[str, Any]], resource_version: str) -> None:
        # The cyclic GC dominates parsing large lists; pause it for the projection.
        gc_was = gc.isenabled()
        gc.disable()
        try:
            fresh: dict[str, T] = {}
            for doc in items:
                try:
                    obj = self._project(doc)
                except (ValueError, TypeError, KeyError) as e:
                    log.warning("object_skipped", informer=self.name, error=str(e), name=_name(doc))
                    continue
                fresh[self._key(obj)] = obj
        finally:
            if gc_was:
                gc.enable()
        with self._lock:
            old_store = self.store
            self.store = fresh
        for k, old in old_store.items():
            if k not in fresh:
                self._sink.on_delete(old)
        for k, obj in fresh.items():
            prev = old_store.get(k)
            if prev is None:
                self._sink.on_add(obj)
            elif getattr(prev, "resource_version", None) != getattr(obj, "resource_version", None):
                self._sink.on_update(prev, obj)
        log.info("informer_listed", informer=self.name, items=len(fresh), resource_version=resource_version)

    def on_event(self, kind: str, doc: dict[str, Any]) -> None:
        try:
            obj = self._project(doc)
        except (ValueError, TypeError, KeyError) as e:
            log.warning("object_skipped", informer=self.name, error=str(e), name=_name(doc))
            return
        k = self._key(obj)
        with self._lock:
            prev = self.store.get(k)
            if kind == "DELETED":
                self.store.pop(k, None)
            else:
                self.store[k] = obj
        if kind == "DELETED":
            self._sink.on_delete(prev if prev is not None else obj)
        elif prev is None:
            self._sink.on_add(obj)
        else:
            self._sink.on_update(prev, obj)

    def get(self, key: str) -> T | None:
        with self._lock:
            return self.store.get(key)

    def list(self) -> list[T]:
        with self._lock:
            return list(self.store.values())


def _name(doc: dict[str, Any]) -> str:
    meta = doc.get("metadata") or {}
    return f"{meta.get('namespace', '')}/{meta.get('name', '')}"


def pod_informer(client: KubeClient, sink: Sink[Pod], **kw: Any) -> Informer[Pod]:
    return Informer(
        client,
        "/api/v1/pods",
        pod_from_json,
        lambda p: p.uid,
        sink,
        field_selector=POD_FIELD_SELECTOR,
        name="pods",
        **kw,
    )


def node_informer(client: KubeClient, sink: Sink[Node], **kw: Any) -> Informer[Node]:
    return Informer(client, "/api/v1/nodes", node_from_json, lambda n: n.name, sink, name="nodes", **kw)
