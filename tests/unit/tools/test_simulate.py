"""simulate: deterministic with a seed, consistent with the filters, queue order, preemption, output."""

from __future__ import annotations

import json
import re
import xml.etree.ElementTree as ET
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
import yaml

from custom_scheduler import config
from custom_scheduler.api.model import node_from_json, pod_from_json, tolerates_all
from custom_scheduler.framework.registry import Registry
from custom_scheduler.plugins.node_affinity import required_node_affinity_matches
from custom_scheduler.tools import main, report, snapshot
from custom_scheduler.tools.simulate import simulate
from custom_scheduler.tools.simulation_result import SimulationResult
from tests.builders import make_node, make_pod
from tests.unit.tools.conftest import EXAMPLE_CLUSTER, EXAMPLE_PODS

ZONE = "topology.kubernetes.io/zone"


def _run(
    state: snapshot.ClusterState, pods: list[dict[str, Any]], cfg: config.SchedulerConfig, reg: Registry, seed: int = 3
) -> SimulationResult:
    return simulate(state, pods, cfg, reg, seed=seed)


# -- the shipped example ----------------------------------------------------------------------------


def test_example_is_deterministic_with_a_seed(
    example_cluster: snapshot.ClusterState,
    example_pods: list[dict[str, Any]],
    default_config: config.SchedulerConfig,
    registry: Registry,
) -> None:
    a = _run(example_cluster, example_pods, default_config, registry, seed=11).to_dict()
    b = _run(snapshot.load_cluster(str(EXAMPLE_CLUSTER)), example_pods, default_config, registry, seed=11).to_dict()
    assert a == b
    assert a["seed"] == 11
    assert a["summary"]["pods"] == 30
    assert a["summary"]["nodes"] == 8


def test_example_has_ties_that_the_seed_decides(
    example_cluster: snapshot.ClusterState,
    example_pods: list[dict[str, Any]],
    default_config: config.SchedulerConfig,
    registry: Registry,
) -> None:
    res = _run(example_cluster, example_pods, default_config, registry)
    tied = [p for p in res.placements if len(p.ties) > 1]
    assert tied, "the example should show documented tie-breaks"
    for p in tied:
        assert p.node in p.ties


def test_example_placements_respect_the_filters(
    example_cluster: snapshot.ClusterState,
    example_pods: list[dict[str, Any]],
    default_config: config.SchedulerConfig,
    registry: Registry,
) -> None:
    res = _run(example_cluster, example_pods, default_config, registry)
    # No node over allocatable (cpu, memory, pods, GPUs).
    for u in res.after:
        assert u.over_allocatable() == [], u
    nodes = {n["metadata"]["name"]: node_from_json(n) for n in example_cluster.nodes}
    pods = {snapshot.pod_key(d): pod_from_json(d) for d in example_pods}
    placed = res.placement_map()
    assert len(placed) == res.to_dict()["summary"]["placed"] > 20
    for key, node_name in placed.items():
        pod, node = pods[key], nodes[node_name]
        hard = [t for t in node.taints if t.effect in ("NoSchedule", "NoExecute")]
        assert all(tolerates_all(pod.tolerations, t) for t in hard), (key, node_name)
        assert all(node.labels.get(k) == v for k, v in pod.node_selector.items()), (key, node_name)
        assert required_node_affinity_matches(pod, node), (key, node_name)
    # Required anti-affinity: at most one cache pod per node, counting the running ones.
    cache_nodes = [
        d["spec"]["nodeName"] for d in example_cluster.assigned_pods() if d["metadata"]["name"].startswith("cache-")
    ]
    cache_nodes += [n for k, n in placed.items() if k.startswith("shop/cache-")]
    assert max(Counter(cache_nodes).values()) == 1
    # Topology spread (maxSkew 1 over zones) holds for the web pods.
    zone_of = {name: n.labels[ZONE] for name, n in nodes.items()}
    web = [d["spec"]["nodeName"] for d in example_cluster.assigned_pods() if d["metadata"]["name"].startswith("web-")]
    web += [n for k, n in placed.items() if k.startswith("shop/web-")]
    per_zone = Counter(zone_of[n] for n in web)
    assert len(per_zone) == 3
    assert max(per_zone.values()) - min(per_zone.values()) <= 1
    # GPU pods only on the GPU node, and only as many as free GPUs (2 of 4).
    gpu = [k for k, n in placed.items() if k.startswith("ml/train-")]
    assert len(gpu) == 2
    assert all(placed[k] == "gpu-c3" for k in gpu)


def test_example_queue_order_and_unschedulable_reasons(
    example_cluster: snapshot.ClusterState,
    example_pods: list[dict[str, Any]],
    default_config: config.SchedulerConfig,
    registry: Registry,
) -> None:
    res = _run(example_cluster, example_pods, default_config, registry)
    order = [p.pod for p in res.placements]
    # PrioritySort: system-cluster-critical, then business-critical, then batch, then file order.
    assert order[:8] == [
        "kube-system/ingress-2",
        "kube-system/ingress-3",
        "shop/checkout-0",
        "shop/checkout-1",
        "batch/report-6",
        "batch/report-7",
        "batch/report-8",
        "batch/report-9",
    ]
    assert order[8:14] == [f"shop/web-{i}" for i in range(6, 12)]
    d = res.to_dict()
    msgs = {u["pod"]: u["message"] for u in d["unschedulablePods"]}
    assert set(msgs) == {"batch/etl-huge", "ml/train-4", "shop/cache-6"}
    assert msgs["batch/etl-huge"].startswith("0/8 nodes are available: ")
    assert "6 Insufficient cpu" in msgs["batch/etl-huge"]
    assert "preemption: not eligible due to preemptionPolicy=Never." in msgs["batch/etl-huge"]
    assert "1 Insufficient nvidia.com/gpu" in msgs["ml/train-4"]
    assert "didn't match pod anti-affinity rules" in msgs["shop/cache-6"]


def test_utilisation_before_and_after(
    example_cluster: snapshot.ClusterState,
    example_pods: list[dict[str, Any]],
    default_config: config.SchedulerConfig,
    registry: Registry,
) -> None:
    d = _run(example_cluster, example_pods, default_config, registry).to_dict()
    by_node = {u["node"]: u for u in d["utilisation"]}
    gpu = by_node["gpu-c3"]
    assert gpu["before"]["extended"]["nvidia.com/gpu"] == {"requested": 2, "allocatable": 4, "percent": 50.0}
    assert gpu["after"]["extended"]["nvidia.com/gpu"]["requested"] == 4
    for u in d["utilisation"]:
        for r in ("cpu", "memory", "pods"):
            assert u["after"][r]["requested"] >= u["before"][r]["requested"]
    added = sum(u["after"]["pods"]["requested"] - u["before"]["pods"]["requested"] for u in d["utilisation"])
    assert added == d["summary"]["placed"]


# -- mechanics on small clusters --------------------------------------------------------------------


def _state(*nodes: Any, pods: tuple[Any, ...] = ()) -> snapshot.ClusterState:
    return snapshot.ClusterState(nodes=[n.obj() for n in nodes], pods=[p.obj() for p in pods], source="test")


def test_later_pods_see_earlier_placements(default_config: config.SchedulerConfig, registry: Registry) -> None:
    state = _state(make_node("n1").capacity(cpu="2", memory="4Gi", pods="10"))
    pods = [make_pod(f"p{i}").req(cpu="800m").obj() for i in range(3)]
    res = _run(state, pods, default_config, registry)
    assert [o.result for o in res.outcomes] == ["scheduled", "scheduled", "unschedulable"]
    assert res.outcomes[2].message == "0/1 nodes are available: 1 Insufficient cpu. " + (
        "preemption: 0/1 nodes are available: 1 No preemption victims found for incoming pod."
    )


def test_a_pod_waiting_on_affinity_is_retried_after_a_later_placement(
    default_config: config.SchedulerConfig, registry: Registry
) -> None:
    state = _state(
        make_node("a").label(ZONE, "z1").capacity(cpu="4", memory="8Gi", pods="10"),
        make_node("b").label(ZONE, "z2").capacity(cpu="4", memory="8Gi", pods="10"),
    )
    term = {"topologyKey": ZONE, "labelSelector": {"matchLabels": {"app": "db"}}}
    follower = make_pod("follower").pod_affinity("podAffinity", term).obj()
    db = make_pod("db").label("app", "db").node_selector(**{ZONE: "z2"}).obj()
    res = _run(state, [follower, db], default_config, registry)
    placed = res.placement_map()
    assert placed == {"default/db": "b", "default/follower": "b"}
    assert [p.pod for p in res.placements] == ["default/db", "default/follower"]
    assert res.outcomes[0].attempts == 2


def test_gated_pods_are_reported_and_never_placed(default_config: config.SchedulerConfig, registry: Registry) -> None:
    """A gated pod is not attempted and holds no room: the pod after it takes the only slot."""
    state = _state(make_node("n1").capacity(cpu="2", memory="4Gi", pods="10"))
    gated = make_pod("gated").req(cpu="1500m").priority(100).gates("example.com/a", "example.com/b").obj()
    free = make_pod("free").req(cpu="1500m").obj()
    res = _run(state, [gated, free], default_config, registry)
    assert [(o.pod, o.result, o.attempts) for o in res.outcomes] == [
        ("default/gated", "gated", 0),
        ("default/free", "scheduled", 1),
    ]
    d = res.to_dict()
    assert d["summary"]["gated"] == 1
    assert d["summary"]["unschedulable"] == 0
    assert d["gatedPods"] == [
        {"pod": "default/gated", "message": "waiting for scheduling gates: [example.com/a example.com/b]"}
    ]
    assert d["unschedulablePods"] == []
    text = report.simulation_text(d)
    flat = " ".join(text.split())
    assert "1 placed, 0 unschedulable, 1 gated" in flat
    assert "Gated (held back by PreEnqueue: never attempted) default/gated waiting for scheduling gates" in flat
    assert max(len(line) for line in text.splitlines()) <= 100
    page = report.simulation_html(d)
    assert "<h2>Gated pods (never attempted)</h2>" in page
    assert "<td>default/gated</td><td>waiting for scheduling gates: [example.com/a example.com/b]</td>" in page


def test_preemption_evicts_lower_priority_pods_in_the_simulation(
    default_config: config.SchedulerConfig, registry: Registry
) -> None:
    state = _state(
        make_node("only").capacity(cpu="2", memory="4Gi", pods="10"),
        pods=(make_pod("low", "batch").uid("u-low").node("only").req(cpu="1500m").priority(0),),
    )
    high = make_pod("high").req(cpu="1").priority(1000).obj()
    res = _run(state, [high], default_config, registry)
    d = res.to_dict()
    assert d["preempted"] == [{"pod": "batch/low", "node": "only", "by": "default/high"}]
    assert res.placement_map() == {"default/high": "only"}
    assert res.outcomes[0].attempts == 2
    only = d["utilisation"][0]
    assert only["before"]["cpu"]["requested"] == 1500
    assert only["after"]["cpu"]["requested"] == 1000


def test_priority_class_names_are_resolved_from_the_snapshot(
    default_config: config.SchedulerConfig, registry: Registry
) -> None:
    state = _state(make_node("n").capacity(cpu="1", memory="4Gi", pods="10"))
    state.priority_classes = [{"kind": "PriorityClass", "metadata": {"name": "hi"}, "value": 50}]
    lo = make_pod("lo").req(cpu="1").obj()
    hi = make_pod("hi").req(cpu="1").obj()
    hi["spec"]["priorityClassName"] = "hi"
    res = _run(state, [lo, hi], default_config, registry)
    assert res.placement_map() == {"default/hi": "n"}
    bad = make_pod("bad").obj()
    bad["spec"]["priorityClassName"] = "missing"
    with pytest.raises(snapshot.ToolError, match="priorityClassName 'missing'"):
        _run(state, [bad], default_config, registry)


def test_pods_already_in_the_snapshot_or_duplicated_are_refused(
    default_config: config.SchedulerConfig, registry: Registry
) -> None:
    state = _state(make_node("n"), pods=(make_pod("x").node("n"),))
    with pytest.raises(snapshot.ToolError, match="default/x is already assigned to n"):
        _run(state, [make_pod("x").obj()], default_config, registry)
    with pytest.raises(snapshot.ToolError, match="more than once: default/y"):
        _run(state, [make_pod("y").obj(), make_pod("y").obj()], default_config, registry)


def test_no_seed_picks_and_reports_one(
    example_cluster: snapshot.ClusterState,
    example_pods: list[dict[str, Any]],
    default_config: config.SchedulerConfig,
    registry: Registry,
) -> None:
    res: SimulationResult = simulate(example_cluster, example_pods, default_config, registry)
    again = simulate(snapshot.load_cluster(str(EXAMPLE_CLUSTER)), example_pods, default_config, registry, seed=res.seed)
    assert res.to_dict() == again.to_dict()


# -- output -----------------------------------------------------------------------------------------


def test_table_fits_100_columns(
    example_cluster: snapshot.ClusterState,
    example_pods: list[dict[str, Any]],
    default_config: config.SchedulerConfig,
    registry: Registry,
) -> None:
    text = report.simulation_text(_run(example_cluster, example_pods, default_config, registry).to_dict())
    assert max(len(line) for line in text.splitlines()) <= 100
    assert "Node utilisation" in text
    assert "gpu-c3" in text
    assert "nvidia.com/gpu 2/4 -> 4/4" in text
    assert "Unschedulable" in text
    assert "batch/etl-huge" in text


def test_html_report_is_standalone_with_an_svg_chart(
    example_cluster: snapshot.ClusterState,
    example_pods: list[dict[str, Any]],
    default_config: config.SchedulerConfig,
    registry: Registry,
) -> None:
    page = report.simulation_html(_run(example_cluster, example_pods, default_config, registry).to_dict())
    assert page.startswith("<!DOCTYPE html>")
    assert "<script" not in page
    assert "http://" not in page.replace("http://www.w3.org/2000/svg", "")
    svg = page[page.index("<svg") : page.index("</svg>") + len("</svg>")]
    root = ET.fromstring(svg)  # well-formed XML
    titles = [t.text or "" for t in root.iter("{http://www.w3.org/2000/svg}title")]
    assert any(t.startswith("gpu-c3 nvidia.com/gpu: 50% before, 100% after") for t in titles)
    assert sum(1 for t in titles if " cpu: " in t) == 8


def test_cli_outputs_and_html(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    html_file = tmp_path / "report.html"
    args = ["simulate", "--cluster", str(EXAMPLE_CLUSTER), "--pods", str(EXAMPLE_PODS), "--seed", "5"]
    assert main([*args, "--html", str(html_file)]) == 0
    out = capsys.readouterr()
    assert out.out.startswith("Simulated 30 pods on 8 nodes")
    assert "<svg" in html_file.read_text()
    assert main([*args, "-o", "json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["seed"] == 5
    assert main([*args, "-o", "yaml"]) == 0
    assert yaml.safe_load(capsys.readouterr().out) == d


@pytest.mark.parametrize(
    ("files", "extra", "message"),
    [
        ({"cluster": None}, [], "cluster snapshot .*: no such file"),
        ({"pods": "pods: [: bad"}, [], "pods file .*: invalid YAML"),
        ({"pods": "kind: Deployment\nmetadata: {name: web}\n"}, [], "is not a Pod"),
        ({"cluster": "kind: List\nitems: []\n"}, [], "no Node objects found"),
        ({"config": "apiVersion: v1\n"}, [], "invalid configuration"),
        ({}, ["--profile", "nope"], "profile 'nope' is not in the configuration"),
    ],
)
def test_cli_bad_input_exits_2_with_a_message(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], files: dict[str, str | None], extra: list[str], message: str
) -> None:
    cluster = str(EXAMPLE_CLUSTER)
    pods = str(EXAMPLE_PODS)
    argv = ["simulate"]
    if "cluster" in files:
        cluster = str(tmp_path / "cluster.yaml")
        if (cluster_text := files["cluster"]) is not None:
            Path(cluster).write_text(cluster_text)
    if (pods_text := files.get("pods")) is not None:
        pods = str(tmp_path / "pods.yaml")
        Path(pods).write_text(pods_text)
    argv += ["--cluster", cluster, "--pods", pods, *extra]
    if (config_text := files.get("config")) is not None:
        cfg = tmp_path / "config.yaml"
        cfg.write_text(config_text)
        argv += ["--config", str(cfg)]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert re.search(message, err), err
    assert "Traceback" not in err


def test_custom_config_changes_the_outcome(tmp_path: Path, registry: Registry) -> None:
    """MostAllocated packs; the default LeastAllocated spreads."""
    state = _state(
        make_node("big").capacity(cpu="8", memory="16Gi", pods="10"),
        make_node("small").capacity(cpu="2", memory="4Gi", pods="10"),
    )
    pods = [make_pod("p").req(cpu="500m", memory="512Mi").obj()]
    cfg_text = snapshot.DEFAULT_CONFIG_TEXT + (
        "profiles:\n- schedulerName: custom-scheduler\n  pluginConfig:\n  - name: NodeResourcesFit\n"
        "    args:\n      scoringStrategy:\n        type: MostAllocated\n"
    )
    packed = simulate(state, pods, config.load_config(cfg_text, registry), registry, seed=1)
    spread = simulate(state, pods, config.load_config(snapshot.DEFAULT_CONFIG_TEXT, registry), registry, seed=1)
    assert packed.placement_map() == {"default/p": "small"}
    assert spread.placement_map() == {"default/p": "big"}
