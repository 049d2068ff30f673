"""The reservation arithmetic: declared runtimes, the soonest domain, the backfill rule, the book."""

from __future__ import annotations

import math

import pytest

from custom_scheduler.api.model import Pod
from custom_scheduler.framework import reservations as rv
from tests.builders import make_pod

GPU = "nvidia.com/gpu"
NEVER = rv.NEVER


def _pod(runtime: str | None, start: str | None = None) -> Pod:
    b = make_pod("p").req(cpu="1")
    if start is not None:
        b = b.start_time(start)
    pod = b.build()
    if runtime is not None:
        pod.annotations[rv.RUNTIME_ANNOTATION] = runtime
    return pod


@pytest.mark.parametrize(
    ("runtime", "start", "now", "want"),
    [
        pytest.param("30s", "2026-01-01T00:00:00Z", 0.0, 1767225600.0 + 30, id="from-start-time"),
        pytest.param("1m30s", None, 100.0, 190.0, id="not-started-counts-from-now"),
        pytest.param(None, None, 100.0, None, id="no-annotation"),
        pytest.param("soon", None, 100.0, None, id="not-a-duration"),
        pytest.param("0s", None, 100.0, None, id="zero-declares-nothing"),
        pytest.param("-5s", None, 100.0, None, id="negative-declares-nothing"),
    ],
)
def test_declared_end(runtime: str | None, start: str | None, now: float, want: float | None) -> None:
    assert rv.declared_end(_pod(runtime, start), rv.RUNTIME_ANNOTATION, now) == want


def _node(name: str, free: int, *releases: tuple[float, int]) -> rv.NodeOutlook:
    """A node with ``free`` GPUs now and pods of (end, GPUs)."""
    return rv.NodeOutlook(name, {GPU: free}, tuple((at, {GPU: n}) for at, n in releases))


@pytest.mark.parametrize(
    ("demands", "nodes", "domains", "want"),
    [
        pytest.param(
            [8, 8],
            [_node("a1", 0, (50, 8)), _node("a2", 0, (60, 8)), _node("b1", 0, (20, 8)), _node("b2", 0, (30, 8))],
            {"rack=a": ("a1", "a2"), "rack=b": ("b1", "b2")},
            ("rack=b", 30.0, {"b1": 8, "b2": 8}),
            id="domain-that-frees-first",
        ),
        pytest.param(
            [8, 8],
            [_node("a1", 8), _node("a2", 0, (60, 8)), _node("b1", 0, (20, 8)), _node("b2", 0, (NEVER, 8))],
            {"rack=a": ("a1", "a2"), "rack=b": ("b1", "b2")},
            ("rack=a", 60.0, {"a1": 8, "a2": 8}),
            id="undeclared-pod-never-frees",
        ),
        pytest.param(
            [4, 4, 4],
            [_node("n1", 2, (15, 2), (40, 4)), _node("n2", 4, (25, 4)), _node("n3", 0, (NEVER, 8))],
            {"all": ("n1", "n2", "n3")},
            ("all", 25.0, {"n1": 4, "n2": 8}),
            id="packs-across-nodes-at-the-first-time",
        ),
        pytest.param(
            [8],
            [_node("n1", 8), _node("n2", 8)],
            {"wide": ("n1", "n2"), "host=n2": ("n2",)},
            ("host=n2", 0.0, {"n2": 8}),
            id="fits-now-tighter-domain-wins-tie",
        ),
        pytest.param(
            [8, 8],
            [_node("n1", 0, (NEVER, 8)), _node("n2", 0, (NEVER, 8))],
            {"all": ("n1", "n2")},
            ("all", NEVER, {"n1": 8, "n2": 8}),
            id="only-once-undeclared-pods-end",
        ),
        pytest.param([16], [_node("n1", 8), _node("n2", 8)], {"all": ("n1", "n2")}, None, id="never-fits"),
    ],
)
def test_soonest(
    demands: list[int],
    nodes: list[rv.NodeOutlook],
    domains: dict[str, tuple[str, ...]],
    want: tuple[str, float, dict[str, int]] | None,
) -> None:
    got = rv.soonest(
        [{GPU: d} for d in demands],
        [rv.DomainNodes(k, v) for k, v in domains.items()],
        {n.name: n for n in nodes},
        now=0.0,
    )
    if want is None:
        assert got is None
        return
    assert got is not None
    assert (got.domain, got.start, {n: a[GPU] for n, a in got.amounts.items()}) == want


@pytest.mark.parametrize(
    ("demand", "free", "reserved", "pod_end", "start", "want"),
    [
        pytest.param(1, 3, 2, None, 100.0, (True, "beyond the reservation"), id="free-beyond-reservation"),
        pytest.param(1, 2, 2, None, 100.0, (False, ""), id="would-eat-reserved-no-runtime"),
        pytest.param(1, 2, 2, 90.0, 100.0, (True, "backfill"), id="ends-before-start"),
        pytest.param(1, 2, 2, 100.0, 100.0, (True, "backfill"), id="ends-exactly-at-start"),
        pytest.param(1, 2, 2, 101.0, 100.0, (False, ""), id="ends-after-start"),
        pytest.param(1, 2, 2, 5.0, NEVER, (False, ""), id="no-backfill-without-expected-start"),
        pytest.param(1, 0, 0, None, 100.0, (False, ""), id="no-room-at-all"),
    ],
)
def test_admit(
    demand: int, free: int, reserved: int, pod_end: float | None, start: float, want: tuple[bool, str]
) -> None:
    v = rv.admit({GPU: demand}, {GPU: free}, {GPU: reserved}, pod_end, start)
    assert (v.admitted, v.why) == want


def _reservation(group: str, nodes: dict[str, int], start: float = 50.0, expires: float = 100.0) -> rv.Reservation:
    return rv.Reservation(group, "p", "all", {n: {GPU: g} for n, g in nodes.items()}, start, 0.0, expires)


def test_book_by_node_expiry_and_summary() -> None:
    book = rv.ReservationBook()
    assert book.empty()
    a = _reservation("native:ns/a", {"n1": 8, "n2": 4}, start=40.0, expires=100.0)
    b = _reservation("native:ns/b", {"n2": 2}, start=30.0, expires=200.0)
    book.add(a)
    book.add(b)
    assert [r.group for r in book.on_node("n2")] == ["native:ns/a", "native:ns/b"]
    # What n2 holds for anyone but gang a, and the earliest start among those reservations.
    assert rv.reserved_on(book.on_node("n2"), "n2", exempt="native:ns/a") == ({GPU: 2}, 30.0)
    assert rv.reserved_on(book.on_node("n2"), "n2", exempt=None) == ({GPU: 6}, 30.0)
    assert book.summary() == {"p": (2, {GPU: 14})}
    assert [r.group for r in book.expired(now=150.0)] == ["native:ns/a"]
    assert book.end("native:ns/a") is a
    assert book.on_node("n1") == []
    assert book.forget("native:ns/b") is b
    assert book.empty()
    assert book.summary() == {}


def test_book_pending_clock() -> None:
    book = rv.ReservationBook()
    assert book.pending("g", 10.0) == 10.0
    assert book.pending("g", 20.0) == 10.0  # keeps running
    book.restart_clock("g", 30.0)  # after an expiry
    assert book.pending("g", 40.0) == 30.0
    book.forget("g")  # placed
    assert book.pending("g", 50.0) == 50.0


def test_held_off_is_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(rv, "MAX_HELD_OFF", 2)
    book = rv.ReservationBook()
    r = _reservation("g", {"n1": 1})
    book.add(r)
    for i in range(3):
        book.hold_off(r, make_pod(f"p{i}").uid(f"u{i}").build())
    assert sorted(r.held_off) == ["u0", "u1"]


def test_pack_prefers_the_tightest_node() -> None:
    held = rv.pack([{GPU: 2}], {"big": {GPU: 8}, "small": {GPU: 2}})
    assert held == {"small": {GPU: 2}}
    assert rv.pack([{GPU: 4}, {GPU: 4}], {"n": {GPU: 6}}) is None
    assert math.isinf(NEVER)
