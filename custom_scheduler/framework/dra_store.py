"""The DynamicResources plugin's view of DRA objects: listers and the allocated-devices cache.

One :class:`DRAStore` per process (the daemon feeds it from its ResourceSlice, DeviceClass and
ResourceClaim informers), lent to plugins through ``Handle.dra``. It is shared rather than kept in
the plugin for the same reason as the VolumeStore: a config reload builds new plugins, and the
allocations in flight must survive it.

**Allocated devices** (upstream's ``allocatedDevices`` + ``inFlightAllocations`` + the claim
assume cache) are the union of

- the devices in every claim's ``status.allocation`` as the API has it,
- *assumed* claims: the claim PreBind wrote, recorded right after the API call returned, and used
  in place of the informer's copy until the watch brings that version (or a newer one) back, and
- *pending* allocations: what Reserve chose, keyed by claim UID, until PreBind wrote it (or
  Unreserve dropped it).

So the next cycle of a burst sees the devices Reserve gave to a pod that is still binding, and one
device is never handed out twice. A pending allocation does not expire with the claim's
resourceVersion (anyone may update the claim meanwhile); it lives exactly as long as the binding.
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import structlog

from custom_scheduler.api.dra import (
    Allocation,
    Candidate,
    DeviceClass,
    DeviceID,
    ResourceClaim,
    ResourceSlice,
    candidates_for_node,
)
from custom_scheduler.api.model import resource_version_number as _rv
from custom_scheduler.framework.listeners import notify

log = structlog.get_logger("custom_scheduler.api.dra")

SLICE, CLASS, CLAIM = "ResourceSlice", "DeviceClass", "ResourceClaim"
KINDS = (SLICE, CLASS, CLAIM)

Listener = Callable[[str, Any, Any], None]
"""``(kind, old, new)`` after a change (old None: add; new None: delete)."""


class DRAStore:
    """Thread-safe listers of slices, classes and claims, plus the allocated-devices cache."""

    def __init__(self) -> None:
        self._lock = threading.RLock()
        self._slices: dict[str, ResourceSlice] = {}
        self._by_node: dict[str, dict[str, ResourceSlice]] = {}
        self._shared: dict[str, ResourceSlice] = {}  # allNodes or nodeSelector slices
        self._classes: dict[str, DeviceClass] = {}
        self._claims: dict[str, ResourceClaim] = {}
        self._assumed: dict[str, ResourceClaim] = {}
        self._pending: dict[str, tuple[str, Allocation]] = {}  # claim uid -> (claim key, allocation)
        self._devices_of: dict[str, frozenset[DeviceID]] = {}  # source -> devices it holds
        self._in_use: Counter[DeviceID] = Counter()
        self._candidates: dict[str, tuple[Candidate, ...]] = {}  # node -> its own slices' devices
        self._listeners: list[Listener] = []

    # -- feeding ----------------------------------------------------------------------------------
    def add_listener(self, fn: Listener) -> None:
        self._listeners.append(fn)

    def put(self, kind: str, obj: Any) -> None:
        old: Any
        with self._lock:
            if kind == SLICE:
                old = self._slices.get(obj.name)
                self._unindex_slice(old)
                self._slices[obj.name] = obj
                if obj.node_name:
                    self._by_node.setdefault(obj.node_name, {})[obj.name] = obj
                    self._candidates.pop(obj.node_name, None)
                else:
                    self._shared[obj.name] = obj
            elif kind == CLASS:
                old = self._classes.get(obj.name)
                self._classes[obj.name] = obj
            else:
                old = self._claims.get(obj.key)
                self._claims[obj.key] = obj
                got = self._assumed.get(obj.key)
                if got is not None and (got.uid != obj.uid or _rv(obj.resource_version) >= _rv(got.resource_version)):
                    del self._assumed[obj.key]
                self._refresh_claim(obj.key)
        self._notify(kind, old, obj)

    def delete(self, kind: str, obj: Any) -> None:
        old: Any
        with self._lock:
            if kind == SLICE:
                old = self._slices.pop(obj.name, None)
                self._unindex_slice(old)
            elif kind == CLASS:
                old = self._classes.pop(obj.name, None)
            else:
                old = self._claims.pop(obj.key, None)
                self._assumed.pop(obj.key, None)
                self._refresh_claim(obj.key)
        self._notify(kind, old if old is not None else obj, None)

    def _unindex_slice(self, s: ResourceSlice | None) -> None:
        if s is None:
            return
        self._candidates.pop(s.node_name, None)
        self._shared.pop(s.name, None)
        on = self._by_node.get(s.node_name)
        if on is not None:
            on.pop(s.name, None)
            if not on:
                del self._by_node[s.node_name]

    def _set_devices(self, source: str, devices: frozenset[DeviceID]) -> None:
        old = self._devices_of.get(source, frozenset())
        if old == devices:
            return
        for d in old - devices:
            self._in_use[d] -= 1
            if self._in_use[d] <= 0:
                del self._in_use[d]
        for d in devices - old:
            self._in_use[d] += 1
        if devices:
            self._devices_of[source] = devices
        else:
            self._devices_of.pop(source, None)

    def _refresh_claim(self, key: str) -> None:
        claim = self._assumed.get(key) or self._claims.get(key)
        alloc = claim.allocation if claim is not None else None
        self._set_devices("claim:" + key, alloc.devices if alloc is not None else frozenset())

    def _notify(self, kind: str, old: Any, new: Any) -> None:
        notify(self._listeners, (kind, old, new), log, "dra_listener_failed", kind=kind)

    def load(self, kind: str, objs: Iterable[Any]) -> None:
        for o in objs:
            self.put(kind, o)

    # -- listers ----------------------------------------------------------------------------------
    def get_claim(self, namespace: str, name: str) -> ResourceClaim | None:
        """The claim as this scheduler knows it (PreBind's write wins until the watch has it)."""
        key = f"{namespace}/{name}"
        with self._lock:
            return self._assumed.get(key) or self._claims.get(key)

    def device_class(self, name: str) -> DeviceClass | None:
        with self._lock:
            return self._classes.get(name)

    def slices_for(self, node_name: str) -> list[ResourceSlice]:
        """Slices published for ``node_name`` plus every allNodes/nodeSelector slice (the caller
        checks which of those reach the node)."""
        with self._lock:
            return [*self._by_node.get(node_name, {}).values(), *self._shared.values()]

    def candidates(self, node_name: str, node_labels: Mapping[str, str]) -> Sequence[Candidate]:
        """``candidates_for_node`` over :meth:`slices_for`: the devices a pod on the node reaches.

        Filter asks this for every node of every pod, while slices change rarely: the devices of
        a node's own slices (``nodeName``) are kept per node until one of its slices changes.
        With any allNodes/nodeSelector slice the answer also depends on the node's labels and on
        pools spanning slices, so it is computed afresh (exactly as before)."""
        with self._lock:
            if self._shared:
                return candidates_for_node(self.slices_for(node_name), node_name, node_labels)
            got = self._candidates.get(node_name)
            if got is None:
                own = self._by_node.get(node_name)
                if not own:
                    return ()
                got = tuple(candidates_for_node(own.values(), node_name, node_labels))
                self._candidates[node_name] = got
            return got

    def has_slices(self) -> bool:
        with self._lock:
            return bool(self._slices)

    def objects(self, kind: str) -> list[Any]:
        with self._lock:
            src: dict[str, Any] = self._slices if kind == SLICE else self._classes if kind == CLASS else self._claims
            return list(src.values())

    def allocated_devices(self) -> frozenset[DeviceID]:
        """Every device held by an allocated, assumed or pending claim (a copy: one per cycle)."""
        with self._lock:
            return frozenset(self._in_use)

    # -- assume / pending -------------------------------------------------------------------------
    def pending_allocation(self, claim_uid: str) -> Allocation | None:
        with self._lock:
            got = self._pending.get(claim_uid)
            return got[1] if got is not None else None

    def signal_pending(self, claim: ResourceClaim, allocation: Allocation) -> bool:
        """Reserve's allocation for ``claim``; False when another pod's is already in flight, or
        when one of its devices got taken since Filter (never hand a device out twice)."""
        with self._lock:
            if claim.uid in self._pending:
                return False
            if any(d in self._in_use for d in allocation.devices):
                return False
            self._pending[claim.uid] = (claim.key, allocation)
            self._set_devices("pending:" + claim.uid, allocation.devices)
            return True

    def remove_pending(self, claim_uid: str) -> None:
        with self._lock:
            if self._pending.pop(claim_uid, None) is not None:
                self._set_devices("pending:" + claim_uid, frozenset())

    def assume_claim(self, claim: ResourceClaim) -> None:
        """Record the claim PreBind's API call returned, until the watch delivers that version."""
        with self._lock:
            api = self._claims.get(claim.key)
            if api is not None and _rv(api.resource_version) >= _rv(claim.resource_version):
                self._assumed.pop(claim.key, None)
            else:
                self._assumed[claim.key] = claim
            self._refresh_claim(claim.key)

    def assumed(self) -> tuple[list[str], list[str]]:
        """Keys of assumed claims and UIDs of pending allocations (tests: nothing left behind)."""
        with self._lock:
            return list(self._assumed), list(self._pending)
