"""The ``ui`` page's server: the JSON endpoint (request in, document out; every bad input a 400 with
a message), its agreement with ``simulate``, the per-pod diagnosis and attempts, and the HTTP
plumbing (assets, the initial texts, errors) on a real socket."""

from __future__ import annotations

import argparse
import json
import threading
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from custom_scheduler.framework.registry import Registry
from custom_scheduler.tools import main, ui_server
from custom_scheduler.tools.plumbing import ToolError
from custom_scheduler.tools.simulate import Simulation, pending_pods
from tests.builders import make_node, make_pod

ZONE = "topology.kubernetes.io/zone"
SEED_7_JSON = ("--seed", "7", "-o", "json")
CONFIG = "apiVersion: kubescheduler.config.k8s.io/v1\nkind: KubeSchedulerConfiguration\n"


def small_case() -> tuple[str, str]:
    """Three nodes of distinct sizes (one already half used) and four pods, the last of which
    fits nowhere: the snapshot and the pods as YAML texts (what the page's text areas hold)."""
    nodes = [
        make_node("small").capacity(cpu="2", memory="4Gi", pods="10").obj(),
        make_node("medium").capacity(cpu="4", memory="8Gi", pods="10").obj(),
        make_node("large").capacity(cpu="8", memory="16Gi", pods="10").obj(),
    ]
    bound = [make_pod("old", "batch").uid("u-old").node("large").req(cpu="4", memory="1Gi").obj()]
    cluster = yaml.safe_dump(
        {"apiVersion": "custom-scheduler/v1alpha1", "kind": "ClusterSnapshot", "nodes": nodes, "pods": bound}
    )
    pods = [
        make_pod("web-0").req(cpu="1", memory="1Gi").obj(),
        make_pod("web-1").req(cpu="1500m", memory="2Gi").obj(),
        make_pod("db").req(cpu="3", memory="4Gi").obj(),
        make_pod("huge").req(cpu="12", memory="2Gi").obj(),
    ]
    return cluster, yaml.safe_dump_all(pods)


def _post(registry: Registry, body: Any) -> ui_server.Reply:
    raw = body if isinstance(body, bytes) else json.dumps(body).encode()
    return ui_server.handle_simulate(raw, registry)


# -- the endpoint ------------------------------------------------------------------------------------


def test_the_document_is_simulates_own(registry: Registry, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Same texts, same seed: the endpoint's placements, outcomes and utilisation are the CLI's."""
    cluster, pods = small_case()
    (tmp_path / "c.yaml").write_text(cluster)
    (tmp_path / "p.yaml").write_text(pods)
    reply = _post(registry, {"cluster": cluster, "pods": pods, "seed": "7"})
    assert reply.status == 200
    capsys.readouterr()
    assert (
        main(["simulate", "--cluster", str(tmp_path / "c.yaml"), "--pods", str(tmp_path / "p.yaml"), *SEED_7_JSON]) == 0
    )
    cli = json.loads(capsys.readouterr().out)
    for key in ("summary", "placements", "unschedulablePods", "utilisation", "groups", "seed", "profile"):
        assert reply.body[key] == cli[key], key
    assert reply.body["summary"]["placed"] == 3
    assert [p["pod"] for p in reply.body["unschedulablePods"]] == ["default/huge"]


def test_each_pod_has_its_outcome_and_node_diagnosis(registry: Registry) -> None:
    cluster, pods = small_case()
    d = _post(registry, {"cluster": cluster, "pods": pods, "config": CONFIG, "seed": 3}).body
    outcomes = {p["pod"]: p for p in d["pods"]}
    assert list(outcomes) == ["default/web-0", "default/web-1", "default/db", "default/huge"]
    huge = d["diagnoses"]["default/huge"]
    assert [(n["node"], n["verdict"], n["plugin"], n["reasons"]) for n in huge["nodes"]] == [
        (name, "rejected", "NodeResourcesFit", ["Insufficient cpu"]) for name in ("large", "medium", "small")
    ]
    assert huge["note"].startswith("0/3 nodes are available: 3 Insufficient cpu.")
    assert outcomes["default/huge"]["attempts"] == 1
    for key in ("default/web-0", "default/web-1"):  # several feasible nodes: scored
        p = outcomes[key]
        by_node = {n["node"]: n for n in d["diagnoses"][key]["nodes"]}
        assert {n["verdict"] for n in by_node.values()} == {"feasible"}
        # The total the page shows for the chosen node is the score simulate reports for the pod.
        assert by_node[p["node"]]["total"] == p["score"] == max(n["total"] for n in by_node.values())
        assert sum(by_node[p["node"]]["scores"].values()) == p["score"]
        assert "NodeResourcesFit" in d["diagnoses"][key]["scorePlugins"]
    # db (3 CPUs) fits medium only: the others are rejected, though the daemon's fast path does
    # not report why; nothing is scored.
    db = outcomes["default/db"]
    assert (db["node"], db["score"]) == ("medium", None)
    assert [(n["node"], n["verdict"], n["plugin"], n["reasons"]) for n in d["diagnoses"]["default/db"]["nodes"]] == [
        ("large", "rejected", "NodeResourcesFit", ["Insufficient cpu"]),
        ("medium", "feasible", "", []),
        ("small", "rejected", "NodeResourcesFit", ["Insufficient cpu"]),
    ]
    assert "nothing was scored" in d["diagnoses"]["default/db"]["note"]


def test_attempts_are_the_queues_count(registry: Registry, tmp_path: Path) -> None:
    """A pod retried after a later placement counts both attempts; an unschedulable pod's count
    is the queue's own QueuedPodInfo.attempts."""
    nodes = [
        make_node(n).label(ZONE, z).capacity(cpu="4", memory="8Gi", pods="10").obj()
        for n, z in (("a", "z1"), ("b", "z2"))
    ]
    term = {"topologyKey": ZONE, "labelSelector": {"matchLabels": {"app": "db"}}}
    docs = [
        make_pod("follower").pod_affinity("podAffinity", term).obj(),
        make_pod("db").label("app", "db").node_selector(**{ZONE: "z2"}).obj(),
        make_pod("never").node_selector(**{ZONE: "z9"}).obj(),
    ]
    cluster = yaml.safe_dump({"nodes": nodes})
    d = _post(registry, {"cluster": cluster, "pods": yaml.safe_dump_all(docs), "seed": 1}).body
    got = {p["pod"]: (p["result"], p["attempts"]) for p in d["pods"]}
    assert got["default/follower"] == ("scheduled", 2)
    assert got["default/db"] == ("scheduled", 1)

    from custom_scheduler import config
    from custom_scheduler.tools.snapshot_file import load_cluster

    (tmp_path / "cluster.yaml").write_text(cluster)
    state = load_cluster(str(tmp_path / "cluster.yaml"))
    sim = Simulation(state, config.load_config(CONFIG, registry), registry, seed=1)
    fed = pending_pods(state, docs)
    sim.feed(fed, None)
    sim.run_until_idle()
    never = fed[2]
    queued = sim.queue.get(never.uid)
    assert queued is not None
    assert sim.outcomes[never.uid].attempts == queued.attempts == got["default/never"][1]
    assert got["default/never"][0] == "unschedulable"


_CLUSTER, _PODS = small_case()
_POD = "apiVersion: v1\nkind: Pod\nmetadata: {name: x}\n"
_BAD_QUANTITY = _POD + "spec: {containers: [{name: c, resources: {requests: {cpu: lots}}}]}\n"


@pytest.mark.parametrize(
    ("body", "message"),
    [
        pytest.param(b"{not json", "the request is not JSON", id="not-json"),
        pytest.param(b"[1, 2]", "must be a JSON object", id="not-an-object"),
        pytest.param({"pods": _PODS}, "cluster: empty", id="no-cluster"),
        pytest.param({"cluster": _CLUSTER, "pods": ""}, "pods: empty", id="no-pods"),
        pytest.param({"cluster": 3, "pods": _PODS}, "cluster: expected a string of YAML", id="cluster-not-text"),
        pytest.param(
            {"cluster": "nodes: [", "pods": _PODS}, "cluster snapshot cluster.yaml: invalid YAML", id="bad-yaml"
        ),
        pytest.param({"cluster": "pods: []", "pods": _PODS}, "no Node objects found", id="no-nodes"),
        pytest.param(
            {"cluster": _CLUSTER, "pods": "kind: Service\nmetadata: {name: s}"}, "is not a Pod", id="not-a-pod"
        ),
        pytest.param(
            {
                "cluster": _CLUSTER,
                "pods": _PODS,
                "config": CONFIG + "profiles: [{schedulerName: x, plugins: "
                "{filter: {enabled: [{name: NoSuchPlugin}]}}}]",
            },
            'unknown plugin "NoSuchPlugin"',
            id="bad-config",
        ),
        pytest.param({"cluster": _CLUSTER, "pods": _PODS, "seed": "abc"}, "seed: expected an integer", id="bad-seed"),
        pytest.param({"cluster": _CLUSTER, "pods": _PODS + "---\n" + _PODS}, "given more than once", id="twice"),
        pytest.param({"cluster": _CLUSTER, "pods": _PODS, "profile": "nope"}, "profile 'nope' is not in", id="profile"),
        pytest.param(
            {"cluster": _CLUSTER, "pods": _BAD_QUANTITY}, "invalid object: pod /x: QuantityError", id="bad-quantity"
        ),
        pytest.param(
            {"cluster": _CLUSTER.replace("cpu: '2'", "cpu: two"), "pods": _PODS},
            "invalid object: node /small: QuantityError: invalid quantity 'two'",
            id="bad-node",
        ),
        pytest.param({"cluster": _CLUSTER, "pods": _POD + "spec: 5\n"}, "spec is not an object", id="spec-not-object"),
    ],
)
def test_bad_input_is_a_400_with_the_reason(registry: Registry, body: Any, message: str) -> None:
    reply = _post(registry, body)
    assert reply.status == 400
    assert message in reply.body["error"]
    assert "custom-scheduler-ui-" not in reply.body["error"]  # no private temporary path


def test_a_failure_inside_the_simulation_is_a_500_not_a_crash(
    registry: Registry, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A bug below the endpoint (here: simulate raising) answers 500 with its text; the next
    request runs normally."""
    cluster, pods = small_case()

    def broken(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("plugin exploded")

    monkeypatch.setattr(ui_server, "simulate", broken)
    reply = _post(registry, {"cluster": cluster, "pods": pods})
    assert reply == ui_server.Reply(500, {"error": "the simulation failed: RuntimeError: plugin exploded"})
    monkeypatch.undo()
    assert _post(registry, {"cluster": cluster, "pods": pods}).status == 200


# -- the HTTP server ---------------------------------------------------------------------------------


@pytest.fixture
def server(registry: Registry) -> Iterator[ui_server.UIServer]:
    cluster, pods = small_case()
    srv = ui_server.UIServer(("127.0.0.1", 0), registry, ui_server.Initial(cluster=cluster, pods=pods, seed=4))
    thread = threading.Thread(target=srv.serve_forever, daemon=True)
    thread.start()
    try:
        yield srv
    finally:
        srv.shutdown()
        srv.server_close()
        thread.join(timeout=10)


def _http(url: str, data: bytes | None = None) -> tuple[int, str, bytes]:
    req = urllib.request.Request(url, data=data, headers={"Content-Type": "application/json"} if data else {})
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            return r.status, r.headers["Content-Type"], r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.headers["Content-Type"], e.read()


def test_the_page_and_its_assets_are_served_without_external_resources(server: ui_server.UIServer) -> None:
    status, ctype, body = _http(server.url)
    assert (status, ctype) == (200, "text/html; charset=utf-8")
    page = body.decode()
    assert '<script src="app.js">' in page
    assert 'href="app.css"' in page
    for name in ("app.js", "app.css"):
        status, _, asset = _http(server.url + name)
        assert status == 200
        assert asset
    for text in (page, _http(server.url + "app.js")[2].decode(), _http(server.url + "app.css")[2].decode()):
        assert "https://" not in text
        assert "http://" not in text.replace("http://www.w3.org/2000/svg", "")


def test_the_initial_texts_and_a_run_over_http(server: ui_server.UIServer) -> None:
    status, _, body = _http(server.url + "api/initial")
    initial = json.loads(body)
    assert status == 200
    assert initial["cluster"].startswith("apiVersion: custom-scheduler/v1alpha1")
    assert initial["seed"] == 4
    status, ctype, body = _http(server.url + "api/simulate", json.dumps(initial).encode())
    assert (status, ctype) == (200, "application/json")
    assert json.loads(body)["summary"]["placed"] == 3
    status, _, body = _http(server.url + "api/simulate", b"{")
    assert status == 400
    assert "not JSON" in json.loads(body)["error"]
    assert _http(server.url + "nothing-here")[0] == 404
    assert _http(server.url + "api/simulate")[0] == 404  # GET is not the endpoint
    assert _http(server.url + "api/initial")[0] == 200  # still serving after the bad request


def test_serve_prints_the_url_of_a_free_port(
    registry: Registry, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cluster, _ = small_case()
    (tmp_path / "c.yaml").write_text(cluster)
    args = argparse.Namespace(
        cluster=str(tmp_path / "c.yaml"), pods=None, config=None, seed=None, profile=None, address="127.0.0.1", port=0
    )
    srv = ui_server.serve(args, registry)
    try:
        port = srv.server_address[1]
        assert port != 0
        assert f"serving on http://127.0.0.1:{port}/" in capsys.readouterr().out
        assert srv.initial.cluster == cluster
        assert srv.initial.pods == ""
    finally:
        srv.server_close()
    args.pods = str(tmp_path / "missing.yaml")
    with pytest.raises(ToolError, match=r"pods file .*missing\.yaml: cannot read"):
        ui_server.serve(args, registry)
