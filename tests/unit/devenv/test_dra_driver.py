"""The DRA driver stand-in's builders: the slices and classes it publishes, pure (the API server's
acceptance of them is ``tests/integration/test_dra_conformance.py``'s first test), and the bench's
checks judging allocations on them."""

from __future__ import annotations

import re
from typing import Any

import pytest

from bench import dra_partitions
from custom_scheduler.devenv import dra_driver as drv
from tests.integration.dra_cases import FEATURES, NOT_YET, enabled_features

DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
SEMVER = re.compile(r"^(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)$")


def _devices(slices: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [d for s in slices for d in s["spec"].get("devices") or ()]


def test_a_node_without_gpus_publishes_nothing() -> None:
    assert drv.node_slices("n1", drv.NodeResources()) == []


def test_one_pool_per_node_counters_apart_from_devices() -> None:
    """Since 1.35 a slice holds sharedCounters or devices, not both; all slices of the node form one
    pool whose resourceSliceCount is their number."""
    slices = drv.node_slices("n1", drv.NodeResources(gpus=1, tainted=1, partitionable=2, shared=1), generation=3)
    assert [s["metadata"]["name"] for s in slices] == ["n1-gpu-example-com-counters", "n1-gpu-example-com-devices-0"]
    assert all(s["spec"]["pool"] == {"name": "n1", "generation": 3, "resourceSliceCount": 2} for s in slices)
    assert all(s["spec"]["nodeName"] == "n1" and s["spec"]["driver"] == drv.DRIVER for s in slices)
    counters, devices = slices
    assert "devices" not in counters["spec"]
    assert "sharedCounters" not in devices["spec"]
    assert [c["name"] for c in counters["spec"]["sharedCounters"]] == ["gpu-2-counters", "gpu-3-counters"]
    assert len(devices["spec"]["devices"]) == 1 + 1 + 2 * 13 + 1


def test_devices_are_split_at_the_api_limit_and_counter_sets_capped() -> None:
    slices = drv.node_slices("n1", drv.NodeResources(partitionable=8))
    assert [len(s["spec"].get("devices") or ()) for s in slices] == [0, 64, 40]
    assert slices[0]["spec"]["pool"]["resourceSliceCount"] == 3
    with pytest.raises(ValueError, match="at most 8"):
        drv.node_slices("n1", drv.NodeResources(partitionable=9))


def test_partitions_consume_their_gpus_counters_as_mig_profiles_do() -> None:
    """Seven 1g.5gb use all 7 compute slices; two 3g.20gb all 40Gi; the 7g.40gb is the whole GPU."""
    parts = drv.partitions("n1", 0, drv.NodeResources(partitionable=1))
    by_profile: dict[str, list[dict[str, Any]]] = {}
    for p in parts:
        by_profile.setdefault(p["attributes"]["profile"]["string"], []).append(p)
    assert {k: len(v) for k, v in by_profile.items()} == {"1g.5gb": 7, "2g.10gb": 3, "3g.20gb": 2, "7g.40gb": 1}
    whole = by_profile["7g.40gb"][0]["consumesCounters"]
    assert whole == [{"counterSet": "gpu-0-counters", "counters": drv.counter_set(0)["counters"]}]
    assert by_profile["3g.20gb"][0]["consumesCounters"][0]["counters"]["memory"] == {"value": "20Gi"}
    assert all(DNS_LABEL.match(p["name"]) for p in parts)
    assert parts[0]["name"] == "gpu-0-mig-1g-5gb-0"
    assert all(p["attributes"]["parentIndex"] == {"int": 0} for p in parts)


def test_whole_tainted_and_shared_gpus() -> None:
    res = drv.NodeResources(gpus=1, tainted=1, shared=1, model="h100-80gb", memory="80Gi", pcie_roots=2)
    plain, tainted, shared = drv.devices("n1", res)
    assert plain["attributes"]["type"] == {"string": "gpu"}
    assert plain["capacity"] == {"memory": {"value": "80Gi"}}
    assert SEMVER.match(plain["attributes"]["driverVersion"]["version"])
    assert [d["attributes"][drv.PCIE_ROOT]["string"] for d in (plain, tainted, shared)] == [
        "pci0000:00",
        "pci0000:01",
        "pci0000:00",
    ]
    assert "taints" not in plain
    assert tainted["taints"] == [{"key": drv.UNHEALTHY, "effect": "NoSchedule"}]
    assert shared["allowMultipleAllocations"] is True
    assert shared["attributes"]["type"] == {"string": "vgpu"}
    memory, compute = shared["capacity"]["memory"], shared["capacity"]["compute"]
    assert memory["requestPolicy"] == {"default": "4Gi", "validRange": {"min": "1Gi", "step": "1Gi"}}
    values = compute["requestPolicy"]["validValues"]
    assert compute["requestPolicy"]["default"] in values
    assert values == sorted(values, key=int)
    assert compute["value"] == values[-1]
    assert len({d["attributes"]["uuid"]["string"] for d in (plain, tainted, shared)}) == 3


def test_device_classes_select_by_type_and_carry_suffix_and_labels() -> None:
    classes = drv.device_classes(suffix="-r1", labels={"run": "r1"})
    assert [c["metadata"]["name"] for c in classes] == [
        "gpu.example.com-r1",
        "mig.gpu.example.com-r1",
        "vgpu.gpu.example.com-r1",
        "large.gpu.example.com-r1",
    ]
    assert all(c["metadata"]["labels"] == {"run": "r1"} for c in classes)
    exprs = [c["spec"]["selectors"][0]["cel"]["expression"] for c in classes]
    assert 'type == "mig"' in exprs[1]
    assert 'quantity("80Gi")' in exprs[3]


def _result(pool: str, device: str, consumed: dict[str, str] | None = None) -> dict[str, Any]:
    r: dict[str, Any] = {"request": "r", "driver": drv.DRIVER, "pool": pool, "device": device}
    if consumed:
        r["consumedCapacity"] = consumed
    return r


def _claims(*results: dict[str, Any]) -> list[dict[str, Any]]:
    return [{"status": {"allocation": {"devices": {"results": [r]}}}} for r in results]


def test_bench_checks_catch_overcommitted_counters_and_capacity() -> None:
    """Two 3g.20gb partitions fit a GPU (6 of its 7 compute slices, all its 40Gi); a 2g.10gb beside
    them needs 8 and 50Gi. Eleven 4Gi shares of a 40Gi GPU exceed its memory and compute; ten fit."""
    slices = drv.node_slices("n1", drv.NodeResources(partitionable=1, shared=1))
    part = [drv.partition_name(0, "3g.20gb", k) for k in (0, 1)]
    two = _claims(*(_result("n1", p) for p in part))
    assert dra_partitions.violations(two, slices) == {"dra_counters_exceeded": 0, "dra_capacity_exceeded": 0}
    three = two + _claims(_result("n1", drv.partition_name(0, "2g.10gb", 0)))
    assert dra_partitions.violations(three, slices)["dra_counters_exceeded"] == 2  # compute and memory
    share = {"memory": "4Gi", "compute": "10"}
    ten = _claims(*(_result("n1", "gpu-1", share) for _ in range(10)))
    assert dra_partitions.violations(ten, slices)["dra_capacity_exceeded"] == 0
    eleven = ten + _claims(_result("n1", "gpu-1", share))
    assert dra_partitions.violations(eleven, slices)["dra_capacity_exceeded"] == 2
    assert dra_partitions.shared_devices(slices) == {(drv.DRIVER, "n1", "gpu-1")}


def test_the_generators_feature_switch() -> None:
    assert enabled_features("") == set(FEATURES) - NOT_YET
    assert enabled_features("counters,held") == {"counters", "held"}
    assert enabled_features("-shared,-taints") == set(FEATURES) - NOT_YET - {"shared", "taints"}
    assert enabled_features("extended-resource") == {"extended-resource"}
    with pytest.raises(ValueError, match="unknown DRA features"):
        enabled_features("mig")
