"""Odd pod specs get a correct reason and never stop the daemon from scheduling others."""

from __future__ import annotations

from custom_scheduler.devenv import cluster
from tests.builders import make_node, make_pod
from tests.integration.env import Env


def _failed_notes(env: Env) -> dict[str, str]:
    return {e["regarding"]["name"]: e["note"] for e in env.events("FailedScheduling")}


def test_odd_pods_get_reasons_and_the_daemon_keeps_scheduling(env: Env) -> None:
    env.nodes(make_node("plain-1").capacity(cpu="4", memory="8Gi", pods="20"))
    env.nodes(make_node("plain-2").capacity(cpu="4", memory="8Gi", pods="20"))
    app = env.start_scheduler()

    many_inits = make_pod("many-inits").req(cpu="100m")
    for i in range(25):
        many_inits.init_req({"cpu": f"{100 + i * 10}m", "memory": "64Mi"})
    huge_labels = make_pod("huge-labels")
    for i in range(200):
        huge_labels.label(f"example.com/key-{i}", f"value-{i}")
    pods = {
        "no-requests": make_pod("no-requests"),
        "too-big": make_pod("too-big").req(cpu="64", memory="1Ti"),
        "unknown-resource": make_pod("unknown-resource").req_named({"example.com/fpga": "1"}),
        "many-inits": many_inits,
        "huge-labels": huge_labels,
        "affinity-nothing": make_pod("affinity-nothing").required_node_affinity(
            {"matchExpressions": [{"key": "no-such-label", "operator": "In", "values": ["x"]}]}
        ),
    }
    for b in pods.values():
        env.create_pod(b.obj())

    def settled() -> dict[str, str] | None:
        bound = {name for name, node in env.placements().items() if node}
        ev = _failed_notes(env)
        return ev if {"no-requests", "many-inits", "huge-labels"} <= bound and len(ev) >= 3 else None

    reasons = cluster.wait_for(settled, timeout=30, what="odd pods settled")
    # (DefaultPreemption appends its own verdict after the filter histogram, as kube-scheduler does.)
    assert reasons["too-big"].startswith("0/2 nodes are available: 2 Insufficient cpu, 2 Insufficient memory.")
    assert reasons["unknown-resource"].startswith("0/2 nodes are available: 2 Insufficient example.com/fpga.")
    assert reasons["affinity-nothing"].startswith(
        "0/2 nodes are available: 2 node(s) didn't match Pod's node affinity/selector."
    )

    env.create_pod(make_pod("normal").req(cpu="500m").obj())
    env.wait_bound("normal", timeout=15)
    assert app.cache.check_invariants() == []
    assert cluster.overcommitted_nodes(env.kube) == []
