"""Each plugin's queueing hints: a change that cannot help a pod it rejected leaves the pod where it
is; one that can moves it (upstream's EventsToRegister and hints, v1.37.2).

Table-driven over (plugin, incoming event, old object, new object, rejected pod, expected). The
rules are asked exactly as the scheduling queue asks them: through a profile's
:class:`~custom_scheduler.framework.requeue.RequeueRules`, with the plugin as the pod's rejector.
"""

from __future__ import annotations

from typing import Any

import hypothesis.strategies as st
import pytest
from hypothesis import given, settings

from custom_scheduler.api.model import Node, Pod
from custom_scheduler.framework import cluster_events as ce
from custom_scheduler.framework.requeue import RequeueRules
from custom_scheduler.plugins import in_tree_registry
from tests.builders import make_node, make_pod
from tests.unit.plugins.support import fake_handle

REGISTRY = in_tree_registry()
NODE_LABEL = ce.ClusterEvent(ce.Resource.NODE, ce.Action.UPDATE_NODE_LABEL)
NODE_TAINT = ce.ClusterEvent(ce.Resource.NODE, ce.Action.UPDATE_NODE_TAINT)
NODE_ALLOCATABLE = ce.ClusterEvent(ce.Resource.NODE, ce.Action.UPDATE_NODE_ALLOCATABLE)
POD_LABEL = ce.ClusterEvent(ce.Resource.ASSIGNED_POD, ce.Action.UPDATE_POD_LABEL)
TOLERATION = ce.ClusterEvent(ce.Resource.TARGET_POD, ce.Action.UPDATE_POD_TOLERATION)


def rules(plugin: str) -> RequeueRules:
    spec = REGISTRY.get(plugin)
    assert spec is not None
    return RequeueRules.of({plugin: spec.factory(None, fake_handle())})


def small(name: str = "n1", cpu: str = "1") -> Node:
    return make_node(name).capacity(cpu=cpu, memory="8Gi", pods="110").build()


BIG = make_pod("big").req(cpu="2").build()
PORT = make_pod("port").host_port(8080).build()
ZONE_A = make_pod("za").node_selector(**{"topology.kubernetes.io/zone": "a"}).build()
WEB = {"labelSelector": {"matchLabels": {"app": "web"}}, "topologyKey": "kubernetes.io/hostname"}
NEEDS_WEB = make_pod("needs").pod_affinity("podAffinity", WEB).build()
AVOIDS_WEB = make_pod("avoids").pod_affinity("podAntiAffinity", WEB).build()
SPREAD = make_pod("s").label("app", "web").spread(1, "zone", selector={"matchLabels": {"app": "web"}}).build()


def bound(name: str, **labels: str) -> Pod:
    return make_pod(name).labels(**labels).node("n1").build()


CASES = [
    # NodeResourcesFit: room on a node
    ("NodeResourcesFit", ce.NODE_ADD, None, small(cpu="4"), BIG, True),
    ("NodeResourcesFit", ce.NODE_ADD, None, small(cpu="1"), BIG, False),
    ("NodeResourcesFit", NODE_ALLOCATABLE, small(cpu="1"), small(cpu="4"), BIG, True),
    ("NodeResourcesFit", NODE_ALLOCATABLE, small(cpu="4"), small(cpu="3"), BIG, False),
    ("NodeResourcesFit", NODE_LABEL, small(), small(), BIG, False),
    ("NodeResourcesFit", ce.ASSIGNED_POD_DELETE, bound("gone"), None, BIG, True),
    ("NodeResourcesFit", ce.ASSIGNED_POD_DELETE, make_pod("never").build(), None, BIG, False),
    ("NodeResourcesFit", ce.ASSIGNED_POD_ADD, None, bound("new"), BIG, False),
    # NodeUnschedulable: uncordoned
    ("NodeUnschedulable", NODE_TAINT, make_node("n").unschedulable().build(), make_node("n").build(), BIG, True),
    ("NodeUnschedulable", NODE_TAINT, make_node("n").build(), make_node("n").taint("k").build(), BIG, False),
    ("NodeUnschedulable", ce.NODE_ADD, None, make_node("n").unschedulable().build(), BIG, False),
    # TaintToleration: a taint the pod did not tolerate is gone
    ("TaintToleration", NODE_TAINT, make_node("n").taint("k").build(), make_node("n").build(), BIG, True),
    ("TaintToleration", NODE_TAINT, make_node("n").build(), make_node("n").taint("k").build(), BIG, False),
    ("TaintToleration", TOLERATION, BIG, BIG, BIG, True),
    # NodeAffinity: a node that now matches
    (
        "NodeAffinity",
        NODE_LABEL,
        make_node("n").build(),
        make_node("n").label("topology.kubernetes.io/zone", "a").build(),
        ZONE_A,
        True,
    ),
    ("NodeAffinity", NODE_LABEL, make_node("n").build(), make_node("n").label("x", "y").build(), ZONE_A, False),
    ("NodeAffinity", ce.ASSIGNED_POD_DELETE, bound("gone"), None, ZONE_A, False),
    # NodePorts: a deleted pod that held the port
    ("NodePorts", ce.ASSIGNED_POD_DELETE, make_pod("h").host_port(8080).node("n1").build(), None, PORT, True),
    ("NodePorts", ce.ASSIGNED_POD_DELETE, make_pod("h").host_port(9090).node("n1").build(), None, PORT, False),
    ("NodePorts", ce.NODE_ADD, None, small(), PORT, True),
    # InterPodAffinity: the missing peer, or a repelling pod gone
    ("InterPodAffinity", ce.ASSIGNED_POD_ADD, None, bound("w", app="web"), NEEDS_WEB, True),
    ("InterPodAffinity", ce.ASSIGNED_POD_ADD, None, bound("d", app="db"), NEEDS_WEB, False),
    ("InterPodAffinity", ce.ASSIGNED_POD_DELETE, bound("w", app="web"), None, AVOIDS_WEB, True),
    ("InterPodAffinity", ce.ASSIGNED_POD_DELETE, bound("d", app="db"), None, AVOIDS_WEB, False),
    ("InterPodAffinity", POD_LABEL, bound("w", app="web"), bound("w", app="db"), AVOIDS_WEB, True),
    # PodTopologySpread: a counted pod, or a node with the topology key
    ("PodTopologySpread", ce.ASSIGNED_POD_DELETE, bound("w", app="web"), None, SPREAD, True),
    ("PodTopologySpread", ce.ASSIGNED_POD_DELETE, bound("d", app="db"), None, SPREAD, False),
    ("PodTopologySpread", ce.NODE_ADD, None, make_node("n").label("zone", "b").build(), SPREAD, True),
    ("PodTopologySpread", ce.NODE_ADD, None, make_node("n").build(), SPREAD, False),
    # NodeName: only a new node
    ("NodeName", ce.NODE_ADD, None, small(), BIG, True),
    ("NodeName", NODE_LABEL, small(), small(), BIG, False),
    # SchedulingGates: only the last gate removed
    (
        "SchedulingGates",
        ce.ClusterEvent(ce.Resource.TARGET_POD, ce.Action.UPDATE_POD_SCHEDULING_GATES_ELIMINATED),
        make_pod("g").gates("a").build(),
        make_pod("g").build(),
        BIG,
        True,
    ),
    # NodeDeclaredFeatures: a node declaring new features
    ("NodeDeclaredFeatures", ce.NODE_ADD, None, small(), BIG, True),
    ("NodeDeclaredFeatures", NODE_LABEL, small(), small(), BIG, False),
]


@pytest.mark.parametrize(
    ("plugin", "event", "old", "new", "pod", "moves"),
    [pytest.param(*c, id=f"{c[0]}-{c[1].label}-{i}") for i, c in enumerate(CASES)],
)
def test_hint(plugin: str, event: ce.ClusterEvent, old: Any, new: Any, pod: Pod, moves: bool) -> None:
    assert rules(plugin).worth_requeuing(pod, {plugin}, event, old, new) is moves


def test_a_pod_no_plugin_rejected_always_moves() -> None:
    assert rules("NodeResourcesFit").worth_requeuing(BIG, set(), NODE_LABEL, small(), small())


def test_a_rejector_without_registrations_or_unknown_moves_on_any_event() -> None:
    empty = RequeueRules({"Quiet": None})
    assert empty.worth_requeuing(BIG, {"Quiet"}, NODE_LABEL, small(), small())
    assert empty.worth_requeuing(BIG, {"SomeExtender"}, NODE_LABEL, small(), small())
    assert empty.interested(NODE_LABEL) == frozenset({"Quiet"})


def test_a_failing_hint_queues_the_pod() -> None:
    def broken(pod: Pod, old: Any, new: Any) -> ce.Hint:
        raise RuntimeError("bug")

    r = RequeueRules({"P": (ce.ClusterEventWithHint(ce.NODE_ADD, broken),)})
    assert r.worth_requeuing(BIG, {"P"}, ce.NODE_ADD, None, small())


@pytest.mark.parametrize(
    ("registered", "incoming", "match"),
    [
        (ce.ClusterEvent(ce.Resource.NODE, ce.Action.ADD | ce.Action.UPDATE_NODE_LABEL), NODE_LABEL, True),
        (ce.ClusterEvent(ce.Resource.NODE, ce.Action.UPDATE), NODE_LABEL, True),
        (NODE_LABEL, ce.ClusterEvent(ce.Resource.NODE, ce.Action.UPDATE), False),
        (ce.ClusterEvent(ce.Resource.POD, ce.Action.ADD), ce.ASSIGNED_POD_ADD, True),
        (ce.ASSIGNED_POD_ADD, ce.UNSCHEDULED_POD_ADD, False),
        (ce.FORCE_ACTIVATE, NODE_LABEL, True),
    ],
)
def test_event_matching(registered: ce.ClusterEvent, incoming: ce.ClusterEvent, match: bool) -> None:
    """Upstream's MatchClusterEvents: the incoming event must be as specific as the registration."""
    assert ce.matches(registered, incoming) is match


def test_node_and_pod_changes_are_the_specific_events() -> None:
    old = make_node("n").label("a", "1").build()
    assert ce.node_changes(old, old) == []  # a heartbeat
    new = make_node("n").label("a", "2").taint("k").build()
    assert {e.action for e in ce.node_changes(old, new)} == {ce.Action.UPDATE_NODE_LABEL, ce.Action.UPDATE_NODE_TAINT}
    p = make_pod("p").req(cpu="2").build()
    smaller = make_pod("p").req(cpu="1").build()
    assert ce.pod_changes(p, smaller, target=True) == [
        ce.ClusterEvent(ce.Resource.TARGET_POD, ce.Action.UPDATE_POD_SCALE_DOWN)
    ]
    assert ce.pod_changes(p, p, target=False) == [ce.ClusterEvent(ce.Resource.UNSCHEDULED_POD, ce.Action.UPDATE)]
    assert ce.NODE_ADD.label == "NodeAdd"
    assert ce.ClusterEvent(ce.Resource.CSI_NODE, ce.Action.UPDATE).label == "storage.k8s.io/CSINodeUpdate"


def test_a_template_claim_concerns_only_its_pod() -> None:
    """DynamicResources' pre-hint: a claim a pod's template made concerns that pod only; a claim
    pods name directly, or one deleted or deallocated, may concern any pod."""
    from custom_scheduler.api import dra
    from custom_scheduler.plugins.dra_hints import claim_targets
    from tests.builders import ClaimBuilder

    owned = dra.resource_claim_from_json(ClaimBuilder("c").request().owner("uid-p").obj())
    assert claim_targets(None, owned) == frozenset({"uid-p"})
    plain = dra.resource_claim_from_json(ClaimBuilder("d").request().obj())
    assert claim_targets(None, plain) is None
    assert claim_targets(owned, None) is None
    event = ce.ClusterEvent(ce.Resource.RESOURCE_CLAIM, ce.Action.ADD)
    assert rules("DynamicResources").targets("DynamicResources", event, None, owned) == frozenset({"uid-p"})
    assert rules("DynamicResources").targets("DynamicResources", event, None, plain) is None
    assert rules("DynamicResources").targets("DynamicResources", ce.NODE_ADD, None, small()) is None


IPA = "InterPodAffinity"
KEYS = ["app", "tier", "peer"]
VALUES = ["a", "b", "c"]
REQUIREMENT: st.SearchStrategy[tuple[str, str, list[str]]] = st.one_of(
    st.tuples(st.sampled_from(KEYS), st.just("In"), st.lists(st.sampled_from(VALUES), min_size=1, max_size=2)),
    st.tuples(st.sampled_from(KEYS), st.just("NotIn"), st.lists(st.sampled_from(VALUES), min_size=1, max_size=2)),
    st.tuples(st.sampled_from(KEYS), st.sampled_from(["Exists", "DoesNotExist"]), st.just([])),
)
TERM = st.tuples(
    st.dictionaries(st.sampled_from(KEYS), st.sampled_from(VALUES), max_size=2),
    st.lists(REQUIREMENT, max_size=2),
    st.booleans(),  # a null labelSelector
)


def _term(match_labels: dict[str, str], exprs: list[tuple[str, str, list[str]]], null: bool) -> dict[str, Any]:
    expressions = [{"key": k, "operator": op, **({"values": v} if v else {})} for k, op, v in exprs]
    selector = None if null else {"matchLabels": match_labels, "matchExpressions": expressions}
    return {"labelSelector": selector, "topologyKey": "kubernetes.io/hostname"}


@settings(max_examples=300, deadline=None)
@given(st.lists(TERM, max_size=3), st.dictionaries(st.sampled_from(KEYS), st.sampled_from(VALUES), max_size=3))
def test_interpodaffinity_keys_never_hide_a_pod_its_hint_would_queue(
    terms: list[tuple[dict[str, str], list[tuple[str, str, list[str]]], bool]], labels: dict[str, str]
) -> None:
    """The keyed index InterPodAffinity gives the queue (pod_hints.affinity_peer_keys and
    added_pod_keys): whenever the hint queues a pod for an added pod, the two share a key (or
    one side has none), for any required affinity terms and any labels of the added pod."""
    b = make_pod("waiting")
    for t in terms:
        b.pod_affinity("podAffinity", _term(*t))
    waiting = b.build()
    added = bound("added", **labels)
    r = rules(IPA)
    pod_keys = r.pod_keys(IPA, waiting)
    event_keys = r.event_keys(IPA, ce.ASSIGNED_POD_ADD, None, added)
    assert event_keys == frozenset(labels.items())
    if r.worth_requeuing(waiting, {IPA}, ce.ASSIGNED_POD_ADD, None, added):
        assert pod_keys is None or pod_keys & event_keys
    assert r.event_keys(IPA, ce.ASSIGNED_POD_DELETE, added, None) is None  # anti-affinity: any pod


@pytest.mark.parametrize(
    ("affinity", "keys"),
    [
        ([], frozenset()),  # no required affinity: no added pod helps
        ([WEB], frozenset({("app", "web")})),
        ([_term({}, [("app", "In", ["a", "b"])], False)], frozenset({("app", "a"), ("app", "b")})),
        ([_term({}, [("app", "Exists", [])], False)], None),  # no In requirement: unkeyed
        ([_term({}, [], True)], frozenset()),  # a null selector matches no pod
    ],
)
def test_interpodaffinity_pod_keys(affinity: list[dict[str, Any]], keys: frozenset[Any] | None) -> None:
    b = make_pod("waiting")
    for t in affinity:
        b.pod_affinity("podAffinity", t)
    assert rules(IPA).pod_keys(IPA, b.build()) == keys
