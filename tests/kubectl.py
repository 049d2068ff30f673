"""Apply ``manifests/`` to the test control plane with the real kubectl (reused by the HA tests).

kubectl comes from the OS (Debian's ``kubernetes-client`` package); a missing kubectl fails the
test with that hint instead of skipping, so a machine that cannot check the manifests is noticed.

The session's kube-apiserver is 1.20, which serves PodDisruptionBudgets only as
``policy/v1beta1``; ``policy/v1`` arrived in 1.21. :func:`rendered_manifests` therefore rewrites
the PDB's apiVersion when (and only when) the server lacks ``policy/v1``; the two versions have
the same fields for what ``pdb.yaml`` uses (``minAvailable`` and ``selector``).
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from custom_scheduler.devenv.controlplane import ADMIN_TOKEN_USER, REPO_ROOT, ControlPlane
from custom_scheduler.kube import errors
from custom_scheduler.kube.client import KubeClient

MANIFESTS = REPO_ROOT / "manifests"
SCHEDULER_USER = "system:serviceaccount:kube-system:custom-scheduler"


def kubectl_binary() -> str:
    path = shutil.which("kubectl")
    if path is None:
        pytest.fail(
            "kubectl not found on PATH: install Debian's package kubernetes-client (apt-get install kubernetes-client)"
        )
    return path


def kubectl(
    control_plane: ControlPlane,
    *args: str,
    stdin: str | None = None,
    user: str = ADMIN_TOKEN_USER,
    check: bool = True,
) -> subprocess.CompletedProcess[str]:
    """Run kubectl against the control plane as ``user``; fail the test on a non-zero exit."""
    argv = [
        kubectl_binary(),
        f"--kubeconfig={control_plane.kubeconfig(user)}",
        f"--cache-dir={control_plane.workdir / 'kubectl-cache'}",
        *args,
    ]
    proc = subprocess.run(argv, input=stdin, capture_output=True, text=True, timeout=120, check=False)
    if check and proc.returncode != 0:
        pytest.fail(f"kubectl {' '.join(args)} exited {proc.returncode}:\n{proc.stderr}\n{proc.stdout}")
    return proc


def server_has_policy_v1(kube: KubeClient) -> bool:
    try:
        kube.get("/apis/policy/v1")
    except errors.NotFound:
        return False
    return True


def load_docs(text: str) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(text) if d]


def rendered_manifests(control_plane: ControlPlane, kube: KubeClient) -> list[dict[str, Any]]:
    """``kubectl kustomize manifests/``, with the PDB downgraded to v1beta1 on pre-1.21 servers."""
    docs = load_docs(kubectl(control_plane, "kustomize", str(MANIFESTS)).stdout)
    if not server_has_policy_v1(kube):
        for d in docs:
            if d["kind"] == "PodDisruptionBudget" and d["apiVersion"] == "policy/v1":
                d["apiVersion"] = "policy/v1beta1"
    return docs


def apply_docs(
    control_plane: ControlPlane,
    docs: list[dict[str, Any]],
    *,
    dry_run: bool = False,
    server_side: bool = True,
) -> str:
    """``kubectl apply -f -`` the documents (server-side apply by default); returns kubectl's output."""
    args = ["apply", "-f", "-"]
    if server_side:
        args += ["--server-side", "--field-manager=custom-scheduler-tests", "--force-conflicts"]
    if dry_run:
        args.append("--dry-run=server")
    return kubectl(control_plane, *args, stdin=yaml.safe_dump_all(docs)).stdout


def apply_files(control_plane: ControlPlane, *names: str, dry_run: bool = False) -> str:
    """Apply some files of ``manifests/`` as they are (e.g. ``serviceaccount.yaml``, ``rbac.yaml``)."""
    docs: list[dict[str, Any]] = []
    for name in names:
        docs += load_docs((MANIFESTS / name).read_text())
    return apply_docs(control_plane, docs, dry_run=dry_run)


def apply_rbac(control_plane: ControlPlane) -> None:
    """Create (idempotently, for real) the ServiceAccount and every RBAC object of ``manifests/``."""
    apply_files(control_plane, "serviceaccount.yaml", "rbac.yaml")


def scheduler_config_text() -> str:
    """``scheduler-config.yaml`` from the ConfigMap in ``manifests/configmap.yaml``."""
    doc = yaml.safe_load((MANIFESTS / "configmap.yaml").read_text())
    text: str = doc["data"]["scheduler-config.yaml"]
    return text


def manifest(name: str) -> Path:
    return MANIFESTS / name
