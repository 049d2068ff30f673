"""The hack scripts take cached binaries without a Go toolchain (issue #29 item 5: ``dev.sh`` asked
for Go even when every binary was cached). Each script runs with a PATH that holds no ``go`` and a
cache of placeholder executables, and must print the cache directory and succeed."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
#: A PATH with bash and coreutils but no Go (Go lives in /usr/local/go or ~/go on our machines).
NO_GO_PATH = "/usr/bin:/bin"


def _run(script: str, env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    """The script with exactly ``env`` (no K8S_VERSION or KUBEBUILDER_ASSETS of the caller's)."""
    argv = ["bash", str(ROOT / "hack" / script), *args]
    return subprocess.run(argv, capture_output=True, text=True, env=env, timeout=60, check=False)


@pytest.mark.parametrize(
    ("script", "cache_dir", "binaries"),
    [
        ("testenv.sh", "k8s-{v}", ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kubectl")),
        ("kwok.sh", "kwok-{v}", ("kwok",)),
        ("helm.sh", "helm-{v}", ("helm",)),
    ],
)
def test_a_cached_binary_needs_no_go(tmp_path: Path, script: str, cache_dir: str, binaries: tuple[str, ...]) -> None:
    if shutil.which("go", path=NO_GO_PATH) is not None:
        pytest.skip(f"go is in {NO_GO_PATH}: the test could not tell a cache hit from a build")
    env = {"HOME": str(tmp_path), "PATH": NO_GO_PATH, "XDG_CACHE_HOME": str(tmp_path)}
    version = _run(script, env, "--version-only").stdout.strip()
    bin_dir = tmp_path / "custom-scheduler" / cache_dir.format(v=version) / "bin"
    bin_dir.mkdir(parents=True)
    for name in binaries:
        (bin_dir / name).write_text("#!/bin/sh\n")
        (bin_dir / name).chmod(0o755)
    proc = _run(script, env)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == str(bin_dir)
