"""Proof on kwok (issue #28 item 4): a GPU pod that does not fit anywhere fits after ``defrag``.

Four kwok nodes of 8 GPUs (a resource name of this test's own, so nothing else in the session
counts), each filled by a ReplicaSet pinned to it, so that 22 GPUs are free and no node has 8:

- n1: one pod of a higher priority than the waiting pod's (may not move);
- n2: two pods under a PodDisruptionBudget allowing one disruption (both would have to go);
- n3: three ordinary pods; n4: four.

The daemon runs with ``/metrics`` served (HTTPS) and AcceleratorIsolation packing; the test scrapes
the stranded-accelerator families and checks them against these numbers. A pending 8-GPU pod
(its PriorityClass says ``preemptionPolicy: Never``, so only defrag can help it) fails to schedule. ``defrag --pod
--execute`` must then choose n3 (n1 and n2 would be cheaper but are held back by priority and by
the PDB), evict its three pods through the Eviction API, and the ReplicaSet controller re-creates
them (the templates now unpinned), our scheduler packs them onto the other nodes, and the 8-GPU
pod binds to n3. Last, the executor's refusal: evicting both PDB-guarded pods stops at the
second with the API server's 429.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from custom_scheduler import config
from custom_scheduler.devenv import cluster, kwok
from custom_scheduler.framework import fragmentation
from custom_scheduler.kube.client import MERGE_PATCH_CT, KubeClient
from custom_scheduler.plugins.builtin import full_registry
from custom_scheduler.server.app import App
from custom_scheduler.server.daemon import serve
from custom_scheduler.server.metrics import Metrics
from custom_scheduler.tools import defrag_execute
from custom_scheduler.tools.cluster_state import state_pod
from custom_scheduler.tools.defrag import plan_defrag, shape_of_pod
from custom_scheduler.tools.live_cluster import fetch_live
from tests import secure
from tests.builders import make_node, make_pod
from tests.integration.env import Env

GPU = "defrag.example.com/gpu"
ZONE = "defrag.example.com/zone"
PROFILE = "defrag-pack"

CONFIG = """
apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
leaderElection:
  leaderElect: true
  resourceNamespace: kube-system
  resourceName: LEASE
  leaseDuration: 4s
  renewDeadline: 3s
  retryPeriod: 500ms
profiles:
- schedulerName: PROFILE
  plugins:
    multiPoint:
      enabled: [{name: AcceleratorIsolation, weight: 5}]
  pluginConfig:
  - name: AcceleratorIsolation
    args: {resources: [GPU]}
"""


@pytest.fixture
def gpu_nodes(kwok_proc: kwok.Kwok, env: Env) -> Iterator[dict[str, str]]:
    """n1..n4: kwok nodes of 8 GPUs, n1 and n2 in zone za, n3 and n4 in zb; role -> node name."""
    names = {role: f"defrag-{role}-{uuid.uuid4().hex[:5]}" for role in ("n1", "n2", "n3", "n4")}
    try:
        for role, name in names.items():
            b = make_node(name).capacity_named({"cpu": "32", "memory": "64Gi", "pods": "110", GPU: "8"})
            b = b.label("defrag-group", env.namespace).label(ZONE, "za" if role in ("n1", "n2") else "zb")
            kwok.create_node(env.kube, b.obj())
        yield names
    finally:
        for name in names.values():
            kwok.delete_node(env.kube, name)


@contextmanager
def pack_daemon(env: Env, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[tuple[App, Path]]:
    """``daemon.serve`` with the packing profile, leading; yields the App and its config file."""
    monkeypatch.setenv(fragmentation.ENV_DOMAIN_LABEL, ZONE)
    text = CONFIG.replace("LEASE", f"defrag-{env.namespace}").replace("PROFILE", PROFILE).replace("[GPU]", f"[{GPU}]")
    path = tmp_path / "config.yaml"
    path.write_text(text)
    cfg = config.load_config(text, full_registry())
    client = KubeClient.from_kubeconfig(str(env.control_plane.kubeconfig()), qps=50, burst=100)
    metrics = Metrics(process_collectors=False)
    app = App(cfg, full_registry(), client, metrics=metrics)
    result: list[int] = []
    t = threading.Thread(target=lambda: result.append(serve(app, metrics, health_address="127.0.0.1:0")), daemon=True)
    t.start()
    try:
        cluster.wait_for(lambda: app.health_port, timeout=10, what="health server")
        cluster.wait_for(lambda: metrics.sample("custom_scheduler_leader") == 1.0, timeout=20, what="leading")
        yield app, path
    finally:
        app.stop_event.set()
        t.join(30)


def scrape(env: Env, app: App) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    """``/metrics`` over HTTPS, the accelerator families of this test's resource only."""
    status, body, _ = secure.get(f"https://127.0.0.1:{app.health_port}/metrics", token=env.control_plane.admin_token)
    assert status == 200
    out = {}
    for line in body.decode().splitlines():
        if line.startswith("custom_scheduler_accelerator") and f'resource="{GPU}"' in line:
            name, _, rest = line.partition("{")
            labels, _, value = rest.rpartition("} ")
            pairs = frozenset(
                (k, v.strip('"')) for k, v in (p.split("=", 1) for p in labels.split(",")) if k != "resource"
            )
            out[(name, pairs)] = float(value)
    return out


def _replica_set(env: Env, name: str, app: str, node: str, replicas: int, priority_class: str = "") -> None:
    pod = make_pod("x").req_named({GPU: "1", "cpu": "100m"}).scheduler(PROFILE).obj()
    spec = {**pod["spec"], "nodeSelector": {"kubernetes.io/hostname": node}, "terminationGracePeriodSeconds": 1}
    if priority_class:
        spec["priorityClassName"] = priority_class
    labels = {"app": app, "rs": name}
    body = {
        "apiVersion": "apps/v1",
        "kind": "ReplicaSet",
        "metadata": {"name": name},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"rs": name}},
            "template": {"metadata": {"labels": labels}, "spec": spec},
        },
    }
    env.kube.post(f"/apis/apps/v1/namespaces/{env.namespace}/replicasets", body)


def _unpin(env: Env, name: str) -> None:
    """Re-created pods may go to any node of the test (the pods running now keep their node)."""
    selector = {"kubernetes.io/hostname": None, "defrag-group": env.namespace}  # a merge patch: null removes
    patch = {"spec": {"template": {"spec": {"nodeSelector": selector}}}}
    env.kube.patch(f"/apis/apps/v1/namespaces/{env.namespace}/replicasets/{name}", patch, MERGE_PATCH_CT)


def _bound(env: Env, rs: str) -> dict[str, tuple[str, str]]:
    """Pods of ReplicaSet ``rs`` that are bound and not terminating: name -> (uid, node)."""
    return {
        p["metadata"]["name"]: (p["metadata"]["uid"], p["spec"].get("nodeName") or "")
        for p in cluster.list_pods(env.kube, env.namespace, f"rs={rs}")
        if p["spec"].get("nodeName") and not p["metadata"].get("deletionTimestamp")
    }


def _wait_bound_rs(env: Env, rs: str, n: int, *, not_named: frozenset[str] = frozenset()) -> dict[str, tuple[str, str]]:
    """Wait until ReplicaSet ``rs`` has ``n`` bound pods, none named in ``not_named``; return them."""

    def done() -> dict[str, tuple[str, str]] | None:
        b = _bound(env, rs)
        return b if len(b) == n and not set(b) & not_named else None

    got: dict[str, tuple[str, str]] = cluster.wait_for(done, timeout=60, what=f"{n} bound pods of {rs}")
    return got


def _fragment(env: Env, nodes: dict[str, str], high: str) -> dict[str, dict[str, tuple[str, str]]]:
    """The four ReplicaSets, bound where pinned, then unpinned; and the PDB, once it allows one."""
    layout = {"serve": ("n1", 1, high), "guarded": ("n2", 2, ""), "train3": ("n3", 3, ""), "train4": ("n4", 4, "")}
    for rs, (role, n, pc) in layout.items():
        _replica_set(env, rs, "guarded" if rs == "guarded" else rs, nodes[role], n, pc)
    placed = {rs: _wait_bound_rs(env, rs, n) for rs, (_, n, _) in layout.items()}
    for rs in layout:
        _unpin(env, rs)
    pdb = {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": {"name": "guarded"},
        "spec": {"maxUnavailable": 1, "selector": {"matchLabels": {"app": "guarded"}}},
    }
    env.kube.post(f"/apis/policy/v1/namespaces/{env.namespace}/poddisruptionbudgets", pdb)
    _pdb_allows(env, 1)
    return placed


def _pdb_allows(env: Env, n: int) -> None:
    """Set the PDB's maxUnavailable to ``n`` and wait until its status allows ``n`` disruptions."""
    path = f"/apis/policy/v1/namespaces/{env.namespace}/poddisruptionbudgets/guarded"
    env.kube.patch(path, {"spec": {"maxUnavailable": n}}, MERGE_PATCH_CT)
    cluster.wait_for(
        lambda: (env.kube.get(path).get("status") or {}).get("disruptionsAllowed") == n,
        timeout=30,
        what=f"the PDB to allow {n} disruption(s)",
    )


def _expect(free: dict[str, int]) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    """The families' values for nodes with these free GPUs (all in this test's zones za, zb)."""
    frees = list(free.values())
    out: dict[tuple[str, frozenset[tuple[str, str]]], float] = {
        ("custom_scheduler_accelerators_free", frozenset()): sum(frees),
        ("custom_scheduler_accelerators_allocatable", frozenset()): 8 * len(frees),
        ("custom_scheduler_accelerator_largest_free_block", frozenset()): max(frees),
    }
    for s in fragmentation.DEFAULT_SIZES:
        out[("custom_scheduler_accelerators_stranded", frozenset({("size", str(s))}))] = sum(
            f for f in frees if 0 < f < s
        )
        out[("custom_scheduler_accelerator_hostable_pods", frozenset({("size", str(s))}))] = sum(f // s for f in frees)
    for zone, roles in (("za", ("n1", "n2")), ("zb", ("n3", "n4"))):
        key = frozenset({("domain", zone)})
        out[("custom_scheduler_accelerator_domain_free", key)] = sum(free[r] for r in roles)
        out[("custom_scheduler_accelerator_domain_largest_free_block", key)] = max(free[r] for r in roles)
    return out


def test_a_gpu_pod_that_fits_nowhere_fits_after_defrag(
    env: Env,
    gpu_nodes: dict[str, str],
    priority_class: Callable[..., str],
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
) -> None:
    high, mid = priority_class(1000), priority_class(500, never=True)
    with pack_daemon(env, monkeypatch, tmp_path) as (app, config_path):
        before = _fragment(env, gpu_nodes, high)
        want = _expect({"n1": 7, "n2": 6, "n3": 5, "n4": 4})
        cluster.wait_for(lambda: scrape(env, app) == want, timeout=20, what=f"the accelerator metrics {want}")

        big = make_pod("big").req_named({GPU: "8", "cpu": "100m"}).scheduler(PROFILE)
        big_obj = big.node_selector(**{"defrag-group": env.namespace}).obj()
        big_obj["spec"]["priorityClassName"] = mid
        env.create_pod(big_obj)
        env.wait_failed_scheduling("big")

        # The plan, read-only first: n3, three pods of train3, nothing else.
        state = fetch_live(env.kube)
        reg = full_registry()
        cfg = config.load_config(config_path.read_text(), reg)
        plan = plan_defrag(state, shape_of_pod(state, f"{env.namespace}/big"), cfg, reg)
        assert plan.verified, json.dumps(plan.verification, indent=1)
        assert plan.plan.targets == {gpu_nodes["n3"]: 1}
        moved = {p.name for p in plan.plan.evicted_pods()}
        assert moved == set(before["train3"])  # never serve (priority 1000 > 500), never guarded (PDB)

        argv = ["defrag", "--kubeconfig", str(env.control_plane.kubeconfig()), "--pod", f"{env.namespace}/big"]
        argv += ["--config", str(config_path), "--execute", "--rate", "600", "--max-evictions", "5", "-o", "json"]
        # The real command line, in its own process (this one's stdout carries the daemon's logs).
        proc = subprocess.run(
            [sys.executable, "-m", "custom_scheduler", *argv], check=False, capture_output=True, text=True, timeout=120
        )
        assert proc.returncode == 0, proc.stderr + proc.stdout
        report: dict[str, Any] = json.loads(proc.stdout)
        assert sorted(report["execution"]["evicted"]) == sorted(f"{env.namespace}/{n}" for n in moved)
        assert report["execution"]["stopped"] == ""

        assert env.wait_bound("big", timeout=60)["big"] == gpu_nodes["n3"]
        again = _wait_bound_rs(env, "train3", 3, not_named=frozenset(moved))
        assert gpu_nodes["n3"] not in {node for _, node in again.values()}
        assert _bound(env, "serve") == before["serve"]
        assert _bound(env, "guarded") == before["guarded"]
        # n3 now holds the 8-GPU pod; the three re-created pods packed elsewhere: 22 - 8 free.
        cluster.wait_for(
            lambda: scrape(env, app)[("custom_scheduler_accelerators_free", frozenset())] == 14,
            timeout=20,
            what="14 free GPUs",
        )

        # The executor stops at the first refusal. With the PDB at zero allowed disruptions (not one:
        # a re-created pod that turns Ready at once would restore the budget between two evictions),
        # a train4 pod goes, the first guarded pod is refused with 429, the second is never tried.
        _pdb_allows(env, 0)
        train4 = next(p for p in state.assigned_pods() if p["metadata"]["name"] in before["train4"])
        guarded = [p for p in state.assigned_pods() if p["metadata"]["name"] in before["guarded"]]
        pods = [state_pod(p, []) for p in (train4, *guarded)]
        out = defrag_execute.evict_all(env.kube, pods, rate=600)
        assert out.evicted == [pods[0].key]
        assert out.stopped.startswith(f"eviction of {pods[1].key} refused by a PodDisruptionBudget")
        assert _bound(env, "guarded") == before["guarded"]
