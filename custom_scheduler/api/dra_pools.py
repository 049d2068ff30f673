"""The devices a node reaches, pool by pool, as upstream's ``GatherPools`` sees them (1.37).

:func:`node_devices` groups the slices that reach a node by pool (driver, pool name), keeps each
pool's newest generation among them, and decides as ``structured/internal/incubating/
pools_incubating.go`` does:

- a pool whose slices reaching the node are all of it (``resourceSliceCount``) is complete;
- otherwise every slice of the pool in that generation is looked at: a newer generation elsewhere
  makes the pool obsolete (skipped), too few slices make it *incomplete* (no device is handed
  out; ``allocationMode: All`` fails with an error), enough make it complete, counting devices
  and counter sets of the slices the node does not reach;
- a complete pool is *invalid* (no device handed out; "invalid resource pools were encountered"
  when nothing fits) with duplicate device names, a duplicate counter set, or a device consuming
  a counter set or counter that does not exist.

DeviceTaintRules are applied here as the resourceslice tracker does (``applyPatches``): each rule's
taint is appended to the taints of every device its selector picks.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Mapping, Sequence
from decimal import Decimal
from typing import Any

from custom_scheduler.api import dra_devices as ddev
from custom_scheduler.api.dra import Candidate, Device, ResourceSlice

PoolKey = tuple[str, str]


class NodeDevices(tuple[Candidate, ...]):
    """The candidates of a node (devices of complete, valid pools, in pool, slice and device order),
    and the pools that hand out nothing here (``bad_pools``: incomplete or invalid).

    ``matched`` is the allocator's memo of which of these devices a pair of selector lists picks
    (it lives as long as this object, which the store replaces when the node's slices change)."""

    bad_pools: tuple[ddev.Pool, ...] = ()
    matched: dict[Any, Any]

    def __new__(cls, candidates: Iterable[Candidate], bad_pools: Sequence[ddev.Pool] = ()) -> NodeDevices:
        self = super().__new__(cls, candidates)
        self.bad_pools = tuple(bad_pools)
        self.matched = {}
        return self


def patch_taints(device: Device, driver: str, pool: str, rules: Sequence[ddev.DeviceTaintRule]) -> Device:
    """The device with the taints of every rule that picks it (the same object when none does)."""
    extra = tuple(r.taint for r in rules if r.applies(driver, pool, device.name))
    if not extra:
        return device
    return dataclasses.replace(device, taints=device.taints + extra, simple=False)


def _newest(reach: Iterable[ResourceSlice]) -> dict[PoolKey, list[ResourceSlice]]:
    """``addSlice``: per pool, the slices of the highest generation seen among ``reach``."""
    pools: dict[PoolKey, list[ResourceSlice]] = {}
    for s in reach:
        k = (s.driver, s.pool)
        got = pools.get(k)
        if got is None or s.generation > got[0].generation:
            pools[k] = [s]
        elif s.generation == got[0].generation:
            got.append(s)
    return pools


def _validate(slices: Sequence[ResourceSlice]) -> tuple[dict[str, dict[str, Decimal]], str]:
    """The pool's counter sets, and the reason it is invalid ("" when it is not)."""
    names: set[str] = set()
    counter_sets: dict[str, dict[str, Decimal]] = {}
    for s in slices:
        for cs, counters in s.shared_counters:
            if cs in counter_sets:
                return {}, f"duplicate counter set name {cs}"
            counter_sets[cs] = dict(counters)
    for s in slices:
        for d in s.devices:
            if d.name in names:
                return {}, f"duplicate device name {d.name}"
            names.add(d.name)
    for s in slices:
        for d in s.devices:
            for cs, counters in d.consumes_counters:
                have = counter_sets.get(cs)
                if have is None:
                    return {}, f"counter set {cs} not found"
                for name, _ in counters:
                    if name not in have:
                        return {}, f"counter {name} not found in counter set {cs}"
    return counter_sets, ""


def build_pool(key: PoolKey, slices: Sequence[ResourceSlice]) -> ddev.Pool:
    """A complete pool from all its slices (validated; counter consumers collected)."""
    counter_sets, invalid = _validate(slices)
    if invalid:
        return ddev.Pool(key[0], key[1], {}, {}, invalid=invalid)
    consumers = {d.name: d.consumes_counters for s in slices for d in s.devices if d.consumes_counters}
    return ddev.Pool(key[0], key[1], counter_sets, consumers)


def _pool_slices(
    key: PoolKey, reaching: list[ResourceSlice], pool_slices: Callable[[str, str], Iterable[ResourceSlice]]
) -> list[ResourceSlice] | None:
    """All slices of the pool when the node's view is complete or can be completed; [] when the
    pool is incomplete; None when a newer generation makes it obsolete (``checkSlicesInPool``)."""
    gen, count = reaching[0].generation, reaching[0].slice_count
    if len(reaching) == count:
        return reaching
    same = []
    for s in pool_slices(*key):
        if s.generation > gen:
            return None
        if s.generation == gen:
            same.append(s)
    return same if len(same) == count else []


def node_devices(
    reach: Iterable[ResourceSlice],
    pool_slices: Callable[[str, str], Iterable[ResourceSlice]],
    node_name: str,
    node_labels: Mapping[str, str],
    rules: Sequence[ddev.DeviceTaintRule] = (),
) -> NodeDevices:
    """``GatherPools`` for one node over the slices that may reach it (``reach``; those that do not
    are dropped), with ``pool_slices(driver, pool)`` giving every slice of a pool.

    Pools in pool order, except that those with a device carrying binding conditions come after
    all the others (upstream's order: the first-fit search then prefers devices usable at once to
    ones that make the pod wait in PreBind)."""
    out: list[Candidate] = []
    waiting: list[Candidate] = []
    bad: list[ddev.Pool] = []
    reaching = [s for s in reach if s.reaches(node_name, node_labels)]
    for key, slices in sorted(_newest(reaching).items()):
        full = _pool_slices(key, slices, pool_slices)
        if full is None:
            continue
        if not full:
            bad.append(ddev.Pool(key[0], key[1], {}, {}, incomplete=True))
            continue
        pool = build_pool(key, full)
        if pool.invalid:
            bad.append(pool)
            continue
        ref = pool if pool.counter_sets else None
        into = waiting if any(d.binding_conditions for s in slices for d in s.devices) else out
        for s in sorted(slices, key=lambda s: s.name):
            for d in s.devices:
                if s.device_reaches(d, node_name, node_labels):
                    dev = patch_taints(d, s.driver, s.pool, rules) if rules else d
                    into.append(Candidate((s.driver, s.pool, d.name), dev, s, ref))
    return NodeDevices(out + waiting, bad)


class AllocatedState(frozenset[tuple[str, str, str]]):
    """Upstream's ``AllocatedState`` for one cycle: the set is ``AllocatedDevices`` (devices held
    exclusively by an allocated, assumed or pending claim), ``shared`` the
    ``allowMultipleAllocations`` devices with at least one share and what all their shares consume
    together (``AllocatedSharedDeviceIDs`` + ``AggregatedCapacity``).

    A frozenset so that code asking only "is this device taken" keeps working unchanged."""

    shared: Mapping[tuple[str, str, str], Mapping[str, Decimal]] = {}

    def __new__(
        cls,
        devices: Iterable[tuple[str, str, str]] = (),
        shared: Mapping[tuple[str, str, str], Mapping[str, Decimal]] | None = None,
    ) -> AllocatedState:
        self = super().__new__(cls, devices)
        self.shared = shared or {}
        return self

    def allocated(self, device: tuple[str, str, str]) -> bool:
        """``IsDeviceAllocated``: held exclusively or shared (its counters are consumed)."""
        return device in self or device in self.shared
