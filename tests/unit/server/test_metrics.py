"""Metrics: kube-scheduler's names, help, labels and buckets, independent registries, the Observer,
framework and REST-client hooks, and the families read at scrape time."""

from __future__ import annotations

import prometheus_client as prom
import pytest

from custom_scheduler.core.queue import SchedulingQueue
from custom_scheduler.core.scheduler import Observer
from custom_scheduler.framework.types import Code
from custom_scheduler.server import metric_specs as ms
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
    "scheduler_scheduling_algorithm_duration_seconds",
    "scheduler_pod_scheduling_attempts",
    "scheduler_pod_scheduling_sli_duration_seconds",
    "scheduler_permit_wait_duration_seconds",
    "scheduler_queue_incoming_pods_total",
    "scheduler_unschedulable_pods",
    "scheduler_goroutines",
    "scheduler_plugin_evaluation_total",
    "rest_client_requests_total",
    "rest_client_request_duration_seconds",
    "rest_client_rate_limiter_duration_seconds",
    "leader_election_master_status",
    "leader_election_slowpath_total",
    "go_goroutines",
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
    metrics.observer().preemption("custom-scheduler", victims=2)
    metrics.framework.extension_point("Filter", Code.SUCCESS, "custom-scheduler", 0.0002)
    metrics.framework.plugin_duration("NodeResourcesFit", "Filter", Code.SUCCESS, 0.00002)
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
    assert metrics.sample("leader_election_master_status", {"name": "custom-scheduler"}) == 1
    metrics.set_leader(False)
    assert metrics.sample("custom_scheduler_leader") == 0
    assert metrics.sample("leader_election_master_status", {"name": "custom-scheduler"}) == 0
    metrics.leader_slow_path()
    assert metrics.sample("leader_election_slowpath_total", {"name": "custom-scheduler"}) == 1


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
    metrics.framework.extension_point("Filter", Code.SUCCESS, "custom-scheduler", 0.01)
    metrics.framework.evaluations("Filter", "custom-scheduler", [("NodeResourcesFit", 3)])
    metrics.observer().preemption("custom-scheduler", 2)
    metrics.rest_client.result("GET", "https://10.0.0.1:6443", "200")
    body, _ = metrics.render()
    samples = [line for line in body.decode().splitlines() if line and not line.startswith("#")]
    assert any(line.startswith("scheduler_framework_extension_point_duration_seconds_count") for line in samples)
    assert [line for line in samples if "_created" in line] == []


#: Every STABLE and BETA metric of kube-scheduler 1.37.2 (pkg/scheduler/metrics/metrics.go) with
#: its kind, label names and bucket bounds.
UPSTREAM_STABLE_AND_BETA = [
    ("scheduler_schedule_attempts_total", "counter", ("result", "profile"), None),
    ("scheduler_scheduling_attempt_duration_seconds", "histogram", ("result", "profile"), (0.001, 2, 15)),
    ("scheduler_scheduling_algorithm_duration_seconds", "histogram", (), (0.001, 2, 15)),
    ("scheduler_preemption_victims", "histogram", (), (1, 2, 7)),
    ("scheduler_preemption_attempts_total", "counter", (), None),
    ("scheduler_pending_pods", "gauge", ("queue",), None),
    ("scheduler_goroutines", "gauge", ("operation",), None),
    ("scheduler_pod_scheduling_sli_duration_seconds", "histogram", ("attempts",), (0.01, 2, 20)),
    ("scheduler_pod_scheduling_attempts", "histogram", (), (1, 2, 5)),
    (
        "scheduler_framework_extension_point_duration_seconds",
        "histogram",
        ("extension_point", "status", "profile"),
        (0.0001, 2, 12),
    ),
    (
        "scheduler_plugin_execution_duration_seconds",
        "histogram",
        ("plugin", "extension_point", "status"),
        (0.00001, 1.5, 20),
    ),
    ("scheduler_queue_incoming_pods_total", "counter", ("queue", "event"), None),
    ("scheduler_permit_wait_duration_seconds", "histogram", ("result",), (0.001, 2, 15)),
    ("scheduler_unschedulable_pods", "gauge", ("plugin", "profile"), None),
    ("scheduler_plugin_evaluation_total", "counter", ("plugin", "extension_point", "profile"), None),
]


def _declared() -> dict[
    str, ms.MetricSpec[prom.Counter] | ms.MetricSpec[prom.Gauge] | ms.MetricSpec[prom.Histogram] | ms.FamilySpec
]:
    return {v.name: v for v in vars(ms).values() if isinstance(v, ms.MetricSpec | ms.FamilySpec)}


@pytest.mark.parametrize(("name", "kind", "labels", "buckets"), UPSTREAM_STABLE_AND_BETA, ids=str)
def test_upstream_stable_and_beta_metrics_are_declared_as_upstream(
    name: str, kind: str, labels: tuple[str, ...], buckets: tuple[float, int, int] | None
) -> None:
    """Name, kind, label names, buckets, and the HELP line's stability prefix ([STABLE]/[BETA])."""
    spec = _declared()[name]
    assert spec.labels == labels
    assert spec.help.startswith(("[STABLE] ", "[BETA] "))
    if isinstance(spec, ms.FamilySpec):
        assert spec.kind == kind
        return
    assert {"counter": prom.Counter, "gauge": prom.Gauge, "histogram": prom.Histogram}[kind] is spec.kind
    if buckets is not None:
        assert spec.buckets == pytest.approx(ms.exponential_buckets(*buckets))


def test_the_stability_prefix_is_in_the_exposition(metrics: Metrics) -> None:
    text = metrics.render()[0].decode()
    assert "# HELP scheduler_schedule_attempts_total [STABLE] Number of attempts to schedule pods" in text
    assert "# HELP scheduler_plugin_evaluation_total [BETA] Number of attempts" in text
    assert "# HELP custom_scheduler_leader 1 while" in text


def test_observer_records_the_algorithm_and_what_a_bound_pod_took(metrics: Metrics) -> None:
    """Attempts per pod and the SLI by attempts (capped at "15+"), as upstream records at bind."""
    obs = metrics.observer()
    obs.algorithm(0.004)
    obs.pod_scheduled("custom-scheduler", 1, 0.02)
    obs.pod_scheduled("custom-scheduler", 3, 1.5)
    obs.pod_scheduled("custom-scheduler", 20, 100.0)
    obs.pod_scheduled("custom-scheduler", 2, None)
    assert metrics.sample("scheduler_scheduling_algorithm_duration_seconds_count") == 1
    assert metrics.sample("scheduler_pod_scheduling_attempts_count") == 4
    assert metrics.sample("scheduler_pod_scheduling_attempts_bucket", {"le": "2.0"}) == 2
    sli = "scheduler_pod_scheduling_sli_duration_seconds_count"
    assert metrics.sample(sli, {"attempts": "1"}) == 1
    assert metrics.sample(sli, {"attempts": "3"}) == 1
    assert metrics.sample(sli, {"attempts": "15+"}) == 1
    assert metrics.sample(sli, {"attempts": "2"}) is None
    assert obs.samples_plugins


def test_framework_recorder_labels_codes_as_upstream(metrics: Metrics) -> None:
    fw = metrics.framework
    fw.extension_point("PreFilter", Code.UNSCHEDULABLE_AND_UNRESOLVABLE, "p", 0.001)
    fw.plugin_duration("NodeAffinity", "Filter", Code.UNSCHEDULABLE, 0.0001)
    fw.permit_wait(Code.SUCCESS, 0.5)
    fw.evaluations("Filter", "p", [("NodeAffinity", 10), ("TaintToleration", 0)])
    fw.evaluations("Filter", "p", [("NodeAffinity", 5)])
    point = {"extension_point": "PreFilter", "status": "UnschedulableAndUnresolvable", "profile": "p"}
    assert metrics.sample("scheduler_framework_extension_point_duration_seconds_count", point) == 1
    plugin = {"plugin": "NodeAffinity", "extension_point": "Filter", "status": "Unschedulable"}
    assert metrics.sample("scheduler_plugin_execution_duration_seconds_count", plugin) == 1
    assert metrics.sample("scheduler_permit_wait_duration_seconds_count", {"result": "Success"}) == 1
    evaluated = {"plugin": "NodeAffinity", "extension_point": "Filter", "profile": "p"}
    assert metrics.sample("scheduler_plugin_evaluation_total", evaluated) == 15
    assert metrics.sample("scheduler_plugin_evaluation_total", {**evaluated, "plugin": "TaintToleration"}) is None


def test_queue_families_are_read_at_scrape_time(metrics: Metrics) -> None:
    """A real queue behind scheduler_queue_incoming_pods_total{queue,event} and
    scheduler_unschedulable_pods{plugin,profile}; a plugin's gauge stays at 0 once its pods left."""
    q = SchedulingQueue(lambda a, b: False)
    metrics.track_queue(q.incoming_counts, q.unschedulable_reasons)
    metrics.track_binding(lambda: 2)
    q.add(make_pod("a").uid("a").build())
    q.add(make_pod("b").uid("b").build())
    assert metrics.sample("scheduler_queue_incoming_pods_total", {"queue": "active", "event": "UnscheduledPodAdd"}) == 2
    qpi = q.pop(timeout=0)
    assert qpi is not None
    qpi.unschedulable_plugins = {"NodeResourcesFit", "TaintToleration"}
    q.add_unschedulable_if_not_present(qpi, q.scheduling_cycle)
    incoming = {"queue": "unschedulable", "event": "ScheduleAttemptFailure"}
    assert metrics.sample("scheduler_queue_incoming_pods_total", incoming) == 1
    fit = {"plugin": "NodeResourcesFit", "profile": qpi.pod.scheduler_name}
    assert metrics.sample("scheduler_unschedulable_pods", fit) == 1
    assert metrics.sample("scheduler_unschedulable_pods", {**fit, "plugin": "TaintToleration"}) == 1
    assert metrics.sample("scheduler_goroutines", {"operation": "binding"}) == 2
    q.delete(qpi.pod)
    assert metrics.sample("scheduler_unschedulable_pods", fit) == 0
    assert (metrics.sample("go_goroutines") or 0) >= 1


def test_rest_client_labels_as_client_go(metrics: Metrics) -> None:
    """host is the API server's host:port, method/verb the HTTP method, code the status or <error>."""
    rc = metrics.rest_client
    rc.result("POST", "https://10.0.0.1:6443", "201")
    rc.result("GET", "https://10.0.0.1:6443", "<error>")
    rc.latency("POST", "https://10.0.0.1:6443", 0.02)
    rc.throttled("POST", "https://10.0.0.1:6443", 0.0)
    host = "10.0.0.1:6443"
    assert metrics.sample("rest_client_requests_total", {"code": "201", "method": "POST", "host": host}) == 1
    assert metrics.sample("rest_client_requests_total", {"code": "<error>", "method": "GET", "host": host}) == 1
    assert (
        metrics.sample("rest_client_request_duration_seconds_bucket", {"verb": "POST", "host": host, "le": "0.025"})
        == 1
    )
    assert metrics.sample("rest_client_rate_limiter_duration_seconds_count", {"verb": "POST", "host": host}) == 1


def test_hot_path_observations_are_applied_by_the_next_read(metrics: Metrics) -> None:
    """The scheduling loop's observations wait in a buffer (a deque append instead of a locked
    histogram update) and a scrape applies them first, so it misses none; past the buffer's limit
    the recording thread applies them itself."""
    obs = metrics.observer()
    name = "scheduler_schedule_attempts_total"
    labels = {"result": "scheduled", "profile": "p"}
    obs.attempt("p", "scheduled", 0.01)
    assert metrics.registry.get_sample_value(name, labels) == 0.0  # the child exists; nothing applied yet
    assert metrics.sample(name, labels) == 1.0  # a read applies it
    assert "scheduler_schedule_attempts_total" in metrics.render()[0].decode()
    for _ in range(metrics.deferred.LIMIT):  # two calls each (counter and histogram)
        obs.attempt("p", "scheduled", 0.01)
    assert (metrics.registry.get_sample_value(name, labels) or 0) > 1.0  # flushed without a read
    assert metrics.sample(name, labels) == 1.0 + metrics.deferred.LIMIT
