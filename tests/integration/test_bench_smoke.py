"""The benchmark suite at its smoke size, so CI keeps every workload of issue #18 working.

Not timed tests: each workload runs once at 20 nodes / 40 measured pods with our scheduler on the
session's real control plane, and the checks are correctness ones: every measured and init pod
bound, zero constraint violations (spread, affinity, anti-affinity, taints, resources, DRA devices),
gated and never-fitting pods left pending, churn and preemption really happening, and the suite's
table and JSON carrying every workload. The rest of upstream's scheduler_perf workloads
(``workloads.UPSTREAM_MORE``: event_handling's scripts and the others) run as a second suite at
upstream's integration-test size (10 nodes / 20 pods), their scripts' events checked to have
happened and no pod bound before the event that could unblock it. One workload also runs against kube-scheduler so the
ratio columns stay wired. The numbers themselves only mean something from ``python -m bench.run``
on a quiet machine.
"""

from __future__ import annotations

import math
import uuid
from typing import Any

import pytest

from bench import kwok_nodes, workloads
from bench import run as bench_run
from custom_scheduler.devenv import cluster, kwok
from custom_scheduler.devenv.controlplane import ControlPlane
from custom_scheduler.kube import api_errors
from custom_scheduler.kube.client import KubeClient
from tests.conftest import LEASE_SECONDS

pytestmark = pytest.mark.timeout(240)

NODES, PODS = 20, 40
#: The UPSTREAM_MORE suite's size: upstream's integration-test variants are this small (2Nodes_20Pods,
#: 1Node_10Pods, 5Nodes), and event_handling's scripts make six groups of ``pods`` each.
MORE_NODES, MORE_PODS = 10, 20
FIRST_SUITE = workloads.UPSTREAM + workloads.OURS


@pytest.fixture(scope="module")
def suite(control_plane: ControlPlane) -> dict[str, Any]:
    opts = bench_run.Options(nodes=NODES, pods=PODS, workload="", schedulers=["custom"], stall=15.0, settle=0)
    return bench_run.run_suite(opts, FIRST_SUITE, cp=control_plane, log=lambda msg: None)


@pytest.fixture(scope="module")
def more_suite(control_plane: ControlPlane) -> dict[str, Any]:
    opts = bench_run.Options(nodes=MORE_NODES, pods=MORE_PODS, workload="", schedulers=["custom"], stall=15.0, settle=0)
    return bench_run.run_suite(opts, workloads.UPSTREAM_MORE, cp=control_plane, log=lambda msg: None)


def _custom(suite: dict[str, Any], name: str) -> dict[str, Any]:
    report = suite["suite"][name]
    assert "custom" in report["results"], f"{name} failed: {report.get('error')}"
    r: dict[str, Any] = report["results"]["custom"]
    return r


def _expected_measured(name: str, nodes: int = NODES, pods: int = PODS) -> int:
    return len(workloads.build(name, nodes, pods, "x").pods)


@pytest.mark.parametrize("name", FIRST_SUITE)
def test_every_workload_binds_its_measured_pods_without_violations(suite: dict[str, Any], name: str) -> None:
    _assert_bound_without_violations(_custom(suite, name), name, _expected_measured(name))


@pytest.mark.parametrize("name", workloads.UPSTREAM_MORE)
def test_every_scheduler_perf_workload_binds_its_measured_pods_without_violations(
    more_suite: dict[str, Any], name: str
) -> None:
    r = _custom(more_suite, name)
    _assert_bound_without_violations(r, name, _expected_measured(name, MORE_NODES, MORE_PODS))
    assert r["attempts_per_bound"] > 0, "read from the scheduler's /metrics"
    if workloads.build(name, MORE_NODES, MORE_PODS, "x").steps:
        assert r["script"]["failed"] == "", r["script"]
        assert r["script"]["errors"] == 0, r["script"]
        assert "held_bound" in r["placement"]["violations"]


def _assert_bound_without_violations(r: dict[str, Any], name: str, want: int) -> None:
    assert want > 0
    assert r["workload"] == name
    assert r["bound"] == r["pods"] == want, f"bound {r['bound']}/{want}; log tail:\n{r.get('log_tail', '')}"
    assert r.get("init_bound", 0) == r["init_pods"]
    assert r["placement"]["violations_total"] == 0, r["placement"]["violations"]
    # No error-level line in the daemon's log: a hint that raises (counted as Queue) or a write
    # that fails leaves the figures good and the placement right, and showed only here.
    assert r["log_errors"] == {}, r["log_errors"]
    assert r["throughput_first_to_last"] > 0
    assert r["latency_p99_s"] >= r["latency_p50_s"] >= 0
    assert r["cpu_ms_per_pod"] > 0
    assert r["peak_rss_mb"] > 0
    assert r["startup_s"] > 0


@pytest.mark.parametrize(
    ("name", "checks"),
    [
        ("dra", workloads.DRA_CHECKS),
        ("SchedulingWhileGated", workloads.PENDING_CHECKS),
        ("Unschedulable", workloads.PENDING_CHECKS),
        ("SchedulingWithMixedChurn", workloads.PENDING_CHECKS),
        ("SchedulingBasic", workloads.CHECKS),
        ("gangs", workloads.GANG_CHECKS),
    ],
)
def test_workload_specific_checks_are_run(suite: dict[str, Any], name: str, checks: tuple[str, ...]) -> None:
    assert set(checks) <= _custom(suite, name)["placement"]["violations"].keys()


def test_background_activity_happened_beside_the_measured_pods(suite: dict[str, Any]) -> None:
    gated = _custom(suite, "SchedulingWhileGated")
    assert gated["gated_pods"] == PODS // 2
    assert gated["churn"]["init_deleted"] > 0, "the init pods are deleted during the measured phase"
    unsched = _custom(suite, "Unschedulable")
    assert unsched["churn"]["never_fit_pods"] > 0
    churn = _custom(suite, "SchedulingWithMixedChurn")["churn"]
    assert churn["nodes"] > 0
    assert churn["never_fit_pods"] == churn["nodes"]
    assert churn["errors"] == 0


def test_preemption_evicts_a_whole_node_of_low_priority_pods_per_measured_pod(suite: dict[str, Any]) -> None:
    """4 x 900m low-priority pods per 4-CPU node; a 3970m pod fits only once all four are gone."""
    r = _custom(suite, "PreemptionBasic")
    assert r["init_pods"] == 4 * NODES
    assert r["preempted"] == 4 * r["bound"]


@pytest.mark.parametrize(
    ("name", "checks"),
    [
        ("EventHandlingPodDelete", ("host_ports", "volume_shared", "volume_limits", "held_bound")),
        ("EventHandlingNodeAdd", ("pod_affinity", "held_bound")),
        ("HostPortConflict", ("host_ports",)),
        ("SchedulingGatedPodsWithPodAffinityImpactForThroughput", workloads.PENDING_CHECKS),
        ("PreemptionAsync", workloads.PENDING_CHECKS),
    ],
)
def test_scheduler_perf_checks_are_run(more_suite: dict[str, Any], name: str, checks: tuple[str, ...]) -> None:
    assert set(checks) <= _custom(more_suite, name)["placement"]["violations"].keys()


def test_event_handling_events_happened(more_suite: dict[str, Any]) -> None:
    """The scripts' unblocking events all went through: blockers deleted, pods and nodes updated
    (20 pods a group: PodDelete's 2 nodes and 19 blockers a group, NodeUpdate's 2 nodes a group)."""
    assert _custom(more_suite, "EventHandlingPodDelete")["script"]["deleted"] == 2 * 15
    # tolerations added to two groups, blockers relabelled and resized, gates removed
    assert _custom(more_suite, "EventHandlingPodUpdate")["script"]["updated"] == 5 * MORE_PODS
    # uncordoned, grown, labelled, re-tainted
    assert _custom(more_suite, "EventHandlingNodeUpdate")["script"]["updated"] == 4 * 2
    churn = _custom(more_suite, "PreemptionAsync")["churn"]
    assert churn["pods_created"] >= 1
    assert churn["never_fit_pods"] == 0, "the preemptors fit: not judged as never-fitting"


def test_suite_table_has_a_row_per_workload(suite: dict[str, Any], more_suite: dict[str, Any]) -> None:
    for report, names in ((suite, FIRST_SUITE), (more_suite, workloads.UPSTREAM_MORE)):
        table = bench_run.render_suite_markdown(report)
        rows = [line for line in table.splitlines() if line.startswith("| ") and not line.startswith("| workload")]
        assert [row.split("|")[1].strip() for row in rows] == list(names)


def test_both_schedulers_and_the_ratio_columns(control_plane: ControlPlane) -> None:
    opts = bench_run.Options(settle=0, nodes=NODES, pods=PODS, workload="", schedulers=["custom", "kube"], stall=15.0)
    report = bench_run.run_suite(opts, ["SchedulingBasic"], cp=control_plane, log=lambda msg: None)
    rep = report["suite"]["SchedulingBasic"]
    for which in ("custom", "kube"):
        r = rep["results"][which]
        assert r["bound"] == PODS, f"{which}: {r.get('log_tail', '')}"
        assert r["placement"]["violations_total"] == 0
    for key in ("throughput_first_to_last", "latency_p99_s", "cpu_ms_per_pod", "peak_rss_mb", "startup_s"):
        assert (rep["ratios"][key] or 0) > 0, key
    row = next(line for line in bench_run.render_suite_markdown(report).splitlines() if "SchedulingBasic" in line)
    with_ratio = [key for _, key, _ in bench_run.SUITE_COLUMNS if rep["ratios"].get(key) is not None]
    assert len(with_ratio) >= 6, "a ratio for all but (maybe) a spread that is zero on one side"
    assert row.count("x**") == len(with_ratio)


def test_the_null_binder_binds_every_pod_and_gives_the_ceiling(control_plane: ControlPlane) -> None:
    """The ceiling of issue #25: a binder without scheduling, measured in the same run."""
    opts = bench_run.Options(
        settle=0, nodes=NODES, pods=PODS, workload="SchedulingBasic", schedulers=["custom", "null"], stall=15.0
    )
    report = bench_run.run(opts, cp=control_plane, log=lambda msg: None)
    null = report["results"]["null"]
    assert null["bound"] == PODS, null.get("log_tail", "")
    assert null["placement"]["violations_total"] == 0  # plain pods fit on any node
    assert null["throughput_first_to_last"] > 0
    assert report["ceiling"]["custom"] > 0
    assert "null" in bench_run.render_table(report["results"], opts)


def test_a_failed_round_deletes_its_nodes_and_namespace(control_plane: ControlPlane) -> None:
    """A round that fails (here: no scheduler binds the canary in time) still deletes what it made:
    its Nodes are cluster-scoped, and once one failed round's were left for every later test."""
    kube = KubeClient.from_kubeconfig(str(control_plane.kubeconfig()))
    opts = bench_run.Options(
        settle=0, nodes=3, pods=3, workload="plain", schedulers=["custom"], stall=5.0, startup_timeout=0.01
    )
    lines: list[str] = []
    with pytest.raises(RuntimeError, match="canary"):
        bench_run.run(opts, cp=control_plane, log=lines.append)
    assert any("3 nodes ready" in line for line in lines), lines
    failed = [line for line in lines if "round failed" in line]
    assert len(failed) == 1, lines
    run_id = failed[0].rsplit(" ", 1)[-1]
    nodes = kube.get("/api/v1/nodes", {"labelSelector": f"{workloads.RUN_LABEL}={run_id}"})["items"]
    assert nodes == []
    try:
        phase = kube.get(f"/api/v1/namespaces/bench-{run_id}")["status"]["phase"]
    except api_errors.NotFound:
        phase = "gone"
    assert phase in ("gone", "Terminating")


def test_paced_arrivals_are_paced(control_plane: ControlPlane) -> None:
    """``--rate``: pod i is created at start + i/rate, so 100 pods at 200/s take about half a second
    to create (a burst of 100 takes a fraction of that) and the header says so."""
    opts = bench_run.Options(
        settle=0, nodes=20, pods=100, workload="plain", schedulers=["custom"], stall=20.0, rate=200.0
    )
    report = bench_run.run(opts, cp=control_plane, log=lambda msg: None)
    r = report["results"]["custom"]
    assert r["bound"] == 100
    assert r["pod_create_s"] >= 99 / 200 * 0.95
    assert "rate=200/s" in bench_run.header_line(report)


def test_kwok_nodes_are_set_up_heartbeat_and_run_the_bound_pods(
    control_plane: ControlPlane, kwok_proc: kwok.Kwok
) -> None:
    """``--kwok`` on the session's kwok (one kwok per control plane): the round's Nodes are created
    for kwok, Ready and untainted before the scheduler starts (else nothing would bind: both
    schedulers filter the not-ready taint), Leases are written during the run (20 Nodes renewing
    every 3 s, though a run of a few seconds may fall between two waves of them), kwok's CPU is its
    own column, and every bound pod goes Running."""
    opts = bench_run.Options(
        settle=0,
        nodes=NODES,
        pods=PODS,
        workload="SchedulingBasic",
        schedulers=["custom"],
        stall=15.0,
        kwok=True,
        kwok_lease=LEASE_SECONDS,
    )
    report = bench_run.run(opts, cp=control_plane, log=lambda msg: None, kwok_proc=kwok_proc)
    r = report["results"]["custom"]
    assert r["bound"] == PODS, r.get("log_tail", "")
    assert r["placement"]["violations_total"] == 0, r["placement"]["violations"]
    k = r["kwok"]
    assert k["node_setup_s"] >= k["node_create_s"] > 0
    assert r["node_create_s"] == k["node_setup_s"]
    assert k["lease_writes_per_s"] >= 0, "read at both ends (NaN: a scrape failed); > 0 is proved below"
    assert k["lease_writes_expected_per_s"] == NODES * 4 / LEASE_SECONDS
    assert k["cpu_s"] >= 0
    assert r["cpu_window_s"]["kwok"] == k["cpu_s"]
    assert k["running_after_s"] >= 0, "every bound pod went Running within the deadline"
    assert k["running_at_end"] == PODS + r["init_pods"], "the measured pods and the workload's init pods"
    assert report["config"]["kwok"] is True
    table = bench_run.render_table(report["results"], opts, bench_run.header_line(report))
    assert "kwok CPU during run (s)" in table
    assert f"kwok(lease={LEASE_SECONDS}s)" in table


def test_kwok_set_up_makes_nodes_schedulable_and_their_heartbeats_are_counted(
    control_plane: ControlPlane, kwok_proc: kwok.Kwok
) -> None:
    """bench/kwok_nodes.py against the real API server: after ``set_up`` every Node is Ready (kwok's
    doing) and only the taints the workload asked for are left; then the API server's Lease-write
    counter grows by at least one renewal per Node within two renewal intervals (the heartbeats
    ``lease_writes_per_s`` is made of)."""
    run_id = f"kwoksetup-{uuid.uuid4().hex[:6]}"
    wl = workloads.build("mixed", NODES, 1, run_id)
    kube = KubeClient.from_kubeconfig(str(control_plane.kubeconfig()), pool_maxsize=16)
    try:
        times = kwok_nodes.set_up(kube, wl.nodes, run_id, 8, log=lambda msg: None, timeout=60.0)
        assert times["node_setup_s"] >= times["node_create_s"] > 0
        want_taints = {n["metadata"]["name"]: n["spec"]["taints"] for n in wl.nodes}
        assert any(want_taints.values()), "the mixed workload has tainted nodes: they must stay tainted"
        got = kube.get("/api/v1/nodes", {"labelSelector": f"{workloads.RUN_LABEL}={run_id}"})["items"]
        assert len(got) == NODES
        for node in got:
            assert kwok.ready_status(node) == "True"
            assert (node["spec"].get("taints") or []) == want_taints[node["metadata"]["name"]]
        start = kwok_nodes.scrape_lease_writes(kube)
        cluster.wait_for(
            lambda: kwok_nodes.scrape_lease_writes(kube) >= start + NODES,
            timeout=2 * LEASE_SECONDS,
            interval=0.5,
            what=f"{NODES} Lease renewals counted",
        )
    finally:
        kube.request("DELETE", "/api/v1/nodes", query={"labelSelector": f"{workloads.RUN_LABEL}={run_id}"})
        kube.close()


def test_placement_checks_catch_each_violation() -> None:
    """The checks that judge both schedulers do flag bad placements (no API server needed)."""
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
    got = workloads.placement(gw.nodes, gpods)
    assert got["violations"]["resources"] == (1 if demand > 8 else 0)
    assert (got["gpu_nodes_used"], got["gpu_nodes_free"]) == (1, 0), "10 nodes, one GPU node, all on it"


@pytest.mark.parametrize(
    ("workload", "place", "want"),
    [
        pytest.param("TopologySpreading", {"moon-1": 8}, {"topology_spread": 1}, id="spread-skew-8-over-maxSkew-5"),
        pytest.param("TopologySpreading", {"moon-1": 5}, {"topology_spread": 0}, id="spread-skew-5-ok"),
        pytest.param("SchedulingPodAntiAffinity", {"same-node": 2}, {"anti_affinity": 2}, id="two-green-on-a-node"),
        pytest.param("SchedulingNodeAffinity", {"same-node": 3}, {"node_affinity": 0}, id="zone1-everywhere"),
    ],
)
def test_upstream_shapes_are_judged(workload: str, place: dict[str, int], want: dict[str, int]) -> None:
    wl = workloads.build(workload, 6, 12, "u")
    pods = workloads.for_scheduler(wl.pods, "x", "ns")
    where, count = next(iter(place.items()))
    if where == "same-node":
        targets = [wl.nodes[0]["metadata"]["name"]] * count
    else:
        targets = [n["metadata"]["name"] for n in wl.nodes if n["metadata"]["labels"][workloads.ZONE_KEY] == where]
        targets = (targets * count)[:count]
    for p, node in zip(pods, targets, strict=False):
        p["spec"]["nodeName"] = node
    v = workloads.placement(wl.nodes, pods)["violations"]
    assert {k: v[k] for k in want} == want


def test_pending_checks_flag_gated_and_never_fitting_binds() -> None:
    bound = [
        {"metadata": {"name": "g1"}, "spec": {"nodeName": "n1"}},
        {"metadata": {"name": "churn-00001"}, "spec": {"nodeName": "n2"}},
        {"metadata": {"name": "p1"}, "spec": {"nodeName": "bench-x-churn00001"}},
        {"metadata": {"name": "g2"}, "spec": {}},
    ]
    got = workloads.pending_violations(
        bound, {"gated_bound": ["g1", "g2"], "unschedulable_bound": ["churn-00001"]}, ["bench-x-churn00001"]
    )
    assert got == {"gated_bound": 1, "unschedulable_bound": 1, "churn_node": 1}


def test_dra_placement_checks_catch_each_violation() -> None:
    """The DRA checks flag a device allocated twice, a device off its pod's node and a bound pod
    whose claim is not reserved for it (no API server needed)."""
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
    got = workloads.placement(wl.nodes, pods, claims, wl.slices)
    assert {k: got["violations"][k] for k in workloads.DRA_CHECKS} == {
        "dra_double_allocation": 1,
        "dra_wrong_node": 0,
        "dra_unallocated": 1,
        "dra_counters_exceeded": 0,  # whole GPUs: no counters, no shares
        "dra_capacity_exceeded": 0,
    }
    assert (got["gpu_nodes_used"], got["gpu_nodes_free"]) == (2, 0)
    claims[2]["status"]["reservedFor"] = [{"resource": "pods", "name": gpods[2]["metadata"]["name"], "uid": "uid-x"}]
    gpods[2]["spec"]["nodeName"] = a  # its device is on b
    gpods[2]["metadata"]["uid"] = "uid-x"
    got = workloads.placement(wl.nodes, pods, claims, wl.slices)["violations"]
    assert (got["dra_wrong_node"], got["dra_unallocated"]) == (1, 0)


def test_gangs_smoke_size_binds_every_gang_whole(control_plane: ControlPlane) -> None:
    """The gangs workload's smoke size (4 gangs of 4 and 1 of 10 on 20 nodes, our scheduler with its
    GangScheduling plugin): the probe's incomplete gang is held back until its last member exists,
    then every gang is bound whole and none stays partly bound beyond the limit."""
    opts = bench_run.Options(
        settle=0, nodes=20, pods=26, workload="gangs", schedulers=["custom"], stall=15.0, gangs="4x4,1x10"
    )
    report = bench_run.run(opts, cp=control_plane, log=lambda msg: None)
    r = report["results"]["custom"]
    assert r["bound"] == r["pods"] == 26, r.get("log_tail", "")
    assert r["gang_probe"]["held"], r["gang_probe"]
    assert r["gang_probe"]["completed"], r["gang_probe"]
    gangs = r["gangs"]
    assert (gangs["gangs"], gangs["gangs_whole"]) == (5, 5)
    assert {size: v["whole"] for size, v in gangs["by_size"].items()} == {"4": 4, "10": 1}
    assert 0 <= gangs["partial_max_s"] <= opts.gang_partial_limit_s
    assert gangs["time_to_all_bound_max_s"] >= gangs["time_to_all_bound_p50_s"] > 0
    assert r["placement"]["violations_total"] == 0, r["placement"]["violations"]
    table = bench_run.render_table(report["results"], opts)
    assert "gang time to all bound p99 (s)" in table


@pytest.mark.parametrize(
    ("pods", "want"),
    [
        pytest.param(1800, ((100, 8), (10, 100)), id="full-size"),
        pytest.param(900, ((50, 8), (5, 100)), id="half"),
        pytest.param(180, ((10, 8), (1, 100)), id="one-large"),
        pytest.param(40, ((2, 8), (1, 22)), id="smoke-large-shrinks"),
    ],
)
def test_gang_mix_keeps_the_two_shapes(pods: int, want: tuple[tuple[int, int], ...]) -> None:
    assert workloads.gang_mix(pods) == want
    wl = workloads.gangs(10, pods, "g")
    members = wl.gang_members()
    assert sorted(len(v) for v in members.values()) == sorted(size for n, size in want for _ in range(n))
    for pg in wl.pod_groups:
        assert pg["spec"]["schedulingPolicy"]["gang"]["minCount"] == len(members[pg["metadata"]["name"]])


@pytest.mark.parametrize(
    ("text", "want"),
    [("100x8,10x100", ((100, 8), (10, 100))), ("4x4, 1x10", ((4, 4), (1, 10))), ("", ())],
)
def test_parse_gang_mix(text: str, want: tuple[tuple[int, int], ...]) -> None:
    assert workloads.parse_gang_mix(text) == want


@pytest.mark.parametrize("text", ["8", "x8", "0x8", "4x0", "4y8"])
def test_parse_gang_mix_rejects(text: str) -> None:
    with pytest.raises(ValueError, match="COUNTxSIZE"):
        workloads.parse_gang_mix(text)


#: (created, bound) per member, on one clock; the report is judged at END with LIMIT.
END, LIMIT = 100.0, 5.0


@pytest.mark.parametrize(
    ("members", "whole", "partial_max", "span_max", "violations"),
    [
        pytest.param(
            {"a": [(0.0, 1.0), (0.5, 1.2)], "b": [(2.0, 3.0), (2.1, 3.1), (2.2, 3.3)]},
            2,
            0.3,
            1.3,
            {"gang_incomplete": 0, "gang_partial_too_long": 0},
            id="all-or-nothing",
        ),
        pytest.param(
            {"a": [(0.0, 1.0), (0.5, 9.0)]},
            1,
            8.0,
            9.0,
            {"gang_incomplete": 0, "gang_partial_too_long": 1},
            id="whole-but-partial-too-long",
        ),
        pytest.param(
            {"a": [(0.0, 1.0), (0.5, None)], "b": [(0.0, None)]},
            0,
            99.0,
            None,
            {"gang_incomplete": 2, "gang_partial_too_long": 1},
            id="one-partial-to-the-end-one-unbound",
        ),
    ],
)
def test_gang_report_judges_each_gang(
    members: dict[str, list[tuple[float, float | None]]],
    whole: int,
    partial_max: float,
    span_max: float | None,
    violations: dict[str, int],
) -> None:
    """Time to all bound is first member created -> last member bound; a gang still partial at the
    end counts as partial until then."""
    names = {g: [f"{g}-{i}" for i in range(len(ms))] for g, ms in members.items()}
    created = {f"{g}-{i}": c for g, ms in members.items() for i, (c, _) in enumerate(ms)}
    bound = {f"{g}-{i}": b for g, ms in members.items() for i, (_, b) in enumerate(ms) if b is not None}
    got = workloads.gang_report(workloads.gang_times(names, created, bound), END, LIMIT)
    assert got["gangs"] == len(members)
    assert got["gangs_whole"] == whole
    assert got["partial_max_s"] == pytest.approx(partial_max)
    if span_max is None:
        assert math.isnan(got["time_to_all_bound_max_s"])
    else:
        assert got["time_to_all_bound_max_s"] == pytest.approx(span_max)
    assert got["violations"] == violations
