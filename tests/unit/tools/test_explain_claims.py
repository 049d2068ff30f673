"""Which ResourceClaim keeps a pod off a node, table-driven; and through explain, the claim named
beside DynamicResources' own reason."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest

from custom_scheduler import config
from custom_scheduler.api.model import pod_from_json
from custom_scheduler.framework.registry import Registry
from custom_scheduler.framework.types import NodeInfo
from custom_scheduler.plugins import dynamic_resources
from custom_scheduler.tools import snapshot
from custom_scheduler.tools.explain import explain_pod
from custom_scheduler.tools.explain_claims import ClaimFacts, details
from tests.builders import ClaimBuilder, device_class_obj, make_node, make_pod, resource_slice_obj


def _kind(doc: dict[str, Any], kind: str) -> dict[str, Any]:
    return {**doc, "kind": kind, "apiVersion": "resource.k8s.io/v1"}


def _pod(name: str, **claims: str) -> dict[str, Any]:
    """``claims``: entry name -> claim name ("" for a template's claim not created yet)."""
    obj = make_pod(name).obj()
    obj["spec"]["resourceClaims"] = [
        {"name": n, "resourceClaimName": c} if c else {"name": n, "resourceClaimTemplateName": "t"}
        for n, c in claims.items()
    ]
    return obj


SLICE_A = _kind(resource_slice_obj("a", {"gpu-0": {}, "gpu-1": {}}), "ResourceSlice")


@dataclass
class Case:
    name: str
    claims: dict[str, str]
    objects: list[dict[str, Any]]
    lines: list[str]
    node: str = "a"


CASES = [
    Case("missing", {"gpu": "c1"}, [], ["claim gpu: ResourceClaim default/c1 does not exist"]),
    Case(
        "template not resolved", {"gpu": ""}, [], ["claim gpu: its ResourceClaim is not created from the template yet"]
    ),
    Case(
        "allocated to another node",
        {"gpu": "c1"},
        [_kind(ClaimBuilder("c1").request().allocated("b", "gpu-0").obj(), "ResourceClaim")],
        [
            "claim gpu: ResourceClaim default/c1 is allocated to devices this node cannot reach "
            "(term 1: metadata.name In [b]: node name is a)"
        ],
    ),
    Case(
        "not allocated: what it asks for, what the node has",
        {"gpu": "c1"},
        [_kind(ClaimBuilder("c1").request(count=3).request("all", "nic", mode="All").obj(), "ResourceClaim"), SLICE_A],
        [
            "claim gpu: ResourceClaim default/c1 is not allocated; it asks for gpu: 3 x class gpu; "
            "all: all x class nic; the node publishes 2 device(s) of gpu.example.com"
        ],
    ),
    Case(
        "not allocated, nothing published",
        {"gpu": "c1"},
        [
            SLICE_A,
            _kind(
                ClaimBuilder("c1").first_available("gpu", ("big", "gpu-big", ()), ("small", "gpu", ())).obj(),
                "ResourceClaim",
            ),
        ],
        [
            "claim gpu: ResourceClaim default/c1 is not allocated; it asks for gpu: one of class gpu-big or gpu; "
            "the node publishes no ResourceSlice of its own"
        ],
        node="z",
    ),
]


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_claim_details(case: Case) -> None:
    pod = pod_from_json(_pod("p", **case.claims))
    assert details(pod, NodeInfo(make_node(case.node).build()), ClaimFacts.of(case.objects)) == case.lines


def test_explain_names_the_claim_dynamic_resources_could_not_allocate(
    default_config: config.SchedulerConfig, registry: Registry
) -> None:
    state = snapshot.ClusterState(
        nodes=[make_node("a").obj(), make_node("b").obj()],
        dra=[
            SLICE_A,
            _kind(device_class_obj("gpu", 'device.driver == "gpu.example.com"'), "DeviceClass"),
            _kind(ClaimBuilder("c1").request().obj(), "ResourceClaim"),
        ],
        source="test",
    )
    ex = explain_pod(state, _pod("p", gpu="c1"), default_config, registry)
    assert ex.node == "a"
    (b,) = [v for v in ex.verdicts if v.name == "b"]
    assert b.reasons == [dynamic_resources.REASON_CANNOT_ALLOCATE]
    assert b.detail == [
        "claim gpu: ResourceClaim default/c1 is not allocated; it asks for gpu: 1 x class gpu; "
        "the node publishes no ResourceSlice of its own"
    ]
