"""``python -m bench.run --kwok``: the benchmark's Nodes on a living cluster, kwok as their kubelet.

Why: without it the bench's Nodes are marked Ready once and never heartbeat, and bound pods never
run, so the API server carries only the schedulers' own traffic. With kwok each Node renews its
Lease every ``lease / 4`` seconds (kubelet's ``nodeLeaseDurationSeconds``, 40 s by default, so 10 s)
and every bound pod is patched Running and Ready: the load a real cluster of that size puts on the
API server beside the scheduler, the same for both schedulers.

Set-up, before any scheduler starts (timed and reported as node set-up):

1. every Node of the workload is created with kwok's marker (:func:`kwok.managed`) from a thread
   pool, as the hand-made ones are; :func:`kwok.create_node` waits for each one in turn, far too
   slow for thousands;
2. the round's Nodes are listed (from the watch cache, ``resourceVersion=0``) until kwok reports
   every one Ready; as they turn Ready, the ``node.kubernetes.io/not-ready`` taint that the API
   server's ``TaintNodesByCondition`` admission put on each new Node is lifted, from the same pool
   (the node-lifecycle controller's part, which the bench's control plane does not run; see
   :mod:`custom_scheduler.devenv.kwok`). A Node still carrying it would be filtered by both
   schedulers.

Measured beside the round: kwok's CPU seconds (a column of its own, no longer inside "other
processes") and the API server's Lease writes per second, from its ``apiserver_request_total``
counter (resource ``leases``, write verbs) read when node set-up ends and at the last bind: cheap
(two scrapes) and counting what the API server actually served. With the bench's control plane
(leader election off) nearly all of them are kwok's heartbeats; the API server's own identity Lease
adds one write every 10 s. The window is longer than the burst on purpose: kwok renews the Leases of
Nodes created in the same second in the same second, so at a few hundred Nodes the renewals come
in waves ``lease / 4`` apart, and a window of a second or two could fall between two of them. The
report also carries the steady rate expected (``nodes * 4 / lease``) beside the measured one.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import orjson

from bench import workloads
from custom_scheduler.devenv import kwok
from custom_scheduler.kube import api_errors
from custom_scheduler.kube.client import MERGE_PATCH_CT, KubeClient, node_path

#: ``apiserver_request_total``'s verbs that write an object (``APPLY`` is a server-side apply patch).
LEASE_WRITE_VERBS = frozenset({"POST", "PUT", "PATCH", "APPLY"})

#: How often set-up lists the round's Nodes while it waits for kwok: every second, and one second
#: more per 2000 Nodes (a list of 15000 Nodes is tens of MB, which the API server serialises and this
#: process parses while kwok competes for the same cores).
POLL_S = 1.0
NODES_PER_POLL_S = 2000


# -- pure -----------------------------------------------------------------------------------------
def _labels(line: str) -> dict[str, str]:
    """The label set of one Prometheus text sample (``name{a="x",b="y"} value``)."""
    inner = line.partition("{")[2].rpartition("}")[0]
    out: dict[str, str] = {}
    for part in inner.split('",'):
        key, _, value = part.partition('="')
        if key:
            out[key.strip()] = value.rstrip('"')
    return out


def lease_writes(metrics_text: str) -> float:
    """Lease writes the API server has served since it started: ``apiserver_request_total`` summed
    over every sample whose resource is ``leases`` and whose verb writes (any code, any scope)."""
    total = 0.0
    for line in metrics_text.splitlines():
        if not line.startswith("apiserver_request_total{"):
            continue
        labels = _labels(line)
        if labels.get("resource") == "leases" and labels.get("verb") in LEASE_WRITE_VERBS:
            total += float(line.rpartition(" ")[2])
    return total


def without_not_ready(taints: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """``taints`` minus the API server's ``node.kubernetes.io/not-ready`` ones (every effect)."""
    return [t for t in taints if t.get("key") != kwok.NOT_READY_TAINT]


def to_lift(nodes: Iterable[dict[str, Any]]) -> tuple[int, dict[str, list[dict[str, Any]]]]:
    """Of a list of Nodes: how many kwok reports Ready with the not-ready taint gone (done), and, for
    those Ready but still tainted, name -> the taints to keep. A Node not yet Ready is in neither:
    its taint stays until kwok has initialised it, as the node-lifecycle controller would leave it."""
    done, lift = 0, {}
    for node in nodes:
        if kwok.ready_status(node) != "True":
            continue
        taints = list((node.get("spec") or {}).get("taints") or [])
        keep = without_not_ready(taints)
        if len(keep) == len(taints):
            done += 1
        else:
            lift[node["metadata"]["name"]] = keep
    return done, lift


def per_second(before: float, after: float, seconds: float) -> float:
    """A counter's rate over a window; NaN when the window is empty or a read failed (NaN in)."""
    return (after - before) / seconds if seconds > 0 else float("nan")


# -- against the API server -----------------------------------------------------------------------
def scrape_lease_writes(kube: KubeClient) -> float:
    """:func:`lease_writes` from the API server's ``/metrics`` (the bench's client is admin); NaN
    when it cannot be read, so a missing figure shows as "-" rather than as a wrong number."""
    try:
        text = kube.request_raw("GET", "/metrics", timeout=(5.0, 30.0)).decode(errors="replace")
    except api_errors.KubeError:
        return float("nan")
    return lease_writes(text)


def _list_nodes(kube: KubeClient, run_id: str) -> list[dict[str, Any]]:
    query = {"labelSelector": f"{workloads.RUN_LABEL}={run_id}", "resourceVersion": "0"}
    doc = orjson.loads(kube.request_raw("GET", "/api/v1/nodes", query=query, timeout=(5.0, 120.0)))
    items: list[dict[str, Any]] = doc.get("items") or []
    return items


def _lift(kube: KubeClient, name: str, keep: list[dict[str, Any]]) -> None:
    kube.patch(node_path(name), {"spec": {"taints": keep or None}}, MERGE_PATCH_CT)


def create_nodes(kube: KubeClient, nodes: Sequence[dict[str, Any]], workers: int) -> None:
    """POST every Node with kwok's marker from ``workers`` threads (copies: the workload's objects
    are judged later against what was asked for)."""
    path = node_path()
    with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="mkkwoknode") as ex:
        for f in [ex.submit(kube.post, path, kwok.managed(orjson.loads(orjson.dumps(n)))) for n in nodes]:
            f.result()


def wait_ready_and_lift(
    kube: KubeClient, run_id: str, count: int, workers: int, timeout: float, log: Callable[[str], None]
) -> None:
    """Until all ``count`` Nodes of ``run_id`` are Ready without the not-ready taint: list them,
    lift the taint of those kwok has made Ready. Raises TimeoutError with the progress at the end."""
    deadline = time.monotonic() + timeout
    next_log = time.monotonic() + 10.0
    interval = POLL_S + count / NODES_PER_POLL_S
    done = 0
    with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="liftnode") as ex:
        while True:
            done, lift = to_lift(_list_nodes(kube, run_id))
            if done >= count:
                return
            for f in [ex.submit(_lift, kube, name, keep) for name, keep in lift.items()]:
                f.result()
            done += len(lift)
            if done >= count:
                return
            now = time.monotonic()
            if now >= deadline:
                raise TimeoutError(f"kwok: {done}/{count} nodes Ready and untainted after {timeout:.0f}s")
            if now >= next_log:
                log(f"kwok: {done}/{count} nodes Ready and untainted")
                next_log = now + 10.0
            time.sleep(interval)


def set_up(
    kube: KubeClient,
    nodes: Sequence[dict[str, Any]],
    run_id: str,
    workers: int,
    log: Callable[[str], None],
    timeout: float = 0.0,
) -> dict[str, float]:
    """Create the round's Nodes for kwok and wait until all are Ready and schedulable; the timings
    (seconds): ``node_create_s`` (the POSTs), ``node_ready_s`` (then until the last taint is
    lifted), ``node_setup_s`` (both). ``timeout`` 0: 60 s + 40 ms per node (kwok readies about a
    hundred a second on two shared cores)."""
    t0 = time.monotonic()
    create_nodes(kube, nodes, workers)
    t1 = time.monotonic()
    wait_ready_and_lift(kube, run_id, len(nodes), workers, timeout or 60.0 + len(nodes) / 25.0, log)
    t2 = time.monotonic()
    return {"node_create_s": t1 - t0, "node_ready_s": t2 - t1, "node_setup_s": t2 - t0}


def running(pods: Iterable[dict[str, Any]]) -> int:
    """How many of ``pods`` report phase Running (kwok's pod-ready stage has run on them)."""
    return sum(1 for p in pods if (p.get("status") or {}).get("phase") == "Running")


class LeaseRate:
    """The API server's Lease writes per second between construction and :meth:`stop` (one scrape
    at each end, each on its own clock read)."""

    def __init__(self, kube: KubeClient) -> None:
        self.kube = kube
        self.start = scrape_lease_writes(kube)
        self.t0 = time.monotonic()

    def stop(self) -> float:
        end = scrape_lease_writes(self.kube)
        return per_second(self.start, end, time.monotonic() - self.t0)


def all_bound_ran(pods: Iterable[dict[str, Any]], at_least: int) -> bool:
    """At least ``at_least`` of ``pods`` are bound, and kwok has run every bound one still there
    (phase Running, or Succeeded for a pod that completes); pods being deleted are left out."""
    bound = [p for p in pods if (p.get("spec") or {}).get("nodeName") and not p["metadata"].get("deletionTimestamp")]
    ran = sum(1 for p in bound if (p.get("status") or {}).get("phase") in ("Running", "Succeeded"))
    return len(bound) >= at_least and ran == len(bound)


def wait_running(kube: KubeClient, namespace: str, at_least: int, timeout: float) -> float:
    """After the measured window: seconds until :func:`all_bound_ran` holds for ``namespace``,
    polled once a second; NaN if it did not within ``timeout``."""
    t0 = time.monotonic()
    while True:
        doc = orjson.loads(kube.request_raw("GET", f"/api/v1/namespaces/{namespace}/pods", timeout=(5.0, 120.0)))
        if all_bound_ran(doc.get("items") or [], at_least):
            return time.monotonic() - t0
        if time.monotonic() - t0 >= timeout:
            return float("nan")
        time.sleep(POLL_S)
