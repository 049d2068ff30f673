"""``custom-scheduler defrag`` offline (tools/defrag.py, defrag_execute.py): the shape syntax, what
counts as controller-owned, a plan verified by the offline framework (and one it refuses), the
command's outputs and exit codes, and the executor's rules (bound, refusal, skips, pacing)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from custom_scheduler import config
from custom_scheduler.framework.registry import Registry
from custom_scheduler.kube import api_errors
from custom_scheduler.tools import defrag, defrag_execute, main, snapshot
from custom_scheduler.tools.defrag_plan import BARE, PodFacts
from tests.builders import make_node, make_pod

GPU = "nvidia.com/gpu"


@pytest.mark.parametrize(
    ("text", "count", "gpus", "cpu"),
    [
        ("2x nvidia.com/gpu=8", 2, 8, 0),
        ("nvidia.com/gpu=4", 1, 4, 0),
        (" 3 X nvidia.com/gpu=1, cpu=500m ", 3, 1, 500),
    ],
)
def test_shape_syntax(text: str, count: int, gpus: int, cpu: int) -> None:
    s = defrag.parse_shape(text, priority=5)
    assert (s.shape.count, s.shape.requests.scalar.get(GPU), s.shape.requests.milli_cpu) == (count, gpus, cpu)
    assert len(s.pod_docs) == count
    spec = s.pod_docs[0]["spec"]
    assert spec["priority"] == 5
    assert spec["tolerations"] == [{"key": GPU, "operator": "Exists", "effect": "NoSchedule"}]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "expected COUNTx RES=QTY"),
        ("0x nvidia.com/gpu=1", "at least 1"),
        ("2x nvidia.com/gpu", "is not RES=QTY"),
        ("2x nvidia.com/gpu=lots", "nvidia.com/gpu"),
        ("cpu=0", "requests nothing"),
    ],
)
def test_bad_shapes_say_why(text: str, message: str) -> None:
    with pytest.raises(snapshot.ToolError, match=message):
        defrag.parse_shape(text)


@pytest.mark.parametrize(
    ("owners", "annotations", "controlled", "daemon"),
    [
        ([], {}, False, False),
        ([{"kind": "ReplicaSet", "name": "rs", "controller": True}], {}, True, False),
        ([{"kind": "ReplicaSet", "name": "rs"}], {}, False, False),  # an owner, but not its controller
        ([{"kind": "DaemonSet", "name": "ds", "controller": True}], {}, True, True),
        ([], {defrag.MIRROR_ANNOTATION: "x"}, False, True),
    ],
)
def test_pod_facts(owners: list[dict[str, Any]], annotations: dict[str, str], controlled: bool, daemon: bool) -> None:
    doc = {"metadata": {"name": "p", "ownerReferences": owners, "annotations": annotations}}
    assert defrag.pod_facts(doc) == PodFacts(controlled, daemon)


def _owned(b: Any) -> dict[str, Any]:
    doc: dict[str, Any] = b.obj()
    doc["metadata"]["ownerReferences"] = [{"kind": "ReplicaSet", "name": "rs", "uid": "u", "controller": True}]
    return doc


def fragmented(*, bare: bool = False) -> snapshot.ClusterState:
    """Four 8-GPU nodes with 7, 6, 2 and 3 one-GPU pods: 14 GPUs free, none with 8."""
    nodes, pods = [], []
    for node, used in {"a": 7, "b": 6, "c": 2, "d": 3}.items():
        nodes.append(make_node(node).capacity_named({"cpu": "32", "memory": "64Gi", "pods": "110", GPU: "8"}).obj())
        for i in range(used):
            b = make_pod(f"{node}-{i}").uid(f"{node}-{i}").req_named({GPU: "1"}).node(node).label("app", "train")
            pods.append(b.obj() if bare else _owned(b))
    return snapshot.ClusterState(nodes=nodes, pods=pods, source="test")


@pytest.fixture(scope="module")
def cfg(registry: Registry) -> config.SchedulerConfig:
    return config.load_config(snapshot.DEFAULT_CONFIG_TEXT, registry)


def test_a_plan_verified_by_the_offline_framework(cfg: config.SchedulerConfig, registry: Registry) -> None:
    d = defrag.plan_defrag(fragmented(), defrag.parse_shape("nvidia.com/gpu=8"), cfg, registry)
    assert d.plan.targets == {"c": 1}
    assert sorted(p.name for p in d.plan.evicted_pods()) == ["c-0", "c-1"]
    assert d.verified
    got = {v["pod"]: (v["result"], v["node"]) for v in d.verification}
    assert got["default/defrag-shape-0"] == ("scheduled", "c")
    assert got["default/c-0"][0] == got["default/c-1"][0] == "scheduled"
    assert "c" not in (got["default/c-0"][1], got["default/c-1"][1])
    assert d.ok


def test_bare_pods_stay_and_nothing_else_can_make_room(cfg: config.SchedulerConfig, registry: Registry) -> None:
    d = defrag.plan_defrag(fragmented(bare=True), defrag.parse_shape("nvidia.com/gpu=8"), cfg, registry)
    assert not d.plan.feasible
    assert d.plan.held_back == {BARE: 18}
    assert not d.ok
    d2 = defrag.plan_defrag(
        fragmented(bare=True), defrag.parse_shape("nvidia.com/gpu=8"), cfg, registry, include_bare=True
    )
    assert d2.verified


def test_a_pending_pod_the_framework_rejects_is_not_verified(cfg: config.SchedulerConfig, registry: Registry) -> None:
    state = fragmented()
    state.pods.append(make_pod("big").req_named({GPU: "8"}).node_selector(pool="none").priority(3).obj())
    d = defrag.plan_defrag(state, defrag.shape_of_pod(state, "default/big"), cfg, registry)
    assert d.plan.shape.priority == 3
    assert d.plan.feasible  # by room alone (node c after two moves, then d, then b)
    assert not d.verified
    (big,) = [v for v in d.verification if v["pod"] == "default/big"]
    assert big["result"] == "unschedulable"
    assert "node affinity" in big["message"] or "selector" in big["message"]
    with pytest.raises(snapshot.ToolError, match="already bound"):
        defrag.shape_of_pod(state, "default/a-0")
    with pytest.raises(snapshot.ToolError, match="no such pod"):
        defrag.shape_of_pod(state, "default/nope")


def _write(tmp_path: Path, state: snapshot.ClusterState) -> str:
    path = tmp_path / "cluster.yaml"
    path.write_text(snapshot.dump_yaml(snapshot.snapshot_document(state)))
    return str(path)


def test_command_outputs_and_exit_codes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = _write(tmp_path, fragmented())
    assert main(["defrag", "--cluster", path, "--shape", "nvidia.com/gpu=8", "-o", "json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert (doc["verified"], doc["evictions"], doc["freedNodes"]) == (True, 2, ["c"])
    assert main(["defrag", "--cluster", path, "--shape", "nvidia.com/gpu=8"]) == 0
    text = capsys.readouterr().out
    assert "Moves: 2 pod(s) in 2 unit(s)" in text
    assert "Verification (offline framework, after the moves): OK" in text
    assert main(["defrag", "--cluster", path, "--shape", "3x nvidia.com/gpu=8"]) == 1
    assert "NO PLAN" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--shape", "gpu"], "is not RES=QTY"),
        ([], "exactly one of --shape and --pod"),
        (["--shape", "nvidia.com/gpu=1", "--execute"], "cannot be combined with --cluster"),
        (["--shape", "nvidia.com/gpu=1", "--rate", "0"], "--rate 0"),
    ],
)
def test_bad_input_exits_2_with_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], argv: list[str], message: str
) -> None:
    path = _write(tmp_path, fragmented())
    assert main(["defrag", "--cluster", path, *argv]) == 2
    err = capsys.readouterr().err
    assert message in err
    assert "Traceback" not in err


class _Client:
    """Answers evictions from a script: pod name -> the error to raise (none: evicted)."""

    def __init__(self, errors: dict[str, Exception]) -> None:
        self.errors = errors
        self.posted: list[tuple[str, dict[str, Any]]] = []

    def post(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        self.posted.append((path, body))
        err = self.errors.get(body["metadata"]["name"])
        if err is not None:
            raise err
        return {}


def _pods(*names: str) -> list[Any]:
    return [make_pod(n).uid(f"uid-{n}").node("a").build() for n in names]


def test_executor_paces_skips_and_stops_at_a_refusal() -> None:
    client = _Client(
        {
            "gone": api_errors.NotFound(404, "NotFound", "gone"),
            "pdb": api_errors.TooManyRequests(
                429, "TooManyRequests", "Cannot evict pod as it would violate the pod's disruption budget."
            ),
        }
    )
    pauses: list[float] = []
    out = defrag_execute.evict_all(client, _pods("p1", "gone", "pdb", "never"), rate=30, sleep=pauses.append)
    assert out.evicted == ["default/p1"]
    assert out.skipped == [{"pod": "default/gone", "reason": "already gone"}]
    assert "default/pdb refused by a PodDisruptionBudget" in out.stopped
    assert "disruption budget" in out.stopped
    assert pauses == [2.0, 2.0]  # 30 a minute; none after the refusal
    assert [b["deleteOptions"]["preconditions"]["uid"] for _, b in client.posted] == ["uid-p1", "uid-gone", "uid-pdb"]
    assert client.posted[0][0] == "/api/v1/namespaces/default/pods/p1/eviction"


def test_executor_refuses_a_plan_over_the_bound_before_any_eviction() -> None:
    client = _Client({})
    out = defrag_execute.evict_all(client, _pods("p1", "p2", "p3"), rate=60, max_evictions=2, sleep=lambda _: None)
    assert "needs 3 evictions, more than --max-evictions 2" in out.stopped
    assert client.posted == []


def test_executor_runs_only_a_verified_plan(cfg: config.SchedulerConfig, registry: Registry) -> None:
    d = defrag.plan_defrag(fragmented(), defrag.parse_shape("nvidia.com/gpu=8"), cfg, registry)
    d.verified = False
    client = _Client({})
    out = defrag_execute.execute_plan(client, d, rate=60, sleep=lambda _: None)
    assert "not verified" in out.stopped
    assert client.posted == []


@pytest.mark.parametrize(
    ("owner_kind", "from_template"),
    [("ReplicaSet", True), ("Job", False)],  # a Job is no workload the state holds: the pod as it is
)
def test_moved_pods_are_recreated_from_their_controllers_current_template(owner_kind: str, from_template: bool) -> None:
    pod = make_pod("w-1").node_selector(pin="a").node("a").label("v", "1").obj()
    pod["metadata"]["ownerReferences"] = [{"kind": owner_kind, "name": "w", "uid": "u", "controller": True}]
    template = {"metadata": {"labels": {"v": "2"}}, "spec": {"containers": [{"name": "c", "image": "i"}]}}
    rs = {"kind": "ReplicaSet", "metadata": {"name": "w", "namespace": "default"}, "spec": {"template": template}}
    again = defrag.recreated(pod, [rs])
    if from_template:
        assert again["metadata"]["name"] == "w-1"
        assert again["metadata"]["labels"] == {"v": "2"}
        assert "nodeSelector" not in again["spec"]
        assert "nodeName" not in again["spec"]
    else:
        assert again is pod


def test_a_plan_the_framework_rejects_is_retried_elsewhere(cfg: config.SchedulerConfig, registry: Registry) -> None:
    """The arithmetic prefers c (two moves), but the pod may only go to d (node selector): the
    framework rejects c, and the next plan, avoiding c, is d with its three moves."""
    state = fragmented()
    state.nodes[3]["metadata"].setdefault("labels", {})["pool"] = "d"
    state.pods.append(make_pod("big").req_named({GPU: "8"}).node_selector(pool="d").obj())
    d = defrag.plan_defrag(state, defrag.shape_of_pod(state, "default/big"), cfg, registry)
    assert d.verified
    assert d.plan.targets == {"d": 1}
    assert sorted(p.name for p in d.plan.evicted_pods()) == ["d-0", "d-1", "d-2"]
    assert d.notes == ["an earlier plan (shape on c) was not verified"]


def test_a_pending_gang_member_makes_the_whole_pending_gang_the_shape() -> None:
    state = fragmented()
    for i, gpus in enumerate(("8", "4")):
        b = make_pod(f"g-{i}").req_named({GPU: gpus}).scheduling_group("g").priority(10 + i)
        state.pods.append(b.obj())
    state.pods.append(make_pod("other").req_named({GPU: "8"}).scheduling_group("h").obj())
    s = defrag.shape_of_pod(state, "default/g-1")
    assert (s.shape.count, s.shape.requests.scalar[GPU], s.shape.priority) == (2, 8, 11)  # the largest member's
    assert sorted(d["metadata"]["name"] for d in s.pod_docs) == ["g-0", "g-1"]
    assert "gang g, 2 pending" in s.shape.name
