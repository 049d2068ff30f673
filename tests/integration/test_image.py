"""The container image, built by ``hack/image.sh`` from the Dockerfile, run.

No container can be started on our machines (no cgroups for a runtime), so the test does what a
runtime would, by hand: it unpacks the image's layers from the OCI archive (whiteouts applied) into a
root filesystem and runs the entrypoint chrooted into it, as the image's user, with the root
filesystem read-only and a tmpfs on /tmp (the Deployment's ``readOnlyRootFilesystem`` and its
emptyDir), /proc and /dev mounted, and a directory holding the config and a kubeconfig at
/etc/kubernetes (the Deployment's ConfigMap mount). The mounts live in a private mount namespace
(``unshare -m``), so nothing outlives the process. The chroot shares the network namespace, so the
session's kube-apiserver is reachable on 127.0.0.1.

What it proves: the image's Python and venv work on their own (``--version``, ``check-config`` on
the ConfigMap's config), the daemon syncs its caches against a real API server and stops cleanly on
SIGTERM, the image runs as uid 65532, and it carries neither pip nor a pip cache nor the source tree
nor the wheels it was built from.
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import signal
import subprocess
import tarfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from custom_scheduler.devenv import cluster
from custom_scheduler.devenv.controlplane import ADMIN_TOKEN_USER, REPO_ROOT, ControlPlane, free_port
from custom_scheduler.devenv.playground import readyz_ok
from tests import kubectl as k

SCRIPT = REPO_ROOT / "hack" / "image.sh"
MOUNTED_CONFIG_DIR = "/etc/kubernetes"


@dataclass(frozen=True)
class Image:
    """An unpacked image: its root filesystem and its OCI image config."""

    rootfs: Path
    config: dict[str, Any]

    @property
    def user(self) -> str:
        return str(self.config.get("config", {}).get("User", ""))

    @property
    def entrypoint(self) -> list[str]:
        return list(self.config.get("config", {}).get("Entrypoint") or [])

    @property
    def env(self) -> dict[str, str]:
        """The environment a runtime gives the entrypoint: the image's ``Env`` and nothing else."""
        pairs = (e.partition("=") for e in self.config.get("config", {}).get("Env") or [])
        return {name: value for name, _, value in pairs}


def _cached_archive() -> Path | None:
    """The archive hack/image.sh would print for the current sources, when it is already built."""
    proc = subprocess.run(["bash", str(SCRIPT), "--hash-only"], capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        pytest.fail(f"hack/image.sh --hash-only failed:\n{proc.stderr}")
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "custom-scheduler"
    archive = cache / f"image-{proc.stdout.strip()}" / "image.oci.tar"
    return archive if archive.is_file() else None


def _build_archive() -> Path:
    """The image archive: the cache, else a build (a few minutes), else a skip saying why it cannot be."""
    cached = _cached_archive()
    if cached is not None:
        return cached
    if os.geteuid() != 0:
        pytest.skip(
            "the image is not built (no cached archive for these sources) and cannot be: hack/image.sh needs root"
        )
    if shutil.which("unshare") is None or shutil.which("chroot") is None:
        pytest.skip("the image cannot be run here: unshare and chroot (util-linux, coreutils) are missing")
    proc = subprocess.run(["bash", str(SCRIPT)], capture_output=True, text=True, timeout=1500, check=False)
    if proc.returncode != 0:
        pytest.fail(f"hack/image.sh failed:\n{proc.stderr[-6000:]}")
    return Path(proc.stdout.strip().splitlines()[-1])


def _blob(layout: tarfile.TarFile, digest: str) -> bytes:
    algo, _, hexdigest = digest.partition(":")
    member = layout.extractfile(f"blobs/{algo}/{hexdigest}")
    assert member is not None, digest
    return member.read()


def _apply_whiteouts(layer: Path, root: Path) -> None:
    """Remove what a layer deletes before it is extracted: ``.wh.NAME`` deletes NAME,
    ``.wh..wh..opq`` empties its directory (the OCI image spec's whiteouts)."""
    with tarfile.open(layer) as t:
        for name in t.getnames():
            path = Path(name.lstrip("./"))
            if not path.name.startswith(".wh."):
                continue
            parent = root / path.parent
            if path.name == ".wh..wh..opq":
                for child in parent.iterdir() if parent.is_dir() else ():
                    _remove(child)
            else:
                _remove(parent / path.name.removeprefix(".wh."))


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    elif path.exists() or path.is_symlink():
        path.unlink()


def unpack(archive: Path, root: Path) -> dict[str, Any]:
    """Unpack the single image of an OCI archive into ``root``; return its image config.

    GNU tar extracts each layer (ownership, modes, hard links and device nodes as in the image);
    Python only reads the index, the manifest and the config.
    """
    blobs = root.parent / "blobs"
    blobs.mkdir()
    with tarfile.open(archive) as layout:
        index = layout.extractfile("index.json")
        assert index is not None, f"{archive} has no index.json: not an OCI archive"
        (desc,) = json.loads(index.read())["manifests"]
        manifest = json.loads(_blob(layout, desc["digest"]))
        config: dict[str, Any] = json.loads(_blob(layout, manifest["config"]["digest"]))
        layers = []
        for i, layer in enumerate(manifest["layers"]):
            path = blobs / f"layer-{i}.tar"
            path.write_bytes(_blob(layout, layer["digest"]))
            layers.append(path)
    root.mkdir()
    for layer in layers:
        _apply_whiteouts(layer, root)
        subprocess.run(
            ["tar", "-x", "--same-owner", "--numeric-owner", "--exclude=.wh.*", "-f", str(layer), "-C", str(root)],
            check=True,
        )
        layer.unlink()
    return config


@pytest.fixture(scope="module")
def image(tmp_path_factory: pytest.TempPathFactory) -> Image:
    archive = _build_archive()
    base = tmp_path_factory.mktemp("image")
    config = unpack(archive, base / "rootfs")
    return Image(base / "rootfs", config)


def _chroot_argv(image: Image, config_dir: Path, argv: list[str]) -> list[str]:
    """``argv`` run in the image as its user, in a private mount namespace: the root filesystem
    read-only (a bind mount of itself), /proc, /dev, a tmpfs /tmp and ``config_dir`` at /etc/kubernetes."""
    r = str(image.rootfs)
    user = image.user or "0:0"
    script = " && ".join(
        [
            f"mount --bind {r} {r}",
            f"mount -t proc proc {r}/proc",
            f"mount --rbind /dev {r}/dev",
            f"mount -t tmpfs -o mode=1777 tmpfs {r}/tmp",
            f"mkdir -p {r}{MOUNTED_CONFIG_DIR}",
            f"mount --bind {config_dir} {r}{MOUNTED_CONFIG_DIR}",
            f"mount -o remount,bind,ro {r}",
            f'exec chroot --userspec={user} {r} "$@"',
        ]
    )
    return ["unshare", "--mount", "--propagation", "private", "sh", "-c", script, "sh", *argv]


def _run(image: Image, config_dir: Path, *args: str) -> subprocess.CompletedProcess[str]:
    argv = _chroot_argv(image, config_dir, [*image.entrypoint, *args])
    return subprocess.run(argv, capture_output=True, text=True, timeout=120, check=False, env=image.env)


@pytest.fixture
def config_dir(tmp_path: Path) -> Path:
    """The directory mounted at /etc/kubernetes, readable by the image's user."""
    d = tmp_path / "etc-kubernetes"
    d.mkdir()
    d.chmod(0o755)
    return d


def test_image_runs_as_65532_and_holds_no_pip_cache_source_tree_or_wheels(image: Image) -> None:
    assert image.user == "65532:65532"
    assert image.entrypoint == ["custom-scheduler"]
    root = image.rootfs
    venv = root / "opt" / "custom-scheduler"
    assert (venv / "bin" / "custom-scheduler").is_file()
    site = next((venv / "lib").glob("python3.*/site-packages"))
    assert (site / "custom_scheduler" / "cli.py").is_file()
    assert not (venv / "bin" / "pip").exists(), "pip stays in the builder"
    assert not list(site.glob("pip")), "pip stays in the builder"
    for gone in ("src", "wheels", "build", "root/.cache"):
        assert not (root / gone).exists(), f"/{gone} is in the image"
    assert not list(root.rglob("pip/http*")), "a pip cache is in the image"
    assert not list(root.rglob("custom_scheduler-*.whl")), "a wheel is in the image"
    assert not list(root.rglob("pyproject.toml")), "the source tree is in the image"
    passwd = (root / "etc" / "passwd").read_text()
    assert "scheduler:x:65532:65532:" in passwd


def test_version_and_check_config_of_the_configmap_config(image: Image, config_dir: Path) -> None:
    version = _run(image, config_dir, "--version")
    assert version.returncode == 0, version.stderr
    assert version.stdout.startswith("custom-scheduler 0."), version.stdout
    assert "kube-scheduler 1.37" in version.stdout

    (config_dir / "scheduler-config.yaml").write_text(k.scheduler_config_text())
    checked = _run(image, config_dir, "check-config", f"{MOUNTED_CONFIG_DIR}/scheduler-config.yaml")
    assert checked.returncode == 0, checked.stderr
    assert "schedulerName: custom-scheduler" in checked.stdout

    (config_dir / "bad.yaml").write_text(
        "apiVersion: kubescheduler.config.k8s.io/v1\nkind: KubeSchedulerConfiguration\nparallelism: 0\n"
    )
    bad = _run(image, config_dir, "check-config", f"{MOUNTED_CONFIG_DIR}/bad.yaml")
    assert bad.returncode == 2, (bad.stdout, bad.stderr)
    assert "parallelism" in bad.stderr + bad.stdout
    assert "Traceback" not in bad.stderr


def _kubeconfig(cp: ControlPlane) -> dict[str, Any]:
    """The admin kubeconfig with the CA inline: the host path of the CA file is not in the chroot."""
    ca = base64.b64encode(cp.ca_file.read_bytes()).decode()
    return {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "local", "cluster": {"server": cp.host, "certificate-authority-data": ca}}],
        "users": [{"name": "admin", "user": {"token": cp.tokens[ADMIN_TOKEN_USER]}}],
        "contexts": [{"name": "local", "context": {"cluster": "local", "user": "admin"}}],
        "current-context": "local",
    }


@pytest.fixture
def daemon_in_image(
    image: Image, config_dir: Path, control_plane: ControlPlane
) -> Iterator[tuple[subprocess.Popen[bytes], int, Path]]:
    """``custom-scheduler run --dry-run`` in the image against the session's API server, on a free
    health port and without leader election (the ConfigMap's config otherwise); stopped by PID."""
    port = free_port()
    cfg = yaml.safe_load(k.scheduler_config_text())
    cfg["healthzBindAddress"] = f"127.0.0.1:{port}"
    cfg["leaderElection"]["leaderElect"] = False
    (config_dir / "scheduler-config.yaml").write_text(yaml.safe_dump(cfg))
    (config_dir / "kubeconfig").write_text(yaml.safe_dump(_kubeconfig(control_plane)))
    for f in config_dir.iterdir():
        f.chmod(0o644)
    log = config_dir.parent / "daemon.log"
    argv = _chroot_argv(
        image,
        config_dir,
        [
            *image.entrypoint,
            "run",
            "--dry-run",
            f"--config={MOUNTED_CONFIG_DIR}/scheduler-config.yaml",
            f"--kubeconfig={MOUNTED_CONFIG_DIR}/kubeconfig",
        ],
    )
    with log.open("wb") as out:
        proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=image.env)
    try:
        yield proc, port, log
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=10)


def test_daemon_in_the_image_syncs_against_the_api_server_and_stops_on_sigterm(
    daemon_in_image: tuple[subprocess.Popen[bytes], int, Path],
) -> None:
    proc, port, log = daemon_in_image

    def ready() -> bool:
        assert proc.poll() is None, f"the daemon exited with {proc.returncode}:\n{log.read_text()[-4000:]}"
        return readyz_ok(port)

    cluster.wait_for(ready, timeout=60, interval=0.2, what="the daemon's /readyz in the image")
    lines = [json.loads(line) for line in log.read_text().splitlines() if line.startswith("{")]
    assert any(entry.get("event") == "caches_synced" for entry in lines), log.read_text()[-4000:]

    proc.send_signal(signal.SIGTERM)  # the PID is the daemon's: unshare, sh and chroot exec it
    assert proc.wait(timeout=30) == 0, log.read_text()[-4000:]
