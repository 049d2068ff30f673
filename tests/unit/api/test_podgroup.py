"""custom_scheduler.api.podgroup: PodGroup parsing of both APIs, membership, the all-or-nothing rule and
the status documents the writers send."""

from __future__ import annotations

from typing import Any

import pytest

from custom_scheduler.api import podgroup as gang
from custom_scheduler.api.model import MalformedObject, pod_from_json
from custom_scheduler.api.podgroup import Condition, GroupError, MemberCounts, PodGroup
from custom_scheduler.api.resources import Resources
from tests.builders import PodGroupBuilder, make_crd_pod_group, make_pod, make_pod_group

# -- parsing ------------------------------------------------------------------------------------


def _native(b: PodGroupBuilder) -> dict[str, Any]:
    o = b.obj()
    o["metadata"].update(uid="u1", resourceVersion="7", generation=3, creationTimestamp="2024-01-01T00:00:10Z")
    return o


@pytest.mark.parametrize(
    ("builder", "want"),
    [
        pytest.param(
            make_pod_group("g", "ns", min_count=4),
            {"api": "native", "min_count": 4, "gang": True, "timeout": None, "topology_key": None},
            id="native-gang",
        ),
        pytest.param(
            make_pod_group("g", "ns").basic(),
            {"api": "native", "min_count": 1, "gang": False},
            id="native-basic-holds-nothing",
        ),
        pytest.param(
            make_pod_group("g", "ns", min_count=2).topology("topology.kubernetes.io/rack"),
            {"topology_key": "topology.kubernetes.io/rack"},
            id="native-topology-constraint",
        ),
        pytest.param(
            make_pod_group("g", "ns", min_count=2).condition("True", "Scheduled", "ok"),
            {"condition": Condition("True", "Scheduled", "ok", "2024-01-01T00:00:00Z"), "initially_scheduled": True},
            id="native-condition-read",
        ),
        pytest.param(
            make_crd_pod_group("g", "ns", min_member=3).timeout(60).min_resources(cpu="2", memory="1Gi"),
            {
                "api": "crd",
                "min_count": 3,
                "gang": True,
                "timeout": 60.0,
                "min_resources": Resources(milli_cpu=2000, memory=2**30),
                "topology_key": None,
            },
            id="crd-full",
        ),
        pytest.param(make_crd_pod_group("g", "ns", min_member=0), {"min_count": 1}, id="crd-minMember-0-means-1"),
        pytest.param(make_crd_pod_group("g", "ns").set("spec", {}), {"min_count": 1}, id="crd-empty-spec"),
        pytest.param(
            make_crd_pod_group("g", "ns", min_member=2).phase("Running"), {"phase": "Running"}, id="crd-phase"
        ),
    ],
)
def test_parse(builder: PodGroupBuilder, want: dict[str, Any]) -> None:
    doc = _native(builder)
    got = gang.parse_crd(doc) if builder.crd else gang.parse_native(doc)
    assert isinstance(got, PodGroup), got
    assert (got.key, got.uid, got.resource_version, got.generation) == ("ns/g", "u1", "7", 3)
    assert got.creation_time == 1704067210.0
    for field, value in want.items():
        assert getattr(got, field) == value, field


@pytest.mark.parametrize(
    ("builder", "why"),
    [
        pytest.param(make_pod_group("g").set("spec", None), "spec must be an object", id="native-no-spec"),
        pytest.param(
            make_pod_group("g").set("spec.schedulingPolicy", {}),
            "exactly one of basic, gang",
            id="native-no-policy-member",
        ),
        pytest.param(
            make_pod_group("g").set("spec.schedulingPolicy", {"basic": {}, "gang": {"minCount": 1}}),
            "exactly one of basic, gang",
            id="native-both-policies",
        ),
        pytest.param(make_pod_group("g", min_count=0), "minCount must be an int32 >= 1", id="native-minCount-0"),
        pytest.param(
            make_pod_group("g").set("spec.schedulingPolicy.gang.minCount", "3"),
            "minCount must be an int32 >= 1",
            id="native-minCount-string",
        ),
        pytest.param(
            make_pod_group("g").set("spec.schedulingPolicy.gang.minCount", True),
            "minCount must be an int32 >= 1",
            id="native-minCount-bool",
        ),
        pytest.param(
            make_pod_group("g").set("spec.schedulingConstraints", {"topology": [{"key": ""}]}),
            "topology[0].key",
            id="native-empty-topology-key",
        ),
        pytest.param(make_pod_group("g").set("status", []), "status must be an object", id="native-status-list"),
        pytest.param(make_pod_group("").set("metadata.name", ""), "metadata.namespace and metadata.name", id="no-name"),
        pytest.param(make_crd_pod_group("g", min_member=-1), "minMember must be a non-negative int32", id="crd-neg"),
        pytest.param(
            make_crd_pod_group("g").timeout(0), "scheduleTimeoutSeconds must be a positive int32", id="crd-t0"
        ),
        pytest.param(
            make_crd_pod_group("g").set("spec.minResources", {"cpu": "lots"}),
            "spec.minResources",
            id="crd-bad-quantity",
        ),
        pytest.param(
            make_crd_pod_group("g").set("spec.minResources", ["cpu"]),
            "spec.minResources must be a map",
            id="crd-resources-list",
        ),
    ],
)
def test_parse_malformed_is_a_value_and_the_projection_raises_only_malformed(
    builder: PodGroupBuilder, why: str
) -> None:
    """Bad objects come back as a GroupError naming the object and field; the informer projection
    turns that into MalformedObject (which the informer logs once and skips), nothing else."""
    doc = builder.obj()
    got = gang.parse_crd(doc) if builder.crd else gang.parse_native(doc)
    assert isinstance(got, GroupError), got
    assert why in got.why
    project = gang.crd_from_json if builder.crd else gang.native_from_json
    with pytest.raises(MalformedObject, match="podgroup "):
        project(doc)


@pytest.mark.parametrize("doc", [None, [], "x", 3], ids=["none", "list", "str", "int"])
def test_parse_non_objects(doc: Any) -> None:
    assert isinstance(gang.parse_native(doc), GroupError)
    assert isinstance(gang.parse_crd(doc), GroupError)


# -- membership ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("pod", "key", "api"),
    [
        pytest.param(make_pod("p", "ns"), None, None, id="no-group"),
        pytest.param(make_pod("p", "ns").scheduling_group("g"), "ns/g", "native", id="native-field"),
        pytest.param(make_pod("p", "ns").pod_group_label("g"), "ns/g", "crd", id="crd-label"),
        pytest.param(
            make_pod("p", "ns").scheduling_group("a").pod_group_label("b"), "ns/a", "native", id="native-field-wins"
        ),
        pytest.param(make_pod("p", "ns").pod_group_label(""), None, None, id="empty-label"),
    ],
)
def test_group_of(pod: Any, key: str | None, api: str | None) -> None:
    p = pod.build()
    assert gang.group_of(p) == key
    assert gang.api_of(p) == api


def test_group_name_of_wrong_type_is_malformed_pod() -> None:
    doc = make_pod("p", "ns").obj()
    doc["spec"]["schedulingGroup"] = {"podGroupName": 7}
    doc["metadata"]["uid"] = "u"
    with pytest.raises(MalformedObject, match="pod_group"):
        pod_from_json(doc)


# -- the all-or-nothing rule ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("min_count", "already", "placed", "remaining", "satisfied", "message"),
    [
        pytest.param(3, 0, 3, 0, True, "", id="all-placed-in-cycle"),
        pytest.param(3, 1, 2, 0, True, "", id="with-members-placed-before"),
        pytest.param(3, 0, 2, 1, False, "minCount (3) is not yet satisfied: 2 scheduled, 1 remaining", id="may-still"),
        pytest.param(3, 0, 1, 1, False, "minCount (3) cannot be satisfied: 1 scheduled, 1 remaining", id="hopeless"),
        pytest.param(2, 0, 5, 0, True, "", id="above-minCount"),
    ],
)
def test_placement_verdict(
    min_count: int, already: int, placed: int, remaining: int, satisfied: bool, message: str
) -> None:
    g = make_pod_group("g", min_count=min_count).build()
    v = gang.placement_verdict(g, already_placed=already, placed=placed, remaining=remaining)
    assert (v.satisfied, v.message, v.scheduled) == (satisfied, message, already + placed)


def test_basic_group_is_satisfied_by_one() -> None:
    g = make_pod_group("g").basic().build()
    assert gang.placement_verdict(g, already_placed=0, placed=1).satisfied
    assert not gang.placement_verdict(g, already_placed=0, placed=0).satisfied


def test_gang_satisfied_counts_a_member_once() -> None:
    g = make_pod_group("g", min_count=3).build()
    assert not gang.gang_satisfied(g, {"a", "b"}, frozenset({"b"}))
    assert gang.gang_satisfied(g, {"a", "b"}, frozenset({"c"}))


# -- status documents ---------------------------------------------------------------------------

NOW = "2025-06-01T00:00:00Z"


@pytest.mark.parametrize(
    ("builder", "outcome", "message", "want"),
    [
        pytest.param(
            make_pod_group("g", min_count=2),
            "scheduled",
            "",
            {"status": "True", "reason": "Scheduled", "lastTransitionTime": NOW},
            id="first-success",
        ),
        pytest.param(
            make_pod_group("g", min_count=2),
            "unschedulable",
            "0/3 nodes are available",
            {"status": "False", "reason": "Unschedulable", "message": "0/3 nodes are available"},
            id="rejected",
        ),
        pytest.param(
            make_pod_group("g", min_count=2),
            "error",
            "boom",
            {"status": "False", "reason": "SchedulerError"},
            id="error",
        ),
        pytest.param(
            make_pod_group("g", min_count=2).condition("True", "Scheduled"),
            "unschedulable",
            "x",
            None,
            id="never-regresses-from-true",
        ),
        pytest.param(
            make_pod_group("g", min_count=2).condition("False", "Unschedulable", "x"),
            "unschedulable",
            "x",
            None,
            id="same-condition-no-write",
        ),
        pytest.param(
            make_pod_group("g", min_count=2).condition("False", "Unschedulable", "x", ts="2024-05-05T00:00:00Z"),
            "unschedulable",
            "y",
            {"message": "y", "lastTransitionTime": "2024-05-05T00:00:00Z"},
            id="message-change-keeps-transition-time",
        ),
    ],
)
def test_native_condition(builder: PodGroupBuilder, outcome: Any, message: str, want: dict[str, Any] | None) -> None:
    g = builder.build()
    got = gang.native_condition(g, outcome, message, NOW)
    if want is None:
        assert got is None
        return
    assert got is not None
    assert got["type"] == "PodGroupInitiallyScheduled"
    assert got["observedGeneration"] == g.generation
    for k, v in want.items():
        assert got[k] == v, k


@pytest.mark.parametrize(
    ("min_member", "counts", "kw", "phase"),
    [
        pytest.param(3, MemberCounts(3, 0, 0), {}, "Pending", id="nothing-placed"),
        pytest.param(3, MemberCounts(3, 0, 0), {"in_cycle": True}, "Scheduling", id="attempting"),
        pytest.param(3, MemberCounts(3, 3, 0), {}, "Scheduled", id="placed"),
        pytest.param(3, MemberCounts(4, 4, 3), {}, "Running", id="running"),
        pytest.param(3, MemberCounts(3, 1, 0), {"rejected": True}, "Unknown", id="rejected-partly-placed"),
        pytest.param(3, MemberCounts(3, 0, 0), {"rejected": True}, "Pending", id="rejected-none-placed"),
    ],
)
def test_crd_status(min_member: int, counts: MemberCounts, kw: dict[str, bool], phase: str) -> None:
    g = make_crd_pod_group("g", min_member=min_member).build()
    st = gang.crd_status(g, counts, rejected=kw.get("rejected", False), in_cycle=kw.get("in_cycle", False))
    assert st == {"phase": phase, "scheduled": counts.scheduled, "running": counts.running}


def test_count_members() -> None:
    pods = [
        make_pod("a").node("n1").phase("Running").build(),
        make_pod("b").node("n1").build(),
        make_pod("c").uid("assumed").build(),
        make_pod("d").build(),
    ]
    assert gang.count_members(pods, frozenset({"assumed"})) == MemberCounts(4, 3, 1)
