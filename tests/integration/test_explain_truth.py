"""explain tells the truth about the running daemon (issue #29 item 1), on the real API server.

A daemon of this test (``daemon.serve``, its HTTPS port on 127.0.0.1, authenticating and
authorizing through the API server as the manifests' ServiceAccount) runs a profile unlike the
default: NodeResourcesFit MostAllocated (it packs) and GangScheduling. explain, run without
``--config``:

- reads that profile from the daemon's ``/configz`` (``--configz``: the API server refuses to proxy
  to a loopback pod IP, so the pod-proxy discovery is unit-tested in test_explain_config.py) and
  agrees with the binding, where the default profile names another node;
- falls back, with a one-line note, to the ConfigMap and then to the default profile when
  ``/configz`` cannot be read, and says on the first line which it used;
- explains a pending gang member as the group cycle decided: unschedulable, with exactly the
  message of the daemon's FailedScheduling;
- explains NAME of a pods file after the pods before it (``--pods FILE NAME``), with the precise
  reason (which taint, short by how much cpu) and what would make it fit.
"""

from __future__ import annotations

import contextlib
import json
import re
import threading
import urllib.parse
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from custom_scheduler import config
from custom_scheduler.api import podgroup as gang
from custom_scheduler.devenv import cluster
from custom_scheduler.devenv.controlplane import ControlPlane
from custom_scheduler.kube import api_errors
from custom_scheduler.kube.client import KubeClient
from custom_scheduler.plugins.builtin import full_registry
from custom_scheduler.server.app import App
from custom_scheduler.server.daemon import serve
from custom_scheduler.server.metrics import Metrics
from custom_scheduler.tools import explain_config as ec
from custom_scheduler.tools import main
from tests import kubectl as k
from tests.builders import make_node, make_pod, make_pod_group
from tests.integration.env import Env
from tests.secure import get

PROFILE = "explain-truth"
CONFIG = f"""
apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
leaderElection: {{leaderElect: false}}
profiles:
- schedulerName: {PROFILE}
  plugins:
    multiPoint:
      enabled: [{{name: GangScheduling}}]
  pluginConfig:
  - name: NodeResourcesFit
    args:
      scoringStrategy:
        type: MostAllocated
        resources: [{{name: cpu, weight: 1}}, {{name: memory, weight: 1}}]
"""
#: Nothing listens there: /configz cannot be read.
UNREACHABLE = "https://127.0.0.1:1/configz"


@pytest.fixture
def configz_url(control_plane: ControlPlane, tmp_path: Path) -> Iterator[str]:
    """The /configz URL of a daemon serving CONFIG (stopped after the test)."""
    k.apply_rbac(control_plane)
    sa = KubeClient.from_kubeconfig(str(control_plane.kubeconfig(k.SCHEDULER_USER)), qps=0, burst=1)
    path = tmp_path / "config.yaml"
    path.write_text(CONFIG)
    metrics = Metrics(process_collectors=False)
    app = App(config.load_config_file(path, full_registry()), full_registry(), sa, metrics=metrics)
    result: list[int] = []

    def run() -> None:
        result.append(serve(app, metrics, config_path=path, health_address="127.0.0.1:0", sync_timeout=60))

    t = threading.Thread(target=run, daemon=True)
    t.start()
    cluster.wait_for(lambda: app.health_port, timeout=10, what="health server")
    base = f"https://127.0.0.1:{app.health_port}"
    cluster.wait_for(lambda: get(f"{base}/readyz")[0] == 200, timeout=60, what="ready")
    yield f"{base}/configz"
    app.stop_event.set()
    t.join(30)
    assert result == [0]


_DAEMON_LOG_LINE = re.compile(r"^\d{4}-\d\d-\d\d[ T]\d\d:\d\d:\d\d\S* \[|^\{\"")


def _run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    """Run the CLI in this process; stdout and stderr without the daemon's log lines."""
    capsys.readouterr()
    rc = main(list(argv))
    out = capsys.readouterr()

    def tool_only(text: str) -> str:
        return "".join(line for line in text.splitlines(keepends=True) if not _DAEMON_LOG_LINE.match(line))

    return rc, tool_only(out.out), tool_only(out.err)


def _pod(name: str) -> Any:
    return make_pod(name).scheduler(PROFILE)


def test_explain_reads_the_daemons_configz_and_agrees_with_the_binding(
    env: Env, configz_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    full = env.node(make_node("full").capacity(cpu="4", memory="8Gi", pods="20"))
    empty = env.node(make_node("empty").capacity(cpu="4", memory="8Gi", pods="20"))
    env.create_pod(make_pod("resident").req(cpu="2", memory="1Gi").node(full).obj())
    env.create_pod(_pod("new").req(cpu="500m", memory="256Mi").obj())
    assert env.wait_bound("new")["new"] == full  # MostAllocated packs
    kubeconfig = str(env.control_plane.kubeconfig())
    key = f"{env.namespace}/new"

    rc, out, err = _run(capsys, "explain", key, "--kubeconfig", kubeconfig, "--configz", configz_url)
    assert rc == 0, err
    assert out.splitlines()[0] == f"Config: /configz at {configz_url}"
    assert f"Agrees with the binding: {full} is the chosen node." in out
    rc, out, err = _run(capsys, "explain", key, "--kubeconfig", kubeconfig, "--configz", configz_url, "-o", "json")
    assert rc == 0, err
    d = json.loads(out)
    assert (d["configSource"], d["result"]["node"], d["agreesWithBinding"]) == (
        f"/configz at {configz_url}",
        full,
        True,
    )

    # /configz unreachable, no ConfigMap: a one-line note, the default profile, and the
    # disagreement the issue reported (LeastAllocated spreads to the empty node).
    absent = f"{env.namespace}/absent"
    args = ("explain", key, "--kubeconfig", kubeconfig, "--configz", UNREACHABLE, "--config-map", absent)
    rc, out, err = _run(capsys, *args)
    assert rc == 0, err
    notes = [line for line in err.splitlines() if "/configz was not read" in line]
    assert len(notes) == 1, err
    assert "Traceback" not in err
    assert out.splitlines()[0] == f"Config: the default profile (no /configz, no ConfigMap {absent})"
    assert f"Differs from the binding ({full})" in out
    assert f"Result: {empty}" in out


def test_without_configz_the_config_map_is_used(env: Env, capsys: pytest.CaptureFixture[str]) -> None:
    """The second source: the ConfigMap (here the packing profile), named on the first line."""
    full = env.node(make_node("full").capacity(cpu="4", memory="8Gi", pods="20"))
    env.node(make_node("empty").capacity(cpu="4", memory="8Gi", pods="20"))
    env.create_pod(make_pod("resident").req(cpu="2", memory="1Gi").node(full).obj())
    env.kube.post(
        f"/api/v1/namespaces/{env.namespace}/configmaps",
        {"metadata": {"name": "scheduler-config"}, "data": {"scheduler-config.yaml": CONFIG}},
    )
    pod_file = env.control_plane.workdir / f"{env.namespace}-pod.yaml"
    pod_file.write_text(json.dumps(_pod("new").req(cpu="500m", memory="256Mi").obj()))
    ref = f"{env.namespace}/scheduler-config"
    kubeconfig = str(env.control_plane.kubeconfig())
    rc, out, err = _run(
        capsys, "explain", str(pod_file), "--kubeconfig", kubeconfig, "--configz", UNREACHABLE, "--config-map", ref
    )
    assert rc == 0, err
    assert "/configz was not read" in err
    assert out.splitlines()[0] == f"Config: ConfigMap {ref}"
    assert f"Result: {full}" in out


def test_a_pending_gang_member_is_explained_as_the_group_cycle_decides(
    env: Env, configz_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """minCount 3, three members of 2 CPUs, one node of 4: each alone fits, the gang does not;
    explain says so with the daemon's message, and what would make it fit."""
    node = env.node(make_node("gang").capacity(cpu="4", memory="8Gi", pods="20"))
    env.kube.post(
        f"/apis/{gang.NATIVE_GROUP_VERSION}/namespaces/{env.namespace}/podgroups",
        make_pod_group("g", env.namespace, min_count=3).obj(),
    )
    for i in range(3):
        env.create_pod(_pod(f"g-{i}").req(cpu="2").scheduling_group("g").obj())

    def condition() -> str:
        for c in env.pod("g-0").get("status", {}).get("conditions", []):
            if c["type"] == "PodScheduled" and c["status"] == "False":
                return str(c["message"])
        return ""

    message = cluster.wait_for(condition, timeout=30, what="PodScheduled=False")
    assert message.startswith(f"pod group {env.namespace}/g is unschedulable: minCount (3) cannot be satisfied")
    notes = cluster.wait_for(
        lambda: [
            e.get("note", "") for e in env.events("FailedScheduling", about="g-0") if e["regarding"]["kind"] == "Pod"
        ],
        timeout=30,
        what="FailedScheduling",
    )
    kubeconfig = str(env.control_plane.kubeconfig())
    rc, out, err = _run(
        capsys, "explain", f"{env.namespace}/g-0", "--kubeconfig", kubeconfig, "--configz", configz_url, "-o", "json"
    )
    assert rc == 0, err
    d = json.loads(out)
    assert d["result"]["schedulable"] is False
    assert d["result"]["message"] == message == notes[-1]
    assert sorted(g["pod"] for g in d["groupCycle"]) == [f"{env.namespace}/g-{i}" for i in range(3)]
    assert {g["result"] for g in d["groupCycle"]} == {"unschedulable"}
    # Two members fit, the third is short by 2 CPUs: what would make the gang fit.
    assert d["wouldFit"] == [{"node": node, "changes": ["free 2 cpu (cpu: requests 2, free 0 of 4)"], "unknown": []}]


def test_explain_a_pod_of_a_file_after_the_pods_before_it(
    env: Env, configz_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Alone, "last" (3 CPUs) fits on the empty node; after "first" (2 CPUs) nothing fits: the
    empty node is short by 1 CPU, the big one has a taint "last" does not tolerate, which is the
    smallest change."""
    full = env.node(make_node("full").capacity(cpu="4", memory="8Gi", pods="20"))
    empty = env.node(make_node("empty").capacity(cpu="4", memory="8Gi", pods="20"))
    tainted = env.node(make_node("tainted").capacity(cpu="8", memory="8Gi", pods="20").taint("dedicated", "batch"))
    env.create_pod(make_pod("resident").req(cpu="2500m").node(full).obj())
    docs = [_pod("first").req(cpu="2").obj(), _pod("last").req(cpu="3").obj()]
    for doc in docs:
        doc["metadata"]["namespace"] = env.namespace
    pods = tmp_path / "pods.yaml"
    pods.write_text(yaml.safe_dump_all(docs))
    single = tmp_path / "last.yaml"
    single.write_text(yaml.safe_dump(docs[1]))
    kubeconfig = str(env.control_plane.kubeconfig())
    live = ("--kubeconfig", kubeconfig, "--configz", configz_url)

    rc, out, err = _run(capsys, "explain", str(single), *live, "-o", "json")
    assert rc == 0, err
    assert json.loads(out)["result"]["node"] == empty

    rc, out, err = _run(capsys, "explain", "--pods", str(pods), "last", *live, "-o", "json")
    assert rc == 0, err
    d = json.loads(out)
    assert d["result"]["schedulable"] is False
    by = {n["name"]: n for n in d["nodes"]}
    assert by[empty]["detail"] == ["cpu: requests 3, free 2 of 4"]
    assert by[full]["detail"] == ["cpu: requests 3, free 1.5 of 4"]
    assert by[tainted]["detail"] == ["untolerated taint dedicated=batch:NoSchedule"]
    assert d["wouldFit"][0] == {
        "node": tainted,
        "changes": ["tolerate taint dedicated=batch:NoSchedule"],
        "unknown": [],
    }
    assert d["wouldFit"][1]["node"] == empty
    rc, text, err = _run(capsys, "explain", "--pods", str(pods), f"{env.namespace}/last", *live)
    assert rc == 0, err
    assert f"  {tainted}: tolerate taint dedicated=batch:NoSchedule" in text
    assert f"  {empty}: free 1 cpu (cpu: requests 3, free 2 of 4)" in text
    # The FailedScheduling text stays upstream's: only explain says more.
    assert d["result"]["message"].startswith("0/")
    assert "dedicated=batch" not in d["result"]["message"]


@pytest.fixture
def daemon_pods(env: Env) -> Iterator[Callable[..., str]]:
    """``daemon_pods(name, port, pod_ip)``: a Running, Ready pod in kube-system labelled as the
    Deployment's, bound to a node of the test (its status written as a kubelet would); with
    ``leader``, the Lease kube-system/custom-scheduler held by it. All removed afterwards."""
    made: list[str] = []
    # A Node no kubelet runs: kwok would write its own pod IPs over the ones the test sets.
    node = f"daemon-host-{env.namespace}"
    host = make_node(node).capacity(cpu="1", memory="1Gi", pods="10").taint("control", "plane")
    cluster.create_ready_node(env.kube, host.obj())
    lease_path = f"/apis/coordination.k8s.io/v1/namespaces/kube-system/leases/{ec.DAEMON_LEASE}"

    def make(name: str, port: int, pod_ip: str, *, leader: bool = False) -> str:
        name = f"{name}-{env.namespace}"
        pod = make_pod(name, "kube-system").node(node).obj()
        pod["metadata"]["labels"] = {"app.kubernetes.io/name": "custom-scheduler"}
        pod["spec"]["containers"][0]["ports"] = [{"name": "https-metrics", "containerPort": port}]
        created = env.kube.post("/api/v1/namespaces/kube-system/pods", pod)
        made.append(name)
        created["status"] = {
            "phase": "Running",
            "podIP": pod_ip,
            "podIPs": [{"ip": pod_ip}],
            "conditions": [{"type": "Ready", "status": "True"}],
        }
        env.kube.put(f"/api/v1/namespaces/kube-system/pods/{name}/status", created)
        if leader:
            lease = {
                "metadata": {"name": ec.DAEMON_LEASE, "namespace": "kube-system"},
                "spec": {"holderIdentity": f"{name}_0f4c2a51-1111-4a4a-9999-0123456789ab", "leaseDurationSeconds": 15},
            }
            # The session's control plane may hold the default Lease from an earlier daemon (every
            # daemon started with leader election takes it): this test's holder replaces it.
            with contextlib.suppress(api_errors.NotFound):
                env.kube.delete(lease_path)
            env.kube.post("/apis/coordination.k8s.io/v1/namespaces/kube-system/leases", lease)
        return name

    yield make
    for name in made:
        env.kube.delete(f"/api/v1/namespaces/kube-system/pods/{name}", {"gracePeriodSeconds": 0})
    with contextlib.suppress(api_errors.NotFound):
        env.kube.delete(lease_path)
    cluster.delete_nodes(env.kube, [node])


def test_explain_finds_the_leaders_configz_by_itself(
    env: Env, configz_url: str, daemon_pods: Callable[..., str], capsys: pytest.CaptureFixture[str]
) -> None:
    """No --configz: the Lease names the leader among the Deployment's ready pods, and its
    /configz is read at its pod IP (loopback here: the daemon of this test). The other replica
    (first by name, answering nothing) is not asked."""
    port = int(urllib.parse.urlsplit(configz_url).port or 0)
    daemon_pods("a-standby", 1, "127.0.0.1")
    leader = daemon_pods("b-leader", port, "127.0.0.1", leader=True)
    full = env.node(make_node("full").capacity(cpu="4", memory="8Gi", pods="20"))
    env.node(make_node("empty").capacity(cpu="4", memory="8Gi", pods="20"))
    env.create_pod(make_pod("resident").req(cpu="2", memory="1Gi").node(full).obj())
    env.create_pod(_pod("new").req(cpu="500m", memory="256Mi").obj())
    assert env.wait_bound("new")["new"] == full
    kubeconfig = str(env.control_plane.kubeconfig())
    rc, out, err = _run(capsys, "explain", f"{env.namespace}/new", "--kubeconfig", kubeconfig)
    assert rc == 0, err
    assert "/configz was not read" not in err
    assert out.splitlines()[0] == f"Config: /configz of kube-system/{leader} (the leader, via pod IP 127.0.0.1)"
    assert f"Agrees with the binding: {full} is the chosen node." in out


def test_a_daemon_pod_that_answers_nothing_is_one_note_and_the_next_source(
    env: Env, daemon_pods: Callable[..., str], capsys: pytest.CaptureFixture[str]
) -> None:
    """The leader's pod IP answers nothing, and neither does the API server's pod proxy to it: a
    single note saying how to get through, then the next source (no ConfigMap: the default)."""
    leader = daemon_pods("gone", 1, "192.0.2.77", leader=True)
    env.node(make_node("n").capacity(cpu="4", memory="8Gi", pods="20"))
    pod_file = env.control_plane.workdir / f"{env.namespace}-pod.yaml"
    pod_file.write_text(json.dumps(_pod("p").req(cpu="500m").obj()))
    absent = f"{env.namespace}/absent"
    kubeconfig = str(env.control_plane.kubeconfig())
    rc, out, err = _run(capsys, "explain", str(pod_file), "--kubeconfig", kubeconfig, "--config-map", absent)
    assert rc == 0, err
    # One note from explain; any other stderr line may only be a library's warning, never a traceback.
    notes = [line for line in err.splitlines() if line.startswith("custom-scheduler explain:")]
    assert len(notes) == 1, err
    assert "Traceback" not in err, err
    note = notes[0]
    assert note.startswith("custom-scheduler explain: note: the daemon's /configz was not read (pod IP 192.0.2.77:")
    assert f"port-forward to pod {leader} and pass --configz https://127.0.0.1:1/configz)" in note
    assert out.splitlines()[0] == f"Config: the default profile (no /configz, no ConfigMap {absent})"
