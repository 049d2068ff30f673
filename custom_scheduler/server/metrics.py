"""Every Prometheus metric of the daemon, in one registry owned by a :class:`Metrics` object.

Names follow kube-scheduler wherever it has one, so existing dashboards and alerts keep working
(../shared/docs/kube-scheduler-reference.md §7.2): ``scheduler_schedule_attempts_total``,
``scheduler_scheduling_attempt_duration_seconds``, ``scheduler_pending_pods``,
``scheduler_preemption_attempts_total``, ``scheduler_preemption_victims``,
``scheduler_framework_extension_point_duration_seconds`` and
``scheduler_plugin_execution_duration_seconds``, with kube-scheduler's labels and buckets.
What kube-scheduler has no name for is prefixed ``custom_scheduler_``: binding latency and retries,
watch restarts and re-lists, dropped events, leadership and config reload failures.

Why a registry per :class:`Metrics` rather than prometheus-client's global one: tests (and two
in-process replicas in the HA tests) each get independent counters, and nothing is registered at
import time (the style guide's "no module-level mutable state except metrics" is met without even
using that exception).

The hooks the scheduling loop calls are the :class:`~custom_scheduler.core.scheduler.Observer`
methods; :meth:`Metrics.observer` returns one bound to this registry. Everything else (informers,
the event writer, the leader elector) gets a bound method such as :meth:`Metrics.watch_restart`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Generic, TypeVar

import prometheus_client as prom
from prometheus_client import exposition
from prometheus_client.metrics import MetricWrapperBase

from custom_scheduler.core.scheduler import Observer


def exponential_buckets(start: float, factor: float, count: int) -> tuple[float, ...]:
    """``count`` upper bounds ``start, start*factor, …`` (Prometheus' ExponentialBuckets)."""
    return tuple(start * factor**i for i in range(count))


#: kube-scheduler's buckets: attempt latency 1 ms x 2^k (15), extension points 0.1 ms x 2^k (12),
#: plugins 10 µs x 1.5^k (20), preemption victims 1..64, binding 1 ms x 2^k (15).
ATTEMPT_BUCKETS = exponential_buckets(0.001, 2, 15)
EXTENSION_POINT_BUCKETS = exponential_buckets(0.0001, 2, 12)
PLUGIN_BUCKETS = exponential_buckets(0.00001, 1.5, 20)
VICTIM_BUCKETS = exponential_buckets(1, 2, 7)
BINDING_BUCKETS = exponential_buckets(0.001, 2, 15)
PODGROUP_BUCKETS = exponential_buckets(0.001, 2, 15)

#: The sub-queues ``scheduler_pending_pods`` always reports, 0 when empty. As in kube-scheduler,
#: ``gated`` counts the pods PreEnqueue holds back (SchedulingGates) and ``unschedulable`` excludes
#: them, although the queue keeps both in one map (``SchedulingQueue.pending_counts``).
QUEUES = ("active", "backoff", "unschedulable", "gated")


_Metric = TypeVar("_Metric", bound=MetricWrapperBase)


@dataclass(frozen=True, slots=True)
class MetricSpec(Generic[_Metric]):
    """One metric as declared: its kind, name, help, label names and (histograms) buckets.

    The metrics are a table of these rather than constructor calls inside :class:`Metrics`, so
    that what the daemon exports reads as one list, and each :class:`Metrics` (a registry of its
    own) builds the same list."""

    kind: Callable[..., _Metric]
    """``prom.Counter``, ``prom.Gauge`` or ``prom.Histogram`` (only this one takes ``buckets``)."""
    name: str
    documentation: str
    labels: tuple[str, ...] = ()
    buckets: tuple[float, ...] | None = None

    def build(self, registry: prom.CollectorRegistry) -> _Metric:
        if self.buckets is None:
            return self.kind(self.name, self.documentation, self.labels, registry=registry)
        return self.kind(self.name, self.documentation, self.labels, registry=registry, buckets=self.buckets)


# -- kube-scheduler's names ---------------------------------------------------------------------
SCHEDULE_ATTEMPTS = MetricSpec(
    prom.Counter,
    "scheduler_schedule_attempts_total",
    "Number of attempts to schedule pods, by the result. 'unschedulable' means a pod could not "
    "be scheduled, while 'error' means an internal scheduler problem.",
    ("result", "profile"),
)
SCHEDULING_ATTEMPT_DURATION = MetricSpec(
    prom.Histogram,
    "scheduler_scheduling_attempt_duration_seconds",
    "Scheduling attempt latency in seconds (scheduling algorithm + binding).",
    ("result", "profile"),
    ATTEMPT_BUCKETS,
)
PENDING_PODS = MetricSpec(
    prom.Gauge,
    "scheduler_pending_pods",
    "Number of pending pods, by the queue type: 'active' means number of pods in activeQ; "
    "'backoff' means number of pods in backoffQ; 'unschedulable' means number of pods in "
    "unschedulablePods; 'gated' means number of gated pods.",
    ("queue",),
)
PREEMPTION_ATTEMPTS = MetricSpec(
    prom.Counter, "scheduler_preemption_attempts_total", "Total preemption attempts in the cluster till now."
)
PREEMPTION_VICTIMS = MetricSpec(
    prom.Histogram, "scheduler_preemption_victims", "Number of selected preemption victims.", (), VICTIM_BUCKETS
)
EXTENSION_POINT_DURATION = MetricSpec(
    prom.Histogram,
    "scheduler_framework_extension_point_duration_seconds",
    "Latency for running all plugins of a specific extension point.",
    ("extension_point", "status", "profile"),
    EXTENSION_POINT_BUCKETS,
)
PLUGIN_EXECUTION_DURATION = MetricSpec(
    prom.Histogram,
    "scheduler_plugin_execution_duration_seconds",
    "Duration for running a plugin at a specific extension point.",
    ("plugin", "extension_point", "status"),
    PLUGIN_BUCKETS,
)
PODGROUP_SCHEDULE_ATTEMPTS = MetricSpec(
    prom.Counter,
    "scheduler_podgroup_schedule_attempts_total",
    "Number of attempts to schedule pod groups, by the result ('scheduled', 'unschedulable', "
    "'waiting': placed and waiting at Permit for members still to come, 'error').",
    ("result", "profile"),
)
PODGROUP_SCHEDULING_ATTEMPT_DURATION = MetricSpec(
    prom.Histogram,
    "scheduler_podgroup_scheduling_attempt_duration_seconds",
    "Pod group scheduling attempt latency in seconds (the whole group's cycle).",
    ("result", "profile"),
    PODGROUP_BUCKETS,
)

# -- ours ---------------------------------------------------------------------------------------
BINDING_DURATION = MetricSpec(
    prom.Histogram,
    "custom_scheduler_binding_duration_seconds",
    "Latency of the binding cycle (PreBind, Bind with its retries, PostBind) in seconds.",
    ("profile",),
    BINDING_BUCKETS,
)
BIND_RETRIES = MetricSpec(
    prom.Counter,
    "custom_scheduler_bind_retries_total",
    "Binding API calls retried after a transient failure (429, 5xx, connection errors).",
    ("profile",),
)
WATCH_RESTARTS = MetricSpec(
    prom.Counter,
    "custom_scheduler_watch_restarts_total",
    "Watches re-opened, by resource and reason (e.g. 'expired' for 410, 'timeout', 'error', 'closed').",
    ("resource", "reason"),
)
RELISTS = MetricSpec(
    prom.Counter,
    "custom_scheduler_relists_total",
    "Full LISTs after the initial one (after 410 Gone or a broken watch), by resource.",
    ("resource",),
)
EVENTS_DROPPED = MetricSpec(
    prom.Counter,
    "custom_scheduler_events_dropped_total",
    "Kubernetes Events not written because the event queue was full or the write failed.",
)
LEADER = MetricSpec(
    prom.Gauge, "custom_scheduler_leader", "1 while this replica holds the leader Lease (and schedules), else 0."
)
CONFIG_RELOAD_FAILURES = MetricSpec(
    prom.Counter,
    "custom_scheduler_config_reload_failures_total",
    "Configuration reloads rejected (invalid file); the previous configuration stays in force.",
)


class Metrics:
    """The daemon's metrics in a private :class:`prometheus_client.CollectorRegistry`.

    Args:
        process_collectors: also export ``process_*``, ``python_gc_*`` and ``python_info``, as
            kube-scheduler exports its process metrics. Tests may turn them off.
    """

    def __init__(self, *, process_collectors: bool = True) -> None:
        # No ``*_created`` series: kube-scheduler (component-base) exports none, and to a dashboard
        # they are noise next to every counter and histogram. prometheus_client's switch is global.
        prom.disable_created_metrics()  # type: ignore[no-untyped-call]
        self.registry = prom.CollectorRegistry(auto_describe=True)
        r = self.registry
        if process_collectors:
            prom.ProcessCollector(registry=r)
            prom.PlatformCollector(registry=r)
            prom.GCCollector(registry=r)
        self.schedule_attempts = SCHEDULE_ATTEMPTS.build(r)
        self.scheduling_attempt_duration = SCHEDULING_ATTEMPT_DURATION.build(r)
        self.pending_pods = PENDING_PODS.build(r)
        for queue in QUEUES:
            self.pending_pods.labels(queue=queue).set(0)
        self.preemption_attempts = PREEMPTION_ATTEMPTS.build(r)
        self.preemption_victims = PREEMPTION_VICTIMS.build(r)
        self.extension_point_duration = EXTENSION_POINT_DURATION.build(r)
        self.plugin_execution_duration = PLUGIN_EXECUTION_DURATION.build(r)
        self.podgroup_schedule_attempts = PODGROUP_SCHEDULE_ATTEMPTS.build(r)
        self.podgroup_scheduling_attempt_duration = PODGROUP_SCHEDULING_ATTEMPT_DURATION.build(r)
        self.binding_duration = BINDING_DURATION.build(r)
        self.bind_retries = BIND_RETRIES.build(r)
        self.watch_restarts = WATCH_RESTARTS.build(r)
        self.relists = RELISTS.build(r)
        self.events_dropped = EVENTS_DROPPED.build(r)
        self.leader = LEADER.build(r)
        self.config_reload_failures = CONFIG_RELOAD_FAILURES.build(r)
        self._pending_source: Callable[[], Mapping[str, int]] | None = None

    # -- hooks for the rest of the daemon -------------------------------------------------------
    def observer(self) -> MetricsObserver:
        """An :class:`~custom_scheduler.core.scheduler.Observer` that records into this registry."""
        return MetricsObserver(self)

    def track_pending(self, source: Callable[[], Mapping[str, int]]) -> None:
        """Refresh ``scheduler_pending_pods`` from ``source`` (e.g. ``queue.pending_counts``) at every scrape.

        Reading the queue sizes when Prometheus asks keeps the gauge exact without a timer thread
        or a hook on every queue operation.
        """
        self._pending_source = source

    def _refresh(self) -> None:
        source = self._pending_source
        if source is not None:
            MetricsObserver(self).pending(source())

    def set_leader(self, leading: bool) -> None:
        """Hook for :class:`~custom_scheduler.server.leader.LeaderElector`'s ``on_leader_change``."""
        self.leader.set(1 if leading else 0)

    def watch_restart(self, resource: str, reason: str) -> None:
        self.watch_restarts.labels(resource=resource, reason=reason).inc()

    def relist(self, resource: str) -> None:
        self.relists.labels(resource=resource).inc()

    def event_dropped(self, count: int = 1) -> None:
        self.events_dropped.inc(count)

    def config_reload_failed(self) -> None:
        self.config_reload_failures.inc()

    def preemption_attempt(self, victims: int) -> None:
        """One PostFilter preemption attempt that selected ``victims`` pods (0 if none)."""
        self.preemption_attempts.inc()
        self.preemption_victims.observe(victims)

    def extension_point(self, extension_point: str, status: str, profile: str, seconds: float) -> None:
        labels = {"extension_point": extension_point, "status": status, "profile": profile}
        self.extension_point_duration.labels(**labels).observe(seconds)

    def plugin_execution(self, plugin: str, extension_point: str, status: str, seconds: float) -> None:
        labels = {"plugin": plugin, "extension_point": extension_point, "status": status}
        self.plugin_execution_duration.labels(**labels).observe(seconds)

    # -- exposition -------------------------------------------------------------------------------
    def render(self, accept: str = "") -> tuple[bytes, str]:
        """The registry in the Prometheus text format (or OpenMetrics when ``accept`` asks for it).

        Returns the body and its ``Content-Type``.
        """
        self._refresh()
        encoder, content_type = exposition.choose_encoder(accept)
        return encoder(self.registry), content_type

    def sample(self, name: str, labels: Mapping[str, str] | None = None) -> float | None:
        """The current value of one sample (for tests and the demo's summary)."""
        self._refresh()
        return self.registry.get_sample_value(name, dict(labels or {}))


class MetricsObserver(Observer):
    """The scheduling loop's hooks, recording into a :class:`Metrics`."""

    def __init__(self, metrics: Metrics) -> None:
        self.metrics = metrics
        # Labelled children by label values: ``labels()`` validates and locks on every call, and
        # these hooks run for every pod.
        self._attempts: dict[tuple[str, str], tuple[prom.Counter, prom.Histogram]] = {}
        self._binds: dict[str, prom.Histogram] = {}

    def attempt(self, profile: str, result: str, seconds: float) -> None:
        children = self._attempts.get((profile, result))
        if children is None:
            m = self.metrics
            children = self._attempts[(profile, result)] = (
                m.schedule_attempts.labels(result=result, profile=profile),
                m.scheduling_attempt_duration.labels(result=result, profile=profile),
            )
        children[0].inc()
        children[1].observe(seconds)

    def bound(self, profile: str, seconds: float, retries: int) -> None:
        duration = self._binds.get(profile)
        if duration is None:
            duration = self._binds[profile] = self.metrics.binding_duration.labels(profile=profile)
        duration.observe(seconds)
        if retries > 0:
            self.metrics.bind_retries.labels(profile=profile).inc(retries)

    def preemption(self, profile: str, victims: int) -> None:
        self.metrics.preemption_attempts.inc()
        self.metrics.preemption_victims.observe(victims)

    def group_attempt(self, profile: str, result: str, seconds: float) -> None:
        m = self.metrics
        m.podgroup_schedule_attempts.labels(result=result, profile=profile).inc()
        m.podgroup_scheduling_attempt_duration.labels(result=result, profile=profile).observe(seconds)

    def pending(self, counts: Mapping[str, int]) -> None:
        gauge = self.metrics.pending_pods
        for queue in QUEUES:
            gauge.labels(queue=queue).set(counts.get(queue, 0))
        for queue, n in counts.items():
            if queue not in QUEUES:
                gauge.labels(queue=queue).set(n)
