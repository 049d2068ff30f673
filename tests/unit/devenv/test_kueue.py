"""The pure part of :mod:`custom_scheduler.devenv.kueue`: the quota arithmetic the Kueue integration
test checks at every observation, the queued Job it creates and the manager's command line."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from custom_scheduler.devenv import kueue as kq


def workload(*conditions: str, **usage: str) -> dict[str, Any]:
    """A Workload with the given True conditions and one PodSet using ``usage``."""
    return {
        "status": {
            "conditions": [{"type": c, "status": "True"} for c in conditions],
            "admission": {"podSetAssignments": [{"name": "main", "resourceUsage": dict(usage)}]},
        }
    }


@pytest.mark.parametrize(
    ("workloads", "want"),
    [
        pytest.param([], {}, id="none"),
        pytest.param([workload("QuotaReserved", cpu="1")], {"cpu": 1000}, id="reserved-counts"),
        pytest.param([workload(cpu="1")], {}, id="pending-does-not-count"),
        pytest.param([workload("QuotaReserved", "Finished", cpu="1")], {}, id="finished-released"),
        pytest.param(
            [workload("QuotaReserved", "Admitted", cpu="500m", memory="1Gi"), workload("QuotaReserved", cpu="1")],
            {"cpu": 1500, "memory": 1024**3 * 1000},
            id="summed-in-milli",
        ),
    ],
)
def test_usage_counts_only_workloads_that_hold_quota(workloads: list[dict[str, Any]], want: dict[str, int]) -> None:
    assert kq.usage_milli(workloads) == want


@pytest.mark.parametrize(
    ("usage", "quota", "want"),
    [
        pytest.param({"cpu": 2000}, {"cpu": "2"}, {}, id="at-quota"),
        pytest.param({"cpu": 2001}, {"cpu": "2"}, {"cpu": (2001, 2000)}, id="over"),
        pytest.param({"nvidia.com/gpu": 1000}, {"cpu": "2"}, {"nvidia.com/gpu": (1000, 0)}, id="no-quota-at-all"),
    ],
)
def test_over_quota(usage: dict[str, int], quota: dict[str, str], want: dict[str, tuple[int, int]]) -> None:
    assert kq.over_quota(usage, quota) == want


def test_queued_job_is_suspended_labelled_and_names_our_scheduler() -> None:
    spec = kq.JobSpec("j", "lq", {"cpu": "1"}, pods=3, run_for="5s", required_topology="rack", pod_group="g")
    job = kq.queued_job(spec, "delay")
    assert job["metadata"]["labels"] == {kq.QUEUE_LABEL: "lq"}
    assert job["spec"]["suspend"] is True
    assert (job["spec"]["parallelism"], job["spec"]["completions"]) == (3, 3)
    template = job["spec"]["template"]
    assert template["metadata"]["annotations"] == {"delay": "5s", kq.REQUIRED_TOPOLOGY_ANNOTATION: "rack"}
    assert template["spec"]["schedulerName"] == "custom-scheduler"
    assert template["spec"]["schedulingGroup"] == {"podGroupName": "g"}
    assert "nodeSelector" not in template["spec"]  # every node constraint its pods get is Kueue's


def test_cluster_queue_matches_every_namespace_and_covers_each_quota() -> None:
    cq = kq.cluster_queue("cq", "flavor", {"cpu": "2", "nvidia.com/gpu": "1"})
    assert cq["spec"]["namespaceSelector"] == {}
    (group,) = cq["spec"]["resourceGroups"]
    assert group["coveredResources"] == ["cpu", "nvidia.com/gpu"]
    assert group["flavors"][0]["resources"][1] == {"name": "nvidia.com/gpu", "nominalQuota": "1"}


def test_manager_runs_in_its_own_namespaces_with_the_metrics_cert_bound_and_execs() -> None:
    argv = kq.namespaced_argv(
        Path("/b/kueue"),
        config=Path("/w/c.yaml"),
        kubeconfig=Path("/k"),
        cert_dir=Path("/w/certs"),
        etc_dir=Path("/w/etc"),
    )
    assert argv[:4] == ["unshare", "--user", "--map-root-user", "--mount"]
    script = argv[-1]
    assert f"mount --bind /w/certs {kq.METRICS_CERT_DIR}" in script
    assert "exec /b/kueue --config=/w/c.yaml --kubeconfig=/k" in script
    cfg = kq.manager_config(health_port=1, metrics_port=2, webhook_port=3, cert_dir=Path("/w/certs"))
    assert cfg["leaderElection"] == {"leaderElect": False}
    assert cfg["internalCertManagement"] == {"enable": False}
    assert cfg["webhook"] == {"port": 3, "host": "127.0.0.1", "certDir": "/w/certs"}
