"""Effective pod requests (``resources.compute_requests``), as upstream's ``PodRequests`` (v1.34+):
containers, sidecars, init containers, pod-level ``spec.resources`` and overhead."""

from __future__ import annotations

from typing import Any

import pytest

from custom_scheduler.api.resources import compute_requests, container_score_requests

MI = 1024 * 1024


def c(cpu: str | None = None, mem: str | None = None, *, sidecar: bool = False) -> dict[str, Any]:
    req = {k: v for k, v in (("cpu", cpu), ("memory", mem)) if v is not None}
    out: dict[str, Any] = {"name": "c", "image": "i", "resources": {"requests": req} if req else {}}
    if sidecar:
        out["restartPolicy"] = "Always"
    return out


@pytest.mark.parametrize(
    ("spec", "want_cpu", "want_mem", "want_nz_cpu", "want_nz_mem"),
    [
        pytest.param({"containers": [c("1", "1Mi"), c("500m", "2Mi")]}, 1500, 3 * MI, 1500, 3 * MI, id="containers"),
        pytest.param({"containers": [c()]}, 0, 0, 100, 200 * MI, id="no-requests-score-as-defaults"),
        pytest.param(
            {"containers": [c("1")], "initContainers": [c("300m", sidecar=True), c("2")]},
            2300,
            0,
            2300,
            400 * MI,  # every container without a memory request scores as 200Mi, sidecar included
            id="init-after-sidecar-dominates",
        ),
        pytest.param(
            {"containers": [c("1", "1Mi"), c()], "resources": {"requests": {"cpu": "3", "memory": "8Mi"}}},
            3000,
            8 * MI,
            3000,
            8 * MI,
            id="pod-level-replaces-sum",
        ),
        pytest.param(
            {"containers": [c("1", "1Mi")], "resources": {"requests": {"cpu": "250m"}}},
            250,
            MI,
            250,
            MI,
            id="pod-level-cpu-only",
        ),
        pytest.param(
            {"containers": [c("1")], "resources": {"requests": {"cpu": "2"}}, "overhead": {"cpu": "100m"}},
            2100,
            0,
            2100,
            200 * MI,
            id="overhead-after-pod-level",
        ),
        pytest.param(
            {"containers": [c("1")], "resources": {"limits": {"cpu": "4"}}},
            1000,
            0,
            1000,
            200 * MI,
            id="pod-level-limits-only-change-nothing",
        ),
    ],
)
def test_compute_requests(
    spec: dict[str, Any], want_cpu: int, want_mem: int, want_nz_cpu: int, want_nz_mem: int
) -> None:
    total, nz_cpu, nz_mem = compute_requests(spec)
    assert (total.milli_cpu, total.memory, nz_cpu, nz_mem) == (want_cpu, want_mem, want_nz_cpu, want_nz_mem)


def test_pod_level_hugepages_replace_containers() -> None:
    spec = {
        "containers": [{"name": "c", "resources": {"requests": {"hugepages-2Mi": "4Mi"}}}],
        "resources": {"requests": {"hugepages-2Mi": "10Mi", "cpu": "1"}},
    }
    total, _, _ = compute_requests(spec)
    assert total.scalar["hugepages-2Mi"] == 10 * MI


def test_container_score_requests_leave_out_pod_level_requests() -> None:
    """Fit's score (1.37.2) counts containers and overhead only; None without pod-level requests."""
    spec = {
        "containers": [{"name": "a", "resources": {"requests": {"cpu": "1"}}}, {"name": "b"}],
        "resources": {"requests": {"cpu": "4", "memory": "1Gi"}},
        "overhead": {"cpu": "250m"},
    }
    got = container_score_requests(spec)
    assert got is not None
    total, nz_cpu, nz_mem = got
    assert (total.milli_cpu, total.memory, nz_cpu, nz_mem) == (1250, 0, 1350, 400 * MI)
    assert compute_requests(spec)[0].milli_cpu == 4250
    assert container_score_requests({"containers": spec["containers"]}) is None
