"""Preemption end to end on the real API server: victims marked and deleted, the preemptor
nominated and then bound; PodDisruptionBudgets steer the choice; ``preemptionPolicy: Never`` waits.

The API server's Priority admission plugin fills ``spec.priority`` from ``priorityClassName`` (and
rejects pods that set a priority without a class), so every test creates its own PriorityClasses.
The session's kwok is the Nodes' kubelet: it finishes the victims' graceful deletes at once, as a
kubelet does once the containers stopped. To look at the victims while they are Terminating (marked,
nominated preemptor not yet bound), a test holds them with a finalizer of its own (:data:`HOLD`)
and lets them go with ``release``.
"""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from custom_scheduler.devenv import cluster
from custom_scheduler.kube import api_errors
from custom_scheduler.kube.client import MERGE_PATCH_CT, pod_path
from tests.builders import make_node, make_pod
from tests.integration.env import Env, with_class

# Part of the integration smoke that CI also runs on the oldest supported Kubernetes.
pytestmark = pytest.mark.smoke

PriorityClasses = Callable[..., str]


def condition(pod: dict[str, Any], type_: str) -> dict[str, Any] | None:
    return next((c for c in pod.get("status", {}).get("conditions") or () if c["type"] == type_), None)


#: A finalizer that keeps a deleted pod Terminating until the test removes it (see ``release``).
HOLD = "tests.custom-scheduler.io/hold"


def held(obj: dict[str, Any]) -> dict[str, Any]:
    """The pod ``obj`` with :data:`HOLD`."""
    obj["metadata"]["finalizers"] = [HOLD]
    return obj


@pytest.fixture
def release(env: Env) -> Iterator[Callable[..., None]]:
    """``release(*names)`` drops :data:`HOLD` from those pods; after the test, from every pod left
    (a held pod would keep the namespace from going away)."""

    def drop(*names: str) -> None:
        for name in names:
            with contextlib.suppress(api_errors.NotFound):
                env.kube.patch(pod_path(env.namespace, name), {"metadata": {"finalizers": None}}, MERGE_PATCH_CT)

    yield drop
    drop(*env.pods())


def finish_victims_until_bound(
    env: Env, release: Callable[..., None], victims: list[str], name: str, node: str
) -> None:
    """Release the held ``victims`` (kwok has deleted them) and wait until ``name`` is bound to ``node``."""
    release(*victims)

    def check() -> bool:
        return env.node_of(name) == node

    cluster.wait_for(check, timeout=45, interval=0.3, what=f"{name} bound to {node} after preemption")


def test_high_priority_pod_preempts_the_least_important_pods(
    env: Env, priority_class: PriorityClasses, release: Callable[..., None]
) -> None:
    """A 3-cpu node full of priority 1, 2 and 3 pods; a priority-100 pod needing 2 cpus evicts the
    priority 1 and 2 pods (DisruptionTarget, graceful delete, Preempted events), is nominated, and
    binds there once the victims are gone. The priority-3 pod is reprieved."""
    node = env.node(make_node("full").capacity(cpu="3", memory="8Gi", pods="110"))
    app = env.start_scheduler()
    on_node = {"kubernetes.io/hostname": node}
    for prio in (1, 2, 3):
        env.create_pod(
            held(with_class(make_pod(f"low-{prio}").req(cpu="1").node_selector(**on_node), priority_class(prio)))
        )
    env.wait_bound("low-1", "low-2", "low-3")

    vip = env.create_pod(with_class(make_pod("vip").req(cpu="2").node_selector(**on_node), priority_class(100)))
    assert vip["spec"]["priority"] == 100

    def victims_marked() -> dict[str, dict[str, Any]] | None:
        pods = env.pods()
        ok = all(
            pods[v]["metadata"].get("deletionTimestamp") and condition(pods[v], "DisruptionTarget")
            for v in ("low-1", "low-2")
        )
        return pods if ok and pods["vip"]["status"].get("nominatedNodeName") == node else None

    pods = cluster.wait_for(victims_marked, timeout=30, what="victims terminating and vip nominated")
    for v in ("low-1", "low-2"):
        cond = condition(pods[v], "DisruptionTarget")
        assert cond is not None
        assert (cond["status"], cond["reason"], cond["message"]) == (
            "True",
            "PreemptionByScheduler",
            "custom-scheduler: preempting to accommodate a higher priority pod",
        )
    assert not pods["low-3"]["metadata"].get("deletionTimestamp")
    assert condition(pods["low-3"], "DisruptionTarget") is None
    assert not pods["vip"]["spec"].get("nodeName")  # still waiting for its victims

    preempted = cluster.wait_for(
        lambda: (evs := env.events("Preempted")) and len(evs) >= 2 and evs,
        timeout=15,
        what="Preempted events",
    )
    assert sorted(e["regarding"]["name"] for e in preempted) == ["low-1", "low-2"]
    for e in preempted:
        assert e["type"] == "Normal"
        assert e["action"] == "Preempting"
        assert e["note"] == f"Preempted by pod {vip['metadata']['uid']} on node {node}"

    failed = cluster.wait_for(
        lambda: env.events("FailedScheduling", about="vip"),
        timeout=15,
        what="FailedScheduling for vip",
    )
    assert "Insufficient cpu" in failed[0]["note"]

    finish_victims_until_bound(env, release, ["low-1", "low-2"], "vip", node)
    remaining = env.pods()
    assert sorted(remaining) == ["low-3", "vip"]
    assert remaining["low-3"]["spec"]["nodeName"] == node
    assert app.cache.check_invariants() == []


def test_pdb_protected_node_is_avoided(env: Env, priority_class: PriorityClasses, release: Callable[..., None]) -> None:
    """Two full nodes: evicting the priority-1 pod would break a PDB with disruptionsAllowed 0, so
    the priority-5 pod on the other node is preempted instead, although its priority is higher."""
    group = uuid.uuid4().hex[:8]
    guarded = env.nodes(make_node("guarded").capacity(cpu="1", memory="8Gi", pods="110").label("pool", group))
    free = env.nodes(make_node("free").capacity(cpu="1", memory="8Gi", pods="110").label("pool", group))
    guarded_name, free_name = guarded["metadata"]["name"], free["metadata"]["name"]

    pdb_path = f"/apis/policy/v1/namespaces/{env.namespace}/poddisruptionbudgets"
    env.kube.post(
        pdb_path,
        {
            "apiVersion": "policy/v1",
            "kind": "PodDisruptionBudget",
            "metadata": {"name": "db"},
            "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": f"db-{group}"}}},
        },
    )
    # The real disruption controller publishes the budget's status: minAvailable 1 and at most one
    # healthy pod (kwok makes the db pod Ready) leave disruptionsAllowed at 0.
    cluster.wait_for(
        lambda: env.kube.get(f"{pdb_path}/db").get("status", {}).get("observedGeneration"),
        timeout=15,
        what="the disruption controller to report on the PDB",
    )
    app = env.start_scheduler()
    cluster.wait_for(
        lambda: any(b.name == "db" and b.namespace == env.namespace for b in app.pdbs.list()),
        timeout=15,
        what="PDB in the scheduler's informer",
    )

    env.create_pod(
        with_class(
            make_pod("db")
            .req(cpu="1")
            .label("app", f"db-{group}")
            .node_selector(**{"kubernetes.io/hostname": guarded_name}),
            priority_class(1),
        )
    )
    env.create_pod(
        held(
            with_class(
                make_pod("batch").req(cpu="1").node_selector(**{"kubernetes.io/hostname": free_name}),
                priority_class(5),
            )
        )
    )
    env.wait_bound("db", "batch")

    env.create_pod(with_class(make_pod("vip").req(cpu="1").node_selector(pool=group), priority_class(100)))
    nominated = cluster.wait_for(
        lambda: env.pod("vip")["status"].get("nominatedNodeName"),
        timeout=30,
        what="vip nominated",
    )
    assert nominated == free_name
    pods = env.pods()
    assert pods["batch"]["metadata"].get("deletionTimestamp")
    assert condition(pods["batch"], "DisruptionTarget") is not None
    assert not pods["db"]["metadata"].get("deletionTimestamp")

    finish_victims_until_bound(env, release, ["batch"], "vip", free_name)
    assert sorted(env.pods()) == ["db", "vip"]


def test_preemption_policy_never_evicts_nothing(env: Env, priority_class: PriorityClasses) -> None:
    """A high-priority pod whose class says ``preemptionPolicy: Never`` waits; nobody is evicted."""
    node = env.node(make_node("full").capacity(cpu="1", memory="8Gi", pods="110"))
    env.start_scheduler()
    on_node = {"kubernetes.io/hostname": node}
    env.create_pod(with_class(make_pod("low").req(cpu="1").node_selector(**on_node), priority_class(1)))
    env.wait_bound("low")

    polite = env.create_pod(
        with_class(make_pod("polite").req(cpu="1").node_selector(**on_node), priority_class(100, never=True))
    )
    assert polite["spec"]["preemptionPolicy"] == "Never"
    failed = cluster.wait_for(
        lambda: env.events("FailedScheduling", about="polite"),
        timeout=30,
        what="FailedScheduling for polite",
    )
    assert "preemption: not eligible due to preemptionPolicy=Never." in failed[0]["note"]
    pods = env.pods()
    assert not pods["low"]["metadata"].get("deletionTimestamp")
    assert condition(pods["low"], "DisruptionTarget") is None
    assert not pods["polite"]["status"].get("nominatedNodeName")
    assert env.events("Preempted") == []
