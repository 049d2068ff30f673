"""Workload selectors offline: PodTopologySpread's system default constraints in explain and simulate.

The daemon reads the Services, ReplicationControllers, ReplicaSets and StatefulSets that select a
pod from informers (:class:`DefaultSelectors`); the tools read them from a snapshot or one LIST
(:class:`StaticSelectors`). Both must answer alike, or explain/simulate score spreading unlike the
daemon.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from custom_scheduler.api import labels
from custom_scheduler.core.selectors import KINDS, DefaultSelectors, StaticSelectors
from custom_scheduler.tools import main, snapshot
from custom_scheduler.tools.simulate import simulate
from tests.builders import PodBuilder, make_node, make_pod

ZONE = "topology.kubernetes.io/zone"
_API_VERSIONS = {"Service": "v1", "ReplicationController": "v1", "ReplicaSet": "apps/v1", "StatefulSet": "apps/v1"}


def workload(kind: str, name: str, selector: Any, namespace: str = "default") -> dict[str, Any]:
    """A workload object as the API returns it; ``selector`` is its raw ``spec.selector`` (None: absent)."""
    spec: dict[str, Any] = {} if selector is None else {"selector": selector}
    return {
        "apiVersion": _API_VERSIONS.get(kind, "apps/v1"),
        "kind": kind,
        "metadata": {"name": name, "namespace": namespace, "resourceVersion": "7"},
        "spec": spec,
    }


def service(name: str, namespace: str = "default", **selector: str) -> dict[str, Any]:
    return workload("Service", name, selector, namespace)


def replicaset(name: str, selector: dict[str, Any], namespace: str = "default") -> dict[str, Any]:
    return workload("ReplicaSet", name, selector, namespace)


def daemon_selectors(objects: list[dict[str, Any]]) -> DefaultSelectors:
    """The daemon's index, filled through its informers' LIST handler (no API server involved)."""
    ds = DefaultSelectors(None)  # type: ignore[arg-type]  # never started: no client needed
    for inf in ds.informers:
        inf.replace([o for o in objects if KINDS.get(o["kind"]) == inf.name], "1")
    return ds


def requirements(sel: labels.Selector | None) -> set[labels.Requirement] | None:
    return None if sel is None else set(sel.requirements)


def req_in(key: str, *values: str) -> labels.Requirement:
    return labels.Requirement(key, labels.IN, frozenset(values))


WEB = make_pod("w").labels(app="web", tier="fe", v="1")

# (objects, pod, the requirements of the union, or None when nothing selects the pod)
SELECTION_CASES = [
    pytest.param([service("web", app="web")], WEB, {req_in("app", "web")}, id="service-map-selector"),
    pytest.param(
        [replicaset("rs", {"matchExpressions": [{"key": "tier", "operator": "In", "values": ["fe", "be"]}]})],
        WEB,
        {req_in("tier", "fe", "be")},
        id="replicaset-match-expressions",
    ),
    pytest.param(
        [
            workload("ReplicationController", "rc", {"v": "1"}),
            workload("StatefulSet", "ss", {"matchLabels": {"v": "1"}}),
        ],
        WEB,
        {req_in("v", "1")},
        id="rc-and-statefulset",
    ),
    pytest.param(
        [service("all"), replicaset("all", {}), workload("Service", "none", None)],
        WEB,
        None,
        id="empty-or-absent-selector-selects-nothing",
    ),
    pytest.param(
        [replicaset("bad", {"matchExpressions": [{"key": "app", "operator": "Near"}]})],
        WEB,
        None,
        id="invalid-selector-selects-nothing",
    ),
    pytest.param([service("web", "other", app="web")], WEB, None, id="other-namespace-ignored"),
    pytest.param([service("db", app="db")], WEB, None, id="not-selected"),
    pytest.param([workload("Deployment", "web", {"matchLabels": {"app": "web"}})], WEB, None, id="other-kinds-ignored"),
    pytest.param(
        [
            service("web", app="web"),
            replicaset("web-1", {"matchLabels": {"app": "web", "v": "1"}}),
            service("x", app="x"),
        ],
        WEB,
        {req_in("app", "web"), req_in("v", "1")},
        id="union-of-two-workloads",
    ),
]


@pytest.mark.parametrize(("objects", "pod", "want"), SELECTION_CASES)
def test_static_index_selects_like_the_daemons(
    objects: list[dict[str, Any]], pod: PodBuilder, want: set[labels.Requirement] | None
) -> None:
    p = pod.build()
    static = StaticSelectors(objects).for_pod(p)
    assert requirements(static) == want
    assert requirements(daemon_selectors(objects).for_pod(p)) == want


def _write(tmp_path: Path, doc: Any, name: str = "cluster.yaml") -> str:
    path = tmp_path / name
    path.write_text(snapshot.dump_yaml(doc))
    return str(path)


def test_snapshot_document_keeps_only_the_workloads_selectors_and_round_trips(tmp_path: Path) -> None:
    svc = service("web", app="web")
    svc["metadata"]["managedFields"] = [{"manager": "kubectl"}]
    svc["spec"].update({"ports": [{"port": 80}], "clusterIP": "10.0.0.1"})
    rs = replicaset("web-1", {"matchLabels": {"app": "web", "v": "1"}})
    rs["spec"]["template"] = {"metadata": {"labels": {"app": "web", "v": "1"}}, "spec": {"containers": []}}
    rs["status"] = {"replicas": 2}
    rc = workload("ReplicationController", "rc", {"v": "1"}, "b")
    ss = workload("StatefulSet", "ss", {"matchLabels": {"v": "1"}}, "a")
    state = snapshot.ClusterState(nodes=[make_node("n1").obj()], workloads=[rs, ss, svc, rc])

    doc = snapshot.snapshot_document(state)
    stripped_service = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": "web", "namespace": "default"},
        "spec": {"selector": {"app": "web"}},
    }
    assert doc["services"] == [stripped_service]
    assert doc["replicaSets"][0]["spec"] == {"selector": {"matchLabels": {"app": "web", "v": "1"}}}
    assert doc["replicaSets"][0]["apiVersion"] == "apps/v1"
    assert [w["metadata"]["name"] for w in doc["replicationControllers"] + doc["statefulSets"]] == ["rc", "ss"]

    back = snapshot.load_cluster(_write(tmp_path, doc))
    assert back.workloads == doc["services"] + doc["replicationControllers"] + doc["replicaSets"] + doc["statefulSets"]
    sel = back.default_spread_selector()(WEB.build())
    assert requirements(sel) == {req_in("app", "web"), req_in("v", "1")}


@pytest.mark.parametrize(
    ("doc", "want"),
    [
        pytest.param(
            {"kind": "ClusterSnapshot", "nodes": [make_node("n1").obj()], "pods": []}, None, id="old-snapshot"
        ),
        pytest.param(
            {"apiVersion": "v1", "kind": "List", "items": [make_node("n1").obj(), service("web", app="web")]},
            {req_in("app", "web")},
            id="kubectl-list-of-mixed-kinds",
        ),
        pytest.param(
            {
                "nodes": [make_node("n1").obj()],
                "services": [{"metadata": {"name": "web"}, "spec": {"selector": {"app": "web"}}}],
            },
            {req_in("app", "web")},
            id="section-objects-without-kind-or-namespace",
        ),
    ],
)
def test_files_load_with_or_without_workloads(
    tmp_path: Path, doc: dict[str, Any], want: set[labels.Requirement] | None
) -> None:
    state = snapshot.load_cluster(_write(tmp_path, doc))
    assert requirements(state.default_spread_selector()(WEB.build())) == want


def test_fetch_live_keeps_going_without_a_forbidden_kind() -> None:
    from custom_scheduler.kube import api_errors

    class Client:
        host = "https://test"

        def get(self, path: str, query: Any = None, timeout: Any = None) -> dict[str, Any]:
            if path == "/api/v1/services":
                raise api_errors.ApiError(403, "Forbidden", "services is forbidden")
            if path == "/apis/apps/v1/replicasets":
                items = [replicaset("rs", {"matchLabels": {"app": "web"}})]
                for i in items:
                    del i["kind"]  # as in a LIST response
                return {"items": items}
            return {"items": [make_node("n1").obj()] if path == "/api/v1/nodes" else []}

    state = snapshot.fetch_live(Client())
    assert [(w["kind"], w["metadata"]["name"]) for w in state.workloads] == [("ReplicaSet", "rs")]
    assert len(state.warnings) == 1
    assert "cannot list services (403 Forbidden: services is forbidden)" in state.warnings[0]
    assert requirements(state.default_spread_selector()(WEB.build())) == {req_in("app", "web")}


# -- the tools ----------------------------------------------------------------------------------------


def _cluster(with_service: bool) -> dict[str, Any]:
    """Two equal nodes in two zones; three replicas of ``web`` on n1 (tiny requests), and on n2 one
    big unrelated pod, so resource scoring alone prefers n1 and only spreading prefers n2."""
    pods = [make_pod(f"web-{i}").label("app", "web").node("n1").req(cpu="10m", memory="10Mi").obj() for i in range(3)]
    pods.append(make_pod("big").node("n2").req(cpu="2", memory="1Gi").obj())
    doc: dict[str, Any] = {
        "kind": "ClusterSnapshot",
        "nodes": [make_node("n1").label(ZONE, "a").obj(), make_node("n2").label(ZONE, "b").obj()],
        "pods": pods,
    }
    if with_service:
        doc["services"] = [service("web", app="web")]
    return doc


INCOMING = make_pod("web-3").label("app", "web").req(cpu="10m", memory="10Mi")


def _spread_scores(out: str) -> dict[str, int] | None:
    """PodTopologySpread's normalized score per node; None when the plugin skipped scoring (the pod
    has no constraint: no own one and no workload for the default ones)."""
    d = json.loads(out)
    if "PodTopologySpread" in d["skipped"]["score"]:
        return None
    return {
        s["node"]: next(p["normalized"] for p in s["plugins"] if p["plugin"] == "PodTopologySpread")
        for s in d["scores"]
    }


# With the Service, kube's formula: raw n1 = 3*ln 4 + 2 (hostname) + 3*ln 4 + 4 (zone) = 14, n2 = 6;
# normalized 100 * (14 + 6 - raw) / 14 -> n1 42, n2 100. Without it the plugin skips the pod.
@pytest.mark.parametrize(("with_service", "want"), [(True, {"n1": 42, "n2": 100}), (False, None)])
def test_explain_spreads_a_pod_away_from_its_service_only_when_the_service_is_known(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], with_service: bool, want: dict[str, int] | None
) -> None:
    cluster = _write(tmp_path, _cluster(with_service))
    pod = tmp_path / "pod.yaml"
    pod.write_text(yaml.safe_dump(INCOMING.obj()))
    assert main(["explain", str(pod), "--cluster", cluster, "-o", "json", "--seed", "1"]) == 0
    assert _spread_scores(capsys.readouterr().out) == want


@pytest.mark.parametrize(("with_service", "node"), [(True, "n2"), (False, "n1")])
def test_simulate_places_by_the_services_spreading(
    tmp_path: Path, default_config: Any, registry: Any, with_service: bool, node: str
) -> None:
    state = snapshot.load_cluster(_write(tmp_path, _cluster(with_service)))
    res = simulate(state, [INCOMING.obj()], default_config, registry, seed=1)
    assert res.placement_map() == {"default/web-3": node}
