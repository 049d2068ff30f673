"""PodTopologySpread: the cases of kube-scheduler's filtering_test.go / scoring_test.go (v1.28+
expectations), plus minDomains, node inclusion policies, matchLabelKeys, default constraints, args
validation, preemption's AddPod/RemovePod, and hypothesis properties."""

from __future__ import annotations

import dataclasses
import random
from collections.abc import Mapping, Sequence
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from custom_scheduler.api.labels import Selector, selector_from_set
from custom_scheduler.api.model import Node, Pod
from custom_scheduler.errors import ConfigError
from custom_scheduler.framework.types import Code, CycleState, NodeInfo, NodeScore, Status
from custom_scheduler.plugins import pod_topology_spread as pts
from tests.builders import PodBuilder, make_node, make_pod
from tests.unit.plugins.support import FakeHandle

S, U, X = Code.SUCCESS, Code.UNSCHEDULABLE, Code.UNSCHEDULABLE_AND_UNRESOLVABLE
HOST = "kubernetes.io/hostname"


# --- fakes and helpers -----------------------------------------------------------------------------


def exists(*keys: str) -> dict[str, Any]:
    return {"matchExpressions": [{"key": k, "operator": "Exists"} for k in keys]}


FOO, BAR = exists("foo"), exists("bar")


def N(name: str, **labels: str) -> Node:
    """A node with ``labels`` (and the builder's kubernetes.io/hostname label)."""
    b = make_node(name)
    for k, v in labels.items():
        b.label(k, v)
    return b.build()


def without_hostname(node: Node) -> Node:
    return dataclasses.replace(node, labels={k: v for k, v in node.labels.items() if k != HOST})


def P(node: str, *labels: str, ns: str = "default", terminating: bool = False, **kv: str) -> Pod:
    """An existing pod on ``node`` with each of ``labels`` set to "" (and ``kv`` as given)."""
    b = make_pod(namespace=ns).node(node).labels(**dict.fromkeys(labels, ""), **kv)
    if terminating:
        b.terminating()
    return b.build()


def incoming(*labels: str, **kv: str) -> PodBuilder:
    return make_pod("p").labels(**dict.fromkeys(labels, ""), **kv)


def cluster(nodes: Sequence[Node], pods: Sequence[Pod] = ()) -> list[NodeInfo]:
    infos = {n.name: NodeInfo(n) for n in nodes}
    for p in pods:
        infos[p.node_name].add_pod(p)
    return list(infos.values())


def four_nodes(**overrides: dict[str, str]) -> list[Node]:
    """node-a, node-b in zone1 and node-x, node-y in zone2, each with a ``node`` label."""
    out = []
    for name, zone in (("node-a", "zone1"), ("node-b", "zone1"), ("node-x", "zone2"), ("node-y", "zone2")):
        labels = overrides.get(name, {"zone": zone, "node": name})
        out.append(N(name, **labels))
    return out


def plugin(
    infos: Sequence[NodeInfo], args: pts.PodTopologySpreadArgs | None = None, selector: Selector | None = None
) -> pts.PodTopologySpread:
    return pts.PodTopologySpread(
        args or pts.PodTopologySpreadArgs(defaulting_type="List"), FakeHandle(infos, spread_selector=selector)
    )


def run_filter(
    pod: Pod,
    nodes: Sequence[Node],
    existing: Sequence[Pod] = (),
    *,
    args: pts.PodTopologySpreadArgs | None = None,
    selector: Selector | None = None,
) -> tuple[Status, dict[str, Status]]:
    infos = cluster(nodes, existing)
    pl = plugin(infos, args, selector)
    state = CycleState()
    pre = pl.pre_filter(state, pod, infos)
    return pre, {ni.name: pl.filter(state, pod, ni) for ni in infos}


def codes(statuses: Mapping[str, Status]) -> dict[str, Code]:
    return {name: s.code for name, s in statuses.items()}


def run_score(
    pod: Pod,
    feasible: Sequence[Node],
    existing: Sequence[Pod] = (),
    failed: Sequence[Node] = (),
    *,
    args: pts.PodTopologySpreadArgs | None = None,
    selector: Selector | None = None,
) -> tuple[Status, dict[str, int]]:
    infos = cluster([*feasible, *failed], existing)
    names = {n.name for n in feasible}
    feasible_infos = [ni for ni in infos if ni.name in names]
    pl = plugin(infos, args, selector)
    state = CycleState()
    pre = pl.pre_score(state, pod, feasible_infos)
    scores = [NodeScore(ni.name, pl.score(state, pod, ni)) for ni in feasible_infos]
    raw = [s.score for s in scores]
    assert pl.normalize_score(state, pod, scores).is_success
    if pre.is_success:  # the framework's batch path gives the same scores (SKIP: no Score at all)
        assert pl.score_batch(state, pod, feasible_infos) == raw
        assert pl.normalize_batch(state, pod, raw) == [s.score for s in scores]
    return pre, {s.name: s.score for s in scores}


# --- args ------------------------------------------------------------------------------------------


def test_args_default_is_system_defaulting() -> None:
    """No args: System defaulting, no explicit default constraints."""
    assert pts.parse_args(None, "args") == pts.PodTopologySpreadArgs((), "System")


def test_args_list_defaulting_parses_constraints() -> None:
    raw = {
        "defaultingType": "List",
        "defaultConstraints": [
            {"maxSkew": 1, "topologyKey": "topology.kubernetes.io/zone", "whenUnsatisfiable": "DoNotSchedule"},
            {
                "maxSkew": 2,
                "topologyKey": HOST,
                "whenUnsatisfiable": "ScheduleAnyway",
                "nodeTaintsPolicy": "Honor",
                "matchLabelKeys": ["app"],
            },
        ],
    }
    assert pts.parse_args(raw, "args") == pts.PodTopologySpreadArgs(
        (
            pts.DefaultConstraint(1, "topology.kubernetes.io/zone", "DoNotSchedule"),
            pts.DefaultConstraint(2, HOST, "ScheduleAnyway", node_taints_policy="Honor", match_label_keys=("app",)),
        ),
        "List",
    )


@pytest.mark.parametrize(
    ("raw", "paths"),
    [
        pytest.param({"defaultingType": "Bogus"}, ["a.defaultingType"], id="unknown-defaulting-type"),
        pytest.param(
            {"defaultConstraints": [{"maxSkew": 1, "topologyKey": "k", "whenUnsatisfiable": "DoNotSchedule"}]},
            ["a.defaultingType"],
            id="system-defaulting-with-constraints",
        ),
        pytest.param(
            {
                "defaultingType": "List",
                "defaultConstraints": [{"maxSkew": 0, "topologyKey": "", "whenUnsatisfiable": "Sometimes"}],
            },
            [
                "a.defaultConstraints[0].maxSkew",
                "a.defaultConstraints[0].topologyKey",
                "a.defaultConstraints[0].whenUnsatisfiable",
            ],
            id="every-bad-field-reported",
        ),
        pytest.param(
            {
                "defaultingType": "List",
                "defaultConstraints": [
                    {"maxSkew": 1, "topologyKey": "k", "whenUnsatisfiable": "DoNotSchedule", "labelSelector": {}}
                ],
            },
            ["a.defaultConstraints[0].labelSelector"],
            id="selector-forbidden",
        ),
        pytest.param(
            {
                "defaultingType": "List",
                "defaultConstraints": [
                    {"maxSkew": 1, "topologyKey": "k", "whenUnsatisfiable": "DoNotSchedule"},
                    {"maxSkew": 2, "topologyKey": "k", "whenUnsatisfiable": "DoNotSchedule"},
                ],
            },
            ["a.defaultConstraints[1]"],
            id="duplicate-key-and-action",
        ),
        pytest.param(
            {
                "defaultingType": "List",
                "defaultConstraints": [{"maxSkew": 1, "topologyKey": "-bad-", "whenUnsatisfiable": "DoNotSchedule"}],
            },
            ["a.defaultConstraints[0].topologyKey"],
            id="invalid-label-key",
        ),
        pytest.param(
            {
                "defaultingType": "List",
                "defaultConstraints": [
                    {"maxSkew": 1, "topologyKey": "k", "whenUnsatisfiable": "ScheduleAnyway", "minDomains": 2},
                    {"maxSkew": 1, "topologyKey": "k", "whenUnsatisfiable": "DoNotSchedule", "nodeTaintsPolicy": "X"},
                ],
            },
            ["a.defaultConstraints[0].minDomains", "a.defaultConstraints[1].nodeTaintsPolicy"],
            id="min-domains-and-policy",
        ),
        pytest.param({"defaultingType": "List", "extra": 1}, ["a.extra"], id="unknown-field"),
    ],
)
def test_args_validation_reports_field_paths(raw: dict[str, Any], paths: list[str]) -> None:
    with pytest.raises(ConfigError) as e:
        pts.parse_args(raw, "a")
    assert [err.path for err in e.value.errors] == paths


def test_spec() -> None:
    assert pts.SPEC.name == "PodTopologySpread"
    assert pts.SPEC.factory is pts.PodTopologySpread


# --- filter ----------------------------------------------------------------------------------------

NODE_PODS_2_1_0_3 = [
    P("node-a", "foo"),
    P("node-a", "foo"),
    P("node-b", "foo"),
    P("node-y", "foo"),
    P("node-y", "foo"),
    P("node-y", "foo"),
]
ABXY = ("node-a", "node-b", "node-x", "node-y")


def want(*cs: Code) -> dict[str, Code]:
    return dict(zip(ABXY, cs, strict=True))


@pytest.mark.parametrize(
    ("pod", "nodes", "existing", "expected"),
    [
        pytest.param(
            incoming("foo").spread(1, "zone", selector=FOO), four_nodes(), [], want(S, S, S, S), id="no-existing-pods"
        ),
        pytest.param(
            incoming("foo").spread(1, "zone", selector=BAR),
            four_nodes(),
            [],
            want(S, S, S, S),
            id="no-existing-pods-incoming-pod-doesnt-match-itself",
        ),
        pytest.param(
            incoming("foo").spread(1, "zone", selector=FOO),
            four_nodes(),
            [P("node-a", "foo", ns="ns1"), P("node-a", "foo", ns="ns2"), P("node-x", "foo"), P("node-y", "foo")],
            want(S, S, U, U),
            id="pods-in-other-namespaces-dont-count",
        ),
        pytest.param(
            incoming("foo").spread(1, "zone", selector=FOO),
            four_nodes(),
            [P("node-a", "foo"), P("node-a", "foo"), P("node-b", "foo"), *[P("node-y", "foo") for _ in range(3)]],
            want(S, S, S, S),
            id="zones-3-3-all-fit",
        ),
        pytest.param(
            incoming("foo").spread(1, "zone", selector=FOO),
            four_nodes(**{"node-b": {"zon": "zone1", "node": "node-b"}}),
            [P("node-a", "foo"), P("node-b", "foo"), P("node-x", "foo"), P("node-y", "foo")],
            want(S, X, U, U),
            id="zones-1-2-node-b-lacks-zone-label",
        ),
        pytest.param(
            incoming("foo").spread(1, "node", selector=FOO),
            four_nodes(),
            NODE_PODS_2_1_0_3,
            want(U, U, S, U),
            id="nodes-2-1-0-3-only-node-x-fits",
        ),
        pytest.param(
            incoming("foo").spread(2, "node", selector=FOO),
            four_nodes(),
            NODE_PODS_2_1_0_3,
            want(U, S, S, U),
            id="nodes-2-1-0-3-maxskew-2",
        ),
        pytest.param(
            incoming("bar").spread(1, "node", selector=FOO),
            four_nodes(),
            NODE_PODS_2_1_0_3,
            want(U, S, S, U),
            id="nodes-2-1-0-3-pod-doesnt-match-itself",
        ),
        pytest.param(
            incoming("foo")
            .required_node_affinity(
                {"matchExpressions": [{"key": "node", "operator": "In", "values": ["node-a", "node-y"]}]}
            )
            .spread(1, "node", selector=FOO),
            four_nodes(),
            NODE_PODS_2_1_0_3,
            want(S, S, S, U),
            id="node-affinity-honored-only-a-and-y-counted",
        ),
        pytest.param(
            incoming("foo")
            .required_node_affinity(
                {"matchExpressions": [{"key": "node", "operator": "In", "values": ["node-a", "node-y"]}]}
            )
            .spread(1, "node", selector=FOO, nodeAffinityPolicy="Ignore"),
            four_nodes(),
            NODE_PODS_2_1_0_3,
            want(U, U, S, U),
            id="node-affinity-ignored-all-nodes-counted",
        ),
        pytest.param(
            incoming("foo").node_selector(pool="a").spread(1, "zone", selector=FOO),
            four_nodes(
                **{
                    "node-a": {"zone": "zone1", "node": "node-a", "pool": "a"},
                    "node-x": {"zone": "zone2", "node": "node-x", "pool": "a"},
                }
            ),
            [P("node-b", "foo"), P("node-b", "foo"), P("node-x", "foo")],
            want(S, S, U, U),
            id="node-selector-honored-node-b-pods-not-counted",
        ),
        pytest.param(
            incoming("foo").spread(1, "zone", selector=FOO),
            [*four_nodes()[:2], N("node-x", zone="zone2", node="node-x"), N("node-y", zone="zone3", node="node-y")],
            [P("node-a", "foo"), P("node-x", "foo")],
            want(U, U, U, S),
            id="empty-zone-is-the-minimum",
        ),
        pytest.param(
            incoming("foo").spread(1, "rack", selector=FOO),
            four_nodes(),
            [],
            want(X, X, X, X),
            id="no-node-has-the-key",
        ),
        pytest.param(
            incoming("foo").spread(1, "node", selector=None),
            four_nodes(),
            NODE_PODS_2_1_0_3,
            want(S, S, S, S),
            id="null-selector-matches-nothing",
        ),
        pytest.param(
            incoming("foo").spread(1, "node", selector={}),
            four_nodes(),
            [P("node-a", "x"), P("node-b", "y"), P("node-y", "z")],
            want(U, U, S, U),
            id="empty-selector-matches-everything",
        ),
        pytest.param(
            incoming("foo").spread(1, "node", when="ScheduleAnyway", selector=FOO),
            four_nodes(),
            NODE_PODS_2_1_0_3,
            want(S, S, S, S),
            id="soft-constraints-dont-filter",
        ),
    ],
)
def test_filter_single_constraint(
    pod: PodBuilder, nodes: list[Node], existing: list[Pod], expected: dict[str, Code]
) -> None:
    _, got = run_filter(pod.build(), nodes, existing)
    assert codes(got) == expected


def test_filter_excludes_terminating_pods() -> None:
    nodes = [N("node-a", node="node-a"), N("node-b", node="node-b")]
    existing = [P("node-a", "foo", terminating=True), P("node-b", "foo")]
    _, got = run_filter(incoming("foo").spread(1, "node", selector=FOO).build(), nodes, existing)
    assert codes(got) == {"node-a": S, "node-b": U}


@pytest.mark.parametrize(
    ("pod", "nodes", "existing", "expected"),
    [
        pytest.param(
            incoming("foo").spread(1, "zone", selector=FOO).spread(1, "node", selector=FOO),
            four_nodes(),
            NODE_PODS_2_1_0_3,
            want(U, U, S, U),
            id="zone-and-node-3-3-and-2-1-0-3",
        ),
        pytest.param(
            incoming("foo").spread(1, "zone", selector=FOO).spread(1, "node", selector=FOO),
            four_nodes(),
            [*NODE_PODS_2_1_0_3, P("node-y", "foo")],
            want(U, U, U, U),
            id="zone-and-node-3-4-and-2-1-0-4",
        ),
        pytest.param(
            incoming("foo", "bar").spread(1, "zone", selector=FOO).spread(1, "node", selector=BAR),
            four_nodes(),
            [P("node-a", "foo"), P("node-y", "bar")],
            want(U, U, S, U),
            id="different-selectors-1-0-and-1-0-0-1",
        ),
        pytest.param(
            incoming("foo", "bar").spread(1, "zone", selector=FOO).spread(1, "node", selector=BAR),
            four_nodes(),
            [P("node-a", "foo"), P("node-x", "bar"), P("node-y", "bar")],
            want(U, U, U, U),
            id="different-selectors-1-0-and-0-0-1-1",
        ),
        pytest.param(
            incoming("foo", "bar").spread(1, "zone", selector=FOO).spread(1, "node", selector=BAR),
            four_nodes(),
            [
                P("node-a", "foo"),
                P("node-a", "foo", "bar"),
                P("node-y", "foo"),
                P("node-y", "foo", "bar"),
                P("node-y", "foo"),
            ],
            want(U, S, U, U),
            id="different-selectors-2-3-and-1-0-0-1",
        ),
        pytest.param(
            incoming("bar").spread(1, "zone", selector=FOO).spread(1, "node", selector=BAR),
            four_nodes(),
            [P("node-a", "foo"), P("node-x", "bar"), P("node-y", "bar")],
            want(S, S, U, U),
            id="pod-doesnt-match-itself-on-zone",
        ),
        pytest.param(
            incoming("foo").spread(1, "zone", selector=FOO).spread(1, "node", selector=FOO),
            four_nodes(**{"node-x": {"zone": "zone2"}}),
            [P("node-a", "foo"), P("node-y", "foo")],
            want(U, S, X, U),
            id="node-x-lacks-node-label",
        ),
    ],
)
def test_filter_multiple_constraints(
    pod: PodBuilder, nodes: list[Node], existing: list[Pod], expected: dict[str, Code]
) -> None:
    _, got = run_filter(pod.build(), nodes, existing)
    assert codes(got) == expected


ABC = [N("node-a", node="node-a"), N("node-b", node="node-b"), N("node-c", node="node-c")]
PODS_2_2_1 = [P("node-a", "foo"), P("node-a", "foo"), P("node-b", "foo"), P("node-b", "foo"), P("node-c", "foo")]


@pytest.mark.parametrize(
    ("pod", "nodes", "existing", "expected"),
    [
        pytest.param(
            incoming("foo").spread(2, "node", selector=FOO, minDomains=4),
            ABC,
            PODS_2_2_1,
            {"node-a": U, "node-b": U, "node-c": S},
            id="fewer-domains-than-min-domains-global-min-is-0",
        ),
        pytest.param(
            incoming("foo").spread(2, "node", selector=FOO, minDomains=3),
            ABC,
            PODS_2_2_1,
            {"node-a": S, "node-b": S, "node-c": S},
            id="domains-equal-min-domains-real-minimum",
        ),
        pytest.param(
            incoming("foo").spread(1, "node", selector=FOO, minDomains=2),
            [N("node-a", node="node-a")],
            [],
            {"node-a": S},
            id="single-empty-domain-still-fits",
        ),
        pytest.param(
            incoming("foo").spread(1, "node", selector=FOO, minDomains=2),
            [N("node-a", node="node-a")],
            [P("node-a", "foo")],
            {"node-a": U},
            id="single-domain-below-min-domains-skew-counts-from-0",
        ),
        pytest.param(
            incoming("foo").node_selector(pool="a").spread(1, "node", selector=FOO, minDomains=3),
            [
                N("node-a", node="node-a", pool="a"),
                N("node-b", node="node-b", pool="a"),
                N("node-c", node="node-c"),
            ],
            [P("node-a", "foo"), P("node-b", "foo"), P("node-c", "foo")],
            {"node-a": U, "node-b": U, "node-c": S},
            id="node-affinity-shrinks-domains-below-min-domains",
        ),
    ],
)
def test_filter_min_domains(pod: PodBuilder, nodes: list[Node], existing: list[Pod], expected: dict[str, Code]) -> None:
    _, got = run_filter(pod.build(), nodes, existing)
    assert codes(got) == expected


def tainted_abc() -> list[Node]:
    c = make_node("node-c").label("node", "node-c").taint("dedicated", "x", "NoSchedule").build()
    return [*ABC[:2], c]


@pytest.mark.parametrize(
    ("pod", "expected"),
    [
        pytest.param(
            incoming("foo").spread(1, "node", selector=FOO),
            {"node-a": U, "node-b": U, "node-c": S},
            id="taints-ignored-by-default-c-is-a-domain",
        ),
        pytest.param(
            incoming("foo").spread(1, "node", selector=FOO, nodeTaintsPolicy="Honor"),
            {"node-a": U, "node-b": S, "node-c": S},
            id="taints-honored-c-excluded",
        ),
        pytest.param(
            incoming("foo")
            .toleration("dedicated", "x", "NoSchedule")
            .spread(1, "node", selector=FOO, nodeTaintsPolicy="Honor"),
            {"node-a": U, "node-b": U, "node-c": S},
            id="taints-honored-but-tolerated",
        ),
    ],
)
def test_filter_node_taints_policy(pod: PodBuilder, expected: dict[str, Code]) -> None:
    """Spread 2/1/0 on a/b/c; c is tainted NoSchedule: honouring taints leaves a/b (min 1)."""
    existing = [P("node-a", "foo"), P("node-a", "foo"), P("node-b", "foo")]
    _, got = run_filter(pod.build(), tainted_abc(), existing)
    assert codes(got) == expected


@pytest.mark.parametrize(
    ("pod", "expected"),
    [
        pytest.param(
            incoming("foo", app="v1").spread(1, "node", selector=FOO, matchLabelKeys=["app"]),
            {"node-a": S, "node-b": U, "node-c": S},
            id="only-same-revision-counted",
        ),
        pytest.param(
            incoming("foo", app="v1").spread(1, "node", selector=None, matchLabelKeys=["app"]),
            {"node-a": S, "node-b": U, "node-c": S},
            id="null-selector-becomes-the-match-label-keys",
        ),
        pytest.param(
            incoming("foo").spread(1, "node", selector=FOO, matchLabelKeys=["app"]),
            {"node-a": U, "node-b": U, "node-c": S},
            id="key-missing-on-pod-is-ignored",
        ),
    ],
)
def test_filter_match_label_keys(pod: PodBuilder, expected: dict[str, Code]) -> None:
    existing = [P("node-a", "foo", app="v0"), P("node-a", "foo", app="v0"), P("node-b", "foo", app="v1")]
    _, got = run_filter(pod.build(), ABC, existing)
    assert codes(got) == expected


def test_filter_reasons_are_exact() -> None:
    nodes = four_nodes(**{"node-b": {"zone": "zone1"}})
    _, got = run_filter(incoming("foo").spread(1, "node", selector=FOO).build(), nodes, NODE_PODS_2_1_0_3[:3])
    assert got["node-a"] == Status.unschedulable("node(s) didn't match pod topology spread constraints")
    assert got["node-b"] == Status.unresolvable(
        "node(s) didn't match pod topology spread constraints (missing required label)"
    )
    assert got["node-x"] == Status()


def test_pre_filter_skips_pod_without_constraints() -> None:
    pre, got = run_filter(incoming("foo").build(), four_nodes(), NODE_PODS_2_1_0_3)
    assert pre.code is Code.SKIP
    assert codes(got) == want(S, S, S, S)


def test_pre_filter_skips_soft_only_constraints() -> None:
    pre, _ = run_filter(incoming("foo").spread(1, "node", "ScheduleAnyway", FOO).build(), four_nodes())
    assert pre.code is Code.SKIP


def test_system_default_constraints_never_filter() -> None:
    pre, _ = run_filter(
        incoming("foo").build(),
        four_nodes(),
        NODE_PODS_2_1_0_3,
        args=pts.PodTopologySpreadArgs(),
        selector=selector_from_set({"foo": ""}),
    )
    assert pre.code is Code.SKIP


@pytest.mark.parametrize(
    ("pod", "selector", "expected"),
    [
        pytest.param(incoming("foo"), selector_from_set({"foo": ""}), want(U, U, S, U), id="selector-from-service"),
        pytest.param(incoming("foo"), None, want(S, S, S, S), id="nothing-selects-the-pod"),
        pytest.param(
            incoming("foo").spread(3, "node", selector=FOO),
            selector_from_set({"foo": ""}),
            want(S, S, S, U),
            id="pod-constraints-win-over-defaults",
        ),
    ],
)
def test_list_default_constraints_filter(pod: PodBuilder, selector: Selector | None, expected: dict[str, Code]) -> None:
    args = pts.PodTopologySpreadArgs((pts.DefaultConstraint(1, "node", "DoNotSchedule"),), "List")
    _, got = run_filter(pod.build(), four_nodes(), NODE_PODS_2_1_0_3, args=args, selector=selector)
    assert codes(got) == expected


def test_filter_without_pre_filter_is_an_error() -> None:
    pl = plugin([])
    got = pl.filter(CycleState(), incoming().build(), NodeInfo(N("n")))
    assert got.code is Code.ERROR
    assert "did its PreFilter run?" in got.message


def test_invalid_selector_is_an_error() -> None:
    bad = {"matchExpressions": [{"key": "foo", "operator": "Near"}]}
    pre, _ = run_filter(incoming("foo").spread(1, "node", selector=bad).build(), four_nodes())
    assert pre.code is Code.ERROR


# --- AddPod / RemovePod (preemption) ---------------------------------------------------------------


def fresh_filter(pod: Pod, nodes: Sequence[Node], existing: Sequence[Pod]) -> dict[str, Code]:
    return codes(run_filter(pod, nodes, existing)[1])


def filter_after(
    pod: Pod, nodes: Sequence[Node], existing: Sequence[Pod], *, add: Sequence[Pod] = (), remove: Sequence[Pod] = ()
) -> dict[str, Code]:
    infos = cluster(nodes, existing)
    by_name = {ni.name: ni for ni in infos}
    pl = plugin(infos)
    state = CycleState()
    pl.pre_filter(state, pod, infos)
    for p in add:
        assert pl.add_pod(state, pod, p, by_name[p.node_name]).is_success
    for p in remove:
        assert pl.remove_pod(state, pod, p, by_name[p.node_name]).is_success
    return {ni.name: pl.filter(state, pod, ni).code for ni in infos}


TWO = [N("node-a", zone="zone1", node="node-a"), N("node-b", zone="zone1", node="node-b")]


@pytest.mark.parametrize(
    ("pod", "nodes", "existing", "add", "remove", "expected"),
    [
        pytest.param(
            incoming("foo").spread(1, "node", selector=FOO),
            TWO,
            [],
            [P("node-b", "foo")],
            [],
            {"node-a": S, "node-b": U},
            id="add-moves-the-minimum",
        ),
        pytest.param(
            incoming("foo").spread(1, "node", selector=FOO),
            TWO,
            [],
            [P("node-b", "foo", ns="other")],
            [],
            {"node-a": S, "node-b": S},
            id="add-in-other-namespace-is-ignored",
        ),
        pytest.param(
            incoming("foo").spread(1, "node", selector=FOO),
            TWO,
            [P("node-a", "foo")],
            [P("node-b", "foo"), P("node-b", "foo")],
            [],
            {"node-a": S, "node-b": U},
            id="add-two-on-the-other-node",
        ),
        pytest.param(
            incoming("foo").spread(1, "zone", selector=FOO).spread(1, "node", selector=FOO),
            four_nodes(),
            [P("node-a", "foo"), P("node-b", "foo"), P("node-x", "foo")],
            [P("node-x", "foo")],
            [],
            want(U, U, U, S),
            id="add-affects-zone-and-node",
        ),
        pytest.param(
            incoming("foo").spread(1, "node", selector=FOO),
            TWO,
            [P("node-a", "foo"), P("node-a", "foo"), P("node-b", "foo")],
            [],
            [0],
            {"node-a": S, "node-b": S},
            id="remove-balances",
        ),
        pytest.param(
            incoming("foo").spread(1, "node", selector=FOO),
            TWO,
            [P("node-a", "foo"), P("node-b", "bar")],
            [],
            [1],
            {"node-a": U, "node-b": S},
            id="remove-irrelevant-pod-wont-help",
        ),
    ],
)
def test_add_remove_pod(
    pod: PodBuilder,
    nodes: list[Node],
    existing: list[Pod],
    add: list[Pod],
    remove: list[int],
    expected: dict[str, Code],
) -> None:
    """AddPod/RemovePod give the same verdicts as a fresh PreFilter over the changed cluster."""
    incoming_pod = pod.build()
    to_remove = [existing[i] for i in remove]
    got = filter_after(incoming_pod, nodes, existing, add=add, remove=to_remove)
    assert got == expected
    after = [p for p in existing if p not in to_remove] + list(add)
    assert fresh_filter(incoming_pod, nodes, after) == expected


def test_add_pod_does_not_leak_into_cloned_states() -> None:
    """Preemption clones the cycle state per candidate node; updates must stay in the clone."""
    pod = incoming("foo").spread(1, "node", selector=FOO).build()
    infos = cluster(TWO, [P("node-a", "foo")])
    pl = plugin(infos)
    state = CycleState()
    pl.pre_filter(state, pod, infos)
    clone = state.clone()
    pl.add_pod(clone, pod, P("node-b", "foo"), infos[1])
    assert pl.filter(state, pod, infos[1]).is_success
    assert pl.filter(clone, pod, infos[1]).is_success
    assert pl.filter(clone, pod, infos[0]).is_success
    pl.add_pod(clone, pod, P("node-b", "foo"), infos[1])
    assert not pl.filter(clone, pod, infos[1]).is_success
    assert pl.filter(state, pod, infos[1]).is_success


# --- score -----------------------------------------------------------------------------------------


def H(name: str, **labels: str) -> Node:
    return N(name, **labels)


HOSTS_ABCD = [H("node-a"), H("node-b"), H("node-c"), H("node-d")]


def on(node: str, n: int, *labels: str) -> list[Pod]:
    return [P(node, *labels) for _ in range(n)]


@pytest.mark.parametrize(
    ("pod", "feasible", "existing", "failed", "expected"),
    [
        pytest.param(
            incoming("foo").spread(1, HOST, "ScheduleAnyway", FOO),
            [H("node-a"), H("node-b")],
            [],
            [],
            {"node-a": 100, "node-b": 100},
            id="one-constraint-on-node-no-existing-pods",
        ),
        pytest.param(
            incoming("foo").spread(1, HOST, "ScheduleAnyway", FOO),
            [H("node-a")],
            [*on("node-a", 2, "foo"), *on("node-b", 1, "foo")],
            [H("node-b")],
            {"node-a": 100},
            id="only-one-candidate-scores-100",
        ),
        pytest.param(
            incoming("foo").spread(1, HOST, "ScheduleAnyway", FOO),
            [H("node-a"), H("node-b")],
            [*on("node-a", 1, "foo"), *on("node-b", 1, "foo")],
            [],
            {"node-a": 100, "node-b": 100},
            id="same-number-of-matching-pods",
        ),
        pytest.param(
            incoming("foo").spread(1, HOST, "ScheduleAnyway", FOO),
            HOSTS_ABCD,
            [*on("node-a", 2, "foo"), *on("node-b", 1, "foo"), *on("node-d", 3, "foo")],
            [],
            {"node-a": 20, "node-b": 60, "node-c": 100, "node-d": 0},
            id="hostname-2-1-0-3",
        ),
        pytest.param(
            incoming("foo").spread(1, HOST, "ScheduleAnyway", None),
            HOSTS_ABCD,
            [*on("node-a", 2, "foo"), *on("node-b", 1, "foo"), *on("node-d", 3, "foo")],
            [],
            {"node-a": 100, "node-b": 100, "node-c": 100, "node-d": 100},
            id="null-selector",
        ),
        pytest.param(
            incoming("foo").spread(2, HOST, "ScheduleAnyway", FOO),
            HOSTS_ABCD,
            [*on("node-a", 2, "foo"), *on("node-b", 1, "foo"), *on("node-d", 3, "foo")],
            [],
            {"node-a": 33, "node-b": 66, "node-c": 100, "node-d": 16},
            id="hostname-2-1-0-3-maxskew-2",
        ),
        pytest.param(
            incoming("foo").spread(3, HOST, "ScheduleAnyway", FOO),
            HOSTS_ABCD,
            [*on("node-a", 4, "foo"), *on("node-b", 3, "foo"), *on("node-c", 2, "foo"), *on("node-d", 1, "foo")],
            [],
            {"node-a": 44, "node-b": 66, "node-c": 77, "node-d": 100},
            id="hostname-4-3-2-1-maxskew-3",
        ),
        pytest.param(
            incoming("foo").spread(1, HOST, "ScheduleAnyway", FOO),
            [H("node-a"), H("node-b"), H("node-x")],
            [*on("node-a", 4, "foo"), *on("node-b", 2, "foo"), *on("node-x", 1, "foo"), *on("node-y", 3, "foo")],
            [H("node-y")],
            {"node-a": 33, "node-b": 83, "node-x": 100},
            id="hostname-3-of-4-candidates",
        ),
        pytest.param(
            incoming("foo").spread(1, HOST, "ScheduleAnyway", FOO),
            [H("node-a"), without_hostname(N("node-b", n="node-b")), H("node-x")],
            [*on("node-a", 4, "foo"), *on("node-b", 2, "foo"), *on("node-x", 1, "foo"), *on("node-y", 3, "foo")],
            [H("node-y")],
            {"node-a": 16, "node-b": 0, "node-x": 100},
            id="candidate-without-topology-key-scores-0",
        ),
        pytest.param(
            incoming("foo").spread(1, "zone", "ScheduleAnyway", FOO),
            [H("node-a", zone="zone1"), H("node-b", zone="zone1"), H("node-x", zone="zone2")],
            [*on("node-a", 4, "foo"), *on("node-b", 2, "foo"), *on("node-x", 1, "foo"), *on("node-y", 3, "foo")],
            [H("node-y", zone="zone2")],
            {"node-a": 75, "node-b": 75, "node-x": 100},
            id="zone-3-of-4-candidates",
        ),
        pytest.param(
            incoming("foo").spread(1, "zone", "ScheduleAnyway", FOO).spread(1, HOST, "ScheduleAnyway", FOO),
            [H("node-a", zone="zone1"), H("node-x", zone="zone2")],
            [*on("node-a", 2, "foo"), *on("node-b", 1, "foo"), *on("node-x", 2, "foo"), *on("node-y", 4, "foo")],
            [H("node-b", zone="zone1"), H("node-y", zone="zone2")],
            {"node-a": 100, "node-x": 63},
            id="zone-and-node-2-of-4-candidates",
        ),
        pytest.param(
            incoming("foo", "bar").spread(1, "zone", "ScheduleAnyway", FOO).spread(1, "zone", "ScheduleAnyway", BAR),
            [N("node-a", zone="zone1"), N("node-x", zone="zone2")],
            [
                P("node-a", "foo", "bar"),
                P("node-a", "foo"),
                P("node-b", "foo", "bar"),
                P("node-y", "foo"),
                P("node-y", "foo", "bar"),
                P("node-y", "foo"),
            ],
            [N("node-b", zone="zone1"), N("node-y", zone="zone2")],
            {"node-a": 85, "node-x": 100},
            id="two-constraints-on-zone",
        ),
        pytest.param(
            incoming("foo", "bar").spread(1, "zone", "ScheduleAnyway", FOO).spread(1, HOST, "ScheduleAnyway", BAR),
            [
                H("node-a", zone="zone1"),
                H("node-b", zone="zone1"),
                H("node-x", zone="zone2"),
                H("node-y", zone="zone2"),
            ],
            [P("node-a", "foo"), P("node-b", "foo", "bar"), P("node-y", "foo"), P("node-y", "bar")],
            [],
            {"node-a": 60, "node-b": 20, "node-x": 100, "node-y": 60},
            id="different-selectors",
        ),
        pytest.param(
            incoming("foo", "bar").spread(1, "zone", "ScheduleAnyway", FOO).spread(1, HOST, "ScheduleAnyway", BAR),
            [
                H("node-a", zone="zone1"),
                H("node-b", zone="zone1"),
                H("node-x", zone="zone2"),
                H("node-y", zone="zone2"),
            ],
            [P("node-b", "bar"), P("node-x", "foo"), P("node-y", "foo", "bar")],
            [],
            {"node-a": 100, "node-b": 60, "node-x": 40, "node-y": 0},
            id="different-selectors-some-nodes-empty",
        ),
        pytest.param(
            incoming("foo", "bar").spread(1, "zone", "ScheduleAnyway", FOO).spread(1, HOST, "ScheduleAnyway", BAR),
            [H("node-a", zone="zone1"), H("node-b", zone="zone1"), H("node-x", zone="zone2")],
            [P("node-a", "foo"), P("node-b", "foo", "bar"), P("node-y", "foo"), P("node-y", "bar")],
            [H("node-y", zone="zone2")],
            {"node-a": 50, "node-b": 25, "node-x": 100},
            id="different-selectors-3-of-4-candidates",
        ),
        pytest.param(
            incoming("foo").spread(1, HOST, "ScheduleAnyway", FOO),
            [H("node-a"), H("node-b")],
            [P("node-a", "foo", ns="ns1"), P("node-a", "foo"), P("node-b", "foo"), P("node-b", "foo")],
            [],
            {"node-a": 100, "node-b": 33},
            id="other-namespaces-dont-count",
        ),
        pytest.param(
            incoming("foo").spread(1, HOST, "ScheduleAnyway", FOO),
            [H("node-a"), H("node-b")],
            [P("node-a", "foo", terminating=True), P("node-b", "foo")],
            [],
            {"node-a": 100, "node-b": 0},
            id="terminating-pods-excluded",
        ),
        pytest.param(
            incoming("foo").spread(2, "node", "ScheduleAnyway", FOO, minDomains=10),
            [N("node-a", node="node-a"), N("node-b", node="node-b"), N("node-c", node="node-c")],
            [*on("node-a", 2, "foo"), *on("node-b", 2, "foo"), *on("node-c", 1, "foo")],
            [],
            {"node-a": 75, "node-b": 75, "node-c": 100},
            id="min-domains-has-no-effect-on-scoring",
        ),
        pytest.param(
            incoming("foo").node_selector(foo="").spread(1, "node", "ScheduleAnyway", FOO),
            [N("node-a", node="node-a", foo=""), N("node-b", node="node-b", foo=""), N("node-c", node="node-c")],
            [*on("node-a", 2, "foo"), *on("node-b", 1, "foo"), *on("node-c", 1, "foo")],
            [],
            {"node-a": 0, "node-b": 33, "node-c": 100},
            id="node-affinity-policy-honored",
        ),
        pytest.param(
            incoming("foo").node_selector(foo="").spread(1, "node", "ScheduleAnyway", FOO, nodeAffinityPolicy="Ignore"),
            [N("node-a", node="node-a", foo=""), N("node-b", node="node-b", foo=""), N("node-c", node="node-c")],
            [*on("node-a", 2, "foo"), *on("node-b", 1, "foo"), *on("node-c", 1, "foo")],
            [],
            {"node-a": 66, "node-b": 100, "node-c": 100},
            id="node-affinity-policy-ignored",
        ),
        pytest.param(
            incoming("foo").spread(1, "node", "ScheduleAnyway", FOO, nodeTaintsPolicy="Honor"),
            [
                N("node-a", node="node-a"),
                N("node-b", node="node-b"),
                make_node("node-c").label("node", "node-c").taint("k", "v", "NoSchedule").build(),
            ],
            [*on("node-a", 2, "foo"), *on("node-b", 1, "foo"), *on("node-c", 1, "foo")],
            [],
            {"node-a": 0, "node-b": 33, "node-c": 100},
            id="node-taints-policy-honored",
        ),
        pytest.param(
            incoming("foo", "bar")
            .spread(1, "zone", "ScheduleAnyway", {}, matchLabelKeys=["foo"])
            .spread(1, HOST, "ScheduleAnyway", {}, matchLabelKeys=["bar"]),
            [
                H("node-a", zone="zone1"),
                H("node-b", zone="zone1"),
                H("node-c", zone="zone2"),
                H("node-d", zone="zone2"),
            ],
            [P("node-a", "foo"), P("node-b", "foo", "bar"), P("node-c", "foo"), P("node-c", "bar")],
            [],
            {"node-a": 60, "node-b": 20, "node-c": 60, "node-d": 100},
            id="match-label-keys-with-empty-selector",
        ),
        pytest.param(
            incoming("foo", "bar", "baz")
            .spread(1, "zone", "ScheduleAnyway", FOO)
            .spread(1, HOST, "ScheduleAnyway", BAR, matchLabelKeys=["baz"]),
            [
                H("node-a", zone="zone1"),
                H("node-b", zone="zone1"),
                H("node-c", zone="zone2"),
                H("node-d", zone="zone2"),
            ],
            [
                P("node-a", "foo"),
                P("node-b", "foo", "bar", "baz"),
                P("node-c", "foo"),
                P("node-c", "bar"),
                P("node-c", "bar", "baz"),
            ],
            [],
            {"node-a": 60, "node-b": 20, "node-c": 60, "node-d": 100},
            id="match-label-keys-anded-with-selector",
        ),
    ],
)
def test_score(
    pod: PodBuilder, feasible: list[Node], existing: list[Pod], failed: list[Node], expected: dict[str, int]
) -> None:
    pre, got = run_score(pod.build(), feasible, existing, failed)
    assert pre.is_success
    assert got == expected


def test_score_system_defaults_spread_by_hostname_without_zone_labels() -> None:
    """System defaulting: nodes without a zone label are not ignored, hostname spreading applies."""
    existing = [*on("node-a", 4, "foo"), *on("node-b", 3, "foo"), *on("node-c", 2, "foo"), *on("node-d", 1, "foo")]
    pre, got = run_score(
        incoming("foo").build(),
        HOSTS_ABCD,
        existing,
        args=pts.PodTopologySpreadArgs(),
        selector=selector_from_set({"foo": ""}),
    )
    assert pre.is_success
    assert got == {"node-a": 44, "node-b": 66, "node-c": 77, "node-d": 100}


def test_score_list_defaults_require_all_keys() -> None:
    """List defaulting: a feasible node missing a default key is ignored (scores 0)."""
    args = pts.PodTopologySpreadArgs(
        (pts.DefaultConstraint(1, "zone", "ScheduleAnyway"), pts.DefaultConstraint(1, HOST, "ScheduleAnyway")), "List"
    )
    pre, got = run_score(
        incoming("foo").build(),
        [H("node-a", zone="z1"), H("node-b", zone="z1"), H("node-c")],
        [*on("node-a", 2, "foo")],
        args=args,
        selector=selector_from_set({"foo": ""}),
    )
    assert pre.is_success
    assert got["node-c"] == 0
    assert got["node-b"] == 100
    assert got["node-a"] < 100


@pytest.mark.parametrize(
    ("pod", "args", "selector"),
    [
        pytest.param(incoming("foo"), pts.PodTopologySpreadArgs(), None, id="system-defaults-no-selector"),
        pytest.param(incoming("foo").spread(1, HOST, selector=FOO), None, None, id="only-hard-constraints"),
        pytest.param(
            incoming("foo"),
            pts.PodTopologySpreadArgs((pts.DefaultConstraint(1, HOST, "DoNotSchedule"),), "List"),
            selector_from_set({"foo": ""}),
            id="list-defaults-hard-only",
        ),
    ],
)
def test_pre_score_skips_without_soft_constraints(
    pod: PodBuilder, args: pts.PodTopologySpreadArgs | None, selector: Selector | None
) -> None:
    pre, got = run_score(pod.build(), HOSTS_ABCD, args=args, selector=selector)
    assert pre.code is Code.SKIP
    assert set(got.values()) == {0}


# --- properties ------------------------------------------------------------------------------------

ZONES = ("z1", "z2", "z3")


@st.composite
def spread_clusters(draw: st.DrawFn) -> tuple[list[Node], list[Pod]]:
    n_nodes = draw(st.integers(1, 7))
    nodes = []
    for i in range(n_nodes):
        zone = draw(st.sampled_from((*ZONES, None)))
        nodes.append(N(f"n{i}", **({"zone": zone} if zone else {})))
    pods = []
    for _ in range(draw(st.integers(0, 15))):
        node = draw(st.sampled_from(nodes)).name
        pods.append(P(node, *draw(st.lists(st.sampled_from(("foo", "bar")), max_size=2, unique=True))))
    return nodes, pods


@settings(max_examples=60, deadline=None)
@given(spread_clusters(), st.integers(1, 4), st.data())
def test_normalized_scores_in_range_and_reverse_raw_order(
    c: tuple[list[Node], list[Pod]], max_skew: int, data: st.DataObject
) -> None:
    nodes, existing = c
    pod = incoming("foo").spread(max_skew, "zone", "ScheduleAnyway", FOO).spread(1, HOST, "ScheduleAnyway", FOO).build()
    feasible = data.draw(st.lists(st.sampled_from(nodes), min_size=1, unique_by=lambda n: n.name))
    infos = cluster(nodes, existing)
    names = {n.name for n in feasible}
    fi = [ni for ni in infos if ni.name in names]
    pl = plugin(infos)
    state = CycleState()
    pl.pre_score(state, pod, fi)
    raw = {ni.name: pl.score(state, pod, ni) for ni in fi}
    scores = [NodeScore(n, s) for n, s in raw.items()]
    pl.normalize_score(state, pod, scores)
    norm = {s.name: s.score for s in scores}
    assert all(0 <= v <= 100 for v in norm.values())
    scored = [n.name for n in feasible if "zone" in n.labels]
    for a in scored:
        for b in scored:
            if raw[a] <= raw[b]:
                assert norm[a] >= norm[b]


@settings(max_examples=40, deadline=None)
@given(
    st.integers(2, 6),
    st.integers(1, 3),
    st.integers(1, 2),
    st.integers(1, 4),
    st.integers(4, 14),
    st.integers(0, 2**16),
)
def test_placing_pods_one_by_one_never_exceeds_max_skew(
    n_nodes: int, n_zones: int, zone_skew: int, node_skew: int, n_pods: int, seed: int
) -> None:
    """Scheduling replicas onto the best feasible node keeps every DoNotSchedule skew <= maxSkew."""
    rng = random.Random(seed)
    nodes = [N(f"n{i}", zone=f"z{i % n_zones}") for i in range(n_nodes)]
    infos = cluster(nodes)
    pl = plugin(infos)
    for i in range(n_pods):
        pod = (
            make_pod(f"r{i}")
            .label("app", "web")
            .spread(zone_skew, "zone", selector={"matchLabels": {"app": "web"}})
            .spread(node_skew, HOST, selector={"matchLabels": {"app": "web"}})
            .spread(1, HOST, "ScheduleAnyway", {"matchLabels": {"app": "web"}})
            .build()
        )
        state = CycleState()
        assert pl.pre_filter(state, pod, infos).is_success
        feasible = [ni for ni in infos if pl.filter(state, pod, ni).is_success]
        if not feasible:
            continue
        pl.pre_score(state, pod, feasible)
        scores = [NodeScore(ni.name, pl.score(state, pod, ni)) for ni in feasible]
        pl.normalize_score(state, pod, scores)
        best = max(s.score for s in scores)
        chosen = rng.choice([s.name for s in scores if s.score == best])
        placed = dataclasses.replace(pod, node_name=chosen)
        next(ni for ni in infos if ni.name == chosen).add_pod(placed)
        per_node = {ni.name: len(ni.pods) for ni in infos}
        per_zone: dict[str, int] = {}
        for ni in infos:
            assert ni.node is not None
            per_zone[ni.node.labels["zone"]] = per_zone.get(ni.node.labels["zone"], 0) + len(ni.pods)
        assert max(per_node.values()) - min(per_node.values()) <= node_skew
        assert max(per_zone.values()) - min(per_zone.values()) <= zone_skew


@settings(max_examples=60, deadline=None)
@given(spread_clusters(), st.integers(1, 3), st.data())
def test_add_and_remove_pod_match_a_fresh_pre_filter(
    c: tuple[list[Node], list[Pod]], max_skew: int, data: st.DataObject
) -> None:
    nodes, existing = c
    pod = (
        incoming("foo")
        .spread(max_skew, "zone", selector=FOO)
        .spread(max_skew, HOST, selector=FOO, minDomains=2)
        .build()
    )
    to_remove = (
        data.draw(st.lists(st.sampled_from(existing), unique_by=lambda p: p.uid, max_size=3)) if existing else []
    )
    to_add = [
        P(data.draw(st.sampled_from(nodes)).name, *data.draw(st.lists(st.sampled_from(("foo", "bar")), unique=True)))
        for _ in range(data.draw(st.integers(0, 3)))
    ]
    got = filter_after(pod, nodes, existing, add=to_add, remove=to_remove)
    after = [p for p in existing if p not in to_remove] + to_add
    assert got == fresh_filter(pod, nodes, after)
