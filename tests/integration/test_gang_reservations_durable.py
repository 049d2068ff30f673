"""A gang's reservation is written on its PodGroup and outlives the daemon (issue #28, item 3).

One kwok node of 8 GPUs, half of it busy with pods that declare a 60 s runtime (and never end by
themselves); a gang of one 8-GPU member reserves the node after a 1 s threshold, expecting to start
in about 60 s. Proven on the real API server, for both PodGroup APIs:

- the reservation appears on the PodGroup as the ``custom-scheduler.io/reservation`` annotation;
- after the daemon is stopped and a new one started (with a threshold of an hour, so it cannot
  have reserved again by itself), the new one has the reservation in its book and keeps a pod
  without a declared runtime off the free but reserved GPUs, with the reason the daemon gives,
  while a pod declaring 10 s still backfills;
- ``explain`` (the CLI, against the live cluster) gives the kept-off pod that reason and tells the
  gang's member which capacity its gang holds;
- once the busy pods (and the backfilled one) are gone the gang is placed and the annotation removed.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from custom_scheduler.api import podgroup as gang
from custom_scheduler.devenv import cluster
from custom_scheduler.framework import reservation_annotation as ra
from custom_scheduler.framework.reservations import RUNTIME_ANNOTATION
from custom_scheduler.plugins import gang_reservations as gr
from tests.builders import make_crd_pod_group, make_node, make_pod, make_pod_group
from tests.integration.conftest import GANG_CONFIG
from tests.integration.env import Env
from tests.integration.test_explain_simulate import _run

GPU = "nvidia.com/gpu"
CONFIG = GANG_CONFIG + "  pluginConfig:\n  - name: GangScheduling\n    args: {reservation: {threshold: 1s}}\n"
#: The restarted daemon would not reserve for an hour: a reservation it has is the one it read back.
RESTARTED = CONFIG.replace("threshold: 1s", "threshold: 1h")
APIS = [pytest.param(gang.NATIVE, id="native-podgroup"), pytest.param(gang.CRD, id="scheduler-plugins-crd")]


def _gpu_pod(name: str, pool: str, runtime: str | None = None) -> dict[str, Any]:
    """A 1-GPU pod pinned to ``pool``, declaring ``runtime`` (else nothing)."""
    obj = make_pod(name).req_named({GPU: "1"}).node_selector(pool=pool).obj()
    if runtime:
        obj["metadata"]["annotations"] = {RUNTIME_ANNOTATION: runtime}
    return obj


def _group_path(env: Env, api: str) -> str:
    version = gang.CRD_GROUP_VERSION if api == gang.CRD else gang.NATIVE_GROUP_VERSION
    return f"/apis/{version}/namespaces/{env.namespace}/podgroups"


def _annotation(env: Env, api: str) -> str | None:
    meta = env.kube.get(f"{_group_path(env, api)}/g").get("metadata") or {}
    value = (meta.get("annotations") or {}).get(ra.ANNOTATION)
    return value if isinstance(value, str) else None


@pytest.mark.parametrize("api", APIS)
def test_the_reservation_is_on_the_podgroup_and_a_restarted_daemon_honours_it(
    api: str, env: Env, crd: Callable[[], None], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    pool = f"res-{uuid.uuid4().hex[:6]}"
    node = env.node(
        make_node("gpu").capacity_named({GPU: "8", "cpu": "64", "memory": "256Gi", "pods": "110"}).label("pool", pool)
    )
    if api == gang.CRD:
        crd()
    first = env.start_scheduler(CONFIG)
    for i in range(4):
        env.create_pod(_gpu_pod(f"busy-{i}", pool, "60s"))
    env.wait_bound(*(f"busy-{i}" for i in range(4)))
    if api == gang.CRD:
        env.kube.post(_group_path(env, api), make_crd_pod_group("g", env.namespace, min_member=1).obj())
        m = make_pod("g-0").pod_group_label("g")
    else:
        env.kube.post(_group_path(env, api), make_pod_group("g", env.namespace, min_count=1).obj())
        m = make_pod("g-0").scheduling_group("g")
    env.create_pod(m.req_named({GPU: "8"}).node_selector(pool=pool).obj())

    # Written on the PodGroup.
    raw: str = cluster.wait_for(lambda: _annotation(env, api), timeout=20, interval=0.1, what="the annotation")
    rec = ra.decode(raw)
    assert isinstance(rec, ra.Record), rec
    assert rec.amounts == {node: {GPU: 8, "pods": 1}}
    key = f"{api}:{env.namespace}/g"
    held = first.gangs.reservations.get(key)
    assert held is not None
    assert rec.expires == int(held.expires)
    assert 40 < rec.expected_start - rec.created <= 61, "the gang expects to start when the 60 s pods end"

    # A new daemon: the reservation comes back from the annotation and is honoured.
    first.stop()
    second = env.start_scheduler(RESTARTED)
    env.create_pod(_gpu_pod("short", pool))
    env.create_pod(_gpu_pod("backfill", pool, "10s"))
    assert env.wait_bound("backfill")["backfill"] == node
    msgs = cluster.wait_for(lambda: env.failed_scheduling("short"), timeout=15, what="short kept off")
    back = second.gangs.reservations.get(key)
    assert back is not None
    assert (back.created, back.expires, dict(back.amounts)) == (rec.created, rec.expires, rec.amounts)
    why = gr.reason(back, RUNTIME_ANNOTATION)
    assert any(why in m for m in msgs), msgs
    assert not env.placements()["short"]

    # explain, against the live cluster, says the same.
    config_file = tmp_path / "config.yaml"
    config_file.write_text(CONFIG)
    kubeconfig = str(env.control_plane.kubeconfig())
    common = ("--kubeconfig", kubeconfig, "--config", str(config_file), "-o", "json")
    rc, out, _ = _run(capsys, "explain", f"{env.namespace}/short", *common)
    assert rc == 0
    assert why in json.loads(out)["result"]["message"]
    rc, out, _ = _run(capsys, "explain", f"{env.namespace}/g-0", *common)
    assert rc == 0
    res: dict[str, Any] = json.loads(out)["gang"]["reservation"]
    assert res["nodes"] == {node: {GPU: "8", "pods": "1"}}
    assert res["expired"] is False

    # The busy pods and the backfilled one end (kwok runs them until deleted): the gang is placed
    # and the annotation goes.
    for name in ("backfill", *(f"busy-{i}" for i in range(4))):
        env.delete_pod_now(name)
    assert env.wait_bound("g-0", timeout=20)["g-0"] == node
    cluster.wait_for(lambda: _annotation(env, api) is None, timeout=10, interval=0.1, what="the annotation removed")
