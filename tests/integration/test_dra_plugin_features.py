"""DynamicResources' 1.37 features against the real API server: PostFilter deallocation, devices
and preemption, binding conditions, ``devices.config`` in allocations, CEL's Kubernetes functions.

Claims here are named directly by pods (``resourceClaimName``), so a test can prepare one (allocate
it by hand, as an earlier scheduler would have) before the pod exists. The test plays the driver
where one would act: it writes the claim's ``status.devices[].conditions`` for binding conditions.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from typing import Any

import pytest

from custom_scheduler.devenv import cluster
from custom_scheduler.kube.client import KubeClient
from tests.builders import make_node
from tests.integration.dra_objects import claim_pod
from tests.integration.env import Env
from tests.integration.test_dra import API, DRA, DRIVER, dra

__all__ = ["dra"]

CLAIMS = f"{API}/namespaces/{{ns}}/resourceclaims"


class Claims:
    """The test's claims (namespaced: the namespace's deletion removes them)."""

    def __init__(self, kube: KubeClient, namespace: str) -> None:
        self.kube = kube
        self.ns = namespace

    def create(self, name: str, cls: str, *, selectors: Sequence[str] = (), config: Any = None) -> None:
        exactly: dict[str, Any] = {"deviceClassName": cls}
        if selectors:
            exactly["selectors"] = [{"cel": {"expression": e}} for e in selectors]
        devices: dict[str, Any] = {"requests": [{"name": "gpu", "exactly": exactly}]}
        if config is not None:
            devices["config"] = config
        self.kube.post(CLAIMS.format(ns=self.ns), {"metadata": {"name": name}, "spec": {"devices": devices}})

    def get(self, name: str) -> dict[str, Any]:
        got: dict[str, Any] = self.kube.get(f"{CLAIMS.format(ns=self.ns)}/{name}")
        return got

    def put_status(self, claim: dict[str, Any]) -> None:
        self.kube.put(f"{CLAIMS.format(ns=self.ns)}/{claim['metadata']['name']}/status", claim)

    def allocation(self, name: str) -> dict[str, Any] | None:
        alloc: dict[str, Any] | None = (self.get(name).get("status") or {}).get("allocation")
        return alloc


@pytest.fixture
def claims(env: Env) -> Claims:
    return Claims(env.kube, env.namespace)


def test_postfilter_deallocates_a_claim_stuck_on_a_cordoned_node_and_the_pod_binds_elsewhere(
    env: Env, dra: DRA, claims: Claims
) -> None:
    cordoned = env.node(make_node("pf-a").unschedulable())
    free = env.node(make_node("pf-b"))
    dra.gpu_models(cordoned, ["a100"])
    dra.gpu_models(free, ["a100"])
    cls = dra.device_class()
    claims.create("stuck", cls)
    # An earlier allocation on the node that is now cordoned, reserved for nobody.
    claim = claims.get("stuck")
    claim["status"] = {
        "allocation": {
            "devices": {"results": [{"request": "gpu", "driver": DRIVER, "pool": cordoned, "device": "gpu-0"}]},
            "nodeSelector": {
                "nodeSelectorTerms": [
                    {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [cordoned]}]}
                ]
            },
        }
    }
    claims.put_status(claim)
    env.start_scheduler()
    env.create_pod(claim_pod("p", "stuck"))
    want = (
        "0/2 nodes are available: 1 node(s) were unschedulable, 1 resourceclaim not available on the node. "
        "deallocation of ResourceClaim completed, preemption: 0/2 nodes are available: "
        "2 Preemption is not helpful for scheduling."
    )
    msgs = cluster.wait_for(lambda: env.failed_scheduling("p"), timeout=60, what="FailedScheduling")
    assert want in msgs, msgs
    assert env.wait_bound("p", timeout=60)["p"] == free
    alloc = cluster.wait_for(lambda: claims.allocation("stuck"), timeout=30, what="claim reallocated")
    assert [(r["pool"], r["device"]) for r in alloc["devices"]["results"]] == [(free, "gpu-0")]
    assert [r["name"] for r in claims.get("stuck")["status"]["reservedFor"]] == ["p"]


def test_a_high_priority_pod_does_not_preempt_for_a_device_as_upstream(
    env: Env, dra: DRA, claims: Claims, priority_class: Any
) -> None:
    # kube-scheduler 1.37: DynamicResources has no PreFilterExtensions and its "cannot allocate all
    # claims" is UnschedulableAndUnresolvable, so a node whose device a victim holds is never a
    # preemption candidate: the preemptor stays pending and the holder keeps running.
    node = env.node(make_node("pre-a"))
    dra.gpu_models(node, ["a100"])
    cls = dra.device_class()
    claims.create("low", cls)
    claims.create("high", cls)
    env.start_scheduler()
    env.create_pod(claim_pod("holder", "low"))
    env.wait_bound("holder", timeout=60)
    hi = claim_pod("preemptor", "high")
    hi["spec"]["priorityClassName"] = priority_class(1000)
    env.create_pod(hi)
    want = (
        "0/1 nodes are available: 1 cannot allocate all claims. preemption: 0/1 nodes are available: "
        "1 Preemption is not helpful for scheduling."
    )
    msgs = cluster.wait_for(lambda: env.failed_scheduling("preemptor"), timeout=60, what="FailedScheduling")
    assert want in msgs, msgs
    assert env.placements()["holder"] == node
    assert not env.pod("holder")["metadata"].get("deletionTimestamp")


BC_CONFIG = """
apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
leaderElection: {leaderElect: false}
profiles:
- schedulerName: custom-scheduler
  pluginConfig:
  - name: DynamicResources
    args: {bindingTimeout: 3s}
"""


def _bc_device(name: str) -> dict[str, Any]:
    return {
        "name": name,
        "bindingConditions": ["Attached"],
        "bindingFailureConditions": ["AttachFailed"],
        "bindsToNode": True,
    }


def _set_conditions(claims: Claims, name: str, node: str, conditions: list[dict[str, Any]]) -> None:
    """Play the driver: report the allocated device's conditions in the claim's status."""

    def put() -> bool:
        claim = claims.get(name)
        alloc = (claim.get("status") or {}).get("allocation")
        if not alloc:
            return False
        [res] = alloc["devices"]["results"]
        claim = copy.deepcopy(claim)
        claim["status"]["devices"] = [
            {"driver": res["driver"], "pool": res["pool"], "device": res["device"], "conditions": conditions}
        ]
        claims.put_status(claim)
        return True

    cluster.wait_for(put, timeout=30, what=f"claim {name} allocated on {node}")


def _condition(kind: str, status: str, reason: str = "Driver", message: str = "") -> dict[str, Any]:
    return {
        "type": kind,
        "status": status,
        "reason": reason,
        "message": message,
        "lastTransitionTime": "2026-12-03T00:00:00Z",
    }


def test_binding_conditions_met_bind_the_pod(env: Env, dra: DRA, claims: Claims) -> None:
    node = env.node(make_node("bc-ok"))
    dra.slice(node, devices=[_bc_device("fabric-0")])
    cls = dra.device_class()
    claims.create("c", cls)
    env.start_scheduler(BC_CONFIG.replace("3s", "60s"))
    env.create_pod(claim_pod("p", "c"))
    cluster.wait_for(
        lambda: env.events("BindingConditionsPending", about="p"), timeout=30, what="BindingConditionsPending"
    )
    alloc = claims.allocation("c")
    assert alloc is not None
    assert alloc.get("allocationTimestamp")
    [res] = alloc["devices"]["results"]
    assert res["bindingConditions"] == ["Attached"]
    assert res["bindingFailureConditions"] == ["AttachFailed"]
    assert not env.placements()["p"], "bound before the device is attached"
    _set_conditions(claims, "c", node, [_condition("Attached", "True")])
    assert env.wait_bound("p", timeout=30)["p"] == node


def test_binding_failure_condition_fails_prebind_and_the_claim_is_deallocated(
    env: Env, dra: DRA, claims: Claims
) -> None:
    node = env.node(make_node("bc-fail"))
    dra.slice(node, devices=[_bc_device("fabric-0")])
    cls = dra.device_class()
    claims.create("c", cls)
    env.start_scheduler(BC_CONFIG.replace("3s", "60s"))
    env.create_pod(claim_pod("p", "c"))
    _set_conditions(claims, "c", node, [_condition("AttachFailed", "True", "NoLink", "fabric down")])
    want = 'device binding failed: claim=c, reason=NoLink, message="fabric down"'
    msgs = cluster.wait_for(
        lambda: [m for m in env.failed_scheduling("p") if want in m], timeout=60, what="the binding failure"
    )
    assert all("DynamicResources" in m for m in msgs), msgs
    # The next attempt finds the claim unavailable everywhere; PostFilter deallocates it.
    cluster.wait_for(
        lambda: [m for m in env.failed_scheduling("p") if "deallocation of ResourceClaim completed" in m],
        timeout=60,
        what="PostFilter's deallocation",
    )
    assert not env.placements()["p"]


def test_binding_conditions_never_met_time_out(env: Env, dra: DRA, claims: Claims) -> None:
    node = env.node(make_node("bc-late"))
    dra.slice(node, devices=[_bc_device("fabric-0")])
    cls = dra.device_class()
    claims.create("c", cls)
    env.start_scheduler(BC_CONFIG)
    env.create_pod(claim_pod("p", "c"))
    msgs = cluster.wait_for(
        lambda: [m for m in env.failed_scheduling("p") if "device binding timeout" in m], timeout=60, what="timeout"
    )
    assert msgs, msgs
    assert not env.placements()["p"]


def test_allocation_carries_class_and_claim_config(env: Env, dra: DRA, claims: Claims) -> None:
    node = env.node(make_node("cfg"))
    dra.gpu_models(node, ["a100"])
    full = f"cfg-{env.namespace}"
    class_cfg = {"opaque": {"driver": DRIVER, "parameters": {"mode": "class"}}}
    sel = [{"cel": {"expression": f'device.driver == "{DRIVER}"'}}]
    dra.post_class({"metadata": {"name": full}, "spec": {"selectors": sel, "config": [class_cfg]}})
    claim_cfg = {"requests": ["gpu"], "opaque": {"driver": DRIVER, "parameters": {"mode": "claim"}}}
    claims.create("c", full, config=[claim_cfg])
    env.start_scheduler()
    env.create_pod(claim_pod("p", "c"))
    env.wait_bound("p", timeout=60)
    alloc = claims.allocation("c")
    assert alloc is not None
    # Both apply to every request of the claim, so their request lists are dropped (empty = all).
    assert alloc["devices"]["config"] == [
        {"source": "FromClass", "opaque": class_cfg["opaque"]},
        {"source": "FromClaim", "opaque": claim_cfg["opaque"]},
    ]


def test_cel_quantity_and_semver_select_and_a_runtime_error_names_claim_and_expression(
    env: Env, dra: DRA, claims: Claims
) -> None:
    node = env.node(make_node("cel"))
    devices = [
        {
            "name": f"gpu-{i}",
            "attributes": {"driverVersion": {"version": v}},
            "capacity": {"memory": {"value": m}},
        }
        for i, (v, m) in enumerate([("1.2.0", "16Gi"), ("1.10.0", "80Gi")])
    ]
    dra.slice(node, devices=devices)
    cls = dra.device_class()
    big_new = (
        f'device.capacity["{DRIVER}"].memory.compareTo(quantity("40Gi")) >= 0 && '
        f'device.attributes["{DRIVER}"].driverVersion.isGreaterThan(semver("1.9.0"))'
    )
    claims.create("good", cls, selectors=[big_new])
    claims.create("bad", cls, selectors=[f'device.attributes["{DRIVER}"].memoryType == "hbm"'])
    env.start_scheduler()
    env.create_pod(claim_pod("bad", "bad"))
    env.create_pod(claim_pod("good", "good"))
    assert env.wait_bound("good", timeout=60)["good"] == node
    alloc = claims.allocation("good")
    assert alloc is not None
    assert [r["device"] for r in alloc["devices"]["results"]] == ["gpu-1"]
    msgs = cluster.wait_for(lambda: env.failed_scheduling("bad"), timeout=60, what="FailedScheduling of bad")
    want = f"claim {env.namespace}/bad: selector #0 on device {DRIVER}/{node}/gpu-0: CEL runtime error: "
    assert any(want in m for m in msgs), msgs
    assert not env.placements()["bad"]
