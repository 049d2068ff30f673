"""``hack/dev.sh up`` / ``down`` (:mod:`custom_scheduler.devenv.playground`) and ``demo --keep``
then SIGTERM: a local cluster that works, and nothing left running once it is stopped.

The playground runs its own control plane (that is what it is for), started through the real
command line in a state directory of the test's, so the session's control plane is untouched. The
tests of one module share one playground and run in order: the last one takes it down.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from custom_scheduler.devenv import cluster, kwok, playground
from custom_scheduler.kube.client import KubeClient, node_path, pod_path
from tests.builders import make_pod

pytestmark = pytest.mark.timeout(600)


def _cli(command: str, state: Path, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    argv = [sys.executable, "-m", "custom_scheduler.devenv.playground", command, f"--state={state}"]
    return subprocess.run(argv, capture_output=True, text=True, timeout=timeout, check=False)


@pytest.fixture(scope="module")
def state(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A playground brought up by ``up``; ``down`` afterwards whatever happened (a no-op once the
    last test took it down)."""
    path = tmp_path_factory.mktemp("playground") / "state"
    started = _cli("up", path)
    try:
        assert started.returncode == 0, started.stdout + started.stderr
        assert f"export KUBECONFIG={path / 'kubeconfig'}" in started.stdout
        yield path
    finally:
        _cli("down", path)


@pytest.fixture(scope="module")
def kube(state: Path) -> KubeClient:
    return KubeClient.from_kubeconfig(str(state / "kubeconfig"), qps=0, burst=1)


def _ready_by_kwok(node: dict[str, Any]) -> bool:
    return kwok.ready_status(node) == "True" and node["status"]["nodeInfo"]["kubeletVersion"].startswith("kwok-")


def test_up_starts_ready_kwok_nodes_labelled_as_a_kubelet_would_and_up_again_says_so(
    state: Path, kube: KubeClient
) -> None:
    want = {n["metadata"]["name"]: n for n in playground.playground_nodes()}
    nodes = {n["metadata"]["name"]: n for n in kube.get(node_path())["items"]}
    assert set(nodes) == set(want)
    for name, node in nodes.items():
        assert _ready_by_kwok(node), node["status"]
        labels = node["metadata"]["labels"]
        assert labels["kubernetes.io/hostname"] == name
        assert labels["kubernetes.io/os"] == "linux"
        assert labels["kubernetes.io/arch"] == "amd64"
        assert labels["topology.kubernetes.io/zone"].startswith("zone-")
        taints = {t["key"] for t in node["spec"].get("taints") or []}
        assert kwok.NOT_READY_TAINT not in taints
        gpus = node["status"]["allocatable"].get("nvidia.com/gpu")
        assert (gpus == "4") == name.startswith("gpu-"), (name, gpus)
        assert ("nvidia.com/gpu" in taints) == name.startswith("gpu-"), (name, taints)

    supervisor_before = json.loads((state / "supervisor.json").read_text())
    again = _cli("up", state)
    assert again.returncode == 0, again.stderr
    assert again.stdout.startswith("already up"), again.stdout
    assert json.loads((state / "supervisor.json").read_text()) == supervisor_before


def _running_on(kube: KubeClient, namespace: str, name: str) -> str:
    """The node of pod ``name`` once kwok reports it Running, else ""."""
    pod = kube.get(pod_path(namespace, name))
    if (pod.get("status") or {}).get("phase") != "Running":
        return ""
    return str(pod["spec"].get("nodeName") or "")


def test_our_daemon_schedules_pods_onto_kwok_nodes_where_they_run(state: Path, kube: KubeClient) -> None:
    namespace = f"try-{uuid.uuid4().hex[:6]}"
    cluster.create_namespace(kube, namespace)
    web = make_pod("web", namespace).req(cpu="500m", memory="256Mi").obj()
    train = (
        make_pod("train", namespace)
        .req_named({"cpu": "1", "nvidia.com/gpu": "1"})
        .toleration("nvidia.com/gpu", operator="Exists", effect="NoSchedule")
        .obj()
    )
    for pod in (web, train):
        assert pod["spec"]["schedulerName"] == "custom-scheduler"
        kube.post(pod_path(namespace), pod)
    web_node = cluster.wait_for(lambda: _running_on(kube, namespace, "web"), timeout=60, what="web Running")
    train_node = cluster.wait_for(lambda: _running_on(kube, namespace, "train"), timeout=60, what="train Running")
    # config.example.yaml's default profile: an untolerated GPU taint keeps web off the GPU nodes.
    assert web_node in {"node-a", "node-b", "node-c"}
    assert train_node in {"gpu-1", "gpu-2"}
    events = kube.get(f"/apis/events.k8s.io/v1/namespaces/{namespace}/events")["items"]
    scheduled = {e["regarding"]["name"]: e for e in events if e.get("reason") == "Scheduled"}
    assert set(scheduled) == {"web", "train"}
    assert {e["reportingController"] for e in scheduled.values()} == {"custom-scheduler"}
    # Its log: JSON only (the libraries' records too), leadership and the start said once each.
    events = [json.loads(line)["event"] for line in (state / "scheduler.log").read_text().splitlines()]
    assert events.count("leader_acquired") == events.count("scheduling_started") == 1, events


def test_down_stops_every_recorded_process_and_removes_the_state(state: Path) -> None:
    records = playground.read_records(state)
    names = {r.name for r in records}
    assert {"supervisor", "etcd", "kube-apiserver", "kwok"} <= names, names
    assert all(r.alive() for r in records), records

    stopped = _cli("down", state)
    assert stopped.returncode == 0, stopped.stderr
    assert "killed" not in stopped.stdout, stopped.stdout  # the supervisor stopped them all itself
    assert [r for r in records if r.alive()] == []
    assert not state.exists()
    assert _cli("down", state).stdout.startswith("no playground")


def test_demo_keep_then_sigterm_leaves_no_process_behind(tmp_path: Path) -> None:
    out = tmp_path / "demo.out"
    with out.open("wb") as f:
        demo = subprocess.Popen(
            [sys.executable, "-m", "custom_scheduler", "demo", "--keep"],
            stdout=f,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
        )
    children: list[playground.Recorded] = []
    try:

        def kept() -> bool:
            assert demo.poll() is None, out.read_text()
            return "control plane left running" in out.read_text()

        cluster.wait_for(kept, timeout=300, interval=0.5, what="the demo to finish and keep its control plane")
        children += playground.children_of(demo.pid)
        assert {"etcd", "kube-apiserver"} <= {c.name for c in children}, children
        demo.send_signal(signal.SIGTERM)
        assert demo.wait(timeout=60) == 128 + signal.SIGTERM, out.read_text()
        assert [c for c in children if c.alive()] == []
    finally:  # a failed run still leaves nothing behind: the demo and what it started, by PID
        if demo.poll() is None:
            demo.kill()
            demo.wait(timeout=10)
        for child in children:
            if child.alive():
                os.kill(child.pid, signal.SIGKILL)
