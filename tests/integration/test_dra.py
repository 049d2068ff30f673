"""DynamicResources against the real API server (resource.k8s.io/v1) and resourceclaim controller.

Devices come from ResourceSlices a fake driver (``gpu.example.com``) would publish; pods use
ResourceClaimTemplates, so the real resourceclaim controller creates each pod's claim and records
it in the pod's status (until then PreEnqueue keeps the pod gated). The scheduler allocates and
writes ``status.allocation`` and ``status.reservedFor``. Slices and classes are cluster-scoped, so
their names carry the test's namespace and they are deleted afterwards.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from custom_scheduler.devenv import cluster
from custom_scheduler.kube.client import KubeClient, pod_path
from tests.builders import make_node, make_pod
from tests.integration.dra_objects import API, DRIVER, DRAObjects, claim_pod
from tests.integration.env import Env

__all__ = ["API", "DRA", "DRIVER", "dra"]


DRA = DRAObjects
"""The test's DRA objects (see :mod:`tests.integration.dra_objects`)."""


@pytest.fixture
def dra(kube: KubeClient, namespace: str) -> Iterator[DRA]:
    d = DRA(kube, namespace)
    yield d
    d.cleanup()


def allocations(dra: DRA) -> dict[str, tuple[str, str, list[tuple[str, str]]]]:
    """Pod name -> (claim, device "pool/device", reservedFor [(resource, name)]) for allocated claims."""
    out = {}
    for c in dra.claims():
        st = c.get("status") or {}
        alloc = st.get("allocation")
        if not alloc:
            continue
        owner = next(o["name"] for o in c["metadata"]["ownerReferences"] if o.get("controller"))
        [res] = alloc["devices"]["results"]
        assert res["driver"] == DRIVER
        rf = [(r["resource"], r["name"]) for r in st.get("reservedFor") or ()]
        out[owner] = (c["metadata"]["name"], f"{res['pool']}/{res['device']}", rf)
    return out


def test_gpus_from_templates_each_claim_gets_a_distinct_device_on_its_node(env: Env, dra: DRA) -> None:
    names = [env.node(make_node(f"gpu{i}")) for i in range(2)]
    for n in names:
        dra.gpu_models(n, ["a100", "a100"])
    cls = dra.device_class()
    dra.template("one-gpu", cls)
    app = env.start_scheduler()
    for i in range(5):
        env.create_pod(claim_pod(f"p{i}", template="one-gpu"))

    def four_bound() -> dict[str, str] | None:
        got = env.placements()
        return got if sum(1 for v in got.values() if v) == 4 else None

    placed = cluster.wait_for(four_bound, timeout=60, what="4 of 5 GPU pods bound")
    [pending] = [p for p, n in placed.items() if not n]
    allocs = cluster.wait_for(lambda: (a := allocations(dra)) and len(a) == 4 and a, what="4 claims allocated")
    devices = [dev for _, dev, _ in allocs.values()]
    assert len(set(devices)) == 4, f"a device allocated twice: {devices}"
    for pod, (_, dev, reserved) in allocs.items():
        assert dev.split("/")[0] == placed[pod], "the device is on the pod's node"
        assert reserved == [("pods", pod)]
    assert pending not in allocs
    msgs = cluster.wait_for(lambda: env.failed_scheduling(pending), what="FailedScheduling of the fifth")
    assert any("cannot allocate all claims" in m for m in msgs), msgs

    # Free one device: delete a bound pod. kwok finishes the graceful delete; then its claim (owned
    # by the pod) is deleted, which frees its device.
    victim = next(p for p, n in placed.items() if n)
    victim_claim, victim_device, _ = allocs[victim]
    env.kube.delete(pod_path(env.namespace, victim))

    def victim_gone() -> bool:
        return victim not in env.placements()

    cluster.wait_for(victim_gone, timeout=30, what="victim gone")
    cluster.wait_for(
        lambda: victim_claim not in {c["metadata"]["name"] for c in dra.claims()},
        timeout=30,
        what="the victim's claim deleted",
    )
    env.wait_bound(pending, timeout=60)
    final = cluster.wait_for(lambda: (a := allocations(dra)) and pending in a and a, what="fifth claim allocated")
    assert victim not in final
    assert final[pending][1] == victim_device, "the fifth pod got the device the victim freed"
    assert final[pending][2] == [("pods", pending)]
    live = [d for _, d, _ in final.values()]
    assert len(set(live)) == len(live) == 4, f"a device allocated twice: {live}"
    cluster.wait_for(lambda: app.dra.assumed() == ([], []), timeout=10, what="nothing left assumed")


def test_cel_selector_on_model_gets_that_model_or_nothing(env: Env, dra: DRA) -> None:
    a, b = (env.node(make_node(f"m{i}")) for i in range(2))
    dra.gpu_models(a, ["a100"])
    dra.gpu_models(b, ["h100"])
    cls = dra.device_class()
    dra.template("h100", cls, [f'device.attributes["{DRIVER}"].model == "h100"'])
    dra.template("b200", cls, [f'device.attributes["{DRIVER}"].model == "b200"'])
    env.start_scheduler()
    env.create_pod(claim_pod("wants-h100", template="h100"))
    env.create_pod(claim_pod("wants-b200", template="b200"))
    cluster.wait_for(lambda: env.placements().get("wants-h100") == b, timeout=60, what="h100 pod on h100 node")
    msgs = cluster.wait_for(lambda: env.failed_scheduling("wants-b200"), what="b200 pod rejected")
    assert any("cannot allocate all claims" in m for m in msgs), msgs
    assert not env.placements()["wants-b200"]


def test_match_attribute_keeps_two_devices_of_one_claim_on_one_value(env: Env, dra: DRA) -> None:
    node = env.node(make_node("numa"))
    dra.gpu_models(node, ["a100", "h100", "h100"])  # only the two h100 share a model
    cls = dra.device_class()
    spec = {
        "devices": {
            "requests": [{"name": "gpu", "exactly": {"deviceClassName": cls, "count": 2}}],
            "constraints": [{"matchAttribute": f"{DRIVER}/model"}],
        }
    }
    env.kube.post(
        f"{API}/namespaces/{env.namespace}/resourceclaimtemplates",
        {"metadata": {"name": "pair"}, "spec": {"spec": spec}},
    )
    env.start_scheduler()
    env.create_pod(claim_pod("pair", template="pair"))
    cluster.wait_for(lambda: env.placements().get("pair") == node, timeout=60, what="pair pod bound")

    def results() -> list[str] | None:
        for c in dra.claims():
            alloc = (c.get("status") or {}).get("allocation")
            if alloc:
                return sorted(r["device"] for r in alloc["devices"]["results"])
        return None

    assert cluster.wait_for(results, what="pair claim allocated") == ["gpu-1", "gpu-2"]


def test_cel_that_fails_for_the_scheduler_fails_the_pod_clearly_and_others_still_schedule(env: Env, dra: DRA) -> None:
    node = env.node(make_node("c0"))
    dra.gpu_models(node, ["a100", "a100"])
    cls = dra.device_class()
    # The API server refuses a template whose CEL does not compile, so what reaches the scheduler
    # is CEL that compiles and fails on a device: here an attribute no device has.
    dra.template("broken", cls, [f'device.attributes["{DRIVER}"].memoryType == "hbm"'])
    dra.template("fine", cls)
    env.start_scheduler()
    env.create_pod(claim_pod("broken", template="broken"))
    env.create_pod(claim_pod("fine", template="fine"))
    msgs = cluster.wait_for(lambda: env.failed_scheduling("broken"), timeout=60, what="FailedScheduling")
    want = "selector #0 on device " + DRIVER
    assert any(f"claim {env.namespace}/broken-gpu-" in m and want in m and "CEL runtime error" in m for m in msgs), msgs
    cluster.wait_for(lambda: env.placements().get("fine") == node, timeout=60, what="the fine pod bound")
    assert not env.placements()["broken"]


def test_burst_of_200_claims_over_50_nodes_never_allocates_a_device_twice(env: Env, dra: DRA) -> None:
    names = [env.node(make_node(f"b{i}")) for i in range(50)]
    for n in names:
        dra.gpu_models(n, ["a100"] * 4)
    cls = dra.device_class()
    dra.template("one-gpu", cls)
    app = env.start_scheduler()
    for i in range(200):
        env.create_pod(claim_pod(f"p{i}", template="one-gpu"))

    def all_bound() -> dict[str, str] | None:
        got = env.placements()
        return got if len(got) == 200 and all(got.values()) else None

    placed = cluster.wait_for(all_bound, timeout=180, interval=1.0, what="200 GPU pods bound")
    allocs = cluster.wait_for(
        lambda: (a := allocations(dra)) and len(a) == 200 and a, timeout=60, interval=1.0, what="200 claims allocated"
    )
    devices = [dev for _, dev, _ in allocs.values()]
    assert len(set(devices)) == 200, "no device allocated twice"
    for pod, (_, dev, reserved) in allocs.items():
        assert dev.split("/")[0] == placed[pod]
        assert reserved == [("pods", pod)]
    cluster.wait_for(lambda: app.dra.assumed() == ([], []), timeout=30, what="nothing left assumed or pending")


ACCELERATOR_CONFIG = """
apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
leaderElection: {leaderElect: false}
profiles:
- schedulerName: custom-scheduler
  plugins:
    multiPoint:
      enabled:
      - {name: AcceleratorIsolation, weight: 5}
  pluginConfig:
  - name: AcceleratorIsolation
    args: {draDrivers: [gpu.example.com]}
"""


def test_accelerator_isolation_packs_dra_gpu_pods_and_keeps_others_off(env: Env, dra: DRA) -> None:
    """Two nodes with 3 GPUs each in ResourceSlices, one node without: one-GPU claim pods fill one
    GPU node before the other (AcceleratorIsolation prefers partly allocated devices, read from the
    claims' allocations), and a pod without claims goes to the node without GPUs, or nowhere."""
    a, b = (env.node(make_node(f"pack{i}")) for i in range(2))
    cpu = env.node(make_node("plain"))
    for n in (a, b):
        dra.gpu_models(n, ["a100"] * 3)
    dra.template("one-gpu", dra.device_class())
    env.start_scheduler(ACCELERATOR_CONFIG)

    placed: list[str] = []
    for i in range(4):
        name = f"g{i}"
        env.create_pod(claim_pod(name, template="one-gpu"))
        placed.append(env.wait_bound(name, timeout=60)[name])
    first = placed[0]
    assert first in (a, b)
    other = b if first == a else a
    assert placed == [first, first, first, other], placed

    env.create_pod(make_pod("plain").obj())
    assert env.wait_bound("plain", timeout=60)["plain"] == cpu
    # Even when it may only go to the GPU nodes (one of them with a free GPU), it stays off both.
    pinned = make_pod("pinned").obj()
    term = {"matchExpressions": [{"key": "kubernetes.io/hostname", "operator": "In", "values": [a, b]}]}
    pinned["spec"]["affinity"] = {
        "nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [term]}}
    }
    env.create_pod(pinned)
    msgs = cluster.wait_for(lambda: env.failed_scheduling("pinned"), timeout=60, what="pinned pod rejected")
    assert any("node(s) are reserved for accelerator workloads" in m for m in msgs), msgs
    assert not env.placements()["pinned"]
