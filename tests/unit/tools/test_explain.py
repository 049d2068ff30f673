"""explain, offline: verdicts and scores agree with the daemon's algorithm; output formats."""

from __future__ import annotations

import json
import random
import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from custom_scheduler import config
from custom_scheduler.core.algorithm import Algorithm
from custom_scheduler.framework.profiles import build_frameworks
from custom_scheduler.framework.registry import Registry
from custom_scheduler.framework.types import CycleState, FitError, Snapshot
from custom_scheduler.tools import main, report, snapshot
from custom_scheduler.tools.explain import Explanation, explain_pod, format_explanation
from custom_scheduler.tools.simulate import simulate
from tests.builders import make_node, make_pod
from tests.unit.tools.conftest import EXAMPLE_CLUSTER

ZONE = "topology.kubernetes.io/zone"


def _pod(example_pods: list[dict[str, Any]], key: str) -> dict[str, Any]:
    return next(p for p in example_pods if snapshot.pod_key(p) == key)


def _daemon_choice(
    state: snapshot.ClusterState, doc: dict[str, Any], cfg: config.SchedulerConfig, reg: Registry
) -> str | None:
    """What the daemon's code path picks (find_all=False, as Scheduler.schedule_one calls it)."""
    cache = snapshot.build_cache(state)
    snap = Snapshot()
    fwks = build_frameworks(cfg.profiles, reg, snap, client=None, namespace_labels=state.namespace_labels())
    cache.update_snapshot(snap)
    pod = snapshot.to_pod(snapshot.resolve_priority(doc, state.priority_classes))
    try:
        return Algorithm(rng=random.Random(0)).schedule(fwks["custom-scheduler"], CycleState(), pod, snap).node
    except FitError:
        return None


def test_every_pending_example_pod_agrees_with_the_daemon_algorithm(
    example_cluster: snapshot.ClusterState,
    example_pods: list[dict[str, Any]],
    default_config: config.SchedulerConfig,
    registry: Registry,
) -> None:
    for doc in example_pods:
        ex = explain_pod(example_cluster, doc, default_config, registry, seed=1)
        assert not ex.error
        chosen = _daemon_choice(example_cluster, doc, default_config, registry)
        if chosen is None:
            assert not ex.schedulable
            assert ex.message.startswith("0/8 nodes are available: ")
        else:
            assert chosen in ex.ties, (snapshot.pod_key(doc), chosen, ex.ties)
            assert ex.node in ex.ties
        # And with simulate placing the pod alone.
        placed = simulate(example_cluster, [doc], default_config, registry, seed=2).placement_map()
        assert (placed.get(snapshot.pod_key(doc)) in ex.ties) if ex.schedulable else not placed


def test_verdicts_scores_and_result(
    example_cluster: snapshot.ClusterState,
    example_pods: list[dict[str, Any]],
    default_config: config.SchedulerConfig,
    registry: Registry,
) -> None:
    ex = explain_pod(example_cluster, _pod(example_pods, "ml/train-2"), default_config, registry)
    assert ex.node == "gpu-c3"
    assert ex.ties == ["gpu-c3"]
    assert ex.bound_node is None
    d = ex.to_dict()
    assert d["nodesTotal"] == 8
    assert d["feasibleNodes"] == 1
    by = {n["name"]: n for n in d["nodes"]}
    assert by["gpu-c3"]["feasible"]
    assert by["gpu-c3"]["plugin"] == ""
    assert by["infra-a3"]["plugin"] == "TaintToleration"
    assert by["infra-a3"]["reasons"] == ["node(s) had untolerated taint(s)"]
    assert by["node-a1"]["plugin"] == "NodeAffinity"
    assert by["node-a1"]["code"] == "UnschedulableAndUnresolvable"
    # Each filter plugin's own verdict: node-a1 also lacks GPUs (NodeResourcesFit fails too).
    fit = next(f for f in by["node-a1"]["filters"] if f["plugin"] == "NodeResourcesFit")
    assert fit == {"plugin": "NodeResourcesFit", "verdict": "fail", "reason": "Insufficient nvidia.com/gpu"}
    assert [f["plugin"] for f in by["node-a1"]["filters"]] == d["filterPlugins"]
    # Scores: weighted = normalised x weight; total = the sum.
    weights = {p["name"]: p["weight"] for p in d["scorePlugins"]}
    for s in d["scores"]:
        assert s["total"] == sum(p["weighted"] for p in s["plugins"])
        for p in s["plugins"]:
            assert p["weighted"] == p["normalized"] * weights[p["plugin"]]
    assert d["result"] == {
        "schedulable": True,
        "node": "gpu-c3",
        "score": d["scores"][0]["total"],
        "ties": ["gpu-c3"],
        "message": "",
    }


def test_unschedulable_pod_gets_kube_message_and_preemption_outcome(
    example_cluster: snapshot.ClusterState,
    example_pods: list[dict[str, Any]],
    default_config: config.SchedulerConfig,
    registry: Registry,
) -> None:
    ex = explain_pod(example_cluster, _pod(example_pods, "batch/etl-huge"), default_config, registry)
    assert not ex.schedulable
    assert ex.node is None
    assert ex.scores == []
    assert ex.message == (
        "0/8 nodes are available: 2 node(s) had untolerated taint(s), 5 Insufficient memory, 6 Insufficient cpu. "
        "preemption: not eligible due to preemptionPolicy=Never."
    )
    assert ex.feasible == 0


def test_preemption_plan_is_reported_and_nothing_is_evicted(
    default_config: config.SchedulerConfig, registry: Registry
) -> None:
    state = snapshot.ClusterState(
        nodes=[make_node("n").capacity(cpu="2", memory="4Gi", pods="10").obj()],
        pods=[make_pod("low").uid("u1").node("n").req(cpu="2").obj()],
        source="test",
    )
    high = make_pod("high").req(cpu="1").priority(100).obj()
    ex = explain_pod(state, high, default_config, registry)
    assert ex.message == "0/1 nodes are available: 1 Insufficient cpu."
    assert ex.to_dict()["preemption"] == {"node": "n", "victims": ["default/low"], "clearedNominations": []}
    text = format_explanation(ex, "table")
    assert "Preemption: the daemon would evict default/low on n" in text
    assert len(state.assigned_pods()) == 1  # untouched


def test_a_bound_pod_is_removed_from_its_node_first(
    example_cluster: snapshot.ClusterState, default_config: config.SchedulerConfig, registry: Registry
) -> None:
    # db-2 (2 CPUs) fills node-c2 (4 CPUs, 2.1 used): only without itself does node-c2 fit it.
    ex = explain_pod(example_cluster, example_cluster.find_pod("shop", "db-2") or {}, default_config, registry)
    assert ex.bound_node == "node-c2"
    assert next(v for v in ex.verdicts if v.name == "node-c2").feasible
    assert "node-c2" in {s.name for s in ex.scores}
    assert ex.agrees is (ex.bound_node in ex.ties)
    text = format_explanation(ex, "table")
    assert "Bound to node-c2: explained as if unbound" in text


def test_ties_are_listed(default_config: config.SchedulerConfig, registry: Registry) -> None:
    state = snapshot.ClusterState(nodes=[make_node(n).label(ZONE, n).obj() for n in ("a", "b", "c")], source="test")
    ex = explain_pod(state, make_pod("p").obj(), default_config, registry, seed=4)
    assert ex.ties == ["a", "b", "c"]
    assert ex.node in ex.ties
    assert ex.to_dict()["result"]["ties"] == ["a", "b", "c"]
    text = format_explanation(ex, "table")
    assert "the scheduler picks one of the 3 at random" in text


def test_nominated_pods_count_on_their_node(default_config: config.SchedulerConfig, registry: Registry) -> None:
    nominated = make_pod("waiting").uid("w").req(cpu="3").priority(10).nominated("a").obj()
    state = snapshot.ClusterState(
        nodes=[make_node("a").obj(), make_node("b").capacity(cpu="2", memory="8Gi", pods="110").obj()],
        pods=[nominated],
        source="test",
    )
    ex = explain_pod(state, make_pod("p").req(cpu="2").obj(), default_config, registry)
    assert next(v for v in ex.verdicts if v.name == "a").reasons == ["Insufficient cpu"]
    assert ex.node == "b"


@pytest.mark.parametrize(
    ("gates", "message"),
    [
        pytest.param(("example.com/a",), "waiting for scheduling gates: [example.com/a]", id="one"),
        pytest.param(("a", "b"), "waiting for scheduling gates: [a b]", id="two"),
    ],
)
def test_gated_pod_is_reported_as_gated_not_placed(
    default_config: config.SchedulerConfig, registry: Registry, gates: tuple[str, ...], message: str
) -> None:
    """PreEnqueue first, as in the daemon's queue: a gated pod gets no node verdicts and no node,
    although a node would fit it."""
    state = snapshot.ClusterState(nodes=[make_node("n").obj()], source="test")
    ex = explain_pod(state, make_pod("p").gates(*gates).obj(), default_config, registry)
    assert ex.gated
    assert not ex.schedulable
    assert (ex.verdicts, ex.scores, ex.preemption, ex.error) == ([], [], None, "")
    assert ex.message == message
    d = ex.to_dict()
    assert d["gated"] == {"plugin": "SchedulingGates", "code": "UnschedulableAndUnresolvable", "message": message}
    assert d["result"] == {"schedulable": False, "node": None, "score": None, "ties": [], "message": message}
    text = format_explanation(ex, "table")
    assert "Result: gated (not attempted)" in text
    assert message in text
    assert "Filters:" not in text
    assert max(len(line) for line in text.splitlines()) <= 100
    # Without gates the same pod is placed, and nothing says gated.
    free = explain_pod(state, make_pod("p").obj(), default_config, registry)
    assert (free.node, free.gated, free.to_dict()["gated"]) == ("n", False, None)


def test_gated_pod_with_scheduling_gates_disabled_is_placed(registry: Registry) -> None:
    cfg = config.load_config(
        snapshot.DEFAULT_CONFIG_TEXT + "profiles:\n- plugins: {preEnqueue: {disabled: [{name: SchedulingGates}]}}\n",
        registry,
    )
    state = snapshot.ClusterState(nodes=[make_node("n").obj()], source="test")
    ex = explain_pod(state, make_pod("p").gates("g").obj(), cfg, registry)
    assert (ex.gated, ex.node) == (False, "n")


# -- output formats ---------------------------------------------------------------------------------


@pytest.fixture
def some(
    example_cluster: snapshot.ClusterState,
    example_pods: list[dict[str, Any]],
    default_config: config.SchedulerConfig,
    registry: Registry,
) -> Explanation:
    return explain_pod(example_cluster, _pod(example_pods, "shop/cache-4"), default_config, registry, seed=3)


def test_table_groups_nodes_by_reason_and_fits_100_columns(some: Explanation) -> None:
    text = format_explanation(some, "table")
    lines = text.splitlines()
    assert max(len(line) for line in lines) <= 100
    assert lines[0].startswith("Pod shop/cache-4, profile custom-scheduler, 8 nodes")
    assert re.search(r"NO 4 nodes\s+InterPodAffinity: node\(s\) didn't match pod anti-affinity rules", text)
    i = next(i for i, ln in enumerate(lines) if "InterPodAffinity:" in ln)
    assert lines[i + 1].strip() == "node-a1, node-b1, node-b2, node-c1"
    assert "Scores of feasible nodes" in text
    assert "Score detail" in text
    assert f"Result: {some.node} (score " in text


def test_wide_table_shows_the_filter_matrix(some: Explanation) -> None:
    text = format_explanation(some, "wide")
    assert max(len(line) for line in text.splitlines()) <= 100
    assert "Filter verdicts per node" in text
    row = next(ln for ln in text.splitlines() if ln.strip().startswith("infra-a3") and "FAIL" in ln)
    assert "FAIL" in row


def test_json_and_yaml_carry_the_same_document(some: Explanation) -> None:
    d = json.loads(format_explanation(some, "json"))
    assert d == yaml.safe_load(format_explanation(some, "yaml"))
    assert d == json.loads(json.dumps(some.to_dict()))
    assert set(d) >= {"pod", "profile", "nodes", "scores", "result", "filterPlugins", "scorePlugins"}


def test_long_node_names_are_shortened_in_tables(default_config: config.SchedulerConfig, registry: Registry) -> None:
    long = "ip-10-0-12-34.eu-west-1.compute.internal-with-a-really-long-suffix-for-testing-purposes"
    state = snapshot.ClusterState(nodes=[make_node(long).obj(), make_node("short").obj()], source="test")
    text = format_explanation(explain_pod(state, make_pod("p").obj(), default_config, registry), "wide")
    assert max(len(line) for line in text.splitlines()) <= 100


def test_render_helpers() -> None:
    assert report.ellipsize("abcdefghij", 5) == "ab~ij"
    assert report.short_names(["NodeResourcesFit", "MyVeryLongPluginName", "Short"]) == {
        "NodeResourcesFit": "Fit",
        "MyVeryLongPluginName": "MVLPN",
        "Short": "Short",
    }
    assert report.wrap_words(["aaaa", "bbbb", "cccc"], 13, "  ") == ["  aaaa, bbbb,", "  cccc"]


# -- the command ------------------------------------------------------------------------------------


def test_cli_explain_offline_by_name_and_by_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], example_pods: list[dict[str, Any]]
) -> None:
    assert main(["explain", "shop/web-0", "--cluster", str(EXAMPLE_CLUSTER), "-o", "json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["boundNode"] == "node-a1"
    assert d["pod"] == "shop/web-0"
    f = tmp_path / "pod.yaml"
    f.write_text(yaml.safe_dump(_pod(example_pods, "ml/train-2")))
    assert main(["explain", str(f), "--cluster", str(EXAMPLE_CLUSTER)]) == 0
    out = capsys.readouterr().out
    assert "Result: gpu-c3" in out
    assert main(["explain", "web-0", "-n", "shop", "--cluster", str(EXAMPLE_CLUSTER), "-o", "yaml"]) == 0
    assert yaml.safe_load(capsys.readouterr().out)["pod"] == "shop/web-0"


def test_cli_schedulername_outside_the_config_is_noted(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    f = tmp_path / "pod.yaml"
    f.write_text(yaml.safe_dump(make_pod("p").scheduler("default-scheduler").obj()))
    assert main(["explain", str(f), "--cluster", str(EXAMPLE_CLUSTER), "-o", "json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert any("'default-scheduler' is not a profile" in n for n in d["notes"])


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["a/b/c", "--cluster", str(EXAMPLE_CLUSTER)], "expected namespace/name or a pod YAML file"),
        (["shop/nope", "--cluster", str(EXAMPLE_CLUSTER)], "pod shop/nope is not in"),
        (["shop/web-0", "--cluster", str(EXAMPLE_CLUSTER), "--kubeconfig", "x"], "exclusive"),
        (["missing.yaml", "--cluster", str(EXAMPLE_CLUSTER)], "pod file missing.yaml: no such file"),
        (["Bad_Name", "--cluster", str(EXAMPLE_CLUSTER)], "invalid name 'Bad_Name'"),
        (["shop/web-0", "--cluster", str(EXAMPLE_CLUSTER), "--profile", "x"], "profile 'x' is not in"),
        (["shop/web-0", "--kubeconfig", "/nonexistent/kubeconfig"], "cannot load cluster credentials"),
    ],
)
def test_cli_bad_input_exits_2(capsys: pytest.CaptureFixture[str], argv: list[str], message: str) -> None:
    assert main(["explain", *argv]) == 2
    err = capsys.readouterr().err
    assert message in err, err
    assert "Traceback" not in err


def test_cli_pod_file_with_two_pods_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    f = tmp_path / "pods.yaml"
    f.write_text(yaml.safe_dump_all([make_pod("a").obj(), make_pod("b").obj()]))
    assert main(["explain", str(f), "--cluster", str(EXAMPLE_CLUSTER)]) == 2
    assert "expected exactly one Pod, found 2" in capsys.readouterr().err
