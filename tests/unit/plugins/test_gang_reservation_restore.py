"""Reservations written on the PodGroup and rebuilt by a new leader (issue #28, item 3): the
annotation written when a gang reserves and removed when the reservation ends, the book rebuilt
from the annotations, and the writer's coalescing, retries and fence."""

from __future__ import annotations

import threading
import time
from typing import Any, cast

import pytest
from structlog.testing import capture_logs

from custom_scheduler.api.model import Pod
from custom_scheduler.framework import reservation_annotation as ra
from custom_scheduler.framework import reservations as rv
from custom_scheduler.framework.fence import Fence
from custom_scheduler.framework.gang_store import GangStore
from custom_scheduler.framework.interface import Handle
from custom_scheduler.framework.types import CycleState
from custom_scheduler.kube import api_errors
from custom_scheduler.plugins import gang_reservations as gr
from custom_scheduler.plugins import gang_scheduling as gs
from custom_scheduler.plugins.gang_reservation_writes import ReservationWrites, podgroup_path
from tests.builders import make_pod, make_pod_group
from tests.unit.plugins.test_gang_reservations import GPU, GROUP, _gpu_pod, _Handle, _node, _reserve, _setup

PATH = "/apis/scheduling.k8s.io/v1beta1/namespaces/ns/podgroups/g"


class _Client:
    """Records patches; ``fail`` holds the errors the next patches raise, in order."""

    def __init__(self, *fail: Exception) -> None:
        self.fail = list(fail)
        self.patches: list[tuple[str, Any, float]] = []
        self.lock = threading.Lock()

    def patch(self, path: str, body: Any, **_: Any) -> dict[str, Any]:
        with self.lock:
            self.patches.append((path, body, time.monotonic()))
            if self.fail:
                raise self.fail.pop(0)
        return {}


def _values(c: _Client) -> list[str | None]:
    return [body["metadata"]["annotations"][ra.ANNOTATION] for _, body, _ in c.patches]


def _writing(pl: gs.GangScheduling, h: _Handle, client: _Client) -> ReservationWrites:
    """Give the test Handle an API client and a fence held by ``leader-1``; the plugin writes."""
    h.client = client  # type: ignore[attr-defined]
    h.fence = Fence()  # type: ignore[attr-defined]
    h.fence.holder = "leader-1"  # type: ignore[attr-defined]
    pl.reservations.writes = ReservationWrites(h, interval=0.0, retry_base=0.01)
    return pl.reservations.writes


# -- written and removed ------------------------------------------------------------------------------


def _expire(pl: gs.GangScheduling, clock: Any) -> None:
    clock.now += 61
    pl.reservations.sweep()


@pytest.mark.parametrize(
    "end",
    [
        pytest.param(lambda pl, clock: pl.group_attempted(GROUP, "scheduled", "", []), id="gang-placed"),
        pytest.param(_expire, id="expired"),
    ],
)
def test_the_annotation_is_written_when_reserving_and_removed_when_it_ends(end: Any) -> None:
    pl, h, clock, _ = _setup()
    client = _Client()
    writes = _writing(pl, h, client)
    _reserve(pl, clock)
    assert writes.flush()
    r = pl.gangs.reservations.get(GROUP)
    assert r is not None
    ((path, _, _),) = client.patches
    assert path == PATH
    rec = ra.decode(_values(client)[0] or "")
    assert isinstance(rec, ra.Record)
    assert rec.holder == "leader-1"
    assert rec.amounts == {"n1": {GPU: 8, "pods": 1}}
    assert (rec.expected_start, rec.expires) == (r.expected_start, r.expires)
    end(pl, clock)
    assert writes.flush()
    assert _values(client)[1:] == [None]


def test_offline_nothing_is_written() -> None:
    """No API client (explain, simulate, shadow mode): the writer does nothing, starts no thread."""
    pl, _h, clock, _ = _setup()
    _reserve(pl, clock)
    assert pl.reservations.writes.pending() == {}
    assert pl.reservations.writes.results == []


# -- rebuilt on start ---------------------------------------------------------------------------------


def _written(start: float, expires: float, holder: str = "old-leader") -> str:
    r = rv.Reservation(GROUP, "p", "the whole cluster", {"n1": {GPU: 8, "pods": 1}}, start, 990.0, expires)
    return ra.encode(r, holder)


def _restarted(
    annotation: str | None, *, min_count: int = 1, bound: bool = False, basic: bool = False, gone: bool = False
) -> Any:
    """A new leader's plugin over the setup's nodes, whose store has the gang's PodGroup carrying
    ``annotation`` (and its member, bound to n2 when ``bound``, deleted when ``gone``)."""
    pl, h, clock, timers = _setup()
    b = make_pod_group("g", "ns", min_count=min_count)
    if basic:
        b = b.basic()
    if annotation is not None:
        b = b.set("metadata.annotations", {ra.ANNOTATION: annotation})
    h.gangs.put(b.build())
    if bound:
        member = make_pod("m0", "ns").uid("m0").req_named({GPU: "8"}).scheduling_group("g")
        h.gangs.member_updated(h.gangs.members(h.gangs.groups()[0])[0], member.node("n2").build())
    if gone:
        h.gangs.member_deleted(h.gangs.members(h.gangs.groups()[0])[0])
    client = _Client()
    _writing(pl, h, client)
    return pl, h, clock, timers, client


@pytest.mark.parametrize(
    ("annotation", "kw", "restored", "removed", "logged"),
    [
        pytest.param(_written(1040.0, 1600.0), {}, True, False, "", id="in-force"),
        pytest.param(_written(rv.NEVER, 1600.0), {}, True, False, "", id="unknown-expected-start"),
        pytest.param(_written(1040.0, 1000.0), {}, False, True, "", id="expired"),
        pytest.param(_written(1040.0, 1600.0), {"bound": True}, False, True, "", id="gang-already-placed"),
        pytest.param(_written(1040.0, 1600.0), {"basic": True}, False, True, "", id="no-longer-a-gang"),
        pytest.param(_written(1040.0, 1600.0), {"gone": True}, False, True, "", id="no-member-waits"),
        pytest.param("{not json", {}, False, False, "not JSON", id="malformed"),
        pytest.param('{"owner": "kueue"}', {}, False, False, "version must be 1", id="foreign"),
        pytest.param(None, {}, False, False, "", id="none-written"),
    ],
)
def test_a_new_leader_rebuilds_the_book_from_the_annotations(
    annotation: str | None, kw: dict[str, Any], restored: bool, removed: bool, logged: str
) -> None:
    pl, _h, _clock, timers, client = _restarted(annotation, **kw)
    with capture_logs() as logs:
        assert pl.pre_filter(CycleState(), _gpu_pod("s", 1), []).is_success == restored  # the first cycle
    r = pl.gangs.reservations.get(GROUP)
    assert (r is not None) == restored
    if r is not None:
        assert dict(r.amounts) == {"n1": {GPU: 8, "pods": 1}}
        assert (r.created, r.expires) == (990.0, 1600.0)
        assert sorted(d for d, _ in timers)[-1] == 600.0, "the expiry sweep is scheduled"
    assert pl.reservations.writes.flush()
    assert _values(client) == ([None] if removed else [])
    warned = [e for e in logs if e["event"] == "gang_reservation_annotation_ignored"]
    assert bool(warned) == bool(logged)
    if logged:
        assert logged in warned[0]["why"]
    assert pl.reservations.restore() == [], "once per process"


def test_a_rebuilt_reservation_keeps_short_pods_off_with_the_daemons_reason() -> None:
    """After a restart a pod without a declared runtime is kept off the reserved node, with the
    reason the old leader gave; one whose runtime ends before the expected start backfills."""
    pl, h, clock, _ = _setup()
    _reserve(pl, clock)
    before = pl.gangs.reservations.get(GROUP)
    assert before is not None
    said = pl.filter(CycleState(), _gpu_pod("s", 1), h.nodes["n1"]).message
    pg = pl.gangs.groups()[0]
    annotated = make_pod_group("g", "ns").set("metadata.annotations", {ra.ANNOTATION: ra.encode(before, "x")})

    store = GangStore()  # the new process: same cluster, empty book
    store.put(annotated.build())
    store.member_added(pl.gangs.members(pg)[0])
    h2 = _Handle(store, h.nodes)
    pl2 = gs.GangScheduling(pl.args, cast(Handle, h2))
    pl2.reservations = gr.GangReservations(
        pl.args.reservation, cast(Handle, h2), pl2._group, pl2.topology_request, clock=clock, schedule=lambda d, f: None
    )
    assert not pl2.reservations.idle()
    st = pl2.filter(CycleState(), _gpu_pod("s", 1), h.nodes["n1"])
    assert not st.is_success
    assert st.message == said
    assert pl2.filter(CycleState(), _gpu_pod("short", 1, "5s"), h.nodes["n1"]).is_success
    member: Pod = pl.gangs.members(pg)[0]
    assert pl2.filter(CycleState(), member, _node("n1")).is_success, "the gang itself is not kept off"


# -- the writer -----------------------------------------------------------------------------------------


def _writer(client: _Client | None, *, fence: Fence | None = None, interval: float = 0.0) -> ReservationWrites:
    handle = type("H", (), {"client": client, "fence": fence or Fence()})()
    return ReservationWrites(handle, interval=interval, retry_base=0.01)


@pytest.mark.parametrize(
    ("fail", "outcomes", "patches"),
    [
        pytest.param((), ["written"], 1, id="written"),
        pytest.param(
            (api_errors.ServerError(500, "InternalError"), api_errors.TransportError("reset")),
            ["failed", "failed", "written"],
            3,
            id="retried-until-written",
        ),
        pytest.param((api_errors.ApiError(403, "Forbidden"),), ["failed", "written"], 2, id="rbac-retried"),
        pytest.param((api_errors.NotFound(404, "NotFound"),), ["gone"], 1, id="podgroup-gone"),
        pytest.param((api_errors.ApiError(422, "Invalid"),), ["refused"], 1, id="refused-not-retried"),
    ],
)
def test_writer_retries_failures_and_never_raises(
    fail: tuple[Exception, ...], outcomes: list[str], patches: int
) -> None:
    client = _Client(*fail)
    w = _writer(client)
    w.put(GROUP, "v")
    assert w.flush()
    assert [o for _, o in w.results] == outcomes
    assert len(client.patches) == patches


def test_writer_writes_nothing_once_leadership_is_lost() -> None:
    fence = Fence()
    fence.revoke("lost")
    client = _Client()
    w = _writer(client, fence=fence)
    w.put(GROUP, "v")
    assert w.flush()
    assert w.results == [(GROUP, "fenced")]
    assert client.patches == []


def test_writer_coalesces_per_group_and_is_rate_limited() -> None:
    """The latest wish per group wins; patches are at least ``interval`` apart."""
    client = _Client()
    w = _writer(client, interval=0.2)
    w.put("native:ns/a", "1")
    w.put("crd:ns/b", "x")
    w.put("crd:ns/b", "y")
    w.put("crd:ns/b", None)
    assert w.flush()
    assert [(p, b["metadata"]["annotations"][ra.ANNOTATION]) for p, b, _ in client.patches] == [
        ("/apis/scheduling.k8s.io/v1beta1/namespaces/ns/podgroups/a", "1"),
        ("/apis/scheduling.x-k8s.io/v1alpha1/namespaces/ns/podgroups/b", None),
    ]
    assert client.patches[1][2] - client.patches[0][2] >= 0.19


@pytest.mark.parametrize("key", ["ns/g", "native:g", "other:ns/g", "crd:/g"])
def test_a_malformed_group_key_has_no_path(key: str) -> None:
    assert podgroup_path(key) is None
