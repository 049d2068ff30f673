"""Running the App as the production daemon: leader election, health/metrics, config reload.

Lifecycle of one replica (kube-scheduler's):

1. Serve ``/healthz``, ``/livez``, ``/readyz`` and ``/metrics`` over HTTPS (``/metrics`` for callers
   the API server authorizes, see :mod:`custom_scheduler.server.delegated_auth`); start the informers, so a standby
   keeps warm caches (unless ``delayCacheUntilActive``). ``/readyz`` turns 200 once they synced.
2. Campaign for the Lease. Only the leader runs the scheduling loop.
3. On losing the Lease (a renewal sees another holder, or ``renewDeadline`` passes): the elector
   revokes ``app.fence`` first, so queued binding cycles end unsent and a bind in flight writes
   nothing more (it asks the fence right before each POST); then stop popping pods, give in-flight
   binds at most ``leaseDuration - renewDeadline`` (no one else can lead before that), exit 1 so the
   Deployment restarts the pod. On SIGTERM: stop popping, finish in-flight binds, release the Lease, exit 0.

Shadow mode (``--dry-run``) never writes, so it neither takes nor waits for the Lease.
"""

from __future__ import annotations

import gc
import threading
from collections.abc import Callable
from pathlib import Path

import structlog

from custom_scheduler.config import render
from custom_scheduler.config.schema import SchedulerConfig
from custom_scheduler.server import health, leader
from custom_scheduler.server.app import App
from custom_scheduler.server.delegated_auth import DelegatingAuth
from custom_scheduler.server.metrics import Metrics
from custom_scheduler.server.reload import ConfigWatcher
from custom_scheduler.server.serving import ServingCerts

log = structlog.get_logger("custom_scheduler.server.daemon")


#: The collector's thresholds from start-up on: a young generation of 50 000 objects, not 700.
#: Parsing and caching the initial LISTs creates hundreds of thousands of long-lived objects, and
#: with the default thresholds the collections this triggers re-scan that growing heap: the 5000-node
#: LIST parsed in 64-126 ms with them, 36 ms without (orjson, the same bytes).
GC_THRESHOLD = (50_000, 50, 100)


def tune_gc() -> None:
    """After the caches are warm: move everything alive into the permanent generation and make
    collections rarer. The daemon's long-lived objects (every node and pod) would otherwise be
    re-scanned by each full collection, which took 14-34 ms per gen-2 collection at 1000 nodes
    and dominated the p99 of a scheduling cycle; the cycle itself creates few cycles of garbage."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(*GC_THRESHOLD)


def serve(
    app: App,
    metrics: Metrics,
    *,
    config_path: str | Path | None = None,
    dry_run: bool = False,
    sync_timeout: float = 120.0,
    identity: str | None = None,
    release_on_stop: bool = True,
    health_address: str | None = None,
    certs: ServingCerts | None = None,
    adjust: Callable[[SchedulerConfig], SchedulerConfig] | None = None,
) -> int:
    """Run until ``app.stop_event`` is set (SIGTERM) or leadership is lost; returns the exit code.

    ``certs`` is the serving certificate (``--tls-cert-file``); None serves a self-signed one.
    ``adjust`` re-applies the command line's overrides to each reloaded config file.
    """
    cfg = app.config
    metrics.track_pending(app.queue.pending_counts)
    elector = (
        _elector(app, metrics, identity, release_on_stop) if cfg.leader_election.leader_elect and not dry_run else None
    )
    server = _health_server(app, metrics, elector, health_address or cfg.healthz_bind_address, certs)
    try:
        server.start()
    except OSError as e:
        log.error("health_server_failed", address=cfg.healthz_bind_address, error=str(e))
        return 1
    app.health_port = server.port
    if config_path is not None:
        _watch_config(app, metrics, config_path, adjust)
    replica = _Replica(app, metrics, elector, sync_timeout)
    try:
        synced = replica.run(dry_run)
    finally:
        replica.stop()
        server.stop()
    if not synced:
        return 1
    if replica.lost.is_set():
        log.error("exiting_after_leadership_loss")
        return 1
    return 0


def _elector(app: App, metrics: Metrics, identity: str | None, release_on_stop: bool) -> leader.LeaderElector:
    metrics.set_leader(False)  # a candidate reports 0 from the start (client-go's leaderOff at construction)
    return leader.LeaderElector(
        app.client.clone(),
        app.config.leader_election,
        identity,
        release_on_stop=release_on_stop,
        on_leader_change=metrics.set_leader,
        on_slow_path=metrics.leader_slow_path,
        fence=app.fence,  # revoked the instant the Lease is lost: queued and retrying binds stop
    )


def _health_server(
    app: App, metrics: Metrics, elector: leader.LeaderElector | None, address: str, certs: ServingCerts | None
) -> health.HealthServer:
    return health.HealthServer(
        address,
        ready=lambda: app.ready,
        metrics=metrics,
        healthy=elector.check if elector is not None else (lambda: True),
        # Reviews get a client of their own, outside the write rate limit: a scrape must not wait
        # behind a burst of binds, and the caches bound how often they are sent.
        auth=DelegatingAuth(app.client.clone(qps=0, pool_maxsize=4)),
        certs=certs,
        configz=lambda: render.configz_json(app.config),  # read per request: a reload shows at once
    )


def _watch_config(
    app: App,
    metrics: Metrics,
    config_path: str | Path,
    adjust: Callable[[SchedulerConfig], SchedulerConfig] | None = None,
) -> None:
    """Reload the config file when it changes, on a thread of its own until the app stops."""
    watcher = ConfigWatcher(
        config_path,
        app.registry,
        app.apply_config,
        on_failure=lambda e: metrics.config_reload_failed(),
        adjust=adjust,
    )
    threading.Thread(target=watcher.run, args=(app.stop_event,), name="config-reload", daemon=True).start()


class _Replica:
    """One replica's run between the health server's start and stop: warm the caches, schedule
    when leading (at once without an elector), and stop. ``lost`` is set when leadership is lost,
    or the caches a new leader needs did not sync: then the process exits 1 and restarts.

    The elector's callbacks run on its thread; they only start threads or set events, since the
    elector must keep renewing the Lease."""

    def __init__(self, app: App, metrics: Metrics, elector: leader.LeaderElector | None, sync_timeout: float) -> None:
        self.app = app
        self.metrics = metrics
        self.elector = elector
        self.sync_timeout = sync_timeout
        self.config = app.config  # as started: leader election and cache timing need a restart to change
        self.identity = elector.identity if elector is not None else ""
        self.lost = threading.Event()
        self._elector_stop = threading.Event()
        self._elector_thread: threading.Thread | None = None

    def run(self, dry_run: bool) -> bool:
        """Until the app's stop event; False when the caches did not sync before leading."""
        if not self.config.delay_cache_until_active:  # standbys keep warm caches
            self.app.start_informers()
            if not self.app.wait_for_sync(self.sync_timeout):
                if self.app.stop_event.is_set():  # told to stop before the caches synced: a clean exit
                    log.info("stopped_before_caches_synced")
                    return True
                log.error("caches_not_synced", timeout=self.sync_timeout)
                return False
            log.info("caches_synced", nodes=len(self.app.nodes.list()), pods=len(self.app.pods.list()))
            tune_gc()
        if self.elector is None:
            self.metrics.set_leader(not dry_run)
            if self.config.delay_cache_until_active:
                self._sync_then_schedule()
            else:
                self.app.start_scheduling()
        else:
            self._elector_thread = threading.Thread(
                target=self.elector.run,
                args=(self._on_started, self._on_stopped, self._elector_stop),
                name="leader-election",
                daemon=True,
            )
            self._elector_thread.start()
        self.app.wait()
        return True

    def _sync_then_schedule(self) -> None:
        self.app.start_informers()
        if not self.app.wait_for_sync(self.sync_timeout):
            if self.app.stop_event.is_set():
                log.info("stopped_before_caches_synced")
                return
            log.error("caches_not_synced", timeout=self.sync_timeout)
            self.lost.set()
            self.app.stop_event.set()
            return
        self.app.start_scheduling()

    def _on_started(self) -> None:
        # The elector logged leader_acquired (with the identity) and start_scheduling logs
        # scheduling_started: one line each, nothing more here.
        if self.config.delay_cache_until_active:  # never block the elector thread: it must keep renewing
            threading.Thread(target=self._sync_then_schedule, daemon=True).start()
        else:
            self.app.start_scheduling()

    def _on_stopped(self) -> None:
        if not self.app.stop_event.is_set():  # lost, not SIGTERM
            log.error("leader_lost", identity=self.identity)
            self.lost.set()
            self.app.stop_event.set()  # stop popping pods now

    def stop(self) -> None:
        """Finish in-flight binds (after a loss only while nobody else can lead yet), then release
        the Lease."""
        le = self.config.leader_election
        self.app.stop(timeout=max(1.0, le.lease_duration - le.renew_deadline) if self.lost.is_set() else 30.0)
        self._elector_stop.set()  # release the Lease only after the binds are done
        if self._elector_thread is not None:
            self._elector_thread.join(le.renew_deadline)
        self.metrics.set_leader(False)
