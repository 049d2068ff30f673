"""Finding the running daemon's /configz, the pure part: which pod (the Lease holder, else a ready
replica), which port, which proxy path, and what a /configz answer must hold. The reads themselves
run against the real API server in tests/integration/test_explain_truth.py."""

from __future__ import annotations

from typing import Any

import pytest

from custom_scheduler.tools import explain_config as ec
from custom_scheduler.tools.plumbing import ToolError


def _pod(name: str, *, ready: bool = True, phase: str = "Running", ports: Any = None, deleting: bool = False) -> Any:
    meta: dict[str, Any] = {"name": name, "namespace": "kube-system"}
    if deleting:
        meta["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    return {
        "metadata": meta,
        "spec": {"containers": [{"name": "scheduler", "ports": ports or []}]},
        "status": {"phase": phase, "conditions": [{"type": "Ready", "status": "True" if ready else "False"}]},
    }


def _lease(holder: str) -> dict[str, Any]:
    return {"spec": {"holderIdentity": holder}}


PODS = [_pod("cs-b"), _pod("cs-a"), _pod("cs-c", ready=False)]


@pytest.mark.parametrize(
    ("lease", "pods", "name", "why"),
    [
        (_lease("cs-b_0f4c2a51-1111-4a4a-9999-0123456789ab"), PODS, "cs-b", "the leader"),
        (None, PODS, "cs-a", "a ready replica"),
        (_lease(""), PODS, "cs-a", "a ready replica"),
        (
            _lease("cs-c_0f4c2a51-1111-4a4a-9999-0123456789ab"),
            PODS,
            "cs-a",
            "a ready replica (Lease holder 'cs-c_0f4c2a51-1111-4a4a-9999-0123456789ab' is not among them)",
        ),
        (None, [_pod("cs-x", deleting=True), _pod("cs-y", phase="Pending"), _pod("cs-z")], "cs-z", "a ready replica"),
    ],
    ids=["lease-holder", "no-lease", "released-lease", "holder-not-ready", "skips-deleting-and-pending"],
)
def test_daemon_pod(lease: Any, pods: list[Any], name: str, why: str) -> None:
    pod, reason = ec.daemon_pod(lease, pods)
    assert (pod["metadata"]["name"], reason) == (name, why)


def test_no_ready_daemon_pod_is_a_tool_error() -> None:
    with pytest.raises(ToolError, match="no ready daemon pod"):
        ec.daemon_pod(_lease("cs-a_x"), [_pod("cs-a", ready=False)])


@pytest.mark.parametrize(
    ("ports", "port"),
    [
        ([{"name": "https-metrics", "containerPort": 10259}], 10259),
        ([{"name": "metrics", "containerPort": 8080}, {"name": "https", "containerPort": 9443}], 9443),
        ([{"containerPort": 8080}], 10259),
        (None, 10259),
    ],
)
def test_https_port(ports: Any, port: int) -> None:
    assert ec.https_port(_pod("p", ports=ports)) == port


def test_proxy_path() -> None:
    assert (
        ec.proxy_path("kube-system", "cs-a", 10259)
        == "/api/v1/namespaces/kube-system/pods/https:cs-a:10259/proxy/configz"
    )


@pytest.mark.parametrize("body", [b"{}", b'{"componentconfig": []}', b"[1]"])
def test_an_answer_without_componentconfig_is_refused(body: bytes) -> None:
    with pytest.raises(ToolError, match="answered without a componentconfig object"):
        ec.componentconfig(body, "pod x")
    assert ec.componentconfig(b'{"componentconfig": {"kind": "K"}}', "pod x") == {"kind": "K"}


def test_offline_and_explicit_sources_need_no_cluster(tmp_path: Any) -> None:
    from custom_scheduler.plugins.builtin import full_registry

    reg = full_registry()
    assert ec.choose_config(reg, path=None).description == "the default profile (offline, no --config)"
    f = tmp_path / "c.yaml"
    f.write_text("apiVersion: kubescheduler.config.k8s.io/v1\nkind: KubeSchedulerConfiguration\n")
    assert ec.choose_config(reg, path=str(f)).description == f"--config {f}"
