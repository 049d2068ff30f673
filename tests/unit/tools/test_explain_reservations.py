"""explain reads the reservations written on PodGroups (issue #28, item 3): a pod kept off reserved
capacity gets the daemon's reason, a member of the reserving gang is told what its gang holds,
from a live cluster's objects or a snapshot file alike, for both PodGroup APIs."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from custom_scheduler import config
from custom_scheduler.framework import reservation_annotation as ra
from custom_scheduler.framework import reservations as rv
from custom_scheduler.framework.registry import Registry
from custom_scheduler.plugins import gang_reservations as gr
from custom_scheduler.tools import snapshot
from custom_scheduler.tools.explain import explain_pod, format_explanation
from custom_scheduler.tools.explain_context import explain_member
from tests.builders import make_node, make_pod
from tests.unit.tools.test_simulate_gangs import APIS, GANG_CONFIG_TEXT, group, member

GPU = "nvidia.com/gpu"


@pytest.fixture(scope="module")
def gang_config(registry: Registry) -> config.SchedulerConfig:
    return config.load_config(GANG_CONFIG_TEXT, registry)


def _reservation(api: str, expires_in: float) -> rv.Reservation:
    now = float(int(time.time()))
    key = f"{'native' if api == 'native' else 'crd'}:default/g"
    return rv.Reservation(
        key, "custom-scheduler", "the whole cluster", {"n1": {GPU: 8, "pods": 1}}, now + 40, now, now + expires_in
    )


def _state(api: str, r: rv.Reservation) -> snapshot.ClusterState:
    """n1 with 8 GPUs, half of them busy (pods that declare no runtime); the gang g (one 8-GPU
    member, pending) holds ``r`` on n1."""
    busy = [make_pod(f"busy-{i}").req_named({GPU: "1"}).node("n1") for i in range(4)]
    pg = group(api, "g", 1).set("metadata.annotations", {ra.ANNOTATION: ra.encode(r, "sched-a_1")})
    return snapshot.ClusterState(
        nodes=[make_node("n1").capacity_named({GPU: "8", "cpu": "64", "memory": "64Gi", "pods": "110"}).obj()],
        pods=[p.obj() for p in busy] + [member(api, "g-0", "g").req_named({GPU: "8"}).obj()],
        pod_groups=[pg.obj()],
        source="test",
    )


def _via_snapshot_file(state: snapshot.ClusterState, tmp_path: Path) -> snapshot.ClusterState:
    path = tmp_path / "snap.yaml"
    path.write_text(snapshot.dump_yaml(snapshot.snapshot_document(state)))
    return snapshot.load_cluster(str(path))


@pytest.mark.parametrize("api", APIS)
@pytest.mark.parametrize("from_file", [False, True], ids=["cluster", "snapshot-file"])
def test_a_pod_kept_off_reserved_capacity_is_told_which_gang_and_until_when(
    api: str, from_file: bool, gang_config: config.SchedulerConfig, registry: Registry, tmp_path: Path
) -> None:
    r = _reservation(api, 600)
    state = _state(api, r)
    me = state.find_pod("default", "g-0") or {}
    if from_file:  # a snapshot holds the bound pods: the member is explained from its own file
        state = _via_snapshot_file(state, tmp_path)
    short = make_pod("short").req_named({GPU: "1"}).obj()
    ex = explain_pod(state, short, gang_config, registry, seed=1)
    assert ex.node is None
    assert gr.reason(r, rv.RUNTIME_ANNOTATION) in ex.message, "the daemon's FailedScheduling reason"
    assert "node capacity reserved for pod group default/g until" in " ".join(format_explanation(ex, "table").split())
    # One that declares a runtime ending before the gang's expected start backfills.
    backfill = make_pod("backfill").req_named({GPU: "1"}).obj()
    backfill["metadata"]["annotations"] = {rv.RUNTIME_ANNOTATION: "10s"}
    assert explain_pod(state, backfill, gang_config, registry, seed=1).node == "n1"

    ex = explain_member(state, me, gang_config, registry, seed=1)
    res = ex.to_dict()["gang"]["reservation"]
    assert res["nodes"] == {"n1": {GPU: "8", "pods": "1"}}
    assert res["holder"] == "sched-a_1"
    assert res["expires"] == ra.rfc3339(r.expires)
    assert res["expired"] is False
    text = " ".join(format_explanation(ex, "table").split())
    until = ra.rfc3339(r.expires)
    assert f"Pod group default/g holds a reservation (written by sched-a_1) in the whole cluster until {until}" in text
    assert f"n1: {GPU}=8, pods=1" in text


@pytest.mark.parametrize("api", APIS)
def test_an_expired_reservation_holds_nothing(
    api: str, gang_config: config.SchedulerConfig, registry: Registry
) -> None:
    r = _reservation(api, -1)
    state = _state(api, r)
    assert explain_pod(state, make_pod("short").req_named({GPU: "1"}).obj(), gang_config, registry, seed=1).node == "n1"
    ex = explain_pod(state, state.find_pod("default", "g-0") or {}, gang_config, registry, seed=1)
    assert ex.gang is not None
    assert ex.gang.reservation is not None
    assert ex.gang.reservation["expired"] is True
    assert any("expired at" in n and "holds nothing now" in n for n in ex.notes)


def test_a_malformed_annotation_is_ignored(gang_config: config.SchedulerConfig, registry: Registry) -> None:
    state = _state("native", _reservation("native", 600))
    state.pod_groups[0]["metadata"]["annotations"][ra.ANNOTATION] = "{not json"
    assert explain_pod(state, make_pod("short").req_named({GPU: "1"}).obj(), gang_config, registry, seed=1).node == "n1"
    ex = explain_pod(state, state.find_pod("default", "g-0") or {}, gang_config, registry, seed=1)
    assert ex.gang is not None
    assert ex.gang.reservation is None
