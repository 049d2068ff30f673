"""Metrics: kube-scheduler's names and buckets, independent registries, the Observer hooks."""

from __future__ import annotations

import pytest

from custom_scheduler.core.queue import SchedulingQueue
from custom_scheduler.core.scheduler import Observer
from custom_scheduler.server.metrics import ATTEMPT_BUCKETS, QUEUES, Metrics, MetricsObserver
from tests.builders import make_pod

#: Every family the daemon exports, as it appears in the text exposition.
FAMILIES = (
    "scheduler_schedule_attempts_total",
    "scheduler_scheduling_attempt_duration_seconds",
    "scheduler_pending_pods",
    "scheduler_preemption_attempts_total",
    "scheduler_preemption_victims",
    "scheduler_framework_extension_point_duration_seconds",
    "scheduler_plugin_execution_duration_seconds",
    "custom_scheduler_binding_duration_seconds",
    "custom_scheduler_bind_retries_total",
    "custom_scheduler_watch_restarts_total",
    "custom_scheduler_relists_total",
    "custom_scheduler_events_dropped_total",
    "custom_scheduler_leader",
    "custom_scheduler_config_reload_failures_total",
)


@pytest.fixture
def metrics() -> Metrics:
    return Metrics(process_collectors=False)


def test_every_family_is_described_in_the_exposition(metrics: Metrics) -> None:
    """/metrics lists every family (HELP and TYPE lines) even before anything happened."""
    body, content_type = metrics.render()
    text = body.decode()
    assert content_type.startswith("text/plain")
    for family in FAMILIES:
        assert f"# TYPE {family} " in text, family
    for queue in QUEUES:
        assert f'scheduler_pending_pods{{queue="{queue}"}} 0.0' in text
    assert "custom_scheduler_leader 0.0" in text


def test_observer_is_a_scheduler_observer(metrics: Metrics) -> None:
    """``observer()`` plugs into ``core.scheduler.Scheduler(observer=...)``."""
    obs = metrics.observer()
    assert isinstance(obs, Observer)
    assert isinstance(obs, MetricsObserver)


def test_attempt_counts_and_times_by_result_and_profile(metrics: Metrics) -> None:
    obs = metrics.observer()
    obs.attempt("custom-scheduler", "scheduled", 0.003)
    obs.attempt("custom-scheduler", "scheduled", 0.5)
    obs.attempt("custom-scheduler", "unschedulable", 0.002)
    obs.attempt("binpack", "error", 0.001)

    def count(result: str, profile: str = "custom-scheduler") -> float | None:
        return metrics.sample("scheduler_schedule_attempts_total", {"result": result, "profile": profile})

    assert count("scheduled") == 2
    assert count("unschedulable") == 1
    assert count("error", "binpack") == 1
    hist = "scheduler_scheduling_attempt_duration_seconds"
    labels = {"result": "scheduled", "profile": "custom-scheduler"}
    assert metrics.sample(f"{hist}_count", labels) == 2
    assert metrics.sample(f"{hist}_sum", labels) == pytest.approx(0.503)
    assert metrics.sample(f"{hist}_bucket", {**labels, "le": "0.004"}) == 1
    assert metrics.sample(f"{hist}_bucket", {**labels, "le": "+Inf"}) == 2


def test_bound_records_latency_and_retries(metrics: Metrics) -> None:
    obs = metrics.observer()
    obs.bound("custom-scheduler", 0.02, 0)
    obs.bound("custom-scheduler", 0.3, 2)
    labels = {"profile": "custom-scheduler"}
    assert metrics.sample("custom_scheduler_binding_duration_seconds_count", labels) == 2
    assert metrics.sample("custom_scheduler_bind_retries_total", labels) == 2


def test_pending_sets_every_queue_and_zeroes_missing_ones(metrics: Metrics) -> None:
    """A sub-queue missing from the counts reads 0, not its stale previous value."""
    obs = metrics.observer()
    obs.pending({"active": 3, "backoff": 2, "unschedulable": 1})
    assert metrics.sample("scheduler_pending_pods", {"queue": "active"}) == 3
    assert metrics.sample("scheduler_pending_pods", {"queue": "backoff"}) == 2
    obs.pending({"active": 0})
    for queue in QUEUES:
        assert metrics.sample("scheduler_pending_pods", {"queue": queue}) == 0


def test_tracked_queue_sizes_are_read_at_scrape_time(metrics: Metrics) -> None:
    """With ``track_pending`` the gauge follows the queue without anyone calling ``pending``."""
    sizes = {"active": 1, "backoff": 0, "unschedulable": 0}
    metrics.track_pending(lambda: sizes)
    assert 'scheduler_pending_pods{queue="active"} 1.0' in metrics.render()[0].decode()
    sizes.update(active=0, unschedulable=5)
    text = metrics.render()[0].decode()
    assert 'scheduler_pending_pods{queue="active"} 0.0' in text
    assert 'scheduler_pending_pods{queue="unschedulable"} 5.0' in text
    assert metrics.sample("scheduler_pending_pods", {"queue": "unschedulable"}) == 5


def test_gated_pods_are_reported_apart_from_unschedulable(metrics: Metrics) -> None:
    """A real queue behind the gauge: a gated pod counts as ``gated``, not ``unschedulable``."""
    q = SchedulingQueue(lambda a, b: False, pre_enqueue=lambda p: "SchedulingGates" if p.scheduling_gates else None)
    metrics.track_pending(q.pending_counts)
    q.add(make_pod("gated").uid("g").gates("example.com/a").build())
    q.add(make_pod("free").uid("f").build())
    text = metrics.render()[0].decode()
    assert 'scheduler_pending_pods{queue="gated"} 1.0' in text
    assert 'scheduler_pending_pods{queue="unschedulable"} 0.0' in text
    assert 'scheduler_pending_pods{queue="active"} 1.0' in text
    q.update(make_pod("gated").uid("g").build())
    assert metrics.sample("scheduler_pending_pods", {"queue": "gated"}) == 0
    assert metrics.sample("scheduler_pending_pods", {"queue": "active"}) == 2


def test_attempt_histogram_uses_kube_scheduler_buckets() -> None:
    """1 ms x 2^k, 15 buckets: 0.001 … 16.384 s."""
    assert len(ATTEMPT_BUCKETS) == 15
    assert ATTEMPT_BUCKETS[0] == pytest.approx(0.001)
    assert ATTEMPT_BUCKETS[-1] == pytest.approx(16.384)


def test_operational_hooks(metrics: Metrics) -> None:
    """Watch restarts, relists, dropped events, leadership, reload failures, preemption, plugins."""
    metrics.watch_restart("pods", "expired")
    metrics.watch_restart("pods", "expired")
    metrics.relist("nodes")
    metrics.event_dropped(3)
    metrics.config_reload_failed()
    metrics.set_leader(True)
    metrics.preemption_attempt(victims=2)
    metrics.extension_point("Filter", "Success", "custom-scheduler", 0.0002)
    metrics.plugin_execution("NodeResourcesFit", "Filter", "Success", 0.00002)
    assert metrics.sample("custom_scheduler_watch_restarts_total", {"resource": "pods", "reason": "expired"}) == 2
    assert metrics.sample("custom_scheduler_relists_total", {"resource": "nodes"}) == 1
    assert metrics.sample("custom_scheduler_events_dropped_total") == 3
    assert metrics.sample("custom_scheduler_config_reload_failures_total") == 1
    assert metrics.sample("custom_scheduler_leader") == 1
    assert metrics.sample("scheduler_preemption_attempts_total") == 1
    assert metrics.sample("scheduler_preemption_victims_bucket", {"le": "2.0"}) == 1
    assert (
        metrics.sample(
            "scheduler_framework_extension_point_duration_seconds_count",
            {"extension_point": "Filter", "status": "Success", "profile": "custom-scheduler"},
        )
        == 1
    )
    assert (
        metrics.sample(
            "scheduler_plugin_execution_duration_seconds_count",
            {"plugin": "NodeResourcesFit", "extension_point": "Filter", "status": "Success"},
        )
        == 1
    )
    metrics.set_leader(False)
    assert metrics.sample("custom_scheduler_leader") == 0


def test_instances_do_not_share_state() -> None:
    """Each Metrics has its own registry: two in-process replicas (or tests) never mix counts."""
    a, b = Metrics(process_collectors=False), Metrics(process_collectors=False)
    a.observer().attempt("p", "scheduled", 0.01)
    assert a.sample("scheduler_schedule_attempts_total", {"result": "scheduled", "profile": "p"}) == 1
    assert b.sample("scheduler_schedule_attempts_total", {"result": "scheduled", "profile": "p"}) is None


def test_process_collectors_are_exported_by_default() -> None:
    text = Metrics().render()[0].decode()
    assert "process_cpu_seconds_total" in text or "python_info" in text
    assert "python_gc_objects_collected_total" in text


def test_openmetrics_when_the_scraper_asks(metrics: Metrics) -> None:
    body, content_type = metrics.render("application/openmetrics-text; version=1.0.0")
    assert content_type.startswith("application/openmetrics-text")
    assert body.rstrip().endswith(b"# EOF")


def test_no_created_series(metrics: Metrics) -> None:
    """kube-scheduler exports no ``_created`` samples; prometheus_client would add one per counter
    and histogram child."""
    metrics.extension_point("Filter", "Success", "custom-scheduler", 0.01)
    metrics.preemption_attempt(2)
    body, _ = metrics.render()
    samples = [line for line in body.decode().splitlines() if line and not line.startswith("#")]
    assert any(line.startswith("scheduler_framework_extension_point_duration_seconds_count") for line in samples)
    assert [line for line in samples if "_created" in line] == []
