"""explain, simulate and snapshot with DRA: slices, classes and claims are read, written and
decide placements offline exactly as DynamicResources does in the daemon."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from custom_scheduler import config
from custom_scheduler.framework.registry import Registry
from custom_scheduler.plugins import dynamic_resources
from custom_scheduler.tools import snapshot
from custom_scheduler.tools.explain import explain_pod
from custom_scheduler.tools.simulate import simulate
from tests.builders import ClaimBuilder, device_class_obj, make_node, make_pod, resource_slice_obj


def _kind(doc: dict[str, Any], kind: str) -> dict[str, Any]:
    return {**doc, "kind": kind, "apiVersion": "resource.k8s.io/v1"}


def _state() -> snapshot.ClusterState:
    return snapshot.ClusterState(
        nodes=[make_node("a").obj(), make_node("b").obj()],
        dra=[
            _kind(resource_slice_obj("a", {"gpu-0": {"model": "a100"}}), "ResourceSlice"),
            _kind(device_class_obj("gpu", 'device.driver == "gpu.example.com"'), "DeviceClass"),
            _kind(ClaimBuilder("c1").request().obj(), "ResourceClaim"),
            _kind(ClaimBuilder("c2").request().obj(), "ResourceClaim"),
        ],
        source="test",
    )


def _pod(name: str, claim: str) -> dict[str, Any]:
    obj = make_pod(name).obj()
    obj["spec"]["resourceClaims"] = [{"name": "gpu", "resourceClaimName": claim}]
    return obj


def test_explain_gives_each_nodes_device_reason(default_config: config.SchedulerConfig, registry: Registry) -> None:
    ex = explain_pod(_state(), _pod("p", "c1"), default_config, registry)
    assert ex.node == "a"
    (b,) = [v for v in ex.verdicts if v.name == "b"]
    assert (b.feasible, b.plugin, b.reasons) == (False, "DynamicResources", [dynamic_resources.REASON_CANNOT_ALLOCATE])
    assert "DynamicResources allocates claim default/c1: gpu=gpu.example.com/a/gpu-0" in ex.notes


def test_simulate_never_gives_one_device_to_two_claims(
    default_config: config.SchedulerConfig, registry: Registry
) -> None:
    res = simulate(_state(), [_pod("p1", "c1"), _pod("p2", "c2")], default_config, registry, seed=1)
    by = {o.pod: o for o in res.outcomes}
    assert (by["default/p1"].result, by["default/p1"].node) == ("scheduled", "a")
    assert by["default/p2"].result == "unschedulable"
    assert "cannot allocate all claims" in by["default/p2"].message


def test_snapshot_carries_dra_sections(tmp_path: Path) -> None:
    doc = snapshot.snapshot_document(_state())
    assert [o["metadata"]["name"] for o in doc["resourceSlices"]] == ["a-gpu.example.com"]
    assert [o["metadata"]["name"] for o in doc["deviceClasses"]] == ["gpu"]
    assert [o["metadata"]["name"] for o in doc["resourceClaims"]] == ["c1", "c2"]
    path = tmp_path / "snap.yaml"
    path.write_text(yaml.safe_dump(doc))
    again = snapshot.load_cluster(str(path))
    assert sorted(o["kind"] for o in again.dra) == sorted(o["kind"] for o in _state().dra)
    assert again.dra_store().get_claim("default", "c1") is not None
