"""Kueue (sigs.k8s.io/kueue) in front of custom-scheduler, against a
:class:`~custom_scheduler.devenv.controlplane.ControlPlane`: the job-queueing controller decides
*when* a batch Job may run (quota, ClusterQueue, LocalQueue, its topology-aware assignment) and our
scheduler decides *where* its pods go.

Why: issue #27 asks that our scheduler work behind Kueue as kube-scheduler does. Kueue never binds a
pod; it unsuspends an admitted Job and writes what it decided into the Job's pod template (the
flavor's node selectors and, for topology-aware scheduling, a scheduling gate it lifts later with
per-pod node selectors). Those are ordinary pod fields, so the only way to prove they are honoured is
to run the real Kueue manager against the real API server and watch where our scheduler puts pods.

What it sets up, and why:
- The binary and its CRDs come from ``hack/kueue.sh`` (the cache, or a build from Go modules; the
  CRDs are copied from the same module source, ``config/components/crd/bases``).
- No admission webhooks are registered. Kueue's webhooks would be cluster-wide admission on the
  control plane the other tests share (every Job and Pod created in the session would pass through
  them, and with ``failurePolicy: Fail`` none could be created once Kueue stopped). Nothing we use
  needs them: a queued Job is created ``suspend: true`` with the ``kueue.x-k8s.io/queue-name``
  label (what Kueue's Job webhook would default), and the topology gate of a batch Job is put into
  the pod template by Kueue's Job reconciler when it unsuspends the Job, not by the pod webhook.
  The webhook *server* still runs (Kueue's readiness check waits for it), on loopback.
- ``internalCertManagement`` is off: Kueue's own rotator makes a certificate for an in-cluster
  Service name, which a server on loopback cannot present. With it off, Kueue reads its serving
  certificate from ``webhook.certDir`` (ours: a self-signed one for 127.0.0.1, made with openssl)
  and its metrics certificate from a fixed path, ``/etc/kueue/metrics/certs``. We do not write into
  the machine's ``/etc``: the manager runs in its own user and mount namespace (``unshare``) in
  which an overlay over ``/etc`` carries that directory, bound to our certificate.
- Leader election off, health and metrics on free loopback ports, only the ``batch/job``
  integration, and ``VisibilityOnDemand`` off (it would serve an aggregated API we do not register).
"""

from __future__ import annotations

import contextlib
import os
import shlex
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

import orjson
import yaml

from custom_scheduler.api import quantity
from custom_scheduler.devenv.cluster import wait_for
from custom_scheduler.devenv.controlplane import REPO_ROOT, ControlPlane, ControlPlaneError, free_port
from custom_scheduler.kube import api_errors
from custom_scheduler.kube.client import KubeClient

#: The label that puts a Job into a LocalQueue (Kueue's Job webhook would add nothing else we need).
QUEUE_LABEL = "kueue.x-k8s.io/queue-name"

#: A pod template annotation: the topology level all the Job's pods must share (Kueue TAS).
REQUIRED_TOPOLOGY_ANNOTATION = "kueue.x-k8s.io/podset-required-topology"

#: The scheduling gate Kueue puts on a topology-aware Job's pods until it has assigned them a domain.
TOPOLOGY_GATE = "kueue.x-k8s.io/topology"

#: Kueue's API (the storage version of its CRDs in v0.17).
API = "kueue.x-k8s.io/v1beta2"
API_PREFIX = f"/apis/{API}"

CRD_PATH = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"

#: Where Kueue v0.17's manager reads its metrics certificate when internal cert management is off.
METRICS_CERT_DIR = "/etc/kueue/metrics/certs"


def find_kueue() -> Path:
    """The directory holding the ``kueue`` binary: the cache, or a build through ``hack/kueue.sh``
    (many minutes the first time; the script says what is missing when it can do neither)."""
    script = REPO_ROOT / "hack" / "kueue.sh"
    proc = subprocess.run(["bash", str(script)], capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise ControlPlaneError(f"hack/kueue.sh failed:\n{proc.stderr[-4000:]}")
    return Path(proc.stdout.strip().splitlines()[-1])


def cached_kueue() -> Path | None:
    """The cached binary's directory if ``hack/kueue.sh`` has built it already, else None (no build):
    for callers that must not wait many minutes, such as the demo."""
    script = REPO_ROOT / "hack" / "kueue.sh"
    proc = subprocess.run(["bash", str(script), "--version-only"], capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        return None
    root = cache_root() / f"kueue-{proc.stdout.strip()}"
    return root / "bin" if (root / "bin" / "kueue").exists() and (root / "crd" / ".complete").exists() else None


def cache_root() -> Path:
    """``${XDG_CACHE_HOME:-~/.cache}/custom-scheduler``, as hack/kueue.sh lays it out."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "custom-scheduler"


# -- pure: the manager's configuration and command line ----------------------------------------------
def manager_config(*, health_port: int, metrics_port: int, webhook_port: int, cert_dir: Path) -> dict[str, Any]:
    """Kueue's ``Configuration`` (config.kueue.x-k8s.io/v1beta2) for a manager on loopback."""
    return {
        "apiVersion": "config.kueue.x-k8s.io/v1beta2",
        "kind": "Configuration",
        "namespace": "kueue-system",
        "health": {"healthProbeBindAddress": f"127.0.0.1:{health_port}"},
        "metrics": {"bindAddress": f"127.0.0.1:{metrics_port}"},
        "webhook": {"port": webhook_port, "host": "127.0.0.1", "certDir": str(cert_dir)},
        "leaderElection": {"leaderElect": False},
        "internalCertManagement": {"enable": False},
        "clientConnection": {"qps": 50, "burst": 100},
        "integrations": {"frameworks": ["batch/job"]},
    }


def namespaced_argv(kueue: Path, *, config: Path, kubeconfig: Path, cert_dir: Path, etc_dir: Path) -> list[str]:
    """Run ``kueue`` in a fresh user and mount namespace where ``/etc`` is an overlay (upper and work
    directories under ``etc_dir``) and :data:`METRICS_CERT_DIR` is ``cert_dir``: the fixed path
    Kueue reads, without writing the machine's ``/etc``. ``exec`` keeps the PID the manager's."""
    upper, work = etc_dir / "upper", etc_dir / "work"
    q = shlex.quote
    script = " && ".join(
        [
            f"mount -t overlay overlay -o lowerdir=/etc,upperdir={q(str(upper))},workdir={q(str(work))} /etc",
            f"mkdir -p {METRICS_CERT_DIR}",
            f"mount --bind {q(str(cert_dir))} {METRICS_CERT_DIR}",
            f"exec {q(str(kueue))} --config={q(str(config))} --kubeconfig={q(str(kubeconfig))}"
            " --feature-gates=VisibilityOnDemand=false --zap-log-level=info",
        ]
    )
    return ["unshare", "--user", "--map-root-user", "--mount", "sh", "-c", script]


def self_signed_cert(cert_dir: Path) -> None:
    """``tls.crt``/``tls.key`` for 127.0.0.1 (what the webhook and metrics servers present)."""
    cert_dir.mkdir(parents=True, exist_ok=True)
    argv = ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "365", "-subj", "/CN=127.0.0.1"]
    argv += ["-addext", "subjectAltName=IP:127.0.0.1"]
    argv += ["-keyout", str(cert_dir / "tls.key"), "-out", str(cert_dir / "tls.crt")]
    proc = subprocess.run(argv, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise ControlPlaneError(f"openssl could not make Kueue's certificate:\n{proc.stderr[-2000:]}")


# -- CRDs ------------------------------------------------------------------------------------------
def crd_docs(crd_dir: Path) -> list[dict[str, Any]]:
    """Every CustomResourceDefinition in ``crd_dir`` (one per file in Kueue's bases)."""
    docs: list[dict[str, Any]] = []
    for path in sorted(crd_dir.glob("*.yaml")):
        loaded = yaml.safe_load_all(path.read_text())
        docs.extend(d for d in loaded if d and d.get("kind") == "CustomResourceDefinition")
    if not docs:
        raise ControlPlaneError(f"no CRDs in {crd_dir} (run hack/kueue.sh)")
    return docs


def install_crds(kube: KubeClient, crd_dir: Path, timeout: float = 60.0) -> list[str]:
    """Create Kueue's CRDs (an existing one is kept: the session's control plane is shared) and wait
    until all are Established; return their names."""
    names = []
    for doc in crd_docs(crd_dir):
        name = doc["metadata"]["name"]
        names.append(name)
        with contextlib.suppress(api_errors.Conflict):
            kube.post(CRD_PATH, doc)

    def established() -> bool:
        for name in names:
            conds = (kube.get(f"{CRD_PATH}/{name}").get("status") or {}).get("conditions") or []
            if not any(c["type"] == "Established" and c["status"] == "True" for c in conds):
                return False
        return True

    wait_for(established, timeout=timeout, what="Kueue's CRDs to be established")
    return names


#: Kueue's kinds that carry its finalizers (cluster-scoped unless marked), for :func:`release_finalizers`.
FINALIZED_KINDS = ("workloads", "localqueues", "clusterqueues", "resourceflavors", "topologies", "admissionchecks")


def drain(kube: KubeClient, namespace: str, timeout: float = 60.0) -> None:
    """Delete the namespace's queued Jobs and wait, with Kueue still running, until their Workloads
    are gone: Kueue holds a finalizer on each Workload (and on a ClusterQueue while it has any), so
    a namespace deleted after Kueue stopped would stay Terminating for the rest of the session."""
    jobs = f"/apis/batch/v1/namespaces/{namespace}/jobs"
    for job in kube.get(jobs, {"labelSelector": QUEUE_LABEL}).get("items") or []:
        with contextlib.suppress(api_errors.NotFound):  # gone already: the aim
            kube.delete(f"{jobs}/{job['metadata']['name']}", {"propagationPolicy": "Background"})
    workloads = f"{API_PREFIX}/namespaces/{namespace}/workloads"
    wait_for(lambda: not kube.get(workloads).get("items"), timeout=timeout, what=f"the Workloads of {namespace} gone")


def release_finalizers(kube: KubeClient) -> int:
    """Drop the finalizers of Kueue objects already being deleted (what Kueue itself would do once
    they are unused); for after the manager stopped, so nothing it held stays Terminating. Returns
    how many objects were released."""
    released = 0
    for kind in FINALIZED_KINDS:
        with contextlib.suppress(api_errors.NotFound):  # the CRD is not installed: nothing held
            items = kube.get(f"{API_PREFIX}/{kind}").get("items") or []
            for obj in items:
                meta = obj["metadata"]
                if not meta.get("deletionTimestamp") or not meta.get("finalizers"):
                    continue
                ns = f"/namespaces/{meta['namespace']}" if meta.get("namespace") else ""
                with contextlib.suppress(api_errors.NotFound):
                    kube.patch(f"{API_PREFIX}{ns}/{kind}/{meta['name']}", {"metadata": {"finalizers": None}})
                    released += 1
    return released


@dataclass
class Kueue:
    """One Kueue manager against ``kubeconfig``, started by :meth:`start`, stopped by :meth:`stop`."""

    bin_dir: Path
    kubeconfig: Path
    workdir: Path = field(default_factory=lambda: Path(tempfile.mkdtemp(prefix="cs-kueue-")))
    health_port: int = 0
    _proc: subprocess.Popen[bytes] | None = None

    @classmethod
    def for_control_plane(cls, control_plane: ControlPlane, bin_dir: Path | None = None) -> Kueue:
        """A Kueue for ``control_plane``'s admin kubeconfig (the binary from :func:`find_kueue`)."""
        return cls(bin_dir or find_kueue(), control_plane.kubeconfig())

    @property
    def crd_dir(self) -> Path:
        return self.bin_dir.parent / "crd"

    @property
    def log_path(self) -> Path:
        return self.workdir / "kueue.log"

    def start(self, kube: KubeClient, timeout: float = 90.0) -> Kueue:
        """Install the CRDs, start the manager and return once it reports ready (``/readyz``: its
        caches synced and its webhook server serving)."""
        install_crds(kube, self.crd_dir)
        certs, etc = self.workdir / "certs", self.workdir / "etc"
        self_signed_cert(certs)
        (etc / "upper").mkdir(parents=True, exist_ok=True)
        (etc / "work").mkdir(parents=True, exist_ok=True)
        self.health_port = self.health_port or free_port()
        cfg = manager_config(
            health_port=self.health_port, metrics_port=free_port(), webhook_port=free_port(), cert_dir=certs
        )
        config_path = self.workdir / "config.yaml"
        config_path.write_bytes(orjson.dumps(cfg))  # JSON is YAML
        argv = namespaced_argv(
            self.bin_dir / "kueue", config=config_path, kubeconfig=self.kubeconfig, cert_dir=certs, etc_dir=etc
        )
        log = self.log_path.open("ab")
        self._proc = subprocess.Popen(
            argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True
        )
        try:
            self._wait_ready(timeout)
        except BaseException:
            self.stop(kube)
            raise
        return self

    def _wait_ready(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            assert self._proc is not None
            if self._proc.poll() is not None:
                raise ControlPlaneError(f"kueue exited with {self._proc.returncode}:\n{self.log_tail()}")
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{self.health_port}/readyz", timeout=2) as r:
                    if r.status == 200:
                        return
            except (OSError, urllib.error.URLError):
                pass  # not listening or not ready yet
            time.sleep(0.2)
        raise ControlPlaneError(f"timed out after {timeout:.0f}s waiting for kueue /readyz\n{self.log_tail()}")

    def stop(self, kube: KubeClient | None = None) -> None:
        """Stop the manager by its PID, then (given ``kube``) :func:`release_finalizers` and remove
        the working directory (read :meth:`log_tail` before). The CRDs stay: other users of a shared
        control plane may have Kueue objects."""
        proc, self._proc = self._proc, None
        if proc is not None and proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=5)
        if kube is not None:
            release_finalizers(kube)
        shutil.rmtree(self.workdir, ignore_errors=True)

    def log_tail(self, n: int = 40) -> str:
        if not self.log_path.exists():
            return ""
        return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-n:])


# -- pure: Kueue's objects and what a test or the demo reads back from them ------------------------
def resource_flavor(name: str, node_labels: dict[str, str], topology: str | None = None) -> dict[str, Any]:
    """A ResourceFlavor: Kueue adds ``node_labels`` to the node selector of every pod it admits under
    it (and, with ``topology``, assigns those pods topology domains of that Topology)."""
    spec: dict[str, Any] = {"nodeLabels": dict(node_labels)}
    if topology is not None:
        spec["topologyName"] = topology
    return {"apiVersion": API, "kind": "ResourceFlavor", "metadata": {"name": name}, "spec": spec}


def cluster_queue(name: str, flavor: str, quota: dict[str, str]) -> dict[str, Any]:
    """A ClusterQueue for every namespace (an empty selector; a missing one matches none) with one
    resource group: ``quota`` (resource name -> nominal quota) of ``flavor``."""
    resources = [{"name": r, "nominalQuota": q} for r, q in quota.items()]
    group = {"coveredResources": list(quota), "flavors": [{"name": flavor, "resources": resources}]}
    return {
        "apiVersion": API,
        "kind": "ClusterQueue",
        "metadata": {"name": name},
        "spec": {"namespaceSelector": {}, "resourceGroups": [group]},
    }


def local_queue(name: str, namespace: str, cq: str) -> dict[str, Any]:
    """A LocalQueue: the namespace's door to ClusterQueue ``cq``."""
    return {
        "apiVersion": API,
        "kind": "LocalQueue",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"clusterQueue": cq},
    }


def topology(name: str, levels: list[str]) -> dict[str, Any]:
    """A Topology: node label keys from the widest domain to the narrowest (``kubernetes.io/hostname``
    last, so Kueue assigns each pod a node)."""
    return {
        "apiVersion": API,
        "kind": "Topology",
        "metadata": {"name": name},
        "spec": {"levels": [{"nodeLabel": k} for k in levels]},
    }


@dataclass(frozen=True)
class JobSpec:
    """What a queued batch Job asks for: ``pods`` pods at once, each with ``requests``, running
    ``run_for`` (kwok's complete-after delay) under custom-scheduler."""

    name: str
    queue: str
    requests: dict[str, str]
    pods: int = 1
    run_for: str = "3s"
    required_topology: str | None = None
    pod_group: str | None = None


def queued_job(job: JobSpec, complete_after_annotation: str) -> dict[str, Any]:
    """A batch/v1 Job that waits in Kueue's LocalQueue ``job.queue``: created suspended with the
    queue-name label (what Kueue's Job webhook would do; we run without webhooks). Its pods name
    custom-scheduler; with ``pod_group`` they join that scheduling.k8s.io PodGroup."""
    annotations = {complete_after_annotation: job.run_for}
    if job.required_topology:
        annotations[REQUIRED_TOPOLOGY_ANNOTATION] = job.required_topology
    resources: dict[str, Any] = {"requests": dict(job.requests)}
    # Extended resources (GPUs) cannot be overcommitted: the API server wants limits equal to requests.
    if limits := {r: q for r, q in job.requests.items() if "/" in r}:
        resources["limits"] = limits
    container = {"name": "work", "image": "registry.k8s.io/pause:3.10", "resources": resources}
    pod_spec: dict[str, Any] = {
        "schedulerName": "custom-scheduler",
        "restartPolicy": "Never",
        "containers": [container],
    }
    if job.pod_group:
        pod_spec["schedulingGroup"] = {"podGroupName": job.pod_group}
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": job.name, "labels": {QUEUE_LABEL: job.queue}},
        "spec": {
            "suspend": True,
            "parallelism": job.pods,
            "completions": job.pods,
            "backoffLimit": 0,
            "template": {"metadata": {"annotations": annotations}, "spec": pod_spec},
        },
    }


def condition(obj: dict[str, Any], kind: str) -> bool:
    """Whether ``obj`` has condition ``kind`` with status True."""
    conds = (obj.get("status") or {}).get("conditions") or []
    return any(c.get("type") == kind and c.get("status") == "True" for c in conds)


def holds_quota(workload: dict[str, Any]) -> bool:
    """Whether a Workload counts against its ClusterQueue: quota reserved and not finished."""
    return condition(workload, "QuotaReserved") and not condition(workload, "Finished")


def usage_milli(workloads: list[dict[str, Any]]) -> dict[str, int]:
    """The summed ``resourceUsage`` (milli-units) of the Workloads that hold quota: what Kueue has
    granted of its ClusterQueue's quota at the moment they were read."""
    total: dict[str, int] = {}
    for w in workloads:
        if not holds_quota(w):
            continue
        admission = (w.get("status") or {}).get("admission") or {}
        for psa in admission.get("podSetAssignments") or []:
            for res, q in (psa.get("resourceUsage") or {}).items():
                total[res] = total.get(res, 0) + quantity.to_milli(q)
    return total


def over_quota(usage: dict[str, int], quota: dict[str, str]) -> dict[str, tuple[int, int]]:
    """Resource -> (used, quota) in milli-units, for each resource used beyond its quota."""
    limits = {r: quantity.to_milli(q) for r, q in quota.items()}
    return {r: (u, limits.get(r, 0)) for r, u in usage.items() if u > limits.get(r, 0)}
