"""Snapshot files: the accepted shapes, what is stripped, round trips, priority resolution."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from custom_scheduler.tools import main, snapshot
from tests.builders import make_node, make_pod


def _write(tmp_path: Path, text: str, name: str = "f.yaml") -> str:
    p = tmp_path / name
    p.write_text(text)
    return str(p)


def test_accepted_shapes_give_the_same_objects(tmp_path: Path) -> None:
    node, pod = make_node("n1").obj(), make_pod("p").node("n1").obj()
    shapes = {
        "snapshot": {"kind": "ClusterSnapshot", "nodes": [node], "pods": [pod], "namespaces": None},
        "plain": {"nodes": [node], "pods": [pod]},
        "list": {"apiVersion": "v1", "kind": "List", "items": [node, pod]},
        "nested": {"kind": "List", "items": [{"kind": "NodeList", "items": [node]}, pod]},
    }
    for name, doc in shapes.items():
        state = snapshot.load_cluster(_write(tmp_path, yaml.safe_dump(doc), f"{name}.yaml"))
        assert [n["metadata"]["name"] for n in state.nodes] == ["n1"], name
        assert [p["metadata"]["name"] for p in state.pods] == ["p"], name
    stream = yaml.safe_dump_all([node, pod])
    state = snapshot.load_cluster(_write(tmp_path, stream, "stream.yaml"))
    assert len(state.nodes) == len(state.pods) == 1


def test_pods_file_objects_without_kind_are_pods(tmp_path: Path) -> None:
    p = make_pod("a").obj()
    del p["kind"]
    pods = snapshot.load_pods(_write(tmp_path, yaml.safe_dump({"pods": [p, make_pod("b").obj()]})))
    assert [x["metadata"]["name"] for x in pods] == ["a", "b"]
    assert snapshot.load_pods(_write(tmp_path, yaml.safe_dump([p]), "list.yaml"))[0]["kind"] == "Pod"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("- 1\n", "expected an object, found int"),
        ("metadata: {name: x}\n", "object without a kind"),
        ("kind: Node\nmetadata: {}\n", "Node without metadata.name"),
        ("nodes: {a: 1}\n", "nodes: expected a list"),
        ("{", "invalid YAML"),
    ],
)
def test_bad_files_name_the_problem(tmp_path: Path, text: str, message: str) -> None:
    with pytest.raises(snapshot.ToolError, match=message):
        snapshot.load_cluster(_write(tmp_path, text))


def test_duplicate_nodes_are_refused(tmp_path: Path) -> None:
    doc = {"nodes": [make_node("n").obj(), make_node("n").obj()]}
    with pytest.raises(snapshot.ToolError, match="duplicate node"):
        snapshot.load_cluster(_write(tmp_path, yaml.safe_dump(doc)))


def test_snapshot_document_keeps_what_scheduling_reads(tmp_path: Path) -> None:
    node = make_node("n1").taint("gpu", "yes").image("nginx:1", 1000).obj()
    node["metadata"]["managedFields"] = [{"manager": "kubelet"}]
    node["metadata"]["annotations"] = {"node.alpha.kubernetes.io/ttl": "0"}
    node["status"]["conditions"] = [{"type": "Ready", "status": "True"}]
    node["status"]["nodeInfo"] = {"kernelVersion": "6"}
    pod = make_pod("running").node("n1").req(cpu="1").host_port(8080).phase("Running").obj()
    pod["metadata"]["managedFields"] = [{"manager": "kubectl"}]
    pod["spec"]["containers"][0]["env"] = [{"name": "SECRET", "value": "x"}]
    pod["status"]["conditions"] = [{"type": "Ready", "status": "True"}]
    done = make_pod("done").node("n1").phase("Succeeded").obj()
    pending = make_pod("pending").obj()
    elsewhere = make_pod("elsewhere").node("gone").obj()
    state = snapshot.ClusterState(
        nodes=[node],
        pods=[pod, done, pending, elsewhere],
        namespaces=[{"metadata": {"name": "default", "labels": {"a": "b"}, "uid": "x"}}],
        priority_classes=[{"metadata": {"name": "hi", "uid": "y"}, "value": 5, "description": "d"}],
        pdbs=[
            {
                "metadata": {"name": "pdb", "namespace": "default"},
                "spec": {"minAvailable": 1},
                "status": {"disruptionsAllowed": 0, "currentHealthy": 1},
            }
        ],
    )
    doc = snapshot.snapshot_document(state)
    assert doc["kind"] == "ClusterSnapshot"
    n = doc["nodes"][0]
    assert "managedFields" not in n["metadata"]
    assert "annotations" not in n["metadata"]
    assert set(n["status"]) == {"capacity", "allocatable", "images"}
    assert n["spec"]["taints"] == [{"key": "gpu", "value": "yes", "effect": "NoSchedule"}]
    assert [p["metadata"]["name"] for p in doc["pods"]] == ["running"]
    p = doc["pods"][0]
    assert "managedFields" not in p["metadata"]
    assert p["spec"]["containers"][0] == {
        "name": "c0",
        "image": "registry.k8s.io/pause:3.9",
        "resources": {"requests": {"cpu": "1"}},
        "ports": [{"containerPort": 8080, "hostPort": 8080, "protocol": "TCP"}],
    }
    assert p["status"] == {"phase": "Running"}
    assert doc["namespaces"] == [
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "default", "labels": {"a": "b"}}}
    ]
    assert doc["priorityClasses"][0] == {
        "apiVersion": "scheduling.k8s.io/v1",
        "kind": "PriorityClass",
        "metadata": {"name": "hi"},
        "value": 5,
    }
    assert doc["podDisruptionBudgets"][0]["status"] == {"disruptionsAllowed": 0}
    # Round trip through the file format.
    path = _write(tmp_path, snapshot.dump_yaml(doc))
    back = snapshot.load_cluster(path)
    assert back.nodes == doc["nodes"]
    assert back.pods == doc["pods"]
    assert back.namespace_labels()("default") == {"a": "b"}
    assert [b.name for b in back.pdb_lister()()] == ["pdb"]


def test_build_cache_holds_assigned_non_terminal_pods() -> None:
    state = snapshot.ClusterState(
        nodes=[make_node("n1").obj()],
        pods=[
            make_pod("a").uid("ua").node("n1").req(cpu="1").obj(),
            make_pod("b").uid("ub").node("n1").req(cpu="1").phase("Failed").obj(),
            make_pod("c").uid("uc").req(cpu="1").obj(),
        ],
    )
    snap = snapshot.build_cache(state).snapshot()
    assert list(snap.node_infos["n1"].pods) == ["ua"]
    assert snap.node_infos["n1"].requested.milli_cpu == 1000
    assert snapshot.build_cache(state, exclude=["default/a"]).snapshot().node_infos["n1"].pods == {}


def test_resolve_priority() -> None:
    classes = [
        {"metadata": {"name": "hi"}, "value": 100, "preemptionPolicy": "Never"},
        {"metadata": {"name": "default-prio"}, "value": 7, "globalDefault": True},
    ]
    named = make_pod("a").obj()
    named["spec"]["priorityClassName"] = "hi"
    out = snapshot.resolve_priority(named, classes)
    assert out["spec"]["priority"] == 100
    assert out["spec"]["preemptionPolicy"] == "Never"
    assert "priority" not in named["spec"]  # not mutated
    assert snapshot.resolve_priority(make_pod("b").obj(), classes)["spec"]["priority"] == 7
    assert snapshot.resolve_priority(make_pod("c").obj(), [])["spec"]["priority"] == 0
    explicit = make_pod("d").priority(3).obj()
    assert snapshot.resolve_priority(explicit, classes)["spec"]["priority"] == 3
    critical = make_pod("e").obj()
    critical["spec"]["priorityClassName"] = "system-node-critical"
    assert snapshot.resolve_priority(critical, [])["spec"]["priority"] == 2000001000


def test_cli_snapshot_without_credentials_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rc = main(["snapshot", "-o", str(tmp_path / "s.yaml"), "--kubeconfig", str(tmp_path / "missing")])
    assert rc == 2
    err = capsys.readouterr().err
    assert "cannot load cluster credentials" in err
    assert "Traceback" not in err
