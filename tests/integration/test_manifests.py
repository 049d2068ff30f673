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

from custom_scheduler import config, leader
from custom_scheduler.builtin import full_registry
from custom_scheduler.devenv import cluster
from custom_scheduler.devenv.controlplane import REPO_ROOT, ControlPlane
from custom_scheduler.kube import errors
from custom_scheduler.kube.client import STRATEGIC_PATCH_CT, KubeClient, pod_path
from tests import kubectl as k
from tests.builders import NodeBuilder, make_node, make_pod

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
    """``--config`` points into the mounted ConfigMap; probes use healthzBindAddress's port over HTTP."""
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
        assert (get["path"], get["port"], get["scheme"]) == (path, port, "HTTP")


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


def test_kubectl_apply_k_is_accepted_by_the_api_server(control_plane: ControlPlane, kube: KubeClient) -> None:
    """``kubectl apply -k manifests/ --dry-run=server`` creates every object (dry run)."""
    expected = {(d["kind"], d["metadata"]["name"]) for d in k.rendered_manifests(control_plane, kube)}
    assert {kind for kind, _ in expected} == {
        "ServiceAccount",
        "ClusterRole",
        "ClusterRoleBinding",
        "Role",
        "RoleBinding",
        "ConfigMap",
        "Deployment",
        "PodDisruptionBudget",
    }
    proc = k.kubectl(control_plane, "apply", "-k", str(k.MANIFESTS), "--dry-run=server", check=False)
    applied = set(re.findall(r"^([\w.]+)/(\S+) \w+ \(server dry run\)$", proc.stdout, flags=re.MULTILINE))
    applied_kinds = {(kind.split(".", 1)[0], name) for kind, name in applied}
    if k.server_has_policy_v1(kube):
        assert proc.returncode == 0, proc.stderr
        assert len(applied_kinds) == len(expected), proc.stdout
        return
    # The session's 1.20 API server has no policy/v1 (added in 1.21): kubectl applies every other
    # object and reports only the PDB as unknown. The PDB is then checked as policy/v1beta1, which
    # has the same fields for what pdb.yaml uses.
    assert proc.returncode != 0
    assert "PodDisruptionBudget" in proc.stderr
    assert "policy/v1" in proc.stderr
    assert len(applied_kinds) == len(expected) - 1, proc.stdout
    pdb = [d for d in k.rendered_manifests(control_plane, kube) if d["kind"] == "PodDisruptionBudget"]
    assert pdb[0]["apiVersion"] == "policy/v1beta1"
    out = k.apply_docs(control_plane, pdb, dry_run=True, server_side=False)
    assert "poddisruptionbudget.policy/custom-scheduler created (server dry run)" in out


def test_system_cluster_critical_priority_class_exists(kube: KubeClient) -> None:
    """The Deployment's priorityClassName is one the API server creates at start-up (1.20 too)."""
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
    with pytest.raises(errors.ApiError) as exc:
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


def test_service_account_can_do_what_the_scheduler_does(
    as_scheduler: KubeClient,
    kube: KubeClient,
    namespace: str,
    nodes: Callable[[NodeBuilder], dict[str, Any]],
    create_pod: Callable[[dict[str, Any]], dict[str, Any]],
) -> None:
    """List/watch pods, nodes, namespaces and PDBs; bind; patch pod status; events; delete (preempt)."""
    sa = as_scheduler
    pdb_group = "policy/v1" if k.server_has_policy_v1(kube) else "policy/v1beta1"
    for path in ("/api/v1/pods", "/api/v1/nodes", "/api/v1/namespaces", f"/apis/{pdb_group}/poddisruptionbudgets"):
        assert "items" in sa.get(path, {"limit": 1}), path
    for resource, group in (("pods", ""), ("nodes", ""), ("namespaces", ""), ("poddisruptionbudgets", "policy")):
        assert _can(sa, "watch", resource, group=group), resource
    assert _can(sa, "list", "nodes", group="metrics.k8s.io")

    node = nodes(make_node("rbac").capacity(cpu="2", memory="4Gi", pods="10"))
    node_name = node["metadata"]["name"]

    # Bind through pods/binding.
    pod = create_pod(make_pod("bind-me").scheduler("custom-scheduler").obj())
    cluster.bind(sa, namespace, "bind-me", node_name, uid=pod["metadata"]["uid"])
    assert kube.get(pod_path(namespace, "bind-me"))["spec"]["nodeName"] == node_name

    # Report a failure: PodScheduled=False on pods/status.
    create_pod(make_pod("unschedulable").scheduler("custom-scheduler").obj())
    condition = {
        "type": "PodScheduled",
        "status": "False",
        "reason": "Unschedulable",
        "message": "0/1 nodes are available: 1 Insufficient cpu.",
    }
    sa.patch(
        pod_path(namespace, "unschedulable", "status"), {"status": {"conditions": [condition]}}, STRATEGIC_PATCH_CT
    )
    conditions = kube.get(pod_path(namespace, "unschedulable"))["status"]["conditions"]
    assert any(c["type"] == "PodScheduled" and c["reason"] == "Unschedulable" for c in conditions)

    # Events: events.k8s.io create + patch (series), and core/v1 create.
    now = leader.microtime(datetime.now(UTC))
    event = {
        "apiVersion": "events.k8s.io/v1",
        "kind": "Event",
        "metadata": {"name": f"unschedulable.{uuid.uuid4().hex[:8]}", "namespace": namespace},
        "eventTime": now,
        "reportingController": "custom-scheduler",
        "reportingInstance": "custom-scheduler-test",
        "action": "Scheduling",
        "reason": "FailedScheduling",
        "type": "Warning",
        "note": "0/1 nodes are available: 1 Insufficient cpu.",
        "regarding": {"apiVersion": "v1", "kind": "Pod", "namespace": namespace, "name": "unschedulable"},
    }
    created = sa.post(f"/apis/events.k8s.io/v1/namespaces/{namespace}/events", event)
    sa.patch(
        f"/apis/events.k8s.io/v1/namespaces/{namespace}/events/{created['metadata']['name']}",
        {"series": {"count": 2, "lastObservedTime": now}},
    )
    sa.post(
        f"/api/v1/namespaces/{namespace}/events",
        {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"name": f"core.{uuid.uuid4().hex[:8]}", "namespace": namespace},
            "involvedObject": {"apiVersion": "v1", "kind": "Pod", "namespace": namespace, "name": "unschedulable"},
            "reason": "FailedScheduling",
            "message": "0/1 nodes are available.",
            "type": "Warning",
            "source": {"component": "custom-scheduler"},
        },
    )

    # Preemption deletes victims.
    sa.delete(pod_path(namespace, "unschedulable"))


def test_service_account_holds_its_own_lease(as_scheduler: KubeClient, kube: KubeClient) -> None:
    """The elector, running as the ServiceAccount, creates, renews and releases kube-system/custom-scheduler."""
    cfg = config.load_config(k.scheduler_config_text(), full_registry()).leader_election
    path = leader.lease_path(cfg.resource_namespace, cfg.resource_name)
    with contextlib.suppress(errors.NotFound):
        kube.delete(path)
    elector = leader.LeaderElector(as_scheduler, cfg, "rbac-test")
    try:
        assert elector.try_acquire_or_renew(), "create"
        assert elector.try_acquire_or_renew(), "renew (update)"
        assert as_scheduler.get(path)["spec"]["holderIdentity"] == "rbac-test", "get"
        assert elector.release()
        assert as_scheduler.get(path)["spec"].get("holderIdentity", "") == ""
    finally:
        with contextlib.suppress(errors.NotFound):
            kube.delete(path)


def test_service_account_is_refused_everything_else(as_scheduler: KubeClient, kube: KubeClient, namespace: str) -> None:
    """Secrets, other Leases, Leases elsewhere, writing nodes or creating pods: all 403."""
    sa = as_scheduler
    _forbidden(lambda: sa.get("/api/v1/namespaces/kube-system/secrets"))
    _forbidden(lambda: sa.get("/api/v1/secrets"))
    _forbidden(lambda: sa.get("/api/v1/namespaces/kube-system/configmaps"))

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
    assert froms == ["python:3.11-slim", "python:3.11-slim"]
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
    """What the Dockerfile does, minus the container: build the wheel, install it, run the entrypoint.

    No container runtime runs here, so this repeats the two stages: copy only what .dockerignore
    lets into the build context, ``pip wheel`` it (isolated build, as in the builder stage), install
    the wheel into a fresh venv (dependencies from the package index), then run
    ``custom-scheduler check-config`` on the ConfigMap's config through the console script.
    """
    context = tmp_path / "context"
    context.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy2(REPO_ROOT / name, context / name)
    shutil.copytree(
        REPO_ROOT / "custom_scheduler", context / "custom_scheduler", ignore=shutil.ignore_patterns("__pycache__")
    )
    wheels = tmp_path / "wheels"

    def run(*argv: object) -> subprocess.CompletedProcess[str]:
        return subprocess.run([str(a) for a in argv], capture_output=True, text=True, timeout=600, check=False)

    built = run(sys.executable, "-m", "pip", "wheel", "--no-deps", "--wheel-dir", wheels, context)
    assert built.returncode == 0, built.stderr[-3000:]
    (wheel,) = wheels.glob("custom_scheduler-*.whl")
    venv = tmp_path / "venv"
    made = run(sys.executable, "-m", "venv", venv)
    assert made.returncode == 0, made.stderr
    installed = run(venv / "bin" / "python", "-m", "pip", "install", "--quiet", wheel)
    assert installed.returncode == 0, installed.stderr[-3000:]
    entrypoint = venv / "bin" / "custom-scheduler"
    assert entrypoint.exists()
    cfg = tmp_path / "scheduler-config.yaml"
    cfg.write_text(k.scheduler_config_text())
    checked = run(entrypoint, "check-config", cfg)
    assert checked.returncode == 0, checked.stderr
    assert yaml.safe_load(checked.stdout)["leaderElection"]["leaderElect"] is True
    # The metrics and health modules import in the installed package (prometheus-client is a dependency).
    imported = run(venv / "bin" / "python", "-c", "import custom_scheduler.health, custom_scheduler.leader")
    assert imported.returncode == 0, imported.stderr
