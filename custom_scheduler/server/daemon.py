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
from pathlib import Path

import structlog

from custom_scheduler.server import health, leader
from custom_scheduler.server.app import App
from custom_scheduler.server.delegated_auth import DelegatingAuth
from custom_scheduler.server.metrics import Metrics
from custom_scheduler.server.reload import ConfigWatcher
from custom_scheduler.server.serving import ServingCerts

log = structlog.get_logger("custom_scheduler.server.daemon")


def tune_gc() -> None:
    """After the caches are warm: move everything alive into the permanent generation and make
    collections rarer. The daemon's long-lived objects (every node and pod) would otherwise be
    re-scanned by each full collection, which took 14-34 ms per gen-2 collection at 1000 nodes
    and dominated the p99 of a scheduling cycle; the cycle itself creates few cycles of garbage."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(50_000, 50, 100)


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
) -> int:
    """Run until ``app.stop_event`` is set (SIGTERM) or leadership is lost; returns the exit code.

    ``certs`` is the serving certificate (``--tls-cert-file``); None serves a self-signed one.
    """
    cfg = app.config
    le = cfg.leader_election
    metrics.track_pending(app.queue.pending_counts)
    elector = (
        leader.LeaderElector(
            app.client.clone(),
            le,
            identity,
            release_on_stop=release_on_stop,
            on_leader_change=metrics.set_leader,
            fence=app.fence,  # revoked the instant the Lease is lost: queued and retrying binds stop
        )
        if le.leader_elect and not dry_run
        else None
    )
    server = health.HealthServer(
        health_address or cfg.healthz_bind_address,
        ready=lambda: app.ready,
        metrics=metrics,
        healthy=elector.check if elector is not None else (lambda: True),
        # Reviews get a client of their own, outside the write rate limit: a scrape must not wait
        # behind a burst of binds, and the caches bound how often they are sent.
        auth=DelegatingAuth(app.client.clone(qps=0, pool_maxsize=4)),
        certs=certs,
    )
    try:
        server.start()
    except OSError as e:
        log.error("health_server_failed", address=cfg.healthz_bind_address, error=str(e))
        return 1
    app.health_port = server.port
    lost = threading.Event()
    elector_stop = threading.Event()
    elector_thread: threading.Thread | None = None

    if config_path is not None:
        watcher = ConfigWatcher(
            config_path, app.registry, app.apply_config, on_failure=lambda e: metrics.config_reload_failed()
        )
        threading.Thread(target=watcher.run, args=(app.stop_event,), name="config-reload", daemon=True).start()

    def sync_then_schedule() -> None:
        app.start_informers()
        if not app.wait_for_sync(sync_timeout):
            log.error("caches_not_synced", timeout=sync_timeout)
            lost.set()
            app.stop_event.set()
            return
        app.start_scheduling()

    try:
        if not cfg.delay_cache_until_active:  # standbys keep warm caches
            app.start_informers()
            if not app.wait_for_sync(sync_timeout):
                log.error("caches_not_synced", timeout=sync_timeout)
                return 1
            log.info("caches_synced", nodes=len(app.nodes.list()), pods=len(app.pods.list()))
            tune_gc()
        if elector is None:
            metrics.set_leader(not dry_run)
            if cfg.delay_cache_until_active:
                sync_then_schedule()
            else:
                app.start_scheduling()
        else:

            def on_started() -> None:
                log.info("leader_acquired", identity=elector.identity)
                if cfg.delay_cache_until_active:  # never block the elector thread: it must keep renewing
                    threading.Thread(target=sync_then_schedule, daemon=True).start()
                else:
                    app.start_scheduling()

            def on_stopped() -> None:
                if not app.stop_event.is_set():  # lost, not SIGTERM
                    log.error("leader_lost", identity=elector.identity)
                    lost.set()
                    app.stop_event.set()  # stop popping pods now

            elector_thread = threading.Thread(
                target=elector.run, args=(on_started, on_stopped, elector_stop), name="leader-election", daemon=True
            )
            elector_thread.start()
        app.wait()
    finally:
        # Finish in-flight binds; after a loss only while nobody else can lead yet.
        app.stop(timeout=max(1.0, le.lease_duration - le.renew_deadline) if lost.is_set() else 30.0)
        elector_stop.set()  # release the Lease only after the binds are done
        if elector_thread is not None:
            elector_thread.join(le.renew_deadline)
        metrics.set_leader(False)
        server.stop()
    if lost.is_set():
        log.error("exiting_after_leadership_loss")
        return 1
    return 0
