"""The README's demo: a local control plane, the daemon, a workload for every scenario, a summary.

It runs the real ``custom-scheduler run`` command as a separate process against a real
kube-apiserver + etcd on loopback (no kubelet: Nodes are API objects; the demo plays the kubelet by
finishing pods that preemption deletes) and shows the reasons the project exists:

- **load-aware**: a loopback metrics endpoint (NodeLoad's ``metricsURL``) reports ``node-a`` at 90%
  CPU, so web pods go elsewhere although ``node-a`` has the most free requests;
- **special hardware**: two 1-GPU training pods are packed on one GPU node, which keeps the other
  whole for a 4-GPU job; an ordinary pod that tolerates every taint still stays off GPU nodes;
- **the same with DRA** (:mod:`custom_scheduler.devenv.demo_dra`): GPUs published as ResourceSlices,
  pods asking through ResourceClaimTemplates for a whole GPU, a partition and a memory share;
- **resource isolation**: big-data pods (by label, or by asking for 8+ CPUs) go only to the pool
  node, and nothing else goes there;
- **priority**: an ``online`` pod preempts a ``batch`` pod on a full node;
- **gangs** and **topology** (:mod:`custom_scheduler.devenv.demo_topology`): all-or-nothing
  gangs, and gangs kept inside one rack or block;
- **ML training** (:mod:`custom_scheduler.devenv.demo_training`, a second profile): a starving
  gang's reservation with backfill, job-level preemption, an elastic gang, ``defrag``;
- plain kube-scheduler behaviour: a pod too big for any node gets the aggregated reason; a pod of
  another scheduler is left alone.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from custom_scheduler.devenv import cluster, demo_dra, demo_topology, demo_training
from custom_scheduler.devenv.controlplane import ControlPlane, find_binaries, signals_as_exit
from custom_scheduler.kube import api_errors
from custom_scheduler.kube.client import KubeClient

NAMESPACE = "demo"
GPU_TAINT = {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}
PRIORITY_TAINT = {"key": "demo/priority", "value": "true", "effect": "NoSchedule"}
ML_TAINT = {"key": "demo/ml", "value": "true", "effect": "NoSchedule"}

DEMO_CONFIG = """\
apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
leaderElection:
  leaderElect: false
healthzBindAddress: 127.0.0.1:0
profiles:
- schedulerName: custom-scheduler
  plugins:
    multiPoint:
      enabled:
      - {name: AcceleratorIsolation, weight: 5}
      - {name: NodePools}
      - {name: NodeLoad, weight: 5}
      - {name: GangScheduling}
  pluginConfig:
  - name: AcceleratorIsolation
    args: {resources: [nvidia.com/gpu], mode: Filter}
  - name: NodePools
    args:
      pools:
      - name: bigdata
        nodeSelector: {matchLabels: {custom-scheduler.io/pool: bigdata}}
        members:
          labelSelector: {matchLabels: {workload-class: bigdata}}
          minRequests: {cpu: "8"}
  - name: NodeLoad
    args: {metricsURL: "%(metrics_url)s", refreshInterval: 2s, thresholds: {cpu: 85}}
"""
DEMO_CONFIG += demo_topology.PLUGIN_CONFIG + demo_training.PROFILE_CONFIG
#: The profiles whose pods the demo waits for (the others' are "not ours").
PROFILES = ("custom-scheduler", demo_training.PROFILE)

#: (scenario, pod) in the order the demo reports them.
SCENARIOS = {
    "load-aware": "node-a reports 90% CPU in use: web pods avoid it",
    "gpu": "GPU pods packed on one GPU node; ordinary pods never on GPU nodes",
    demo_dra.SCENARIO: demo_dra.TITLE,
    "pools": "big-data pods only on the bigdata pool; nothing else there",
    "priority": "an online pod preempts a batch pod on a full node",
    "gangs": "two 3-pod training gangs (PodGroups), room for one: one runs whole, the other waits whole",
    demo_topology.SCENARIO: demo_topology.TITLE,
    **demo_training.SCENARIOS,
    "kube": "kube-scheduler semantics: reasons, other schedulers' pods untouched",
}


def _node(name: str, cpu: str, mem: str, *, labels: dict[str, str] | None = None, **extra: Any) -> dict[str, Any]:
    alloc = {"cpu": cpu, "memory": mem, "pods": "110", **extra.pop("resources", {})}
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name, **(labels or {})}},
        "spec": {"taints": extra.pop("taints", [])},
        "status": {"capacity": dict(alloc), "allocatable": dict(alloc)},
    }


def _pod(
    name: str, scenario: str, *, cpu: str = "", mem: str = "", scheduler: str = "custom-scheduler", **spec: Any
) -> dict[str, Any]:
    req = {k: v for k, v in (("cpu", cpu), ("memory", mem)) if v}
    extended = spec.pop("extended", {})
    req.update(extended)
    container: dict[str, Any] = {"name": "app", "image": "registry.k8s.io/pause:3.9"}
    if req:
        container["resources"] = {"requests": req, **({"limits": dict(extended)} if extended else {})}
    labels = {"demo/scenario": scenario, **spec.pop("labels", {})}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": NAMESPACE, "labels": labels},
        "spec": {"schedulerName": scheduler, "containers": [container], **spec},
    }


def workload() -> tuple[list[dict[str, Any]], list[dict[str, Any]], list[dict[str, Any]]]:
    """Nodes, the first wave of pods, and the priority wave (created once the first settled)."""
    gpu = {"resources": {"nvidia.com/gpu": "4"}, "taints": [GPU_TAINT]}
    nodes = [
        _node("node-a", "4", "8Gi", labels={"topology.kubernetes.io/zone": "zone-a"}),
        _node("node-b", "4", "8Gi", labels={"topology.kubernetes.io/zone": "zone-b"}),
        _node("node-c", "4", "8Gi", labels={"topology.kubernetes.io/zone": "zone-c"}),
        _node("gpu-1", "8", "32Gi", labels={"nvidia.com/gpu.product": "A100"}, **gpu),
        _node("gpu-2", "8", "32Gi", labels={"nvidia.com/gpu.product": "A100"}, **gpu),
        _node("bigdata-1", "16", "64Gi", labels={"custom-scheduler.io/pool": "bigdata"}),
        _node("node-p", "2", "4Gi", labels={"demo/priority": "true"}, taints=[PRIORITY_TAINT]),
        _node("ml-1", "8", "32Gi", labels={"demo/ml": "true"}, taints=[ML_TAINT]),
        _node("ml-2", "8", "32Gi", labels={"demo/ml": "true"}, taints=[ML_TAINT]),
    ]
    gpu_tol = [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]
    prio_tol = [{"key": "demo/priority", "operator": "Exists", "effect": "NoSchedule"}]
    on_p: dict[str, Any] = {"nodeSelector": {"demo/priority": "true"}, "tolerations": prio_tol}
    first = [_pod(f"web-{i}", "load-aware", cpu="500m", mem="512Mi") for i in range(6)]
    first += [
        _pod("train-0", "gpu", cpu="2", mem="8Gi", extended={"nvidia.com/gpu": "1"}, tolerations=gpu_tol),
        _pod("train-1", "gpu", cpu="2", mem="8Gi", extended={"nvidia.com/gpu": "1"}, tolerations=gpu_tol),
        _pod("train-big", "gpu", cpu="4", mem="16Gi", extended={"nvidia.com/gpu": "4"}, tolerations=gpu_tol),
        _pod("tolerates-all", "gpu", cpu="100m", tolerations=[{"operator": "Exists"}]),
        _pod("spark-0", "pools", cpu="4", mem="16Gi", labels={"workload-class": "bigdata"}),
        _pod("etl-huge", "pools", cpu="10", mem="8Gi"),
        _pod("batch-0", "priority", cpu="1", priorityClassName="demo-batch", **on_p),
        _pod("batch-1", "priority", cpu="1", priorityClassName="demo-batch", **on_p),
        _pod("too-big", "kube", cpu="64", mem="8Gi"),
        _pod("other-scheduler", "kube", cpu="100m", scheduler="default-scheduler"),
    ]
    # Interleaved, as two jobs' workers arrive: 24 CPUs asked, 16 there, so one gang can run.
    on_ml: dict[str, Any] = {
        "nodeSelector": {"demo/ml": "true"},
        "tolerations": [{"key": "demo/ml", "operator": "Exists", "effect": "NoSchedule"}],
    }
    for i in range(3):
        for job in ("job-a", "job-b"):
            first.append(
                _pod(f"{job}-{i}", "gangs", cpu="4", mem="4Gi", schedulingGroup={"podGroupName": job}, **on_ml)
            )
    second = [_pod("online-0", "priority", cpu="1", priorityClassName="demo-online", **on_p)]
    nodes += demo_dra.nodes()
    first += demo_dra.first_wave(NAMESPACE)
    second += demo_dra.second_wave(NAMESPACE)
    nodes += demo_topology.nodes(_node)
    first += demo_topology.first_wave(_pod)
    second += demo_topology.second_wave(_pod)
    nodes += demo_training.nodes(_node)
    first += demo_training.first_wave(_pod)
    second += demo_training.second_wave(_pod)
    return nodes, first, second


#: The gangs' PodGroups (Kubernetes' scheduling.k8s.io/v1beta1 API, created before their pods).
POD_GROUPS: list[dict[str, Any]] = [
    {
        "apiVersion": "scheduling.k8s.io/v1beta1",
        "kind": "PodGroup",
        "metadata": {"name": job, "namespace": NAMESPACE},
        "spec": {"schedulingPolicy": {"gang": {"minCount": 3}}},
    }
    for job in ("job-a", "job-b")
]
POD_GROUPS += demo_topology.pod_groups(NAMESPACE)
POD_GROUPS += demo_training.pod_groups(NAMESPACE)


PRIORITY_CLASSES: list[dict[str, Any]] = [
    {
        "apiVersion": "scheduling.k8s.io/v1",
        "kind": "PriorityClass",
        "metadata": {"name": n},
        "value": v,
        "description": d,
    }
    for n, v, d in (("demo-batch", 1000, "batch work, may be preempted"), ("demo-online", 100000, "online work"))
]


class MetricsEndpoint:
    """A loopback endpoint serving ``metrics.k8s.io/v1beta1`` NodeMetricsList JSON (what
    metrics-server would report), read by NodeLoad through ``metricsURL``."""

    def __init__(self, usage: dict[str, tuple[str, str]]) -> None:
        self.usage = usage
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                body = json.dumps(outer.document()).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"

    def document(self) -> dict[str, Any]:
        ts = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        return {
            "kind": "NodeMetricsList",
            "apiVersion": "metrics.k8s.io/v1beta1",
            "metadata": {},
            "items": [
                {"metadata": {"name": n}, "timestamp": ts, "window": "10s", "usage": {"cpu": c, "memory": m}}
                for n, (c, m) in self.usage.items()
            ],
        }

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def _events(kube: KubeClient, reason: str) -> dict[str, str]:
    doc = kube.get(f"/apis/events.k8s.io/v1/namespaces/{NAMESPACE}/events")
    out: dict[str, str] = {}
    for e in doc.get("items") or ():
        if e.get("reason") == reason:
            out[e["regarding"]["name"]] = e.get("note", "")
    return out


def _settle(kube: KubeClient, names: list[str], timeout: float, out: Any, *, bound: bool = False) -> None:
    """Wait until each named pod is bound (or, unless ``bound``, has a FailedScheduling event);
    play the kubelet meanwhile (finish pods that preemption deleted)."""

    def settled() -> bool:
        cluster.finish_terminating_pods(kube, NAMESPACE)
        pods = {p["metadata"]["name"]: p for p in cluster.list_pods(kube, NAMESPACE)}
        failed = set() if bound else set(_events(kube, "FailedScheduling"))
        return all(n not in pods or pods[n]["spec"].get("nodeName") or n in failed for n in names)

    try:
        cluster.wait_for(settled, timeout=timeout, interval=0.25, what="every pod bound or reported")
    except TimeoutError as e:
        print(f"warning: {e}", file=out)


def run_demo(
    cp: ControlPlane,
    out: Any = sys.stdout,
    timeout: float = 60.0,
    *,
    cleanup: bool = False,
    defrag: demo_training.DefragRun | None = None,
) -> tuple[dict[str, str], int]:
    """Run the workload against ``cp`` with the daemon in a subprocess.

    Returns pod → node (or why it is not bound) and the daemon's exit code after SIGTERM.
    ``cleanup`` deletes the demo's nodes, PriorityClasses and namespace (tests share a control plane);
    ``defrag``, when given, is filled with the defrag scenario's plan (for the tests).
    """
    defrag = defrag if defrag is not None else demo_training.DefragRun()
    kube = KubeClient.from_kubeconfig(str(cp.kubeconfig()), qps=0, burst=1)
    cluster.create_namespace(kube, NAMESPACE)
    nodes, first, second = workload()
    for n in nodes:
        cluster.create_ready_node(kube, n)
    for pc in PRIORITY_CLASSES:
        cluster.create_priority_class(kube, pc)
    for pg in POD_GROUPS:
        kube.post(f"/apis/scheduling.k8s.io/v1beta1/namespaces/{NAMESPACE}/podgroups", pg)
    demo_dra.setup(kube, NAMESPACE)
    demo_training.setup(kube, NAMESPACE, _pod)
    metrics = MetricsEndpoint({"node-a": ("3600m", "2Gi"), "node-b": ("200m", "1Gi"), "node-c": ("400m", "1Gi")})
    workdir = Path(tempfile.mkdtemp(prefix="cs-demo-"))
    cfg = workdir / "scheduler-config.yaml"
    cfg.write_text(DEMO_CONFIG % {"metrics_url": metrics.url})
    log_path = workdir / "scheduler.log"
    env = {**os.environ, "LOG_FORMAT": "json"}
    argv = [sys.executable, "-m", "custom_scheduler", "run", "--config", str(cfg), "--kubeconfig", str(cp.kubeconfig())]
    with log_path.open("wb") as logf:
        proc = subprocess.Popen(argv, stdout=logf, stderr=subprocess.STDOUT, env=env)
        try:
            print(f"custom-scheduler running (pid {proc.pid}), config: {cfg}, log: {log_path}", file=out)
            time.sleep(0.5)  # let NodeLoad take its first sample before the burst
            for p in first:
                kube.post(f"/api/v1/namespaces/{NAMESPACE}/pods", p)
            ours = [p["metadata"]["name"] for p in first if p["spec"]["schedulerName"] in PROFILES]
            _settle(kube, ours, timeout, out)
            demo_training.between_waves(kube, NAMESPACE, cfg.read_text(), out, defrag)
            for p in second:
                kube.post(f"/api/v1/namespaces/{NAMESPACE}/pods", p)
            # The preemptors first fail (and nominate), then bind once their victims are gone.
            names = [p["metadata"]["name"] for p in second]
            must_bind = [n for n in names if n not in demo_training.KEPT_OFF]
            _settle(kube, must_bind + list(demo_training.BOUND_LATER), timeout, out, bound=True)
            _settle(kube, list(demo_training.KEPT_OFF), timeout, out)
            demo_training.await_moved(kube, NAMESPACE, timeout, out)
        finally:
            proc.send_signal(signal.SIGTERM)
            try:
                rc = proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                rc = proc.wait()
            metrics.stop()
    result = _report(kube, first + second, out, defrag)
    print(f"\nscheduler exited with code {rc} after SIGTERM", file=out)
    if cleanup:
        cleanup_demo(kube)
    return result, rc


def cleanup_demo(kube: KubeClient) -> None:
    """Delete the demo's nodes, PriorityClasses, DRA slices and classes, and namespace."""
    cluster.delete_nodes(kube, [n["metadata"]["name"] for n in workload()[0]])
    for pc in PRIORITY_CLASSES:
        try:
            kube.delete(f"/apis/scheduling.k8s.io/v1/priorityclasses/{pc['metadata']['name']}")
        except api_errors.NotFound:
            pass  # never created or deleted already: the cleanup's aim either way
    demo_dra.cleanup(kube)
    cluster.delete_namespace(kube, NAMESPACE)


def _report(
    kube: KubeClient, created: list[dict[str, Any]], out: Any, defrag: demo_training.DefragRun
) -> dict[str, str]:
    reasons = _events(kube, "FailedScheduling")
    preempted = _events(kube, "Preempted")
    live = {p["metadata"]["name"]: p for p in cluster.list_pods(kube, NAMESPACE)}
    # The Preempted event names the preemptor by UID (upstream's text); the summary names the pod.
    by_uid = {p["metadata"].get("uid", ""): name for name, p in live.items()}
    result: dict[str, str] = {}
    rows: dict[str, list[tuple[str, str]]] = {s: [] for s in SCENARIOS}
    for p in created:
        name = p["metadata"]["name"]
        scenario = p["metadata"]["labels"]["demo/scenario"]
        cur = live.get(name)
        if cur is None:
            note = preempted.get(name, "deleted")
            for uid, pod_name in by_uid.items():
                if uid and uid in note:
                    note = note.replace(uid, pod_name)
            what = f"preempted ({note})"
            result[name] = "preempted"
        elif cur["spec"].get("nodeName"):
            what = result[name] = cur["spec"]["nodeName"]
            what = f"-> {what}"
        elif cur["spec"]["schedulerName"] not in PROFILES:
            what = result[name] = f"pending (schedulerName={cur['spec']['schedulerName']}: not ours, untouched)"
        else:
            what = result[name] = f"pending: {reasons.get(name, '(no event yet)')}"
        rows[scenario].append((name, what))
    devices, checks = demo_dra.notes(result, demo_dra.allocations(kube, NAMESPACE))
    seen = demo_training.observe(kube, NAMESPACE)
    extra = {
        demo_dra.SCENARIO: checks,
        demo_topology.SCENARIO: demo_topology.notes(seen.events),
        **demo_training.notes(result, seen, defrag),
    }
    width = max(len(n) for r in rows.values() for n, _ in r)
    for scenario, title in SCENARIOS.items():
        print(f"\n[{scenario}] {title}", file=out)
        for name, what in rows[scenario]:
            print(f"  {name.ljust(width)}  {what}{devices.get(name, '')}", file=out)
        for line in extra.get(scenario, ()):
            print(f"  {line}", file=out)
    return result


def main(*, keep: bool = False) -> int:
    # SIGTERM/SIGHUP unwind like Ctrl-C: the finally blocks stop the daemon and the control plane.
    with signals_as_exit():
        return _main(keep=keep)


def _main(*, keep: bool) -> int:
    cp = ControlPlane(find_binaries()).start()
    try:
        print(f"kube-apiserver {cp.version} on {cp.host} (kubeconfig: {cp.kubeconfig()})")
        t0 = time.monotonic()
        _, rc = run_demo(cp)
        if rc != 0:
            print(f"the scheduler exited with {rc}; see its log above")
            return 1
        print(f"demo finished in {time.monotonic() - t0:.1f}s")
        if keep:
            print("control plane left running; press Ctrl-C (or send SIGTERM) to stop it")
            try:
                while True:
                    time.sleep(3600)
            except KeyboardInterrupt:
                pass  # Ctrl-C is how the user asks to stop: the control plane stops below
    finally:
        cp.stop()
    return 0
