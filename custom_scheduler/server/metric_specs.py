"""Every metric the daemon exports, declared: kind, name, help, labels, buckets, stability.

kube-scheduler's come from pkg/scheduler/metrics/metrics.go (v1.37.2): every STABLE and BETA one,
with its name, help, label names and buckets, and the HELP line prefixed with its stability level
as component-base prints it (``[STABLE] Number of attempts ...``). Beside them the client-go
families kube-scheduler exports through component-base (``rest_client_*``, ``leader_election_*``),
and ours, prefixed ``custom_scheduler_``, for what kube-scheduler has no name for.

A table rather than constructor calls so that what the daemon exports reads as one list, and every
:class:`~custom_scheduler.server.metrics.Metrics` (a registry of its own) builds the same list.
The families filled at scrape time from the queue, the binding cycles and the framework's tallies
(:class:`~custom_scheduler.server.metrics.ScrapeTime`) are declared here too, as names and labels.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Generic, TypeVar

import prometheus_client as prom
from prometheus_client.metrics import MetricWrapperBase


def exponential_buckets(start: float, factor: float, count: int) -> tuple[float, ...]:
    """``count`` upper bounds ``start, start*factor, …`` (Prometheus' ExponentialBuckets)."""
    return tuple(start * factor**i for i in range(count))


#: kube-scheduler's buckets: attempt and algorithm latency 1 ms x 2^k (15), extension points
#: 0.1 ms x 2^k (12), plugins 10 µs x 1.5^k (20), preemption victims 1..64, attempts 1..16,
#: the SLI 10 ms x 2^k (20), Permit waits 1 ms x 2^k (15).
ATTEMPT_BUCKETS = exponential_buckets(0.001, 2, 15)
ALGORITHM_BUCKETS = exponential_buckets(0.001, 2, 15)
EXTENSION_POINT_BUCKETS = exponential_buckets(0.0001, 2, 12)
PLUGIN_BUCKETS = exponential_buckets(0.00001, 1.5, 20)
VICTIM_BUCKETS = exponential_buckets(1, 2, 7)
POD_ATTEMPTS_BUCKETS = exponential_buckets(1, 2, 5)
SLI_BUCKETS = exponential_buckets(0.01, 2, 20)
PERMIT_WAIT_BUCKETS = exponential_buckets(0.001, 2, 15)
BINDING_BUCKETS = exponential_buckets(0.001, 2, 15)
PODGROUP_BUCKETS = exponential_buckets(0.001, 2, 15)
#: client-go's request and rate-limiter latency buckets (component-base restclient).
REST_BUCKETS = (0.005, 0.025, 0.1, 0.25, 0.5, 1.0, 2.0, 4.0, 8.0, 15.0, 30.0, 60.0)

STABLE, BETA, ALPHA = "STABLE", "BETA", "ALPHA"

_Metric = TypeVar("_Metric", bound=MetricWrapperBase)


@dataclass(frozen=True, slots=True)
class MetricSpec(Generic[_Metric]):
    """One metric as declared: its kind, name, help, label names, (histograms) buckets and
    stability level ("" for ours, which are no component-base metric and print no level)."""

    kind: Callable[..., _Metric]
    """``prom.Counter``, ``prom.Gauge`` or ``prom.Histogram`` (only this one takes ``buckets``)."""
    name: str
    documentation: str
    labels: tuple[str, ...] = ()
    buckets: tuple[float, ...] | None = None
    stability: str = ""

    @property
    def help(self) -> str:
        """The HELP text as component-base prints it: ``[LEVEL] documentation``."""
        return f"[{self.stability}] {self.documentation}" if self.stability else self.documentation

    def build(self, registry: prom.CollectorRegistry) -> _Metric:
        if self.buckets is None:
            return self.kind(self.name, self.help, self.labels, registry=registry)
        return self.kind(self.name, self.help, self.labels, registry=registry, buckets=self.buckets)


@dataclass(frozen=True, slots=True)
class FamilySpec:
    """A family filled at scrape time (a counter or gauge read from its source)."""

    kind: str
    """``counter`` or ``gauge``."""
    name: str
    documentation: str
    labels: tuple[str, ...]
    stability: str = ""

    @property
    def help(self) -> str:
        return f"[{self.stability}] {self.documentation}" if self.stability else self.documentation


# -- kube-scheduler (pkg/scheduler/metrics/metrics.go) --------------------------------------------
SCHEDULE_ATTEMPTS = MetricSpec(
    prom.Counter,
    "scheduler_schedule_attempts_total",
    "Number of attempts to schedule pods, by the result. 'unschedulable' means a pod could not be "
    "scheduled, while 'error' means an internal scheduler problem.",
    ("result", "profile"),
    stability=STABLE,
)
SCHEDULING_ATTEMPT_DURATION = MetricSpec(
    prom.Histogram,
    "scheduler_scheduling_attempt_duration_seconds",
    "Scheduling attempt latency in seconds (scheduling algorithm + binding)",
    ("result", "profile"),
    ATTEMPT_BUCKETS,
    STABLE,
)
SCHEDULING_ALGORITHM_DURATION = MetricSpec(
    prom.Histogram,
    "scheduler_scheduling_algorithm_duration_seconds",
    "Scheduling algorithm latency in seconds",
    (),
    ALGORITHM_BUCKETS,
    BETA,
)
PREEMPTION_VICTIMS = MetricSpec(
    prom.Histogram,
    "scheduler_preemption_victims",
    "Number of selected preemption victims for preemption initiated by a single pod",
    (),
    VICTIM_BUCKETS,
    STABLE,
)
PREEMPTION_ATTEMPTS = MetricSpec(
    prom.Counter,
    "scheduler_preemption_attempts_total",
    "Total preemption attempts in the cluster till now",
    stability=STABLE,
)
PENDING_PODS = MetricSpec(
    prom.Gauge,
    "scheduler_pending_pods",
    "Number of pending pods, by the queue type. 'active' means number of pods in activeQ; 'backoff' "
    "means number of pods in backoffQ; 'unschedulable' means number of pods in unschedulableEntities "
    "that the scheduler attempted to schedule and failed; 'gated' is the number of unschedulable pods "
    "that the scheduler never attempted to schedule because they are gated; 'incomplete' means number "
    "of pods in incompletePodGroupPods; 'pending' means number of pods in pendingPodGroupPods.",
    ("queue",),
    stability=STABLE,
)
POD_SCHEDULING_SLI_DURATION = MetricSpec(
    prom.Histogram,
    "scheduler_pod_scheduling_sli_duration_seconds",
    "E2e latency for a pod being scheduled, from the time the pod enters the scheduling queue and "
    "might involve multiple scheduling attempts.",
    ("attempts",),
    SLI_BUCKETS,
    BETA,
)
POD_SCHEDULING_ATTEMPTS = MetricSpec(
    prom.Histogram,
    "scheduler_pod_scheduling_attempts",
    "Number of attempts to successfully schedule a pod.",
    (),
    POD_ATTEMPTS_BUCKETS,
    STABLE,
)
EXTENSION_POINT_DURATION = MetricSpec(
    prom.Histogram,
    "scheduler_framework_extension_point_duration_seconds",
    "Latency for running all plugins of a specific extension point.",
    ("extension_point", "status", "profile"),
    EXTENSION_POINT_BUCKETS,
    STABLE,
)
PLUGIN_EXECUTION_DURATION = MetricSpec(
    prom.Histogram,
    "scheduler_plugin_execution_duration_seconds",
    "Duration for running a plugin at a specific extension point.",
    ("plugin", "extension_point", "status"),
    PLUGIN_BUCKETS,
    BETA,
)
PERMIT_WAIT_DURATION = MetricSpec(
    prom.Histogram,
    "scheduler_permit_wait_duration_seconds",
    "Duration of waiting on permit.",
    ("result",),
    PERMIT_WAIT_BUCKETS,
    BETA,
)
PODGROUP_SCHEDULE_ATTEMPTS = MetricSpec(
    prom.Counter,
    "scheduler_podgroup_schedule_attempts_total",
    "Number of attempts to schedule pod group, by the result. 'unschedulable' means a pod group could "
    "not be scheduled, while 'error' means an internal scheduler problem.",
    ("result", "profile"),
    stability=ALPHA,
)
PODGROUP_SCHEDULING_ATTEMPT_DURATION = MetricSpec(
    prom.Histogram,
    "scheduler_podgroup_scheduling_attempt_duration_seconds",
    "Pod group scheduling attempt latency in seconds",
    ("result", "profile"),
    PODGROUP_BUCKETS,
    ALPHA,
)
# Filled at scrape time (the queue, the binding cycles, the framework's tallies).
QUEUE_INCOMING_PODS = FamilySpec(
    "counter",
    "scheduler_queue_incoming_pods_total",
    "Number of pods added to scheduling queues by event and queue type.",
    ("queue", "event"),
    STABLE,
)
BATCH_ATTEMPTS = FamilySpec(
    "counter",
    "scheduler_batch_attempts_total",
    "Counts of results when we attempt to use batching.",
    ("profile", "result"),
    ALPHA,
)
BATCH_CACHE_FLUSHED = FamilySpec(
    "counter",
    "scheduler_batch_cache_flushed_total",
    "Counts of cache flushes by reason.",
    ("profile", "reason"),
    ALPHA,
)
UNSCHEDULABLE_PODS = FamilySpec(
    "gauge",
    "scheduler_unschedulable_pods",
    "The number of unschedulable pods broken down by plugin name. A pod will increment the gauge for "
    "all plugins that caused it to not schedule and so this metric have meaning only when broken down "
    "by plugin.",
    ("plugin", "profile"),
    BETA,
)
GOROUTINES = FamilySpec(
    "gauge",
    "scheduler_goroutines",
    "Number of running goroutines split by the work they do such as binding.",
    ("operation",),
    BETA,
)
PLUGIN_EVALUATION = FamilySpec(
    "counter",
    "scheduler_plugin_evaluation_total",
    "Number of attempts to schedule pods by each plugin and the extension point (available only in "
    "PreFilter, Filter, PreScore, and Score).",
    ("plugin", "extension_point", "profile"),
    BETA,
)
#: kube-scheduler's Go runtime exports go_goroutines, which the kubernetes-mixin scheduler dashboard
#: plots; the Python daemon's nearest count is its threads.
THREADS = FamilySpec(
    "gauge",
    "go_goroutines",
    "Number of threads that currently exist (the Python daemon's counterpart of Go's goroutine count).",
    (),
)

# -- client-go through component-base (metrics/prometheus/restclient, clientgo/leaderelection) -----
REST_REQUESTS = MetricSpec(
    prom.Counter,
    "rest_client_requests_total",
    "Number of HTTP requests, partitioned by status code, method, and host.",
    ("code", "method", "host"),
    stability=ALPHA,
)
REST_REQUEST_DURATION = MetricSpec(
    prom.Histogram,
    "rest_client_request_duration_seconds",
    "Request latency in seconds. Broken down by verb, and host.",
    ("verb", "host"),
    REST_BUCKETS,
    ALPHA,
)
REST_RATE_LIMITER_DURATION = MetricSpec(
    prom.Histogram,
    "rest_client_rate_limiter_duration_seconds",
    "Client side rate limiter latency in seconds. Broken down by verb, and host.",
    ("verb", "host"),
    REST_BUCKETS,
    ALPHA,
)
LEADER_ELECTION_MASTER_STATUS = MetricSpec(
    prom.Gauge,
    "leader_election_master_status",
    "Gauge of if the reporting system is master of the relevant lease, 0 indicates backup, 1 indicates "
    "master. 'name' is the string used to identify the lease. Please make sure to group by name.",
    ("name",),
    stability=ALPHA,
)
LEADER_ELECTION_SLOWPATH = MetricSpec(
    prom.Counter,
    "leader_election_slowpath_total",
    "Total number of slow path exercised in renewing leader leases. 'name' is the string used to "
    "identify the lease. Please make sure to group by name.",
    ("name",),
    stability=ALPHA,
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
# Accelerator fragmentation, computed at scrape time from the cache (framework/fragmentation.py
# defines each number; docs/defrag.md explains how to read them).
ACCELERATORS_FREE = FamilySpec(
    "gauge",
    "custom_scheduler_accelerators_free",
    "Free units of an accelerator resource (allocatable minus requested) on schedulable nodes.",
    ("resource",),
)
ACCELERATORS_CAPACITY = FamilySpec(
    "gauge",
    "custom_scheduler_accelerators_allocatable",
    "Allocatable units of an accelerator resource on schedulable nodes.",
    ("resource",),
)
ACCELERATORS_STRANDED = FamilySpec(
    "gauge",
    "custom_scheduler_accelerators_stranded",
    "Free units of an accelerator resource on nodes with fewer than 'size' free: no pod requesting "
    "'size' of them can use these.",
    ("resource", "size"),
)
ACCELERATORS_HOSTABLE = FamilySpec(
    "gauge",
    "custom_scheduler_accelerator_hostable_pods",
    "How many pods requesting 'size' units of an accelerator resource fit at once, by free units alone.",
    ("resource", "size"),
)
ACCELERATOR_LARGEST_FREE_BLOCK = FamilySpec(
    "gauge",
    "custom_scheduler_accelerator_largest_free_block",
    "The most free units of an accelerator resource on one schedulable node.",
    ("resource",),
)
ACCELERATOR_DOMAIN_FREE = FamilySpec(
    "gauge",
    "custom_scheduler_accelerator_domain_free",
    "Free units of an accelerator resource in one topology domain (the domain label's value).",
    ("resource", "domain"),
)
ACCELERATOR_DOMAIN_LARGEST_FREE_BLOCK = FamilySpec(
    "gauge",
    "custom_scheduler_accelerator_domain_largest_free_block",
    "The most free units of an accelerator resource on one schedulable node of a topology domain.",
    ("resource", "domain"),
)
SHADOW_DECISIONS = MetricSpec(
    prom.Counter,
    "custom_scheduler_shadow_decisions_total",
    "Shadow mode (--dry-run): pods of a profile seen bound, by how the shadow's decision compared with "
    "the real binding: agree, disagree, shadow-unschedulable, or missed (bound before the shadow decided).",
    ("profile", "result"),
)
DECISION_RECORD_ENTRIES = MetricSpec(
    prom.Counter,
    "custom_scheduler_decision_record_entries_total",
    "Decision record entries (see `custom-scheduler why`) by result: written to the ConfigMap ring, "
    "or dropped (writes refused for longer than the buffer holds, two segments of entries; or an entry too large).",
    ("result",),
)
# GangScheduling's reservations for starving gangs (plugins/gang_reservations.py; docs/gangs.md),
# read at scrape time from the gang store's reservation book.
GANG_RESERVATIONS = FamilySpec(
    "gauge",
    "custom_scheduler_gang_reservations",
    "Reservations in force for gangs pending longer than GangScheduling's reservation threshold.",
    ("profile",),
)
GANG_RESERVED_CAPACITY = FamilySpec(
    "gauge",
    "custom_scheduler_gang_reserved_capacity",
    "Capacity those reservations hold, by resource (milli-CPU for cpu, bytes for memory, counts otherwise).",
    ("profile", "resource"),
)
