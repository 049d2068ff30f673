"""Every Prometheus metric of the daemon, in one registry owned by a :class:`Metrics` object.

Names follow kube-scheduler wherever it has one, so existing dashboards and alerts keep working
(the kubernetes-mixin scheduler dashboard and recording rules among them): every STABLE and BETA
metric of kube-scheduler 1.37.2 with its labels and buckets (the table is
:mod:`~custom_scheduler.server.metric_specs`), client-go's ``rest_client_*`` and
``leader_election_*``. What kube-scheduler has no name for is prefixed ``custom_scheduler_``.

Where each is recorded, as upstream records it:

- the scheduling and binding cycles (:class:`MetricsObserver`, an
  :class:`~custom_scheduler.core.ports.Observer`): attempts and their latency (``scheduled`` once
  bound), the algorithm's latency, attempts per pod and the SLI at bind, preemption;
- the framework (:class:`FrameworkMetrics`, a :class:`~custom_scheduler.framework.instrument.Recorder`):
  extension points every cycle, plugins in a sampled 10 % of cycles, Permit waits, evaluations;
- the API client (:class:`RestClientMetrics`) and the leader elector (:meth:`Metrics.set_leader`,
  :meth:`Metrics.leader_slow_path`);
- at scrape time (:class:`ScrapeTime`), from the queue and the binding cycles: the pending and
  unschedulable gauges, the incoming-pods counter, in-flight binding cycles. Reading them when
  Prometheus asks keeps them exact without a hook on every queue operation.

Why a registry per :class:`Metrics` rather than prometheus-client's global one: tests (and two
in-process replicas in the HA tests) each get independent counters, and nothing is registered at
import time.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable, Iterable, Mapping, Sequence
from urllib.parse import urlsplit

import prometheus_client as prom
import structlog
from prometheus_client import exposition
from prometheus_client.metrics_core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from custom_scheduler.core.scheduler import Observer
from custom_scheduler.framework import instrument as ins
from custom_scheduler.framework.fragmentation import ResourceFragmentation
from custom_scheduler.framework.types import Code
from custom_scheduler.kube.client import RequestObserver
from custom_scheduler.server import metric_specs as ms
from custom_scheduler.server.metric_specs import ATTEMPT_BUCKETS, exponential_buckets

log = structlog.get_logger("custom_scheduler.metrics")

__all__ = ["ATTEMPT_BUCKETS", "QUEUES", "Metrics", "MetricsObserver", "exponential_buckets"]

#: The sub-queues ``scheduler_pending_pods`` always reports, 0 when empty. As in kube-scheduler,
#: ``gated`` counts the pods PreEnqueue holds back (SchedulingGates) and ``unschedulable`` excludes
#: them, although the queue keeps both in one map (``SchedulingQueue.pending_counts``).
QUEUES = ("active", "backoff", "unschedulable", "gated")

#: The ``name`` of ``leader_election_master_status``: the component, as kube-scheduler passes
#: "kube-scheduler" whatever its Lease is called.
LEADER_ELECTION_NAME = "custom-scheduler"

#: upstream's getAttemptsLabel: attempts as a label, capped at 15 to bound the cardinality.
MAX_ATTEMPTS_LABEL = 15


def attempts_label(attempts: int) -> str:
    return f"{MAX_ATTEMPTS_LABEL}+" if attempts >= MAX_ATTEMPTS_LABEL else str(attempts)


class Deferred:
    """Observations and increments of the scheduling hot path, applied when someone reads them.

    prometheus_client's ``observe`` takes a lock and bisects the buckets (about 2 µs); a cycle
    records a dozen of them. Upstream defers its plugin timings the same way (its
    ``MetricAsyncRecorder`` buffers them for a flushing goroutine). Here a deque append (about
    0.1 µs, thread-safe) stands in for the call, and the calls run at the next scrape (or test read),
    or on the recording thread once :data:`LIMIT` are waiting, which bounds memory without a
    thread of its own. A scrape therefore sees every observation made before it."""

    LIMIT = 4096

    def __init__(self) -> None:
        self._calls: deque[tuple[Callable[[float], None], float]] = deque()

    def __call__(self, fn: Callable[[float], None], value: float) -> None:
        calls = self._calls
        calls.append((fn, value))
        if len(calls) > self.LIMIT:
            self.flush()

    def flush(self) -> None:
        """Apply what is waiting (from any thread; each call is applied exactly once)."""
        calls = self._calls
        while True:
            try:
                fn, value = calls.popleft()
            except IndexError:
                return
            fn(value)


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
        self.schedule_attempts = ms.SCHEDULE_ATTEMPTS.build(r)
        self.scheduling_attempt_duration = ms.SCHEDULING_ATTEMPT_DURATION.build(r)
        self.scheduling_algorithm_duration = ms.SCHEDULING_ALGORITHM_DURATION.build(r)
        self.pending_pods = ms.PENDING_PODS.build(r)
        for queue in QUEUES:
            self.pending_pods.labels(queue=queue).set(0)
        self.preemption_attempts = ms.PREEMPTION_ATTEMPTS.build(r)
        self.preemption_victims = ms.PREEMPTION_VICTIMS.build(r)
        self.pod_scheduling_attempts = ms.POD_SCHEDULING_ATTEMPTS.build(r)
        self.pod_scheduling_sli_duration = ms.POD_SCHEDULING_SLI_DURATION.build(r)
        self.extension_point_duration = ms.EXTENSION_POINT_DURATION.build(r)
        self.plugin_execution_duration = ms.PLUGIN_EXECUTION_DURATION.build(r)
        self.permit_wait_duration = ms.PERMIT_WAIT_DURATION.build(r)
        self.podgroup_schedule_attempts = ms.PODGROUP_SCHEDULE_ATTEMPTS.build(r)
        self.podgroup_scheduling_attempt_duration = ms.PODGROUP_SCHEDULING_ATTEMPT_DURATION.build(r)
        self.rest_requests = ms.REST_REQUESTS.build(r)
        self.rest_request_duration = ms.REST_REQUEST_DURATION.build(r)
        self.rest_rate_limiter_duration = ms.REST_RATE_LIMITER_DURATION.build(r)
        self.leader_election_master_status = ms.LEADER_ELECTION_MASTER_STATUS.build(r)
        self.leader_election_slowpath = ms.LEADER_ELECTION_SLOWPATH.build(r)
        self.binding_duration = ms.BINDING_DURATION.build(r)
        self.bind_retries = ms.BIND_RETRIES.build(r)
        self.watch_restarts = ms.WATCH_RESTARTS.build(r)
        self.relists = ms.RELISTS.build(r)
        self.events_dropped = ms.EVENTS_DROPPED.build(r)
        self.leader = ms.LEADER.build(r)
        self.config_reload_failures = ms.CONFIG_RELOAD_FAILURES.build(r)
        self.deferred = Deferred()
        self.framework = FrameworkMetrics(self)
        self.rest_client = RestClientMetrics(self)
        self.scrape_time = ScrapeTime(self.framework)
        r.register(self.scrape_time)
        self._pending_source: Callable[[], Mapping[str, int]] | None = None
        self.accelerators = AcceleratorMetrics()
        r.register(self.accelerators)
        self.reservations = ReservationMetrics()
        r.register(self.reservations)

    # -- hooks for the rest of the daemon -------------------------------------------------------
    def observer(self) -> MetricsObserver:
        """An :class:`~custom_scheduler.core.scheduler.Observer` that records into this registry."""
        return MetricsObserver(self)

    def track_pending(self, source: Callable[[], Mapping[str, int]]) -> None:
        """Refresh ``scheduler_pending_pods`` from ``source`` (e.g. ``queue.pending_counts``) at every scrape."""
        self._pending_source = source

    def track_queue(
        self,
        incoming: Callable[[], Mapping[tuple[str, str], int]],
        unschedulable: Callable[[], Mapping[tuple[str, str], int]],
    ) -> None:
        """Read ``scheduler_queue_incoming_pods_total`` and ``scheduler_unschedulable_pods`` from the
        queue at every scrape (``incoming_counts``, ``unschedulable_reasons``)."""
        self.scrape_time.incoming = incoming
        self.scrape_time.unschedulable = unschedulable

    def track_batching(
        self, counts: Callable[[], tuple[Mapping[tuple[str, str], int], Mapping[tuple[str, str], int]]]
    ) -> None:
        """Read ``scheduler_batch_attempts_total`` and ``scheduler_batch_cache_flushed_total``
        ((profile, result) and (profile, reason) counts) at every scrape."""
        self.scrape_time.batching = counts

    def track_binding(self, in_flight: Callable[[], int]) -> None:
        """Read ``scheduler_goroutines{operation="binding"}`` (binding cycles in flight) at every scrape."""
        self.scrape_time.binding = in_flight

    def track_accelerators(self, source: Callable[[], Sequence[ResourceFragmentation]]) -> None:
        """Export the accelerator fragmentation ``source`` computes (e.g. a
        :class:`~custom_scheduler.framework.fragmentation.AcceleratorView` of the cache) at every scrape."""
        self.accelerators.source = source

    def track_reservations(self, source: Callable[[], Mapping[str, tuple[int, Mapping[str, int]]]]) -> None:
        """Export the gang reservations ``source`` reports (the gang store's
        ``reservations.summary``: per profile, how many and the capacity held) at every scrape."""
        self.reservations.source = source

    def _refresh(self) -> None:
        self.deferred.flush()
        source = self._pending_source
        if source is not None:
            MetricsObserver(self).pending(source())

    def set_leader(self, leading: bool) -> None:
        """Hook for :class:`~custom_scheduler.server.leader.LeaderElector`'s ``on_leader_change``:
        ``custom_scheduler_leader`` and client-go's ``leader_election_master_status``."""
        self.leader.set(1 if leading else 0)
        self.leader_election_master_status.labels(name=LEADER_ELECTION_NAME).set(1 if leading else 0)

    def leader_slow_path(self) -> None:
        """The leader renewed its Lease by the slow path (GET, then PUT)."""
        self.leader_election_slowpath.labels(name=LEADER_ELECTION_NAME).inc()

    def watch_restart(self, resource: str, reason: str) -> None:
        self.watch_restarts.labels(resource=resource, reason=reason).inc()

    def relist(self, resource: str) -> None:
        self.relists.labels(resource=resource).inc()

    def event_dropped(self, count: int = 1) -> None:
        self.events_dropped.inc(count)

    def config_reload_failed(self) -> None:
        self.config_reload_failures.inc()

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

    samples_plugins = True

    def __init__(self, metrics: Metrics) -> None:
        self.metrics = metrics
        self.later = metrics.deferred
        # Labelled children by label values: ``labels()`` validates and locks on every call, and
        # these hooks run for every pod.
        self._attempts: dict[tuple[str, str], tuple[prom.Counter, prom.Histogram]] = {}
        self._binds: dict[str, prom.Histogram] = {}
        self._sli: dict[str, prom.Histogram] = {}

    def attempt(self, profile: str, result: str, seconds: float) -> None:
        children = self._attempts.get((profile, result))
        if children is None:
            m = self.metrics
            children = self._attempts[(profile, result)] = (
                m.schedule_attempts.labels(result=result, profile=profile),
                m.scheduling_attempt_duration.labels(result=result, profile=profile),
            )
        self.later(children[0].inc, 1)
        self.later(children[1].observe, seconds)

    def algorithm(self, seconds: float) -> None:
        self.later(self.metrics.scheduling_algorithm_duration.observe, seconds)

    def pod_scheduled(self, profile: str, attempts: int, since_first_attempt: float | None) -> None:
        self.later(self.metrics.pod_scheduling_attempts.observe, attempts)
        if since_first_attempt is None:
            return
        label = attempts_label(attempts)
        sli = self._sli.get(label)
        if sli is None:
            sli = self._sli[label] = self.metrics.pod_scheduling_sli_duration.labels(attempts=label)
        self.later(sli.observe, since_first_attempt)

    def bound(self, profile: str, seconds: float, retries: int) -> None:
        duration = self._binds.get(profile)
        if duration is None:
            duration = self._binds[profile] = self.metrics.binding_duration.labels(profile=profile)
        self.later(duration.observe, seconds)
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


class FrameworkMetrics(ins.Recorder):
    """The frameworks' :class:`~custom_scheduler.framework.instrument.Recorder`: extension point
    and plugin timings into their histograms (children cached), plugin evaluations as plain
    integers that :class:`ScrapeTime` exports, so a cycle pays a dictionary addition per plugin.

    Evaluations come from the scheduling thread only (PreFilter to Score), so their tally needs no
    lock; a scrape copies it (one C-level copy under the GIL)."""

    def __init__(self, metrics: Metrics) -> None:
        self.metrics = metrics
        self.later = metrics.deferred
        self._points: dict[tuple[str, Code, str], prom.Histogram] = {}
        self._plugins: dict[tuple[str, str, Code], prom.Histogram] = {}
        self._waits: dict[Code, prom.Histogram] = {}
        self.tally: dict[tuple[str, str, str], int] = {}

    def extension_point(self, point: str, code: Code, profile: str, seconds: float) -> None:
        key = (point, code, profile)
        child = self._points.get(key)
        if child is None:
            child = self._points[key] = self.metrics.extension_point_duration.labels(
                extension_point=point, status=ins.CODE_LABELS[code], profile=profile
            )
        self.later(child.observe, seconds)

    def plugin_duration(self, plugin: str, point: str, code: Code, seconds: float) -> None:
        key = (plugin, point, code)
        child = self._plugins.get(key)
        if child is None:
            child = self._plugins[key] = self.metrics.plugin_execution_duration.labels(
                plugin=plugin, extension_point=point, status=ins.CODE_LABELS[code]
            )
        self.later(child.observe, seconds)

    def evaluations(self, point: str, profile: str, counts: Iterable[tuple[str, int]]) -> None:
        tally = self.tally
        for plugin, n in counts:
            if n:
                key = (plugin, point, profile)
                tally[key] = tally.get(key, 0) + n

    def permit_wait(self, code: Code, seconds: float) -> None:
        child = self._waits.get(code)
        if child is None:
            child = self._waits[code] = self.metrics.permit_wait_duration.labels(result=ins.CODE_LABELS[code])
        child.observe(seconds)


class RestClientMetrics(RequestObserver):
    """client-go's ``rest_client_*`` for :class:`~custom_scheduler.kube.client.KubeClient`: the
    host label is the API server's ``host:port``, the verb the HTTP method, the code the status
    (``<error>`` when no response came), as component-base records them."""

    def __init__(self, metrics: Metrics) -> None:
        self.metrics = metrics
        self._hosts: dict[str, str] = {}
        self._results: dict[tuple[str, str, str], prom.Counter] = {}
        self._latency: dict[tuple[str, str], prom.Histogram] = {}
        self._throttle: dict[tuple[str, str], prom.Histogram] = {}

    def _host(self, base: str) -> str:
        host = self._hosts.get(base)
        if host is None:
            host = self._hosts[base] = urlsplit(base).netloc or "none"
        return host

    def result(self, verb: str, base: str, code: str) -> None:
        key = (code, verb, base)
        child = self._results.get(key)
        if child is None:
            host = self._host(base)
            child = self._results[key] = self.metrics.rest_requests.labels(code=code, method=verb, host=host)
        child.inc()

    def latency(self, verb: str, base: str, seconds: float) -> None:
        key = (verb, base)
        child = self._latency.get(key)
        if child is None:
            child = self._latency[key] = self.metrics.rest_request_duration.labels(verb=verb, host=self._host(base))
        child.observe(seconds)

    def throttled(self, verb: str, base: str, seconds: float) -> None:
        key = (verb, base)
        child = self._throttle.get(key)
        if child is None:
            child = self._throttle[key] = self.metrics.rest_rate_limiter_duration.labels(
                verb=verb, host=self._host(base)
            )
        child.observe(seconds)


class ScrapeTime(Collector):
    """The families read from their sources when Prometheus scrapes: the queue's incoming and
    unschedulable counts, binding cycles in flight, the framework's evaluation tally, threads.

    A (plugin, profile) pair of ``scheduler_unschedulable_pods`` once seen stays, at 0 when no pod
    carries it, as upstream's gauge child does after its decrements."""

    def __init__(self, framework: FrameworkMetrics) -> None:
        self.framework = framework
        self.incoming: Callable[[], Mapping[tuple[str, str], int]] | None = None
        self.unschedulable: Callable[[], Mapping[tuple[str, str], int]] | None = None
        self.binding: Callable[[], int] | None = None
        self.batching: Callable[[], tuple[Mapping[tuple[str, str], int], Mapping[tuple[str, str], int]]] | None = None
        self._seen_reasons: set[tuple[str, str]] = set()
        self._lock = threading.Lock()

    def describe(self) -> Iterable[Metric]:
        return list(self._families())

    def collect(self) -> Iterable[Metric]:
        incoming = self.incoming() if self.incoming is not None else {}
        reasons = self.unschedulable() if self.unschedulable is not None else {}
        with self._lock:
            self._seen_reasons.update(reasons)
            seen = sorted(self._seen_reasons)
        fam_incoming, fam_unschedulable, fam_goroutines, fam_evaluations, fam_threads, fam_batch, fam_flush = (
            self._families()
        )
        attempts, flushes = self.batching() if self.batching is not None else ({}, {})
        for key, n in sorted(attempts.items()):
            fam_batch.add_metric(list(key), n)
        for key, n in sorted(flushes.items()):
            fam_flush.add_metric(list(key), n)
        for (queue, event), n in sorted(incoming.items()):
            fam_incoming.add_metric([queue, event], n)
        for key in seen:
            fam_unschedulable.add_metric(list(key), reasons.get(key, 0))
        if self.binding is not None:
            fam_goroutines.add_metric(["binding"], self.binding())
        for (plugin, point, profile), n in sorted(dict(self.framework.tally).items()):
            fam_evaluations.add_metric([plugin, point, profile], n)
        fam_threads.add_metric([], threading.active_count())
        return fam_incoming, fam_unschedulable, fam_goroutines, fam_evaluations, fam_threads, fam_batch, fam_flush

    @staticmethod
    def _families() -> tuple[CounterMetricFamily | GaugeMetricFamily, ...]:
        specs = (
            ms.QUEUE_INCOMING_PODS,
            ms.UNSCHEDULABLE_PODS,
            ms.GOROUTINES,
            ms.PLUGIN_EVALUATION,
            ms.THREADS,
            ms.BATCH_ATTEMPTS,
            ms.BATCH_CACHE_FLUSHED,
        )
        return tuple(_family(spec) for spec in specs)


def _family(spec: ms.FamilySpec) -> CounterMetricFamily | GaugeMetricFamily:
    if spec.kind == "counter":
        return CounterMetricFamily(spec.name, spec.help, labels=spec.labels)
    return GaugeMetricFamily(spec.name, spec.help, labels=spec.labels)


class AcceleratorMetrics(Collector):
    """The accelerator fragmentation families (``custom_scheduler_accelerator*``), computed from
    ``source`` at each scrape; nothing is exported until the daemon sets a source. A source that
    fails costs these families that one scrape (logged), never the rest of ``/metrics``."""

    SPECS = (
        ms.ACCELERATORS_FREE,
        ms.ACCELERATORS_CAPACITY,
        ms.ACCELERATORS_STRANDED,
        ms.ACCELERATORS_HOSTABLE,
        ms.ACCELERATOR_LARGEST_FREE_BLOCK,
        ms.ACCELERATOR_DOMAIN_FREE,
        ms.ACCELERATOR_DOMAIN_LARGEST_FREE_BLOCK,
    )

    def __init__(self) -> None:
        self.source: Callable[[], Sequence[ResourceFragmentation]] | None = None

    def describe(self) -> Iterable[Metric]:
        return self._families()

    def _families(self) -> tuple[GaugeMetricFamily, ...]:
        return tuple(GaugeMetricFamily(s.name, s.help, labels=s.labels) for s in self.SPECS)

    def collect(self) -> Iterable[Metric]:
        if self.source is None:
            return ()
        try:
            report = list(self.source())
        except Exception:  # a metric must not break the scrape (nor the daemon)
            log.exception("accelerator_metrics_failed")
            return ()
        free, capacity, stranded, hostable, largest, domain_free, domain_largest = families = self._families()
        for f in report:
            free.add_metric([f.resource], f.free)
            capacity.add_metric([f.resource], f.capacity)
            largest.add_metric([f.resource], f.largest_free_block)
            for size, n in f.stranded.items():
                stranded.add_metric([f.resource, str(size)], n)
            for size, n in f.hostable.items():
                hostable.add_metric([f.resource, str(size)], n)
            for domain, d in f.domains.items():
                domain_free.add_metric([f.resource, domain], d.free)
                domain_largest.add_metric([f.resource, domain], d.largest_free_block)
        return families


class ReservationMetrics(Collector):
    """``custom_scheduler_gang_reservations{profile}`` and ``custom_scheduler_gang_reserved_capacity
    {profile,resource}``, read from ``source`` at each scrape. A series once seen stays, at 0 when
    its reservations ended (a dashboard sees the reservation go, not the series vanish)."""

    SPECS = (ms.GANG_RESERVATIONS, ms.GANG_RESERVED_CAPACITY)

    def __init__(self) -> None:
        self.source: Callable[[], Mapping[str, tuple[int, Mapping[str, int]]]] | None = None
        self._seen: set[str] = set()
        self._seen_resources: set[tuple[str, str]] = set()

    def describe(self) -> Iterable[Metric]:
        return tuple(_family(s) for s in self.SPECS)

    def collect(self) -> Iterable[Metric]:
        if self.source is None:
            return ()
        try:
            summary = dict(self.source())
        except Exception:  # a metric must not break the scrape (nor the daemon)
            log.exception("reservation_metrics_failed")
            return ()
        self._seen.update(summary)
        self._seen_resources.update((p, r) for p, (_, held) in summary.items() for r in held)
        count, capacity = families = tuple(_family(s) for s in self.SPECS)
        for profile in sorted(self._seen):
            count.add_metric([profile], summary.get(profile, (0, {}))[0])
        for profile, resource in sorted(self._seen_resources):
            capacity.add_metric([profile, resource], summary.get(profile, (0, {}))[1].get(resource, 0))
        return families
