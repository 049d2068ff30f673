"""Cluster chores for Nodes that no kubelet runs: the demo, the benchmarks, and the tests whose Nodes
must stay as the test wrote them (the conformance tests write their pods' status). The test
session's ordinary Nodes are kwok's instead (:mod:`~custom_scheduler.devenv.kwok`), which does
these chores itself.

- :func:`create_ready_node`: the API server's ``TaintNodesByCondition`` admission gives every new
  Node the ``node.kubernetes.io/not-ready:NoSchedule`` taint; kubelet and the node controller would
  report Ready and lift it. We do both with a status merge-patch and a spec patch that restores
  exactly the taints the caller asked for.
- :func:`finish_terminating_pods`: without a kubelet a gracefully deleted bound pod stays
  Terminating forever; this deletes such pods with grace 0, as a kubelet would once containers stop.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterable
from datetime import UTC, datetime
from typing import Any

from custom_scheduler.kube import api_errors
from custom_scheduler.kube.client import MERGE_PATCH_CT, KubeClient, node_path, pod_path


def now_rfc3339() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def create_namespace(kube: KubeClient, name: str, labels: dict[str, str] | None = None) -> None:
    body = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name, "labels": labels or {}}}
    with contextlib.suppress(api_errors.Conflict):  # it exists already: what was asked for
        kube.post("/api/v1/namespaces", body)


def delete_namespace(kube: KubeClient, name: str, *, finish_pods: bool = True, wait: float = 0.0) -> None:
    """Delete a namespace; the namespace controller deletes what is in it.

    ``finish_pods`` then deletes its pods at once with grace 0: for bound pods that is the kubelet's
    part (they stay Terminating otherwise), for unbound ones it is only sooner than the controller
    (about 5 s), so the next test's scheduler never sees them. The namespace is already Terminating,
    so no controller can create new pods in it meanwhile. With ``wait``, wait until the namespace is
    gone (the namespace controller's own pace), and with ``finish_pods`` play the kubelet for bound
    pods meanwhile: without it, their kubelet (kwok) must finish them.
    """
    try:
        kube.delete(f"/api/v1/namespaces/{name}")
    except api_errors.NotFound:
        return  # gone already: nothing to delete or to wait for
    if finish_pods:
        # NotFound: no pod left to delete, which is the aim.
        with contextlib.suppress(api_errors.NotFound):
            kube.delete(pod_path(name), {"gracePeriodSeconds": 0})  # deletecollection
    if wait <= 0:
        return

    def gone() -> bool:
        if finish_pods:
            finish_terminating_pods(kube, name)
        try:
            kube.get(f"/api/v1/namespaces/{name}")
        except api_errors.NotFound:
            return True
        return False

    wait_for(gone, timeout=wait, interval=0.2, what=f"namespace {name} to be deleted")


def create_priority_class(kube: KubeClient, obj: dict[str, Any], timeout: float = 15.0) -> None:
    """Create a PriorityClass (an existing one is fine) and return once pods can use it.

    The API server's Priority admission plugin resolves ``priorityClassName`` through an informer,
    so a pod created right after its class can be refused with 403 "no PriorityClass with name".
    A dry-run pod create goes through the same admission chain without storing anything, so it
    tells when the class is visible there.
    """
    with contextlib.suppress(api_errors.Conflict):  # it exists already: admission is still awaited
        kube.post("/apis/scheduling.k8s.io/v1/priorityclasses", obj)
    name = obj["metadata"]["name"]
    probe = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"generateName": "priorityclass-probe-"},
        "spec": {"priorityClassName": name, "containers": [{"name": "c", "image": "probe"}]},
    }

    def admitted() -> bool:
        try:
            kube.post(pod_path("default"), probe, query={"dryRun": "All"})
        except api_errors.ApiError as e:
            if e.status == 403 and "PriorityClass" in str(e):
                return False
            raise
        return True

    wait_for(admitted, timeout=timeout, interval=0.05, what=f"PriorityClass {name} to be visible to admission")


def create_ready_node(kube: KubeClient, obj: dict[str, Any]) -> dict[str, Any]:
    """Create a Node, mark it Ready and leave it with exactly the taints in ``obj``."""
    name = obj["metadata"]["name"]
    wanted_taints = list((obj.get("spec") or {}).get("taints") or [])
    status = obj.setdefault("status", {})
    status.setdefault("conditions", [])
    ts = now_rfc3339()
    ready = {
        "type": "Ready",
        "status": "True",
        "reason": "KubeletReady",
        "message": "emulated kubelet is posting ready status",
        "lastHeartbeatTime": ts,
        "lastTransitionTime": ts,
    }
    with contextlib.suppress(api_errors.Conflict):  # it exists already: its status and taints are set below
        kube.post(node_path(), obj)
    patch_status = {"status": {**{k: v for k, v in status.items() if k != "conditions"}, "conditions": [ready]}}
    kube.patch(node_path(name, "status"), patch_status, content_type=MERGE_PATCH_CT)
    node: dict[str, Any] = kube.patch(node_path(name), {"spec": {"taints": wanted_taints or None}}, MERGE_PATCH_CT)
    return node


def delete_nodes(kube: KubeClient, names: Iterable[str]) -> None:
    for n in names:
        with contextlib.suppress(api_errors.NotFound):  # gone already: the aim
            kube.delete(node_path(n))


def bind(kube: KubeClient, namespace: str, name: str, node: str, uid: str = "") -> None:
    """POST a Binding through the ``pods/binding`` subresource (for tests that bind directly)."""
    meta: dict[str, Any] = {"name": name, "namespace": namespace}
    if uid:
        meta["uid"] = uid
    body = {
        "apiVersion": "v1",
        "kind": "Binding",
        "metadata": meta,
        "target": {"apiVersion": "v1", "kind": "Node", "name": node},
    }
    kube.post(pod_path(namespace, name, "binding"), body)


def list_pods(kube: KubeClient, namespace: str, label_selector: str = "") -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = []
    cont = ""
    while True:
        doc = kube.get(pod_path(namespace), {"limit": 500, "continue": cont, "labelSelector": label_selector})
        items.extend(doc.get("items") or [])
        cont = (doc.get("metadata") or {}).get("continue") or ""
        if not cont:
            return items


def wait_for(check: Callable[[], Any], timeout: float = 30.0, interval: float = 0.1, what: str = "condition") -> Any:
    """Poll ``check`` until it returns something truthy, or raise TimeoutError after ``timeout``."""
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        last = check()
        if last:
            return last
        time.sleep(interval)
    raise TimeoutError(f"timed out after {timeout:.0f}s waiting for {what} (last: {last!r})")


def finish_terminating_pods(kube: KubeClient, namespace: str) -> int:
    """Emulate kubelet: delete with grace 0 every pod of ``namespace`` that is Terminating."""
    n = 0
    for p in list_pods(kube, namespace):
        meta = p["metadata"]
        if meta.get("deletionTimestamp"):
            try:
                kube.delete(pod_path(namespace, meta["name"]), {"gracePeriodSeconds": 0})
                n += 1
            except api_errors.NotFound:
                pass  # gone already: what this emulation of kubelet was for
    return n


def overcommitted_nodes(kube: KubeClient) -> list[str]:
    """The invariant checker of the fault tests: nodes whose bound, non-terminal pods request more
    than the node's allocatable (pods, cpu, memory, extended resources). Empty means healthy."""
    from custom_scheduler.api.model import node_from_json, pod_from_json
    from custom_scheduler.api.resources import Resources

    nodes = {n.name: n for n in (node_from_json(d) for d in kube.get(node_path()).get("items") or [])}
    used: dict[str, Resources] = {}
    counts: dict[str, int] = {}
    cont = ""
    while True:
        doc = kube.get("/api/v1/pods", {"limit": 500, "continue": cont})
        for d in doc.get("items") or []:
            p = pod_from_json(d)
            if not p.node_name or p.terminal:
                continue
            used.setdefault(p.node_name, Resources()).add(p.requests)
            counts[p.node_name] = counts.get(p.node_name, 0) + 1
        cont = (doc.get("metadata") or {}).get("continue") or ""
        if not cont:
            break
    problems = []
    for name, req in used.items():
        node = nodes.get(name)
        if node is None:
            continue
        alloc = node.allocatable
        bad = [
            r
            for r, have, cap in (("cpu", req.milli_cpu, alloc.milli_cpu), ("memory", req.memory, alloc.memory))
            if have > cap
        ]
        bad += [r for r, v in req.scalar.items() if v > alloc.scalar.get(r, 0)]
        if alloc.allowed_pods and counts[name] > alloc.allowed_pods:
            bad.append("pods")
        if bad:
            problems.append(f"{name}: {', '.join(bad)}")
    return problems
