"""DRA objects for integration tests: create slices, classes, claims and templates for one test and
delete the cluster-scoped ones afterwards (slices and classes are cluster-scoped, so their names
carry the test's namespace).

Use the ``dra_objects`` fixture (import it into the test module), or :class:`DRAObjects` directly.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from typing import Any

import pytest

from custom_scheduler.kube import api_errors
from custom_scheduler.kube.client import KubeClient
from tests.builders import make_pod

API = "/apis/resource.k8s.io/v1"
DRIVER = "gpu.example.com"
JSON = dict[str, Any]


class DRAObjects:
    """One test's DRA objects; :meth:`cleanup` deletes the cluster-scoped ones (the namespaced
    ones go with the test's namespace)."""

    def __init__(self, kube: KubeClient, namespace: str) -> None:
        self.kube = kube
        self.ns = namespace
        self.created: list[str] = []
        """Paths of the cluster-scoped objects made, deleted after the test."""

    # -- cluster-scoped -----------------------------------------------------------------------------
    def post_cluster(self, resource: str, obj: JSON) -> JSON:
        """Create a cluster-scoped object (``resourceslices``, ``deviceclasses``,
        ``devicetaintrules``) as given; it is deleted after the test."""
        got: JSON = self.kube.post(f"{API}/{resource}", obj)
        self.created.append(f"{API}/{resource}/{got['metadata']['name']}")
        return got

    def post_slice(self, obj: JSON) -> JSON:
        return self.post_cluster("resourceslices", obj)

    def post_class(self, obj: JSON) -> JSON:
        return self.post_cluster("deviceclasses", obj)

    def slice(self, node: str, suffix: str = "gpus", count: int = 1, *, driver: str = DRIVER, **spec: Any) -> str:
        """Slice ``<node>-<suffix>`` of pool ``node`` (``count`` slices in it) with ``spec``'s
        fields (``devices``, ``sharedCounters``, ...)."""
        pool = {"name": node, "generation": 1, "resourceSliceCount": count}
        body = {"driver": driver, "nodeName": node, "pool": pool, **spec}
        return str(self.post_slice({"metadata": {"name": f"{node}-{suffix}"}, "spec": body})["metadata"]["name"])

    def gpu_models(self, node: str, models: Sequence[str]) -> str:
        """Slice ``<node>-gpus``: one GPU per entry of ``models`` (attributes ``model``, ``index``)."""
        devices = [
            {"name": f"gpu-{i}", "attributes": {"model": {"string": m}, "index": {"int": i}}}
            for i, m in enumerate(models)
        ]
        return self.slice(node, devices=devices)

    def gpus(self, node: str, n: int, *, name: str = "") -> str:
        """A slice of ``n`` GPUs (``gpu-i``, attribute ``index``) local to ``node``, pool ``node``."""
        devices = [{"name": f"gpu-{i}", "attributes": {"index": {"int": i}}} for i in range(n)]
        return self.slice(node, name or "gpus", devices=devices)

    def device_class(self, name: str = "gpu", *selectors: str, extended: str = "", driver: str = DRIVER) -> str:
        """A class ``<name>-<namespace>`` selecting ``driver``'s devices (and ``selectors``);
        ``extended``: its ``extendedResourceName``."""
        full = f"{name}-{self.ns}"
        sel = [{"cel": {"expression": e}} for e in (f'device.driver == "{driver}"', *selectors)]
        spec: JSON = {"selectors": sel}
        if extended:
            spec["extendedResourceName"] = extended
        self.post_class({"metadata": {"name": full}, "spec": spec})
        return full

    def taint_rule(self, device: str, taint: JSON, *, driver: str = DRIVER) -> str:
        spec = {"deviceSelector": {"driver": driver, "device": device}, "taint": taint}
        rule = {"metadata": {"name": f"{device}-{self.ns}"}, "spec": spec}
        return str(self.post_cluster("devicetaintrules", rule)["metadata"]["name"])

    # -- namespaced ---------------------------------------------------------------------------------
    def claim(self, name: str, spec: JSON) -> JSON:
        body = {"metadata": {"name": name}, "spec": spec}
        got: JSON = self.kube.post(f"{API}/namespaces/{self.ns}/resourceclaims", body)
        return got

    def template(self, name: str, cls: str = "", selectors: Sequence[str] = (), **exactly: Any) -> None:
        """Template ``name`` with one request ``gpu`` of class ``cls`` (default: ``gpu-<namespace>``,
        what :meth:`device_class` makes by default), ``selectors`` and ``exactly``'s fields."""
        req: JSON = {"deviceClassName": cls or f"gpu-{self.ns}", **exactly}
        if selectors:
            req["selectors"] = [{"cel": {"expression": e}} for e in selectors]
        spec = {"spec": {"devices": {"requests": [{"name": "gpu", "exactly": req}]}}}
        self.kube.post(f"{API}/namespaces/{self.ns}/resourceclaimtemplates", {"metadata": {"name": name}, "spec": spec})

    def claims(self) -> list[JSON]:
        items: list[JSON] = self.kube.get(f"{API}/namespaces/{self.ns}/resourceclaims")["items"]
        return items

    def results_by_owner(self) -> dict[str, list[JSON]]:
        """Owning pod -> the results of its allocated claim (claims made from templates)."""
        out = {}
        for c in self.claims():
            owners = [o["name"] for o in c["metadata"].get("ownerReferences") or () if o.get("controller")]
            if owners and results(c):
                out[owners[0]] = results(c)
        return out

    def cleanup(self) -> None:
        for path in reversed(self.created):
            with contextlib.suppress(api_errors.KubeError):
                self.kube.delete(path)


@pytest.fixture
def dra_objects(kube: KubeClient, namespace: str) -> Iterator[DRAObjects]:
    d = DRAObjects(kube, namespace)
    yield d
    d.cleanup()


def claim_pod(name: str, claim: str = "", template: str = "") -> JSON:
    """A pod using ResourceClaim ``claim`` or a claim from ``template``, in its container."""
    obj = make_pod(name).obj()
    ref = (
        {"name": "gpu", "resourceClaimName": claim} if claim else {"name": "gpu", "resourceClaimTemplateName": template}
    )
    obj["spec"]["resourceClaims"] = [ref]
    obj["spec"]["containers"][0]["resources"] = {"claims": [{"name": "gpu"}]}
    return obj


def extended_pod(name: str, resource: str, count: int) -> JSON:
    """A pod asking for ``count`` of extended resource ``resource`` (requests = limits)."""
    obj = make_pod(name).req(cpu="10m").obj()
    res = obj["spec"]["containers"][0]["resources"]
    res["requests"][resource] = str(count)
    res["limits"] = {resource: str(count)}
    return obj


def results(claim: JSON) -> list[JSON]:
    """The claim's allocation results (empty when not allocated)."""
    alloc = (claim.get("status") or {}).get("allocation") or {}
    return list((alloc.get("devices") or {}).get("results") or ())


def held_twice(claims: Sequence[JSON]) -> list[tuple[str, str, str]]:
    """Devices that two allocations hold exclusively (admin access and shares left out)."""
    seen: set[tuple[str, str, str]] = set()
    twice = []
    for c in claims:
        for r in results(c):
            if r.get("adminAccess") or r.get("shareID"):
                continue
            d = (r["driver"], r["pool"], r["device"])
            if d in seen:
                twice.append(d)
            seen.add(d)
    return twice
