"""Which DRA devices are accelerators, for AcceleratorIsolation.

Kept apart from the plugin (:mod:`custom_scheduler.plugins.accelerators`) because it is a rule of
its own over the DRA objects: a device is an accelerator device when its ResourceSlice's driver
matches ``draDrivers`` (a name, or a prefix ending in ``*``); a DeviceClass is an accelerator class
when its name matches ``draDeviceClasses`` or ``draDrivers``, or one of its CEL selectors compares
``device.driver`` with a matching driver name. Only devices published for a node itself
(``spec.nodeName``) make it an accelerator node. Verdicts are cached (drivers by name, classes by
resourceVersion): the plugin asks for every node and pod of every cycle.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence

from custom_scheduler.api import dra
from custom_scheduler.api.model import Pod
from custom_scheduler.framework.dra_store import DRAStore
from custom_scheduler.framework.types import MAX_NODE_SCORE, MIN_NODE_SCORE

DRA_ALL = 1 << 30
"""Requested device count standing for ``allocationMode: All`` (every device: the node fills up)."""


def name_matches(name: str, patterns: Iterable[str]) -> bool:
    """Whether ``name`` equals one of ``patterns`` or starts with one's stem (a trailing ``*``)."""
    for pattern in patterns:
        if pattern.endswith("*"):
            if name.startswith(pattern[:-1]):
                return True
        elif name == pattern:
            return True
    return False


_DRIVER_EQ = re.compile(r"""device\.driver\s*==\s*["']([^"']+)["']|["']([^"']+)["']\s*==\s*device\.driver""")


class DRAAccelerators:
    """Which DRA drivers and DeviceClasses are accelerators (the ``draDrivers`` and
    ``draDeviceClasses`` rule), with the per-class verdict cached by resourceVersion: a class is
    looked at once, not once per pod and cycle."""

    def __init__(self, drivers: Sequence[str], classes: Sequence[str] = ()) -> None:
        self.drivers = tuple(drivers)
        self.classes = tuple(classes)
        self._driver_cache: dict[str, bool] = {}
        self._class_cache: dict[tuple[str, str], bool] = {}

    @property
    def enabled(self) -> bool:
        return bool(self.drivers or self.classes)

    def driver(self, name: str) -> bool:
        got = self._driver_cache.get(name)
        if got is None:
            got = self._driver_cache[name] = name_matches(name, self.drivers)
        return got

    def device_class(self, cls: dra.DeviceClass) -> bool:
        key = (cls.name, cls.resource_version)
        got = self._class_cache.get(key)
        if got is None:
            got = name_matches(cls.name, self.classes) or name_matches(cls.name, self.drivers)
            if not got:
                found = (m.group(1) or m.group(2) for e in cls.selectors for m in _DRIVER_EQ.finditer(e))
                got = any(self.driver(d) for d in found)
            if len(self._class_cache) > 10_000:
                self._class_cache.clear()
            self._class_cache[key] = got
        return got

    def node_devices(self, store: DRAStore, node_name: str) -> list[dra.DeviceID]:
        """The accelerator devices published for this node itself (``spec.nodeName`` slices, newest
        pool generation); network-attached devices do not make a node an accelerator node."""
        if not self.drivers:
            return []
        mine = [s for s in store.slices_for(node_name) if s.node_name == node_name and self.driver(s.driver)]
        if not mine:
            return []
        return [c.id for c in dra.candidates_for_node(mine, node_name, {})]

    def pod_request(self, pod: Pod, store: DRAStore) -> int | None:
        """Accelerator devices the pod's claims still need to be allocated (``DRA_ALL`` for
        ``allocationMode: All``; 0 when its accelerator claims are allocated already), or None
        when no claim of the pod is for accelerators. Per request, the first alternative that
        uses an accelerator class counts: the allocator tries alternatives in order."""
        if not pod.resource_claims or not self.enabled:
            return None
        found = False
        count = 0
        for rc in pod.resource_claims:
            claim = store.get_claim(pod.namespace, rc.claim) if rc.claim else None
            if claim is None:
                continue
            if claim.allocation is not None:
                found = found or any(self.driver(r.driver) for r in claim.allocation.results)
                continue
            for dr in claim.requests:
                for alt in dr.alternatives:
                    cls = store.device_class(alt.device_class)
                    if cls is not None and self.device_class(cls):
                        found = True
                        count += DRA_ALL if alt.mode == dra.ALL else alt.count
                        break
        return min(count, DRA_ALL) if found else None


def dra_packing_score(requested: int, used: int, total: int) -> int:
    """Most-allocated over a node's accelerator devices with the pod's devices placed."""
    if total <= 0:
        return MIN_NODE_SCORE
    return min(used + requested, total) * MAX_NODE_SCORE // total
