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

What a claim holds is upstream's ``foreachAllocatedDevice``: results with admin access hold
nothing; a result with a ``shareID`` is one share of a shareable device (its ``consumedCapacity``
adds to the device's aggregated capacity); every other result holds its device exclusively. Both
feed :meth:`DRAStore.allocated_devices` (an ``AllocatedState``), and so the counters of partitionable
devices: a device held or shared consumes its pool's counters. Reserve's :meth:`signal_pending`
checks again, under the lock, that exclusive devices are still free, that shares still fit their
device's capacity and that counters still cover every device, so two pods never over-commit.

DeviceTaintRules (resource.k8s.io/v1, ``DRADeviceTaintRules`` GA and on in 1.37; kube-scheduler reads
them through its resourceslice tracker) are kept here and patched into the devices the
allocator sees (:meth:`DRAStore.candidates`).
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from decimal import Decimal
from typing import Any

import structlog

from custom_scheduler.api import dra_devices as ddev
from custom_scheduler.api import dra_extended, dra_pools
from custom_scheduler.api.dra import (
    Allocation,
    Candidate,
    Device,
    DeviceClass,
    DeviceID,
    ResourceClaim,
    ResourceSlice,
)
from custom_scheduler.api.model import resource_version_number as _rv
from custom_scheduler.framework.listeners import notify

log = structlog.get_logger("custom_scheduler.api.dra")

SLICE, CLASS, CLAIM, TAINT_RULE = "ResourceSlice", "DeviceClass", "ResourceClaim", "DeviceTaintRule"
KINDS = (SLICE, CLASS, CLAIM, TAINT_RULE)

Share = tuple[DeviceID, tuple[tuple[str, Decimal], ...]]
"""One share of a shareable device: the device and the capacity it consumes."""
Holding = tuple[frozenset[DeviceID], tuple[Share, ...]]
_NOTHING: Holding = (frozenset(), ())


def _holding(alloc: Allocation | None) -> Holding:
    if alloc is None:
        return _NOTHING
    shares = tuple((r.id, tuple(sorted(r.consumed_values().items()))) for r in alloc.shares)
    return alloc.devices, shares


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
        self._held: dict[str, Holding] = {}  # source -> devices it holds, shares it has
        self._in_use: Counter[DeviceID] = Counter()
        self._shares: Counter[DeviceID] = Counter()  # shareable device -> number of shares
        self._share_cap: dict[DeviceID, dict[str, Decimal]] = {}  # ... -> capacity they consume
        self._pools: dict[tuple[str, str], dict[str, ResourceSlice]] = {}  # every slice, by pool
        self._counter_pools: Counter[tuple[str, str]] = Counter()  # pools with sharedCounters slices
        self._rules: dict[str, ddev.DeviceTaintRule] = {}
        self._candidates: dict[str, dra_pools.NodeDevices] = {}  # node -> its own slices' devices
        self._listeners: list[Listener] = []
        self._extended: dict[str, DeviceClass] | None = None  # resource name -> class; None: rebuild

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
                self._index_pool(obj)
                if obj.node_name:
                    self._by_node.setdefault(obj.node_name, {})[obj.name] = obj
                    self._candidates.pop(obj.node_name, None)
                else:
                    self._shared[obj.name] = obj
            elif kind == TAINT_RULE:
                old = self._rules.get(obj.name)
                self._rules[obj.name] = obj
                self._candidates.clear()
            elif kind == CLASS:
                old = self._classes.get(obj.name)
                self._classes[obj.name] = obj
                self._extended = None
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
            elif kind == TAINT_RULE:
                old = self._rules.pop(obj.name, None)
                self._candidates.clear()
            elif kind == CLASS:
                old = self._classes.pop(obj.name, None)
                self._extended = None
            else:
                old = self._claims.pop(obj.key, None)
                self._assumed.pop(obj.key, None)
                self._refresh_claim(obj.key)
        self._notify(kind, old if old is not None else obj, None)

    def _index_pool(self, s: ResourceSlice) -> None:
        """Index the slice by pool; a pool's slices decide each other's completeness and counters,
        so every node with a slice of the pool recomputes its devices."""
        k = (s.driver, s.pool)
        self._pools.setdefault(k, {})[s.name] = s
        if s.shared_counters:
            self._counter_pools[k] += 1
        for other in self._pools[k].values():
            self._candidates.pop(other.node_name, None)

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
        k = (s.driver, s.pool)
        pool = self._pools.get(k, {})
        pool.pop(s.name, None)
        for other in pool.values():
            self._candidates.pop(other.node_name, None)
        if not pool:
            self._pools.pop(k, None)
        if s.shared_counters:
            self._counter_pools[k] -= 1
            if self._counter_pools[k] <= 0:
                del self._counter_pools[k]

    def _set_holding(self, source: str, new: Holding) -> None:
        old = self._held.get(source, _NOTHING)
        if old == new:
            return
        for d in old[0] - new[0]:
            self._in_use[d] -= 1
            if self._in_use[d] <= 0:
                del self._in_use[d]
        for d in new[0] - old[0]:
            self._in_use[d] += 1
        for share, sign in [*((s, -1) for s in old[1]), *((s, 1) for s in new[1])]:
            self._add_share(share, sign)
        if new[0] or new[1]:
            self._held[source] = new
        else:
            self._held.pop(source, None)

    def _add_share(self, share: Share, sign: int) -> None:
        device, consumed = share
        self._shares[device] += sign
        if self._shares[device] <= 0:
            del self._shares[device]
            self._share_cap.pop(device, None)
            return
        cap = self._share_cap.setdefault(device, {})
        for name, amount in consumed:
            cap[name] = cap.get(name, Decimal(0)) + sign * amount

    def _refresh_claim(self, key: str) -> None:
        claim = self._assumed.get(key) or self._claims.get(key)
        self._set_holding("claim:" + key, _holding(claim.allocation if claim is not None else None))

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

    def extended_resource_class(self, resource: str) -> DeviceClass | None:
        """The DeviceClass backing extended resource ``resource`` (its ``extendedResourceName`` or
        implicit ``deviceclass.resource.kubernetes.io/<name>``), or None: upstream's
        ``DeviceClassResolver``. The mapping is rebuilt after a class changes."""
        with self._lock:
            if self._extended is None:
                self._extended = dra_extended.class_mapping(self._classes.values())
            return self._extended.get(resource)

    def extended_claim_for(self, namespace: str, pod_name: str, pod_uid: str) -> ResourceClaim | None:
        """``findExtendedResourceClaim``: the claim an earlier attempt made for the pod's extended
        resources (annotated, controlled by the pod), or None."""
        with self._lock:
            claims = [*self._assumed.values(), *self._claims.values()]
        for c in claims:
            meta = c.raw.get("metadata") or {}
            if c.namespace != namespace or (meta.get("annotations") or {}).get(dra_extended.CLAIM_ANNOTATION) != "true":
                continue
            for o in meta.get("ownerReferences") or ():
                if o.get("name") == pod_name and o.get("uid") == pod_uid and o.get("controller"):
                    return c
        return None

    def forget_claim(self, key: str) -> None:
        """Drop an assumed claim that was deleted before the watch saw it (the special claim an
        Unreserve deletes), so it holds no devices in the meantime."""
        with self._lock:
            if self._assumed.pop(key, None) is not None:
                self._refresh_claim(key)

    def slices_for(self, node_name: str) -> list[ResourceSlice]:
        """Slices published for ``node_name`` plus every allNodes/nodeSelector slice (the caller
        checks which of those reach the node)."""
        with self._lock:
            return [*self._by_node.get(node_name, {}).values(), *self._shared.values()]

    def candidates(self, node_name: str, node_labels: Mapping[str, str]) -> Sequence[Candidate]:
        """``node_devices`` over :meth:`slices_for`: the devices a pod on the node reaches, pool by
        pool (with DeviceTaintRules' taints patched in), and its pools that hand out nothing.

        Filter asks this for every node of every pod, while slices change rarely: the devices of
        a node's own slices (``nodeName``) are kept per node until a slice of one of its pools or
        a taint rule changes. With any allNodes/nodeSelector slice the answer also depends on the
        node's labels, so it is computed afresh."""
        with self._lock:
            if self._shared:
                return dra_pools.node_devices(
                    self.slices_for(node_name), self._pool_slices, node_name, node_labels, tuple(self._rules.values())
                )
            got = self._candidates.get(node_name)
            if got is None:
                own = self._by_node.get(node_name)
                if not own:
                    return ()
                rules = tuple(self._rules.values())
                got = dra_pools.node_devices(own.values(), self._pool_slices, node_name, node_labels, rules)
                self._candidates[node_name] = got
            return got

    def _pool_slices(self, driver: str, pool: str) -> list[ResourceSlice]:
        return list(self._pools.get((driver, pool), {}).values())

    def has_slices(self) -> bool:
        with self._lock:
            return bool(self._slices)

    def objects(self, kind: str) -> list[Any]:
        with self._lock:
            by_kind: dict[str, dict[str, Any]] = {SLICE: self._slices, CLASS: self._classes, TAINT_RULE: self._rules}
            return list(by_kind.get(kind, self._claims).values())

    def allocated_devices(self) -> frozenset[DeviceID]:
        """Every device held exclusively by an allocated, assumed or pending claim (a copy: one per
        cycle). It is the :meth:`allocated_state`, whose shared devices the allocator also reads."""
        return self.allocated_state()

    def allocated_state(self) -> dra_pools.AllocatedState:
        """The exclusively held devices and every shared device with what its shares consume."""
        with self._lock:
            shared = {d: dict(self._share_cap.get(d, {})) for d in self._shares}
            return dra_pools.AllocatedState(self._in_use, shared)

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
            if any(d in self._in_use or d in self._shares for d in allocation.devices):
                return False
            if not self._shares_fit(allocation) or not self._counters_fit(allocation):
                return False
            self._pending[claim.uid] = (claim.key, allocation)
            self._set_holding("pending:" + claim.uid, _holding(allocation))
            return True

    def remove_pending(self, claim_uid: str) -> None:
        with self._lock:
            if self._pending.pop(claim_uid, None) is not None:
                self._set_holding("pending:" + claim_uid, _NOTHING)

    # -- re-checks under the lock (Reserve) ----------------------------------------------------------
    def _device(self, d: DeviceID) -> tuple[Device, ResourceSlice] | None:
        """The device as the newest generation of its pool publishes it."""
        slices = self._pools.get((d[0], d[1]), {}).values()
        newest = max((s.generation for s in slices), default=0)
        for s in slices:
            if s.generation == newest:
                for dev in s.devices:
                    if dev.name == d[2]:
                        return dev, s
        return None

    def _shares_fit(self, allocation: Allocation) -> bool:
        """Every share still fits its device's capacity on top of the shares already held."""
        extra: dict[DeviceID, dict[str, Decimal]] = {}
        for r in allocation.shares:
            into = extra.setdefault(r.id, {})
            for name, v in r.consumed_values().items():
                into[name] = into.get(name, Decimal(0)) + v
        for d, adds in extra.items():
            found = self._device(d)
            if found is None or not found[0].allow_multiple:
                return False
            held = self._share_cap.get(d, {})
            for name, cap in found[0].capacity.items():
                if held.get(name, Decimal(0)) + adds.get(name, Decimal(0)) > cap.value.value:
                    return False
        return True

    def _counters_fit(self, allocation: Allocation) -> bool:
        """Counters of every pool the allocation's new devices draw on still cover all devices."""
        new = {r.id for r in allocation.results if not r.admin_access and r.id not in self._shares}
        for key in {(d[0], d[1]) for d in new} & self._counter_pools.keys():
            pool = dra_pools.build_pool(key, self._newest_slices(key))
            if pool.invalid:
                return False
            left = pool.available(self._held_in(key))
            for d in new:
                if (d[0], d[1]) == key:
                    for cs, counters in pool.consumers.get(d[2], ()):
                        for name, amount in counters:
                            left[cs][name] -= amount
            if any(v < 0 for counters in left.values() for v in counters.values()):
                return False
        return True

    def _held_in(self, key: tuple[str, str]) -> Callable[[str], bool]:
        """Whether a device of pool ``key`` (by name) is held or shared (consumes its counters)."""

        def held(name: str) -> bool:
            d = (key[0], key[1], name)
            return d in self._in_use or d in self._shares

        return held

    def _newest_slices(self, key: tuple[str, str]) -> list[ResourceSlice]:
        slices = list(self._pools.get(key, {}).values())
        newest = max((s.generation for s in slices), default=0)
        return [s for s in slices if s.generation == newest]

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
