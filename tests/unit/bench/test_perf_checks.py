"""The checks that judge both schedulers on the scheduler_perf workloads (bench/perf_checks.py,
the additions to bench/workloads.placement, bench/script.held_bound), pure: each must flag what it
claims to and only that. Also the per-workload scheduler configuration bench/run.py writes."""

from __future__ import annotations

from typing import Any

import pytest
import yaml

from bench import perf_checks, perf_more, perf_objects, script, workloads
from bench import run as bench_run
from tests.builders import make_node, make_pod

JSON = dict[str, Any]
ZONE = "topology.kubernetes.io/zone"


def _nodes(*names: str, **labels: str) -> list[JSON]:
    return [make_node(n).labels(**labels).obj() for n in names]


@pytest.mark.parametrize(
    ("ports", "want"),
    [
        pytest.param({"p1": ("n1", 80), "p2": ("n2", 80)}, 0, id="one-per-node"),
        pytest.param({"p1": ("n1", 80), "p2": ("n1", 81)}, 0, id="different-ports"),
        pytest.param({"p1": ("n1", 80), "p2": ("n1", 80), "p3": ("n1", 80)}, 2, id="three-on-one-port"),
        pytest.param({"p1": ("n1", 80), "p2": ("", 80)}, 0, id="unbound-does-not-count"),
    ],
)
def test_host_port_conflicts(ports: dict[str, tuple[str, int]], want: int) -> None:
    pods = []
    for name, (node, port) in ports.items():
        b = make_pod(name).host_port(port)
        pods.append(b.node(node).obj() if node else b.obj())
    assert perf_checks.host_port_conflicts(_nodes("n1", "n2"), pods) == want


def _affine(name: str, node: str, color: str, want: str, key: str = ZONE) -> JSON:
    term = {"labelSelector": {"matchLabels": {"color": want}}, "topologyKey": key}
    return make_pod(name).labels(color=color).pod_affinity("podAffinity", term).node(node).obj()


@pytest.mark.parametrize(
    ("pods", "want"),
    [
        pytest.param([_affine("a", "n1", "blue", "blue"), _affine("b", "n2", "blue", "blue")], 0, id="same-zone"),
        pytest.param([_affine("a", "n1", "blue", "blue")], 0, id="first-of-its-group-matches-itself"),
        pytest.param(
            [_affine("a", "n1", "red", "blue"), make_pod("b").labels(color="blue").node("n3").obj()],
            1,
            id="match-in-other-zone",
        ),
        pytest.param([_affine("a", "n1", "red", "blue", key="rack")], 1, id="node-without-the-key"),
        pytest.param(
            [
                _affine("a", "n1", "red", "yellow-0", key="kubernetes.io/hostname"),
                make_pod("y").labels(color="yellow-0").node("n1").obj(),
            ],
            0,
            id="hostname-partner",
        ),
    ],
)
def test_pod_affinity_unmet(pods: list[JSON], want: int) -> None:
    nodes = [*_nodes("n1", "n2", **{ZONE: "z1"}), *_nodes("n3", **{ZONE: "z2"})]
    assert perf_checks.pod_affinity_unmet(nodes, pods) == want


def _claiming(name: str, node: str, *claims: str) -> JSON:
    b = make_pod(name).node(node)
    for c in claims:
        b.pvc(c)
    return b.obj()


@pytest.mark.parametrize(
    ("pods", "shared", "over_limit"),
    [
        pytest.param([_claiming("a", "n1", "c1"), _claiming("b", "n1", "c2")], 0, 0, id="own-claims-within-limit"),
        pytest.param([_claiming("a", "n1", "c1"), _claiming("b", "n2", "c1")], 1, 0, id="claim-shared"),
        pytest.param(
            [_claiming("a", "n1", "c1", "c2"), _claiming("b", "n1", "c3")], 0, 1, id="three-volumes-limit-two"
        ),
        pytest.param([_claiming("a", "n2", "c1", "c2", "c3")], 0, 0, id="no-limit-on-node"),
    ],
)
def test_volume_checks(pods: list[JSON], shared: int, over_limit: int) -> None:
    limited = make_node("n1").capacity_named({perf_objects.CSI_ALLOCATABLE: "2"}).obj()
    nodes = [limited, make_node("n2").obj()]
    assert perf_checks.shared_claims(nodes, pods) == shared
    assert perf_checks.volume_limit_exceeded(nodes, pods) == over_limit


def _match_fields(node: str) -> JSON:
    expr = {"key": "metadata.name", "operator": "In", "values": [node]}
    return {"matchFields": [expr]}


@pytest.mark.parametrize(("on", "want"), [("named", 0), ("other", 1)])
def test_placement_judges_match_fields(on: str, want: int) -> None:
    pod = make_pod("d").required_node_affinity(_match_fields("named")).node(on).obj()
    got = workloads.placement(_nodes("named", "other"), [pod])["violations"]["node_affinity"]
    assert got == want


def _spreading(name: str, node: str, **extra: Any) -> JSON:
    return (
        make_pod(name)
        .labels(foo="bar")
        .spread(1, "kubernetes.io/hostname", selector={"matchLabels": {"foo": "bar"}}, **extra)
        .node(node)
        .obj()
    )


@pytest.mark.parametrize(
    ("extra", "want"),
    [
        pytest.param({}, 1, id="tainted-node-is-an-empty-domain"),
        pytest.param({"nodeTaintsPolicy": "Honor"}, 0, id="honoured-taint-is-no-domain"),
        pytest.param({"minDomains": 5}, 1, id="too-few-domains-minimum-zero"),
    ],
)
def test_placement_spread_honours_taints_policy_and_min_domains(extra: dict[str, Any], want: int) -> None:
    """Two pods on each of two nodes, a third node tainted: skew 2 counting it (or with the global
    minimum 0 when there are fewer domains than minDomains), 0 without it."""
    nodes = [*_nodes("n1", "n2"), make_node("t").taint("foo").obj()]
    pods = [_spreading(f"p{i}", f"n{i % 2 + 1}", **extra) for i in range(4)]
    assert workloads.placement(nodes, pods)["violations"]["topology_spread"] == want


@pytest.mark.parametrize(
    ("releases", "bound", "want"),
    [
        pytest.param([({"a", "b"}, 0, 10.0)], {"a": 11.0, "b": 12.0}, 0, id="bound-after-the-event"),
        pytest.param([({"a", "b"}, 0, 10.0)], {"a": 9.0, "b": 12.0}, 1, id="one-bound-before"),
        pytest.param([({"a", "b"}, 1, 10.0)], {"a": 9.0, "b": 12.0}, 0, id="one-allowed-early"),
        pytest.param([({"a"}, 0, 10.0), ({"b"}, 0, 20.0)], {"a": 15.0, "b": 15.0}, 1, id="each-its-own-event"),
        pytest.param([({"a"}, 0, 10.0)], {}, 0, id="never-bound"),
    ],
)
def test_held_bound(releases: list[tuple[set[str], int, float]], bound: dict[str, float], want: int) -> None:
    recorded = [(script.Release(frozenset(names), early), t) for names, early, t in releases]
    assert script.held_bound(recorded, bound) == want


def test_setup_and_measured_split_at_measure() -> None:
    b = script.Builder()
    b.pods([make_pod("s").obj()], measured=False)
    b.measure()
    b.pods([make_pod("m").obj()])
    b.delete(["s"], 50.0, background=True)
    b.update(script.Update("pod", (("m", {}), ("s", {})), 4.0))
    assert [type(s).__name__ for s in script.setup(b.steps)] == ["CreatePods"]
    assert [type(s).__name__ for s in script.measured(b.steps)] == ["CreatePods", "DeletePods", "Update"]
    assert script.setup(b.steps[2:]) == [], "no Measure: all measured"
    assert len(script.measured(b.steps[2:])) == 3
    assert script.paced_seconds(b.steps) == pytest.approx(1 / 50 + 2 / 4)
    assert script.names(b.measured_pods) == {"m"}


@pytest.mark.parametrize(
    ("workload", "kept", "dropped"),
    [
        (
            "EventHandlingPodDelete",
            {"VolumeRestrictions", "NodeVolumeLimits", "VolumeBinding", "VolumeZone"},
            {"DynamicResources"},
        ),
        ("SchedulingWithExtendedResource", {"DynamicResources"}, {"VolumeBinding"}),
        ("dra", {"DynamicResources"}, {"VolumeBinding"}),
        ("EventHandlingNodeAdd", set(), {"DynamicResources", "VolumeBinding"}),
    ],
)
def test_kube_matched_plugins_keep_what_the_workload_needs(workload: str, kept: set[str], dropped: set[str]) -> None:
    cfg = yaml.safe_load(bench_run.kube_matched_plugins(workload))
    disabled = {p["name"] for p in cfg["plugins"]["multiPoint"]["disabled"]}
    assert not kept & disabled
    assert dropped <= disabled


@pytest.mark.parametrize(
    ("workload", "configured"), [("HostPortConflict", True), ("ResourceSaturation", True), ("SchedulingBasic", False)]
)
def test_no_topology_plugin_config_in_both_profiles(workload: str, configured: bool) -> None:
    """batching's scheduler-config-no-topology.yaml, at each scheduler's profile indentation."""
    for head, indent in (("profiles:\n- schedulerName: a\n", "  "), ("profiles:\n  - schedulerName: b\n", "    ")):
        profile = yaml.safe_load(head + perf_more.plugin_config(workload, indent))["profiles"][0]
        if configured:
            assert profile["pluginConfig"] == [
                {"name": "PodTopologySpread", "args": {"defaultingType": "List", "defaultConstraints": []}}
            ]
        else:
            assert "pluginConfig" not in profile
