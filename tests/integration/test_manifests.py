"""manifests/, the Dockerfile and the RBAC, checked by the real API server and the real kubectl.

- The API server accepts every object (server-side dry run: admission, validation, defaults).
- The files agree with each other and with the daemon: the ConfigMap's config validates, the
  Deployment mounts it where ``--config`` points, probes hit ``healthzBindAddress``'s port, the
  Role's Lease name is the config's ``resourceName``.
- RBAC is proven by acting as ``system:serviceaccount:kube-system:custom-scheduler`` (a token user
  of the test control plane): everything the scheduler does works, and what it must not do is 403.
"""

from __future__ import annotations

import contextlib
import re
import shutil
import subprocess
import sys
import uuid
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import yaml

from custom_scheduler import config
from custom_scheduler.devenv import cluster
from custom_scheduler.devenv.controlplane import REPO_ROOT, ControlPlane
from custom_scheduler.kube import api_errors
from custom_scheduler.kube.client import STRATEGIC_PATCH_CT, KubeClient, pod_path
from custom_scheduler.plugins.builtin import full_registry
from custom_scheduler.server import leader
from tests import kubectl as k
from tests.builders import make_node, make_pod, make_pod_group
from tests.integration.env import Env

# -- the files agree with each other ------------------------------------------------------------


def _docs(name: str) -> list[dict[str, Any]]:
    return k.load_docs(k.manifest(name).read_text())


def _deployment() -> dict[str, Any]:
    (dep,) = _docs("deployment.yaml")
    return dep


def test_configmap_holds_a_valid_scheduler_config(tmp_path: Path) -> None:
    """The ConfigMap's scheduler-config.yaml passes ``check-config`` and enables leader election."""
    text = k.scheduler_config_text()
    path = tmp_path / "scheduler-config.yaml"
    path.write_text(text)
    proc = subprocess.run(
        [sys.executable, "-m", "custom_scheduler", "check-config", str(path)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    cfg = config.load_config(text, full_registry())
    assert cfg.leader_election.leader_elect
    assert cfg.leader_election.resource_name == "custom-scheduler"
    assert cfg.leader_election.resource_namespace == "kube-system"
    assert cfg.client_connection.kubeconfig == "", "in-cluster credentials"
    assert [p.scheduler_name for p in cfg.profiles] == ["custom-scheduler"]


def test_deployment_runs_the_configmap_config_and_probes_the_health_port() -> None:
    """``--config`` points into the mounted ConfigMap; probes use healthzBindAddress's port over HTTPS."""
    cfg = config.load_config(k.scheduler_config_text(), full_registry())
    port = int(cfg.healthz_bind_address.rpartition(":")[2])
    spec = _deployment()["spec"]["template"]["spec"]
    (container,) = spec["containers"]
    config_arg = next(a for a in container["args"] if a.startswith("--config="))
    config_path = Path(config_arg.split("=", 1)[1])
    mount = next(m for m in container["volumeMounts"] if m["name"] == "config")
    volume = next(v for v in spec["volumes"] if v["name"] == "config")
    assert str(config_path.parent) == mount["mountPath"]
    assert volume["configMap"]["name"] == "custom-scheduler-config"
    assert {"key": "scheduler-config.yaml", "path": config_path.name} in volume["configMap"]["items"]
    assert container["args"][0] == "run"
    for probe, path in (("livenessProbe", "/healthz"), ("readinessProbe", "/readyz")):
        get = container[probe]["httpGet"]
        assert (get["path"], get["port"], get["scheme"]) == (path, port, "HTTPS")


def test_deployment_is_hardened_and_highly_available() -> None:
    """2 replicas, critical priority, non-root, read-only root, no capabilities, RuntimeDefault seccomp."""
    dep = _deployment()
    spec = dep["spec"]["template"]["spec"]
    (container,) = spec["containers"]
    sc = container["securityContext"]
    assert dep["metadata"]["namespace"] == "kube-system"
    assert dep["spec"]["replicas"] == 2
    assert spec["serviceAccountName"] == "custom-scheduler"
    assert spec["priorityClassName"] == "system-cluster-critical"
    assert spec["securityContext"]["runAsNonRoot"] is True
    assert spec["securityContext"]["runAsUser"] != 0
    assert spec["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    assert sc["readOnlyRootFilesystem"] is True
    assert sc["allowPrivilegeEscalation"] is False
    assert sc["capabilities"]["drop"] == ["ALL"]
    assert container["image"] == "custom-scheduler:0.1.0"
    for kind in ("requests", "limits"):
        assert {"cpu", "memory"} <= set(container["resources"][kind])
    (pdb,) = _docs("pdb.yaml")
    assert pdb["apiVersion"] == "policy/v1"
    assert pdb["spec"]["minAvailable"] == 1
    assert pdb["spec"]["selector"]["matchLabels"] == dep["spec"]["selector"]["matchLabels"]


def test_lease_rbac_names_the_configured_lease() -> None:
    """The Role's get/update resourceNames and namespace match leaderElection in the ConfigMap."""
    le = config.load_config(k.scheduler_config_text(), full_registry()).leader_election
    role = next(d for d in _docs("rbac.yaml") if d["kind"] == "Role")
    assert role["metadata"]["namespace"] == le.resource_namespace
    named = [r for r in role["rules"] if r.get("resourceNames")]
    assert named == [
        {
            "apiGroups": ["coordination.k8s.io"],
            "resources": ["leases"],
            "resourceNames": [le.resource_name],
            "verbs": ["get", "update"],
        }
    ]


def test_sample_pod_asks_for_custom_scheduler() -> None:
    (pod,) = _docs("sample-pod.yaml")
    assert pod["spec"]["schedulerName"] == "custom-scheduler"


# -- the API server accepts them ------------------------------------------------------------------


def test_kubectl_apply_k_is_accepted_by_the_api_server(control_plane: ControlPlane) -> None:
    """``kubectl apply -k manifests/ --dry-run=server`` creates every object (dry run)."""
    expected = {(d["kind"], d["metadata"]["name"]) for d in k.rendered_manifests(control_plane)}
    assert {kind for kind, _ in expected} == {
        "ServiceAccount",
        "ClusterRole",
        "ClusterRoleBinding",
        "Role",
        "RoleBinding",
        "ConfigMap",
        "Deployment",
        "Service",
        "PodDisruptionBudget",
    }
    proc = k.kubectl(control_plane, "apply", "-k", str(k.MANIFESTS), "--dry-run=server", check=False)
    assert proc.returncode == 0, proc.stderr
    applied = set(re.findall(r"^([\w.]+)/(\S+) \w+ \(server dry run\)$", proc.stdout, flags=re.MULTILINE))
    applied_kinds = {(kind.split(".", 1)[0], name) for kind, name in applied}
    assert len(applied_kinds) == len(expected), proc.stdout
    assert ("poddisruptionbudget", "custom-scheduler") in applied_kinds  # policy/v1, whole


def test_system_cluster_critical_priority_class_exists(kube: KubeClient) -> None:
    """The Deployment's priorityClassName is one the API server creates at start-up."""
    pc = kube.get("/apis/scheduling.k8s.io/v1/priorityclasses/system-cluster-critical")
    assert pc["value"] == 2000000000


def test_sample_pod_is_accepted(control_plane: ControlPlane) -> None:
    out = k.kubectl(control_plane, "apply", "-f", str(k.manifest("sample-pod.yaml")), "--dry-run=server").stdout
    assert "pod/custom-scheduler-sample created (server dry run)" in out


# -- RBAC, proven by acting as the ServiceAccount -------------------------------------------------


@pytest.fixture
def as_scheduler(control_plane: ControlPlane, kube: KubeClient) -> Iterator[KubeClient]:
    """A client authenticated as the scheduler's ServiceAccount, with manifests' RBAC applied."""
    k.apply_rbac(control_plane)
    client = KubeClient.from_kubeconfig(str(control_plane.kubeconfig(k.SCHEDULER_USER)), qps=0, burst=1)
    yield client
    client.close()


def _forbidden(call: Callable[[], Any]) -> None:
    with pytest.raises(api_errors.ApiError) as exc:
        call()
    assert exc.value.status == 403, exc.value


def _can(kube: KubeClient, verb: str, resource: str, *, group: str = "", namespace: str = "", sub: str = "") -> bool:
    """SelfSubjectAccessReview: may the caller do ``verb`` on ``resource``? (for verbs like watch)."""
    attrs = {"verb": verb, "resource": resource, "group": group, "namespace": namespace, "subresource": sub}
    review = kube.post(
        "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews",
        {
            "apiVersion": "authorization.k8s.io/v1",
            "kind": "SelfSubjectAccessReview",
            "spec": {"resourceAttributes": {k_: v for k_, v in attrs.items() if v}},
        },
    )
    return bool(review["status"].get("allowed"))


def test_service_account_can_do_what_the_scheduler_does(as_scheduler: KubeClient, env: Env) -> None:
    """List/watch pods, nodes, namespaces and PDBs; bind; patch pod status; events; delete (preempt)."""
    sa = as_scheduler
    pdb_group = "policy/v1"
    for path in ("/api/v1/pods", "/api/v1/nodes", "/api/v1/namespaces", f"/apis/{pdb_group}/poddisruptionbudgets"):
        assert "items" in sa.get(path, {"limit": 1}), path
    for resource, group in (("pods", ""), ("nodes", ""), ("namespaces", ""), ("poddisruptionbudgets", "policy")):
        assert _can(sa, "watch", resource, group=group), resource
    assert _can(sa, "list", "nodes", group="metrics.k8s.io")

    node = env.nodes(make_node("rbac").capacity(cpu="2", memory="4Gi", pods="10"))
    node_name = node["metadata"]["name"]

    # Bind through pods/binding.
    pod = env.create_pod(make_pod("bind-me").scheduler("custom-scheduler").obj())
    cluster.bind(sa, env.namespace, "bind-me", node_name, uid=pod["metadata"]["uid"])
    assert env.pod("bind-me")["spec"]["nodeName"] == node_name

    # Report a failure: PodScheduled=False on pods/status.
    env.create_pod(make_pod("unschedulable").scheduler("custom-scheduler").obj())
    condition = {
        "type": "PodScheduled",
        "status": "False",
        "reason": "Unschedulable",
        "message": "0/1 nodes are available: 1 Insufficient cpu.",
    }
    sa.patch(
        pod_path(env.namespace, "unschedulable", "status"), {"status": {"conditions": [condition]}}, STRATEGIC_PATCH_CT
    )
    conditions = env.pod("unschedulable")["status"]["conditions"]
    assert any(c["type"] == "PodScheduled" and c["reason"] == "Unschedulable" for c in conditions)

    # Events: events.k8s.io create + patch (series), and core/v1 create.
    now = leader.microtime(datetime.now(UTC))
    event = {
        "apiVersion": "events.k8s.io/v1",
        "kind": "Event",
        "metadata": {"name": f"unschedulable.{uuid.uuid4().hex[:8]}", "namespace": env.namespace},
        "eventTime": now,
        "reportingController": "custom-scheduler",
        "reportingInstance": "custom-scheduler-test",
        "action": "Scheduling",
        "reason": "FailedScheduling",
        "type": "Warning",
        "note": "0/1 nodes are available: 1 Insufficient cpu.",
        "regarding": {"apiVersion": "v1", "kind": "Pod", "namespace": env.namespace, "name": "unschedulable"},
    }
    created = sa.post(f"/apis/events.k8s.io/v1/namespaces/{env.namespace}/events", event)
    sa.patch(
        f"/apis/events.k8s.io/v1/namespaces/{env.namespace}/events/{created['metadata']['name']}",
        {"series": {"count": 2, "lastObservedTime": now}},
    )
    sa.post(
        f"/api/v1/namespaces/{env.namespace}/events",
        {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"name": f"core.{uuid.uuid4().hex[:8]}", "namespace": env.namespace},
            "involvedObject": {"apiVersion": "v1", "kind": "Pod", "namespace": env.namespace, "name": "unschedulable"},
            "reason": "FailedScheduling",
            "message": "0/1 nodes are available.",
            "type": "Warning",
            "source": {"component": "custom-scheduler"},
        },
    )

    # Preemption deletes victims.
    sa.delete(pod_path(env.namespace, "unschedulable"))


def test_service_account_reads_storage_and_updates_only_pvs_and_pvcs(
    as_scheduler: KubeClient, kube: KubeClient, namespace: str
) -> None:
    """The volume plugins: list/watch PVs, PVCs, StorageClasses, CSINodes, CSIDrivers,
    CSIStorageCapacities and VolumeAttachments; update a PV (claimRef) and a PVC (selected-node);
    nothing else."""
    sa = as_scheduler
    for path in (
        "/api/v1/persistentvolumes",
        "/api/v1/persistentvolumeclaims",
        "/apis/storage.k8s.io/v1/storageclasses",
        "/apis/storage.k8s.io/v1/csinodes",
        "/apis/storage.k8s.io/v1/csidrivers",
        "/apis/storage.k8s.io/v1/csistoragecapacities",
        "/apis/storage.k8s.io/v1/volumeattachments",
    ):
        assert "items" in sa.get(path, {"limit": 1}), path
    for resource, group in (
        ("persistentvolumes", ""),
        ("persistentvolumeclaims", ""),
        ("storageclasses", "storage.k8s.io"),
        ("csinodes", "storage.k8s.io"),
        ("csidrivers", "storage.k8s.io"),
        ("csistoragecapacities", "storage.k8s.io"),
        ("volumeattachments", "storage.k8s.io"),
    ):
        assert _can(sa, "watch", resource, group=group), resource
    name = f"rbac-pv-{uuid.uuid4().hex[:6]}"
    pv = kube.post(
        "/api/v1/persistentvolumes",
        {
            "apiVersion": "v1",
            "kind": "PersistentVolume",
            "metadata": {"name": name},
            "spec": {
                "capacity": {"storage": "1Gi"},
                "accessModes": ["ReadWriteOnce"],
                "storageClassName": "rbac-none",
                "hostPath": {"path": "/tmp/rbac"},
            },
        },
    )
    pvc = kube.post(
        f"/api/v1/namespaces/{namespace}/persistentvolumeclaims",
        {
            "apiVersion": "v1",
            "kind": "PersistentVolumeClaim",
            "metadata": {"name": "claim"},
            "spec": {
                "accessModes": ["ReadWriteOnce"],
                "storageClassName": "rbac-none",
                "resources": {"requests": {"storage": "2Gi"}},  # bigger than the PV: the PV binder leaves both
            },
        },
    )
    pvc_path = f"/api/v1/namespaces/{namespace}/persistentvolumeclaims/claim"
    try:
        pvc = kube.get(pvc_path)
        pvc["metadata"].setdefault("annotations", {})["volume.kubernetes.io/selected-node"] = "somewhere"
        sa.put(pvc_path, pvc)
        pv = kube.get(f"/api/v1/persistentvolumes/{name}")
        pv["spec"]["claimRef"] = {"namespace": namespace, "name": "claim", "uid": pvc["metadata"]["uid"]}
        sa.put(f"/api/v1/persistentvolumes/{name}", pv)
        _forbidden(lambda: sa.delete(f"/api/v1/persistentvolumes/{name}"))
        _forbidden(lambda: sa.post(f"/api/v1/namespaces/{namespace}/persistentvolumeclaims", pvc))
        _forbidden(lambda: sa.patch(pvc_path, {}))
        assert not _can(sa, "create", "persistentvolumes")
        assert not _can(sa, "update", "storageclasses", group="storage.k8s.io")
        for verb in ("get", "create", "update", "patch", "delete"):
            assert not _can(sa, verb, "volumeattachments", group="storage.k8s.io"), verb
        assert not _can(sa, "update", "volumeattachments", group="storage.k8s.io", sub="status")
    finally:
        kube.delete(f"/api/v1/persistentvolumes/{name}")


def test_service_account_reads_dra_objects_and_writes_only_claims(
    as_scheduler: KubeClient, kube: KubeClient, namespace: str
) -> None:
    """DynamicResources: list/watch ResourceSlices and DeviceClasses; get/list/watch ResourceClaims,
    update one (PreBind's finalizer) and its status (allocation, reservedFor), create and delete
    one (the special claim of extended resources backed by DRA); nothing else."""
    sa = as_scheduler
    api = "/apis/resource.k8s.io/v1"
    for path in (f"{api}/resourceslices", f"{api}/deviceclasses", f"{api}/resourceclaims"):
        assert "items" in sa.get(path, {"limit": 1}), path
    for resource in ("resourceslices", "deviceclasses", "resourceclaims"):
        assert _can(sa, "watch", resource, group="resource.k8s.io"), resource
    claims = f"{api}/namespaces/{namespace}/resourceclaims"
    exactly = {"deviceClassName": "rbac-none"}
    kube.post(
        claims, {"metadata": {"name": "c"}, "spec": {"devices": {"requests": [{"name": "r", "exactly": exactly}]}}}
    )
    claim = sa.get(f"{claims}/c")
    claim["metadata"]["finalizers"] = ["resource.kubernetes.io/delete-protection"]
    claim = sa.put(f"{claims}/c", claim)
    claim["status"] = {"reservedFor": []}
    sa.put(f"{claims}/c/status", claim)
    _forbidden(lambda: sa.patch(f"{claims}/c/status", {}))
    extended = sa.post(
        claims, {"metadata": {"name": "ext"}, "spec": {"devices": {"requests": [{"name": "r", "exactly": exactly}]}}}
    )
    assert extended["metadata"]["name"] == "ext"
    sa.delete(f"{claims}/ext")
    for verb in ("get", "create", "update", "patch", "delete"):
        assert not _can(sa, verb, "resourceslices", group="resource.k8s.io"), verb
        assert not _can(sa, verb, "deviceclasses", group="resource.k8s.io"), verb
    assert not _can(sa, "create", "resourceclaimtemplates", group="resource.k8s.io", namespace=namespace)
    assert not _can(sa, "list", "resourceclaimtemplates", group="resource.k8s.io")
    claim = kube.get(f"{claims}/c")
    claim["metadata"]["finalizers"] = []
    kube.put(f"{claims}/c", claim)


def test_service_account_reads_pod_groups_and_writes_their_status_and_reservation(
    as_scheduler: KubeClient, kube: KubeClient, namespace: str
) -> None:
    """GangScheduling: get/list/watch PodGroups of both APIs (scheduling.k8s.io/v1beta1 and
    scheduler-plugins' scheduling.x-k8s.io CRD), patch their status, and patch the PodGroup for the
    reservation annotation (the status subresource resets metadata); no create, update or delete."""
    sa = as_scheduler
    groups = f"/apis/scheduling.k8s.io/v1beta1/namespaces/{namespace}/podgroups"
    assert "items" in sa.get("/apis/scheduling.k8s.io/v1beta1/podgroups", {"limit": 1})
    kube.post(groups, make_pod_group("g", namespace, min_count=2).obj())
    assert sa.get(f"{groups}/g")["spec"]["schedulingPolicy"]["gang"]["minCount"] == 2
    cond = {"type": "PodGroupInitiallyScheduled", "status": "False", "reason": "Unschedulable", "message": "x"}
    cond["lastTransitionTime"] = "2025-01-01T00:00:00Z"
    sa.patch(f"{groups}/g/status", {"status": {"conditions": [cond]}}, content_type=STRATEGIC_PATCH_CT)
    sa.patch(f"{groups}/g", {"metadata": {"annotations": {"custom-scheduler.io/reservation": "{}"}}})
    _forbidden(lambda: sa.put(f"{groups}/g", kube.get(f"{groups}/g")))
    _forbidden(lambda: sa.delete(f"{groups}/g"))
    _forbidden(lambda: sa.post(groups, make_pod_group("h", namespace).obj()))
    for group in ("scheduling.k8s.io", "scheduling.x-k8s.io"):
        for verb in ("get", "list", "watch"):
            assert _can(sa, verb, "podgroups", group=group), (group, verb)
        for verb in ("patch", "update"):
            assert _can(sa, verb, "podgroups", group=group, namespace=namespace, sub="status"), (group, verb)
        assert _can(sa, "patch", "podgroups", group=group, namespace=namespace), group
        for verb in ("create", "update", "delete"):
            assert not _can(sa, verb, "podgroups", group=group, namespace=namespace), (group, verb)
    assert not _can(sa, "list", "workloads", group="scheduling.k8s.io")


def test_service_account_holds_its_own_lease(as_scheduler: KubeClient, kube: KubeClient) -> None:
    """The elector, running as the ServiceAccount, creates, renews and releases kube-system/custom-scheduler."""
    cfg = config.load_config(k.scheduler_config_text(), full_registry()).leader_election
    path = leader.lease_path(cfg.resource_namespace, cfg.resource_name)
    with contextlib.suppress(api_errors.NotFound):
        kube.delete(path)
    elector = leader.LeaderElector(as_scheduler, cfg, "rbac-test")
    try:
        assert elector.try_acquire_or_renew(), "create"
        assert elector.try_acquire_or_renew(), "renew (update)"
        assert as_scheduler.get(path)["spec"]["holderIdentity"] == "rbac-test", "get"
        assert elector.release()
        assert as_scheduler.get(path)["spec"].get("holderIdentity", "") == ""
    finally:
        with contextlib.suppress(api_errors.NotFound):
            kube.delete(path)


def test_service_account_is_refused_everything_else(as_scheduler: KubeClient, kube: KubeClient, namespace: str) -> None:
    """Secrets, other Leases, Leases elsewhere, writing nodes or creating pods: all 403."""
    sa = as_scheduler
    _forbidden(lambda: sa.get("/api/v1/namespaces/kube-system/secrets"))
    _forbidden(lambda: sa.get("/api/v1/secrets"))
    _forbidden(lambda: sa.get("/api/v1/namespaces/default/configmaps"))  # kube-system: the decision ring

    other = leader.lease_path("kube-system", f"not-ours-{uuid.uuid4().hex[:6]}")
    lease = {
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": {"name": other.rsplit("/", 1)[1], "namespace": "kube-system"},
        "spec": {"holderIdentity": "someone", "leaseDurationSeconds": 15},
    }
    created = kube.post(leader.lease_path("kube-system"), lease)
    try:
        _forbidden(lambda: sa.get(other))
        takeover = {**created, "spec": {**created["spec"], "holderIdentity": "custom-scheduler"}}
        _forbidden(lambda: sa.put(other, takeover))
    finally:
        kube.delete(other)
    _forbidden(lambda: sa.get(leader.lease_path("kube-system", "kube-scheduler")))
    elsewhere = {**lease, "metadata": {"name": "custom-scheduler", "namespace": namespace}}
    _forbidden(lambda: sa.post(leader.lease_path(namespace), elsewhere))

    _forbidden(lambda: sa.patch("/api/v1/nodes/any", {"metadata": {"labels": {"x": "y"}}}))
    _forbidden(lambda: sa.post(pod_path(namespace), make_pod("sneaky", namespace).obj()))
    assert not _can(sa, "delete", "nodes")
    assert not _can(sa, "update", "pods")


# -- the Dockerfile -------------------------------------------------------------------------------


def _final_stage(dockerfile: str) -> str:
    stages = re.split(r"^FROM ", dockerfile, flags=re.MULTILINE)
    return "FROM " + stages[-1]


def test_dockerfile_is_multi_stage_slim_and_non_root() -> None:
    """Builder makes wheels; the final python:3.11-slim stage installs only them and runs as non-root."""
    text = (REPO_ROOT / "Dockerfile").read_text()
    froms = re.findall(r"^FROM (\S+)", text, flags=re.MULTILINE)
    # Both stages from one base, chosen by a build argument (hack/image.sh passes a Debian base it
    # makes; the default is the public image, pinned by digest).
    assert froms == ["${BASE}", "${BASE}"]
    (base,) = re.findall(r"^ARG BASE=(\S+)", text, flags=re.MULTILINE)
    assert re.fullmatch(r"docker\.io/library/python:3\.11-slim-bookworm@sha256:[0-9a-f]{64}", base)
    final = _final_stage(text)
    assert "pip wheel" in text.split("FROM ")[1]
    assert "--no-index" in final
    assert re.search(r"^USER 65532", final, flags=re.MULTILINE)
    assert 'ENTRYPOINT ["custom-scheduler"]' in final
    for tool in ("apt-get", "gcc", "build-essential", "COPY . ."):
        assert tool not in final, f"{tool} in the final stage"
    assert _deployment()["spec"]["template"]["spec"]["securityContext"]["runAsUser"] == 65532
    ignore = (REPO_ROOT / ".dockerignore").read_text().split()
    assert ignore[ignore.index("*") :][:4] == ["*", "!pyproject.toml", "!README.md", "!custom_scheduler/"]


def test_image_install_steps_work_in_a_clean_venv(tmp_path: Path) -> None:
    """What the Dockerfile does, minus the container: locked wheels, our wheel, the entrypoint.

    No container runtime runs here, so this repeats the two stages: copy only what .dockerignore
    lets into the build context; download every dependency from ``requirements.lock`` with
    ``--require-hashes --only-binary=:all:``; build our wheel with the build backend from
    ``requirements-build.lock`` (no build isolation); install the lock offline into a fresh venv,
    then our wheel with ``--no-deps``; ``pip check`` proves the lock is complete; then run
    ``custom-scheduler check-config`` on the ConfigMap's config through the console script.
    """
    context = tmp_path / "context"
    context.mkdir()
    for name in ("pyproject.toml", "README.md", "requirements.lock", "requirements-build.lock"):
        shutil.copy2(REPO_ROOT / name, context / name)
    shutil.copytree(
        REPO_ROOT / "custom_scheduler", context / "custom_scheduler", ignore=shutil.ignore_patterns("__pycache__")
    )
    wheels = tmp_path / "wheels"

    def run(*argv: object) -> subprocess.CompletedProcess[str]:
        return subprocess.run([str(a) for a in argv], capture_output=True, text=True, timeout=600, check=False)

    locked = ("--require-hashes", "--no-deps", "--only-binary=:all:")
    builder = tmp_path / "builder"
    assert run(sys.executable, "-m", "venv", builder).returncode == 0
    downloaded = run(
        builder / "bin" / "python",
        "-m",
        "pip",
        "download",
        *locked,
        "--dest",
        wheels,
        "-r",
        context / "requirements.lock",
    )
    assert downloaded.returncode == 0, downloaded.stderr[-3000:]
    backend = run(
        builder / "bin" / "python", "-m", "pip", "install", *locked, "-r", context / "requirements-build.lock"
    )
    assert backend.returncode == 0, backend.stderr[-3000:]
    built = run(
        builder / "bin" / "python",
        "-m",
        "pip",
        "wheel",
        "--no-deps",
        "--no-build-isolation",
        "--wheel-dir",
        wheels,
        context,
    )
    assert built.returncode == 0, built.stderr[-3000:]
    (wheel,) = wheels.glob("custom_scheduler-*.whl")
    venv = tmp_path / "venv"
    made = run(sys.executable, "-m", "venv", venv)
    assert made.returncode == 0, made.stderr
    pip = (venv / "bin" / "python", "-m", "pip")
    offline = ("--no-index", f"--find-links={wheels}")
    installed = run(
        *pip, "install", "--quiet", *offline, "--require-hashes", "--no-deps", "-r", context / "requirements.lock"
    )
    assert installed.returncode == 0, installed.stderr[-3000:]
    ours = run(*pip, "install", "--quiet", *offline, "--no-deps", wheel)
    assert ours.returncode == 0, ours.stderr[-3000:]
    checked_deps = run(*pip, "check")
    assert checked_deps.returncode == 0, checked_deps.stdout
    entrypoint = venv / "bin" / "custom-scheduler"
    assert entrypoint.exists()
    cfg = tmp_path / "scheduler-config.yaml"
    cfg.write_text(k.scheduler_config_text())
    checked = run(entrypoint, "check-config", cfg)
    assert checked.returncode == 0, checked.stderr
    assert yaml.safe_load(checked.stdout)["leaderElection"]["leaderElect"] is True
    # The metrics, health and serving modules import in the installed package (their dependencies,
    # prometheus-client and cryptography, came from the lock), and a self-signed pair can be made.
    imported = run(
        venv / "bin" / "python",
        "-c",
        "import custom_scheduler.server.health, custom_scheduler.server.leader, custom_scheduler.server.serving as s;"
        " s.ServingCerts.self_signed()",
    )
    assert imported.returncode == 0, imported.stderr


# -- secure serving and the supply chain (issue 19) -------------------------------------------------


def test_service_and_service_monitor_select_the_scheduler_pods() -> None:
    """The headless Service's selector and port name are what the pods have and the ServiceMonitor
    scrapes (https, /metrics, the port name, with the token of a service-account-token Secret of the
    Prometheus's ServiceAccount beside it, bound to the metrics-reader role); the Deployment names
    the port the same way."""
    (svc,) = _docs("service.yaml")
    secret, binding, monitor = _docs("servicemonitor.yaml")
    dep = _deployment()
    (container,) = dep["spec"]["template"]["spec"]["containers"]
    (port,) = svc["spec"]["ports"]
    assert svc["metadata"]["namespace"] == dep["metadata"]["namespace"]
    assert svc["spec"]["clusterIP"] == "None"
    assert svc["spec"]["selector"] == dep["spec"]["template"]["metadata"]["labels"]
    assert (port["name"], port["port"], port["targetPort"]) == ("https-metrics", 10259, "https-metrics")
    assert {"name": "https-metrics", "containerPort": 10259, "protocol": "TCP"} in container["ports"]
    assert monitor["spec"]["selector"]["matchLabels"] == svc["metadata"]["labels"]
    (endpoint,) = monitor["spec"]["endpoints"]
    assert (endpoint["port"], endpoint["scheme"], endpoint["path"]) == ("https-metrics", "https", "/metrics")
    assert "bearerTokenFile" not in endpoint, "deprecated: the token comes from a Secret"
    auth = endpoint["authorization"]
    assert auth["type"] == "Bearer"
    assert auth["credentials"] == {"name": secret["metadata"]["name"], "key": "token"}
    assert secret["type"] == "kubernetes.io/service-account-token"
    assert secret["metadata"]["namespace"] == monitor["metadata"]["namespace"]
    (subject,) = binding["subjects"]
    assert subject == {
        "kind": "ServiceAccount",
        "name": secret["metadata"]["annotations"]["kubernetes.io/service-account.name"],
        "namespace": secret["metadata"]["namespace"],
    }
    assert binding["roleRef"]["name"] == "custom-scheduler-metrics-reader"
    assert monitor["spec"]["namespaceSelector"]["matchNames"] == [svc["metadata"]["namespace"]]
    assert "servicemonitor.yaml" not in (k.MANIFESTS / "kustomization.yaml").read_text().split("resources:")[1]


def test_rbac_delegates_authn_authz_and_offers_a_metrics_reader_role() -> None:
    """The ServiceAccount is bound to system:auth-delegator; the reader role is /metrics get only."""
    docs = _docs("rbac.yaml")
    binding = next(d for d in docs if d["metadata"]["name"] == "custom-scheduler-auth-delegator")
    assert binding["kind"] == "ClusterRoleBinding"
    assert binding["roleRef"] == {
        "apiGroup": "rbac.authorization.k8s.io",
        "kind": "ClusterRole",
        "name": "system:auth-delegator",
    }
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "custom-scheduler", "namespace": "kube-system"}]
    reader = next(d for d in docs if d["metadata"]["name"] == "custom-scheduler-metrics-reader")
    assert reader["kind"] == "ClusterRole"
    assert reader["rules"] == [{"nonResourceURLs": ["/metrics"], "verbs": ["get"]}]


def test_service_account_may_review_tokens_and_access_and_nothing_more(as_scheduler: KubeClient) -> None:
    """What delegated authn/authz needs (create TokenReviews and SubjectAccessReviews), as the SA;
    system:auth-delegator adds no read access, and the SA itself may not read /metrics."""
    sa = as_scheduler
    assert _can(sa, "create", "tokenreviews", group="authentication.k8s.io")
    assert _can(sa, "create", "subjectaccessreviews", group="authorization.k8s.io")
    review = sa.post(
        "/apis/authentication.k8s.io/v1/tokenreviews",
        {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview", "spec": {"token": "not-a-token"}},
    )
    assert review["status"].get("authenticated") is not True
    assert not _can(sa, "list", "tokenreviews", group="authentication.k8s.io")
    assert not _can(sa, "create", "localsubjectaccessreviews", group="authorization.k8s.io", namespace="default")
    _forbidden(lambda: sa.get("/metrics"))


def test_image_pins_every_dependency_with_hashes() -> None:
    """requirements.lock pins each package to one version with sha256 hashes, covers every runtime
    dependency of pyproject.toml at a version its specifier allows, and the Dockerfile installs
    from it with --require-hashes (and the build backend from requirements-build.lock)."""
    import tomllib

    from packaging.requirements import Requirement

    def pins(name: str) -> dict[str, str]:
        text = (REPO_ROOT / name).read_text()
        entries = re.split(r"\n(?=[A-Za-z0-9])", re.sub(r"(?m)^\s*#.*\n", "", text).strip())
        out = {}
        for entry in entries:
            m = re.match(r"([A-Za-z0-9_.-]+)==(\S+) \\", entry)
            assert m, f"{name}: not pinned: {entry[:80]!r}"
            assert re.search(r"--hash=sha256:[0-9a-f]{64}", entry), f"{name}: no hash for {m[1]}"
            out[m[1].lower().replace("_", "-")] = m[2]
        return out

    runtime = pins("requirements.lock")
    project = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())
    for spec in project["project"]["dependencies"]:
        req = Requirement(spec)
        name = req.name.lower().replace("_", "-")
        assert name in runtime, f"{name} is not in requirements.lock: run pip-compile (see the Dockerfile)"
        assert req.specifier.contains(runtime[name]), f"{name}=={runtime[name]} does not satisfy {spec}"
    build = pins("requirements-build.lock")
    assert {"setuptools", "wheel"} <= set(build)
    text = (REPO_ROOT / "Dockerfile").read_text()
    builder, final = text.split("\nFROM ")[1:3]
    assert "--require-hashes --no-deps --only-binary=:all:" in builder
    assert "-r requirements.lock" in builder
    assert "-r requirements-build.lock" in builder
    assert "--no-build-isolation" in builder
    assert "--require-hashes --no-deps -r /wheels/requirements.lock" in final
    ignore = (REPO_ROOT / ".dockerignore").read_text().split()
    assert {"!requirements.lock", "!requirements-build.lock"} <= set(ignore)


def test_deployment_writes_only_to_an_in_memory_empty_dir() -> None:
    """Read-only root, RuntimeDefault seccomp (pod and container), no privilege escalation, no
    capabilities, non-root; /tmp (where the self-signed pair is written to be loaded) is the one
    writable mount, an in-memory emptyDir; every other mount is read-only."""
    spec = _deployment()["spec"]["template"]["spec"]
    (container,) = spec["containers"]
    sc = container["securityContext"]
    assert sc == {
        "allowPrivilegeEscalation": False,
        "readOnlyRootFilesystem": True,
        "runAsNonRoot": True,
        "capabilities": {"drop": ["ALL"]},
        "seccompProfile": {"type": "RuntimeDefault"},
    }
    assert spec["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    assert spec["securityContext"]["runAsNonRoot"] is True
    volumes = {v["name"]: v for v in spec["volumes"]}
    writable = [m for m in container["volumeMounts"] if not m.get("readOnly")]
    assert [m["mountPath"] for m in writable] == ["/tmp"]
    assert volumes[writable[0]["name"]]["emptyDir"]["medium"] == "Memory"
    for probe in ("livenessProbe", "readinessProbe"):
        assert container[probe]["httpGet"]["scheme"] == "HTTPS"


def test_service_account_writes_only_the_decision_record_ring(as_scheduler: KubeClient, kube: KubeClient) -> None:
    """The decision record: list and create ConfigMaps in kube-system, get/update/patch only the
    ring's eight; no other ConfigMap, no other namespace."""
    sa = as_scheduler
    cms = "/api/v1/namespaces/kube-system/configmaps"
    assert "items" in sa.get(cms, {"limit": 1})
    name = "custom-scheduler-decisions-7"
    try:
        sa.post(cms, {"metadata": {"name": name}, "data": {}})
        sa.patch(f"{cms}/{name}", {"data": {"k": "v"}})
        got = sa.get(f"{cms}/{name}")
        assert got["data"] == {"k": "v"}
        sa.put(f"{cms}/{name}", got)
        _forbidden(lambda: sa.get(f"{cms}/kube-root-ca.crt"))
        _forbidden(lambda: sa.delete(f"{cms}/{name}"))
        assert not _can(sa, "create", "configmaps", namespace="default")
    finally:
        kube.delete(f"{cms}/{name}")
