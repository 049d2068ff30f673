"""Extended resources backed by DRA (DRAExtendedResource, GA and locked on in 1.37): the pure part.

A pod may ask for ``example.com/gpu: 2`` in a container's requests, as for a device plugin's
resource; when a DeviceClass names that resource in ``spec.extendedResourceName`` (or the resource
is the class's implicit ``deviceclass.resource.kubernetes.io/<class>``) and a node does not offer
it in its allocatable, DynamicResources allocates devices of the class instead, through a claim
the scheduler makes for the pod (the "special claim"). This module holds what that needs without
any I/O, after upstream's ``extendeddynamicresources.go`` and ``extendedresourcecache``:

- :class:`ContainerRequests` (each container's extended requests, kept on the pod projection only
  when a container asks for a resource with a ``/`` in its name);
- :func:`class_mapping`: resource name -> DeviceClass (the newest class wins a shared name);
- :func:`requests_and_mappings`: the special claim's device requests (one ``exactly`` request per
  container and resource, ``container-<i>-request-<j>``, init containers folded as upstream does)
  and the ``status.extendedResourceClaimStatus.requestMappings`` the pod gets.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

from custom_scheduler.api import quantity

JSON = dict[str, Any]

#: ``resourceapi.ResourceDeviceClassPrefix``: every class backs ``<prefix><class name>``.
DEVICE_CLASS_PREFIX = "deviceclass.resource.kubernetes.io/"
#: ``resourceapi.ExtendedResourceClaimAnnotation``: marks the claim the scheduler made for a pod.
CLAIM_ANNOTATION = "resource.kubernetes.io/extended-resource-claim"
#: The in-memory name of the special claim before PreBind creates it (``specialClaimInMemName``).
SPECIAL_CLAIM_NAME = "<extended-resources>"


def is_extended_resource_name(name: str) -> bool:
    """``IsDRAExtendedResourceName``: an extended resource (domain-qualified, no ``kubernetes.io/``
    in it, not ``requests.``-prefixed), or a class's implicit name."""
    if name.startswith(DEVICE_CLASS_PREFIX):
        return True
    return "/" in name and "kubernetes.io/" not in name and not name.startswith("requests.")


@dataclass(frozen=True, slots=True)
class ContainerRequests:
    """One container's requests as the special claim needs them."""

    index: int
    """Index in init containers followed by containers (upstream's ``container-<index>``)."""
    name: str
    init: bool
    """A regular init container (runs before, not beside, the others); a sidecar is not one."""
    extended: tuple[tuple[str, int], ...]
    """(resource, whole count) for each extended resource requested (non-integers left out)."""
    keys: tuple[str, ...]
    """Every resource name of its requests, sorted (upstream's ``request-<j>`` is an index here)."""


def container_requests(spec: Mapping[str, Any]) -> tuple[ContainerRequests, ...]:
    """The containers of ``spec`` that request an extended resource (others are left out; empty for
    the usual pod, so the projection costs one scan of the request names)."""
    inits = list(spec.get("initContainers") or ())
    out = []
    for i, c in enumerate([*inits, *(spec.get("containers") or ())]):
        reqs = (c.get("resources") or {}).get("requests") or {}
        if not any(is_extended_resource_name(str(k)) for k in reqs):
            continue
        ext = []
        for k, v in reqs.items():
            if not is_extended_resource_name(str(k)):
                continue
            try:
                q = quantity.parse(str(v))
            except quantity.QuantityError:
                continue
            if q == int(q) and q > 0:
                ext.append((str(k), int(q)))
        init = i < len(inits) and c.get("restartPolicy") != "Always"
        out.append(ContainerRequests(i, str(c.get("name", "")), init, tuple(ext), tuple(sorted(map(str, reqs)))))
    return tuple(out)


class ClassLike(Protocol):
    """What :func:`class_mapping` reads of a DeviceClass (``api.dra.DeviceClass`` has it)."""

    @property
    def name(self) -> str: ...
    @property
    def extended_resource_name(self) -> str: ...
    @property
    def created(self) -> str: ...


C = TypeVar("C", bound=ClassLike)


def class_mapping(classes: Iterable[C]) -> dict[str, C]:
    """``extendedresourcecache``: resource name -> class. Every class backs its implicit name; an
    explicit ``extendedResourceName`` shared by several classes goes to the newest (then the
    smallest name), as upstream's cache keeps it."""
    out: dict[str, C] = {}
    for c in sorted(classes, key=lambda c: c.name):
        out[DEVICE_CLASS_PREFIX + c.name] = c
        name = c.extended_resource_name
        if not name:
            continue
        have = out.get(name)
        if have is None or c.created > have.created:
            out[name] = c
    return out


@dataclass(frozen=True, slots=True)
class RequestMapping:
    """One ``status.extendedResourceClaimStatus.requestMappings`` entry."""

    container: str
    resource: str
    request: str

    def to_json(self) -> JSON:
        return {"containerName": self.container, "resourceName": self.resource, "requestName": self.request}


@dataclass(frozen=True, slots=True)
class ExtRequest:
    """One ``exactly`` request of the special claim: ``count`` devices of ``device_class``."""

    name: str
    device_class: str
    count: int

    def to_json(self) -> JSON:
        return {
            "name": self.name,
            "exactly": {"deviceClassName": self.device_class, "allocationMode": "ExactCount", "count": self.count},
        }


def _container_request(
    c: ContainerRequests, resource: str, cls: str, reusable: Sequence[ExtRequest | None]
) -> tuple[ExtRequest | None, list[RequestMapping]]:
    """``createResourceRequestAndMappings``: the devices a container needs beyond what the
    long-lived requests after it (``reusable``, for an init container) already provide."""
    want = dict(c.extended).get(resource, 0)
    if want == 0:
        return None, []
    mappings = []
    got = 0
    for r in reusable:
        if r is not None:
            got += r.count
            mappings.append(RequestMapping(c.name, resource, r.name))
            if got >= want:
                return None, mappings
    name = f"container-{c.index}-request-{c.keys.index(resource)}"
    mappings.append(RequestMapping(c.name, resource, name))
    return ExtRequest(name, cls, want - got), mappings


def requests_and_mappings(
    containers: Sequence[ContainerRequests], resources: Iterable[str], class_of: Callable[[str], str | None]
) -> tuple[list[ExtRequest], list[RequestMapping]]:
    """``createRequestsAndMappings``: for each resource (sorted) served by DRA on the node, one
    request per long-lived container asking for it, plus one for the largest regular init
    container's need (init containers run one at a time and may reuse the devices of containers
    that start after them), sorted by name; and which container uses which request."""
    requests: list[ExtRequest] = []
    mappings: list[RequestMapping] = []
    slots = max((c.index for c in containers), default=-1) + 1
    for resource in sorted(resources):
        cls = class_of(resource)
        if cls is None:
            continue
        long_lived: list[ExtRequest | None] = [None] * slots
        long_maps: list[RequestMapping] = []
        for c in containers:
            if not c.init:
                long_lived[c.index], m = _container_request(c, resource, cls, ())
                long_maps += m
        biggest: ExtRequest | None = None
        short_names: set[str] = set()
        short_maps: list[RequestMapping] = []
        for c in containers:
            if c.init:
                r, m = _container_request(c, resource, cls, long_lived[c.index :])
                if r is not None:
                    short_names.add(r.name)
                    if biggest is None or biggest.count < r.count:
                        biggest = r
                short_maps += m
        if biggest is not None and len(short_names) > 1:
            short_maps = [
                RequestMapping(m.container, m.resource, biggest.name) if m.request in short_names else m
                for m in short_maps
            ]
        if biggest is not None:
            requests.append(biggest)
        requests += [r for r in long_lived if r is not None]
        mappings += long_maps + short_maps
    requests.sort(key=lambda r: r.name)
    return requests, mappings
