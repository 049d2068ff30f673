"""GangScheduling's reservations: args, when a gang reserves, Filter's backfill rule, ending."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, cast

import pytest

from custom_scheduler.api import podgroup as gang
from custom_scheduler.api.model import Pod
from custom_scheduler.config.render import args_to_dict
from custom_scheduler.errors import ConfigError
from custom_scheduler.framework.cluster_events import ASSIGNED_POD_DELETE
from custom_scheduler.framework.gang_store import GangStore
from custom_scheduler.framework.interface import Handle
from custom_scheduler.framework.reservations import RUNTIME_ANNOTATION
from custom_scheduler.framework.types import CycleState, NodeInfo
from custom_scheduler.plugins import gang_hints
from custom_scheduler.plugins import gang_reservations as gr
from custom_scheduler.plugins import gang_scheduling as gs
from tests.builders import make_node, make_pod, make_pod_group

GPU = "nvidia.com/gpu"
GROUP = "native:ns/g"


class _Handle:
    """What reservations use of the Handle: the store, the nodes, activate and events."""

    profile_name = "p"

    def __init__(self, store: GangStore, nodes: dict[str, NodeInfo]) -> None:
        self.gangs = store
        self.nodes = nodes
        self.activated: list[list[str]] = []
        self.events: list[tuple[str, str]] = []

    def snapshot_nodes(self) -> list[NodeInfo]:
        return list(self.nodes.values())

    def get_node(self, name: str) -> NodeInfo | None:
        return self.nodes.get(name)

    def activate(self, pods: Sequence[Pod]) -> None:
        self.activated.append(sorted(p.name for p in pods))

    def record_event(self, obj: Any, *, type_: str, reason: str, action: str, note: str, **_: Any) -> None:
        if reason not in ("FailedScheduling", "Scheduled"):  # GangScheduling's own, tested elsewhere
            self.events.append((reason, note))


def _gpu_pod(name: str, gpus: int, runtime: str | None = None, node: str = "", deadline: int | None = None) -> Pod:
    b = make_pod(name, "ns").uid(name).req_named({GPU: str(gpus)})
    if deadline is not None:
        b = b.active_deadline(deadline)
    if node:
        b = b.node(node)
    pod = b.build()
    if runtime is not None:
        pod.annotations[RUNTIME_ANNOTATION] = runtime
    return pod


def _node(name: str, *pods: Pod) -> NodeInfo:
    ni = NodeInfo(make_node(name).capacity_named({GPU: "8", "cpu": "64", "pods": "110"}).build())
    for p in pods:
        ni.add_pod(p)
    return ni


class _Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def _setup(
    threshold: float = 5.0,
) -> tuple[gs.GangScheduling, _Handle, _Clock, list[tuple[float, Callable[[], None]]]]:
    """Two 8-GPU nodes busy with 1-GPU pods (n1's end in 10 s, n2's declare nothing) and a gang of
    one 8-GPU member pending."""
    store = GangStore()
    store.put(make_pod_group("g", "ns", min_count=1).build())
    member = make_pod("m0", "ns").uid("m0").req_named({GPU: "8"}).scheduling_group("g").build()
    store.member_added(member)
    n1 = _node("n1", *(_gpu_pod(f"a{i}", 1, "10s", "n1") for i in range(8)))
    n2 = _node("n2", *(_gpu_pod(f"b{i}", 1, None, "n2") for i in range(8)))
    h = _Handle(store, {"n1": n1, "n2": n2})
    clock = _Clock()
    timers: list[tuple[float, Callable[[], None]]] = []
    args = gs.GangSchedulingArgs(reservation=gr.ReservationArgs(threshold=threshold, expiry=60.0))
    pl = gs.GangScheduling(args, cast(Handle, h))
    pl.reservations = gr.GangReservations(
        args.reservation,
        cast(Handle, h),
        pl._group,
        pl.topology_request,
        clock=clock,
        schedule=lambda d, f: timers.append((d, f)),
    )
    return pl, h, clock, timers


def _reserve(pl: gs.GangScheduling, clock: _Clock) -> None:
    """Two failed cycles a threshold apart: the second reserves."""
    pl.group_attempted(GROUP, "unschedulable", "", [])
    clock.now += 5
    pl.group_attempted(GROUP, "unschedulable", "", [])
    assert pl.gangs.reservations.get(GROUP) is not None


def test_reserves_after_threshold_in_the_domain_that_frees_first() -> None:
    pl, h, clock, timers = _setup()
    pl.group_attempted(GROUP, "unschedulable", "no room", [])
    assert h.gangs.reservations.empty()
    assert [d for d, _ in timers] == [5.0]  # woken at the threshold
    timers[0][1]()
    assert h.activated == [["m0"]]
    clock.now += 5
    pl.group_attempted(GROUP, "unschedulable", "no room", [])
    r = h.gangs.reservations.get(GROUP)
    assert r is not None
    # n1's pods declare 10 s (started now: they have no startTime), n2's nothing: n1 frees first.
    assert dict(r.amounts) == {"n1": {GPU: 8, "pods": 1}}
    assert r.expected_start == clock.now + 10
    assert h.events[0][0] == "Reserved"
    assert "expected start in 10s" in h.events[0][1]


@pytest.mark.parametrize(
    ("pod", "node", "want_ok"),
    [
        pytest.param(_gpu_pod("s", 1, None), "n1", False, id="no-runtime-rejected"),
        pytest.param(_gpu_pod("s", 1, "5s"), "n1", True, id="backfill-ends-before-start"),
        pytest.param(_gpu_pod("s", 1, "30s"), "n1", False, id="runtime-too-long"),
        pytest.param(_gpu_pod("s", 1, None), "n2", True, id="unreserved-node"),
        pytest.param(
            make_pod("m1", "ns").uid("m1").req_named({GPU: "8"}).scheduling_group("g").build(),
            "n1",
            True,
            id="member-of-the-gang",
        ),
    ],
)
def test_filter_backfill(pod: Pod, node: str, want_ok: bool) -> None:
    pl, h, clock, _ = _setup()
    _reserve(pl, clock)
    clock.now += 1
    st = pl.filter(CycleState(), pod, h.nodes[node])
    assert st.is_success == want_ok
    if not want_ok:
        assert st.plugin == gs.NAME
        assert "reserved for pod group ns/g until" in st.message
        assert pod.uid in h.gangs.reservations.get(GROUP).held_off  # type: ignore[union-attr]


def test_free_capacity_beyond_the_reservation_stays_usable() -> None:
    pl, _h, clock, _ = _setup()
    _reserve(pl, clock)
    # n1 as it is when half of its pods ended: 4 free, 8 reserved -> nothing beyond the reservation.
    ni = _node("n1", *(_gpu_pod(f"a{i}", 1, "10s", "n1") for i in range(4)))
    assert not pl.filter(CycleState(), _gpu_pod("s", 1), ni).is_success
    # A bigger node: 12 free, 8 reserved -> 4 beyond it.
    big = NodeInfo(make_node("n1").capacity_named({GPU: "12", "cpu": "64", "pods": "110"}).build())
    assert pl.filter(CycleState(), _gpu_pod("s", 4), big).is_success
    assert not pl.filter(CycleState(), _gpu_pod("s", 5), big).is_success


def test_ready_reservation_wakes_the_gang() -> None:
    pl, h, clock, _ = _setup()
    _reserve(pl, clock)
    h.nodes["n1"] = _node("n1")  # every pod ended: the reserved 8 GPUs are free
    assert not pl.filter(CycleState(), _gpu_pod("s", 1), h.nodes["n1"]).is_success
    assert h.activated[-1] == ["m0"]


def test_expiry_restarts_the_clock_and_requeues_held_off_pods() -> None:
    pl, h, clock, _ = _setup()
    _reserve(pl, clock)
    assert not pl.filter(CycleState(), _gpu_pod("held", 1), h.nodes["n1"]).is_success
    clock.now += 61
    pl.reservations.sweep()
    assert h.gangs.reservations.empty()
    assert [e[0] for e in h.events] == ["Reserved", "ReservationExpired"]
    assert ["held"] in h.activated
    pl.group_attempted(GROUP, "unschedulable", "", [])
    assert h.gangs.reservations.empty()  # the clock restarted: the threshold runs again
    clock.now += 5
    pl.group_attempted(GROUP, "unschedulable", "", [])
    assert h.gangs.reservations.get(GROUP) is not None


def test_placed_or_deleted_gang_ends_the_reservation() -> None:
    pl, h, clock, _ = _setup()
    _reserve(pl, clock)
    assert not pl.filter(CycleState(), _gpu_pod("held", 1), h.nodes["n1"]).is_success
    pl.group_attempted(GROUP, "scheduled", "", [])
    assert h.gangs.reservations.empty()
    assert ["held"] in h.activated
    # Deleted: Filter meets the reservation of a gang the store no longer has and ends it.
    _reserve(pl, clock)
    h.gangs.delete(make_pod_group("g", "ns", min_count=1).build())
    assert pl.filter(CycleState(), _gpu_pod("s", 1), h.nodes["n1"]).is_success
    assert h.gangs.reservations.empty()


def test_disabled_never_reserves() -> None:
    pl, h, clock, timers = _setup()
    pl.reservations.args = gr.ReservationArgs(enabled=False)
    clock.now += 100
    pl.group_attempted(GROUP, "unschedulable", "", [])
    assert h.gangs.reservations.empty()
    assert not timers


@pytest.mark.parametrize(
    ("raw", "want"),
    [
        pytest.param(None, gr.ReservationArgs(), id="default-on-30s-10m"),
        pytest.param({"threshold": "5s", "expiry": "2m"}, gr.ReservationArgs(True, 5.0, 120.0), id="durations"),
        pytest.param({"enabled": False}, gr.ReservationArgs(enabled=False), id="off"),
        pytest.param(
            {"runtimeAnnotation": "example.com/runtime"},
            gr.ReservationArgs(runtime_annotation="example.com/runtime"),
            id="annotation",
        ),
    ],
)
def test_parse_args(raw: dict[str, Any] | None, want: gr.ReservationArgs) -> None:
    args = gs.parse_args({"reservation": raw} if raw is not None else None, "args")
    assert args.reservation == want


@pytest.mark.parametrize(
    ("raw", "msg"),
    [
        pytest.param(
            {"threshold": 30}, 'args.reservation.threshold: must be a duration string such as "30s"', id="number"
        ),
        pytest.param({"threshold": "soon"}, 'invalid duration "soon"', id="not-a-duration"),
        pytest.param({"threshold": "0s"}, "must be between 1s and 24h", id="zero"),
        pytest.param({"expiry": "5s"}, "args.reservation.expiry: must be between 10s and 24h", id="expiry-short"),
        pytest.param({"enabled": "yes"}, "args.reservation.enabled: must be a boolean", id="enabled-not-bool"),
        pytest.param({"runtimeAnnotation": "bad key!"}, "is not an annotation key", id="annotation"),
        pytest.param({"tresh": "5s"}, "args.reservation.tresh: unknown field", id="typo"),
        pytest.param("yes", "args.reservation: must be an object", id="not-a-mapping"),
    ],
)
def test_parse_args_errors(raw: Any, msg: str) -> None:
    with pytest.raises(ConfigError, match=None) as e:
        gs.parse_args({"reservation": raw}, "args")
    assert msg in str(e.value)


def test_configz_renders_durations() -> None:
    rendered = args_to_dict(gs.parse_args({"reservation": {"threshold": "5s"}}, "args"))
    assert rendered is not None
    assert rendered["reservation"] == {
        "enabled": True,
        "threshold": "5s",
        "expiry": "10m0s",
        "runtimeAnnotation": RUNTIME_ANNOTATION,
    }
    assert gs.parse_args(rendered, "args") == gs.parse_args({"reservation": {"threshold": "5s"}}, "args")


def test_topology_gang_reserves_inside_one_domain_of_its_level() -> None:
    """A gang required in one rack reserves in the rack that frees first, never across racks, and
    leaves out a cordoned node."""
    rack = "example.com/rack"
    store = GangStore()
    pg = make_pod_group("g", "ns", min_count=2)
    pg.set("metadata.annotations", {gang.ANN_TOPOLOGY_REQUIRED: rack})
    store.put(pg.build())
    for i in range(2):
        store.member_added(make_pod(f"m{i}", "ns").uid(f"m{i}").req_named({GPU: "8"}).scheduling_group("g").build())

    def racked(name: str, r: str, runtime: str, *, cordoned: bool = False) -> NodeInfo:
        b = (
            make_node(name)
            .capacity_named({GPU: "8", "cpu": "64", "pods": "110"})
            .label(rack, r)
            .unschedulable(cordoned)
        )
        ni = NodeInfo(b.build())
        for i in range(8):
            ni.add_pod(_gpu_pod(f"{name}-{i}", 1, runtime, name))
        return ni

    # Rack a frees in 50 s, rack b in 20 s, but b's second node is cordoned; c's nodes in 30 s.
    nodes = {
        "a1": racked("a1", "a", "50s"),
        "a2": racked("a2", "a", "50s"),
        "b1": racked("b1", "b", "20s"),
        "b2": racked("b2", "b", "20s", cordoned=True),
        "c1": racked("c1", "c", "30s"),
        "c2": racked("c2", "c", "30s"),
    }
    h = _Handle(store, nodes)
    clock = _Clock()
    args = gs.GangSchedulingArgs(topology_levels=(rack,), reservation=gr.ReservationArgs(threshold=5.0))
    pl = gs.GangScheduling(args, cast(Handle, h))
    pl.reservations = gr.GangReservations(
        args.reservation, cast(Handle, h), pl._group, pl.topology_request, clock=clock, schedule=lambda d, f: None
    )
    r = pl.reservations.reserve(GROUP, clock.now)
    assert r is not None
    assert r.domain == f"{rack}=c"
    assert sorted(r.amounts) == ["c1", "c2"]
    assert r.expected_start == clock.now + 30


@pytest.mark.parametrize(
    ("pod", "want"),
    [
        pytest.param(_gpu_pod("s", 1), "Queue", id="held-off-pod-may-fit-beyond-the-reservation"),
        pytest.param(make_pod("m", "ns").scheduling_group("g").build(), "QueueSkip", id="gang-member"),
    ],
)
def test_assigned_pod_delete_requeues_held_off_pods(pod: Pod, want: str) -> None:
    (reg,) = [r for r in gang_hints.registrations() if r.event == ASSIGNED_POD_DELETE]
    assert reg.hint is not None
    assert reg.hint(pod, _gpu_pod("gone", 1, node="n1"), None).value == want


def test_pre_filter_skips_filter_while_nothing_is_reserved() -> None:
    pl, _, clock, _ = _setup()
    assert pl.pre_filter(CycleState(), _gpu_pod("s", 1), []).is_skip
    _reserve(pl, clock)
    assert pl.pre_filter(CycleState(), _gpu_pod("s", 1), []).is_success


def test_nodes_the_gang_cannot_use_are_never_reserved() -> None:
    """A node free now but outside the member's nodeSelector, or tainted, is left out: the
    reservation goes to the selected node that frees first."""
    store = GangStore()
    store.put(make_pod_group("g", "ns", min_count=1).build())
    member = make_pod("m0", "ns").uid("m0").req_named({GPU: "8"}).node_selector(pool="a").scheduling_group("g").build()
    store.member_added(member)

    def node(name: str, pool: str, *pods: Pod, taint: bool = False) -> NodeInfo:
        b = make_node(name).capacity_named({GPU: "8", "cpu": "64", "pods": "110"}).label("pool", pool)
        ni = NodeInfo((b.taint("dedicated") if taint else b).build())
        for p in pods:
            ni.add_pod(p)
        return ni

    nodes = {
        "other": node("other", "b"),
        "tainted": node("tainted", "a", taint=True),
        "a1": node("a1", "a", *(_gpu_pod(f"x{i}", 1, "20s", "a1") for i in range(8))),
    }
    h = _Handle(store, nodes)
    args = gs.GangSchedulingArgs()
    pl = gs.GangScheduling(args, cast(Handle, h))
    r = pl.reservations.reserve(GROUP, 1000.0)
    assert r is not None
    assert list(r.amounts) == ["a1"]
