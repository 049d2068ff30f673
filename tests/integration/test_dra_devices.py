"""Kubernetes 1.37's device features against the real API server and resourceclaim controller:
device taints (in the slice and from DeviceTaintRules), partitionable devices (shared counters),
consumable capacity (one shareable GPU, several claims) and admin access.

As in :mod:`tests.integration.test_dra`, pods use ResourceClaimTemplates (the controller makes
each pod's claim); slices, classes and DeviceTaintRules are cluster-scoped, so their names carry
the test's namespace and they are deleted afterwards.
"""

from __future__ import annotations

from collections.abc import Iterator
from decimal import Decimal
from typing import Any

import pytest

from custom_scheduler.api import quantity
from custom_scheduler.devenv import cluster
from custom_scheduler.kube import api_errors
from custom_scheduler.kube.client import KubeClient, pod_path
from tests.builders import make_node
from tests.integration.dra_objects import API, DRAObjects, claim_pod
from tests.integration.env import Env

ADMIN_LABEL = "resource.kubernetes.io/admin-access"


Devices = DRAObjects
"""The test's slices, class, DeviceTaintRules and templates (see :mod:`tests.integration.dra_objects`)."""


@pytest.fixture
def devices(kube: KubeClient, namespace: str) -> Iterator[Devices]:
    d = Devices(kube, namespace)
    yield d
    d.cleanup()


def allocated(devices: Devices) -> dict[str, dict[str, Any]]:
    """Owning pod -> the single device result of its allocated claim."""
    out = {}
    for owner, got in devices.results_by_owner().items():
        [out[owner]] = got
    return out


def dev(name: str, **fields: Any) -> dict[str, Any]:
    return {"name": name, **fields}


def bound_and_rejected(env: Env, bound: int, rejected: int, timeout: float = 90) -> dict[str, str]:
    """Wait until ``bound`` pods are bound and the ``rejected`` others each have a FailedScheduling
    saying the claims cannot be allocated (so their fate is decided, not pending by chance)."""

    def decided() -> dict[str, str] | None:
        placements = env.placements()
        placed = {p: n for p, n in placements.items() if n}
        pending = [p for p in placements if p not in placed]
        if len(placed) != bound or len(pending) != rejected:
            return None
        if not all(any("cannot allocate all claims" in m for m in env.failed_scheduling(p)) for p in pending):
            return None
        return placed

    return dict(cluster.wait_for(decided, timeout=timeout, interval=0.5, what=f"{bound} bound, {rejected} rejected"))


def test_tainted_device_is_skipped_unless_tolerated(env: Env, devices: Devices) -> None:
    node = env.node(make_node("taint"))
    taint = {"key": "maintenance", "value": "true", "effect": "NoSchedule"}
    devices.slice(node, "gpus", devices=[dev("gpu-0", taints=[taint]), dev("gpu-1")])
    devices.device_class()
    rule = devices.taint_rule("gpu-1", {"key": "maintenance", "effect": "NoExecute"})
    devices.template("plain")
    tolerate = [{"key": "maintenance", "operator": "Exists"}]
    devices.template("tolerant", tolerations=tolerate)
    env.start_scheduler()
    env.create_pod(claim_pod("plain", template="plain"))
    msgs = cluster.wait_for(lambda: env.failed_scheduling("plain"), timeout=60, what="the plain pod rejected")
    assert any("cannot allocate all claims" in m for m in msgs), msgs
    env.create_pod(claim_pod("tolerant", template="tolerant"))
    env.wait_bound("tolerant", timeout=60)
    result = cluster.wait_for(lambda: allocated(devices).get("tolerant"), what="the tolerant claim allocated")
    assert result["device"] == "gpu-0"
    assert result["tolerations"] == [{"key": "maintenance", "operator": "Exists"}]
    assert not env.placements()["plain"]
    # Lifting the rule's taint frees gpu-1 for the plain pod (a rule change requeues it).
    env.kube.delete(f"{API}/devicetaintrules/{rule}")
    env.wait_bound("plain", timeout=60)
    assert cluster.wait_for(lambda: allocated(devices).get("plain"), what="plain allocated")["device"] == "gpu-1"


def test_partitions_never_exceed_the_gpu_counters_even_in_a_burst(env: Env, devices: Devices) -> None:
    node = env.node(make_node("mig"))
    counters = [{"name": "gpu-0", "counters": {"memory": {"value": "40Gi"}}}]
    devices.slice(node, "a-counters", count=2, sharedCounters=counters)

    def part(name: str, mem: str) -> dict[str, Any]:
        return dev(name, consumesCounters=[{"counterSet": "gpu-0", "counters": {"memory": {"value": mem}}}])

    parts = [part("half-0", "20Gi"), part("half-1", "20Gi"), part("half-2", "20Gi"), part("full", "40Gi")]
    devices.slice(node, "b-parts", count=2, devices=parts)
    devices.device_class()
    devices.template("one")
    app = env.start_scheduler()
    names = [f"p{i}" for i in range(6)]
    for n in names:
        env.create_pod(claim_pod(n, template="one"))
    placed = bound_and_rejected(env, 2, 4)
    results = cluster.wait_for(lambda: (r := allocated(devices)) and len(r) == 2 and r, what="two claims allocated")
    assert set(results) == set(placed)
    used = sorted(r["device"] for r in results.values())
    assert used == ["half-0", "half-1"], used  # two halves fill the 40Gi; "full" and a third half never fit
    cluster.wait_for(lambda: app.dra.assumed() == ([], []), timeout=30, what="nothing left assumed or pending")
    # One half freed (its pod deleted, its claim with it): exactly one more pod gets a partition.
    victim = sorted(placed)[0]
    env.kube.delete(pod_path(env.namespace, victim))

    def victim_gone() -> bool:  # kwok finishes the graceful delete
        return victim not in allocated(devices)

    cluster.wait_for(victim_gone, timeout=60, what="the victim's claim deallocated")
    cluster.wait_for(lambda: len(allocated(devices)) == 2, timeout=60, what="one more pod allocated")
    used = sorted(r["device"] for r in allocated(devices).values())
    assert len(used) == 2
    assert "full" not in used, used


def test_shareable_gpu_serves_claims_by_memory_until_full(env: Env, devices: Devices) -> None:
    node = env.node(make_node("share"))
    gpu = dev("gpu-0", allowMultipleAllocations=True, capacity={"memory": {"value": "40Gi"}})
    devices.slice(node, "gpus", devices=[gpu])
    devices.device_class()
    devices.template("slice10", capacity={"requests": {"memory": "10Gi"}})
    env.start_scheduler()
    names = [f"s{i}" for i in range(5)]
    for n in names:
        env.create_pod(claim_pod(n, template="slice10"))
    placed = bound_and_rejected(env, 4, 1)
    results = cluster.wait_for(lambda: (r := allocated(devices)) and len(r) == 4 and r, what="four shares allocated")
    assert set(results) == set(placed)
    assert {r["device"] for r in results.values()} == {"gpu-0"}
    assert len({r["shareID"] for r in results.values()}) == 4, "each share has its own shareID"
    total = sum(quantity.parse(r["consumedCapacity"]["memory"]) for r in results.values())
    assert total == Decimal(40 * 2**30)


def test_admin_access_gets_a_device_that_stays_allocatable_and_needs_the_namespace_label(
    env: Env, devices: Devices
) -> None:
    node = env.node(make_node("admin"))
    devices.slice(node, "gpus", devices=[dev("gpu-0")])
    devices.device_class()
    # Refused in an unlabelled namespace: the API server's admission, not the scheduler, enforces it.
    with pytest.raises(api_errors.KubeError, match=ADMIN_LABEL):
        devices.template("admin", adminAccess=True)
    env.kube.patch(f"/api/v1/namespaces/{env.namespace}", {"metadata": {"labels": {ADMIN_LABEL: "true"}}})
    devices.template("admin", adminAccess=True)
    devices.template("user")
    env.start_scheduler()
    env.create_pod(claim_pod("monitor", template="admin"))
    env.wait_bound("monitor", timeout=60)
    env.create_pod(claim_pod("worker", template="user"))
    env.wait_bound("worker", timeout=60)
    results = cluster.wait_for(lambda: (r := allocated(devices)) and len(r) == 2 and r, what="both allocated")
    assert results["monitor"]["device"] == results["worker"]["device"] == "gpu-0"
    assert results["monitor"]["adminAccess"] is True
    assert "adminAccess" not in results["worker"]
    # The worker holds the device now: a second worker finds none, a second monitor still does.
    env.create_pod(claim_pod("worker2", template="user"))
    env.create_pod(claim_pod("monitor2", template="admin"))
    env.wait_bound("monitor2", timeout=60)
    msgs = cluster.wait_for(lambda: env.failed_scheduling("worker2"), timeout=60, what="worker2 rejected")
    assert any("cannot allocate all claims" in m for m in msgs), msgs
