"""PodGroups of both APIs on the real kube-apiserver 1.37: informers into the GangStore (with the
CRD absent, then installed), and the status writer's condition and CRD status read back."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import yaml

from custom_scheduler.api import podgroup as gang
from custom_scheduler.core.informers import OptionalApiInformer, gang_informers
from custom_scheduler.framework.fence import Fence
from custom_scheduler.framework.gang_store import GangChange, GangStatusWriter, GangStore
from custom_scheduler.kube.client import KubeClient
from tests import kubectl as k
from tests.builders import make_crd_pod_group, make_pod, make_pod_group
from tests.integration.conftest import GANG_CONFIG
from tests.integration.env import Env

CRD_NAME = "podgroups.scheduling.x-k8s.io"


def _until(what: str, check: Callable[[], Any], timeout: float = 30.0) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        got = check()
        if got:
            return got
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.1)


def _groups(ns: str, api: str) -> str:
    gv = gang.NATIVE_GROUP_VERSION if api == "native" else gang.CRD_GROUP_VERSION
    return f"/apis/{gv}/namespaces/{ns}/podgroups"


@pytest.fixture
def informers(kube: KubeClient) -> Iterator[tuple[GangStore, list[OptionalApiInformer], list[GangChange]]]:
    store = GangStore()
    changes: list[GangChange] = []
    store.add_listener(changes.append)
    infs = gang_informers(kube, store, lambda resource: {}, retry=0.5)
    for inf in infs:
        inf.start()
    yield store, [i for i in infs if isinstance(i, OptionalApiInformer)], changes
    for inf in infs:
        inf.stop()


def test_native_and_crd_groups_reach_the_store(
    kube: KubeClient,
    namespace: str,
    informers: tuple[GangStore, list[OptionalApiInformer], list[GangChange]],
    crd: Callable[[], None],
) -> None:
    store, infs, changes = informers
    native_inf, crd_inf = infs
    # Both count as synced at once: the native API is served, the CRD is absent (and says so).
    _until("both informers synced", lambda: all(i.synced.is_set() for i in infs))
    assert crd_inf.absent
    assert not native_inf.absent

    kube.post(_groups(namespace, "native"), make_pod_group("train", namespace, min_count=4).topology("rack").obj())
    g = _until("the native group in the store", lambda: store.get(f"{namespace}/train", "native"))
    # schedulingConstraints reaches us: the test control plane enables the alpha gate
    # TopologyAwareWorkloadScheduling (off by default, when the server drops the field).
    assert (g.min_count, g.gang, g.topology_key, g.api) == (4, True, "rack", "native")
    assert GangChange("PodGroupAdd", "native", f"{namespace}/train") in changes

    # minCount is mutable: a lower one is an update that may release held members.
    obj = kube.get(f"{_groups(namespace, 'native')}/train")
    obj["spec"]["schedulingPolicy"]["gang"]["minCount"] = 2
    kube.put(f"{_groups(namespace, 'native')}/train", obj)
    _until("minCount 2", lambda: (got := store.get(f"{namespace}/train", "native")) and got.min_count == 2)
    assert GangChange("PodGroupUpdate", "native", f"{namespace}/train") in changes

    # The CRD arrives later: the informer notices on its next probe and lists it.
    crd()
    body = make_crd_pod_group("etl", namespace, min_member=3).timeout(90).min_resources(cpu="3").obj()
    kube.post(_groups(namespace, "crd"), body)
    c = _until("the CRD group in the store", lambda: store.get(f"{namespace}/etl", "crd"), timeout=60)
    assert (c.min_count, c.timeout, c.min_resources and c.min_resources.milli_cpu) == (3, 90.0, 3000)
    assert not getattr(crd_inf, "absent")  # noqa: B009 (re-read: the probe thread changed it)

    # (Native groups carry the podgroup-protection finalizer while pods reference them: the
    # delete is checked on the CRD group, which the watch reports at once.)
    kube.delete(f"{_groups(namespace, 'crd')}/etl")
    _until("the CRD group gone", lambda: store.get(f"{namespace}/etl", "crd") is None)


class _Writes:
    def __init__(self, client: KubeClient) -> None:
        self.client = client
        self.fence = Fence()


def test_status_writer_writes_the_native_condition_and_the_crd_status(
    kube: KubeClient, namespace: str, crd: Callable[[], None]
) -> None:
    crd()
    native = kube.post(_groups(namespace, "native"), make_pod_group("a", namespace, min_count=2).obj())
    custom = kube.post(_groups(namespace, "crd"), make_crd_pod_group("b", namespace, min_member=2).obj())
    store = GangStore()
    store.put(gang.native_from_json(native))
    store.put(gang.crd_from_json(custom))
    for name in ("m0", "m1"):
        pod = make_pod(name, namespace).pod_group_label("b").node("n1").phase("Running").build()
        store.member_added(pod)
    writer = GangStatusWriter(_Writes(kube), store)
    try:
        writer.group_rejected(store.get(f"{namespace}/a", "native") or pytest.fail("no group"), "0/3 nodes fit")
        writer.group_bound(store.get(f"{namespace}/b", "crd") or pytest.fail("no group"), "placed")
        assert writer.flush(10.0)
    finally:
        writer.close()
    assert [r.result for r in writer.results] == ["written", "written"], writer.results

    cond = kube.get(f"{_groups(namespace, 'native')}/a")["status"]["conditions"]
    assert [(c["type"], c["status"], c["reason"], c["message"]) for c in cond] == [
        ("PodGroupInitiallyScheduled", "False", "Unschedulable", "0/3 nodes fit")
    ]
    # The next success flips it to True; a later failure then writes nothing (never regresses).
    store.put(gang.native_from_json(kube.get(f"{_groups(namespace, 'native')}/a")))
    w2 = GangStatusWriter(_Writes(kube), store)
    assert w2.write("native", f"{namespace}/a", "scheduled", "all members placed").result == "written"
    store.put(gang.native_from_json(kube.get(f"{_groups(namespace, 'native')}/a")))
    assert w2.write("native", f"{namespace}/a", "unschedulable", "later").result == "skipped"
    (c,) = kube.get(f"{_groups(namespace, 'native')}/a")["status"]["conditions"]
    # observedGeneration is omitted when 0 (omitempty): compare as the API defaults it.
    want = ("True", "Scheduled", native["metadata"].get("generation", 0))
    assert (c["status"], c["reason"], c.get("observedGeneration", 0)) == want

    st = kube.get(f"{_groups(namespace, 'crd')}/b")["status"]
    assert st == {"phase": "Running", "scheduled": 2, "running": 2}


def test_optional_crd_manifest_is_accepted_by_the_api_server(control_plane: Any) -> None:
    """Server-side dry run of the optional CRD (the RBAC for both groups is in test_manifests)."""
    docs = yaml.safe_load_all(k.manifest("optional/podgroups.scheduling.x-k8s.io.yaml").read_text())
    out = k.apply_docs(control_plane, [d for d in docs if d], dry_run=True)
    assert f"customresourcedefinition.apiextensions.k8s.io/{CRD_NAME}" in out


def test_daemon_gates_members_until_the_group_and_its_quorum_exist(env: Env) -> None:
    """The daemon's wiring: PodGroup informers start with GangScheduling (the CRD absent does not
    keep it from syncing), members wait gated at PreEnqueue, and the PodGroup add and the member
    add that completes the quorum release them without any timer."""
    app = env.start_scheduler(GANG_CONFIG)
    assert app.ready
    assert {inf.name for inf in app.gang_informers} == {"podgroups", "podgroups.scheduling.x-k8s.io"}

    def gate(uid: str) -> str | None:
        qpi = app.queue.get(uid)
        return None if qpi is None else qpi.gating_plugin

    m0 = env.create_pod(make_pod("m0").scheduling_group("job").obj())
    uid0 = m0["metadata"]["uid"]
    _until("m0 gated by GangScheduling (no group)", lambda: gate(uid0) == "GangScheduling")

    env.kube.post(_groups(env.namespace, "native"), make_pod_group("job", env.namespace, min_count=2).obj())
    _until("the group in the daemon's store", lambda: app.gangs.get(f"{env.namespace}/job", "native"))
    assert gate(uid0) == "GangScheduling"  # re-checked on the PodGroup add: still too few members

    m1 = env.create_pod(make_pod("m1").scheduling_group("job").obj())
    uid1 = m1["metadata"]["uid"]
    _until(
        "both members past the barrier",
        lambda: gate(uid0) != "GangScheduling" and gate(uid1) != "GangScheduling",
    )
