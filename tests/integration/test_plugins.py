"""The default plugins on the real API server: pods land where kube-scheduler's default profile
would put them (taints, node affinity, topology spread, anti-affinity, host ports)."""

from __future__ import annotations

from collections import Counter
from concurrent.futures import ThreadPoolExecutor

import pytest

from custom_scheduler.devenv import cluster
from tests.builders import make_node, make_pod
from tests.integration.env import Env

# Part of the integration smoke that CI also runs on the oldest supported Kubernetes.
pytestmark = pytest.mark.smoke


def _settle(env: Env, names: list[str], bound: list[str]) -> dict[str, str]:
    """Wait until every pod in ``bound`` is bound and each other one is bound or has FailedScheduling."""

    def done() -> dict[str, str] | None:
        got = env.placements()
        failed = {e["regarding"]["name"] for e in env.events("FailedScheduling")}
        ok = all(got.get(n) for n in bound) and all(got.get(n) or n in failed for n in names if n not in bound)
        return got if ok else None

    result: dict[str, str] = cluster.wait_for(done, timeout=40, what="pods settled")
    return result


def test_taints_and_tolerations(env: Env) -> None:
    tainted = env.node(make_node("tainted").taint("dedicated", "db", "NoSchedule"))
    prefer = env.node(make_node("prefer").taint("flaky", "", "PreferNoSchedule"))
    env.start_scheduler()
    env.create_pod(
        make_pod("tolerant")
        .toleration("dedicated", "db", "NoSchedule")
        .node_selector(**{"kubernetes.io/hostname": tainted})
        .obj()
    )
    for i in range(3):
        env.create_pod(make_pod(f"plain-{i}").obj())
    got = _settle(env, [], ["tolerant", "plain-0", "plain-1", "plain-2"])
    assert got["tolerant"] == tainted
    # Plain pods never on the NoSchedule node; PreferNoSchedule is only avoided, and here it is the
    # only other node, so they land there.
    assert {got[f"plain-{i}"] for i in range(3)} == {prefer}


def test_required_and_preferred_node_affinity(env: Env) -> None:
    ssd = env.node(make_node("ssd").label("disk", "ssd").label("cores", "16"))
    hdd = env.node(make_node("hdd").label("disk", "hdd").label("cores", "8"))
    env.nodes(make_node("none"))
    env.start_scheduler()
    env.create_pod(
        make_pod("needs-ssd")
        .required_node_affinity({"matchExpressions": [{"key": "disk", "operator": "In", "values": ["ssd"]}]})
        .obj()
    )
    env.create_pod(
        make_pod("many-cores")
        .required_node_affinity({"matchExpressions": [{"key": "cores", "operator": "Gt", "values": ["10"]}]})
        .obj()
    )
    for i in range(3):
        env.create_pod(
            make_pod(f"likes-hdd-{i}")
            .preferred_node_affinity(50, {"matchExpressions": [{"key": "disk", "operator": "In", "values": ["hdd"]}]})
            .obj()
        )
    env.create_pod(
        make_pod("impossible")
        .required_node_affinity({"matchExpressions": [{"key": "disk", "operator": "In", "values": ["nvme"]}]})
        .obj()
    )
    names = ["needs-ssd", "many-cores", "likes-hdd-0", "likes-hdd-1", "likes-hdd-2", "impossible"]
    got = _settle(env, names, names[:-1])
    assert got["needs-ssd"] == ssd
    assert got["many-cores"] == ssd
    assert {got[f"likes-hdd-{i}"] for i in range(3)} == {hdd}
    assert got["impossible"] == ""


def test_topology_spread_over_three_zones_never_exceeds_max_skew(env: Env) -> None:
    zone_of = {}
    for zone, count in (("a", 1), ("b", 2), ("c", 3)):
        for i in range(count):
            n = env.node(make_node(f"z{zone}-{i}").label("topology.kubernetes.io/zone", zone))
            zone_of[n] = zone
    app = env.start_scheduler()
    sel = {"matchLabels": {"app": "spread"}}
    pods = [
        make_pod(f"s{i}")
        .label("app", "spread")
        .req(cpu="100m")
        .spread(1, "topology.kubernetes.io/zone", selector=sel)
        .obj()
        for i in range(12)
    ]
    with ThreadPoolExecutor(6) as pool:
        list(pool.map(env.create_pod, pods))
    names = [p["metadata"]["name"] for p in pods]
    got = _settle(env, names, names)
    per_zone = Counter(zone_of[got[n]] for n in names)
    assert set(per_zone) == {"a", "b", "c"}
    assert max(per_zone.values()) - min(per_zone.values()) <= 1
    assert app.cache.check_invariants() == []


def test_inter_pod_anti_affinity_and_affinity(env: Env) -> None:
    names = [env.node(make_node(f"aa-{i}")) for i in range(3)]
    env.start_scheduler()
    term = {"labelSelector": {"matchLabels": {"app": "db"}}, "topologyKey": "kubernetes.io/hostname"}
    for i in range(4):
        env.create_pod(make_pod(f"db-{i}").label("app", "db").pod_affinity("podAntiAffinity", term).obj())
    got = _settle(env, [f"db-{i}" for i in range(4)], [f"db-{i}" for i in range(3)])
    assert sorted(got[f"db-{i}"] for i in range(3)) == sorted(names)  # one per node
    assert got["db-3"] == ""  # no fourth node
    env.create_pod(
        make_pod("cache")
        .pod_affinity(
            "podAffinity",
            {
                "labelSelector": {
                    "matchLabels": {"app": "db"},
                },
                "topologyKey": "kubernetes.io/hostname",
            },
        )
        .obj()
    )
    got = _settle(env, ["cache"], ["cache"])
    assert got["cache"] in names


def test_host_ports(env: Env) -> None:
    n1 = env.node(make_node("port-1"))
    n2 = env.node(make_node("port-2"))
    env.start_scheduler()
    for i in range(3):
        env.create_pod(make_pod(f"web-{i}").host_port(8080).obj())
    env.create_pod(make_pod("udp").host_port(8080, protocol="UDP").obj())
    names = ["web-0", "web-1", "web-2", "udp"]
    got = _settle(env, names, ["udp"])
    bound = [n for n in ("web-0", "web-1", "web-2") if got[n]]
    assert len(bound) == 2
    assert sorted(got[n] for n in bound) == sorted([n1, n2])
    assert got["udp"] in (n1, n2)  # another protocol never conflicts
