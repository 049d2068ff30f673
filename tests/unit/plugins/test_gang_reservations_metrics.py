"""The reservation gauges: read from the book at scrape time, back to 0 once reservations end."""

from __future__ import annotations

from custom_scheduler.framework.reservations import Reservation, ReservationBook
from custom_scheduler.server.metrics import Metrics

GPU = "nvidia.com/gpu"


def test_reservation_gauges_follow_the_book() -> None:
    metrics = Metrics(process_collectors=False)
    book = ReservationBook()
    metrics.track_reservations(book.summary)
    assert metrics.sample("custom_scheduler_gang_reservations", {"profile": "p"}) is None
    book.add(Reservation("native:ns/g", "p", "rack=a", {"n1": {GPU: 8}, "n2": {GPU: 8, "pods": 1}}, 50.0, 0.0, 600.0))
    assert metrics.sample("custom_scheduler_gang_reservations", {"profile": "p"}) == 1
    capacity = "custom_scheduler_gang_reserved_capacity"
    assert metrics.sample(capacity, {"profile": "p", "resource": GPU}) == 16
    assert metrics.sample(capacity, {"profile": "p", "resource": "pods"}) == 1
    book.end("native:ns/g")
    assert metrics.sample("custom_scheduler_gang_reservations", {"profile": "p"}) == 0
    assert metrics.sample(capacity, {"profile": "p", "resource": GPU}) == 0


def test_a_failing_source_costs_only_these_families() -> None:
    metrics = Metrics(process_collectors=False)

    def broken() -> dict[str, tuple[int, dict[str, int]]]:
        raise RuntimeError("boom")

    metrics.track_reservations(broken)
    assert metrics.sample("custom_scheduler_gang_reservations", {"profile": "p"}) is None
    assert metrics.sample("custom_scheduler_leader") == 0
