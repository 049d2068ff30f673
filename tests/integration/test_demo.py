"""The README's demo runs the real daemon process end to end and ends cleanly on SIGTERM."""

from __future__ import annotations

import io
from typing import Any

from custom_scheduler.devenv import demo_topology
from custom_scheduler.devenv.controlplane import ControlPlane
from custom_scheduler.devenv.demo import NAMESPACE, cleanup_demo, run_demo
from custom_scheduler.kube.client import KubeClient


def test_demo_places_the_workload_and_exits_0_on_sigterm(control_plane: ControlPlane) -> None:
    out = io.StringIO()
    kube = KubeClient.from_kubeconfig(str(control_plane.kubeconfig()), qps=0, burst=1)
    try:
        result, rc = run_demo(control_plane, out=out, timeout=60)
        claims = _claims_by_pod(kube)  # read before the cleanup deletes the namespace
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

    _check_dra(result, claims, out.getvalue())
    _check_topology(result, out.getvalue())


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
