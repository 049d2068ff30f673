"""The README's demo runs the real daemon process end to end and ends cleanly on SIGTERM."""

from __future__ import annotations

import io

from custom_scheduler.devenv.controlplane import ControlPlane
from custom_scheduler.devenv.demo import run_demo


def test_demo_places_the_workload_and_exits_0_on_sigterm(control_plane: ControlPlane) -> None:
    out = io.StringIO()
    result, rc = run_demo(control_plane, out=out, timeout=60, cleanup=True)
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
