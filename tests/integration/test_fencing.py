"""Fencing on the real API server: a leader whose Lease is stolen mid-burst binds nothing more.

The daemon (``daemon.serve``, leader election on, short durations) talks to the API server through
the fault proxy, which slows every Binding POST down so that a few dozen binds are always in
flight and hundreds of binding cycles are queued. While hundreds of pods are being scheduled the
test's admin client overwrites the Lease with another holder and a fresh ``renewTime``. Then:

- the daemon's run loop returns exit code 1;
- the fence was revoked by the elector's first renewal after the theft, with the intruder named;
- exactly: no Binding was admitted after the revocation (the fence's own count, totally ordered
  with the revocation by its lock), and every Binding POST the proxy received is one of those
  admitted before it;
- by the clock: no Binding POST reached the proxy later than the in-process hand-off latency
  after the moment the loss was observed, and none at all once the daemon has exited;
- binds asleep between retries (503 + Retry-After) when the Lease went were refused on waking;
- the burst really was cut short (pods left pending), and the loser never wrote the Lease again.
"""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from pathlib import Path

from custom_scheduler import config
from custom_scheduler.devenv import cluster
from custom_scheduler.kube import api_errors
from custom_scheduler.kube.client import KubeClient
from custom_scheduler.plugins.builtin import full_registry
from custom_scheduler.server import leader
from custom_scheduler.server.app import App
from custom_scheduler.server.daemon import serve
from custom_scheduler.server.metrics import Metrics
from tests.builders import make_node, make_pod
from tests.faultproxy import FaultProxy, Rule
from tests.integration.env import Env

PODS = 400
BIND_DELAY = 0.25  # seconds the proxy holds each Binding POST: keeps binds in flight
#: A request admitted just before the revocation is sent a moment later; in this one process the
#: proxy's handler thread stamps its arrival after a GIL hand-off or two. Far below the seconds a
#: renewal round used to keep binding, and the exact admission count below carries the proof.
HANDOFF_SLACK = 0.5

CONFIG = """
apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
leaderElection:
  leaderElect: true
  leaseDuration: 4s
  renewDeadline: 3s
  retryPeriod: 500ms
  resourceName: {name}
  resourceNamespace: {namespace}
profiles:
- schedulerName: custom-scheduler
"""


def _steal(kube: KubeClient, namespace: str, name: str) -> float:
    """Write the Lease with another holder and a fresh renewTime; return when it was written."""
    path = leader.lease_path(namespace, name)
    for _ in range(50):
        lease = kube.get(path)
        now = leader.microtime(datetime.now(UTC))
        spec = lease["spec"]
        spec.update(
            holderIdentity="intruder",
            leaseDurationSeconds=60,
            acquireTime=now,
            renewTime=now,
            leaseTransitions=int(spec.get("leaseTransitions") or 0) + 1,
        )
        try:
            kube.put(path, lease)  # carries the resourceVersion we read: retried on a renewal race
        except api_errors.Conflict:
            continue
        return time.monotonic()
    raise AssertionError("could not overwrite the Lease")


def _binds(proxy: FaultProxy, namespace: str) -> list[tuple[float, int]]:
    return [
        (t, status)
        for t, method, path, status in list(proxy.timed)
        if method == "POST" and f"/namespaces/{namespace}/pods/" in path and path.endswith("/binding")
    ]


def test_stolen_lease_mid_burst_stops_every_bind_and_exits_1(env: Env, proxy: FaultProxy, tmp_path: Path) -> None:
    for i in range(8):
        env.nodes(make_node(f"fence-{i}").capacity(cpu="64", memory="64Gi", pods="110"))
    lease_name = f"fence-{env.namespace}"
    cfg = config.load_config(CONFIG.format(name=lease_name, namespace=env.namespace), full_registry())
    metrics = Metrics(process_collectors=False)
    app = App(cfg, full_registry(), KubeClient.from_kubeconfig(proxy.kubeconfig(tmp_path), qps=0, burst=1))
    result: list[int] = []
    t = threading.Thread(
        target=lambda: result.append(
            serve(app, metrics, identity="fenced-leader", health_address="127.0.0.1:0", sync_timeout=30)
        ),
        daemon=True,
    )
    # Every tenth pod's bind keeps failing with 503 + Retry-After, so some binds are always asleep
    # between retries when the Lease goes: their next attempt must be refused by the fence.
    proxy.add(
        Rule(
            "POST",
            rf"/namespaces/{env.namespace}/pods/burst-\d*7/binding",
            times=50 * PODS,
            status=503,
            retry_after=0.5,
        )
    )
    proxy.add(Rule("POST", rf"/namespaces/{env.namespace}/pods/[^/]+/binding", times=10 * PODS, delay=BIND_DELAY))
    t.start()
    try:
        cluster.wait_for(lambda: metrics.sample("custom_scheduler_leader") == 1.0, timeout=30, what="leadership")
        with ThreadPoolExecutor(16) as pool:
            list(
                pool.map(
                    env.create_pod, [make_pod(f"burst-{i}").req(cpu="100m", memory="64Mi").obj() for i in range(PODS)]
                )
            )
        cluster.wait_for(
            lambda: sum(1 for _, s in _binds(proxy, env.namespace) if s == 201) >= 60,
            timeout=60,
            what="binds under way",
        )
        stolen_at = _steal(env.kube, env.namespace, lease_name)
        t.join(30)
        assert not t.is_alive(), "the daemon kept running after losing its Lease"
    finally:
        app.stop_event.set()
        t.join(30)
    exited_at = time.monotonic()
    assert result == [1], "exit code after a lost Lease"

    rep = app.fence.report()
    assert not rep.held
    assert rep.reason == "lease held by intruder"
    assert rep.revoked_at is not None
    # Observed at the first renewal after the theft (every retryPeriod, plus one slow request).
    assert rep.revoked_at - stolen_at < 0.5 * (1 + leader.JITTER_FACTOR) + 1.0

    # Exact: nothing admitted after the revocation, and the server saw only admitted binds.
    binds = _binds(proxy, env.namespace)
    assert rep.admitted == rep.admitted_before_revoke
    assert len(binds) <= rep.admitted_before_revoke
    assert rep.refused > 0, "binds asleep between retries at the loss were refused on waking"
    # By the clock: nothing arrived after the loss beyond the hand-off of those admitted before it.
    late = [round(ts - rep.revoked_at, 3) for ts, _ in binds if ts > rep.revoked_at]
    assert all(d < HANDOFF_SLACK for d in late), late
    bound = sum(1 for _, s in binds if s == 201)
    pending = [p for p in cluster.list_pods(env.kube, env.namespace) if not p["spec"].get("nodeName")]
    print(
        f"\nfencing: {len(binds)} binding POSTs ({bound} bound), {rep.admitted_before_revoke} admitted before the "
        f"loss, {rep.refused} refused after it, {len(late)} arriving after it (max "
        f"{max(late, default=0.0):.3f}s: admitted before), {len(pending)} of {PODS} pods left pending; "
        f"loss observed {rep.revoked_at - stolen_at:.3f}s after the theft"
    )
    assert pending, "the burst finished before the theft: nothing was fenced"
    # serve() gave the binds in flight a bounded grace and returned; any still running (asleep
    # before a retry, say) go on in the binding pool. Once the pool has drained, the daemon can send
    # no more Binding POSTs, and the proxy recorded each one it got before answering it: only then
    # is "none after the exit" a statement about everything the daemon ever sent.
    assert app.scheduler.shutdown(timeout=30), "binding cycles still running 30 s after the exit"
    assert not [ts for ts, _ in _binds(proxy, env.namespace) if ts > exited_at], "a bind after exit"
    spec = env.kube.get(leader.lease_path(env.namespace, lease_name))["spec"]
    assert spec["holderIdentity"] == "intruder", "the loser never overwrote the new holder"
