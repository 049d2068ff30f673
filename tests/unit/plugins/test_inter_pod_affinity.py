"""InterPodAffinity: the cases of kube-scheduler's filtering_test.go / scoring_test.go (v1.28+
expectations), plus namespaceSelector, matchLabelKeys/mismatchLabelKeys, args validation,
preemption's AddPod/RemovePod, the term cache, and hypothesis properties."""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Mapping, Sequence
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from custom_scheduler.api.labels import SelectorError
from custom_scheduler.api.model import Node, Pod
from custom_scheduler.errors import ConfigError
from custom_scheduler.framework.types import Code, CycleState, NodeInfo, NodeScore, Status
from custom_scheduler.plugins import affinity_terms
from custom_scheduler.plugins import inter_pod_affinity as ipa
from tests.builders import PodBuilder, make_node, make_pod
from tests.unit.plugins.support import FakeHandle

S, U, X = Code.SUCCESS, Code.UNSCHEDULABLE, Code.UNSCHEDULABLE_AND_UNRESOLVABLE
AFF, ANTI = "podAffinity", "podAntiAffinity"

AFFINITY_REASON = "node(s) didn't match pod affinity rules"
ANTI_REASON = "node(s) didn't match pod anti-affinity rules"
EXISTING_REASON = "node(s) didn't satisfy existing pods anti-affinity rules"


# --- fakes and helpers -----------------------------------------------------------------------------


def expr(key: str, op: str, *values: str) -> dict[str, Any]:
    e: dict[str, Any] = {"key": key, "operator": op}
    if values:
        e["values"] = list(values)
    return e


def sel(*exprs: dict[str, Any]) -> dict[str, Any]:
    return {"matchExpressions": list(exprs)}


def term(selector: dict[str, Any] | None, topology: str, **extra: Any) -> dict[str, Any]:
    t: dict[str, Any] = {"topologyKey": topology, **extra}
    if selector is not None:
        t["labelSelector"] = selector
    return t


def N(name: str, **labels: str) -> Node:
    """A node with exactly ``labels`` (no automatic hostname label)."""
    node = make_node(name).build()
    return dataclasses.replace(node, labels=dict(labels))


def pod(name: str = "p", *, node: str = "", ns: str = "default", **labels: str) -> PodBuilder:
    b = make_pod(name, ns).labels(**labels)
    return b.node(node) if node else b


def with_terms(b: PodBuilder, kind: str, *terms: dict[str, Any], weight: int = 0) -> PodBuilder:
    for t in terms:
        b.pod_affinity(kind, t, weight)
    return b


def cluster(nodes: Sequence[Node], pods: Sequence[Pod] = ()) -> list[NodeInfo]:
    infos = {n.name: NodeInfo(n) for n in nodes}
    for p in pods:
        if p.node_name in infos:
            infos[p.node_name].add_pod(p)
    return list(infos.values())


def make_plugin(
    infos: Sequence[NodeInfo],
    args: ipa.InterPodAffinityArgs | None = None,
    namespaces: Mapping[str, Mapping[str, str]] | None = None,
) -> ipa.InterPodAffinity:
    return ipa.InterPodAffinity(args, FakeHandle(infos, namespaces))


def run_filter(
    incoming: Pod,
    nodes: Sequence[Node],
    existing: Sequence[Pod] = (),
    namespaces: Mapping[str, Mapping[str, str]] | None = None,
) -> tuple[Status, dict[str, Status]]:
    infos = cluster(nodes, existing)
    pl = make_plugin(infos, namespaces=namespaces)
    state = CycleState()
    pre = pl.pre_filter(state, incoming, infos)
    return pre, {ni.name: pl.filter(state, incoming, ni) for ni in infos}


def run_score(
    incoming: Pod,
    nodes: Sequence[Node],
    existing: Sequence[Pod] = (),
    *,
    args: ipa.InterPodAffinityArgs | None = None,
    namespaces: Mapping[str, Mapping[str, str]] | None = None,
) -> tuple[Status, dict[str, int]]:
    infos = cluster(nodes, existing)
    pl = make_plugin(infos, args, namespaces)
    state = CycleState()
    pre = pl.pre_score(state, incoming, infos)
    scores = [NodeScore(ni.name, pl.score(state, incoming, ni)) for ni in infos]
    assert pl.normalize_score(state, incoming, scores).is_success
    return pre, {s.name: s.score for s in scores}


# --- args ------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        pytest.param(None, ipa.InterPodAffinityArgs(1, False), id="defaults"),
        pytest.param({}, ipa.InterPodAffinityArgs(1, False), id="empty"),
        pytest.param({"hardPodAffinityWeight": 0}, ipa.InterPodAffinityArgs(0, False), id="weight-0-disables"),
        pytest.param(
            {"hardPodAffinityWeight": 100, "ignorePreferredTermsOfExistingPods": True},
            ipa.InterPodAffinityArgs(100, True),
            id="all-fields",
        ),
        pytest.param({"kind": "InterPodAffinityArgs"}, ipa.InterPodAffinityArgs(), id="kind-accepted"),
    ],
)
def test_parse_args(raw: dict[str, Any] | None, expected: ipa.InterPodAffinityArgs) -> None:
    assert ipa.parse_args(raw, "args") == expected


@pytest.mark.parametrize(
    ("raw", "paths"),
    [
        pytest.param({"hardPodAffinityWeight": -1}, ["p.hardPodAffinityWeight"], id="weight-below-range"),
        pytest.param({"hardPodAffinityWeight": 101}, ["p.hardPodAffinityWeight"], id="weight-above-range"),
        pytest.param({"hardPodAffinityWeight": "1"}, ["p.hardPodAffinityWeight"], id="weight-not-int"),
        pytest.param(
            {"ignorePreferredTermsOfExistingPods": "yes"}, ["p.ignorePreferredTermsOfExistingPods"], id="not-bool"
        ),
        pytest.param({"hardPodAfinityWeight": 1}, ["p.hardPodAfinityWeight"], id="unknown-field"),
    ],
)
def test_parse_args_errors(raw: dict[str, Any], paths: list[str]) -> None:
    with pytest.raises(ConfigError) as e:
        ipa.parse_args(raw, "p")
    assert [err.path for err in e.value.errors] == paths


def test_spec() -> None:
    assert ipa.SPEC.name == "InterPodAffinity"
    assert ipa.SPEC.factory is ipa.InterPodAffinity


# --- filter: one node ------------------------------------------------------------------------------

MACHINE1 = N("machine1", region="r1", zone="z11")
SCAN = {"service": "securityscan"}
S1 = {"security": "S1"}
scan_in = sel(expr("service", "In", "securityscan", "value2"))
antivirus_in = sel(expr("service", "In", "antivirusscan", "value2"))


def on_m1(**labels: str) -> PodBuilder:
    return pod("e", node="machine1", **labels)


@pytest.mark.parametrize(
    ("incoming", "existing", "expected"),
    [
        pytest.param(pod(), [], Status(), id="no-affinity-no-pods"),
        pytest.param(
            with_terms(pod(**S1), AFF, term(scan_in, "region")),
            [on_m1(**SCAN)],
            Status(),
            id="affinity-in-matches-existing-pod",
        ),
        pytest.param(
            with_terms(pod(**S1), AFF, term(sel(expr("service", "NotIn", "securityscan3", "value3")), "region")),
            [on_m1(**SCAN)],
            Status(),
            id="affinity-notin-matches-existing-pod",
        ),
        pytest.param(
            with_terms(pod(**S1), AFF, term(scan_in, "region", namespaces=["DiffNameSpace"])),
            [pod("e", node="machine1", ns="ns", **SCAN)],
            Status.unresolvable(AFFINITY_REASON),
            id="affinity-other-namespace",
        ),
        pytest.param(
            with_terms(pod(**SCAN), AFF, term(antivirus_in, "region")),
            [on_m1(**SCAN)],
            Status.unresolvable(AFFINITY_REASON),
            id="affinity-selector-doesnt-match",
        ),
        pytest.param(
            with_terms(
                pod(**S1),
                AFF,
                term(sel(expr("service", "Exists"), expr("wrongkey", "DoesNotExist")), "region"),
                term(sel(expr("service", "In", "securityscan"), expr("service", "NotIn", "WrongValue")), "region"),
            ),
            [on_m1(**SCAN)],
            Status(),
            id="affinity-multiple-terms-different-operators",
        ),
        pytest.param(
            with_terms(
                pod(**S1),
                AFF,
                term(sel(expr("service", "Exists"), expr("wrongkey", "DoesNotExist")), "region"),
                term(sel(expr("service", "In", "securityscan2"), expr("service", "NotIn", "WrongValue")), "region"),
            ),
            [on_m1(**SCAN)],
            Status.unresolvable(AFFINITY_REASON),
            id="affinity-expressions-are-anded",
        ),
        pytest.param(
            with_terms(with_terms(pod(**S1), AFF, term(scan_in, "region")), ANTI, term(antivirus_in, "node")),
            [on_m1(**SCAN)],
            Status(),
            id="affinity-and-anti-affinity-satisfied",
        ),
        pytest.param(
            with_terms(with_terms(pod(**S1), AFF, term(scan_in, "region")), ANTI, term(antivirus_in, "node")),
            [with_terms(on_m1(**SCAN), ANTI, term(antivirus_in, "node"))],
            Status(),
            id="affinity-anti-affinity-and-symmetry-satisfied",
        ),
        pytest.param(
            with_terms(with_terms(pod(**S1), AFF, term(scan_in, "region")), ANTI, term(scan_in, "zone")),
            [on_m1(**SCAN)],
            Status.unschedulable(ANTI_REASON),
            id="affinity-ok-anti-affinity-violated",
        ),
        pytest.param(
            with_terms(with_terms(pod(**SCAN), AFF, term(scan_in, "region")), ANTI, term(antivirus_in, "node")),
            [with_terms(on_m1(**SCAN), ANTI, term(scan_in, "zone"))],
            Status.unschedulable(EXISTING_REASON),
            id="existing-pod-anti-affinity-violated",
        ),
        pytest.param(
            with_terms(pod(**SCAN), AFF, term(sel(expr("service", "NotIn", "securityscan", "value2")), "region")),
            [pod("e", node="machine2", **SCAN)],
            Status.unresolvable(AFFINITY_REASON),
            id="pod-doesnt-match-its-own-term-no-first-replica-exception",
        ),
        pytest.param(
            pod(**SCAN),
            [with_terms(on_m1(**SCAN), ANTI, term(scan_in, "zone"))],
            Status.unschedulable(EXISTING_REASON),
            id="existing-anti-affinity-without-incoming-terms",
        ),
        pytest.param(
            pod(**SCAN),
            [with_terms(on_m1(**SCAN), ANTI, term(sel(expr("service", "NotIn", "securityscan", "value2")), "zone"))],
            Status(),
            id="existing-anti-affinity-not-matching",
        ),
        pytest.param(
            with_terms(
                pod(**SCAN),
                ANTI,
                term(sel(expr("service", "Exists")), "region"),
                term(sel(expr("security", "Exists")), "region"),
            ),
            [with_terms(on_m1(**S1), ANTI, term(sel(expr("security", "Exists")), "zone"))],
            Status.unschedulable(ANTI_REASON),
            id="symmetry-a1-incoming-anti-matches-first",
        ),
        pytest.param(
            with_terms(pod(**S1), ANTI, term(sel(expr("security", "Exists")), "zone")),
            [
                with_terms(
                    on_m1(**SCAN),
                    ANTI,
                    term(sel(expr("service", "Exists")), "zone"),
                    term(sel(expr("security", "Exists")), "zone"),
                )
            ],
            Status.unschedulable(EXISTING_REASON),
            id="symmetry-a2-existing-anti-matches",
        ),
        pytest.param(
            with_terms(
                pod(abc="", xyz=""),
                ANTI,
                term(sel(expr("abc", "Exists")), "zone"),
                term(sel(expr("def", "Exists")), "zone"),
            ),
            [
                with_terms(
                    pod("e", node="machine1", **{"def": "", "xyz": ""}),
                    ANTI,
                    term(sel(expr("abc", "Exists")), "zone"),
                    term(sel(expr("def", "Exists")), "zone"),
                )
            ],
            Status.unschedulable(ANTI_REASON),
            id="symmetry-b1",
        ),
        pytest.param(
            with_terms(
                pod(**{"def": "", "xyz": ""}),
                ANTI,
                term(sel(expr("abc", "Exists")), "zone"),
                term(sel(expr("def", "Exists")), "zone"),
            ),
            [
                with_terms(
                    pod("e", node="machine1", abc="", xyz=""),
                    ANTI,
                    term(sel(expr("abc", "Exists")), "zone"),
                    term(sel(expr("def", "Exists")), "zone"),
                )
            ],
            Status.unschedulable(ANTI_REASON),
            id="symmetry-b2",
        ),
        pytest.param(
            with_terms(pod(**SCAN), AFF, term(None, "region")),
            [on_m1(**SCAN)],
            Status.unresolvable(AFFINITY_REASON),
            id="null-label-selector-matches-nothing",
        ),
    ],
)
def test_filter_single_node(incoming: PodBuilder, existing: list[PodBuilder], expected: Status) -> None:
    _, got = run_filter(incoming.build(), [MACHINE1], [e.build() for e in existing])
    assert got["machine1"] == expected


@pytest.mark.parametrize(
    "kind",
    [pytest.param(AFF, id="affinity"), pytest.param(ANTI, id="anti-affinity")],
)
def test_pre_filter_rejects_invalid_selector(kind: str) -> None:
    bad = with_terms(pod(**SCAN), kind, term(sel(expr("service", "Near", "x")), "region")).build()
    pre, _ = run_filter(bad, [MACHINE1])
    assert pre.code is X
    assert pre.message.startswith("parsing pod: ")


def test_pre_filter_skips_when_nothing_applies() -> None:
    """No required terms on the pod and no existing anti-affinity against it: Skip."""
    pre, got = run_filter(pod(**SCAN).build(), [MACHINE1], [on_m1(**SCAN).build()])
    assert pre.code is Code.SKIP
    assert got["machine1"].is_success


def test_filter_without_pre_filter_is_an_error() -> None:
    got = make_plugin([]).filter(CycleState(), pod().build(), NodeInfo(MACHINE1))
    assert got.code is Code.ERROR
    assert "did its PreFilter run?" in got.message


# --- filter: several nodes -------------------------------------------------------------------------

CHINA, CHINA_AZ1, INDIA = {"region": "China"}, {"region": "China", "az": "az1"}, {"region": "India"}
FOO_BAR = {"foo": "bar"}
foo_in_bar = sel(expr("foo", "In", "bar"))
scan_only = sel(expr("service", "In", "securityscan"))


@pytest.mark.parametrize(
    ("incoming", "nodes", "existing", "expected"),
    [
        pytest.param(
            with_terms(pod(), AFF, term(foo_in_bar, "region")),
            [N("m1", **CHINA), N("m2", **CHINA_AZ1), N("m3", **INDIA)],
            [pod("e", node="m1", **FOO_BAR)],
            {"m1": S, "m2": S, "m3": X},
            id="affinity-same-topology-value-as-matching-pod",
        ),
        pytest.param(
            with_terms(pod(foo="bar", service="securityscan"), AFF, term(foo_in_bar, "zone"), term(scan_only, "zone")),
            [N("nodeA", zone="az1", hostname="h1"), N("nodeB", zone="az2", hostname="h2")],
            [pod("e", node="nodeA", **FOO_BAR)],
            {"nodeA": S, "nodeB": S},
            id="first-pod-of-self-affine-group-goes-anywhere",
        ),
        pytest.param(
            with_terms(pod(foo="bar", service="securityscan"), AFF, term(foo_in_bar, "zone"), term(scan_only, "zone")),
            [N("nodeA", zoneLabel="az1", hostname="h1"), N("nodeB", zoneLabel="az2", hostname="h2")],
            [pod("e", node="nodeA", **FOO_BAR)],
            {"nodeA": X, "nodeB": X},
            id="first-pod-needs-the-topology-keys",
        ),
        pytest.param(
            with_terms(pod(), ANTI, term(sel(expr("foo", "In", "abc")), "region")),
            [N("nodeA", region="r1", hostname="nodeA"), N("nodeB", region="r1", hostname="nodeB")],
            [pod("e", node="nodeA", foo="abc")],
            {"nodeA": U, "nodeB": U},
            id="anti-affinity-whole-region",
        ),
        pytest.param(
            with_terms(pod(), ANTI, term(sel(expr("foo", "In", "abc")), "region"), term(scan_only, "zone")),
            [
                N("nodeA", region="r1", zone="z1", hostname="nodeA"),
                N("nodeB", region="r1", zone="z2", hostname="nodeB"),
            ],
            [pod("e", node="nodeA", foo="abc", service="securityscan")],
            {"nodeA": U, "nodeB": U},
            id="anti-affinity-any-term-matching-is-enough",
        ),
        pytest.param(
            pod(foo="abc"),
            [
                N("nodeA", region="r1", zone="z1", hostname="nodeA"),
                N("nodeB", region="r1", zone="z2", hostname="nodeB"),
            ],
            [
                with_terms(
                    pod("e", node="nodeA", foo="abc"),
                    ANTI,
                    term(sel(expr("foo", "In", "abc")), "invalid-node-label"),
                    term(sel(expr("foo", "In", "abc")), "zone"),
                )
            ],
            {"nodeA": U, "nodeB": S},
            id="existing-anti-affinity-term-with-unknown-topology-key-is-ignored",
        ),
        pytest.param(
            with_terms(pod(foo="abc"), ANTI, term(sel(expr("foo", "In", "abc")), "invalid-node-label")),
            [
                N("nodeA", region="r1", zone="z1", hostname="nodeA"),
                N("nodeB", region="r1", zone="z2", hostname="nodeB"),
            ],
            [pod("e", node="nodeA", foo="abc")],
            {"nodeA": S, "nodeB": S},
            id="incoming-anti-affinity-needs-the-topology-key",
        ),
        pytest.param(
            pod(foo="abc", service="securityscan"),
            [
                N("nodeA", region="r1", zone="z1", hostname="nodeA"),
                N("nodeB", region="r1", zone="z2", hostname="nodeB"),
            ],
            [
                with_terms(pod("e1", node="nodeA", foo="abc"), ANTI, term(sel(expr("foo", "In", "abc")), "zone")),
                with_terms(pod("e2", node="nodeB", foo="abc"), ANTI, term(scan_only, "zone")),
            ],
            {"nodeA": U, "nodeB": U},
            id="each-existing-pod-blocks-its-own-zone",
        ),
        pytest.param(
            with_terms(pod(foo="abc", service="securityscan"), AFF, term(sel(expr("foo", "In", "abc")), "region")),
            [
                N("nodeA", region="r1", zone="z1", hostname="nodeA"),
                N("nodeB", region="r1", zone="z2", hostname="nodeB"),
                N("nodeC", region="r2", zone="z3", hostname="nodeC"),
            ],
            [pod("e", node="nodeA", foo="abc")],
            {"nodeA": S, "nodeB": S, "nodeC": X},
            id="affinity-region-with-matching-pod-only",
        ),
        pytest.param(
            with_terms(
                pod(),
                AFF,
                term(sel(expr("foo", "Exists")), "zone"),
                term(sel(expr("bar", "Exists")), "zone"),
            ),
            [N("nodeA", zone="z1"), N("nodeB", zone="z2")],
            [pod("e1", node="nodeA", foo=""), pod("e2", node="nodeB", bar="")],
            {"nodeA": X, "nodeB": X},
            id="one-existing-pod-must-match-all-terms",
        ),
        pytest.param(
            with_terms(
                pod(foo="", bar=""),
                AFF,
                term(sel(expr("foo", "Exists")), "zone"),
                term(sel(expr("bar", "Exists")), "region"),
            ),
            [
                N("nodeA", zone="z1", region="r1"),
                N("nodeB", zone="z1", region="r2"),
                N("nodeC", zone="z2", region="r1"),
            ],
            [pod("e1", node="nodeA", foo="", bar="")],
            {"nodeA": S, "nodeB": X, "nodeC": X},
            id="every-term-topology-must-hold-a-match",
        ),
    ],
)
def test_filter_multiple_nodes(
    incoming: PodBuilder, nodes: list[Node], existing: list[PodBuilder], expected: dict[str, Code]
) -> None:
    _, got = run_filter(incoming.build(), nodes, [e.build() for e in existing])
    assert {n: s.code for n, s in got.items()} == expected


TEAM_NS = {"team-a": {"team": "a"}, "team-b": {"team": "b"}, "other": {}}
TWO_ZONES = [N("n1", zone="z1"), N("n2", zone="z2")]


@pytest.mark.parametrize(
    ("incoming", "existing", "expected"),
    [
        pytest.param(
            with_terms(
                pod(ns="other", **S1),
                AFF,
                term(sel(expr("security", "Exists")), "zone", namespaceSelector={"matchLabels": {"team": "a"}}),
            ),
            [pod("e", node="n1", ns="team-a", **S1), pod("f", node="n2", ns="team-b", **S1)],
            {"n1": S, "n2": X},
            id="affinity-namespace-selector",
        ),
        pytest.param(
            with_terms(pod(ns="other", **S1), AFF, term(sel(expr("security", "Exists")), "zone", namespaceSelector={})),
            [pod("f", node="n2", ns="team-b", **S1)],
            {"n1": X, "n2": S},
            id="empty-namespace-selector-selects-all-namespaces",
        ),
        pytest.param(
            with_terms(
                pod(ns="other", **S1),
                AFF,
                term(
                    sel(expr("security", "Exists")),
                    "zone",
                    namespaces=["team-b"],
                    namespaceSelector={"matchLabels": {"team": "a"}},
                ),
            ),
            [pod("e", node="n1", ns="team-a", **S1), pod("f", node="n2", ns="team-b", **S1)],
            {"n1": S, "n2": S},
            id="namespaces-union-namespace-selector",
        ),
        pytest.param(
            with_terms(pod(ns="other", **S1), AFF, term(sel(expr("security", "Exists")), "zone")),
            [pod("e", node="n1", ns="team-a", **S1), pod("f", node="n2", ns="other", **S1)],
            {"n1": X, "n2": S},
            id="no-namespaces-means-own-namespace",
        ),
        pytest.param(
            pod(ns="team-a", **S1),
            [
                with_terms(
                    pod("e", node="n1", ns="team-b", **S1),
                    ANTI,
                    term(sel(expr("security", "Exists")), "zone", namespaceSelector={"matchLabels": {"team": "a"}}),
                )
            ],
            {"n1": U, "n2": S},
            id="existing-anti-affinity-namespace-selector-matches-incoming-namespace",
        ),
        pytest.param(
            pod(ns="other", **S1),
            [
                with_terms(
                    pod("e", node="n1", ns="team-b", **S1),
                    ANTI,
                    term(sel(expr("security", "Exists")), "zone", namespaceSelector={"matchLabels": {"team": "a"}}),
                )
            ],
            {"n1": S, "n2": S},
            id="existing-anti-affinity-namespace-selector-other-namespace",
        ),
        pytest.param(
            with_terms(
                pod(app="web", rev="2"), ANTI, term(sel(expr("app", "In", "web")), "zone", matchLabelKeys=["rev"])
            ),
            [pod("e", node="n1", app="web", rev="1"), pod("f", node="n2", app="web", rev="2")],
            {"n1": S, "n2": U},
            id="anti-affinity-match-label-keys-same-revision-only",
        ),
        pytest.param(
            with_terms(
                pod(app="web", tenant="t1"),
                ANTI,
                term(sel(expr("app", "In", "web")), "zone", mismatchLabelKeys=["tenant"]),
            ),
            [pod("e", node="n1", app="web", tenant="t1"), pod("f", node="n2", app="web", tenant="t2")],
            {"n1": S, "n2": U},
            id="anti-affinity-mismatch-label-keys-other-tenants-only",
        ),
        pytest.param(
            with_terms(
                pod(app="web", rev="2"), AFF, term(sel(expr("app", "In", "web")), "zone", matchLabelKeys=["rev"])
            ),
            [pod("e", node="n1", app="web", rev="1"), pod("f", node="n2", app="web", rev="2")],
            {"n1": X, "n2": S},
            id="affinity-match-label-keys",
        ),
    ],
)
def test_filter_namespaces_and_label_keys(
    incoming: PodBuilder, existing: list[PodBuilder], expected: dict[str, Code]
) -> None:
    _, got = run_filter(incoming.build(), TWO_ZONES, [e.build() for e in existing], TEAM_NS)
    assert {n: s.code for n, s in got.items()} == expected


def test_namespace_labels_fetched_once_per_namespace_per_cycle() -> None:
    incoming = with_terms(
        pod(ns="other", **S1),
        AFF,
        term(sel(expr("security", "Exists")), "zone", namespaceSelector={"matchLabels": {"team": "a"}}),
    ).build()
    existing = [pod(f"e{i}", node="n1", ns="team-a" if i % 2 else "team-b", **S1).build() for i in range(20)]
    infos = cluster(TWO_ZONES, existing)
    handle = FakeHandle(infos, TEAM_NS)
    pl = ipa.InterPodAffinity(None, handle)
    pl.pre_filter(CycleState(), incoming, infos)
    assert handle.namespace_lookups <= 3


# --- AddPod / RemovePod ----------------------------------------------------------------------------


def filter_after(
    incoming: Pod,
    nodes: Sequence[Node],
    existing: Sequence[Pod],
    *,
    add: Sequence[Pod] = (),
    remove: Sequence[Pod] = (),
) -> dict[str, Code]:
    infos = cluster(nodes, existing)
    by_name = {ni.name: ni for ni in infos}
    pl = make_plugin(infos)
    state = CycleState()
    pl.pre_filter(state, incoming, infos)
    for p in add:
        assert pl.add_pod(state, incoming, p, by_name[p.node_name]).is_success
    for p in remove:
        assert pl.remove_pod(state, incoming, p, by_name[p.node_name]).is_success
    return {ni.name: pl.filter(state, incoming, ni).code for ni in infos}


def fresh(incoming: Pod, nodes: Sequence[Node], existing: Sequence[Pod]) -> dict[str, Code]:
    return {n: s.code for n, s in run_filter(incoming, nodes, existing)[1].items()}


NODES_AB = [N("nodeA", region="r1", zone="z1"), N("nodeB", region="r1", zone="z2"), N("nodeC", region="r2", zone="z3")]
E_ANTI_ZONE = with_terms(
    pod("ea", node="nodeA", security="S2"), ANTI, term(sel(expr("security", "In", "S1")), "zone")
).build()
E_AFF = pod("eb", node="nodeB", security="S1").build()
E_ANTI_TARGET = pod("ec", node="nodeC", service="x").build()


@pytest.mark.parametrize(
    ("incoming", "existing", "add", "remove", "expected"),
    [
        pytest.param(
            pod(security="S1"),
            [],
            [E_ANTI_ZONE],
            [],
            {"nodeA": U, "nodeB": S, "nodeC": S},
            id="add-existing-anti-affinity",
        ),
        pytest.param(
            pod(security="S1"),
            [E_ANTI_ZONE],
            [],
            [E_ANTI_ZONE],
            {"nodeA": S, "nodeB": S, "nodeC": S},
            id="remove-existing-anti-affinity",
        ),
        pytest.param(
            with_terms(pod(security="S1"), AFF, term(sel(expr("security", "In", "S1")), "region")),
            [pod("other", node="nodeC", security="S1").build()],
            [E_AFF],
            [],
            {"nodeA": S, "nodeB": S, "nodeC": S},
            id="add-affinity-match",
        ),
        pytest.param(
            with_terms(pod(security="S1"), AFF, term(sel(expr("security", "In", "S1")), "region")),
            [E_AFF, pod("other", node="nodeC", security="S1").build()],
            [],
            [E_AFF],
            {"nodeA": X, "nodeB": X, "nodeC": S},
            id="remove-affinity-match",
        ),
        pytest.param(
            with_terms(pod(security="S1"), AFF, term(sel(expr("security", "In", "S1")), "region")),
            [E_AFF],
            [],
            [E_AFF],
            {"nodeA": S, "nodeB": S, "nodeC": S},
            id="remove-last-match-reenables-first-replica",
        ),
        pytest.param(
            with_terms(pod(), ANTI, term(sel(expr("service", "Exists")), "region")),
            [],
            [E_ANTI_TARGET],
            [],
            {"nodeA": S, "nodeB": S, "nodeC": U},
            id="add-anti-affinity-target",
        ),
        pytest.param(
            with_terms(pod(), ANTI, term(sel(expr("service", "Exists")), "region")),
            [E_ANTI_TARGET],
            [],
            [E_ANTI_TARGET],
            {"nodeA": S, "nodeB": S, "nodeC": S},
            id="remove-anti-affinity-target",
        ),
    ],
)
def test_add_remove_pod(
    incoming: PodBuilder, existing: list[Pod], add: list[Pod], remove: list[Pod], expected: dict[str, Code]
) -> None:
    """AddPod/RemovePod give the verdicts of a fresh PreFilter over the changed cluster."""
    p = incoming.build()
    assert filter_after(p, NODES_AB, existing, add=add, remove=remove) == expected
    after = [e for e in existing if e not in remove] + list(add)
    assert fresh(p, NODES_AB, after) == expected


def test_add_pod_does_not_leak_into_cloned_states() -> None:
    incoming = pod(security="S1").build()
    infos = cluster(NODES_AB, [E_ANTI_ZONE])
    pl = make_plugin(infos)
    state = CycleState()
    pl.pre_filter(state, incoming, infos)
    clone = state.clone()
    assert pl.remove_pod(clone, incoming, E_ANTI_ZONE, infos[0]).is_success
    assert pl.filter(clone, incoming, infos[0]).is_success
    assert pl.filter(state, incoming, infos[0]).code is U


# --- term cache -----------------------------------------------------------------------------------


def test_existing_pod_terms_are_compiled_once_and_refreshed_on_update() -> None:
    cache = affinity_terms.TermCache(limit=2)
    e = with_terms(pod("e", node="n1", **S1), ANTI, term(sel(expr("security", "Exists")), "zone")).build()
    first = cache.get(e)
    assert cache.get(e) is first
    updated = dataclasses.replace(e, affinity={ANTI: {"requiredDuringSchedulingIgnoredDuringExecution": []}})
    assert cache.get(updated).required_anti_affinity == ()
    for i in range(5):  # fill past the limit: old entries rotate out but stay correct
        cache.get(pod(f"x{i}", node="n1").build())
    again = cache.get(e)
    assert again.required_anti_affinity == first.required_anti_affinity


def test_pod_cached_leniently_still_fails_a_strict_lookup() -> None:
    """An invalid pod seen first as an existing pod (terms dropped) is still rejected as incoming."""
    cache = affinity_terms.TermCache()
    bad = with_terms(pod("e", **S1), ANTI, term(sel(expr("security", "Near", "x")), "zone")).build()
    assert cache.get(bad) == affinity_terms.NO_TERMS
    with pytest.raises(SelectorError):
        cache.get(bad, strict=True)


def test_existing_pod_with_invalid_selector_is_tolerated() -> None:
    bad = with_terms(pod("e", node="n1", **S1), ANTI, term(sel(expr("security", "Near", "x")), "zone")).build()
    pre, got = run_filter(pod(**S1).build(), TWO_ZONES, [bad])
    assert pre.code is Code.SKIP
    assert all(s.is_success for s in got.values())


# --- score -----------------------------------------------------------------------------------------

S2 = {"security": "S2"}
AZ1, AZ2 = {"az": "az1"}, {"az": "az2"}


def pref(b: PodBuilder, kind: str, weight: int, selector: dict[str, Any], topology: str) -> PodBuilder:
    return b.pod_affinity(kind, term(selector, topology), weight)


def stay_with(b: PodBuilder, value: str, weight: int) -> PodBuilder:
    return pref(b, AFF, weight, sel(expr("security", "In", value)), "region")


def away_from(b: PodBuilder, value: str, weight: int = 5) -> PodBuilder:
    return pref(b, ANTI, weight, sel(expr("security", "In", value)), "az")


def hard_affinity(b: PodBuilder) -> PodBuilder:
    return with_terms(
        b,
        AFF,
        term(sel(expr("security", "In", "S1", "value2")), "region"),
        term(sel(expr("security", "Exists"), expr("wrongkey", "DoesNotExist")), "region"),
    )


def affinity3(b: PodBuilder) -> PodBuilder:
    pref(b, AFF, 8, sel(expr("security", "NotIn", "S1"), expr("security", "In", "S2")), "region")
    return pref(b, AFF, 2, sel(expr("security", "Exists"), expr("wrongkey", "DoesNotExist")), "region")


def e(node: str, **labels: str) -> PodBuilder:
    return pod("e", node=node, **labels)


@pytest.mark.parametrize(
    ("incoming", "nodes", "existing", "expected"),
    [
        pytest.param(
            pod(**S1),
            [N("m1", **CHINA), N("m2", **INDIA), N("m3", **AZ1)],
            [],
            {"m1": 0, "m2": 0, "m3": 0},
            id="no-affinity-all-equal",
        ),
        pytest.param(
            stay_with(pod(**S1), "S1", 5),
            [N("m1", **CHINA), N("m2", **INDIA), N("m3", **AZ1)],
            [e("m1", **S1), e("m2", **S2), e("m3", **S1)],
            {"m1": 100, "m2": 0, "m3": 0},
            id="affinity-topology-and-selector-match",
        ),
        pytest.param(
            stay_with(pod(), "S1", 5),
            [N("m1", **CHINA), N("m2", **CHINA_AZ1), N("m3", **INDIA)],
            [e("m1", **S1)],
            {"m1": 100, "m2": 100, "m3": 0},
            id="affinity-same-domain-same-score",
        ),
        pytest.param(
            stay_with(pod(**S1), "S2", 6),
            [N("m1", **CHINA), N("m2", **INDIA), N("m3", **CHINA), N("m4", **CHINA), N("m5", **INDIA)],
            [e("m1", **S2), e("m1", **S2), e("m2", **S2), e("m3", **S2), e("m4", **S2), e("m5", **S2)],
            {"m1": 100, "m2": 0, "m3": 100, "m4": 100, "m5": 0},
            id="affinity-region-with-more-matches-wins",
        ),
        pytest.param(
            affinity3(pod(**S1)),
            [N("m1", **CHINA), N("m2", **INDIA), N("m3", **AZ1)],
            [e("m1", **S1), e("m2", **S2), e("m3", **S1)],
            {"m1": 20, "m2": 100, "m3": 0},
            id="affinity-different-operators",
        ),
        pytest.param(
            pod(**S2),
            [N("m1", **CHINA), N("m2", **INDIA), N("m3", **AZ1)],
            [stay_with(e("m1", **S1), "S1", 5), stay_with(e("m2", **S2), "S2", 6)],
            {"m1": 0, "m2": 100, "m3": 0},
            id="affinity-symmetry-preferred",
        ),
        pytest.param(
            pod(**S1),
            [N("m1", **CHINA), N("m2", **INDIA), N("m3", **AZ1)],
            [hard_affinity(e("m1", **S1)), hard_affinity(e("m2", **S2))],
            {"m1": 100, "m2": 100, "m3": 0},
            id="affinity-symmetry-required-hard-weight",
        ),
        pytest.param(
            away_from(pod(**S1), "S1"),
            [N("m1", **AZ1), N("m2", **CHINA)],
            [e("m1", **S1), e("m2", **S2)],
            {"m1": 0, "m2": 100},
            id="anti-affinity-node-without-matching-pods-wins",
        ),
        pytest.param(
            away_from(pod(**S1), "S1"),
            [N("m1", **AZ1), N("m2", **CHINA)],
            [e("m1", **S1), e("m2", **S1)],
            {"m1": 0, "m2": 100},
            id="anti-affinity-node-without-topology-key-wins",
        ),
        pytest.param(
            away_from(pod(**S1), "S1"),
            [N("m1", **AZ1), N("m2", **INDIA)],
            [e("m1", **S1), e("m1", **S1), e("m2", **S2)],
            {"m1": 0, "m2": 100},
            id="anti-affinity-more-matches-lower-score",
        ),
        pytest.param(
            pod(**S2),
            [N("m1", **AZ1), N("m2", **AZ2)],
            [away_from(e("m1", **S1), "S2"), away_from(e("m2", **S2), "S1")],
            {"m1": 0, "m2": 100},
            id="anti-affinity-symmetry",
        ),
        pytest.param(
            away_from(stay_with(pod(**S1), "S1", 8), "S2"),
            [N("m1", **CHINA), N("m2", **AZ1)],
            [e("m1", **S1), e("m2", **S1)],
            {"m1": 100, "m2": 0},
            id="affinity-and-anti-affinity",
        ),
        pytest.param(
            away_from(stay_with(pod(**S1), "S1", 8), "S2"),
            [N("m1", **CHINA_AZ1), N("m2", **INDIA), N("m3", **CHINA), N("m4", **CHINA), N("m5", **INDIA)],
            [e("m1", **S1), e("m1", **S1), e("m2", **S1), e("m3", **S1), e("m3", **S1), e("m4", **S1), e("m5", **S1)],
            {"m1": 100, "m2": 0, "m3": 100, "m4": 100, "m5": 0},
            id="affinity-and-anti-affinity-same-labels",
        ),
        pytest.param(
            away_from(stay_with(pod(**S1), "S1", 8), "S2"),
            [N("m1", **CHINA), N("m2", **AZ1), N("m3", **INDIA), N("m4", **AZ2)],
            [e("m1", **S1), e("m2", **S2), away_from(stay_with(e("m3"), "S1", 8), "S2"), away_from(e("m4"), "S1")],
            {"m1": 100, "m2": 0, "m3": 100, "m4": 0},
            id="affinity-anti-affinity-and-symmetry",
        ),
        pytest.param(
            pod(**S1),
            [N("m1", **CHINA), N("m2", **CHINA)],
            [e("m1", **S1), away_from(stay_with(e("m2"), "S1", 8), "S2")],
            {"m1": 0, "m2": 0},
            id="partial-nodes-with-affinity-pods-same-domain",
        ),
    ],
)
def test_score(incoming: PodBuilder, nodes: list[Node], existing: list[PodBuilder], expected: dict[str, int]) -> None:
    _, got = run_score(incoming.build(), nodes, [x.build() for x in existing])
    assert got == expected


@pytest.mark.parametrize(
    ("weight", "expected"),
    [
        pytest.param(1, {"m1": 100, "m2": 100, "m3": 0}, id="hard-weight-1"),
        pytest.param(0, {"m1": 0, "m2": 0, "m3": 0}, id="hard-weight-0-disables"),
    ],
)
def test_score_hard_pod_affinity_weight(weight: int, expected: dict[str, int]) -> None:
    hard = sel(expr("service", "In", "S1"))
    existing = [with_terms(e("m1"), AFF, term(hard, "region")), with_terms(e("m2"), AFF, term(hard, "region"))]
    pre, got = run_score(
        pod(service="S1").build(),
        [N("m1", **CHINA), N("m2", **INDIA), N("m3", **AZ1)],
        [x.build() for x in existing],
        args=ipa.InterPodAffinityArgs(hard_pod_affinity_weight=weight),
    )
    assert got == expected
    assert pre.code is (Code.SUCCESS if weight else Code.SKIP)


@pytest.mark.parametrize(
    ("incoming", "expected"),
    [
        pytest.param(pod(**S2), {"m1": 0, "m2": 0, "m3": 0}, id="ignored-without-incoming-preferred-terms"),
        pytest.param(
            stay_with(pod(**S2), "S9", 1),
            {"m1": 0, "m2": 100, "m3": 0},
            id="existing-terms-used-when-incoming-has-preferred",
        ),
    ],
)
def test_score_ignore_preferred_terms_of_existing_pods(incoming: PodBuilder, expected: dict[str, int]) -> None:
    existing = [stay_with(e("m1", **S1), "S1", 5), stay_with(e("m2", **S2), "S2", 6)]
    _, got = run_score(
        incoming.build(),
        [N("m1", **CHINA), N("m2", **INDIA), N("m3", **AZ1)],
        [x.build() for x in existing],
        args=ipa.InterPodAffinityArgs(ignore_preferred_terms_of_existing_pods=True),
    )
    assert got == expected


@pytest.mark.parametrize(
    ("incoming", "expected"),
    [
        pytest.param(
            pref(pod(ns="team-a", **S1), AFF, 5, sel(expr("security", "In", "S1")), "region"),
            {"m1": 0, "m2": 100},
            id="affinity-own-namespace-only",
        ),
        pytest.param(
            pod(ns="team-a", **S1).pod_affinity(
                AFF,
                term(sel(expr("security", "In", "S1")), "region", namespaceSelector={"matchLabels": {"team": "b"}}),
                5,
            ),
            {"m1": 100, "m2": 0},
            id="affinity-namespace-selector",
        ),
        pytest.param(
            pod(ns="team-a", **S1),
            {"m1": 0, "m2": 100},
            id="anti-affinity-symmetry-namespace-selector",
        ),
    ],
)
def test_score_namespace_selector(incoming: PodBuilder, expected: dict[str, int]) -> None:
    existing = [
        away_from(pod("e1", node="m1", ns="team-b", **S1), "S9").pod_affinity(
            ANTI,
            term(sel(expr("security", "In", "S1")), "region", namespaceSelector={"matchLabels": {"team": "a"}}),
            3,
        ),
        pod("e2", node="m2", ns="team-a", **S1),
    ]
    _, got = run_score(
        incoming.build(), [N("m1", **CHINA), N("m2", **INDIA)], [x.build() for x in existing], namespaces=TEAM_NS
    )
    assert got == expected


@pytest.mark.parametrize("kind", [pytest.param(AFF, id="affinity"), pytest.param(ANTI, id="anti-affinity")])
def test_pre_score_invalid_selector_is_an_error(kind: str) -> None:
    bad = pref(pod(), kind, 8, sel(expr("security", "In")), "region").build()
    infos = cluster([N("m1", **CHINA)])
    pre = make_plugin(infos).pre_score(CycleState(), bad, infos)
    assert pre.code is Code.ERROR
    assert "operator In needs at least one value" in pre.message


# --- properties ------------------------------------------------------------------------------------


@st.composite
def affinity_clusters(draw: st.DrawFn) -> tuple[Pod, list[Node], list[Pod]]:
    regions = ("r1", "r2", "r3")
    nodes = [
        N(f"n{i}", **({"region": r} if (r := draw(st.sampled_from((*regions, None)))) else {}))
        for i in range(draw(st.integers(1, 6)))
    ]
    values = ("S1", "S2", "S3")
    existing = []
    for i in range(draw(st.integers(0, 12))):
        b = pod(f"e{i}", node=draw(st.sampled_from(nodes)).name, security=draw(st.sampled_from(values)))
        for kind in draw(st.lists(st.sampled_from((AFF, ANTI)), max_size=2)):
            pref(
                b, kind, draw(st.integers(1, 100)), sel(expr("security", "In", draw(st.sampled_from(values)))), "region"
            )
        if draw(st.booleans()):
            with_terms(b, AFF, term(sel(expr("security", "In", draw(st.sampled_from(values)))), "region"))
        existing.append(b.build())
    incoming = pod(security=draw(st.sampled_from(values)))
    for kind in draw(st.lists(st.sampled_from((AFF, ANTI)), max_size=3)):
        pref(
            incoming,
            kind,
            draw(st.integers(1, 100)),
            sel(expr("security", "In", draw(st.sampled_from(values)))),
            "region",
        )
    return incoming.build(), nodes, existing


@settings(max_examples=80, deadline=None)
@given(affinity_clusters())
def test_normalized_scores_in_range_and_keep_order(c: tuple[Pod, list[Node], list[Pod]]) -> None:
    incoming, nodes, existing = c
    infos = cluster(nodes, existing)
    pl = make_plugin(infos)
    state = CycleState()
    pl.pre_score(state, incoming, infos)
    raw = {ni.name: pl.score(state, incoming, ni) for ni in infos}
    scores = [NodeScore(n, s) for n, s in raw.items()]
    assert pl.normalize_score(state, incoming, scores).is_success
    norm = {s.name: s.score for s in scores}
    assert all(0 <= v <= 100 for v in norm.values())
    for (a, raw_a), (b, raw_b) in itertools.product(raw.items(), repeat=2):
        if raw_a <= raw_b:
            assert norm[a] <= norm[b]


@settings(max_examples=80, deadline=None)
@given(affinity_clusters(), st.data())
def test_add_and_remove_pod_match_a_fresh_pre_filter(c: tuple[Pod, list[Node], list[Pod]], data: st.DataObject) -> None:
    _, nodes, existing = c
    values = ("S1", "S2", "S3")
    incoming_b = pod(security=data.draw(st.sampled_from(values)))
    for kind in data.draw(st.lists(st.sampled_from((AFF, ANTI)), max_size=2)):
        with_terms(incoming_b, kind, term(sel(expr("security", "In", data.draw(st.sampled_from(values)))), "region"))
    incoming = incoming_b.build()
    required_anti = [
        with_terms(
            pod(f"a{i}", node=data.draw(st.sampled_from(nodes)).name, security=data.draw(st.sampled_from(values))),
            ANTI,
            term(sel(expr("security", "In", data.draw(st.sampled_from(values)))), "region"),
        ).build()
        for i in range(data.draw(st.integers(0, 3)))
    ]
    base = existing + required_anti
    to_remove = data.draw(st.lists(st.sampled_from(base), unique_by=lambda p: p.uid, max_size=3)) if base else []
    to_add = [
        with_terms(
            pod(f"n{i}", node=data.draw(st.sampled_from(nodes)).name, security=data.draw(st.sampled_from(values))),
            ANTI,
            term(sel(expr("security", "In", data.draw(st.sampled_from(values)))), "region"),
        ).build()
        for i in range(data.draw(st.integers(0, 2)))
    ]
    got = filter_after(incoming, nodes, base, add=to_add, remove=to_remove)
    after = [p for p in base if p not in to_remove] + to_add
    assert got == fresh(incoming, nodes, after)
