"""A starving gang gets a reservation and starts, on kwok nodes (issue #28 item 3).

Three kwok nodes of 8 GPUs each are kept busy by a steady stream of 1-GPU pods that declare a
6-second runtime (``custom-scheduler.io/expected-runtime``) and complete after 6 seconds (kwok's
pod-complete stage). A gang of two 8-GPU members (16 GPUs) cannot fit while the stream refills
every GPU the moment it frees. With GangScheduling's reservation threshold at 5 s, proven here:

- the gang gets a reservation (a ``Reserved`` Event on its PodGroup, the gauge at 1) on two nodes;
- the stream keeps running on the unreserved node, and a stream pod lands on a reserved node only
  when its declared end comes before the gang's expected start (backfill);
- the gang starts within about one stream-pod runtime after the threshold;
- then the reservation ends (the gauge back to 0).

And with ``activeDeadlineSeconds`` as the only declaration: a pod whose deadline ends before the
gang's expected start backfills into the reserved room, one whose deadline is too long does not.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from datetime import datetime
from typing import Any

import pytest

from custom_scheduler.api import podgroup as gang
from custom_scheduler.devenv import cluster, kwok
from custom_scheduler.framework.reservations import RUNTIME_ANNOTATION, Reservation
from custom_scheduler.kube.client import KubeClient
from custom_scheduler.server.metrics import Metrics
from tests.builders import make_node, make_pod, make_pod_group
from tests.integration.conftest import GANG_CONFIG
from tests.integration.env import Env

GPU = "nvidia.com/gpu"
RUNTIME = 6.0
THRESHOLD = 5.0
CONFIG = GANG_CONFIG + (
    f"  pluginConfig:\n  - name: GangScheduling\n    args: {{reservation: {{threshold: {THRESHOLD:.0f}s}}}}\n"
)


@pytest.fixture
def gpu_nodes(kwok_proc: kwok.Kwok, kube: KubeClient) -> Iterator[tuple[str, list[str]]]:
    """Three kwok nodes of 8 GPUs labelled ``pool=<a unique value>``; (that value, their names)."""
    pool = f"gpu-{uuid.uuid4().hex[:6]}"
    names = [f"{pool}-{i}" for i in range(3)]
    for name in names:
        b = make_node(name).capacity_named({GPU: "8", "cpu": "64", "memory": "256Gi", "pods": "110"})
        kwok.create_node(kube, b.label("pool", pool).obj())
    yield pool, names
    for name in names:
        kwok.delete_node(kube, name)


def stream_job(pool: str, parallelism: int) -> dict[str, Any]:
    """The stream: one Job running ``parallelism`` 1-GPU pods at a time, each completing after
    ``RUNTIME`` (kwok's pod-complete stage acts on Job pods with its annotation), replaced by the
    Job controller as it completes."""
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "s"},
        "spec": {
            "completions": 100_000,
            "parallelism": parallelism,
            "backoffLimit": 0,
            "template": {
                "metadata": {
                    "annotations": {
                        kwok.COMPLETE_AFTER_ANNOTATION: f"{RUNTIME:.0f}s",
                        RUNTIME_ANNOTATION: f"{RUNTIME:.0f}s",
                    }
                },
                "spec": {
                    "schedulerName": "custom-scheduler",
                    "restartPolicy": "Never",
                    "nodeSelector": {"pool": pool},
                    "containers": [
                        {
                            "name": "work",
                            "image": "registry.k8s.io/pause:3.10",
                            "resources": {"requests": {GPU: "1"}, "limits": {GPU: "1"}},
                        }
                    ],
                },
            },
        },
    }


def running(env: Env, prefix: str) -> dict[str, str]:
    """Pod name -> node of the pods whose name starts with ``prefix``, bound and not finished."""
    out = {}
    for name, p in env.pods().items():
        done = p["status"].get("phase") in ("Succeeded", "Failed")
        if name.startswith(prefix) and p["spec"].get("nodeName") and not done:
            out[name] = p["spec"]["nodeName"]
    return out


def bound_after(env: Env, prefix: str, t: float) -> int:
    """How many pods whose name starts with ``prefix`` were scheduled after ``t``."""
    return sum(1 for name, p in env.pods().items() if name.startswith(prefix) and _between(p, t, 1e12))


def _seconds(rfc3339: str) -> float:
    return datetime.fromisoformat(rfc3339.replace("Z", "+00:00")).timestamp()


def _scheduled_at(pod: dict[str, Any]) -> float | None:
    for c in (pod.get("status") or {}).get("conditions") or []:
        if c.get("type") == "PodScheduled" and c.get("status") == "True":
            return _seconds(c["lastTransitionTime"])
    return None


def _wait_gang(env: Env) -> dict[str, str]:
    got: dict[str, str] = cluster.wait_for(
        lambda: (p := env.placements()) and p.get("g-0") and p.get("g-1") and p,
        timeout=THRESHOLD + 4 * RUNTIME + 10,
        interval=0.1,
        what="the gang bound",
    )
    return got


def _between(pod: dict[str, Any], lo: float, hi: float) -> bool:
    at = _scheduled_at(pod)
    return at is not None and lo < at < hi


def _notes(env: Env, reason: str) -> list[str]:
    return [
        str(e.get("note") or "")
        for e in env.events(reason, about="g")
        if (e.get("regarding") or {}).get("kind") == "PodGroup"
    ]


def test_a_starving_gang_reserves_and_starts_within_a_runtime_after_the_threshold(
    env: Env, gpu_nodes: tuple[str, list[str]]
) -> None:
    pool, nodes = gpu_nodes
    metrics = Metrics(process_collectors=False)
    app = env.start_scheduler(CONFIG, metrics=metrics)

    def gauge() -> float | None:
        return metrics.sample("custom_scheduler_gang_reservations", {"profile": "custom-scheduler"})

    def reservation() -> Reservation | None:
        return app.gangs.reservations.get(f"{gang.NATIVE}:{env.namespace}/g")

    env.kube.post(f"/apis/batch/v1/namespaces/{env.namespace}/jobs", stream_job(pool, parallelism=30))
    # Every GPU busy before the gang comes.
    cluster.wait_for(lambda: len(running(env, "s-")) >= 24, timeout=60, what="the stream to fill 24 GPUs")
    env.kube.post(
        f"/apis/{gang.NATIVE_GROUP_VERSION}/namespaces/{env.namespace}/podgroups",
        make_pod_group("g", env.namespace, min_count=2).obj(),
    )
    created = time.time()
    for i in range(2):
        member = make_pod(f"g-{i}").req_named({GPU: "8"}).node_selector(pool=pool)
        env.create_pod(member.scheduling_group("g").obj())
    r: Reservation = cluster.wait_for(reservation, timeout=30, interval=0.05, what="the gang's reservation")
    reserved_at = time.time()
    assert gauge() == 1.0
    assert len(r.amounts) == 2
    assert all(a[GPU] == 8 for a in r.amounts.values())
    bound = cluster.wait_for(
        lambda: (p := running(env, "g-")) and len(p) == 2 and p,
        timeout=THRESHOLD + 4 * RUNTIME + 10,
        interval=0.1,
        what="the gang bound",
    )
    started = time.time()
    # The stream keeps running: some of its pods are scheduled after the gang.
    cluster.wait_for(lambda: bound_after(env, "s-", started) > 2, timeout=30, what="the stream to go on")
    assert set(bound.values()) == set(r.amounts)
    wait = started - created
    print(f"gang: reserved {reserved_at - created:.1f}s after creation, bound {wait:.1f}s after creation")
    assert reserved_at - created >= THRESHOLD - 0.5
    # Within about one stream-pod runtime after the threshold (plus the cycles' and API's overheads).
    assert wait <= THRESHOLD + 2 * RUNTIME + 3, wait
    notes = _notes(env, "Reserved")
    assert any("reserved nvidia.com/gpu=16" in n for n in notes), notes
    # Backfill only where runtimes allow: a stream pod placed on a reserved node while the
    # reservation held was due to end (by its declared runtime) before the gang's expected start.
    pods = env.pods()
    for name, pod in pods.items():
        at = _scheduled_at(pod)
        on_reserved = name.startswith("s-") and pod["spec"].get("nodeName") in r.amounts
        if on_reserved and at is not None and r.created + 1 < at < started - 1:
            assert at + RUNTIME <= r.expected_start + 1, (name, at, r.expected_start)
    # Stream pods did run on the unreserved node while the reservation held (condition times are
    # whole seconds: a second of slack on each side).
    other = set(nodes) - set(r.amounts)
    assert any(p["spec"].get("nodeName") in other and _between(p, r.created - 1, started + 1) for p in pods.values())
    cluster.wait_for(lambda: gauge() == 0.0, timeout=10, what="the gauge back to 0")
    # This test's reservation ended (the session's cluster may hold other tests' PodGroups).
    assert not [r.group for r in app.gangs.reservations.all() if f":{env.namespace}/" in r.group]


def _gpu_pod(name: str, pool: str, **spec: Any) -> dict[str, Any]:
    """A 1-GPU pod pinned to ``pool``'s nodes, with ``spec``'s extra fields."""
    obj = make_pod(name).req_named({GPU: "1"}).node_selector(pool=pool).obj()
    obj["spec"].update(spec)
    return obj


def test_active_deadline_alone_declares_the_runtime_for_backfill(env: Env, kwok_proc: kwok.Kwok) -> None:
    """One kwok node of 8 GPUs, half busy with pods that declare 40 s (and never end); a gang member
    needing all 8 reserves the node after the threshold, expecting to start when they end. Into
    the 4 free but reserved GPUs: a pod declaring only ``activeDeadlineSeconds: 10`` backfills (it
    is gone before the gang's expected start); one declaring ``activeDeadlineSeconds: 600`` does
    not, and its reason says how a pod may backfill."""
    pool = f"ads-{uuid.uuid4().hex[:6]}"
    node = f"{pool}-0"
    b = make_node(node).capacity_named({GPU: "8", "cpu": "64", "memory": "256Gi", "pods": "110"})
    kwok.create_node(env.kube, b.label("pool", pool).obj())
    try:
        app = env.start_scheduler(CONFIG)
        for i in range(4):
            busy = _gpu_pod(f"busy-{i}", pool)
            busy["metadata"]["annotations"] = {RUNTIME_ANNOTATION: "40s"}
            env.create_pod(busy)
        env.wait_bound(*(f"busy-{i}" for i in range(4)), timeout=30)
        env.kube.post(
            f"/apis/{gang.NATIVE_GROUP_VERSION}/namespaces/{env.namespace}/podgroups",
            make_pod_group("g", env.namespace, min_count=1).obj(),
        )
        env.create_pod(make_pod("g-0").req_named({GPU: "8"}).node_selector(pool=pool).scheduling_group("g").obj())
        key = f"{gang.NATIVE}:{env.namespace}/g"
        r: Reservation = cluster.wait_for(
            lambda: app.gangs.reservations.get(key), timeout=30, interval=0.05, what="the gang's reservation"
        )
        assert set(r.amounts) == {node}
        assert r.expected_start - time.time() > 15, "the gang expects to start when the 40 s pods end"

        env.create_pod(_gpu_pod("too-long", pool, activeDeadlineSeconds=600))
        env.create_pod(_gpu_pod("fits", pool, activeDeadlineSeconds=10))
        assert env.wait_bound("fits", timeout=30)["fits"] == node
        msgs = cluster.wait_for(lambda: env.failed_scheduling("too-long"), timeout=30, what="too-long rejected")
        assert any("reserved for pod group" in m and "activeDeadlineSeconds" in m for m in msgs), msgs
        assert not env.placements()["too-long"]
        assert app.gangs.reservations.get(key) is r, "the reservation still held when too-long was refused"
    finally:
        kwok.delete_node(env.kube, node)
