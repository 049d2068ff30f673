"""Chaos with real clients: the controller-manager's Deployments, ReplicaSets and Jobs churn pods
while nodes come and go and the fault proxy breaks the API server under the scheduler.

For :data:`DURATION` seconds (default 60, ``CS_CHAOS_SECONDS`` to change) a seeded RNG
(``CS_CHAOS_SEED``; the seed is printed, so a failure replays) picks one action at a time:

- workloads: scale a Deployment up or down, roll one (a template change), create or delete a Job,
  delete a random pod (its controller replaces it);
- nodes: add one, cordon or uncordon one, delete one (and, as pod GC would, its pods), fail one
  (kwok reports it NotReady: the node-lifecycle controller taints it, taint-based eviction deletes
  its pods once their short toleration runs out, their controllers recreate them and we place them
  on the healthy nodes) or let a failed one recover;
- faults: 429 with Retry-After and 5xx on binds and lists, a bind dropped before or after the
  server acted, every watch broken, a silent watch, a watch answered 410, etcd compacted to its
  current revision (watches resuming from an older resourceVersion get 410 and re-list), and one
  kube-apiserver restart in the middle.

The Nodes are the session's kwok nodes: they heartbeat, pods run, graceful deletes finish, and a
node fails on demand (:func:`kwok.make_not_ready`). One failure is forced early, on the node with the
most pods, so every run sees evictions. Afterwards, with faults off, every node uncordoned and
recovered, within a settling timeout: every live pod is bound (capacity is sized so that they all
fit), exactly one Binding POST succeeded per pod (pod names are unique: controllers generate them),
no node is over-committed, the scheduler's cache holds exactly the cluster's bound pods and nodes,
the forced failure evicted pods (each then deleted), and the test process's RSS grew by less than
:data:`RSS_BUDGET_MIB` over the run. The figures (actions of each kind, pods created, bound,
evicted, time to settle) are printed.
"""

from __future__ import annotations

import base64
import contextlib
import gc
import json
import os
import random
import time
import urllib.request
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from custom_scheduler.api.model import Pod, pod_from_json
from custom_scheduler.core.informers import Informer
from custom_scheduler.devenv import cluster, kwok
from custom_scheduler.devenv.controlplane import ControlPlane
from custom_scheduler.kube import api_errors
from custom_scheduler.kube.client import KubeClient, pod_path
from custom_scheduler.server.app import App
from tests.builders import NodeBuilder, make_node
from tests.faultproxy import FaultProxy, Rule
from tests.integration.env import Env

DURATION = float(os.environ.get("CS_CHAOS_SECONDS", "60"))
SEED = int(os.environ.get("CS_CHAOS_SEED", "20260137"))
SETTLE = 120.0
RSS_BUDGET_MIB = 64.0
MERGE = "application/merge-patch+json"
DEPLOYMENTS = 3
MAX_REPLICAS = 10
MIN_NODES, MAX_NODES = 4, 8
#: At most this many nodes failed at once: with 3 of 4+ NotReady the node-lifecycle controller
#: takes the zone (all our nodes share one) for disrupted and slows or stops evictions.
MAX_FAILED = 2
#: A failed node stays failed at least this long (seconds): the controller looks every 2 s, taints
#: (one node per 10 s in a zone) and the pods' toleration (:data:`TOLERATION_SECONDS`) runs out.
FAILED_AT_LEAST = 20.0
#: How long the workloads' pods tolerate a NotReady or unreachable node (the API server's default,
#: 300 s, would outlast the run).
TOLERATION_SECONDS = 2
#: Each node: 4 CPUs. Worst case: 3 Deployments x 10 replicas x 300m, +25% surge during a
#: rollout, plus 3 Jobs x 3 x 200m = 13.05 CPUs, which MIN_NODES hold with room to spare.
NODE = {"cpu": "4", "memory": "8Gi", "pods": "40"}


def rss_mib() -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024.0
    return 0.0


def _container(name: str, cpu: str, memory: str) -> dict[str, Any]:
    return {
        "name": name,
        "image": "registry.k8s.io/pause:3.10",
        "resources": {"requests": {"cpu": cpu, "memory": memory}},
    }


def _tolerations() -> list[dict[str, Any]]:
    return [
        {"key": key, "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": TOLERATION_SECONDS}
        for key in (kwok.NOT_READY_TAINT, "node.kubernetes.io/unreachable")
    ]


def _deployment(name: str, replicas: int, cpu: str) -> dict[str, Any]:
    labels = {"app": name}
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": labels},
            "strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": "25%", "maxUnavailable": "25%"}},
            "template": {
                "metadata": {"labels": labels, "annotations": {"rev": "0"}},
                "spec": {
                    "schedulerName": "custom-scheduler",
                    "terminationGracePeriodSeconds": 0,
                    "tolerations": _tolerations(),
                    "containers": [_container("c", cpu, "128Mi")],
                },
            },
        },
    }


def _job(name: str) -> dict[str, Any]:
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name},
        "spec": {
            "parallelism": 3,
            "completions": 3,
            "template": {
                "spec": {
                    "schedulerName": "custom-scheduler",
                    "restartPolicy": "Never",
                    "terminationGracePeriodSeconds": 0,
                    "tolerations": _tolerations(),
                    "containers": [_container("c", "200m", "64Mi")],
                }
            },
        },
    }


def etcd_compact(control_plane: ControlPlane) -> int:
    """Compact etcd to its current revision through the gRPC gateway; returns the revision."""
    base = f"http://127.0.0.1:{control_plane.etcd_port}/v3/kv"

    def post(path: str, body: dict[str, Any]) -> dict[str, Any]:
        req = urllib.request.Request(f"{base}/{path}", data=json.dumps(body).encode(), method="POST")
        with urllib.request.urlopen(req, timeout=10) as r:
            out: dict[str, Any] = json.loads(r.read())
            return out

    key = base64.b64encode(b"/registry/namespaces/default").decode()
    rev = int(post("range", {"key": key, "count_only": True})["header"]["revision"])
    post("compaction", {"revision": rev, "physical": False})
    return rev


@dataclass
class Chaos:
    """The driver: one random action per step, counted."""

    kube: KubeClient
    namespace: str
    control_plane: ControlPlane
    proxy: FaultProxy
    nodes: Callable[[NodeBuilder], dict[str, Any]]
    rng: random.Random
    node_names: list[str] = field(default_factory=list)
    cordoned: set[str] = field(default_factory=set)
    #: Failed nodes (kwok reports them NotReady) -> when they failed (monotonic seconds).
    failed: dict[str, float] = field(default_factory=dict)
    jobs: list[str] = field(default_factory=list)
    replicas: dict[str, int] = field(default_factory=dict)
    counts: Counter[str] = field(default_factory=Counter)
    restarted: bool = False
    _serial: int = 0

    def _next(self) -> int:
        self._serial += 1
        return self._serial

    def ns(self, kind: str, name: str = "") -> str:
        group = {"deployments": "/apis/apps/v1", "jobs": "/apis/batch/v1"}[kind]
        p = f"{group}/namespaces/{self.namespace}/{kind}"
        return f"{p}/{name}" if name else p

    # -- setup ------------------------------------------------------------------------------------
    def add_node(self) -> None:
        node = self.nodes(make_node(f"chaos-{self._next()}").capacity(**NODE))
        self.node_names.append(node["metadata"]["name"])
        self.counts["nodes added"] += 1

    def start(self) -> None:
        for _ in range(MIN_NODES + 1):
            self.add_node()
        for i in range(DEPLOYMENTS):
            name = f"web-{i}"
            self.replicas[name] = self.rng.randint(2, MAX_REPLICAS)
            self.kube.post(self.ns("deployments"), _deployment(name, self.replicas[name], ("100m", "200m", "300m")[i]))

    # -- actions ----------------------------------------------------------------------------------
    def scale(self) -> None:
        name = self.rng.choice(sorted(self.replicas))
        n = self.rng.randint(0, MAX_REPLICAS)
        self.kube.patch(self.ns("deployments", name), {"spec": {"replicas": n}}, MERGE)
        self.counts["scale up" if n > self.replicas[name] else "scale down"] += 1
        self.replicas[name] = n

    def roll(self) -> None:
        name = self.rng.choice(sorted(self.replicas))
        patch = {"spec": {"template": {"metadata": {"annotations": {"rev": str(self._next())}}}}}
        self.kube.patch(self.ns("deployments", name), patch, MERGE)
        self.counts["rolling updates"] += 1

    def job(self) -> None:
        if len(self.jobs) >= 3 or (self.jobs and self.rng.random() < 0.4):
            name = self.jobs.pop(self.rng.randrange(len(self.jobs)))
            self.kube.delete(self.ns("jobs", name), {"propagationPolicy": "Background"})
            self.counts["jobs deleted"] += 1
        else:
            name = f"batch-{self._next()}"
            self.kube.post(self.ns("jobs"), _job(name))
            self.jobs.append(name)
            self.counts["jobs created"] += 1

    def delete_pod(self) -> None:
        pods = [p for p in cluster.list_pods(self.kube, self.namespace) if not p["metadata"].get("deletionTimestamp")]
        if pods:
            victim = self.rng.choice(pods)["metadata"]["name"]
            with contextlib.suppress(api_errors.NotFound):
                self.kube.delete(pod_path(self.namespace, victim), {"gracePeriodSeconds": 0})
            self.counts["pods deleted"] += 1

    def node(self) -> None:
        r = self.rng.random()
        if r < 0.3 and len(self.node_names) < MAX_NODES:
            self.add_node()
        elif r < 0.6:
            name = self.rng.choice(self.node_names)
            on = name not in self.cordoned
            self.kube.patch(f"/api/v1/nodes/{name}", {"spec": {"unschedulable": on or None}}, MERGE)
            (self.cordoned.add if on else self.cordoned.discard)(name)
            self.counts["nodes cordoned" if on else "nodes uncordoned"] += 1
        elif r < 0.75:
            self.fail_or_recover()
        elif len(self.node_names) > MIN_NODES:
            name = self.node_names.pop(self.rng.randrange(len(self.node_names)))
            self.cordoned.discard(name)
            self.failed.pop(name, None)
            self.kube.delete(f"/api/v1/nodes/{name}")
            # Pod GC's job: pods bound to a node that no longer exists are deleted.
            for p in cluster.list_pods(self.kube, self.namespace):
                if p["spec"].get("nodeName") == name:
                    with contextlib.suppress(api_errors.NotFound):
                        self.kube.delete(pod_path(self.namespace, p["metadata"]["name"]), {"gracePeriodSeconds": 0})
            self.counts["nodes deleted"] += 1
        else:
            self.add_node()

    def fail_or_recover(self) -> None:
        """Recover a node failed long enough, or fail a healthy one (see :data:`MAX_FAILED`)."""
        now = time.monotonic()
        due = sorted(n for n, at in self.failed.items() if now - at >= FAILED_AT_LEAST)
        if due and (len(self.failed) >= MAX_FAILED or self.rng.random() < 0.5):
            self.recover(self.rng.choice(due))
        elif len(self.failed) < MAX_FAILED:
            self.fail(self.rng.choice([n for n in self.node_names if n not in self.failed]))

    def fail(self, name: str) -> None:
        kwok.make_not_ready(self.kube, name)
        self.failed[name] = time.monotonic()
        self.counts["nodes failed"] += 1

    def recover(self, name: str) -> None:
        kwok.make_ready(self.kube, name)
        del self.failed[name]
        self.counts["nodes recovered"] += 1

    def fail_busiest(self) -> None:
        """Fail the healthy node with the most live pods (the run's one forced failure)."""
        load = Counter(p["spec"].get("nodeName") for p in _live_pods(self.kube, self.namespace))
        self.fail(max((n for n in self.node_names if n not in self.failed), key=lambda n: load[n]))

    def fault(self) -> None:
        ns = self.namespace
        bind = rf"/namespaces/{ns}/pods/[^/]+/binding"
        kinds: list[tuple[str, Callable[[], Any]]] = [
            ("429 on binds", lambda: self.proxy.add(Rule("POST", bind, times=3, status=429, retry_after=0.2))),
            ("5xx on binds", lambda: self.proxy.add(Rule("POST", bind, times=3, status=self.rng.choice([500, 503])))),
            ("dropped binds", lambda: self.proxy.add(Rule("POST", bind, times=1, drop=True))),
            ("answer lost after bind", lambda: self.proxy.add(Rule("POST", bind, times=1, drop_after_forward=True))),
            (
                "5xx on lists",
                lambda: self.proxy.add(Rule("GET", r"^/api/v1/(pods|nodes)\?(?!.*watch)", times=2, status=503)),
            ),
            ("watches dropped", self.proxy.break_streams),
            ("silent watch", self._silent_watch),
            ("watch 410", self._watch_410),
            ("etcd compactions", lambda: etcd_compact(self.control_plane)),
        ]
        what, act = self.rng.choice(kinds)
        act()
        self.counts[what] += 1

    def _silent_watch(self) -> None:
        self.proxy.add(Rule("GET", r"^/api/v1/(pods|nodes)\?.*watch=true", times=1, silent=True))
        self.proxy.break_streams()

    def _watch_410(self) -> None:
        self.proxy.add(Rule("GET", r"^/api/v1/pods\?.*watch=true", times=1, watch_error=410))
        self.proxy.break_streams()

    def restart(self) -> None:
        self.control_plane.restart_apiserver()
        self.restarted = True
        self.counts["apiserver restarts"] += 1

    def step(self) -> None:
        actions: list[tuple[float, Callable[[], None]]] = [
            (3, self.scale),
            (1, self.roll),
            (1, self.job),
            (2, self.delete_pod),
            (2, self.node),
            (3, self.fault),
        ]
        act = self.rng.choices([a for _, a in actions], weights=[w for w, _ in actions])[0]
        try:
            act()
        except api_errors.KubeError as e:  # the admin client races the controllers; not a failure
            self.counts[f"action conflicts ({type(e).__name__})"] += 1

    def calm(self) -> None:
        """Faults off, every node schedulable and healthy, enough nodes: from here every pod fits
        (the node-lifecycle controller lifts the not-ready taints within seconds)."""
        with self.proxy._lock:
            for r in self.proxy.rules:
                r.times = 0
        for name in sorted(self.cordoned):
            self.kube.patch(f"/api/v1/nodes/{name}", {"spec": {"unschedulable": None}}, MERGE)
        self.cordoned.clear()
        for name in sorted(self.failed):
            self.recover(name)
        while len(self.node_names) < MIN_NODES:
            self.add_node()


@dataclass
class PodTally:
    """An informer sink on the test's own (direct) client: every pod uid created and deleted."""

    created: set[str] = field(default_factory=set)
    deleted: set[str] = field(default_factory=set)
    deleted_names: set[str] = field(default_factory=set)

    def on_add(self, pod: Pod) -> None:
        self.created.add(pod.uid)

    def on_update(self, old: Pod, new: Pod) -> None:
        self.created.add(new.uid)

    def on_delete(self, pod: Pod) -> None:
        self.deleted.add(pod.uid)
        self.deleted_names.add(pod.name)


FAULTS = frozenset(
    {
        "429 on binds",
        "5xx on binds",
        "dropped binds",
        "answer lost after bind",
        "5xx on lists",
        "watches dropped",
        "silent watch",
        "watch 410",
        "etcd compactions",
        "apiserver restarts",
    }
)


def _faults(counts: Counter[str]) -> int:
    return sum(v for k, v in counts.items() if k in FAULTS)


def _evicted(env: Env) -> set[str]:
    """The pods taint-based eviction deleted: the controller's "Marking for deletion" events."""
    return {
        str((e.get("regarding") or {}).get("name"))
        for e in env.events("TaintManagerEviction")
        if str(e.get("note") or "").startswith("Marking for deletion")
    }


def _live_pods(kube: KubeClient, namespace: str) -> list[dict[str, Any]]:
    return [
        p
        for p in cluster.list_pods(kube, namespace)
        if not p["metadata"].get("deletionTimestamp") and p["status"].get("phase") not in ("Succeeded", "Failed")
    ]


def test_chaos_with_controllers_nodes_and_faults(env: Env, proxied: Callable[[], App], proxy: FaultProxy) -> None:
    rng = random.Random(SEED)
    chaos = Chaos(env.kube, env.namespace, env.control_plane, proxy, env.nodes, rng)
    tally = PodTally()
    tally_informer: Informer[Pod] = Informer(
        env.kube.clone(qps=0),
        f"/api/v1/namespaces/{env.namespace}/pods",
        pod_from_json,
        lambda p: p.uid,
        tally,
        name="tally",
    )
    tally_informer.start()
    chaos.start()
    app = proxied()
    gc.collect()
    rss_before = rss_mib()
    t0 = time.monotonic()
    restart_at = DURATION * rng.uniform(0.35, 0.6)
    fail_at = DURATION * rng.uniform(0.1, 0.2)
    steps = 0
    while (elapsed := time.monotonic() - t0) < DURATION:
        if not chaos.restarted and elapsed >= restart_at:
            chaos.restart()
        elif not chaos.counts["nodes failed"] and elapsed >= fail_at:
            chaos.fail_busiest()
        else:
            chaos.step()
        steps += 1
        time.sleep(rng.uniform(0.1, 0.5))
    chaos.calm()
    calm_at = time.monotonic()

    def settled() -> list[dict[str, Any]] | None:
        live = _live_pods(env.kube, env.namespace)
        wanted = sum(chaos.replicas.values())
        return live if live and all(p["spec"].get("nodeName") for p in live) and len(live) >= wanted else None

    live = cluster.wait_for(settled, timeout=SETTLE, interval=1.0, what="every live pod bound")
    settle_seconds = time.monotonic() - calm_at
    tally_informer.stop()
    # The cache catches up with the last watch events.
    cluster.wait_for(lambda: app.cache.counts()["assumed_pods"] == 0, timeout=30, what="no assumed pods")
    gc.collect()
    rss_after = rss_mib()

    # Exactly one successful Binding per pod (a 201 whose answer was lost still counts once).
    ok = Counter(
        path.split("/pods/")[1].split("/")[0]
        for m, path, s in list(proxy.log)
        if m == "POST" and f"/namespaces/{env.namespace}/pods/" in path and path.endswith("/binding") and s == 201
    )
    assert max(ok.values(), default=0) == 1, [n for n, c in ok.items() if c > 1]
    transport_lost = {
        path.split("/pods/")[1].split("/")[0]
        for m, path, s in list(proxy.log)
        if m == "POST" and path.endswith("/binding") and s in (-1, 502)
    }
    unexplained = [p["metadata"]["name"] for p in live if ok[p["metadata"]["name"]] != 1]
    assert not [n for n in unexplained if n not in transport_lost], unexplained
    assert cluster.overcommitted_nodes(env.kube) == []

    # The cache equals the cluster: the same bound pods on the same nodes, the same nodes.
    assert app.cache.check_invariants() == []

    def cache_matches() -> list[str]:
        every = env.kube.get("/api/v1/pods", {"fieldSelector": "status.phase!=Succeeded,status.phase!=Failed"})["items"]
        bound = {p["metadata"]["uid"]: p["spec"]["nodeName"] for p in every if p["spec"].get("nodeName")}
        wrong = [uid for uid, node in bound.items() if (c := app.cache.get_pod(uid)) is None or c.node_name != node]
        if app.cache.counts()["pods"] != len(bound):
            wrong.append(f"cache holds {app.cache.counts()['pods']} pods, cluster {len(bound)}")
        cluster_nodes = {n["metadata"]["name"] for n in env.kube.get("/api/v1/nodes")["items"]}
        if set(app.cache.node_names()) != cluster_nodes:
            wrong.append(f"nodes: cache {sorted(app.cache.node_names())} != cluster {sorted(cluster_nodes)}")
        return wrong

    # Eventually consistent: a reflector whose last watch failed without progress may still be in
    # its backoff (at most 30 s x 1.5, as client-go's) when the faults stop.
    with contextlib.suppress(TimeoutError):
        cluster.wait_for(lambda: not cache_matches(), timeout=60, interval=0.5, what="cache == cluster")
    assert cache_matches() == []

    growth = rss_after - rss_before
    evicted = _evicted(env)
    print(
        f"\nchaos seed={SEED} duration={DURATION:.0f}s steps={steps} faults={_faults(chaos.counts)} "
        f"pods created={len(tally.created)} deleted={len(tally.deleted)} (by controllers, the test and evictions) "
        f"evicted={len(evicted)} live at the end={len(live)} bound over the run={len(ok)} "
        f"(bind answers lost: {len(transport_lost)}) settled in {settle_seconds:.1f}s "
        f"rss {rss_before:.1f} -> {rss_after:.1f} MiB (+{growth:.1f})\n  "
        + ", ".join(f"{k}: {v}" for k, v in sorted(chaos.counts.items()))
    )
    # The forced failure evicted pods (taint-based eviction), and each one is gone.
    assert evicted, "no pod was evicted from a failed node"
    assert evicted <= tally.deleted_names, evicted - tally.deleted_names
    assert chaos.restarted
    assert growth < RSS_BUDGET_MIB, f"RSS grew {growth:.1f} MiB"
