"""Requests of a resized pod (in-place resize, GA since 1.35): ``compute_requests(spec, status)``
as upstream's ``PodRequests`` with ``UseStatusResources`` and pod-level status (1.37.2's NodeInfo).
The cases carry over ``component-helpers/resource/helpers_test.go`` (TestPodResourceRequests,
TestAggregateContainerRequestsAndLimits), plus the two a resize goes through: scaled up while the
kubelet works on it, scaled down once actuated."""

from __future__ import annotations

from typing import Any

import pytest

from custom_scheduler.api.model import pod_from_json
from custom_scheduler.api.resources import compute_requests, container_score_requests

GB = 10**9
MB = 10**6
INFEASIBLE = [{"type": "PodResizePending", "status": "True", "reason": "Infeasible"}]


def ctr(name: str, cpu: str | None = None, *, sidecar: bool = False, **more: str) -> dict[str, Any]:
    req = {**({"cpu": cpu} if cpu else {}), **{k.replace("_", "-"): v for k, v in more.items()}}
    out: dict[str, Any] = {"name": name, "image": "i", "resources": {"requests": req} if req else {}}
    if sidecar:
        out["restartPolicy"] = "Always"
    return out


def cst(name: str, *, allocated: dict[str, str] | None = None, actual: dict[str, str] | None = None) -> dict[str, Any]:
    out: dict[str, Any] = {"name": name}
    if allocated is not None:
        out["allocatedResources"] = allocated
    if actual is not None:
        out["resources"] = {"requests": actual}
    return out


C1 = [ctr("c1", "1")]
STATUS_6_5 = [cst("c1", allocated={"cpu": "6"}, actual={"cpu": "5"})]


@pytest.mark.parametrize(
    ("spec", "status", "want"),
    [
        pytest.param(
            {"containers": [ctr("container-1", "4")]},
            {"containerStatuses": [cst("container-1", actual={"cpu": "2"})], "conditions": INFEASIBLE},
            {"cpu": 2000},
            id="resized-infeasible",
        ),
        pytest.param(
            {"containers": [ctr("container-1", "6")]},
            {
                "containerStatuses": [cst("container-1", allocated={"cpu": "4"}, actual={"cpu": "2"})],
                "conditions": INFEASIBLE,
            },
            {"cpu": 4000},
            id="resized-infeasible-and-in-progress",
        ),
        pytest.param(
            {"containers": [ctr("container-1", "4")]},
            {"containerStatuses": [cst("container-1", actual={"cpu": "2"})]},
            {"cpu": 4000},
            id="resized-no-resize-status",
        ),
        pytest.param(
            {"containers": [ctr("container-1", "30m", memory="20M", ephemeral_storage="10G")]},
            {
                "containerStatuses": [
                    cst(
                        "container-1",
                        allocated={"cpu": "20m", "memory": "10M", "ephemeral-storage": "30G"},
                        actual={"cpu": "10m", "memory": "30M", "ephemeral-storage": "20G"},
                    )
                ]
            },
            {"cpu": 30, "memory": 30 * MB, "ephemeral-storage": 30 * GB},
            id="per-resource-3-way-maximum",
        ),
        pytest.param(
            {"initContainers": [ctr("restartable-init-1", "4", sidecar=True)]},
            {"initContainerStatuses": [cst("restartable-init-1", actual={"cpu": "2"})], "conditions": INFEASIBLE},
            {"cpu": 2000},
            id="restartable-init-infeasible",
        ),
        pytest.param(
            {"initContainers": [ctr("restartable-init-1", "4", sidecar=True)]},
            {"initContainerStatuses": [cst("restartable-init-1", actual={"cpu": "2"})]},
            {"cpu": 4000},
            id="restartable-init-no-resize-status",
        ),
        pytest.param(
            {"containers": [ctr("c1", "1"), ctr("c2", "2")]},
            {"containerStatuses": [cst("c1", allocated={"cpu": "2"}), cst("c2", allocated={"cpu": "1"})]},
            {"cpu": 3000},
            id="max-of-sums-not-sum-of-maxes",
        ),
        pytest.param(
            {"containers": [ctr("container-1")]},
            {"containerStatuses": [cst("container-1", actual={"cpu": "2"})]},
            {"cpu": 2000},
            id="empty-spec-requests-status-counts",
        ),
        pytest.param(
            {"initContainers": [ctr("container-1", sidecar=True)]},
            {"initContainerStatuses": [cst("container-1", actual={"cpu": "2"})]},
            {"cpu": 2000},
            id="empty-sidecar-requests-status-counts",
        ),
        pytest.param(
            {"containers": C1},
            {"allocatedResources": {"cpu": "4"}, "resources": {"requests": {"cpu": "3"}}},
            {"cpu": 4000},
            id="pod-level-status-holds-the-sums",
        ),
        pytest.param(
            {"containers": C1},
            {"containerStatuses": STATUS_6_5, "resources": {"requests": {"cpu": "3"}}},
            {"cpu": 6000},
            id="falls-back-to-containers-without-pod-allocated",
        ),
        pytest.param(
            {"containers": C1},
            {"containerStatuses": STATUS_6_5, "allocatedResources": {"cpu": "6"}},
            {"cpu": 6000},
            id="falls-back-to-containers-without-pod-resources",
        ),
        pytest.param(
            {"containers": C1, "resources": {"requests": {"cpu": "2"}}},
            {"allocatedResources": {"cpu": "1"}, "resources": {"requests": {"cpu": "1"}}},
            {"cpu": 2000},
            id="pod-level-scaled-up-in-flight-counts-spec",
        ),
        pytest.param(
            {"containers": C1, "resources": {"requests": {"cpu": "4"}}},
            {"allocatedResources": {"cpu": "1"}, "resources": {"requests": {"cpu": "1"}}, "conditions": INFEASIBLE},
            {"cpu": 1000},
            id="pod-level-infeasible-counts-status",
        ),
        pytest.param(
            {"containers": [ctr("c1", "1")]},
            {"containerStatuses": [cst("c1", allocated={"cpu": "1"}, actual={"cpu": "3"})]},
            {"cpu": 3000},
            id="scaled-down-not-yet-actuated-counts-actual",
        ),
        pytest.param(
            {"containers": [ctr("c1", "1")]},
            {"containerStatuses": [cst("c1", allocated={"cpu": "1"}, actual={"cpu": "1"})]},
            {"cpu": 1000},
            id="scaled-down-actuated-counts-smaller",
        ),
        pytest.param(
            {"containers": [ctr("c1", "3")]},
            {"containerStatuses": [cst("c1", allocated={"cpu": "1"}, actual={"cpu": "1"})]},
            {"cpu": 3000},
            id="scaled-up-in-flight-counts-larger",
        ),
    ],
)
def test_status_resources_count_as_upstream(spec: dict[str, Any], status: dict[str, Any], want: dict[str, int]) -> None:
    req, nz_cpu, _ = compute_requests(spec, status)
    assert {k: req.get(k) for k in want} == want
    assert nz_cpu == want["cpu"]


def test_non_zero_defaults_apply_to_status_lists_too() -> None:
    """A container that requests no memory anywhere scores as 200Mi whichever list is read."""
    spec = {"containers": [ctr("c1", "1")]}
    _, _, nz_mem = compute_requests(spec, {"containerStatuses": [cst("c1", allocated={"cpu": "2"})]})
    assert nz_mem == 200 * 1024 * 1024


def test_fit_score_keeps_spec_requests() -> None:
    """NodeResourcesFit's scorer reads neither status nor pod-level resources (1.37.2)."""
    spec = {"containers": [ctr("c1", "1")]}
    status = {"containerStatuses": [cst("c1", allocated={"cpu": "3"}, actual={"cpu": "3"})]}
    assert container_score_requests(spec) is None
    assert container_score_requests(spec, {"phase": "Pending"}) is None
    score = container_score_requests(spec, status)
    assert score is not None
    assert score[0].milli_cpu == 1000
    assert compute_requests(spec, status)[0].milli_cpu == 3000
    # A running pod that was never resized reports its spec back: one vector serves both.
    settled = {"containerStatuses": [cst("c1", allocated={"cpu": "1"}, actual={"cpu": "1"})]}
    assert container_score_requests(spec, settled) is None


def test_pod_projection_counts_status() -> None:
    doc = {
        "metadata": {"name": "p", "namespace": "default", "uid": "u"},
        "spec": {"containers": [ctr("c1", "1")], "nodeName": "n1"},
        "status": {"phase": "Running", "containerStatuses": [cst("c1", allocated={"cpu": "2"}, actual={"cpu": "2"})]},
    }
    pod = pod_from_json(doc)
    assert pod.requests.milli_cpu == 2000
    assert pod.container_requests is not None
    assert pod.container_requests[0].milli_cpu == 1000
