"""The volume plugins' view of storage objects: listers, the volume assume cache, binding waits.

One :class:`VolumeStore` per process (the daemon feeds it from its informers; ``explain`` and
``simulate`` fill it from a snapshot file), lent to plugins through ``Handle.volumes``. Why one
shared object rather than state inside VolumeBinding: a config reload builds new plugin
instances, and what has been assumed, and the PreBinds still waiting, must survive it.

**Assume cache** (kube-scheduler's ``PVAssumeCache`` / ``PVCAssumeCache``). Reserve records the
PV with its new claimRef, and the claim with its selected-node annotation, as *assumed*; readers
(:meth:`get_pv`, :meth:`pvs_of_class`, :meth:`get_pvc`) see the assumed version, so the next
scheduling cycle of a burst no longer finds that PV Available and never gives it to a second pod.
An assumed object is valid only while the informer's copy has the resourceVersion it was assumed
from: the first newer version from the watch (our own update coming back, or anyone else's)
replaces it. :meth:`restore_pv` / :meth:`restore_pvc` drop an assumption (Unreserve, a failed
PreBind). ``*_api`` readers return the informer's copy, which PreBind's completion check needs.

**Binding waits.** After PreBind's API updates, the PV controller (and a provisioner) finish the
binding asynchronously. Instead of parking a binder thread per pod and polling, as upstream's
goroutines do, :meth:`wait_for` registers a check and returns a Future. One waiter thread re-runs
the pending checks whenever a PV or PVC event arrives (and once a second, for timeouts and for
deleted pods), and completes each Future with SUCCESS or an ERROR status. So 50 pods waiting for
their volumes cost 50 small records, not 50 of the binding pool's threads.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any, TypeVar, cast

import structlog

from custom_scheduler.api.storage import (
    CSIDriver,
    CSINode,
    CSIStorageCapacity,
    PersistentVolume,
    PersistentVolumeClaim,
    StorageClass,
    VolumeAttachment,
)
from custom_scheduler.framework.listeners import notify
from custom_scheduler.framework.types import SUCCESS, Status

log = structlog.get_logger("custom_scheduler.volumes")

T = TypeVar("T")

#: How often pending waits are re-checked without an event (upstream polls every second).
SWEEP_INTERVAL = 1.0

Listener = Callable[[str, Any, Any], None]
"""``(kind, old, new)`` after a change: kind is one of :data:`KINDS`; old is None for an add and
new is None for a delete."""

PV, PVC, STORAGE_CLASS, CSI_NODE, CSI_DRIVER, CSI_CAPACITY, VOLUME_ATTACHMENT = (
    "PersistentVolume",
    "PersistentVolumeClaim",
    "StorageClass",
    "CSINode",
    "CSIDriver",
    "CSIStorageCapacity",
    "VolumeAttachment",
)
KINDS = (PV, PVC, STORAGE_CLASS, CSI_NODE, CSI_DRIVER, CSI_CAPACITY, VOLUME_ATTACHMENT)


class BindingFailed(Exception):
    """A wait's check found the binding cannot complete (claimRef reset, provisioning failed...)."""


@dataclass(slots=True)
class _Wait:
    check: Callable[[], bool]
    deadline: float
    future: Future[Status]
    what: str


def _key(obj: Any) -> str:
    ns = getattr(obj, "namespace", "")
    return f"{ns}/{obj.name}" if ns else str(obj.name)


class VolumeStore:
    """Thread-safe listers of the storage objects plus the assume cache and the binding waiter."""

    def __init__(self, *, clock: Callable[[], float] = time.monotonic) -> None:
        self._lock = threading.RLock()
        self._objs: dict[str, dict[str, Any]] = {k: {} for k in KINDS}
        self._pvs_by_class: dict[str, dict[str, PersistentVolume]] = {}
        # NodeVolumeLimits asks for one node's attachments per Filter call (upstream's
        # spec.nodeName indexer), so they are indexed rather than scanned.
        self._vas_by_node: dict[str, dict[str, VolumeAttachment]] = {}
        # The assume cache: kind (PV, PVC) -> key -> the assumed object.
        self._assumed: dict[str, dict[str, Any]] = {PV: {}, PVC: {}}
        self._listeners: list[Listener] = []
        self._clock = clock
        self._waits: dict[int, _Wait] = {}
        self._wait_seq = 0
        self._wake = threading.Condition(self._lock)
        self._poked = False
        self._waiter: threading.Thread | None = None
        self._closed = False
        #: Whether the pod with this UID still exists (the daemon wires its pod informer in).
        self.pod_exists: Callable[[str], bool] = lambda uid: True
        #: A node's labels by name, for PreBind's node-affinity re-check (None: unknown node).
        self.node_labels: Callable[[str], Mapping[str, str] | None] = lambda name: None

    # -- feeding (informer threads, or a snapshot loader) -----------------------------------------
    def add_listener(self, fn: Listener) -> None:
        self._listeners.append(fn)

    def put(self, kind: str, obj: Any) -> None:
        """Add or replace ``obj`` (a struct of :mod:`custom_scheduler.api.storage`) of ``kind``."""
        key = _key(obj)
        with self._lock:
            old = self._objs[kind].get(key)
            self._objs[kind][key] = obj
            if kind == PV:
                if old is not None:
                    self._pvs_by_class.get(old.storage_class, {}).pop(key, None)
                self._pvs_by_class.setdefault(obj.storage_class, {})[key] = obj
                self._expire(self._assumed[PV], key, obj)
            elif kind == PVC:
                self._expire(self._assumed[PVC], key, obj)
            elif kind == VOLUME_ATTACHMENT:
                if old is not None:
                    self._vas_by_node.get(old.node_name, {}).pop(key, None)
                self._vas_by_node.setdefault(obj.node_name, {})[key] = obj
            self._poke_locked()
        self._notify(kind, old, obj)

    def delete(self, kind: str, obj: Any) -> None:
        key = _key(obj)
        with self._lock:
            old = self._objs[kind].pop(key, None)
            if kind == PV:
                self._pvs_by_class.get(obj.storage_class, {}).pop(key, None)
                self._assumed[PV].pop(key, None)
            elif kind == PVC:
                self._assumed[PVC].pop(key, None)
            elif kind == VOLUME_ATTACHMENT:
                self._vas_by_node.get((old or obj).node_name, {}).pop(key, None)
            self._poke_locked()
        self._notify(kind, old if old is not None else obj, None)

    def _notify(self, kind: str, old: Any, new: Any) -> None:
        notify(self._listeners, (kind, old, new), log, "volume_listener_failed", kind=kind)

    @staticmethod
    def _expire(assumed: dict[str, Any], key: str, api_obj: Any) -> None:
        got = assumed.get(key)
        if got is not None and got.resource_version != api_obj.resource_version:
            del assumed[key]

    # -- listers ----------------------------------------------------------------------------------
    def get_pv(self, name: str) -> PersistentVolume | None:
        """The PV as this scheduler assumes it (an assumed claimRef wins over the API's copy)."""
        return self._read(PV, name, PersistentVolume, assumed=True)

    def get_pv_api(self, name: str) -> PersistentVolume | None:
        return self._read(PV, name, PersistentVolume)

    def pvs_of_class(self, storage_class: str) -> list[PersistentVolume]:
        """Every PV of ``storage_class``, assumed versions in place of the API's."""
        with self._lock:
            return [self._current(PV, name, pv) for name, pv in self._pvs_by_class.get(storage_class, {}).items()]

    def get_pvc(self, namespace: str, name: str) -> PersistentVolumeClaim | None:
        """The claim as this scheduler assumes it (an assumed selected node wins over the API's)."""
        return self._read(PVC, f"{namespace}/{name}", PersistentVolumeClaim, assumed=True)

    def get_pvc_api(self, namespace: str, name: str) -> PersistentVolumeClaim | None:
        return self._read(PVC, f"{namespace}/{name}", PersistentVolumeClaim)

    def storage_class(self, name: str) -> StorageClass | None:
        return self._read(STORAGE_CLASS, name, StorageClass)

    def csinode(self, name: str) -> CSINode | None:
        return self._read(CSI_NODE, name, CSINode)

    def csidriver(self, name: str) -> CSIDriver | None:
        return self._read(CSI_DRIVER, name, CSIDriver)

    def volume_attachments_on(self, node_name: str) -> list[VolumeAttachment]:
        """The VolumeAttachments whose ``spec.nodeName`` is ``node_name``."""
        with self._lock:
            return list(self._vas_by_node.get(node_name, {}).values())

    def capacities(self) -> list[CSIStorageCapacity]:
        with self._lock:
            return list(self._objs[CSI_CAPACITY].values())

    def objects(self, kind: str) -> list[Any]:
        """Every object of ``kind`` as the API has it (snapshots and tests)."""
        with self._lock:
            return list(self._objs[kind].values())

    def _read(self, kind: str, key: str, cls: type[T], *, assumed: bool = False) -> T | None:
        """Object ``key`` of ``kind``: the API's copy, or with ``assumed`` what readers see
        (:meth:`_current`). The store keeps every kind in one table of Any; ``cls`` types the
        answer for the caller."""
        with self._lock:
            api = self._objs[kind].get(key)
            return cast("T | None", self._current(kind, key, api) if assumed else api)

    # -- assume cache -----------------------------------------------------------------------------
    def assume_pv(self, pv: PersistentVolume) -> None:
        """Record ``pv`` (a modified copy of the API's) as assumed. Raises ValueError when the
        API's copy moved on since ``pv`` was read (upstream's "out of sync")."""
        self._assume(PV, pv.name, pv)

    def restore_pv(self, pv: PersistentVolume) -> None:
        """Drop the assumption made with ``pv`` (a later assumption of the same PV stays)."""
        self._restore(PV, pv.name, pv)

    def assume_pvc(self, pvc: PersistentVolumeClaim) -> None:
        """As :meth:`assume_pv`, for a claim."""
        self._assume(PVC, pvc.key, pvc)

    def restore_pvc(self, pvc: PersistentVolumeClaim) -> None:
        """As :meth:`restore_pv`, for a claim."""
        self._restore(PVC, pvc.key, pvc)

    def assumed(self) -> tuple[list[str], list[str]]:
        """Names of the assumed PVs and keys of the assumed PVCs (tests check nothing is left)."""
        with self._lock:
            pvs = [n for n, pv in self._assumed[PV].items() if self._still_assumed(PV, n, pv)]
            pvcs = [k for k, c in self._assumed[PVC].items() if self._still_assumed(PVC, k, c)]
            return pvs, pvcs

    def _assume(self, kind: str, key: str, obj: Any) -> None:
        with self._lock:
            api = self._objs[kind].get(key)
            if api is None:
                raise ValueError(f'{kind.lower()} "{key}" not found')
            if api.resource_version != obj.resource_version:
                raise ValueError(
                    f'"{key}" is out of sync (stored: {api.resource_version}, assume: {obj.resource_version})'
                )
            self._assumed[kind][key] = obj

    def _restore(self, kind: str, key: str, obj: Any) -> None:
        with self._lock:
            got = self._assumed[kind].get(key)
            if got is not None and got.resource_version == obj.resource_version:
                del self._assumed[kind][key]

    def _current(self, kind: str, key: str, api: Any) -> Any:
        """What readers see of ``key``: its assumed version while that was assumed from the API's
        copy ``api`` (the informer has not moved on), else ``api``. Under the lock."""
        got = self._assumed[kind].get(key)
        if api is not None and got is not None and got.resource_version == api.resource_version:
            return got
        return api

    def _still_assumed(self, kind: str, key: str, obj: Any) -> bool:
        api = self._objs[kind].get(key)
        return api is not None and api.resource_version == obj.resource_version

    # -- binding waits ----------------------------------------------------------------------------
    def wait_for(self, check: Callable[[], bool], timeout: float, *, what: str = "") -> Future[Status]:
        """A Future completed with SUCCESS once ``check()`` returns True, or with an ERROR status
        when it raises (:class:`BindingFailed` or anything else) or ``timeout`` seconds pass.

        ``check`` runs on the waiter thread, first right away and then after every PV/PVC event
        and every :data:`SWEEP_INTERVAL`; it must only read this store (no I/O)."""
        fut: Future[Status] = Future()
        fut.set_running_or_notify_cancel()
        with self._lock:
            if self._closed:
                fut.set_result(Status.as_error("scheduler is shutting down"))
                return fut
            self._wait_seq += 1
            self._waits[self._wait_seq] = _Wait(check, self._clock() + max(0.0, timeout), fut, what)
            self._poke_locked()
            if self._waiter is None:
                self._waiter = threading.Thread(target=self._run_waiter, name="volume-binding-waiter", daemon=True)
                self._waiter.start()
        return fut

    def pending_waits(self) -> int:
        with self._lock:
            return len(self._waits)

    def _poke_locked(self) -> None:
        if self._waits:
            self._poked = True
            self._wake.notify()

    def check_waits(self) -> None:
        """Run every pending check once (the waiter thread's step; tests call it directly)."""
        with self._lock:
            if self._closed:
                return
            waits = list(self._waits.items())
            self._poked = False
        now = self._clock()
        for wid, w in waits:
            result: Status | None
            try:
                result = SUCCESS if w.check() else None
            except BindingFailed as e:
                result = Status.as_error(str(e))
            except Exception as e:
                result = Status.from_exception(e)
            if result is None and now >= w.deadline:
                result = Status.as_error("binding volumes: context deadline exceeded")
            if result is not None:
                with self._lock:
                    self._waits.pop(wid, None)
                if not result.is_success:
                    log.info("volume_binding_failed", what=w.what, reason=result.message)
                # Cannot fail in practice: the future is RUNNING (so not cancellable) and is set once,
                # its wait having left _waits under the lock; a done-callback's error is logged by
                # concurrent.futures itself. Suppressed so a surprise cannot stop the other waits.
                with contextlib.suppress(Exception):
                    w.future.set_result(result)

    def _run_waiter(self) -> None:
        while not self._closed:
            with self._lock:
                if not self._poked:
                    self._wake.wait(SWEEP_INTERVAL)
            try:
                self.check_waits()
            except Exception:
                log.exception("volume_waiter_crashed")

    def close(self) -> None:
        """Fail every pending wait (shutdown) and stop the waiter thread."""
        with self._lock:
            self._closed = True
            waits = list(self._waits.values())
            self._waits.clear()
            self._wake.notify_all()
        for w in waits:
            # As in check_waits: it cannot fail in practice, and must not stop the shutdown.
            with contextlib.suppress(Exception):
                w.future.set_result(Status.as_error("scheduler is shutting down"))

    # -- offline ----------------------------------------------------------------------------------
    def load(self, kind: str, objs: Iterable[Any]) -> None:
        for o in objs:
            self.put(kind, o)
