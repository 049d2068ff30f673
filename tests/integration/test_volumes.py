"""The volume plugins against the real API server and kube-controller-manager's PV binder.

Every claim here goes through the real PV controller: VolumeBinding chooses (and, in PreBind,
writes) the PV or the selected node, and the controller completes the binding that PreBind waits
for. Dynamic provisioning goes through :class:`~custom_scheduler.devenv.provisioner.Provisioner`,
which acts as local-path or a CSI external-provisioner would. StorageClasses and PVs are
cluster-scoped, so their names carry the test's namespace and they are deleted afterwards.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

from custom_scheduler.core.queue import SubQueue
from custom_scheduler.devenv import cluster
from custom_scheduler.devenv.provisioner import Provisioner
from custom_scheduler.kube import api_errors
from custom_scheduler.kube.client import KubeClient
from custom_scheduler.plugins import node_volume_limits, volume_binding, volume_restrictions
from tests.builders import csinode_obj, make_node, make_pod, make_pv, make_pvc, storage_class_obj
from tests.integration.env import Env

SC_PATH = "/apis/storage.k8s.io/v1/storageclasses"
PV_PATH = "/api/v1/persistentvolumes"
VA_PATH = "/apis/storage.k8s.io/v1/volumeattachments"


class Storage:
    """Creates cluster-scoped storage objects for one test and deletes them afterwards."""

    def __init__(self, kube: KubeClient, namespace: str) -> None:
        self.kube = kube
        self.ns = namespace
        self.classes: list[str] = []
        self.pvs: list[str] = []
        self.csinodes: list[str] = []
        self.attachments: list[str] = []

    def storage_class(self, name: str, provisioner: str = "kubernetes.io/no-provisioner", **kw: Any) -> str:
        full = f"{name}-{self.ns}"
        self.kube.post(SC_PATH, storage_class_obj(full, provisioner, **kw))
        self.classes.append(full)
        return full

    def local_pv(self, name: str, node: str, cls: str, size: str = "1Gi", **kw: Any) -> str:
        full = f"{name}-{self.ns}"
        pv = make_pv(full).storage_class(cls).size(size).on_node(node)
        if kw.get("access"):
            pv.access(*kw["access"])
        self.kube.post(PV_PATH, pv.obj())
        self.pvs.append(full)
        return full

    def csi_pv(self, name: str, driver: str, cls: str) -> str:
        full = f"{name}-{self.ns}"
        self.kube.post(PV_PATH, make_pv(full).storage_class(cls).csi(driver, full).obj())
        self.pvs.append(full)
        return full

    def claim(self, name: str, cls: str, size: str = "1Gi", access: tuple[str, ...] = ("ReadWriteOnce",)) -> None:
        obj = make_pvc(name, self.ns).storage_class(cls).size(size).access(*access).obj()
        self.kube.post(f"/api/v1/namespaces/{self.ns}/persistentvolumeclaims", obj)

    def csinode(self, node: str, limits: dict[str, int | None]) -> None:
        self.kube.post("/apis/storage.k8s.io/v1/csinodes", csinode_obj(node, limits))
        self.csinodes.append(node)

    def volume_attachment(self, pv: str, node: str, attacher: str) -> str:
        """A VolumeAttachment of ``pv`` to ``node``, as the attach/detach controller writes one
        (no external attacher runs here, so nothing acts on it or removes it)."""
        name = f"va-{pv}"
        spec = {"attacher": attacher, "nodeName": node, "source": {"persistentVolumeName": pv}}
        self.kube.post(
            VA_PATH,
            {"apiVersion": "storage.k8s.io/v1", "kind": "VolumeAttachment", "metadata": {"name": name}, "spec": spec},
        )
        self.attachments.append(name)
        return name

    def claims(self) -> dict[str, dict[str, Any]]:
        items = self.kube.get(f"/api/v1/namespaces/{self.ns}/persistentvolumeclaims")["items"]
        return {c["metadata"]["name"]: c for c in items}

    def pv(self, name: str) -> dict[str, Any]:
        got: dict[str, Any] = self.kube.get(f"{PV_PATH}/{name}")
        return got

    def cleanup(self) -> None:
        for name in self.attachments:
            with contextlib.suppress(api_errors.KubeError):
                self.kube.delete(f"{VA_PATH}/{name}")
        for name in self.csinodes:
            with contextlib.suppress(api_errors.KubeError):
                self.kube.delete(f"/apis/storage.k8s.io/v1/csinodes/{name}")
        for name in self.pvs:
            with contextlib.suppress(api_errors.KubeError):
                self.kube.delete(f"{PV_PATH}/{name}")
        for name in self.classes:
            with contextlib.suppress(api_errors.KubeError):
                self.kube.delete(f"{SC_PATH}/{name}")


@pytest.fixture
def store(kube: KubeClient, namespace: str) -> Iterator[Storage]:
    s = Storage(kube, namespace)
    yield s
    s.cleanup()


@pytest.fixture
def provisioner(kube: KubeClient) -> Iterator[Provisioner]:
    p = Provisioner(kube).start()
    yield p
    p.stop()


def pv_node(pv: dict[str, Any]) -> str:
    terms = pv["spec"]["nodeAffinity"]["required"]["nodeSelectorTerms"]
    value: str = terms[0]["matchExpressions"][0]["values"][0]
    return value


def statefulset(name: str, cls: str, replicas: int = 3) -> dict[str, Any]:
    template = make_pod(name).label("app", name).obj()
    template["spec"]["containers"][0]["volumeMounts"] = [{"name": "data", "mountPath": "/data"}]
    return {
        "apiVersion": "apps/v1",
        "kind": "StatefulSet",
        "metadata": {"name": name},
        "spec": {
            "serviceName": name,
            "replicas": replicas,
            "podManagementPolicy": "Parallel",
            "selector": {"matchLabels": {"app": name}},
            "template": {"metadata": {"labels": {"app": name}}, "spec": template["spec"]},
            "volumeClaimTemplates": [
                {
                    "metadata": {"name": "data"},
                    "spec": {
                        "accessModes": ["ReadWriteOnce"],
                        "storageClassName": cls,
                        "resources": {"requests": {"storage": "1Gi"}},
                    },
                }
            ],
        },
    }


def wait_statefulset_placed(env: Env, store: Storage, n: int) -> dict[str, str]:
    """Every pod bound and every claim Bound; returns pod → node."""

    def done() -> dict[str, str] | None:
        got = env.placements()
        claims = store.claims()
        ok = len(got) == n and all(got.values()) and len(claims) == n
        ok = ok and all(c.get("status", {}).get("phase") == "Bound" for c in claims.values())
        return got if ok else None

    result: dict[str, str] = cluster.wait_for(done, timeout=60, what="statefulset pods and claims bound")
    return result


# -- 1. StatefulSets ------------------------------------------------------------------------------


def test_statefulset_on_wffc_local_pvs_lands_each_pod_on_its_pvs_node(env: Env, store: Storage) -> None:
    names = [env.node(make_node(f"n{i}")) for i in range(3)]
    cls = store.storage_class("local")
    for i, node in enumerate(names):
        store.local_pv(f"pv{i}", node, cls)
    env.start_scheduler()
    env.kube.post(f"/apis/apps/v1/namespaces/{env.namespace}/statefulsets", statefulset("db", cls))
    placed = wait_statefulset_placed(env, store, 3)
    assert sorted(placed.values()) == sorted(names), "one pod per node: each node has one PV"
    for i in range(3):
        claim = store.claims()[f"data-db-{i}"]
        assert pv_node(store.pv(claim["spec"]["volumeName"])) == placed[f"db-{i}"]


def test_statefulset_with_dynamic_provisioning_through_the_stand_in(
    env: Env, store: Storage, provisioner: Provisioner
) -> None:
    names = {env.node(make_node(f"d{i}")) for i in range(2)}
    cls = store.storage_class("dyn", provisioner.name)
    env.start_scheduler()
    env.kube.post(f"/apis/apps/v1/namespaces/{env.namespace}/statefulsets", statefulset("web", cls))
    placed = wait_statefulset_placed(env, store, 3)
    store.pvs.extend(c["spec"]["volumeName"] for c in store.claims().values())
    assert set(placed.values()) <= names
    for i in range(3):
        claim = store.claims()[f"data-web-{i}"]
        assert claim["metadata"]["annotations"]["volume.kubernetes.io/selected-node"] == placed[f"web-{i}"]
        assert pv_node(store.pv(claim["spec"]["volumeName"])) == placed[f"web-{i}"]


# -- 2. a claim no PV satisfies, until one appears ---------------------------------------------


def test_unsatisfiable_claim_waits_with_upstreams_reason_then_binds_when_a_pv_appears(env: Env, store: Storage) -> None:
    node = env.node(make_node("only"))
    cls = store.storage_class("local")
    store.local_pv("small", node, cls, size="1Gi")
    store.claim("big", cls, size="5Gi")
    app = env.start_scheduler()
    uid = env.create_pod(make_pod("needs-big").pvc("big").obj())["metadata"]["uid"]
    notes = cluster.wait_for(lambda: env.failed_scheduling("needs-big"), timeout=20, what="event")
    assert notes[0] == (
        f"0/1 nodes are available: 1 {volume_binding.ERR_REASON_BIND_CONFLICT}. "
        "preemption: 0/1 nodes are available: 1 Preemption is not helpful for scheduling."
    )
    # The attempt is over and the pod is parked among the unschedulable ones, where only a cluster
    # event that may help (the PV below) moves it: nothing can bind it before that.
    cluster.wait_for(lambda: app.queue.where(uid) is SubQueue.UNSCHEDULABLE, timeout=10, what="pod parked")
    assert env.placements()["needs-big"] == ""
    t0 = time.monotonic()
    store.local_pv("big", node, cls, size="5Gi")
    env.wait_bound("needs-big", timeout=15)
    took = time.monotonic() - t0
    print(f"\nbound {took:.2f}s after the matching PV appeared")
    assert took < 10
    claim = store.claims()["big"]
    assert claim["spec"]["volumeName"] == f"big-{env.namespace}"


# -- 3. a burst of 50 ---------------------------------------------------------------------------


def test_burst_of_50_wffc_claims_against_50_pvs(env: Env, store: Storage) -> None:
    names = [env.node(make_node(f"b{i}").capacity(cpu="64", memory="128Gi", pods="200")) for i in range(5)]
    cls = store.storage_class("local")
    for i in range(50):
        store.local_pv(f"pv{i:02d}", names[i % 5], cls)
        store.claim(f"c{i:02d}", cls)
    app = env.start_scheduler()
    pending_max = [0]
    stop = threading.Event()

    def sample() -> None:
        while not stop.wait(0.02):
            pending_max[0] = max(pending_max[0], app.volumes.pending_waits())

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    t0 = time.monotonic()
    for i in range(50):
        env.create_pod(make_pod(f"vol-{i:02d}").pvc(f"c{i:02d}").obj())
    for i in range(20):
        env.create_pod(make_pod(f"plain-{i:02d}").obj())

    plain_done: list[float] = []

    def all_bound() -> bool:
        got = env.placements()
        if not plain_done and all(got.get(f"plain-{i:02d}") for i in range(20)):
            plain_done.append(time.monotonic() - t0)
        return len(got) == 70 and all(got.values())

    cluster.wait_for(all_bound, timeout=120, interval=0.2, what="70 pods bound")
    total = time.monotonic() - t0
    stop.set()
    sampler.join()
    claims = store.claims()
    volumes = [c["spec"].get("volumeName") for c in claims.values()]
    assert all(c.get("status", {}).get("phase") == "Bound" for c in claims.values())
    assert len(set(volumes)) == 50, "no PV assigned twice"
    got = env.placements()
    for i in range(50):
        pv = store.pv(claims[f"c{i:02d}"]["spec"]["volumeName"])
        assert pv["spec"]["claimRef"]["name"] == f"c{i:02d}"
        assert pv_node(pv) == got[f"vol-{i:02d}"]
    assert app.volumes.assumed() == ([], [])
    print(
        f"\n50 volume pods + 20 plain pods bound in {total:.2f}s; plain pods all bound after {plain_done[0]:.2f}s; "
        f"up to {pending_max[0]} PreBind waits pending at once (binding pool: 16 threads)"
    )
    # The scheduling thread went on while PreBinds waited: the plain pods, created after the 50,
    # were all bound before the last volume pod, and more waits were pending than pool threads.
    assert plain_done[0] < total
    assert pending_max[0] > 16


# -- 4. ReadWriteOncePod and CSINode limits -------------------------------------------------------


def test_rwop_claim_refuses_a_second_pod(env: Env, store: Storage) -> None:
    node = env.node(make_node("rwop"))
    cls = store.storage_class("local")
    store.local_pv("solo", node, cls, access=("ReadWriteOncePod",))
    store.claim("solo", cls, access=("ReadWriteOncePod",))
    env.start_scheduler()
    env.create_pod(make_pod("first").pvc("solo").obj())
    env.wait_bound("first")
    env.create_pod(make_pod("second").pvc("solo").obj())
    notes = cluster.wait_for(lambda: env.failed_scheduling("second"), timeout=20, what="event")
    assert f"1 {volume_restrictions.ERR_REASON_READ_WRITE_ONCE_POD_CONFLICT}" in notes[0]
    assert env.placements()["second"] == ""


def test_csinode_limit_sends_the_third_volume_elsewhere(env: Env, store: Storage) -> None:
    driver = "csi.test.example.com"
    small = env.node(make_node("small"))
    other = env.node(make_node("other"))
    store.csinode(small, {driver: 2})
    store.csinode(other, {driver: 2})
    cls = store.storage_class("csi", wffc=False)  # Immediate: the PV binder binds the claims at once
    for i in range(3):
        store.csi_pv(f"v{i}", driver, cls)
        store.claim(f"c{i}", cls)
    cluster.wait_for(
        lambda: all(c.get("status", {}).get("phase") == "Bound" for c in store.claims().values()),
        timeout=30,
        what="claims bound by the PV controller",
    )
    env.start_scheduler()
    prefer_small = {"matchExpressions": [{"key": "kubernetes.io/hostname", "operator": "In", "values": [small]}]}
    for i in range(3):
        env.create_pod(make_pod(f"p{i}").pvc(f"c{i}").preferred_node_affinity(100, prefer_small).obj())
        env.wait_bound(f"p{i}")
    got = env.placements()
    assert (got["p0"], got["p1"], got["p2"]) == (small, small, other)


def test_volume_attachment_without_a_pod_holds_the_nodes_only_slot_until_deleted(env: Env, store: Storage) -> None:
    """A volume still attached to the node (a VolumeAttachment, no pod using it, as while a deleted
    pod's volume detaches) takes the driver's one slot: a pod with another volume of that driver
    is refused with upstream's reason; deleting the attachment requeues it and it binds there."""
    driver = "csi.test.example.com"
    node = env.node(make_node("attached"))
    store.csinode(node, {driver: 1})
    cls = store.storage_class("csi", wffc=False)  # Immediate: the PV binder binds the claim at once
    held = store.csi_pv("held", driver, cls)
    store.csi_pv("fresh", driver, cls)
    store.claim("fresh", cls)
    cluster.wait_for(
        lambda: store.claims()["fresh"].get("status", {}).get("phase") == "Bound",
        timeout=30,
        what="claim bound by the PV controller",
    )
    va = store.volume_attachment(held, node, driver)
    env.start_scheduler()
    env.create_pod(make_pod("late").pvc("fresh").obj())
    notes = cluster.wait_for(lambda: env.failed_scheduling("late"), timeout=20, what="event")
    assert f"1 {node_volume_limits.ERR_REASON_MAX_VOLUME_COUNT_EXCEEDED}" in notes[0]
    assert env.placements()["late"] == ""
    env.kube.delete(f"{VA_PATH}/{va}")
    # No pod or node changes: only the VolumeAttachmentDelete event can bring it back before the
    # 5-minute flush of unschedulable pods.
    assert env.wait_bound("late", timeout=20)["late"] == node


# -- 5. a PreBind that times out ----------------------------------------------------------------

SHORT_BIND_TIMEOUT = """
apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
leaderElection: {leaderElect: false}
profiles:
- schedulerName: custom-scheduler
  pluginConfig:
  - name: VolumeBinding
    args: {bindTimeoutSeconds: 2}
"""


def test_pre_bind_timeout_rolls_back_and_the_pod_is_retried(env: Env, store: Storage) -> None:
    """No provisioner serves the class at first: PreBind's wait times out, the reservation is
    undone (nothing left assumed, the pod not bound) and the pod retried; once the provisioner
    runs, a retry binds it."""
    node = env.node(make_node("slow"))
    name = "custom-scheduler.test/late-provisioner"
    cls = store.storage_class("late", name)
    store.claim("data", cls)
    app = env.start_scheduler(SHORT_BIND_TIMEOUT)
    env.create_pod(make_pod("waits").pvc("data").obj())

    def timed_out() -> str:
        pod = env.pod("waits")
        for c in pod.get("status", {}).get("conditions") or ():
            if c["type"] == "PodScheduled" and "context deadline exceeded" in c.get("message", ""):
                return str(c["message"])
        return ""

    message = cluster.wait_for(timed_out, timeout=30, what="PreBind timeout reported")
    assert message == "running PreBind plugin 'VolumeBinding': binding volumes: context deadline exceeded"
    assert env.placements()["waits"] == ""
    assert not app.cache.is_assumed(env.pod("waits")["metadata"]["uid"])
    cluster.wait_for(lambda: app.volumes.assumed() == ([], []), timeout=5, what="nothing left assumed")
    claim = store.claims()["data"]
    assert claim["metadata"]["annotations"]["volume.kubernetes.io/selected-node"] == node  # no API rollback
    late = Provisioner(env.kube, name).start()
    try:
        env.wait_bound("waits", timeout=40)  # on a retry
    finally:
        late.stop()
    store.pvs.extend(late.provisioned)
    assert env.placements()["waits"] == node
