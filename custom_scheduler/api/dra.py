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

Kubernetes 1.37's device extras are projected too: taints (the device's own; DeviceTaintRules
are applied by the store), ``consumesCounters`` and slices' ``sharedCounters`` (partitionable
devices), per-device node selection, ``allowMultipleAllocations`` with capacities and their
request policies, and on the claim side ``adminAccess``, ``tolerations``, ``capacity.requests`` and
``distinctAttribute``; the values and arithmetic live in :mod:`custom_scheduler.api.dra_devices`.

Not carried over: binding conditions and CEL's ``quantity`` and ``semver`` types (capacities are
plain integers in CEL, versions strings).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from custom_scheduler.api import dra_devices as ddev
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
    taints: tuple[ddev.Taint, ...] = ()
    """The slice's taints plus those of matching DeviceTaintRules (the store patches them in)."""
    consumes_counters: tuple[tuple[str, tuple[tuple[str, Decimal], ...]], ...] = ()
    """(counter set, ((counter, amount), ...)) per entry of ``consumesCounters``."""
    node_name: str = ""
    all_nodes: bool = False
    node_selector: sel.NodeSelector | None = None
    node_selector_raw: dict[str, Any] | None = None
    """Per-device node selection (only read when the slice sets ``perDeviceNodeSelection``)."""
    allow_multiple: bool = False
    capacity: dict[str, ddev.DeviceCapacity] = field(default_factory=dict, compare=False)
    """``capacity`` by its name as written (requests name it the same way), for consumable capacity."""
    simple: bool = True
    """No taints, counters, sharing or request policies: the allocator's fast path may take it."""
    binding_conditions: tuple[str, ...] = ()
    """``bindingConditions``: condition types that must be True in the claim's
    ``status.devices`` before the pod may be bound (PreBind waits for them)."""
    binding_failure_conditions: tuple[str, ...] = ()
    binds_to_node: bool = False
    """``bindsToNode``: the allocation is restricted to the node it was made for."""

    def reaches(self, node_name: str, node_labels: Mapping[str, str]) -> bool:
        """Per-device node selection (``NodeMatches`` on the device's own fields)."""
        if self.node_name:
            return self.node_name == node_name
        if self.all_nodes:
            return True
        return self.node_selector is not None and self.node_selector.matches(node_name, node_labels)


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
    multiple = bool(doc.get("allowMultipleAllocations"))
    dev = {"driver": driver, "attributes": by_domain, "capacity": caps, "allowMultipleAllocations": multiple}
    capacity = {str(k): ddev.device_capacity_from_json(v or {}) for k, v in (doc.get("capacity") or {}).items()}
    taints = tuple(ddev.taint_from_json(t or {}) for t in doc.get("taints") or ())
    counters = tuple(
        (str(c.get("counterSet", "")), _counters(c.get("counters"))) for c in doc.get("consumesCounters") or ()
    )
    ns_raw = doc.get("nodeSelector")
    policies = any(c.policy is not None for c in capacity.values())
    return Device(
        str(doc.get("name", "")),
        attrs,
        {"device": dev},
        taints=taints,
        consumes_counters=counters,
        node_name=str(doc.get("nodeName") or ""),
        all_nodes=bool(doc.get("allNodes")),
        node_selector=sel.compile_node_selector(ns_raw) if ns_raw else None,
        node_selector_raw=dict(ns_raw) if ns_raw else None,
        allow_multiple=multiple,
        capacity=capacity,
        simple=not (taints or counters or multiple or policies),
        binding_conditions=tuple(str(c) for c in doc.get("bindingConditions") or ()),
        binding_failure_conditions=tuple(str(c) for c in doc.get("bindingFailureConditions") or ()),
        binds_to_node=bool(doc.get("bindsToNode")),
    )


def _counters(doc: Mapping[str, Any] | None) -> tuple[tuple[str, Decimal], ...]:
    return tuple((str(k), quantity.parse(str((v or {}).get("value", "0")))) for k, v in (doc or {}).items())


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
    per_device: bool = False
    """``perDeviceNodeSelection``: each device says where it is reachable."""
    shared_counters: tuple[tuple[str, tuple[tuple[str, Decimal], ...]], ...] = ()
    """``sharedCounters``: (counter set, ((counter, amount), ...)); such a slice has no devices."""

    def reaches(self, node_name: str, node_labels: Mapping[str, str]) -> bool:
        """Whether a pod on this node can use the slice's devices (nodeName, allNodes or
        nodeSelector; with per-device node selection, whether one of its devices is reachable)."""
        if self.node_name:
            return self.node_name == node_name
        if self.all_nodes:
            return True
        if self.per_device:
            return any(d.reaches(node_name, node_labels) for d in self.devices)
        return self.node_selector is not None and self.node_selector.matches(node_name, node_labels)

    def device_reaches(self, device: Device, node_name: str, node_labels: Mapping[str, str]) -> bool:
        return not self.per_device or device.reaches(node_name, node_labels)


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
        per_device=bool(spec.get("perDeviceNodeSelection")),
        shared_counters=tuple(
            (str(c.get("name", "")), _counters(c.get("counters"))) for c in spec.get("sharedCounters") or ()
        ),
    )


# --- DeviceClass --------------------------------------------------------------------------------


def _selectors(docs: Iterable[JSON] | None) -> tuple[str, ...]:
    return tuple(str((s.get("cel") or {}).get("expression", "")) for s in docs or ())


@dataclass(slots=True)
class DeviceClass:
    name: str
    resource_version: str = ""
    selectors: tuple[str, ...] = ()
    extended_resource_name: str = ""
    """``spec.extendedResourceName``: pods requesting it get devices of this class (DRAExtendedResource)."""
    config: tuple[dict[str, Any], ...] = ()
    """``spec.config`` as written (each ``{"opaque": ...}``): copied into allocations (source FromClass)."""
    created: str = ""
    """``creationTimestamp`` (RFC 3339, so ordered as text): the newer class wins a shared extended resource name."""


def device_class_from_json(doc: JSON) -> DeviceClass:
    meta, spec = _meta(doc), doc.get("spec") or {}
    return DeviceClass(
        str(meta.get("name", "")),
        str(meta.get("resourceVersion", "")),
        _selectors(spec.get("selectors")),
        extended_resource_name=str(spec.get("extendedResourceName") or ""),
        config=tuple(dict(c) for c in spec.get("config") or ()),
        created=str(meta.get("creationTimestamp") or ""),
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
    admin_access: bool = False
    tolerations: tuple[ddev.Toleration, ...] = ()
    tolerations_raw: tuple[dict[str, Any], ...] = ()
    """As written: the allocation result copies the request's tolerations."""
    capacity: dict[str, ddev.Qty] | None = None
    """``capacity.requests`` (None: not set)."""


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
    distinct_attribute: str = ""


@dataclass(frozen=True, slots=True)
class DeviceResult:
    request: str
    driver: str
    pool: str
    device: str
    admin_access: bool = False
    """Admin access: the device is not consumed (others may still get it)."""
    tolerations: tuple[dict[str, Any], ...] = ()
    share_id: str = ""
    """Set for a share of an ``allowMultipleAllocations`` device."""
    consumed: tuple[tuple[str, str], ...] = ()
    """``consumedCapacity`` as written: (capacity name, quantity text)."""
    binding_conditions: tuple[str, ...] = ()
    binding_failure_conditions: tuple[str, ...] = ()

    @property
    def id(self) -> DeviceID:
        return (self.driver, self.pool, self.device)

    def consumed_values(self) -> dict[str, Decimal]:
        """The consumed capacity as numbers (an unparseable entry counts as nothing)."""
        out: dict[str, Decimal] = {}
        for name, text in self.consumed:
            try:
                out[name] = quantity.parse(text)
            except quantity.QuantityError:
                continue
        return out

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"request": self.request, "driver": self.driver, "pool": self.pool, "device": self.device}
        if self.admin_access:
            out["adminAccess"] = True
        if self.tolerations:
            out["tolerations"] = [dict(t) for t in self.tolerations]
        if self.share_id:
            out["shareID"] = self.share_id
        if self.consumed:
            out["consumedCapacity"] = dict(self.consumed)
        if self.binding_conditions:
            out["bindingConditions"] = list(self.binding_conditions)
        if self.binding_failure_conditions:
            out["bindingFailureConditions"] = list(self.binding_failure_conditions)
        return out


def _device_result(r: JSON) -> DeviceResult:
    return DeviceResult(
        str(r.get("request", "")),
        str(r.get("driver", "")),
        str(r.get("pool", "")),
        str(r.get("device", "")),
        admin_access=bool(r.get("adminAccess")),
        tolerations=tuple(dict(t) for t in r.get("tolerations") or ()),
        share_id=str(r.get("shareID") or ""),
        consumed=tuple((str(k), str(v)) for k, v in (r.get("consumedCapacity") or {}).items()),
        binding_conditions=tuple(str(c) for c in r.get("bindingConditions") or ()),
        binding_failure_conditions=tuple(str(c) for c in r.get("bindingFailureConditions") or ()),
    )


@dataclass(frozen=True, slots=True)
class Allocation:
    results: tuple[DeviceResult, ...]
    node_selector_raw: dict[str, Any] | None = None
    """Where the allocated devices are reachable (None: every node)."""
    config: tuple[dict[str, Any], ...] = ()
    """``devices.config``: ``{"source", "requests"?, "opaque"}`` entries, as the allocator writes them."""
    timestamp: str = ""
    """``allocationTimestamp`` (RFC 3339): when PreBind wrote it; binding conditions time out from it."""

    @property
    def devices(self) -> frozenset[DeviceID]:
        """The devices this allocation holds exclusively (``foreachAllocatedDevice``: results with
        admin access hold nothing, shares of a shareable device are :attr:`shares`)."""
        return frozenset(r.id for r in self.results if not r.admin_access and not r.share_id)

    @property
    def shares(self) -> tuple[DeviceResult, ...]:
        """Results that are one share of an ``allowMultipleAllocations`` device (not admin access)."""
        return tuple(r for r in self.results if r.share_id and not r.admin_access)

    def available_on(self, node_name: str, node_labels: Mapping[str, str]) -> bool:
        if self.node_selector_raw is None:
            return True
        return sel.compile_node_selector(self.node_selector_raw).matches(node_name, node_labels)

    def to_json(self) -> dict[str, Any]:
        devices: dict[str, Any] = {"results": [r.to_json() for r in self.results]}
        if self.config:
            devices["config"] = [dict(c) for c in self.config]
        out: dict[str, Any] = {"devices": devices}
        if self.node_selector_raw is not None:
            out["nodeSelector"] = self.node_selector_raw
        if self.timestamp:
            out["allocationTimestamp"] = self.timestamp
        return out


def allocation_from_json(doc: JSON | None) -> Allocation | None:
    if not doc:
        return None
    results = tuple(_device_result(r) for r in (doc.get("devices") or {}).get("results") or ())
    ns = doc.get("nodeSelector")
    config = tuple(dict(c) for c in (doc.get("devices") or {}).get("config") or ())
    return Allocation(results, dict(ns) if ns else None, config, str(doc.get("allocationTimestamp") or ""))


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
    owner_kind: str = ""
    """The controlling owner's kind (``Pod`` for a claim made from a pod's template)."""
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


def _request(name: str, doc: JSON, admin: bool = False) -> Request:
    tols = tuple(dict(t) for t in doc.get("tolerations") or ())
    caps = (doc.get("capacity") or {}).get("requests") if doc.get("capacity") is not None else None
    return Request(
        name,
        str(doc.get("deviceClassName", "")),
        _selectors(doc.get("selectors")),
        str(doc.get("allocationMode") or EXACT_COUNT),
        int(doc.get("count") or 1),
        admin_access=admin,
        tolerations=tuple(ddev.toleration_from_json(t) for t in tols),
        tolerations_raw=tols,
        capacity=None if caps is None else {str(k): ddev.qty(v) for k, v in caps.items()},
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
            exactly = r.get("exactly") or {}
            requests.append(DeviceRequest(name, (_request(name, exactly, bool(exactly.get("adminAccess"))),)))
    constraints = tuple(
        Constraint(
            tuple(str(x) for x in c.get("requests") or ()),
            str(c.get("matchAttribute") or ""),
            str(c.get("distinctAttribute") or ""),
        )
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
        owner_kind=str(owner.get("kind", "")) if owner else "",
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
    pool: ddev.Pool | None = None
    """Its pool's counter sets (None: a pool without any, as :func:`candidates_for_node` makes)."""


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
            if s.device_reaches(d, node_name, node_labels):
                out.append(Candidate((s.driver, s.pool, d.name), d, s))
    return out
