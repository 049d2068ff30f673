"""Composition root: builds every object of the daemon and runs it until SIGTERM.

Nothing else constructs concrete classes; everything below receives its collaborators. That keeps
the rest testable with fakes and makes this file the map of the process:

    KubeClient ×2 (watches / writes) ─▶ informers (pods, nodes, namespaces) ─▶ Scheduler sinks
                                                                  │
    Cache ◀── assume/forget ── Scheduler.schedule_one ◀── SchedulingQueue ◀┘
                                    │
                                    └─▶ binder pool (DefaultBinder) ─▶ Writer (events, conditions)

Shutdown (SIGTERM/SIGINT): stop popping pods, let in-flight binds finish, flush queued events,
stop the informers, exit 0.
"""

from __future__ import annotations

import dataclasses
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

import structlog

from custom_scheduler.api.model import Pod, PodDisruptionBudget, namespace_from_json, pdb_from_json
from custom_scheduler.config.gates import DEFAULT_GATES, FeatureGates
from custom_scheduler.config.schema import SchedulerConfig
from custom_scheduler.core.assembly import FrameworkInputs, Ports, assemble
from custom_scheduler.core.cache import Cache
from custom_scheduler.core.decision_store import DecisionRing, RingConfig
from custom_scheduler.core.events import Writer
from custom_scheduler.core.informers import (
    NULL_SINK,
    CallbackSink,
    Informer,
    dra_informers,
    fan_out,
    gang_informers,
    node_informer,
    pod_informer,
    volume_informers,
)
from custom_scheduler.core.scheduler import Decision, Observer
from custom_scheduler.core.selectors import DefaultSelectors
from custom_scheduler.framework import cluster_events, fragmentation, loadmetrics
from custom_scheduler.framework.dra_store import DRAStore
from custom_scheduler.framework.evictor import ApiEvictor
from custom_scheduler.framework.extender import Extenders, api_pod_json
from custom_scheduler.framework.fence import Fence
from custom_scheduler.framework.gang_store import GangChange, GangStatusWriter, GangStore
from custom_scheduler.framework.instrument import NO_RECORDER
from custom_scheduler.framework.profiles import build_frameworks
from custom_scheduler.framework.registry import Registry
from custom_scheduler.framework.runtime import Framework
from custom_scheduler.framework.volumes import VolumeStore
from custom_scheduler.kube import api_errors as kerrors
from custom_scheduler.kube.client import KubeClient
from custom_scheduler.kube.prefetch import Prefetch
from custom_scheduler.plugins import gang_hints, load_aware
from custom_scheduler.server.decision_log import DecisionLog
from custom_scheduler.server.metrics import Metrics

log = structlog.get_logger("custom_scheduler.server.app")


class App:
    """The daemon: call :meth:`start`, then :meth:`wait` (or :meth:`stop`).

    Built in one order, each part complete when built: the listers the plugins read, the writers
    (events, evictions), the queue, frameworks and scheduler (:func:`assemble`), the informers that
    feed the scheduler, and the sources and writers that run beside it.
    """

    def __init__(
        self,
        config: SchedulerConfig,
        registry: Registry,
        client: KubeClient,
        *,
        dry_run: bool = False,
        observer: Observer | None = None,
        on_decision: Callable[[Decision], None] | None = None,
        watch_read_timeout: float = 90.0,
        metrics: Metrics | None = None,
        metrics_sources: loadmetrics.Sources | None = None,
        decision_record: RingConfig | None = None,
        gates: FeatureGates = DEFAULT_GATES,
        prefetched: Prefetch | None = None,
    ) -> None:
        self.config = config
        self.registry = registry
        self.dry_run = dry_run
        self.metrics = metrics
        # NodeLoad's usage sources by name, lent to the plugins through their Handles.
        self.metrics_sources = metrics_sources if metrics_sources is not None else loadmetrics.Sources()
        self._scheduling = False
        self.health_port = 0
        self.client = client
        if metrics is not None:
            client.observer = metrics.rest_client  # rest_client_*; every clone below inherits it
        # Every informer keeps one watch connection open (about 20 with the storage, DRA and
        # PodGroup kinds), plus its re-lists: a pool smaller than that makes urllib3 drop and
        # re-open connections ("Connection pool is full") on every watch turnover.
        self.watch_client = client.clone(qps=0, pool_maxsize=WATCH_POOL)
        self._watch_read_timeout = watch_read_timeout
        self._inf_kw = self._informer_metrics(metrics)
        self.stop_event = threading.Event()
        # Leadership as a value: the daemon's elector revokes it, the binding path consults it.
        self.fence = Fence()
        self.cache = Cache()
        self.volumes = VolumeStore()
        self.dra = DRAStore()
        # PodGroups (both APIs) and their members, for GangScheduling; "placed" is the cache's
        # view (assumed or bound), which knows an assumption before any watch event does.
        self.gangs = GangStore(is_placed=lambda uid: self.cache.get_pod(uid) is not None, served=())
        self._build_listers()
        self._build_writers(config)
        # The decision record (``why``) and shadow comparisons: fed by every cycle, off its thread.
        self.decision_log = self._decision_log(decision_record, metrics)
        ports = Ports(
            events=self.writer,
            evictor=self.evictor,
            observer=observer or (metrics.observer() if metrics is not None else None),
            on_decision=_both(on_decision, self.decision_log.on_decision if self.decision_log else None),
            fence=self.fence,
            dry_run=dry_run,
            gates=gates,
        )
        assembly = assemble(config, self.cache, self._frameworks, ports)
        self.scheduler, self.queue, self._inputs = assembly.scheduler, assembly.queue, assembly.inputs
        if decision_record is not None and dry_run:
            self.scheduler.cycle.detail = True  # a shadow compares per-plugin scores on many nodes
        elif decision_record is not None and decision_record.scores:
            # The record's top plugins and runner-up: the fast path's columns of those two nodes.
            self.scheduler.cycle.algorithm.keep_top = True
        if metrics is not None:
            self._track(metrics, config)
        self._build_scheduler_informers()
        self._build_store_informers(config)
        if prefetched is not None:
            self._take_prefetched(prefetched)
        # PodGroup status (condition / phase and counts), written off the scheduling thread.
        self.gang_status = GangStatusWriter(next(iter(self.profiles.values())).handle, self.gangs)
        if not dry_run:
            self.gangs.status = self.gang_status
        # NodeLoad's usage source (metrics.k8s.io), only when a profile enables that plugin.
        self.load_metrics = self._load_metrics_for(config)
        self._threads: list[threading.Thread] = []

    def _track(self, metrics: Metrics, config: SchedulerConfig) -> None:
        """The gauges read at each scrape: queue, binding, batching, accelerators."""
        metrics.track_queue(self.queue.incoming_counts, self.queue.unschedulable_reasons)
        metrics.track_binding(self.scheduler.binding.in_flight)
        metrics.track_batching(self._batch_counts)
        accelerators, problems = fragmentation.daemon_view(
            self.cache.update_snapshot, self.scheduler.snapshot, [p.plugin_args for p in config.profiles]
        )
        for problem in problems:
            log.warning("accelerator_metrics_config", problem=problem)
        metrics.track_accelerators(accelerators)

    def _take_prefetched(self, prefetched: Prefetch) -> None:
        """LISTs the command line started before the daemon was built: the informers whose LIST it
        holds take their answers (see :mod:`custom_scheduler.kube.prefetch`); the rest is dropped."""
        for inf in self.informers:
            r = inf.reflector
            r.initial = prefetched.claim(r.path, r.field_selector, r.label_selector)
        prefetched.discard()

    def _informer(self, path: str, decode: Callable[[Any], Any], key: Callable[[Any], str], name: str) -> Informer[Any]:
        """An informer only the plugins' listers read (no sink: nothing is queued on its events)."""
        return Informer(
            self.watch_client,
            path,
            decode,
            key,
            NULL_SINK,
            name=name,
            read_timeout=self._watch_read_timeout,
            **self._inf_kw(name),
        )

    def _build_listers(self) -> None:
        """Namespaces, PodDisruptionBudgets and workload selectors: what plugins list, not the queue."""
        self.namespaces: Informer[Any] = self._informer(
            "/api/v1/namespaces", namespace_from_json, lambda n: n.name, "namespaces"
        )
        self.pdbs: Informer[PodDisruptionBudget] = self._informer(
            "/apis/policy/v1/poddisruptionbudgets", pdb_from_json, lambda b: f"{b.namespace}/{b.name}", "pdbs"
        )
        # Selectors of Services/RCs/ReplicaSets/StatefulSets: PodTopologySpread's system defaults.
        self.selectors = DefaultSelectors(self.watch_client, read_timeout=self._watch_read_timeout)

    def _build_writers(self, config: SchedulerConfig) -> None:
        """The API writer (events, pod conditions) and the evictor, both fenced by leadership."""
        self.writer = Writer(
            self.client,
            reporting_controller=config.profiles[0].scheduler_name,
            dry_run=self.dry_run,
            fence=self.fence,
        )
        # Preemption's API calls run on the evictor's pool, off the scheduling thread; shadow mode
        # only reports what it would evict.
        self.evictor: ApiEvictor | None = (
            None
            if self.dry_run
            else ApiEvictor(
                self.client,
                fence=self.fence,
                events=self.writer.event,
                on_done=self._preemption_done,
                lookup=self.cache.get_pod,
            )
        )

    def _build_scheduler_informers(self) -> None:
        """Pods and nodes, whose events the scheduler's sinks turn into cache and queue changes."""
        self.pods = pod_informer(
            self.watch_client,
            # The PodGroup member index first, so a new member's own PreEnqueue already counts it.
            fan_out(
                CallbackSink(self.gangs.member_added, self.gangs.member_updated, self.gangs.member_deleted),
                CallbackSink(self.scheduler.on_pod_add, self.scheduler.on_pod_update, self.scheduler.on_pod_delete),
                *self._decision_sinks(),
            ),
            read_timeout=self._watch_read_timeout,
            **self._inf_kw("pods"),
        )
        self.nodes = node_informer(
            self.watch_client,
            CallbackSink(self.scheduler.on_node_add, self.scheduler.on_node_update, self.scheduler.on_node_delete),
            read_timeout=self._watch_read_timeout,
            **self._inf_kw("nodes"),
        )

    def _build_store_informers(self, config: SchedulerConfig) -> None:
        """The volume, DRA and PodGroup stores' informers, each change retrying the pods it may help.

        A store's informers start only when an enabled plugin registers for its objects' events
        (the plugins' ``events_to_register``, as upstream starts the informers its plugins' events
        name): a server without resource.k8s.io/v1 or the PodGroup APIs, or RBAC without them, must
        not keep a profile that does not use them from syncing. A reload that starts using them
        later needs a restart (until then those pods wait)."""
        timeout = self._watch_read_timeout
        wanted = {reg.event.resource for fwk in self.profiles.values() for reg in fwk.requeue.registrations()}
        # PVs, PVCs, StorageClasses and CSI objects for the volume plugins (and their assume cache).
        self.volumes.pod_exists = lambda uid: self.pods.get(uid) is not None
        self.volumes.node_labels = self._node_labels
        self.volumes.add_listener(self._on_volume_change)
        self.volume_informers = (
            volume_informers(self.watch_client, self.volumes, self._inf_kw, read_timeout=timeout)
            if wanted & cluster_events.STORAGE_RESOURCES
            else []
        )
        # ResourceSlices, DeviceClasses and ResourceClaims (allocated devices).
        self.dra.add_listener(self._on_dra_change)
        self.dra_informers = (
            dra_informers(self.watch_client, self.dra, self._inf_kw, read_timeout=timeout)
            if wanted & cluster_events.DRA_RESOURCES
            else []
        )
        # PodGroups of either API (absent CRD or a server before 1.37: they wait quietly).
        self.gangs.add_listener(self._on_gang_change)
        if self.metrics is not None:  # GangScheduling's reservations, read at each scrape
            self.metrics.track_reservations(self.gangs.reservations.summary)
        self.gang_informers = (
            gang_informers(self.watch_client, self.gangs, self._inf_kw, read_timeout=timeout)
            if cluster_events.Resource.POD_GROUP in wanted
            else []
        )

    def _decision_log(self, cfg: RingConfig | None, metrics: Metrics | None) -> DecisionLog | None:
        """The recorder, when the record is on: it writes to its ring only while leading (a
        shadow, which has no elector, always: to a ring named for the shadow)."""
        if cfg is None:
            return None
        return DecisionLog(
            DecisionRing(self.client, cfg),
            shadow=self.dry_run,
            profiles=lambda: self.profiles,
            profile_of=lambda uid: p.scheduler_name if (p := self.pods.get(uid)) is not None else "",
            fence=self.fence,
            registry=metrics.registry if metrics is not None else None,
        )

    def _batch_counts(self) -> tuple[dict[tuple[str, str], int], dict[tuple[str, str], int]]:
        """Opportunistic batching's counts per profile, for the metrics."""
        batches = dict(self.scheduler.cycle.batches)
        attempts = {(p, r): n for p, b in batches.items() for r, n in dict(b.attempts).items()}
        flushes = {(p, r): n for p, b in batches.items() for r, n in dict(b.flushes).items()}
        return attempts, flushes

    def _decision_sinks(self) -> list[CallbackSink[Pod]]:
        d = self.decision_log
        return [] if d is None else [CallbackSink(d.pod_added, d.pod_updated, d.pod_deleted)]

    @property
    def profiles(self) -> dict[str, Framework]:
        """The current frameworks by profile name (the scheduler's: a reload swaps them there)."""
        return self.scheduler.profiles

    def _preemption_done(self, preemptor: Pod, ok: bool) -> None:
        self.scheduler.preemption_done(preemptor, ok)

    @staticmethod
    def _informer_metrics(metrics: Metrics | None) -> Callable[[str], dict[str, Any]]:
        def kw(resource: str) -> dict[str, Any]:
            if metrics is None:
                return {}
            return {
                "metrics_relist": lambda reason: metrics.relist(resource),
                "metrics_restart": lambda reason: metrics.watch_restart(resource, reason),
            }

        return kw

    def _frameworks(self, config: SchedulerConfig, inputs: FrameworkInputs) -> dict[str, Framework]:
        """Frameworks for every profile, wired to this daemon's snapshot, listers and writer."""
        # Shadow mode (dry_run) gives plugins no client: preemption then only reports its victims.
        return build_frameworks(
            config.profiles,
            self.registry,
            inputs.snapshot,
            client=None if self.dry_run else self.client,
            namespace_labels=self._namespace_labels,
            namespace_version=lambda: self.namespaces.version,
            default_spread_selector=self.selectors.for_pod,
            volumes=self.volumes,
            dra=self.dra,
            metrics_sources=self.metrics_sources,
            gangs=self.gangs,
            pdb_lister=self.pdbs.list,
            nominated_lister=inputs.nominated,
            event_sink=None if self.dry_run else self.writer.event,
            activator=inputs.activate,
            preempting=inputs.preempting,
            fence=self.fence,
            extenders=Extenders.build(config.extenders, pod_json=api_pod_json(self.client.get)),
            recorder=self.metrics.framework if self.metrics is not None else NO_RECORDER,
        )

    def _load_metrics_for(self, config: SchedulerConfig) -> loadmetrics.MetricsServerSource | None:
        src = load_aware.metrics_source_for(config, self.client, self.metrics_sources)
        if src is not None:
            src.add_listener(lambda: self.queue.move_all_to_active_or_backoff(load_aware.METRICS_REFRESHED))
        return src

    def _stop_load_metrics(self) -> None:
        if self.load_metrics is not None:
            self.load_metrics.stop()
            self.metrics_sources.uninstall(self.load_metrics.name, self.load_metrics)
            self.load_metrics = None

    def apply_config(self, config: SchedulerConfig) -> None:
        """Swap in a new (already validated) config between scheduling cycles.

        Queued pods stay queued. Pods that already exist and belong to a profile that is new
        in ``config`` are queued now (the informer ignored them when they arrived). Changes to
        ``clientConnection``, ``leaderElection`` or the health address need a restart: each changed
        field is named in a warning, and the running values stay in force (and in ``/configz``).
        """
        fwks = self._frameworks(config, self._inputs)
        old = self.config
        changed = restart_only_changes(old, config)
        if changed:
            log.warning("config_change_needs_restart", fields=changed)
            config = dataclasses.replace(
                config,
                client_connection=old.client_connection,
                leader_election=old.leader_election,
                healthz_bind_address=old.healthz_bind_address,
            )
        new_names = set(fwks) - set(self.profiles)
        # One reference swap: a cycle, and the queue's QueueSort and PreEnqueue, see the old or the new set.
        self.scheduler.profiles = fwks
        self.scheduler.algorithm.percentage = config.percentage_of_nodes_to_score
        self.queue.set_backoff(float(config.pod_initial_backoff_seconds), float(config.pod_max_backoff_seconds))
        # The PreEnqueue plugins may have changed: gated pods may now pass, queued ones be gated.
        released, gated = self.queue.recheck_pre_enqueue()
        if released or gated:
            log.info("pre_enqueue_rechecked", released=released, gated=gated)
        if load_aware.source_params(config) != load_aware.source_params(old):
            # NodeLoad's args changed what its source reads (or NodeLoad came or went): rebuild it.
            self._stop_load_metrics()
            self.load_metrics = self._load_metrics_for(config)
            if self.load_metrics is not None and self._scheduling:
                self.load_metrics.start()
        self.config = config
        for pod in self.pods.list():
            if not pod.node_name and pod.scheduler_name in new_names:
                self.queue.add(pod)
        log.info("config_applied", profiles=sorted(fwks))

    def _node_labels(self, name: str) -> Mapping[str, str] | None:
        node = self.nodes.get(name)
        return node.labels if node is not None else None

    def _on_volume_change(self, kind: str, old: Any, new: Any) -> None:
        """A storage object changed: retry the pods a volume plugin rejected that it may help."""
        self._on_store_change(kind, old, new)

    def _on_dra_change(self, kind: str, old: Any, new: Any) -> None:
        """A DRA object changed: retry the pods DynamicResources rejected (or gated) that it may help."""
        self._on_store_change(kind, old, new)

    def _on_store_change(self, kind: str, old: Any, new: Any) -> None:
        """Pass a store's change to the queue as its cluster event: the plugins' hints decide."""
        event = cluster_events.store_event(kind, old, new)
        if event is not None:
            self.queue.move_all_to_active_or_backoff(event, old, new)

    def _on_gang_change(self, change: GangChange) -> None:
        """A PodGroup appeared, lowered its minCount, or gained a member: retry that group's
        members GangScheduling held back (and only those)."""
        self.queue.move_all_to_active_or_backoff(gang_hints.change_event(change), None, change)

    def _namespace_labels(self, name: str) -> Mapping[str, str] | None:
        ns = self.namespaces.get(name)
        return ns.labels if ns is not None else None

    @property
    def ready(self) -> bool:
        return all(inf.synced.is_set() for inf in self.informers)

    @property
    def informers(self) -> tuple[Informer[Any], ...]:
        return (
            self.namespaces,
            self.pdbs,
            *self.selectors.informers,
            *self.volume_informers,
            *self.dra_informers,
            *self.gang_informers,
            self.nodes,
            self.pods,
        )

    def start_informers(self) -> None:
        self.writer.start()
        # PodDisruptionBudgets are policy/v1 from Kubernetes 1.21; older servers serve v1beta1.
        try:
            self.client.get("/apis/policy/v1")
        except kerrors.NotFound:
            self.pdbs.reflector.path = "/apis/policy/v1beta1/poddisruptionbudgets"
        except kerrors.KubeError as e:
            log.warning("discovery_failed", group="policy/v1", error=str(e)[:200])
        for inf in self.informers:
            inf.start()

    def wait_for_sync(self, timeout: float = 120.0) -> bool:
        """True once every informer has listed; False at ``timeout``, or as soon as the stop event
        is set: a SIGTERM while the API server is unreachable ends the daemon at once, as a
        cancelled context ends kube-scheduler's WaitForCacheSync, not after the sync timeout."""
        deadline = time.monotonic() + timeout
        for inf in self.informers:
            while not inf.synced.wait(min(SYNC_POLL, max(0.0, deadline - time.monotonic()))):
                if self.stop_event.is_set() or time.monotonic() >= deadline:
                    return False
        return True

    def start_scheduling(self) -> None:
        """Start the scheduling loop (on a leader, once caches are in sync)."""
        self._scheduling = True
        if self.load_metrics is not None:
            self.load_metrics.start()
        self._spawn("queue-flush", lambda: self.queue.run_flush_loops(self.stop_event))
        self._spawn("cache-cleanup", self._cleanup_loop)
        recorder = self.decision_log
        if recorder is not None:  # before the first decision: the bindings it sees are then ours to record
            recorder.active = True
            self._spawn("decision-record", lambda: recorder.run(self.stop_event))
        self._spawn("scheduling", lambda: self.scheduler.run(self.stop_event))
        log.info("scheduling_started", profiles=sorted(self.profiles))

    def start(self, sync_timeout: float = 120.0) -> None:
        self.start_informers()
        if not self.wait_for_sync(sync_timeout):
            raise TimeoutError("informers did not sync")
        log.info("caches_synced", nodes=len(self.nodes.list()), pods=len(self.pods.list()))
        self.start_scheduling()

    def _spawn(self, name: str, target: Callable[[], None]) -> None:
        t = threading.Thread(target=target, name=name, daemon=True)
        t.start()
        self._threads.append(t)

    def _cleanup_loop(self) -> None:
        while not self.stop_event.wait(1.0):
            for pod in self.cache.cleanup_expired():
                log.warning("assumed_pod_expired", pod=pod.key, node=pod.node_name)

    def stop(self, timeout: float = 30.0) -> None:
        """Stop taking pods, finish in-flight binds, flush writes, stop informers."""
        self.stop_event.set()
        self.queue.close()
        for t in self._threads:
            t.join(timeout)
        self.scheduler.shutdown(timeout)
        if self.evictor is not None:
            self.evictor.shutdown()
        for fwk in self.profiles.values():
            fwk.waiting.close()
        self.volumes.close()
        self.gang_status.close(timeout=5.0)
        self.writer.stop(timeout=5.0)
        for inf in self.informers:
            inf.stop()
        self._stop_load_metrics()
        log.info("stopped")

    def install_signal_handlers(self) -> None:
        """SIGTERM or SIGINT: stop gracefully; a second one: exit at once (see server.signals)."""
        from custom_scheduler.server.signals import SignalWatcher

        SignalWatcher(lambda name: self.stop_event.set()).install()

    def wait(self) -> None:
        while not self.stop_event.wait(1.0):
            pass


def _both(
    a: Callable[[Decision], None] | None, b: Callable[[Decision], None] | None
) -> Callable[[Decision], None] | None:
    """One ``on_decision`` hook calling ``a`` then ``b`` (either may be None)."""
    if a is None or b is None:
        return a or b

    def both(d: Decision) -> None:
        a(d)
        b(d)

    return both


#: Seconds between checks of the stop event while informers list (a wait ends as soon as one syncs).
SYNC_POLL = 0.1

#: Connections the informers' client keeps (see ``App.__init__``).
WATCH_POOL = 48


def restart_only_changes(old: SchedulerConfig, new: SchedulerConfig) -> list[str]:
    """The fields, by their config path (``clientConnection.qps``), that differ between ``old``
    and ``new`` and that only a restart applies (the client, the Lease, the health port)."""
    out: list[str] = []
    for section, a, b in (
        ("clientConnection", old.client_connection, new.client_connection),
        ("leaderElection", old.leader_election, new.leader_election),
    ):
        for f in dataclasses.fields(a):
            if getattr(a, f.name) != getattr(b, f.name):
                out.append(f"{section}.{_camel(f.name)}")
    if old.healthz_bind_address != new.healthz_bind_address:
        out.append("healthzBindAddress")
    return out


def _camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(w[:1].upper() + w[1:] for w in rest)
