"""Apply ``manifests/`` to the test control plane with the real kubectl (reused by the HA tests).

kubectl is the one ``hack/testenv.sh`` built with the control plane (the same release as the API
server, so ``kubectl apply -k`` meets the kustomize and server-side apply of that release); a PATH
kubectl is used only when the binaries came from somewhere without one. A missing kubectl fails the
test instead of skipping, so a machine that cannot check the manifests is noticed.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from custom_scheduler.devenv.controlplane import ADMIN_TOKEN_USER, REPO_ROOT, ControlPlane

MANIFESTS = REPO_ROOT / "manifests"
SCHEDULER_USER = "system:serviceaccount:kube-system:custom-scheduler"


def kubectl_binary(control_plane: ControlPlane) -> str:
    built = control_plane.bin_dir / "kubectl"
    if built.exists():
        return str(built)
    path = shutil.which("kubectl")
    if path is None:
        pytest.fail(f"no kubectl in {control_plane.bin_dir} or on PATH: run hack/testenv.sh, which builds one")
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
        kubectl_binary(control_plane),
        f"--kubeconfig={control_plane.kubeconfig(user)}",
        f"--cache-dir={control_plane.workdir / 'kubectl-cache'}",
        *args,
    ]
    proc = subprocess.run(argv, input=stdin, capture_output=True, text=True, timeout=120, check=False)
    if check and proc.returncode != 0:
        pytest.fail(f"kubectl {' '.join(args)} exited {proc.returncode}:\n{proc.stderr}\n{proc.stdout}")
    return proc


def load_docs(text: str) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(text) if d]


def rendered_manifests(control_plane: ControlPlane) -> list[dict[str, Any]]:
    """``kubectl kustomize manifests/``: the documents ``kubectl apply -k manifests/`` applies."""
    return load_docs(kubectl(control_plane, "kustomize", str(MANIFESTS)).stdout)


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
