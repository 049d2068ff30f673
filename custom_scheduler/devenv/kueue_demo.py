"""The Kueue demo (``./hack/dev.sh demo kueue``): Kueue decides when batch Jobs run, custom-scheduler
decides where their pods go, kwok runs them, and a timeline shows both at work.

Why a demo of its own: the README's demo (:mod:`custom_scheduler.devenv.demo`) needs nothing but the
control plane and plays the kubelet by hand; this one needs kwok (pods that run and finish, so a
finished Job frees quota) and the Kueue manager, a Go build of several minutes that the plain demo
must not wait for. It runs only when ``hack/kueue.sh`` has built Kueue already and says how to
build it otherwise.

The workload, against a ClusterQueue ``batch`` of 3 CPUs and 1 GPU (flavor: the ``batch`` kwok
nodes) and a ClusterQueue ``tas`` whose flavor has a Topology (block, rack, hostname):
- five short Jobs, more than the quota holds: Kueue admits up to it and the next one as one
  finishes; our scheduler places each admitted pod on a ``batch`` node (Kueue's flavor selector);
- a gang Job of three pods in a scheduling.k8s.io PodGroup: admitted as one Workload, bound whole;
- a Job of two pods that must share a rack: Kueue's topology-aware scheduling picks the rack and
  nodes (its gate and node selectors), and our scheduler binds them there.
"""

from __future__ import annotations

import contextlib
import functools
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from custom_scheduler.devenv import cluster, kwok
from custom_scheduler.devenv import kueue as kq
from custom_scheduler.devenv.controlplane import ControlPlane, find_binaries, signals_as_exit
from custom_scheduler.kube import api_errors
from custom_scheduler.kube.client import KubeClient

NAMESPACE = "kueue-demo"
RACK = "demo.custom-scheduler.io/rack"
BLOCK = "demo.custom-scheduler.io/block"
HOSTNAME = "kubernetes.io/hostname"
GPU = "nvidia.com/gpu"
BATCH_QUOTA = {"cpu": "3", GPU: "1"}

CONFIG = """\
apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
leaderElection: {leaderElect: false}
healthzBindAddress: 127.0.0.1:0
profiles:
- schedulerName: custom-scheduler
  plugins:
    multiPoint:
      enabled: [{name: GangScheduling}]
"""

#: (node, pool, rack, capacity): the batch pool has GPUs; the tas pool has two racks.
NODES: list[tuple[str, str, str, dict[str, str]]] = [
    ("batch-1", "batch", "rack-x", {"cpu": "4", GPU: "2"}),
    ("batch-2", "batch", "rack-x", {"cpu": "4", GPU: "2"}),
    ("tas-a1", "tas", "rack-a", {"cpu": "1"}),
    ("tas-b1", "tas", "rack-b", {"cpu": "1"}),
    ("tas-b2", "tas", "rack-b", {"cpu": "1"}),
]

JOBS: list[kq.JobSpec] = [
    kq.JobSpec("train-gpu-0", "batch", {"cpu": "1", GPU: "1"}, run_for="4s"),
    kq.JobSpec("etl-0", "batch", {"cpu": "1"}, run_for="4s"),
    kq.JobSpec("train-gpu-1", "batch", {"cpu": "1", GPU: "1"}, run_for="4s"),
    kq.JobSpec("etl-1", "batch", {"cpu": "1"}, run_for="4s"),
    kq.JobSpec("etl-2", "batch", {"cpu": "1"}, run_for="4s"),
    kq.JobSpec("gang", "batch", {"cpu": "1"}, pods=3, run_for="4s", pod_group="gang"),
    kq.JobSpec("rack-pair", "tas", {"cpu": "1"}, pods=2, run_for="4s", required_topology=RACK),
]


def _node(name: str, pool: str, rack: str, capacity: dict[str, str]) -> dict[str, Any]:
    alloc = {"memory": "16Gi", "pods": "110", **capacity}
    labels = {HOSTNAME: name, "pool": f"demo-{pool}", BLOCK: "block-1", RACK: rack}
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": labels},
        "status": {"capacity": dict(alloc), "allocatable": dict(alloc)},
    }


def _queues(kube: KubeClient) -> None:
    """Topology, the two flavors, their ClusterQueues and the namespace's LocalQueues."""
    kube.post(f"{kq.API_PREFIX}/topologies", kq.topology("demo", [BLOCK, RACK, HOSTNAME]))
    kube.post(f"{kq.API_PREFIX}/resourceflavors", kq.resource_flavor("demo-batch", {"pool": "demo-batch"}))
    kube.post(f"{kq.API_PREFIX}/resourceflavors", kq.resource_flavor("demo-tas", {"pool": "demo-tas"}, "demo"))
    kube.post(f"{kq.API_PREFIX}/clusterqueues", kq.cluster_queue("demo-batch", "demo-batch", BATCH_QUOTA))
    kube.post(f"{kq.API_PREFIX}/clusterqueues", kq.cluster_queue("demo-tas", "demo-tas", {"cpu": "3"}))
    for name in ("batch", "tas"):
        kube.post(
            f"{kq.API_PREFIX}/namespaces/{NAMESPACE}/localqueues", kq.local_queue(name, NAMESPACE, f"demo-{name}")
        )
    for cq in ("demo-batch", "demo-tas"):
        cluster.wait_for(functools.partial(_active, kube, cq), timeout=30, what=f"ClusterQueue {cq} Active")


def _active(kube: KubeClient, cq: str) -> bool:
    return kq.condition(kube.get(f"{kq.API_PREFIX}/clusterqueues/{cq}"), "Active")


class Timeline:
    """What changed since the last look: admissions, bindings, completions, printed as they come."""

    def __init__(self, kube: KubeClient, out: Any) -> None:
        self.kube, self.out, self.t0 = kube, out, time.monotonic()
        self.seen: set[str] = set()
        self.peak: dict[str, int] = {}
        self.placed: dict[str, list[str]] = {}

    def say(self, key: str, text: str) -> None:
        if key not in self.seen:
            self.seen.add(key)
            print(f"  t+{time.monotonic() - self.t0:5.1f}s  {text}", file=self.out)

    def look(self) -> bool:
        """Report what is new; return whether every Job has completed."""
        wls = self.kube.get(f"{kq.API_PREFIX}/namespaces/{NAMESPACE}/workloads").get("items") or []
        batch = [w for w in wls if (w["spec"].get("queueName") or "") == "batch"]
        for res, used in kq.usage_milli(batch).items():
            self.peak[res] = max(self.peak.get(res, 0), used)
        for w in wls:
            job = (w["metadata"].get("ownerReferences") or [{}])[0].get("name", w["metadata"]["name"])
            if kq.condition(w, "Admitted"):
                self.say(f"admit/{job}", f"Kueue admitted {job} (queue {w['spec'].get('queueName')})")
        for p in cluster.list_pods(self.kube, NAMESPACE):
            if node := p["spec"].get("nodeName"):
                job = p["metadata"].get("labels", {}).get("job-name", "?")
                if f"bind/{p['metadata']['name']}" not in self.seen:
                    self.placed.setdefault(job, []).append(node)
                self.say(f"bind/{p['metadata']['name']}", f"custom-scheduler bound {p['metadata']['name']} -> {node}")
        done = 0
        for spec in JOBS:
            job = self.kube.get(f"/apis/batch/v1/namespaces/{NAMESPACE}/jobs/{spec.name}")
            if kq.condition(job, "Complete"):
                done += 1
                self.say(f"done/{spec.name}", f"{spec.name} completed")
        return done == len(JOBS)


def run_kueue_demo(
    cp: ControlPlane, kueue_bin: Path, out: Any = sys.stdout, timeout: float = 120.0, *, cleanup: bool = False
) -> tuple[dict[str, list[str]], dict[str, int], int]:
    """Run the workload against ``cp`` with kwok, Kueue and the daemon (a subprocess).

    Returns Job -> the nodes its pods were bound to, the peak of the ``batch`` queue's admitted
    usage (milli-units), and the daemon's exit code after SIGTERM. ``cleanup`` removes the demo's
    objects (a shared control plane) and its working directory (the daemon's log)."""
    kube = KubeClient.from_kubeconfig(str(cp.kubeconfig()), qps=0, burst=1)
    fake = kwok.Kwok.for_control_plane(cp).start()
    manager = kq.Kueue.for_control_plane(cp, kueue_bin)
    workdir = Path(tempfile.mkdtemp(prefix="cs-kueue-demo-"))
    proc: subprocess.Popen[bytes] | None = None
    timeline = Timeline(kube, out)
    try:
        manager.start(kube)
        cluster.create_namespace(kube, NAMESPACE)
        for name, pool, rack, capacity in NODES:
            kwok.create_node(kube, _node(name, pool, rack, capacity))
        _queues(kube)
        proc = _start_daemon(cp, workdir)
        print(f"kwok, Kueue and custom-scheduler (pid {proc.pid}) running; log in {workdir}", file=out)
        _submit(kube)
        print(f"{len(JOBS)} Jobs queued; batch quota {BATCH_QUOTA}", file=out)
        timeline.t0 = time.monotonic()
        try:
            cluster.wait_for(timeline.look, timeout=timeout, interval=0.3, what="every Job to complete")
        except TimeoutError as e:
            print(f"warning: {e}\nKueue log:\n{manager.log_tail()}", file=out)
    finally:
        rc = _stop(proc)
        if cleanup:  # while Kueue runs: it releases the finalizers it holds on what is deleted
            _cleanup(kube)
            shutil.rmtree(workdir, ignore_errors=True)
        manager.stop(kube)
        fake.stop()
    _summary(timeline.placed, timeline.peak, out)
    return timeline.placed, timeline.peak, rc


def _start_daemon(cp: ControlPlane, workdir: Path) -> subprocess.Popen[bytes]:
    """``custom-scheduler run`` (GangScheduling on) against ``cp``, logging into ``workdir``."""
    cfg = workdir / "scheduler-config.yaml"
    cfg.write_text(CONFIG)
    argv = [sys.executable, "-m", "custom_scheduler", "run", "--config", str(cfg), "--kubeconfig", str(cp.kubeconfig())]
    env = {**os.environ, "LOG_FORMAT": "json"}
    with (workdir / "scheduler.log").open("wb") as log:
        return subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, env=env)


def _submit(kube: KubeClient) -> None:
    """The gang's PodGroup, then every Job (suspended, in its LocalQueue)."""
    group = {"apiVersion": "scheduling.k8s.io/v1beta1", "kind": "PodGroup", "metadata": {"name": "gang"}}
    group["spec"] = {"schedulingPolicy": {"gang": {"minCount": 3}}}
    kube.post(f"/apis/scheduling.k8s.io/v1beta1/namespaces/{NAMESPACE}/podgroups", group)
    for spec in JOBS:
        job = kq.queued_job(spec, kwok.COMPLETE_AFTER_ANNOTATION)
        kube.post(f"/apis/batch/v1/namespaces/{NAMESPACE}/jobs", job)


def _stop(proc: subprocess.Popen[bytes] | None) -> int:
    if proc is None:
        return 0
    proc.send_signal(signal.SIGTERM)
    try:
        return proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()
        return proc.wait()


def _summary(placed: dict[str, list[str]], peak: dict[str, int], out: Any) -> None:
    print("\nwhere each Job's pods ran:", file=out)
    for spec in JOBS:
        print(f"  {spec.name:12} -> {', '.join(sorted(placed.get(spec.name, []))) or '(not placed)'}", file=out)
    print(f"peak admitted usage of queue batch (milli-units): {peak}; quota {BATCH_QUOTA}", file=out)


def _cleanup(kube: KubeClient) -> None:
    """Remove what the demo made (the CRDs stay, as :meth:`Kueue.stop` leaves them)."""
    with contextlib.suppress(api_errors.NotFound):  # never created: nothing queued there
        kq.drain(kube, NAMESPACE)
    cluster.delete_namespace(kube, NAMESPACE)
    cluster.delete_nodes(kube, [n for n, *_ in NODES])
    for kind, name in (
        ("clusterqueues", "demo-batch"),
        ("clusterqueues", "demo-tas"),
        ("resourceflavors", "demo-batch"),
        ("resourceflavors", "demo-tas"),
        ("topologies", "demo"),
    ):
        with contextlib.suppress(api_errors.KubeError):
            kube.delete(f"{kq.API_PREFIX}/{kind}/{name}")


def main(*, keep: bool = False) -> int:
    """``./hack/dev.sh demo kueue``: only with Kueue built already (``hack/kueue.sh``)."""
    kueue_bin = kq.cached_kueue()
    if kueue_bin is None:
        print("Kueue is not built yet: run hack/kueue.sh (several minutes the first time), then again.")
        return 2
    with signals_as_exit():
        cp = ControlPlane(find_binaries()).start()
        try:
            print(f"kube-apiserver {cp.version} on {cp.host} (kubeconfig: {cp.kubeconfig()})")
            placed, _, rc = run_kueue_demo(cp, kueue_bin)
            if rc != 0 or len(placed) != len(JOBS):
                return 1
            if keep:
                print("control plane left running; press Ctrl-C (or send SIGTERM) to stop it")
                with contextlib.suppress(KeyboardInterrupt):
                    while True:
                        time.sleep(3600)
        finally:
            cp.stop()
    return 0
