"""Dynamic Resource Allocation (resource.k8s.io/v1): compact models and the device allocator.

ResourceSlices (devices a driver publishes for a node, a node selector or every node),
DeviceClasses and ResourceClaims are projected from raw JSON into slotted structs holding only what
the DynamicResources plugin reads, as :mod:`custom_scheduler.api.model` does for pods. Each device's CEL
input (``device.driver``, ``device.attributes[domain][id]``, ``device.capacity[domain][id]``) is
built once at projection, so evaluating a selector costs one call into the CEL library, not a
conversion per device and pod. Claims keep their raw JSON: PreBind writes ``status`` back with an
update, which must carry the whole object and its resourceVersion.

:func:`allocate` is the pure part of upstream's structured allocator
(``k8s.io/dynamic-resource-allocation/structured``): given the claims to allocate, the devices a
node reaches and the devices already in use, it finds one device per requested slot (``exactly``
with ``count`` or ``allocationMode: All``, ``firstAvailable`` subrequests in order), with the class's
and the request's CEL selectors, never the same device twice, and ``matchAttribute`` constraints,
backtracking when a later choice fails. Error messages are upstream's (``claim ns/name: selector #0:
CEL compile error: ...``), so a user reads the same reason as from kube-scheduler.

Not carried over: admin access, partitionable devices (counter sets), consumable capacity, device
taints, binding conditions, per-device node selection, and CEL's ``quantity`` and ``semver`` types
(capacities are plain integers, versions strings).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from custom_scheduler.api import labels as sel
from custom_scheduler.api import quantity

JSON = Mapping[str, Any]

API = "/apis/resource.k8s.io/v1"
FINALIZER = "resource.kubernetes.io/delete-protection"
#: ``ResourceClaimReservedForMaxSize``: a claim reserved for this many consumers takes no more.
RESERVED_FOR_MAX = 256
#: ``FirstAvailableDeviceRequestMaxSize``: the score of the first subrequest is this minus its index.
FIRST_AVAILABLE_MAX = 8
ALL = "All"
EXACT_COUNT = "ExactCount"

DeviceID = tuple[str, str, str]
"""(driver, pool, device): unique in the cluster, as upstream's DeviceID."""


def device_id_str(d: DeviceID) -> str:
    return "/".join(d)


def _meta(doc: JSON) -> JSON:
    return doc.get("metadata") or {}


# --- ResourceSlice ------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Device:
    name: str
    attributes: dict[str, Any]
    """Fully qualified attribute name (``domain/id``; an unqualified name gets the driver's domain)
    to its value (int, bool, str; a version as its string)."""
    cel_input: dict[str, Any]
    """``{"device": {...}}``: the CEL activation for this device, built once."""
    cel_results: dict[str, bool | str] = field(default_factory=dict, compare=False, repr=False)
    """Selector expression → its outcome on this device (True/False, or the CELError message).

    A selector is a pure function of the device, and a Device is immutable (a slice update
    projects new ones), so the outcome is computed once per (expression, device) instead of once per
    (expression, device, pod, cycle): evaluating CEL was most of the DRA workload's Filter time."""


def _attr_value(v: JSON) -> Any:
    for k in ("int", "bool", "string", "version"):
        if k in v:
            return v[k]
    return None


def _device_from_json(driver: str, doc: JSON) -> Device:
    attrs: dict[str, Any] = {}
    by_domain: dict[str, dict[str, Any]] = {}
    for name, v in (doc.get("attributes") or {}).items():
        domain, _, ident = name.rpartition("/")
        domain = domain or driver
        val = _attr_value(v or {})
        attrs[f"{domain}/{ident}"] = val
        by_domain.setdefault(domain, {})[ident] = val
    caps: dict[str, dict[str, Any]] = {}
    for name, v in (doc.get("capacity") or {}).items():
        domain, _, ident = name.rpartition("/")
        caps.setdefault(domain or driver, {})[ident] = quantity.to_int((v or {}).get("value", "0"))
    dev = {
        "driver": driver,
        "attributes": by_domain,
        "capacity": caps,
        "allowMultipleAllocations": bool(doc.get("allowMultipleAllocations")),
    }
    return Device(str(doc.get("name", "")), attrs, {"device": dev})


@dataclass(slots=True)
class ResourceSlice:
    name: str
    resource_version: str = ""
    driver: str = ""
    pool: str = ""
    generation: int = 0
    slice_count: int = 1
    node_name: str = ""
    all_nodes: bool = False
    node_selector: sel.NodeSelector | None = None
    node_selector_raw: dict[str, Any] | None = None
    devices: tuple[Device, ...] = ()

    def reaches(self, node_name: str, node_labels: Mapping[str, str]) -> bool:
        """Whether a pod on this node can use the slice's devices (nodeName, allNodes or nodeSelector)."""
        if self.node_name:
            return self.node_name == node_name
        if self.all_nodes:
            return True
        return self.node_selector is not None and self.node_selector.matches(node_name, node_labels)


def resource_slice_from_json(doc: JSON) -> ResourceSlice:
    meta, spec = _meta(doc), doc.get("spec") or {}
    pool = spec.get("pool") or {}
    driver = str(spec.get("driver", ""))
    ns_raw = spec.get("nodeSelector")
    return ResourceSlice(
        name=str(meta.get("name", "")),
        resource_version=str(meta.get("resourceVersion", "")),
        driver=driver,
        pool=str(pool.get("name", "")),
        generation=int(pool.get("generation") or 0),
        slice_count=int(pool.get("resourceSliceCount") or 1),
        node_name=str(spec.get("nodeName") or ""),
        all_nodes=bool(spec.get("allNodes")),
        node_selector=sel.compile_node_selector(ns_raw) if ns_raw else None,
        node_selector_raw=dict(ns_raw) if ns_raw else None,
        devices=tuple(_device_from_json(driver, d) for d in spec.get("devices") or ()),
    )


# --- DeviceClass --------------------------------------------------------------------------------


def _selectors(docs: Iterable[JSON] | None) -> tuple[str, ...]:
    return tuple(str((s.get("cel") or {}).get("expression", "")) for s in docs or ())


@dataclass(slots=True)
class DeviceClass:
    name: str
    resource_version: str = ""
    selectors: tuple[str, ...] = ()


def device_class_from_json(doc: JSON) -> DeviceClass:
    meta, spec = _meta(doc), doc.get("spec") or {}
    return DeviceClass(
        str(meta.get("name", "")), str(meta.get("resourceVersion", "")), _selectors(spec.get("selectors"))
    )


# --- ResourceClaim ------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Request:
    """An ``exactly`` request, or one subrequest of ``firstAvailable`` (``name`` is then ``req/sub``)."""

    name: str
    device_class: str
    selectors: tuple[str, ...] = ()
    mode: str = EXACT_COUNT
    count: int = 1


@dataclass(frozen=True, slots=True)
class DeviceRequest:
    name: str
    alternatives: tuple[Request, ...]
    """One entry for ``exactly``; the ``firstAvailable`` subrequests in order of preference."""
    first_available: bool = False


@dataclass(frozen=True, slots=True)
class Constraint:
    requests: tuple[str, ...]
    """Request names it applies to (empty: every request of the claim)."""
    match_attribute: str


@dataclass(frozen=True, slots=True)
class DeviceResult:
    request: str
    driver: str
    pool: str
    device: str

    @property
    def id(self) -> DeviceID:
        return (self.driver, self.pool, self.device)

    def to_json(self) -> dict[str, Any]:
        return {"request": self.request, "driver": self.driver, "pool": self.pool, "device": self.device}


@dataclass(frozen=True, slots=True)
class Allocation:
    results: tuple[DeviceResult, ...]
    node_selector_raw: dict[str, Any] | None = None
    """Where the allocated devices are reachable (None: every node)."""

    @property
    def devices(self) -> frozenset[DeviceID]:
        return frozenset(r.id for r in self.results)

    def available_on(self, node_name: str, node_labels: Mapping[str, str]) -> bool:
        if self.node_selector_raw is None:
            return True
        return sel.compile_node_selector(self.node_selector_raw).matches(node_name, node_labels)

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"devices": {"results": [r.to_json() for r in self.results]}}
        if self.node_selector_raw is not None:
            out["nodeSelector"] = self.node_selector_raw
        return out


def allocation_from_json(doc: JSON | None) -> Allocation | None:
    if not doc:
        return None
    results = tuple(
        DeviceResult(
            str(r.get("request", "")), str(r.get("driver", "")), str(r.get("pool", "")), str(r.get("device", ""))
        )
        for r in (doc.get("devices") or {}).get("results") or ()
    )
    ns = doc.get("nodeSelector")
    return Allocation(results, dict(ns) if ns else None)


@dataclass(frozen=True, slots=True)
class Consumer:
    resource: str
    name: str
    uid: str

    def to_json(self) -> dict[str, Any]:
        return {"resource": self.resource, "name": self.name, "uid": self.uid}


@dataclass(slots=True)
class ResourceClaim:
    namespace: str
    name: str
    uid: str = ""
    resource_version: str = ""
    deleting: bool = False
    owner_uid: str = ""
    """The controlling owner's UID (the pod, for a claim made from a template)."""
    requests: tuple[DeviceRequest, ...] = ()
    constraints: tuple[Constraint, ...] = ()
    allocation: Allocation | None = None
    reserved_for: tuple[Consumer, ...] = ()
    finalizers: tuple[str, ...] = ()
    raw: dict[str, Any] = field(default_factory=dict, repr=False)

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    def reserved_for_pod(self, uid: str) -> bool:
        return any(c.resource == "pods" and c.uid == uid for c in self.reserved_for)

    @property
    def can_be_reserved(self) -> bool:
        return len(self.reserved_for) < RESERVED_FOR_MAX


def _request(name: str, doc: JSON) -> Request:
    return Request(
        name,
        str(doc.get("deviceClassName", "")),
        _selectors(doc.get("selectors")),
        str(doc.get("allocationMode") or EXACT_COUNT),
        int(doc.get("count") or 1),
    )


def resource_claim_from_json(doc: JSON) -> ResourceClaim:
    meta, spec, status = _meta(doc), doc.get("spec") or {}, doc.get("status") or {}
    devices = spec.get("devices") or {}
    requests = []
    for r in devices.get("requests") or ():
        name = str(r.get("name", ""))
        if r.get("firstAvailable"):
            subs = tuple(_request(f"{name}/{s.get('name', '')}", s) for s in r["firstAvailable"])
            requests.append(DeviceRequest(name, subs, first_available=True))
        else:
            requests.append(DeviceRequest(name, (_request(name, r.get("exactly") or {}),)))
    constraints = tuple(
        Constraint(tuple(str(x) for x in c.get("requests") or ()), str(c.get("matchAttribute", "")))
        for c in devices.get("constraints") or ()
    )
    owner = next((o for o in meta.get("ownerReferences") or () if o.get("controller")), None)
    return ResourceClaim(
        namespace=str(meta.get("namespace", "")),
        name=str(meta.get("name", "")),
        uid=str(meta.get("uid", "")),
        resource_version=str(meta.get("resourceVersion", "")),
        deleting=bool(meta.get("deletionTimestamp")),
        owner_uid=str(owner.get("uid", "")) if owner else "",
        requests=tuple(requests),
        constraints=constraints,
        allocation=allocation_from_json(status.get("allocation")),
        reserved_for=tuple(
            Consumer(str(c.get("resource", "")), str(c.get("name", "")), str(c.get("uid", "")))
            for c in status.get("reservedFor") or ()
        ),
        finalizers=tuple(meta.get("finalizers") or ()),
        raw=dict(doc),
    )


# --- the devices a node reaches -----------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Candidate:
    id: DeviceID
    device: Device
    slice: ResourceSlice


def candidates_for_node(
    slices: Iterable[ResourceSlice], node_name: str, node_labels: Mapping[str, str]
) -> list[Candidate]:
    """The devices a pod on this node reaches, from the newest generation of each pool."""
    newest: dict[tuple[str, str], int] = {}
    reach = [s for s in slices if s.reaches(node_name, node_labels)]
    for s in reach:
        k = (s.driver, s.pool)
        newest[k] = max(newest.get(k, s.generation), s.generation)
    out = []
    for s in sorted(reach, key=lambda s: (s.driver, s.pool, s.name)):
        if s.generation != newest[(s.driver, s.pool)]:
            continue
        for d in s.devices:
            out.append(Candidate((s.driver, s.pool, d.name), d, s))
    return out
