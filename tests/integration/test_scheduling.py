"""End to end on the real API server: the daemon binds pods, respects capacity, reports failures."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

from custom_scheduler.api import quantity
from custom_scheduler.devenv import cluster
from tests.builders import make_node, make_pod
from tests.integration.env import Env

# Part of the integration smoke that CI also runs on the oldest supported Kubernetes.
pytestmark = pytest.mark.smoke


def test_burst_of_300_pods_fits_on_20_nodes_without_overcommit(env: Env) -> None:
    """300 pods in one burst over 20 nodes: all bound, none over a node's pods/cpu/memory."""
    node_objs = [env.nodes(make_node(f"burst-{i}").capacity(cpu="4", memory="8Gi", pods="16")) for i in range(20)]
    app = env.start_scheduler()
    pods = [
        make_pod(f"p{i}").req(cpu=("200m" if i % 3 else "300m"), memory=("256Mi" if i % 2 else "512Mi")).obj()
        for i in range(300)
    ]
    with ThreadPoolExecutor(16) as pool:
        list(pool.map(env.create_pod, pods))

    bound = env.wait_bound(*(p["metadata"]["name"] for p in pods), timeout=60)
    assert len(bound) == 300
    alloc = {n["metadata"]["name"]: n["status"]["allocatable"] for n in node_objs}
    per_node: dict[str, list[dict[str, Any]]] = {}
    for p in cluster.list_pods(env.kube, env.namespace):
        per_node.setdefault(p["spec"]["nodeName"], []).append(p)
    for node, ps in per_node.items():
        assert node in alloc, f"pod bound to unknown node {node}"
        cpu = sum(quantity.to_milli(c["resources"]["requests"]["cpu"]) for p in ps for c in p["spec"]["containers"])
        mem = sum(quantity.to_int(c["resources"]["requests"]["memory"]) for p in ps for c in p["spec"]["containers"])
        assert len(ps) <= int(alloc[node]["pods"])
        assert cpu <= quantity.to_milli(alloc[node]["cpu"])
        assert mem <= quantity.to_int(alloc[node]["memory"])
    assert app.cache.check_invariants() == []


def test_pods_of_other_schedulers_are_not_touched(env: Env) -> None:
    """A pod for another schedulerName stays pending and gets no event from us."""
    env.nodes(make_node("other"))
    env.start_scheduler()
    env.create_pod(make_pod("theirs").scheduler("default-scheduler").obj())
    env.create_pod(make_pod("ours").obj())
    env.wait_bound("ours")
    # "theirs" came first: had we taken it, its FailedScheduling would be queued to the event writer
    # before "ours"'s Scheduled event. Once that one is out, the writer has flushed past it.
    cluster.wait_for(lambda: env.events("Scheduled", about="ours"), timeout=15, what="Scheduled event for ours")
    assert env.placements()["theirs"] == ""
    theirs = env.pod("theirs")
    assert not [c for c in theirs.get("status", {}).get("conditions", []) if c["type"] == "PodScheduled"]
    assert all(e["regarding"]["name"] != "theirs" for e in env.events("FailedScheduling"))


def test_unschedulable_pod_reports_reasons_then_binds_when_a_node_fits(env: Env) -> None:
    """FailedScheduling event with kube-scheduler's aggregated message and PodScheduled=False;
    bound within seconds once a fitting node is added."""
    env.nodes(make_node("small-a").capacity(cpu="1", memory="2Gi", pods="10"))
    env.nodes(make_node("small-b").capacity(cpu="1", memory="2Gi", pods="10"))
    env.nodes(make_node("tainted").capacity(cpu="8", memory="16Gi", pods="10").taint("dedicated", "gpu"))
    app = env.start_scheduler()
    env.create_pod(make_pod("big").req(cpu="4", memory="1Gi").obj())

    def failed() -> list[dict[str, Any]]:
        return env.events("FailedScheduling")

    ev = cluster.wait_for(failed, timeout=30, what="FailedScheduling event")[0]
    assert ev["type"] == "Warning"
    assert ev["reportingController"] == "custom-scheduler"
    assert ev["note"] == (
        # 4 cpu is more than the small nodes have at all: Unresolvable, so preemption skips them too.
        "0/3 nodes are available: 1 node(s) had untolerated taint(s), 2 Insufficient cpu. "
        "preemption: 0/3 nodes are available: 3 Preemption is not helpful for scheduling."
    )
    pod = cluster.wait_for(
        lambda: next(
            (
                c
                for c in env.pod("big")["status"].get("conditions", [])
                if c["type"] == "PodScheduled" and c["status"] == "False"
            ),
            None,
        ),
        timeout=30,
        what="PodScheduled=False",
    )
    assert pod["reason"] == "Unschedulable"
    assert "2 Insufficient cpu" in pod["message"]

    big = env.node(make_node("big").capacity(cpu="8", memory="16Gi", pods="10"))
    assert env.wait_bound("big", timeout=15)["big"] == big
    scheduled = cluster.wait_for(lambda: env.events("Scheduled"), timeout=15, what="Scheduled event")
    assert scheduled[0]["note"] == f"Successfully assigned {env.namespace}/big to {big}"
    assert app.cache.check_invariants() == []
