"""kwok (sigs.k8s.io/kwok) beside a :class:`~custom_scheduler.devenv.controlplane.ControlPlane`: a
fake kubelet for the Nodes that carry a marker, so a test sees a living cluster.

Why: without a kubelet, :mod:`custom_scheduler.devenv.cluster` plays its chores by hand (a node is
marked Ready once, a graceful delete is finished with grace 0); nodes never heartbeat and pods never
run or finish. kwok does those chores the way a kubelet reports them, through the API server, so a
test can watch the scheduler react to pods that start, succeed and go away on their own.

What it sets up, and why:
- kwok manages only Nodes annotated :data:`MANAGED_ANNOTATION` = :data:`MANAGED_VALUE`
  (``--manage-nodes-with-annotation-selector``) and the pods bound to them: the hand-made Nodes of
  the other tests, which share the session's control plane, are never touched.
- The stages are passed explicitly (``--config``, one file each): standalone kwok has no default
  stages, only kwokctl injects them. Ours are copies of v0.8.0's, one file each under
  ``kwok_stages/`` with where each comes from: node-initialize (Ready), node-heartbeat-with-lease
  (status every 10-20 minutes; the Lease is the heartbeat, renewed every
  ``node_lease_duration_seconds / 4``), node-not-ready (the on-demand fault, below), pod-ready
  (Running, Ready, container statuses), pod-complete (a Job's pod annotated
  :data:`COMPLETE_AFTER_ANNOTATION` succeeds that long after it runs) and pod-delete (a graceful
  delete finishes).
- ``KWOK_WORKDIR`` points at our working directory: kwok otherwise also loads
  ``~/.kwok/kwok.yaml``, whose stages would mix with ours.
- The admin kubeconfig (``system:masters``): kwok patches node and pod status, deletes pods,
  writes Leases and Events.

NotReady on demand (:func:`make_not_ready`) uses kwok's own fault, the chaos stage
``node-not-ready`` that a label switches on: kwok then reports ``Ready=False`` (reason
``nodeFailed``) while it still renews the Lease, a kubelet alive but unhealthy, and removing the
label lets node-initialize report Ready again. Where the control plane runs the node-lifecycle
controller (``ControlPlane(node_lifecycle=True)``, the test session's) that controller then taints
the Node ``node.kubernetes.io/not-ready`` (NoSchedule and NoExecute) and evicts the pods that do not
tolerate it, as in a real cluster. (Stopping the heartbeat instead, by dropping the marker, would
take that controller's grace period, 50 s, to show.)

:func:`create_node` lifts the ``node.kubernetes.io/not-ready`` taint itself once kwok reports
Ready: the API server's ``TaintNodesByCondition`` admission adds it to every new Node, and only the
node-lifecycle controller's NoSchedule pass takes it off, which the playground's and the demos'
control planes do not run. Where it runs, the lift only comes sooner (the controller looks every
couple of seconds) and removes nothing else.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from custom_scheduler.devenv.cluster import wait_for
from custom_scheduler.devenv.controlplane import REPO_ROOT, ControlPlane, ControlPlaneError, free_port
from custom_scheduler.kube import api_errors
from custom_scheduler.kube.client import MERGE_PATCH_CT, KubeClient, node_path

#: The marker that hands a Node to kwok (and the value it must have).
MANAGED_ANNOTATION = "kwok.x-k8s.io/node"
MANAGED_VALUE = "fake"

#: The label kwok's node-not-ready stage reacts to ("true": report Ready=False).
NOT_READY_LABEL = "node-not-ready.stage.kwok.x-k8s.io"

#: A Job pod's annotation: how long it runs before it succeeds (a Go duration, "3s").
COMPLETE_AFTER_ANNOTATION = "pod-complete.stage.kwok.x-k8s.io/delay"

#: The taint the API server puts on every new Node; the node-lifecycle controller lifts it.
NOT_READY_TAINT = "node.kubernetes.io/not-ready"

STAGES_DIR = Path(__file__).resolve().parent / "kwok_stages"

#: Every stage we ship, in a fixed order (kwok matches them by selector, not by order).
DEFAULT_STAGES: tuple[Path, ...] = tuple(sorted(STAGES_DIR.glob("*.yaml")))

#: kubelet's default lease (``nodeLeaseDurationSeconds``); kwok renews at a quarter of it.
DEFAULT_LEASE_SECONDS = 40


def options_config(parallelism: int) -> str:
    """A ``KwokConfiguration`` (config.kwok.x-k8s.io/v1alpha1) raising kwok's worker counts.

    Why: kwok's client has no rate limit (it uses a fake always-allow limiter), but it renews Leases
    and plays node and pod stages with 4 workers each by default, each a synchronous round trip. On a
    busy API server that caps Lease renewals near 4 / latency (about 90 writes/s measured at 15000
    nodes, where 15000 kubelets with a 40 s lease write 1500/s) and leaves bound pods Pending for
    tens of seconds. ``parallelism`` workers of each kind let kwok put a real cluster's load on the
    API server."""
    return (
        "apiVersion: config.kwok.x-k8s.io/v1alpha1\n"
        "kind: KwokConfiguration\n"
        "options:\n"
        f"  nodeLeaseParallelism: {parallelism}\n"
        f"  nodePlayStageParallelism: {parallelism}\n"
        f"  podPlayStageParallelism: {parallelism}\n"
    )


def find_kwok() -> Path:
    """The directory holding the ``kwok`` binary: the cache, or a build through ``hack/kwok.sh``
    (a few minutes the first time; the script says what is missing when it can do neither)."""
    script = REPO_ROOT / "hack" / "kwok.sh"
    proc = subprocess.run(["bash", str(script)], capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise ControlPlaneError(f"hack/kwok.sh failed:\n{proc.stderr[-4000:]}")
    return Path(proc.stdout.strip().splitlines()[-1])


@dataclass
class Kwok:
    """One kwok process against ``kubeconfig``, started by :meth:`start`, stopped by :meth:`stop`."""

    bin_dir: Path
    kubeconfig: Path
    stages: tuple[Path, ...] = DEFAULT_STAGES
    node_lease_duration_seconds: int = DEFAULT_LEASE_SECONDS
    #: Workers for Leases, node stages and pod stages each (:func:`options_config`); 0: kwok's 4.
    parallelism: int = 0
    workdir: Path = field(default_factory=lambda: Path(tempfile.mkdtemp(prefix="cs-kwok-")))
    port: int = 0
    _proc: subprocess.Popen[bytes] | None = None

    @classmethod
    def for_control_plane(cls, control_plane: ControlPlane, bin_dir: Path | None = None, **kw: Any) -> Kwok:
        """A Kwok for ``control_plane``'s admin kubeconfig (the binary from :func:`find_kwok`)."""
        return cls(bin_dir or find_kwok(), control_plane.kubeconfig(), **kw)

    @property
    def pid(self) -> int | None:
        """The running process's id (the benchmark reads its CPU time); None when not started."""
        return self._proc.pid if self._proc is not None and self._proc.poll() is None else None

    @property
    def log_path(self) -> Path:
        return self.workdir / "kwok.log"

    def argv(self) -> list[str]:
        """The command line: the kubeconfig, the marker, the lease, each stage file, and where kwok
        serves (``/healthz``; the address and port its Nodes report as their kubelet's, and the
        pods' hostIP)."""
        return [
            str(self.bin_dir / "kwok"),
            f"--kubeconfig={self.kubeconfig}",
            f"--manage-nodes-with-annotation-selector={MANAGED_ANNOTATION}={MANAGED_VALUE}",
            f"--node-lease-duration-seconds={self.node_lease_duration_seconds}",
            f"--server-address=127.0.0.1:{self.port}",
            "--node-ip=127.0.0.1",
            "--node-name=localhost",
            f"--node-port={self.port}",
            *(f"--config={p}" for p in self.stages),
            *([f"--config={self.workdir / 'kwok-options.yaml'}"] if self.parallelism > 0 else []),
        ]

    def start(self, timeout: float = 60.0) -> Kwok:
        """Start kwok and return once it serves ``/healthz`` (its controllers are running by then)."""
        if not self.stages:
            raise ControlPlaneError(f"no kwok stages in {STAGES_DIR}")
        self.workdir.mkdir(parents=True, exist_ok=True)
        if self.parallelism > 0:
            (self.workdir / "kwok-options.yaml").write_text(options_config(self.parallelism))
        self.port = self.port or free_port()
        log = self.log_path.open("ab")
        env = {**os.environ, "KWOK_WORKDIR": str(self.workdir)}
        self._proc = subprocess.Popen(
            self.argv(), stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env, start_new_session=True
        )
        try:
            self._wait_healthy(timeout)
        except BaseException:
            self.stop()
            raise
        return self

    def _wait_healthy(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            assert self._proc is not None
            if self._proc.poll() is not None:
                raise ControlPlaneError(f"kwok exited with {self._proc.returncode}:\n{self.log_tail()}")
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/healthz", timeout=2) as r:
                    if r.status == 200:
                        return
            except (OSError, urllib.error.URLError):
                pass  # not listening yet
            time.sleep(0.1)
        raise ControlPlaneError(f"timed out after {timeout:.0f}s waiting for kwok /healthz\n{self.log_tail()}")

    def stop(self) -> None:
        """Stop kwok by its PID, then remove the working directory (its log with it, as
        :meth:`ControlPlane.stop` does: read :meth:`log_tail` before)."""
        proc, self._proc = self._proc, None
        if proc is not None and proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=5)
        shutil.rmtree(self.workdir, ignore_errors=True)

    def log_tail(self, n: int = 40) -> str:
        if not self.log_path.exists():
            return ""
        return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-n:])


# -- nodes kwok manages -----------------------------------------------------------------------------
def managed(obj: dict[str, Any]) -> dict[str, Any]:
    """``obj`` (a Node) with the marker that hands it to kwok."""
    obj.setdefault("metadata", {}).setdefault("annotations", {})[MANAGED_ANNOTATION] = MANAGED_VALUE
    return obj


def ready_status(node: dict[str, Any]) -> str:
    """The status of the Node's Ready condition ("True", "False", "Unknown"), ``""`` without one."""
    for c in (node.get("status") or {}).get("conditions") or []:
        if c.get("type") == "Ready":
            return str(c.get("status") or "")
    return ""


def wait_ready_status(kube: KubeClient, name: str, want: str, timeout: float = 30.0) -> dict[str, Any]:
    """Wait until Node ``name`` reports Ready=``want``; return the Node."""

    def check() -> dict[str, Any] | None:
        node: dict[str, Any] = kube.get(node_path(name))
        return node if ready_status(node) == want else None

    got: dict[str, Any] = wait_for(check, timeout=timeout, interval=0.2, what=f"node {name} Ready={want}")
    return got


def create_node(kube: KubeClient, obj: dict[str, Any], timeout: float = 30.0) -> dict[str, Any]:
    """Create a Node for kwok, wait until kwok reports it Ready, then lift the not-ready taint (the
    node-lifecycle controller's part, where it runs); return the Node. Other taints in ``obj`` stay."""
    name = obj["metadata"]["name"]
    kube.post(node_path(), managed(obj))
    node = wait_ready_status(kube, name, "True", timeout)
    taints = [t for t in (node.get("spec") or {}).get("taints") or [] if t.get("key") != NOT_READY_TAINT]
    lifted: dict[str, Any] = kube.patch(node_path(name), {"spec": {"taints": taints or None}}, MERGE_PATCH_CT)
    return lifted


def delete_node(kube: KubeClient, name: str) -> None:
    """Delete a Node (its Lease goes with it: kwok made the Node the Lease's owner)."""
    with contextlib.suppress(api_errors.NotFound):  # gone already: the aim
        kube.delete(node_path(name))


def make_not_ready(kube: KubeClient, name: str) -> None:
    """Switch on kwok's node-not-ready stage for Node ``name``: it reports Ready=False from then on."""
    kube.patch(node_path(name), {"metadata": {"labels": {NOT_READY_LABEL: "true"}}}, MERGE_PATCH_CT)


def make_ready(kube: KubeClient, name: str) -> None:
    """Switch the fault off again: node-initialize reports Ready=True."""
    kube.patch(node_path(name), {"metadata": {"labels": {NOT_READY_LABEL: None}}}, MERGE_PATCH_CT)


def node_lease(kube: KubeClient, name: str) -> dict[str, Any] | None:
    """Node ``name``'s Lease in ``kube-node-lease``, or None while there is none."""
    try:
        lease: dict[str, Any] = kube.get(f"/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/{name}")
    except api_errors.NotFound:
        return None
    return lease
