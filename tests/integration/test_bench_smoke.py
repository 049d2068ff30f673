"""The benchmark harness at its smoke size (100 nodes, 500 pods), so CI keeps it working.

Not a timed test: it asserts that both schedulers bound every pod, that placement honoured the
workload's constraints, and that the table carries a custom/kube ratio for every metric. The
numbers themselves only mean something from ``python -m bench.run`` on a quiet machine.
"""

from __future__ import annotations

from typing import Any

import pytest

from bench import run as bench_run
from bench import workloads as bench_workloads
from custom_scheduler.devenv.controlplane import ControlPlane

pytestmark = pytest.mark.timeout(180)


def test_smoke_both_schedulers_bind_everything(control_plane: ControlPlane) -> None:
    opts = bench_run.Options(nodes=100, pods=500, workload="plain", schedulers=["custom", "kube"], stall=20.0)
    report = bench_run.run(opts, cp=control_plane, log=lambda msg: None)
    results = report["results"]

    for which in ("custom", "kube"):
        r = results[which]
        assert r["bound"] == 500, f"{which} bound {r['bound']}/500; log tail:\n{r.get('log_tail', '')}"
        assert r["throughput_first_to_last"] > 0
        assert r["latency_p99_s"] >= r["latency_p50_s"] >= 0
        assert r["cpu_s"] > 0
        assert r["peak_rss_mb"] > 0
        assert r["placement"]["bound_on_bench_nodes"] == 500
        assert r["placement"]["violations_total"] == 0, r["placement"]["violations"]

    ratios = report["ratios"]
    for key in ("bound", "throughput_first_to_last", "latency_p99_s", "cpu_s", "peak_rss_mb"):
        assert ratios[key] is not None, key
        assert ratios[key] > 0, key
    assert ratios["bound"] == 1.0

    table = bench_run.render_table(results, opts, bench_run.header_line(report))
    assert "custom/kube" in table
    assert "500/500" in table
    throughput_row = next(line for line in table.splitlines() if line.startswith("throughput, first"))
    assert throughput_row.split()[-2].endswith("x")


def test_paced_arrivals_are_paced(control_plane: ControlPlane) -> None:
    """``--rate``: pod i is created at start + i/rate, so 100 pods at 200/s take about half a second
    to create (a burst of 100 takes a fraction of that) and the header says so."""
    opts = bench_run.Options(nodes=20, pods=100, workload="plain", schedulers=["custom"], stall=20.0, rate=200.0)
    report = bench_run.run(opts, cp=control_plane, log=lambda msg: None)
    r = report["results"]["custom"]
    assert r["bound"] == 100
    assert r["pod_create_s"] >= 99 / 200 * 0.95
    assert "rate=200/s" in bench_run.header_line(report)


def test_placement_checks_catch_each_violation() -> None:
    """The checks that judge both schedulers do flag bad placements (no API server needed)."""
    from bench import workloads

    wl = workloads.mixed(10, 40, "t")
    nodes = {n["metadata"]["name"]: n for n in wl.nodes}
    tainted = next(n for n, o in nodes.items() if o["spec"]["taints"])
    plain_non_ssd = next(
        n for n, o in nodes.items() if not o["spec"]["taints"] and "disktype" not in o["metadata"]["labels"]
    )
    zone_a = [n for n, o in nodes.items() if o["metadata"]["labels"][workloads.ZONE_KEY] == "zone-a"]
    pods = workloads.for_scheduler(wl.pods, "x", "ns")
    by_class: dict[str, list[dict[str, Any]]] = {}
    for p in pods:
        by_class.setdefault(p["metadata"]["labels"][workloads.ROLE_LABEL], []).append(p)

    assert workloads.placement(wl.nodes, [])["violations_total"] == 0
    by_class["batch"][0]["spec"]["nodeName"] = tainted  # no toleration
    by_class["ssd"][0]["spec"]["nodeName"] = plain_non_ssd  # required disktype=ssd
    for p in by_class["cache"][:2]:
        p["spec"]["nodeName"] = plain_non_ssd  # two anti-affine pods on one node
    for p in by_class["web"][:3]:
        p["spec"]["nodeName"] = zone_a[0]  # skew 3 > maxSkew 1
    v = workloads.placement(wl.nodes, pods)["violations"]
    assert v == {"resources": 0, "taints": 1, "node_affinity": 1, "anti_affinity": 2, "topology_spread": 1}

    gw = workloads.gpu(10, 40, "g")
    gpu_node = next(n["metadata"]["name"] for n in gw.nodes if workloads.GPU in n["status"]["allocatable"])
    gpods = [p for p in workloads.for_scheduler(gw.pods, "x", "ns") if workloads.GPU in str(p)]
    for p in gpods:
        p["spec"]["nodeName"] = gpu_node
    demand = sum(int(p["spec"]["containers"][0]["resources"]["requests"][workloads.GPU]) for p in gpods)
    expected = 1 if demand > 8 else 0
    assert workloads.placement(gw.nodes, gpods)["violations"]["resources"] == expected


def test_smoke_dra_workload_both_schedulers_allocate_every_claim(control_plane: ControlPlane) -> None:
    """``--workload dra`` at a small size: both schedulers (kube-scheduler with DynamicResources
    enabled) bind every pod, and every GPU pod's claim is allocated a distinct device on its node."""
    opts = bench_run.Options(nodes=50, pods=200, workload="dra", schedulers=["custom", "kube"], stall=20.0)
    assert "DynamicResources" not in bench_run.kube_matched_plugins("dra")
    assert "DynamicResources" in bench_run.kube_matched_plugins("plain")
    report = bench_run.run(opts, cp=control_plane, log=lambda msg: None)
    for which in ("custom", "kube"):
        r = report["results"][which]
        assert r["bound"] == 200, f"{which} bound {r['bound']}/200; log tail:\n{r.get('log_tail', '')}"
        assert r["classes"]["gpu"] > 100
        v = r["placement"]["violations"]
        assert set(bench_workloads.DRA_CHECKS) <= v.keys()
        assert r["placement"]["violations_total"] == 0, v


def test_dra_placement_checks_catch_each_violation() -> None:
    """The DRA checks flag a device allocated twice, a device off its pod's node and a bound pod
    whose claim is not reserved for it (no API server needed)."""
    from bench import workloads

    wl = workloads.dra(4, 4, "d")
    gpu_nodes = [s["spec"]["nodeName"] for s in wl.slices]
    assert len(gpu_nodes) == 2
    pods = workloads.for_scheduler(wl.pods, "x", "ns")
    gpods = [p for p in pods if p["spec"].get("resourceClaims")]
    assert len(gpods) >= 3

    def claim(pod: dict[str, Any], node: str, device: str) -> dict[str, Any]:
        name = pod["metadata"]["name"]
        pod["metadata"]["uid"] = f"uid-{name}"
        pod["status"] = {"resourceClaimStatuses": [{"name": "gpu", "resourceClaimName": f"{name}-gpu"}]}
        results = [{"request": "gpu", "driver": workloads.DRA_DRIVER, "pool": node, "device": device}]
        return {
            "metadata": {"name": f"{name}-gpu"},
            "status": {
                "allocation": {"devices": {"results": results}},
                "reservedFor": [{"resource": "pods", "name": name, "uid": f"uid-{name}"}],
            },
        }

    a, b = gpu_nodes
    for p in gpods[:3]:
        p["spec"]["nodeName"] = a
    claims = [claim(gpods[0], a, "gpu-0"), claim(gpods[1], a, "gpu-0"), claim(gpods[2], b, "gpu-1")]
    claims[2]["status"]["reservedFor"] = []  # allocated, but not reserved for its pod
    gpods[2]["spec"]["nodeName"] = b
    got = workloads.placement(wl.nodes, pods, claims, wl.slices)["violations"]
    assert {k: got[k] for k in workloads.DRA_CHECKS} == {
        "dra_double_allocation": 1,
        "dra_wrong_node": 0,
        "dra_unallocated": 1,
    }
    claims[2]["status"]["reservedFor"] = [{"resource": "pods", "name": gpods[2]["metadata"]["name"], "uid": "uid-x"}]
    gpods[2]["spec"]["nodeName"] = a  # its device is on b
    gpods[2]["metadata"]["uid"] = "uid-x"
    got = workloads.placement(wl.nodes, pods, claims, wl.slices)["violations"]
    assert (got["dra_wrong_node"], got["dra_unallocated"]) == (1, 0)
