"""The README's demo runs the real daemon process end to end and ends cleanly on SIGTERM."""

from __future__ import annotations

import io
from typing import Any

from custom_scheduler.api import podgroup as gang
from custom_scheduler.devenv import demo_topology
from custom_scheduler.devenv import demo_training as dt
from custom_scheduler.devenv.controlplane import ControlPlane
from custom_scheduler.devenv.demo import NAMESPACE, cleanup_demo, run_demo
from custom_scheduler.framework import reservation_annotation as ra
from custom_scheduler.kube.client import KubeClient


def test_demo_places_the_workload_and_exits_0_on_sigterm(control_plane: ControlPlane) -> None:
    out = io.StringIO()
    kube = KubeClient.from_kubeconfig(str(control_plane.kubeconfig()), qps=0, burst=1)
    defrag = dt.DefragRun()
    try:
        result, rc = run_demo(control_plane, out=out, timeout=60, defrag=defrag)
        # read before the cleanup deletes the namespace
        claims = _claims_by_pod(kube)
        group = kube.get(f"/apis/{gang.NATIVE_GROUP_VERSION}/namespaces/{NAMESPACE}/podgroups/res-job")
        fragments = dt.fragments(kube, NAMESPACE)
    finally:
        cleanup_demo(kube)
    assert rc == 0, out.getvalue()
    # load-aware: node-a reports 90% CPU, so no web pod goes there
    assert {result[f"web-{i}"] for i in range(6)} <= {"node-b", "node-c"}
    # GPU: the two 1-GPU pods share a node, the 4-GPU job gets the other; ordinary pods stay off GPUs
    assert result["train-0"] == result["train-1"]
    assert {result["train-0"], result["train-big"]} == {"gpu-1", "gpu-2"}
    assert result["tolerates-all"] in {"node-a", "node-b", "node-c"}
    # pools: members only on the pool node
    assert result["spark-0"] == result["etl-huge"] == "bigdata-1"
    assert all(v != "bigdata-1" for k, v in result.items() if k not in ("spark-0", "etl-huge"))
    # priority: the online pod preempted one batch pod and got its place
    assert result["online-0"] == "node-p"
    assert sorted([result["batch-0"], result["batch-1"]]) == ["node-p", "preempted"]
    # kube-scheduler semantics
    assert "Insufficient cpu" in result["too-big"]
    assert "not ours" in result["other-scheduler"]
    assert "[priority] an online pod preempts a batch pod" in out.getvalue()
    # gangs: exactly one job bound whole (on the ML nodes), the other not at all
    jobs = {job: [result[f"{job}-{i}"] for i in range(3)] for job in ("job-a", "job-b")}
    whole = [job for job, where in jobs.items() if all(w in {"ml-1", "ml-2"} for w in where)]
    assert len(whole) == 1, jobs
    waiting = jobs[{"job-a", "job-b"}.difference(whole).pop()]
    assert all(w.startswith("pending: pod group") for w in waiting), waiting
    # the report's words (#29): groups as ns/name, no internal key; a preemptor by its pod's name
    text = out.getvalue()
    assert f"pod group {NAMESPACE}/job-" in text
    assert "native:" not in text
    assert "crd:" not in text
    assert "Preempted by pod online-0 on node node-p" in text

    _check_dra(result, claims, out.getvalue())
    _check_topology(result, out.getvalue())
    _check_reservation(result, group, out.getvalue())
    _check_job_preemption(result)
    _check_elastic(result)
    _check_defrag(result, defrag, fragments)


def _claims_by_pod(kube: KubeClient) -> dict[str, dict[str, Any]]:
    """The demo's ResourceClaims as the API server has them, by the pod owning each (the claims
    the resourceclaim controller made from the pods' templates)."""
    items = kube.get(f"/apis/resource.k8s.io/v1/namespaces/{NAMESPACE}/resourceclaims")["items"]
    out = {}
    for c in items:
        [owner] = [o["name"] for o in c["metadata"].get("ownerReferences") or () if o.get("controller")]
        out[owner] = c
    return out


def _check_dra(result: dict[str, str], claims: dict[str, dict[str, Any]], printed: str) -> None:
    """gpu-dra: the whole GPU, the partition and the share packed on one DRA node, the second whole
    GPU on the other (the packed node's free whole GPU is tainted), each claim allocated on its
    pod's node and reserved for it, no tainted device allocated, the ordinary pod kept off."""
    host = result["dra-whole"]
    assert host in {"dra-1", "dra-2"}, result
    assert result["dra-mig"] == result["dra-share"] == host, result
    assert result["dra-whole-2"] == ({"dra-1", "dra-2"} - {host}).pop(), result
    assert set(claims) == {"dra-whole", "dra-mig", "dra-share", "dra-whole-2"}, sorted(claims)
    devices = {}
    for pod, claim in claims.items():
        status = claim["status"]
        [res] = status["allocation"]["devices"]["results"]
        assert (res["driver"], res["pool"]) == ("gpu.example.com", result[pod]), (pod, res)
        assert [(r["resource"], r["name"]) for r in status.get("reservedFor") or ()] == [("pods", pod)]
        devices[pod] = res
        # the report names the device the cluster says the pod got
        assert any(pod in line and f"{res['pool']}/{res['device']}" in line for line in printed.splitlines()), pod
    assert devices["dra-whole"]["device"] == devices["dra-whole-2"]["device"] == "gpu-0"
    assert devices["dra-mig"]["device"].startswith("gpu-2-mig-3g-20gb-"), devices["dra-mig"]
    assert devices["dra-share"]["device"] == "gpu-3"
    # 8Gi of memory as asked; compute, not asked, at its request policy's default
    assert devices["dra-share"]["consumedCapacity"] == {"memory": "8Gi", "compute": "10"}
    assert all(d["device"] != "gpu-1" for d in devices.values()), "a tainted GPU was allocated"
    assert "node(s) are reserved for accelerator workloads" in result["dra-ordinary"], result["dra-ordinary"]
    assert f"packed: dra-whole, dra-mig, dra-share all on {host}" in printed


def _check_topology(result: dict[str, str], printed: str) -> None:
    """topology: rack-job (12 CPUs) fits one rack and lands in r1 (r2 ties, r3 is too small);
    block-job (20 CPUs, more than any rack) climbs to its required block, b1, the only one with
    room, spanning both its racks, never b2. The report quotes each group's Scheduled event, which
    names the domain the scheduler chose."""
    assert demo_topology.domains(result, "rack-job") == ({"b1"}, {"r1"}), result
    assert demo_topology.domains(result, "block-job") == ({"b1"}, {"r1", "r2"}), result
    lines = printed.splitlines()
    assert any("rack-job: " in ln and "placed in example.com/rack=r1 " in ln for ln in lines), printed
    assert any("block-job: " in ln and "placed in example.com/block=b1 " in ln for ln in lines), printed


def _check_reservation(result: dict[str, str], group: dict[str, Any], printed: str) -> None:
    """reservation: res-job (2 x 2 GPUs, 2 of res-1's 4 free) holds all 4 GPUs on its PodGroup's
    annotation; short (activeDeadlineSeconds 30, before the gang's expected start) backfilled,
    no-runtime was kept off with the reservation's reason; the Reserved event is quoted."""
    raw = (group["metadata"].get("annotations") or {}).get(ra.ANNOTATION)
    rec = ra.decode(raw) if isinstance(raw, str) else None
    assert isinstance(rec, ra.Record), raw
    assert rec.amounts == {"res-1": {dt.GPU: 4, "pods": 2}}
    assert rec.profile == dt.PROFILE
    assert 50 < rec.expected_start - rec.created <= 61, "the gang expects to start when the busy pods' 60 s end"
    assert all(result[f"res-job-{i}"].startswith("pending: ") for i in range(2)), result
    assert result["short"] == "res-1"
    assert "node capacity reserved for pod group demo/res-job until" in result["no-runtime"], result["no-runtime"]
    assert f"annotation {ra.ANNOTATION}: {raw}" in printed
    assert "Reserved event on PodGroup res-job: reserved nvidia.com/gpu=4, pods=2 on 1 node(s)" in printed


def _check_job_preemption(result: dict[str, str]) -> None:
    """job-preemption: the victims are one whole gang (all four of its pods, though two CPUs would
    do), the other gang is untouched, and high-job runs in the victims' rack."""
    gangs = {g: [result[f"{g}-{i}"] for i in range(4)] for g in ("low-a", "low-b")}
    [victim] = [g for g, where in gangs.items() if "preempted" in where]
    assert gangs[victim] == ["preempted"] * 4, gangs
    other = "low-b" if victim == "low-a" else "low-a"
    rack = "jl-r1" if victim == "low-a" else "jl-r2"
    assert {dt.rack_of(n) for n in gangs[other]} == {"jl-r1", "jl-r2"} - {rack}, gangs
    assert {dt.rack_of(result[f"high-job-{i}"]) for i in range(2)} == {rack}, result


def _check_elastic(result: dict[str, str]) -> None:
    """elastic: two members at once on el-1, the two extras on el-2 once its resident left, all in
    rack el-r1; none on el-3 (rack el-r2), which had room for one all along."""
    where = sorted(result[f"elastic-job-{i}"] for i in range(4))
    assert where == ["el-1", "el-1", "el-2", "el-2"], where


def _check_defrag(result: dict[str, str], run: dt.DefragRun, fragments: dict[str, str]) -> None:
    """defrag: the plan is valid for the cluster as it was (each move a ReplicaSet pod on the node
    it names, the shape's nodes the freed ones, verified, every eviction done); the moved pods are
    gone, their replacements bound off the freed nodes, and the gang runs on the freed nodes."""
    assert dt.check_plan(run.plan, run.before) == [], run.plan
    freed = set(run.plan["freedNodes"])
    assert freed == {"defrag-1", "defrag-2"}, run.plan
    assert {result["defrag-job-0"], result["defrag-job-1"]} == freed, result
    moved = {p.partition("/")[2] for p in dt.moved_pods(run.plan)}
    assert not moved & set(fragments), fragments
    assert len(fragments) == len(run.before), fragments
    assert all(node and node not in freed for node in fragments.values()), fragments
