"""Fuzzed PodGroup JSON of both APIs (hypothesis): the parsers, the informer projections and
GangScheduling's entry points never raise anything but a clear :class:`GroupError` value /
:class:`MalformedObject` (issue #28 "never crashes the daemon").

A conversion webhook, an aggregated API or an older CRD can send what validation would refuse;
the informer path must skip such an object with a message, and whatever does parse must go
through the plugin (PreEnqueue, Permit, the topology request, job-level victims, the domain
plan) without an exception.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, cast

import pytest
from hypothesis import HealthCheck, given, settings

from custom_scheduler.api import podgroup as gang
from custom_scheduler.api.model import MalformedObject, Pod
from custom_scheduler.api.podgroup import GroupError, PodGroup
from custom_scheduler.framework import gang_topology as topo
from custom_scheduler.framework.gang_store import GangStore
from custom_scheduler.framework.interface import Handle
from custom_scheduler.framework.types import CycleState
from custom_scheduler.framework.waiting import WaitingPodMap
from custom_scheduler.plugins import gang_scheduling as gs
from tests.builders import make_crd_pod_group, make_pod, make_pod_group
from tests.unit.api.test_fuzz_input import JUNK, mutated

LEVELS = ("topology.kubernetes.io/zone", "example.com/rack", "kubernetes.io/hostname")
NODES: Sequence[tuple[str, Mapping[str, str]]] = [
    ("n1", {"topology.kubernetes.io/zone": "a", "example.com/rack": "r1", "kubernetes.io/hostname": "n1"}),
    ("n2", {"topology.kubernetes.io/zone": "a", "example.com/rack": "r2"}),
    ("n3", {}),
]


def _native() -> dict[str, Any]:
    g = make_pod_group("g", "ns", min_count=3).topology("example.com/rack").set("spec.priority", 5)
    g = g.set("spec.disruptionMode", {"all": {}})
    return g.set("metadata.annotations", {gang.ANN_TOPOLOGY_PREFERRED: "kubernetes.io/hostname"}).obj()


def _crd() -> dict[str, Any]:
    g = make_crd_pod_group("g", "ns", min_member=2).timeout(30).min_resources(cpu="2")
    annotations = {gang.KUEUE_TOPOLOGY_REQUIRED: "topology.kubernetes.io/zone", gang.ANN_TOPOLOGY_PREFERRED: "x/y"}
    return g.set("metadata.annotations", annotations).obj()


class _Handle:
    def __init__(self, store: GangStore) -> None:
        self.gangs = store
        self.waiting_pods = WaitingPodMap(clock=lambda: 0.0, timer_thread=False)

    def activate(self, pods: Sequence[Pod]) -> None:
        pass

    def pdbs(self) -> list[Any]:
        return []


def _through_the_plugin(group: PodGroup) -> None:
    """Everything GangScheduling and the domain logic do with a parsed group."""
    store = GangStore()
    store.put(group)
    crd = group.api == gang.CRD
    members = []
    for i in range(3):
        b = make_pod(f"m{i}", group.namespace).uid(f"u{i}").priority(1)
        b = b.pod_group_label(group.name) if crd else b.scheduling_group(group.name)
        if i == 0:
            b = b.node("n1")
        members.append(b.build())
        store.member_added(members[-1])
    for job_level in (False, True):
        plugin = gs.GangScheduling(
            gs.GangSchedulingArgs(topology_levels=LEVELS, job_level_preemption=job_level), cast(Handle, _Handle(store))
        )
        plugin.pre_enqueue(members[1])
        plugin.permit(CycleState(), members[1], "n2")
        key = plugin.group_of(members[1])
        if key is None:
            continue
        plugin.placement_feasible(key, cycle_size=2, tried=1, placed=1)
        req = plugin.topology_request(key)
        if req is not None:
            topo.plan(req, NODES, {"n1"})
        plugin.job_victims(key, make_pod("p").priority(10).build(), [members[0]])


PARSERS: list[tuple[str, Callable[[object], PodGroup | GroupError], Callable[[dict[str, Any]], PodGroup]]] = [
    ("native", gang.parse_native, gang.native_from_json),
    ("crd", gang.parse_crd, gang.crd_from_json),
]


def _check(doc: Any) -> None:
    for _, parse, project in PARSERS:
        got = parse(doc)
        assert isinstance(got, PodGroup | GroupError)
        if isinstance(got, GroupError):
            assert str(got).startswith("podgroup ")
            if isinstance(doc, dict):
                with pytest.raises(MalformedObject):
                    project(doc)
            continue
        _through_the_plugin(got)


FUZZ = settings(max_examples=250, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@FUZZ
@given(mutated(_native))
def test_fuzzed_native_podgroups_never_escape(doc: Any) -> None:
    _check(doc)


@FUZZ
@given(mutated(_crd))
def test_fuzzed_crd_podgroups_never_escape(doc: Any) -> None:
    _check(doc)


@FUZZ
@given(JUNK)
def test_junk_is_a_group_error(doc: Any) -> None:
    _check(doc)


@pytest.mark.parametrize(
    "doc",
    [
        pytest.param(
            make_crd_pod_group("g", "ns", min_member=2).set("spec.minResources", {"cpu": None}).obj(),
            id="null-quantity-in-minResources",
        ),
        pytest.param(make_crd_pod_group("g", "ns").set("spec.minResources", {"cpu": True}).obj(), id="bool-quantity"),
    ],
)
def test_found_by_the_fuzzer(doc: dict[str, Any]) -> None:
    """Examples the fuzzer found escaping the parser (an AttributeError from the quantity parser)."""
    got = gang.parse_crd(doc)
    assert isinstance(got, GroupError)
    assert "spec.minResources.cpu: a quantity must be a string" in got.why


@pytest.mark.parametrize(
    ("doc", "why"),
    [
        pytest.param(
            make_pod_group("g", "ns").set("metadata.annotations", {gang.ANN_TOPOLOGY_REQUIRED: "no spaces"}).obj(),
            "annotation custom-scheduler.io/topology-required must be a node label key",
            id="bad-required-annotation",
        ),
        pytest.param(
            make_pod_group("g", "ns").set("metadata.annotations", {gang.KUEUE_TOPOLOGY_PREFERRED: 3}).obj(),
            "annotation kueue.x-k8s.io/podset-preferred-topology must be a node label key",
            id="non-string-kueue-annotation",
        ),
        pytest.param(
            make_pod_group("g", "ns").set("metadata.annotations", ["x"]).obj(),
            "metadata.annotations must be a map",
            id="annotations-not-a-map",
        ),
        pytest.param(
            make_pod_group("g", "ns").topology("a b").obj(),
            "topology[0].key must be a node label key",
            id="native-key-with-space",
        ),
    ],
)
def test_bad_topology_fields_are_named(doc: dict[str, Any], why: str) -> None:
    got = gang.parse_native(doc)
    assert isinstance(got, GroupError)
    assert why in got.why


@pytest.mark.parametrize(
    ("doc", "required", "preferred"),
    [
        pytest.param(_native(), "example.com/rack", "kubernetes.io/hostname", id="native-key-and-annotation"),
        pytest.param(
            make_pod_group("g", "ns").set("metadata.annotations", {gang.ANN_TOPOLOGY_REQUIRED: "a/b"}).obj(),
            "a/b",
            None,
            id="native-annotation-only",
        ),
        pytest.param(
            make_pod_group("g", "ns")
            .topology("example.com/rack")
            .set("metadata.annotations", {gang.ANN_TOPOLOGY_REQUIRED: "a/b"})
            .obj(),
            "example.com/rack",
            None,
            id="native-key-wins",
        ),
    ],
)
def test_topology_levels_are_read(doc: dict[str, Any], required: str, preferred: str | None) -> None:
    got = gang.parse_native(doc)
    assert isinstance(got, PodGroup)
    assert (got.topology_required, got.topology_preferred) == (required, preferred)


def test_crd_reads_kueue_annotation_names() -> None:
    got = gang.parse_crd(_crd())
    assert isinstance(got, PodGroup)
    assert (got.topology_required, got.topology_preferred) == ("topology.kubernetes.io/zone", "x/y")
