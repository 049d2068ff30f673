"""explain and simulate agree with the live daemon on a real API server.

- explain: pods are scheduled one at a time by the daemon, then explained newest first, each pod
  deleted after its explanation. Explain removes the pod itself first, so every explanation sees
  exactly the cluster the daemon saw when it bound that pod; its verdict must name the daemon's node
  (or a tie set containing it: the daemon breaks ties at random).
- simulate: a snapshot taken with ``custom-scheduler snapshot`` before the workload, then the same
  pods simulated offline, must reproduce the daemon's placements. The workload (distinct node
  sizes) has no score ties, which the test checks too, so the comparison is exact.

The daemon runs a profile of its own (``explain-test``), so pods left behind by other tests of the
session are never scheduled onto these nodes.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from custom_scheduler.api import quantity
from custom_scheduler.devenv import cluster
from custom_scheduler.kube import api_errors
from custom_scheduler.tools import main
from tests.builders import PodBuilder, make_node, make_pod
from tests.integration.env import Env

ZONE = "topology.kubernetes.io/zone"
PROFILE = "explain-test"
CONFIG = f"""
apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
leaderElection: {{leaderElect: false}}
profiles:
- schedulerName: {PROFILE}
"""


@pytest.fixture
def config_file(tmp_path: Path) -> str:
    p = tmp_path / "config.yaml"
    p.write_text(CONFIG)
    return str(p)


def _pod(name: str) -> PodBuilder:
    return make_pod(name).scheduler(PROFILE)


def _bind_in_order(env: Env, pods: list[PodBuilder]) -> list[tuple[str, str, dict[str, Any]]]:
    """Create the pods one at a time, each after the previous one is bound: (name, node, object)."""
    out = []
    for b in pods:
        obj = b.obj()
        env.create_pod(obj)
        name = obj["metadata"]["name"]
        out.append((name, env.wait_bound(name)[name], obj))
    return out


#: A log line of the daemon running in this process (structlog's console format): it can land in
#: the middle of the tool's captured output, which is then not valid JSON.
_DAEMON_LOG_LINE = re.compile(r"^\d{4}-\d\d-\d\d[ T]\d\d:\d\d:\d\d\S* \[")


def _run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    """Run the CLI in this process; its stdout and stderr without the daemon's log lines."""
    capsys.readouterr()
    rc = main(list(argv))
    out = capsys.readouterr()

    def tool_only(text: str) -> str:
        return "".join(line for line in text.splitlines(keepends=True) if not _DAEMON_LOG_LINE.match(line))

    return rc, tool_only(out.out), tool_only(out.err)


def _delete_now(env: Env, name: str) -> None:
    env.delete_pod_now(name)

    def gone() -> bool:
        try:
            env.pod(name)
        except api_errors.NotFound:
            return True
        return False

    cluster.wait_for(gone, timeout=15, what=f"{name} deleted")


def test_explain_names_the_node_the_daemon_bound_each_pod_to(
    env: Env, config_file: str, capsys: pytest.CaptureFixture[str]
) -> None:
    made = [
        env.nodes(make_node("xa1").label(ZONE, "a").capacity(cpu="4", memory="8Gi", pods="20")),
        env.nodes(make_node("xa2").label(ZONE, "a").capacity(cpu="8", memory="16Gi", pods="20")),
        env.nodes(
            make_node("xb1").label(ZONE, "b").capacity(cpu="4", memory="8Gi", pods="20").taint("dedicated", "batch")
        ),
        env.nodes(
            make_node("xb2").label(ZONE, "b").label("disktype", "ssd").capacity(cpu="6", memory="12Gi", pods="20")
        ),
        env.nodes(make_node("xc1").label(ZONE, "c").capacity(cpu="2", memory="4Gi", pods="20")),
    ]
    names = [n["metadata"]["name"] for n in made]
    env.start_scheduler(CONFIG)
    spread = {"matchLabels": {"app": "spread"}}
    anti = {"topologyKey": "kubernetes.io/hostname", "labelSelector": {"matchLabels": {"app": "anti"}}}
    workload = [
        _pod("plain-0").req(cpu="500m", memory="512Mi"),
        _pod("big-0").req(cpu="5", memory="2Gi"),
        _pod("batch-0").req(cpu="1", memory="1Gi").toleration("dedicated", "batch", "NoSchedule"),
        _pod("ssd-0")
        .req(cpu="500m")
        .required_node_affinity({"matchExpressions": [{"key": "disktype", "operator": "In", "values": ["ssd"]}]}),
        *[
            _pod(f"spread-{i}").label("app", "spread").req(cpu="200m").spread(1, ZONE, selector=spread)
            for i in range(4)
        ],
        *[
            _pod(f"anti-{i}").label("app", "anti").req(cpu="100m").pod_affinity("podAntiAffinity", anti)
            for i in range(3)
        ],
        _pod("zone-c-0")
        .req(cpu="300m")
        .preferred_node_affinity(50, {"matchExpressions": [{"key": ZONE, "operator": "In", "values": ["c"]}]}),
    ]
    bound = _bind_in_order(env, workload)
    assert len({node for name, node, _ in bound if name.startswith("anti-")}) == 3
    kubeconfig = str(env.control_plane.kubeconfig())

    for name, node, _ in reversed(bound):
        key = f"{env.namespace}/{name}"
        rc, out, err = _run(capsys, "explain", key, "--kubeconfig", kubeconfig, "--config", config_file, "-o", "json")
        assert rc == 0, err
        d = json.loads(out)
        assert d["boundNode"] == node
        assert d["result"]["schedulable"], d["result"]
        assert node in d["result"]["ties"], (name, node, d["result"])
        assert d["agreesWithBinding"] is True
        assert {n["name"] for n in d["nodes"]} >= set(names)
        if name == "batch-0":
            assert d["result"]["node"] == node
        if name.startswith("ssd-"):
            assert d["result"]["ties"] == [names[3]]
        # The human view says the same.
        rc, text, err = _run(capsys, "explain", key, "--kubeconfig", kubeconfig, "--config", config_file)
        assert rc == 0, err
        assert f"Bound to {node}" in text
        assert "Agrees with the binding" in text
        _delete_now(env, name)

    # A pod nothing fits: explain prints the daemon's own message (with preemption's sentence).
    env.create_pod(_pod("too-big").req(cpu="64").obj())

    def condition() -> str:
        for c in env.pod("too-big").get("status", {}).get("conditions", []):
            if c["type"] == "PodScheduled" and c["status"] == "False":
                return str(c["message"])
        return ""

    message = cluster.wait_for(condition, timeout=30, what="PodScheduled=False")
    rc, out, err = _run(
        capsys, "explain", f"{env.namespace}/too-big", "--kubeconfig", kubeconfig, "--config", config_file, "-o", "json"
    )
    assert rc == 0, err
    d = json.loads(out)
    assert d["boundNode"] is None
    assert d["agreesWithBinding"] is None
    assert not d["result"]["schedulable"]
    assert d["result"]["message"] == message


def test_simulate_on_a_snapshot_reproduces_the_daemons_placements(
    env: Env, config_file: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    made = [
        env.nodes(make_node("t1").label(ZONE, "a").capacity(cpu="2", memory="4Gi", pods="30")),
        env.nodes(make_node("t2").label(ZONE, "b").capacity(cpu="3", memory="5Gi", pods="30")),
        env.nodes(make_node("t3").label(ZONE, "c").capacity(cpu="5", memory="7Gi", pods="30")),
        env.nodes(make_node("t4").label(ZONE, "a").capacity(cpu="6", memory="11Gi", pods="30")),
        env.nodes(
            make_node("t5").label(ZONE, "b").capacity(cpu="4", memory="9Gi", pods="30").taint("dedicated", "special")
        ),
    ]
    t = {n["metadata"]["name"][:2]: n["metadata"]["name"] for n in made}
    # Pods already running (bound directly, as another scheduler would have).
    for name, node, b in (
        ("e0", "t4", _pod("e0").req(cpu="1", memory="1Gi")),
        ("e1", "t2", _pod("e1").req(cpu="500m", memory="768Mi")),
        ("e2", "t5", _pod("e2").req(cpu="1").toleration("dedicated", "special")),
    ):
        env.create_pod(b.node(t[node]).obj())
        assert env.pod(name)["spec"]["nodeName"] == t[node]

    snap = tmp_path / "snapshot.yaml"
    rc, _, err = _run(capsys, "snapshot", "-o", str(snap), "--kubeconfig", str(env.control_plane.kubeconfig()))
    assert rc == 0, err
    doc = yaml.safe_load(snap.read_text())
    assert {n["metadata"]["name"] for n in doc["nodes"]} >= set(t.values())
    mine = [p for p in doc["pods"] if p["metadata"]["namespace"] == env.namespace]
    assert sorted(p["metadata"]["name"] for p in mine) == ["e0", "e1", "e2"]
    assert all("managedFields" not in p["metadata"] for p in doc["pods"])

    env.start_scheduler(CONFIG)
    sp = {"matchLabels": {"app": "sp"}}
    solo = {"topologyKey": "kubernetes.io/hostname", "labelSelector": {"matchLabels": {"app": "solo"}}}
    workload = [
        _pod("w0").req(cpu="300m", memory="400Mi"),
        _pod("w1").req(cpu="700m", memory="1Gi"),
        _pod("w2").req(cpu="1200m", memory="600Mi"),
        *[
            _pod(f"w{i}").label("app", "sp").req(cpu="250m", memory="2Gi").spread(1, ZONE, selector=sp)
            for i in (3, 4, 5)
        ],
        *[
            _pod(f"w{i}").label("app", "solo").req(cpu="400m", memory="300Mi").pod_affinity("podAntiAffinity", solo)
            for i in (6, 7)
        ],
        _pod("w8").req(cpu="600m", memory="1536Mi").toleration("dedicated", "special"),
        _pod("w9")
        .req(cpu="900m", memory="700Mi")
        .required_node_affinity({"matchExpressions": [{"key": ZONE, "operator": "In", "values": ["b", "c"]}]}),
        _pod("w10").req(cpu="1500m", memory="3Gi"),
        _pod("w11").req(cpu="100m", memory="100Mi"),
    ]
    bound = _bind_in_order(env, workload)
    live = {f"{env.namespace}/{name}": node for name, node, _ in bound}

    pods_file = tmp_path / "pods.yaml"
    pods_file.write_text(yaml.safe_dump({"apiVersion": "v1", "kind": "List", "items": [o for _, _, o in bound]}))
    rc, out, err = _run(
        capsys,
        "simulate",
        "--cluster", str(snap),
        "--pods", str(pods_file),
        "--config", config_file,
        "--seed", "1",
        "-o", "json",
        "--html", str(tmp_path / "report.html"),
    )  # fmt: skip
    assert rc == 0, err
    d = json.loads(out)
    assert d["summary"]["placed"] == len(workload)
    assert all(len(p["ties"]) == 1 for p in d["placements"]), "the workload must have no ties"
    simulated = {p["pod"]: p["node"] for p in d["placements"]}
    assert simulated == live
    assert [p["pod"] for p in d["placements"]] == list(live)
    assert "<svg" in (tmp_path / "report.html").read_text()
    # The utilisation after the simulation is what the live cluster now requests.
    requested: dict[str, int] = {}
    for p in env.pods().values():
        cpu = p["spec"]["containers"][0].get("resources", {}).get("requests", {}).get("cpu", "0")
        requested[p["spec"]["nodeName"]] = requested.get(p["spec"]["nodeName"], 0) + quantity.to_milli(cpu)
    after = {u["node"]: u["after"]["cpu"]["requested"] for u in d["utilisation"]}
    for node, milli in requested.items():
        assert after[node] == milli


def test_live_explain_spreads_a_services_pods_as_the_daemon_does(
    env: Env, config_file: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """LeastAllocated alone would put every replica on the much bigger node; the Service's default
    spreading moves some to the small one. Explain must read the Service too, or it names the big
    node for those."""
    big = env.node(make_node("sbig").capacity(cpu="64", memory="128Gi", pods="110"))
    small = env.node(make_node("ssmall").capacity(cpu="8", memory="16Gi", pods="110"))
    service = {"metadata": {"name": "web"}, "spec": {"selector": {"app": "web"}, "ports": [{"port": 80}]}}
    env.kube.post(f"/api/v1/namespaces/{env.namespace}/services", service)
    env.start_scheduler(CONFIG)
    replicas = [_pod(f"web-{i}").label("app", "web").req(cpu="500m", memory="512Mi") for i in range(6)]
    bound = _bind_in_order(env, replicas)
    assert {node for _, node, _ in bound} == {big, small}, bound  # the spreading is what is compared
    kubeconfig = str(env.control_plane.kubeconfig())
    for name, node, _ in reversed(bound):
        key = f"{env.namespace}/{name}"
        rc, out, err = _run(capsys, "explain", key, "--kubeconfig", kubeconfig, "--config", config_file, "-o", "json")
        assert rc == 0, err
        assert "warning" not in err
        d = json.loads(out)
        assert "PodTopologySpread" not in d["skipped"]["score"]
        assert d["agreesWithBinding"] is True, (name, node, d["result"])
        _delete_now(env, name)


def test_live_explain_reads_the_deployed_config_map(env: Env, capsys: pytest.CaptureFixture[str]) -> None:
    """Without --config and with no daemon whose /configz it can find (none runs in kube-system
    here: the discovery through the Lease and the pods finds nothing, a one-line note), a live
    explain uses the daemon's ConfigMap: here a profile that packs (NodeResourcesFit
    MostAllocated), so the pod goes to the fuller node, where the default profile would spread it
    to the emptier one. Without the ConfigMap it says what it used."""
    full = env.node(make_node("full").capacity(cpu="4", memory="8Gi", pods="20"))
    empty = env.node(make_node("empty").capacity(cpu="4", memory="8Gi", pods="20"))
    env.create_pod(make_pod("resident").req(cpu="2", memory="1Gi").node(full).obj())
    packing = CONFIG + (
        "  pluginConfig:\n  - name: NodeResourcesFit\n    args:\n      scoringStrategy:\n"
        "        type: MostAllocated\n        resources: [{name: cpu, weight: 1}, {name: memory, weight: 1}]\n"
    )
    env.kube.post(
        f"/api/v1/namespaces/{env.namespace}/configmaps",
        {"metadata": {"name": "scheduler-config"}, "data": {"scheduler-config.yaml": packing}},
    )
    pod_file = env.control_plane.workdir / f"{env.namespace}-pod.yaml"
    pod_file.write_text(json.dumps(_pod("new").req(cpu="500m", memory="256Mi").obj()))
    kubeconfig = str(env.control_plane.kubeconfig())
    ref = f"{env.namespace}/scheduler-config"
    explain = ("explain", str(pod_file), "--kubeconfig", kubeconfig, "-o", "json")
    rc, out, err = _run(capsys, *explain, "--config-map", ref)
    assert rc == 0, err
    assert f"configuration of ConfigMap {ref}" in err
    assert "/configz was not read (no ready daemon pod" in err
    assert json.loads(out)["result"]["node"] == full
    missing = f"{env.namespace}/absent"
    rc, out, err = _run(capsys, *explain, "--config-map", missing)
    assert rc == 0, err
    assert f"configuration of the default profile (no /configz, no ConfigMap {missing})" in err
    d = json.loads(out)
    assert d["result"]["node"] == empty
    assert d["configSource"] == f"the default profile (no /configz, no ConfigMap {missing})"
