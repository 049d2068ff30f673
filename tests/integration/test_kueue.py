"""Kueue v0.17 in front of our scheduler (issue #27 item 3), on the session's real control plane.

Kueue (:mod:`custom_scheduler.devenv.kueue`, the real manager built from Go modules) decides when a
batch Job may run; our scheduler (an in-process :class:`App`) decides where its pods go; kwok
(:mod:`custom_scheduler.devenv.kwok`) runs them and finishes them after their set time. The Jobs'
templates name no node: every node constraint their pods carry is Kueue's (the flavor's node labels,
the topology assignment), so a pod that lands right proves that our scheduler honoured Kueue.

Kueue and kwok run once for the module; each test makes its own kwok Nodes (a unique pool label),
its own ResourceFlavor, ClusterQueue (and Topology) and deletes them afterwards.
"""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest

from custom_scheduler.api import podgroup as gang
from custom_scheduler.api import quantity
from custom_scheduler.devenv import cluster, kwok
from custom_scheduler.devenv import kueue as kq
from custom_scheduler.devenv.controlplane import ControlPlane
from custom_scheduler.kube import api_errors
from custom_scheduler.kube.client import KubeClient
from tests.builders import make_node, make_pod_group
from tests.integration.conftest import GANG_CONFIG
from tests.integration.env import Env

RACK = "cs.example/rack"
BLOCK = "cs.example/block"
HOSTNAME = "kubernetes.io/hostname"
GPU = "nvidia.com/gpu"


@pytest.fixture(scope="module")
def kueue_proc(control_plane: ControlPlane, kube: KubeClient) -> Iterator[kq.Kueue]:
    """The Kueue manager for this module, when hack/kueue.sh has built it."""
    bin_dir = kq.cached_kueue()
    if bin_dir is None:
        # Like the e2e sample: a fresh machine's CI does not pay the ~10-minute build.
        pytest.skip("Kueue is not built: ./hack/dev.sh setup (or kueue) builds it (about 7 minutes the first time)")
    k = kq.Kueue.for_control_plane(control_plane, bin_dir).start(kube)
    yield k
    k.stop(kube)


@dataclass
class World:
    """One test's Kueue objects and kwok Nodes, all with a unique suffix; removed afterwards."""

    env: Env
    kueue: kq.Kueue
    kwok: kwok.Kwok
    suffix: str = field(default_factory=lambda: uuid.uuid4().hex[:6])
    cluster_scoped: list[str] = field(default_factory=list)
    node_names: list[str] = field(default_factory=list)

    @property
    def pool(self) -> str:
        return f"kueue-{self.suffix}"

    def node(self, name: str, capacity: dict[str, str], labels: dict[str, str] | None = None) -> str:
        """A kwok Node in this test's pool (Ready by kwok's report); returns its unique name."""
        full = f"{name}-{self.suffix}"
        b = make_node(full).capacity_named({"memory": "8Gi", "pods": "110", **capacity}).label("pool", self.pool)
        for k, v in (labels or {}).items():
            b.label(k, v)
        self.node_names.append(full)
        try:
            kwok.create_node(self.env.kube, b.obj())
        except TimeoutError as e:
            raise AssertionError(f"{e}\nkwok log:\n{self.kwok.log_tail()}") from e
        return full

    def create(self, path: str, obj: dict[str, Any]) -> None:
        self.env.kube.post(path, obj)
        if "namespace" not in obj["metadata"]:
            self.cluster_scoped.append(f"{path}/{obj['metadata']['name']}")

    def queues(self, quota: dict[str, str], topology: list[str] | None = None) -> str:
        """A flavor for this pool (with a Topology of ``topology`` levels if given), a ClusterQueue
        with ``quota`` of it and a LocalQueue in the namespace; returns the LocalQueue's name."""
        name = f"q-{self.suffix}"
        topo = None
        if topology:
            topo = f"topo-{self.suffix}"
            self.create(f"{kq.API_PREFIX}/topologies", kq.topology(topo, topology))
        self.create(f"{kq.API_PREFIX}/resourceflavors", kq.resource_flavor(name, {"pool": self.pool}, topo))
        self.create(f"{kq.API_PREFIX}/clusterqueues", kq.cluster_queue(name, name, quota))
        ns = self.env.namespace
        self.create(f"{kq.API_PREFIX}/namespaces/{ns}/localqueues", kq.local_queue(name, ns, name))
        cluster.wait_for(
            lambda: kq.condition(self.env.kube.get(f"{kq.API_PREFIX}/clusterqueues/{name}"), "Active"),
            timeout=30,
            what=f"ClusterQueue {name} to be Active\n{self.kueue.log_tail()}",
        )
        return name

    def job(self, spec: kq.JobSpec) -> None:
        path = f"/apis/batch/v1/namespaces/{self.env.namespace}/jobs"
        self.env.kube.post(path, kq.queued_job(spec, kwok.COMPLETE_AFTER_ANNOTATION))

    def workloads(self) -> list[dict[str, Any]]:
        items: list[dict[str, Any]] = (
            self.env.kube.get(f"{kq.API_PREFIX}/namespaces/{self.env.namespace}/workloads").get("items") or []
        )
        return items

    def job_obj(self, name: str) -> dict[str, Any]:
        got: dict[str, Any] = self.env.kube.get(f"/apis/batch/v1/namespaces/{self.env.namespace}/jobs/{name}")
        return got

    def job_pods(self, name: str) -> list[dict[str, Any]]:
        return cluster.list_pods(self.env.kube, self.env.namespace, f"job-name={name}")

    def cleanup(self) -> None:
        """With Kueue still running: the Jobs and their Workloads, then the queues, flavors and
        topology (each waits on Kueue's finalizer until unused), then the Nodes."""
        kube = self.env.kube
        kq.drain(kube, self.env.namespace)
        for path in reversed(self.cluster_scoped):
            with contextlib.suppress(api_errors.NotFound):
                kube.delete(path)

        def gone(path: str) -> bool:
            try:
                kube.get(path)
            except api_errors.NotFound:
                return True
            return False

        cluster.wait_for(lambda: all(gone(p) for p in self.cluster_scoped), timeout=30, what="Kueue objects gone")
        for name in self.node_names:
            kwok.delete_node(kube, name)


@pytest.fixture
def world(env: Env, kueue_proc: kq.Kueue, kwok_proc: kwok.Kwok) -> Iterator[World]:
    w = World(env, kueue_proc, kwok_proc)
    yield w
    w.cleanup()


def _requests_milli(pods: list[dict[str, Any]]) -> dict[str, int]:
    """The summed container requests (milli-units) of ``pods``."""
    total: dict[str, int] = {}
    for p in pods:
        for c in p["spec"]["containers"]:
            for res, q in ((c.get("resources") or {}).get("requests") or {}).items():
                total[res] = total.get(res, 0) + quantity.to_milli(q)
    return total


def _running_on_nodes(pods: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The pods bound and not finished: those that hold room on their node."""
    return [p for p in pods if p["spec"].get("nodeName") and p["status"].get("phase") not in ("Succeeded", "Failed")]


def _scheduled_by_us(env: Env, pod: str) -> bool:
    """Whether the pod's Scheduled event came from custom-scheduler (not some other scheduler)."""
    return any(e.get("reportingController") == "custom-scheduler" for e in env.events("Scheduled", about=pod))


# -- quota: queued beyond it, admitted up to it, the next one admitted as one finishes ----------------
JOBS = [
    kq.JobSpec("gpu-a", "", {"cpu": "1", GPU: "1"}),
    kq.JobSpec("cpu-a", "", {"cpu": "1"}),
    kq.JobSpec("gpu-b", "", {"cpu": "1", GPU: "1"}),
    kq.JobSpec("cpu-b", "", {"cpu": "1"}),
    kq.JobSpec("cpu-c", "", {"cpu": "1"}),
]
QUOTA = {"cpu": "2", GPU: "1"}


def test_kueue_admits_jobs_up_to_quota_and_our_scheduler_places_them_where_the_flavor_says(world: World) -> None:
    env = world.env
    nodes = {world.node("gpu-1", {"cpu": "4", GPU: "2"}), world.node("gpu-2", {"cpu": "4", GPU: "2"})}
    # A roomy kwok node outside the flavor's pool: nothing Kueue admits may land there.
    decoy = f"decoy-{world.suffix}"
    kwok.create_node(env.kube, make_node(decoy).capacity(cpu="16", memory="32Gi", pods="110").obj())
    world.node_names.append(decoy)
    queue = world.queues(QUOTA)
    env.start_scheduler()
    for spec in JOBS:
        world.job(kq.JobSpec(spec.name, queue, spec.requests, run_for="3s"))

    seen_pending = 0
    most_admitted = 0
    ever_held: set[str] = set()
    admitted_into_freed_room = 0

    def observe() -> bool:
        nonlocal seen_pending, most_admitted, admitted_into_freed_room
        wls = world.workloads()
        over = kq.over_quota(kq.usage_milli(wls), QUOTA)
        assert not over, f"Kueue granted beyond quota: {over}"
        live = _running_on_nodes(cluster.list_pods(env.kube, env.namespace))
        on_nodes = kq.over_quota(_requests_milli(live), QUOTA)
        assert not on_nodes, f"running pods beyond quota: {on_nodes}"
        holding = [w for w in wls if kq.holds_quota(w)]
        most_admitted = max(most_admitted, len(holding))
        for w in holding:
            name = w["metadata"]["name"]
            if name not in ever_held and len(ever_held) >= 2:
                # Admitted once the quota had been filled: only a finished Workload made room.
                assert any(kq.condition(x, "Finished") for x in wls), f"{name} admitted with no room freed"
                admitted_into_freed_room += 1
            ever_held.add(name)
        seen_pending = max(seen_pending, sum(1 for w in wls if not kq.condition(w, "QuotaReserved")))
        return all(kq.condition(world.job_obj(s.name), "Complete") for s in JOBS)

    cluster.wait_for(observe, timeout=120, interval=0.3, what=f"every Job to complete\n{world.kueue.log_tail()}")
    # Five Jobs against room for two: some waited, and the quota was filled, never passed.
    assert seen_pending >= len(JOBS) - 2
    assert most_admitted == 2
    assert admitted_into_freed_room == len(JOBS) - 2
    finished = [w for w in world.workloads() if kq.condition(w, "Finished")]
    assert len(finished) == len(JOBS)
    for spec in JOBS:
        (pod,) = world.job_pods(spec.name)
        assert pod["spec"]["schedulerName"] == "custom-scheduler"
        # The Job's template names no node; Kueue's flavor added the selector, and we honoured it.
        assert pod["spec"]["nodeSelector"] == {"pool": world.pool}
        assert pod["spec"]["nodeName"] in nodes
        assert _scheduled_by_us(env, pod["metadata"]["name"])


# -- topology-aware: Kueue's rack assignment, honoured by us -----------------------------------------
def test_topology_aware_assignment_of_kueue_is_honoured(world: World) -> None:
    env = world.env

    def rack(name: str) -> dict[str, str]:
        return {BLOCK: f"b-{world.suffix}", RACK: f"{name}-{world.suffix}"}

    # Rack r1 has one 1-CPU node; r2 has two: only r2 holds a Job of two 1-CPU pods in one rack.
    world.node("r1-n1", {"cpu": "1"}, rack("r1"))
    r2 = {world.node("r2-n1", {"cpu": "1"}, rack("r2")), world.node("r2-n2", {"cpu": "1"}, rack("r2"))}
    queue = world.queues({"cpu": "8"}, topology=[BLOCK, RACK, HOSTNAME])
    env.start_scheduler()
    world.job(kq.JobSpec("tas", queue, {"cpu": "1"}, pods=2, run_for="60s", required_topology=RACK))

    def placed() -> list[dict[str, Any]] | None:
        pods = world.job_pods("tas")
        return pods if len(pods) == 2 and all(p["spec"].get("nodeName") for p in pods) else None

    pods = cluster.wait_for(placed, timeout=60, interval=0.3, what=f"the TAS Job placed\n{world.kueue.log_tail()}")
    (wl,) = world.workloads()
    (psa,) = wl["status"]["admission"]["podSetAssignments"]
    assert psa.get("topologyAssignment"), psa  # Kueue's TAS decided, not just quota
    # Kueue unsuspended the Job with its topology gate in the template and lifted it per pod,
    # leaving each pod a node selector for the node it assigned.
    gates = [g["name"] for g in world.job_obj("tas")["spec"]["template"]["spec"].get("schedulingGates") or []]
    assert kq.TOPOLOGY_GATE in gates
    for p in pods:
        assert not p["spec"].get("schedulingGates")
        assert p["spec"]["nodeSelector"][HOSTNAME] == p["spec"]["nodeName"]
        assert _scheduled_by_us(env, p["metadata"]["name"])
    assert {p["spec"]["nodeName"] for p in pods} == r2


# -- a gang: admitted by Kueue as one Workload, placed all or nothing by us --------------------------
def test_job_with_a_pod_group_is_admitted_by_kueue_and_placed_all_or_nothing(world: World) -> None:
    env = world.env
    g1 = world.node("g1", {"cpu": "2"})
    queue = world.queues({"cpu": "4"})
    env.start_scheduler(GANG_CONFIG)
    group = make_pod_group("gang", env.namespace, min_count=3).obj()
    env.kube.post(f"/apis/{gang.NATIVE_GROUP_VERSION}/namespaces/{env.namespace}/podgroups", group)
    world.job(kq.JobSpec("gang", queue, {"cpu": "1"}, pods=3, run_for="120s", pod_group="gang"))

    cluster.wait_for(
        lambda: (w := world.workloads()) and kq.condition(w[0], "Admitted"), timeout=30, what="the gang admitted"
    )
    # Admitted (3 CPU of the quota's 4), but the pool holds only two: we bind none, not two.
    pods = cluster.wait_for(lambda: len(p := world.job_pods("gang")) == 3 and p, timeout=30, what="3 pods")
    cluster.wait_for(
        lambda: any(env.failed_scheduling(p["metadata"]["name"]) for p in pods),
        timeout=30,
        what="our scheduler to try the gang",
    )
    assert not [p for p in world.job_pods("gang") if p["spec"].get("nodeName")]

    g2 = world.node("g2", {"cpu": "2"})

    # One group cycle commits the three; their bindings are three API calls, so a look between
    # them may see two bound (as with kube-scheduler): wait for the whole gang, not a snapshot.
    def all_bound() -> list[dict[str, Any]] | None:
        bound = [p for p in world.job_pods("gang") if p["spec"].get("nodeName")]
        return bound if len(bound) == 3 else None

    bound = cluster.wait_for(all_bound, timeout=60, interval=0.2, what="the whole gang bound")
    # The Scheduled events are written after the bindings, asynchronously: wait for them.
    cluster.wait_for(
        lambda: all(_scheduled_by_us(env, p["metadata"]["name"]) for p in bound),
        timeout=15,
        what="a Scheduled event from custom-scheduler for each member",
    )
    # Three 1-CPU pods on two 2-CPU nodes: both nodes hold some of the gang.
    assert {p["spec"]["nodeName"] for p in bound} == {g1, g2}
