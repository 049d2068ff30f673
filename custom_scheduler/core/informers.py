"""Informers: keep a store of compact Pods and Nodes and tell the scheduler what changed.

Each informer owns a :class:`~custom_scheduler.kube.watch.Reflector`. It projects every JSON
object into the model once, keeps the last version per key, and calls ``on_add`` /
``on_update(old, new)`` / ``on_delete`` on its sink. After a re-list (410 Gone), ``replace``
diffs the new list against the store, so objects that vanished while the watch was down produce
deletes and nothing is lost.

Bad input never stops an informer. An object the projection refuses (wrong types, invalid
quantities: :class:`~custom_scheduler.api.model.MalformedObject`, or any other exception) is skipped and
reported once per uid and resourceVersion (a re-list or a replayed event does not log it again),
and the watch moves past it; an exception from a sink is logged and the next event delivered. An
exception escaping here would end the reflector thread, or, as a ``ValueError``, make it restart
the watch from before the event and meet the same object again, forever.

Pods are listed with ``status.phase!=Succeeded,status.phase!=Failed`` as kube-scheduler does:
a pod that finishes leaves the watch's view and arrives here as a delete, freeing its resources.

Sinks: an informer calls anything with the three methods of :class:`Sink`. The one adapter this
package builds is :class:`CallbackSink`, three callables: the composition root points them at the
scheduler's handlers, :func:`store_sink` at a store's ``put``/``delete`` (the framework's stores know
nothing of informers), :func:`fan_out` feeds several sinks in order and :data:`NULL_SINK` ignores
everything (an informer kept only as a lister).
"""

from __future__ import annotations

import functools
import gc
import threading
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import Any, Generic, Protocol, TypeVar

import structlog

from custom_scheduler.api import dra, dra_devices, storage
from custom_scheduler.api import podgroup as gang
from custom_scheduler.api.model import Node, Pod, node_from_json, pod_from_json
from custom_scheduler.framework import dra_store as fdra
from custom_scheduler.framework import volumes
from custom_scheduler.framework.gang_store import GangStore
from custom_scheduler.kube import api_errors as kerrors
from custom_scheduler.kube import prefetch
from custom_scheduler.kube.client import KubeClient
from custom_scheduler.kube.watch import Reflector

log = structlog.get_logger("custom_scheduler.informers")

T = TypeVar("T")
T_contra = TypeVar("T_contra", contravariant=True)

#: The Pods the scheduler lists (defined where the daemon prefetches the same LIST).
POD_FIELD_SELECTOR = prefetch.POD_FIELD_SELECTOR


class Sink(Protocol[T_contra]):
    """What an informer tells: an object added, replaced (old, new) or deleted."""

    def on_add(self, obj: T_contra) -> None: ...

    def on_update(self, old: T_contra, new: T_contra) -> None: ...

    def on_delete(self, obj: T_contra) -> None: ...


@dataclass(frozen=True, slots=True)
class CallbackSink(Generic[T]):
    """A :class:`Sink` made of three callables: the one adapter between an informer and whatever
    it feeds, so a new consumer is a constructor call rather than another class."""

    on_add: Callable[[T], None]
    on_update: Callable[[T, T], None]
    on_delete: Callable[[T], None]


def _ignore(*objs: Any) -> None:
    return None


#: Drops every event: the sink of an informer kept only for its store (namespaces, PDBs).
NULL_SINK: CallbackSink[Any] = CallbackSink(_ignore, _ignore, _ignore)


def store_sink(put: Callable[[T], None], delete: Callable[[T], None]) -> CallbackSink[T]:
    """A sink over a store that keeps the latest version of each object: an add and an update
    both ``put`` the new version, a delete removes it."""

    def update(old: T, new: T) -> None:
        put(new)

    return CallbackSink(put, update, delete)


def fan_out(*sinks: Sink[T]) -> CallbackSink[T]:
    """One sink feeding ``sinks`` in order: the pod informer feeds the PodGroup member index
    first, so a new member's own PreEnqueue already counts it, then the scheduler. An exception
    from one stops the rest for that event, as the informer logs it and moves on."""

    def add(obj: T) -> None:
        for s in sinks:
            s.on_add(obj)

    def update(old: T, new: T) -> None:
        for s in sinks:
            s.on_update(old, new)

    def delete(obj: T) -> None:
        for s in sinks:
            s.on_delete(obj)

    return CallbackSink(add, update, delete)


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
        # (uid or namespace/name, resourceVersion) of objects already reported as skipped.
        self._reported: OrderedDict[tuple[str, str], None] = OrderedDict()
        self.skipped = 0  # every skip, reported or not (for tests and debugging)
        # Bumped on every change to the store: readers that keep something derived from many
        # objects (sums over namespace labels) know when to recompute.
        self.version = 0
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
                    fresh[self._key(obj)] = obj
                except Exception as e:
                    self._skip(doc, e)
        finally:
            if gc_was:
                gc.enable()
        with self._lock:
            old_store = self.store
            self.store = fresh
            self.version += 1
        for k, old in old_store.items():
            if k not in fresh:
                self._deliver("on_delete", self._sink.on_delete, old)
        for k, obj in fresh.items():
            prev = old_store.get(k)
            if prev is None:
                self._deliver("on_add", self._sink.on_add, obj)
            elif getattr(prev, "resource_version", None) != getattr(obj, "resource_version", None):
                self._deliver("on_update", self._sink.on_update, prev, obj)
        log.info("informer_listed", informer=self.name, items=len(fresh), resource_version=resource_version)

    def on_event(self, kind: str, doc: dict[str, Any]) -> None:
        try:
            obj = self._project(doc)
            k = self._key(obj)
        except Exception as e:
            self._skip(doc, e)
            if kind == "DELETED":
                self._delete_unparsable(doc)
            return
        with self._lock:
            prev = self.store.get(k)
            if kind == "DELETED":
                self.store.pop(k, None)
            else:
                self.store[k] = obj
            self.version += 1
        if kind == "DELETED":
            self._deliver("on_delete", self._sink.on_delete, prev if prev is not None else obj)
        elif prev is None:
            self._deliver("on_add", self._sink.on_add, obj)
        else:
            self._deliver("on_update", self._sink.on_update, prev, obj)

    def _skip(self, doc: Any, e: Exception) -> None:
        """Report an object that cannot be projected, once per (uid, resourceVersion)."""
        self.skipped += 1
        ident = _raw_identity(doc)
        with self._lock:
            if ident in self._reported:
                return
            self._reported[ident] = None
            if len(self._reported) > 4096:
                self._reported.popitem(last=False)
        log.warning(
            "object_skipped", informer=self.name, name=_name(doc), resource_version=ident[1], error=str(e)[:300]
        )

    def _delete_unparsable(self, doc: Any) -> None:
        """A DELETED event whose object no longer parses: drop the version we stored, found by
        the raw uid, name or namespace/name (whichever this informer keys by)."""
        meta = doc.get("metadata") if isinstance(doc, dict) else None
        if not isinstance(meta, dict):
            return
        ns, name, uid = (meta.get(f) for f in ("namespace", "name", "uid"))
        with self._lock:
            for k in (uid, name, f"{ns}/{name}"):
                if isinstance(k, str) and k in self.store:
                    prev = self.store.pop(k)
                    self.version += 1
                    break
            else:
                return
        self._deliver("on_delete", self._sink.on_delete, prev)

    def _deliver(self, handler: str, fn: Callable[..., None], *objs: T) -> None:
        """``fn(*objs)``; an exception is logged under the ``handler`` (``on_add``...) it came from."""
        try:
            fn(*objs)
        except Exception:
            log.exception("informer_handler_failed", informer=self.name, handler=handler)

    def get(self, key: str) -> T | None:
        with self._lock:
            return self.store.get(key)

    def list(self) -> list[T]:
        with self._lock:
            return list(self.store.values())


def _name(doc: Any) -> str:
    meta = doc.get("metadata") if isinstance(doc, dict) else None
    if not isinstance(meta, dict):
        return "?"
    return f"{meta.get('namespace') or ''}/{meta.get('name') or ''}"


def _raw_identity(doc: Any) -> tuple[str, str]:
    """(uid, or namespace/name when there is none; resourceVersion) of a raw object, for dedupe."""
    meta = doc.get("metadata") if isinstance(doc, dict) else None
    if not isinstance(meta, dict):
        return (repr(doc)[:200], "")
    uid = meta.get("uid")
    return (str(uid) if uid else _name(doc), str(meta.get("resourceVersion") or ""))


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


#: The storage objects the volume plugins read: (kind, list path, projection).
VOLUME_RESOURCES: tuple[tuple[str, str, Callable[[dict[str, Any]], Any]], ...] = (
    (volumes.PV, "/api/v1/persistentvolumes", storage.pv_from_json),
    (volumes.PVC, "/api/v1/persistentvolumeclaims", storage.pvc_from_json),
    (volumes.STORAGE_CLASS, "/apis/storage.k8s.io/v1/storageclasses", storage.storage_class_from_json),
    (volumes.CSI_NODE, "/apis/storage.k8s.io/v1/csinodes", storage.csinode_from_json),
    (volumes.CSI_DRIVER, "/apis/storage.k8s.io/v1/csidrivers", storage.csidriver_from_json),
    (volumes.CSI_CAPACITY, "/apis/storage.k8s.io/v1/csistoragecapacities", storage.csi_storage_capacity_from_json),
    (volumes.VOLUME_ATTACHMENT, "/apis/storage.k8s.io/v1/volumeattachments", storage.volume_attachment_from_json),
)


class KindStore(Protocol):
    """A store of several kinds fed by informers (the volume store, the DRA store)."""

    def put(self, kind: str, obj: Any) -> None: ...

    def delete(self, kind: str, obj: Any) -> None: ...


def store_informers(
    client: KubeClient,
    resources: tuple[tuple[str, str, Callable[[dict[str, Any]], Any]], ...],
    store: KindStore,
    kw: Callable[[str], dict[str, Any]],
    optional: frozenset[str] = frozenset(),
    **common: Any,
) -> list[Informer[Any]]:
    """One informer per (kind, list path, projection), each feeding that kind of ``store``;
    ``kw(resource)`` gives its metrics hooks. The resources named in ``optional`` may not be
    served (an older API server): each of those is an :class:`OptionalApiInformer`."""
    out: list[Informer[Any]] = []
    for kind, path, project in resources:
        resource = path.rsplit("/", 1)[1]
        cls = OptionalApiInformer if resource in optional else Informer
        out.append(
            cls(
                client,
                path,
                project,
                lambda o: f"{getattr(o, 'namespace', '')}/{o.name}",
                store_sink(partial(store.put, kind), partial(store.delete, kind)),
                name=resource,
                **common,
                **kw(resource),
            )
        )
    return out


def volume_informers(
    client: KubeClient, store: volumes.VolumeStore, kw: Callable[[str], dict[str, Any]], **common: Any
) -> list[Informer[Any]]:
    """One informer per storage kind, each feeding ``store``."""
    return store_informers(client, VOLUME_RESOURCES, store, kw, **common)


#: The DRA objects DynamicResources reads: (kind, list path, projection).
DRA_RESOURCES: tuple[tuple[str, str, Callable[[dict[str, Any]], Any]], ...] = (
    (fdra.SLICE, f"{dra.API}/resourceslices", dra.resource_slice_from_json),
    (fdra.CLASS, f"{dra.API}/deviceclasses", dra.device_class_from_json),
    (fdra.CLAIM, f"{dra.API}/resourceclaims", dra.resource_claim_from_json),
    # DRADeviceTaintRules (GA, on in 1.37): kube-scheduler's resourceslice tracker watches them and
    # patches their taints into the slices' devices.
    (fdra.TAINT_RULE, f"{dra.API}/devicetaintrules", dra_devices.device_taint_rule_from_json),
)


def dra_informers(
    client: KubeClient, store: fdra.DRAStore, kw: Callable[[str], dict[str, Any]], **common: Any
) -> list[Informer[Any]]:
    """One informer per DRA kind, each feeding ``store``. DeviceTaintRules are ``resource.k8s.io/v1``
    only since 1.37 (v1alpha3 before): on an older server there are none, and that is no reason
    to wait."""
    return store_informers(client, DRA_RESOURCES, store, kw, optional=frozenset({"devicetaintrules"}), **common)


# --- the optional PodGroup APIs -----------------------------------------------------------------


class OptionalApiInformer(Informer[Any]):
    """An informer for an API the server may not serve: the PodGroup CRD when scheduler-plugins'
    CRD is not installed, ``scheduling.k8s.io/v1beta1`` on a server before 1.37 or without the
    ``GenericWorkload`` gate. Until a probe LIST succeeds it counts as synced (empty is then the
    truth, and the daemon must not wait for an optional API), logs the absence once, and probes
    again every ``retry`` seconds, quietly, or at once when :meth:`nudge`d (a pod names a
    PodGroup of this API); ``on_absent`` / ``on_served`` report each answer. Once the API answers,
    the reflector starts as usual.
    """

    def __init__(
        self,
        *args: Any,
        retry: float = 30.0,
        on_served: Callable[[], None] | None = None,
        on_absent: Callable[[], None] | None = None,
        **kw: Any,
    ) -> None:
        super().__init__(*args, **kw)
        self._on_served = on_served
        self._on_absent = on_absent
        self._nudged = threading.Event()
        self._client = args[0]
        self._path = args[1]
        self._retry = retry
        self._ready = threading.Event()
        self._halt = threading.Event()
        self.absent = False

    @property
    def synced(self) -> threading.Event:
        return self._ready

    def start(self) -> None:
        threading.Thread(target=self._probe_loop, name=f"probe-{self.name}", daemon=True).start()

    def stop(self) -> None:
        self._halt.set()
        self._nudged.set()
        super().stop()

    def nudge(self) -> None:
        """Probe now instead of at the next retry (a pod names a PodGroup of this API)."""
        self._nudged.set()

    def _pause(self, seconds: float) -> None:
        self._nudged.wait(seconds)
        self._nudged.clear()

    def _probe_loop(self) -> None:
        logged = False
        while not self._halt.is_set():
            try:
                self._client.get(self._path, {"limit": 1}, timeout=(5.0, 15.0))
            except kerrors.ApiError as e:
                if e.status not in (403, 404):
                    log.warning("optional_api_probe_failed", informer=self.name, error=str(e)[:200])
                else:
                    self.absent = True
                    if not logged:
                        log.info("optional_api_absent", informer=self.name, path=self._path, status=e.status)
                        logged = True
                    self._ready.set()
                    if self._on_absent is not None:
                        self._on_absent()
                self._pause(self._retry)
                continue
            except kerrors.KubeError as e:
                log.warning("optional_api_probe_failed", informer=self.name, error=str(e)[:200])
                self._pause(min(self._retry, 5.0))
                continue
            if self.absent:
                log.info("optional_api_appeared", informer=self.name, path=self._path)
            self.absent = False
            if self._on_served is not None:
                self._on_served()
            self.reflector.start()
            while not self._halt.is_set() and not self.reflector.synced.wait(1.0):
                pass
            self._ready.set()
            return


#: The PodGroup APIs GangScheduling reads: (kind, list path, projection).
GANG_RESOURCES: tuple[tuple[str, str, Callable[[dict[str, Any]], Any]], ...] = (
    ("PodGroup", gang.NATIVE_PATH, gang.native_from_json),
    ("PodGroup.scheduling.x-k8s.io", gang.CRD_PATH, gang.crd_from_json),
)


def gang_informers(
    client: KubeClient,
    store: GangStore,
    kw: Callable[[str], dict[str, Any]],
    *,
    retry: float = 30.0,
    **common: Any,
) -> list[Informer[Any]]:
    """One optional informer per PodGroup API, each feeding ``store`` (names ``podgroups`` and
    ``podgroups.scheduling.x-k8s.io``, for logs and metrics)."""
    out: list[Informer[Any]] = []
    for _kind, path, project in GANG_RESOURCES:
        native = path == gang.NATIVE_PATH
        name = "podgroups" if native else "podgroups.scheduling.x-k8s.io"
        api: gang.Api = gang.NATIVE if native else gang.CRD
        informer = OptionalApiInformer(
            client,
            path,
            project,
            lambda g: f"{g.namespace}/{g.name}",
            store_sink(store.put, store.delete),
            name=name,
            retry=retry,
            on_served=functools.partial(store.api_served, api),
            on_absent=functools.partial(store.api_absent, api),
            **common,
            **kw(name),
        )
        store.probe_with(api, informer.nudge)
        out.append(informer)
    return out
