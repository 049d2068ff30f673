"""The README's demo: a local control plane, the daemon, a sample workload, and where pods went.

It runs the real ``custom-scheduler run`` command as a separate process against a real
kube-apiserver + etcd on loopback (no kubelet: Nodes are API objects), creates a small workload
with the situations the scheduler exists for, and prints where each pod went and, for the ones
that did not fit, kube-scheduler's aggregated reason from the ``FailedScheduling`` event.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from custom_scheduler.devenv import cluster
from custom_scheduler.devenv.controlplane import ControlPlane, find_binaries
from custom_scheduler.kube.client import KubeClient

NAMESPACE = "demo"

DEMO_CONFIG = """\
apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
leaderElection:
  leaderElect: false
profiles:
- schedulerName: custom-scheduler
"""


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
    name: str, *, cpu: str = "", mem: str = "", scheduler: str = "custom-scheduler", **spec: Any
) -> dict[str, Any]:
    req = {k: v for k, v in (("cpu", cpu), ("memory", mem)) if v}
    extra_req = spec.pop("requests", {})
    req.update(extra_req)
    container: dict[str, Any] = {"name": "app", "image": "registry.k8s.io/pause:3.9"}
    if req:
        container["resources"] = {"requests": req, "limits": dict(extra_req)} if extra_req else {"requests": req}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": NAMESPACE, "labels": spec.pop("labels", {"app": name})},
        "spec": {"schedulerName": scheduler, "containers": [container], **spec},
    }


def workload() -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    nodes = [
        _node("node-a", "4", "8Gi", labels={"topology.kubernetes.io/zone": "zone-a"}),
        _node("node-b", "4", "8Gi", labels={"topology.kubernetes.io/zone": "zone-b"}),
        _node("node-c", "2", "4Gi", labels={"topology.kubernetes.io/zone": "zone-c"}),
        _node(
            "gpu-1",
            "8",
            "32Gi",
            labels={"nvidia.com/gpu.product": "A100"},
            resources={"nvidia.com/gpu": "4"},
            taints=[{"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}],
        ),
    ]
    gpu_toleration = [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]
    pods = [_pod(f"web-{i}", cpu="500m", mem="512Mi", labels={"app": "web"}) for i in range(6)]
    pods += [
        _pod("train-0", cpu="2", mem="8Gi", requests={"nvidia.com/gpu": "2"}, tolerations=gpu_toleration),
        _pod("train-1", cpu="2", mem="8Gi", requests={"nvidia.com/gpu": "2"}, tolerations=gpu_toleration),
        _pod("train-2", cpu="1", mem="4Gi", requests={"nvidia.com/gpu": "1"}, tolerations=gpu_toleration),
        _pod("batch-huge", cpu="16", mem="8Gi"),
        _pod("no-requests"),
        _pod("other-scheduler", cpu="100m", scheduler="default-scheduler"),
    ]
    return nodes, pods


def _events(kube: KubeClient) -> dict[str, str]:
    doc = kube.get(f"/apis/events.k8s.io/v1/namespaces/{NAMESPACE}/events")
    out: dict[str, str] = {}
    for e in doc.get("items") or ():
        if e.get("reason") == "FailedScheduling":
            out[e["regarding"]["name"]] = e.get("note", "")
    return out


def run_demo(
    cp: ControlPlane, out: Any = sys.stdout, timeout: float = 60.0, *, cleanup: bool = False
) -> tuple[dict[str, str], int]:
    """Run the workload against ``cp`` with the daemon in a subprocess.

    Returns pod → node (or the pending reason) and the daemon's exit code after SIGTERM.
    ``cleanup`` deletes the demo's nodes and namespace afterwards (tests share one control plane).
    """
    kube = KubeClient.from_kubeconfig(str(cp.kubeconfig()), qps=0, burst=1)
    cluster.create_namespace(kube, NAMESPACE)
    nodes, pods = workload()
    for n in nodes:
        cluster.create_ready_node(kube, n)
    workdir = Path(tempfile.mkdtemp(prefix="cs-demo-"))
    cfg = workdir / "scheduler-config.yaml"
    cfg.write_text(DEMO_CONFIG)
    log_path = workdir / "scheduler.log"
    env = {**os.environ, "LOG_FORMAT": "json"}
    argv = [sys.executable, "-m", "custom_scheduler", "run", "--config", str(cfg), "--kubeconfig", str(cp.kubeconfig())]
    with log_path.open("wb") as logf:
        proc = subprocess.Popen(
            argv,
            stdout=logf,
            stderr=subprocess.STDOUT,
            env=env,
        )
        try:
            print(f"custom-scheduler running (pid {proc.pid}), log: {log_path}", file=out)
            for p in pods:
                kube.post(f"/api/v1/namespaces/{NAMESPACE}/pods", p)
            ours = [p["metadata"]["name"] for p in pods if p["spec"]["schedulerName"] == "custom-scheduler"]

            def settled() -> bool:
                bound = {p["metadata"]["name"] for p in cluster.list_pods(kube, NAMESPACE) if p["spec"].get("nodeName")}
                failed = set(_events(kube))
                return all(n in bound or n in failed for n in ours)

            try:
                cluster.wait_for(settled, timeout=timeout, interval=0.25, what="every pod bound or reported")
            except TimeoutError as e:
                print(f"warning: {e}", file=out)
        finally:
            proc.send_signal(signal.SIGTERM)
            try:
                rc = proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                rc = proc.wait()
    reasons = _events(kube)
    result: dict[str, str] = {}
    rows = []
    for p in cluster.list_pods(kube, NAMESPACE):
        name = p["metadata"]["name"]
        node = p["spec"].get("nodeName") or ""
        sched = p["spec"]["schedulerName"]
        if node:
            what = f"-> {node}"
        elif sched != "custom-scheduler":
            what = f"pending (schedulerName={sched}: not ours, untouched)"
        else:
            what = f"pending: {reasons.get(name, '(no event yet)')}"
        result[name] = node or what
        rows.append((name, what))
    print("\nWhere each pod went:", file=out)
    width = max(len(r[0]) for r in rows)
    for name, what in sorted(rows):
        print(f"  {name.ljust(width)}  {what}", file=out)
    print(f"\nscheduler exited with code {rc} after SIGTERM", file=out)
    if cleanup:
        cluster.delete_nodes(kube, [n["metadata"]["name"] for n in nodes])
        kube.delete(f"/api/v1/namespaces/{NAMESPACE}")
    return result, rc


def main(*, keep: bool = False) -> int:
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
            print("control plane left running; press Ctrl-C to stop it")
            try:
                while True:
                    time.sleep(3600)
            except KeyboardInterrupt:
                pass
    finally:
        cp.stop()
    return 0
