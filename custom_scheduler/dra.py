"""Dynamic Resource Allocation (resource.k8s.io/v1): compact models and the device allocator.

ResourceSlices (devices a driver publishes for a node, a node selector or every node),
DeviceClasses and ResourceClaims are projected from raw JSON into slotted structs holding only what
the DynamicResources plugin reads, as :mod:`custom_scheduler.model` does for pods. Each device's CEL
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

import re
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from custom_scheduler import labels as sel
from custom_scheduler import quantity

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


# --- CEL ----------------------------------------------------------------------------------------

_DOMAIN_LOOKUP = re.compile(r"""\b(attributes|capacity)\s*\[\s*["']([^"']+)["']\s*\]""")


class CELError(Exception):
    """A selector that does not compile or fails on a device; the message is upstream's cause."""


@dataclass(frozen=True, slots=True)
class Compiled:
    program: Any
    error: str
    domains: tuple[tuple[str, str], ...]
    """(``attributes``/``capacity``, domain) pairs the expression indexes: upstream's maps return an
    empty map for an unknown domain, so those are filled in before evaluating."""


#: Selector outcomes kept per device (Device.cel_results) before that memo starts over.
DEVICE_MEMO_MAX = 64


class CELCache:
    """Compile each selector once (per process, shared by every cycle); thread-safe."""

    def __init__(self, max_size: int = 10_000) -> None:
        self._lock = threading.Lock()
        self._cache: dict[str, Compiled] = {}
        self._max = max_size

    def get(self, expr: str) -> Compiled:
        got = self._cache.get(expr)
        if got is not None:
            return got
        try:
            # Imported on first use: the package loads its interactive CLI (prompt_toolkit) on
            # import, ~0.1 s of every start-up that clusters without DRA would pay for nothing.
            import cel

            c = Compiled(cel.compile(expr), "", tuple(sorted(set(_DOMAIN_LOOKUP.findall(expr)))))
        except Exception as e:  # the library raises ValueError; anything else is as bad
            c = Compiled(None, _first_line(str(e)) or type(e).__name__, ())
        with self._lock:
            if len(self._cache) >= self._max:
                self._cache.clear()
            self._cache[expr] = c
        return c

    def matches(self, expr: str, device: Device) -> bool:
        """Evaluate ``expr`` on ``device`` (memoised on the device); raises CELError (message: the
        cause) on failure, every time it is asked, as the evaluation would."""
        memo = device.cel_results
        got = memo.get(expr)
        if got is None:
            got = self._evaluate(expr, device)
            if len(memo) >= DEVICE_MEMO_MAX:
                memo.clear()  # a device sees few distinct selectors; bound it anyway
            memo[expr] = got
        if got is True or got is False:
            return got
        raise CELError(got)

    def _evaluate(self, expr: str, device: Device) -> bool | str:
        """The outcome of ``expr`` on ``device``: the bool, or the CELError message."""
        try:
            return self._execute(expr, device)
        except CELError as e:
            return str(e)

    def _execute(self, expr: str, device: Device) -> bool:
        c = self.get(expr)
        if c.program is None:
            raise CELError(f"compile error: {c.error}")
        inp = device.cel_input
        dev = inp["device"]
        missing = [(m, d) for m, d in c.domains if d not in dev[m]]
        if missing:
            dev = {**dev, "attributes": dict(dev["attributes"]), "capacity": dict(dev["capacity"])}
            for m, d in missing:
                dev[m][d] = {}
            inp = {"device": dev}
        try:
            out = c.program.execute(inp)
        except KeyError as e:
            raise CELError(f"runtime error: no such key: {e.args[0] if e.args else e}") from None
        except Exception as e:
            raise CELError(f"runtime error: {_first_line(str(e)) or type(e).__name__}") from None
        if not isinstance(out, bool):
            raise CELError(f"runtime error: expression must evaluate to bool, got {type(out).__name__}")
        return out


def _first_line(s: str) -> str:
    return s.strip().splitlines()[0] if s.strip() else ""


# --- the allocator ------------------------------------------------------------------------------


class AllocationError(Exception):
    """Allocation cannot even be attempted (a selector's CEL error, a missing class): an error,
    not "does not fit"."""


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


def _claim_ref(claim: ResourceClaim) -> str:
    return f"{claim.namespace}/{claim.name}"


def _matching(
    claim: ResourceClaim,
    req: Request,
    classes: Callable[[str], DeviceClass | None],
    candidates: Sequence[Candidate],
    cels: CELCache,
) -> list[Candidate]:
    cls = classes(req.device_class)
    if cls is None:
        raise AllocationError(
            f"claim {_claim_ref(claim)}, request {req.name}: could not retrieve device class {req.device_class}: "
            f'deviceclass.resource.k8s.io "{req.device_class}" not found'
        )
    out = []
    for c in candidates:
        ok = True
        for i, expr in enumerate(cls.selectors):
            try:
                if not cels.matches(expr, c.device):
                    ok = False
                    break
            except CELError as e:
                where = "" if str(e).startswith("compile") else f" on device {device_id_str(c.id)}"
                raise AllocationError(f"class {cls.name}: selector #{i}{where}: CEL {e}") from None
        if not ok:
            continue
        for i, expr in enumerate(req.selectors):
            try:
                if not cels.matches(expr, c.device):
                    ok = False
                    break
            except CELError as e:
                where = "" if str(e).startswith("compile") else f" on device {device_id_str(c.id)}"
                raise AllocationError(f"claim {_claim_ref(claim)}: selector #{i}{where}: CEL {e}") from None
        if ok:
            out.append(c)
    return out


def _applies(constraint: Constraint, request_name: str) -> bool:
    if not constraint.requests:
        return True
    parent = request_name.split("/", 1)[0]
    return request_name in constraint.requests or parent in constraint.requests


_UNSET = object()


def allocate(
    claims: Sequence[ResourceClaim],
    candidates: Sequence[Candidate],
    in_use: Mapping[DeviceID, Any] | frozenset[DeviceID] | set[DeviceID],
    classes: Callable[[str], DeviceClass | None],
    cels: CELCache,
    node_name: str,
    *,
    max_steps: int = 100_000,
) -> list[Allocation] | None:
    """Allocate every claim of ``claims`` from ``candidates`` (a node's devices), or None when they
    do not fit. Raises AllocationError for what no node can fix (CEL errors, missing classes)."""
    if not candidates and any(c.requests for c in claims):
        # A node without devices (half the nodes of a typical DRA cluster): nothing can fit, but a
        # missing class is still the same error as with devices, in the same order.
        for claim in claims:
            for dr in claim.requests:
                for alt in dr.alternatives:
                    _matching(claim, alt, classes, (), cels)
        return None
    free = [c for c in candidates if c.id not in in_use]
    # Per claim, per request, per alternative: the devices it may take (selectors evaluated once).
    options: list[list[list[list[Candidate]]]] = []
    for claim in claims:
        per_req = []
        for dr in claim.requests:
            per_alt = []
            for alt in dr.alternatives:
                if alt.mode == ALL:
                    every = _matching(claim, alt, classes, candidates, cels)
                    # All means all: one device already taken by another claim and it cannot fit.
                    per_alt.append(every if every and all(c.id not in in_use for c in every) else [])
                else:
                    per_alt.append(_matching(claim, alt, classes, free, cels))
            per_req.append(per_alt)
        options.append(per_req)

    if len(claims) == 1 and len(claims[0].requests) == 1 and not claims[0].constraints:
        only = claims[0].requests[0]
        if len(only.alternatives) == 1:
            # The common shape (one claim, one ``exactly`` request, no constraints): the search
            # below would take the first ``need`` matching devices in order, one step each, with
            # nothing to backtrack over; take them directly.
            alt, opts = only.alternatives[0], options[0][0][0]
            need = len(opts) if alt.mode == ALL else alt.count
            if need == 0 or len(opts) < need or need > max_steps:
                return None
            picked = opts[:need]
            results = tuple(DeviceResult(alt.name, c.id[0], c.id[1], c.id[2]) for c in picked)
            return [Allocation(results, _node_selector([c.slice for c in picked], node_name))]

    used: set[DeviceID] = set()
    chosen: list[list[tuple[str, Candidate]]] = [[] for _ in claims]
    steps = 0

    def constraint_ok(ci: int, req_name: str, cand: Candidate) -> bool:
        for con in claims[ci].constraints:
            if not _applies(con, req_name):
                continue
            val = cand.device.attributes.get(con.match_attribute, _UNSET)
            if val is _UNSET:
                return False
            for rn, prev in chosen[ci]:
                if _applies(con, rn) and prev.device.attributes.get(con.match_attribute, _UNSET) != val:
                    return False
        return True

    def fill(ci: int, ri: int) -> bool:
        nonlocal steps
        if ci == len(claims):
            return True
        if ri == len(claims[ci].requests):
            return fill(ci + 1, 0)
        dr = claims[ci].requests[ri]
        for ai, alt in enumerate(dr.alternatives):
            opts = options[ci][ri][ai]
            need = len(opts) if alt.mode == ALL else alt.count
            if need == 0 or len(opts) < need:
                continue
            if pick(ci, ri, alt, opts, need, 0):
                return True
        return False

    def pick(ci: int, ri: int, alt: Request, opts: list[Candidate], need: int, start: int) -> bool:
        nonlocal steps
        if need == 0:
            return fill(ci, ri + 1)
        for i in range(start, len(opts) - need + 1):
            steps += 1
            if steps > max_steps:
                return False
            cand = opts[i]
            if cand.id in used or not constraint_ok(ci, alt.name, cand):
                continue
            used.add(cand.id)
            chosen[ci].append((alt.name, cand))
            if pick(ci, ri, alt, opts, need - 1, i + 1):
                return True
            chosen[ci].pop()
            used.discard(cand.id)
        return False

    if not fill(0, 0):
        return None
    out = []
    for picks in chosen:
        results = tuple(DeviceResult(rn, c.id[0], c.id[1], c.id[2]) for rn, c in picks)
        out.append(Allocation(results, _node_selector([c.slice for _, c in picks], node_name)))
    return out


def _node_selector(slices: Sequence[ResourceSlice], node_name: str) -> dict[str, Any] | None:
    """Where an allocation is usable: everywhere when every device is in an allNodes slice, the
    slices' common selector, else this node (``metadata.name`` field selector, as upstream)."""
    if all(s.all_nodes for s in slices):
        return None
    selectors = {repr(s.node_selector_raw) for s in slices if not s.all_nodes}
    if all(s.node_selector_raw is not None or s.all_nodes for s in slices) and len(selectors) == 1:
        first = next(s for s in slices if s.node_selector_raw is not None)
        return dict(first.node_selector_raw or {})
    return {"nodeSelectorTerms": [{"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node_name]}]}]}
