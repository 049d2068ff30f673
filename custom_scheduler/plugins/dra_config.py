"""``status.allocation.devices.config``: the configuration a driver gets with the devices.

The structured allocator (``allocator_incubating.go``, "Populate configs") copies, per allocated
claim:

1. each DeviceClass's ``spec.config`` once per class, with source ``FromClass`` and the names of
   the claim's requests (or chosen ``firstAvailable`` subrequests, ``req/sub``) that use the class;
2. each of the claim's ``spec.devices.config`` entries with source ``FromClaim``: one without
   ``requests`` applies to all; one naming requests is kept (with its list as written) when it
   names one of the claim's requests or the subrequest chosen for it;
3. a list of requests that covers every request of the claim is dropped ("empty means all").

Computed once per pod in Reserve from the allocation Filter chose, so Filter's per-node search
pays nothing for it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from custom_scheduler.api import dra

SOURCE_CLASS = "FromClass"
SOURCE_CLAIM = "FromClaim"


def _chosen(claim: dra.ResourceClaim, alloc: dra.Allocation) -> list[tuple[dra.DeviceRequest, dra.Request]]:
    """Each request with the (sub)request its devices were allocated for."""
    used = {r.request for r in alloc.results}
    out = []
    for dr in claim.requests:
        if not dr.first_available:
            out.append((dr, dr.alternatives[0]))
            continue
        sub = next((a for a in dr.alternatives if a.name in used), None)
        if sub is not None:
            out.append((dr, sub))
    return out


def _entry(source: str, requests: Sequence[str], doc: Mapping[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {"source": source}
    if requests:
        out["requests"] = list(requests)
    out.update({k: v for k, v in doc.items() if k != "requests"})
    return out


def allocation_config(
    claim: dra.ResourceClaim, alloc: dra.Allocation, classes: Callable[[str], dra.DeviceClass | None]
) -> tuple[dict[str, Any], ...]:
    """The ``devices.config`` list of ``alloc`` for ``claim``, as upstream's allocator writes it."""
    chosen = _chosen(claim, alloc)
    entries: list[tuple[str, list[str], Mapping[str, Any]]] = []
    by_class: dict[str, range] = {}
    for _dr, req in chosen:
        cls = classes(req.device_class)
        if cls is None:
            continue
        if cls.name in by_class:
            for i in by_class[cls.name]:
                entries[i][1].append(req.name)
            continue
        start = len(entries)
        entries.extend((SOURCE_CLASS, [req.name], c) for c in cls.config)
        by_class[cls.name] = range(start, len(entries))
    spec_config = ((claim.raw.get("spec") or {}).get("devices") or {}).get("config") or ()
    for c in spec_config:
        named = list(c.get("requests") or ())
        if not named or any(dr.name in named or req.name in named for dr, req in chosen):
            entries.append((SOURCE_CLAIM, named, c))
    out = []
    for source, requests, doc in entries:
        covers_all = bool(requests) and all(dr.name in requests or req.name in requests for dr, req in chosen)
        out.append(_entry(source, [] if covers_all else requests, doc))
    return tuple(out)


def with_config(
    claim: dra.ResourceClaim, alloc: dra.Allocation, classes: Callable[[str], dra.DeviceClass | None]
) -> dra.Allocation:
    config = allocation_config(claim, alloc, classes)
    return dataclasses.replace(alloc, config=config) if config else alloc
