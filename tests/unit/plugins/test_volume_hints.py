"""Storage events -> which pods each volume plugin's hints retry, and the storage structs parsed from JSON."""

from __future__ import annotations

from typing import Any

import pytest

from custom_scheduler.api import storage
from custom_scheduler.api.model import Pod
from custom_scheduler.framework import cluster_events as ce
from custom_scheduler.framework import volumes as fv
from custom_scheduler.framework.requeue import RequeueRules
from custom_scheduler.plugins.volume_hints import BINDING, LIMITS, RESTRICTIONS, ZONE, registrations
from custom_scheduler.plugins.volume_restrictions import is_volume_conflict
from tests.builders import csinode_obj, make_pod, make_pv, make_pvc, storage_class_obj

RULES = RequeueRules(
    {name: tuple(registrations(name, is_volume_conflict)) for name in (BINDING, RESTRICTIONS, ZONE, LIMITS)}
)
ANY_POD = make_pod("p", "ns").pvc("data").build()


def helped(kind: str, old: Any, new: Any, pod: Pod = ANY_POD) -> set[str]:
    """The volume plugins whose rejection of ``pod`` this store change may lift."""
    event = ce.store_event(kind, old, new)
    assert event is not None
    return {
        name for name in (BINDING, RESTRICTIONS, ZONE, LIMITS) if RULES.worth_requeuing(pod, {name}, event, old, new)
    }


def test_pvc_add_concerns_the_pods_using_it() -> None:
    claim = make_pvc("data", "ns").build()
    assert ce.store_event(fv.PVC, None, claim) == ce.ClusterEvent(ce.Resource.PERSISTENT_VOLUME_CLAIM, ce.Action.ADD)
    assert helped(fv.PVC, None, claim) == {BINDING, ZONE, RESTRICTIONS, LIMITS}
    assert helped(fv.PVC, None, claim, make_pod("p", "other").pvc("data").build()) == set()
    assert helped(fv.PVC, None, claim, make_pod("p", "ns").pvc("else").build()) == set()


def test_pvc_update_and_pv_events() -> None:
    old, new = make_pvc("data", "ns").build(), make_pvc("data", "ns").bound_to("pv").build()
    assert helped(fv.PVC, old, new) == {BINDING, ZONE}
    pv = make_pv("pv").label("topology.kubernetes.io/zone", "a")
    assert helped(fv.PV, None, pv.build()) == {BINDING, ZONE}
    assert helped(fv.PV, pv.build(), pv.phase("Bound").build()) == {BINDING}
    assert helped(fv.PV, pv.build(), None) == set()


def test_class_csinode_and_capacity_hints() -> None:
    sc = storage.storage_class_from_json(storage_class_obj("s"))
    assert helped(fv.STORAGE_CLASS, None, sc) == {BINDING, ZONE}
    assert helped(fv.STORAGE_CLASS, sc, sc) == set()
    grown = storage.storage_class_from_json(storage_class_obj("s", allowed_zones=("z",)))
    assert helped(fv.STORAGE_CLASS, sc, grown) == {BINDING}
    two = storage.csinode_from_json(csinode_obj("n", {"d": 2}))
    three = storage.csinode_from_json(csinode_obj("n", {"d": 3}))
    assert helped(fv.CSI_NODE, two, three) == {LIMITS}
    assert helped(fv.CSI_NODE, three, two) == set()


DISK = {"name": "g", "gcePersistentDisk": {"pdName": "disk"}}
OTHER_DISK = {"name": "g", "gcePersistentDisk": {"pdName": "else"}}


@pytest.mark.parametrize(
    ("wants", "deleted", "queue"),
    [
        pytest.param(make_pod("w", "ns").volume(DISK), make_pod("h", "ns").volume(DISK), True, id="disk-conflict"),
        pytest.param(make_pod("w", "ns").volume(DISK), make_pod("h", "ns").volume(OTHER_DISK), False, id="other-disk"),
        pytest.param(make_pod("w", "ns").volume(DISK), make_pod("h", "x").volume(DISK), False, id="other-namespace"),
        pytest.param(make_pod("w", "ns").pvc("c"), make_pod("h", "ns").pvc("c"), True, id="same-claim"),
        pytest.param(make_pod("w", "ns").pvc("c"), make_pod("h", "ns").pvc("d"), False, id="other-claim"),
        pytest.param(make_pod("w", "ns").pvc("c"), make_pod("h", "x").pvc("c"), False, id="same-claim-other-namespace"),
        pytest.param(
            make_pod("w", "ns").pvc("c").volume(DISK),
            make_pod("h", "ns").pvc("d"),
            False,
            id="claim-and-disk-unrelated",
        ),
        pytest.param(
            make_pod("w", "ns").ephemeral_volume("t"), make_pod("h", "ns").ephemeral_volume("t"), False, id="ephemeral"
        ),
    ],
)
def test_assigned_pod_delete_helps_restrictions_on_a_disk_conflict_or_a_shared_claim(
    wants: Any, deleted: Any, queue: bool
) -> None:
    """Upstream's isSchedulableAfterAssignedPodDeleted. Claims and disks side by side: the hint
    used to index a claim's missing disk and fail (logged, and counted as Queue) for every pod
    with a claim."""
    (reg,) = [r for r in registrations(RESTRICTIONS, is_volume_conflict) if r.event == ce.ASSIGNED_POD_DELETE]
    assert reg.hint is not None
    got = reg.hint(wants.build(), deleted.node("n1").build(), None)
    assert got == (ce.Hint.QUEUE if queue else ce.Hint.SKIP)


def _va() -> storage.VolumeAttachment:
    doc = {
        "metadata": {"name": "va"},
        "spec": {"attacher": "d", "nodeName": "n", "source": {"persistentVolumeName": "pv"}},
        "status": {"attached": True},
    }
    return storage.volume_attachment_from_json(doc)


def test_volume_attachment_delete_retries_limits_for_pods_with_claims() -> None:
    va = _va()
    assert (va.attacher, va.node_name, va.pv_name) == ("d", "n", "pv")
    assert helped(fv.VOLUME_ATTACHMENT, None, va) == set()
    assert helped(fv.VOLUME_ATTACHMENT, va, va) == set()
    event = ce.store_event(fv.VOLUME_ATTACHMENT, va, None)
    assert event is not None
    assert event.label == "storage.k8s.io/VolumeAttachmentDelete"
    for pod, want in (
        (make_pod("p").pvc("c"), {LIMITS}),
        (make_pod("p").ephemeral_volume("tmp"), set()),  # upstream's hint tests persistentVolumeClaim only
        (make_pod("p").volume({"name": "cm", "configMap": {"name": "x"}}), set()),
    ):
        assert helped(fv.VOLUME_ATTACHMENT, va, None, pod.build()) == want


def test_storage_parsing() -> None:
    pv = make_pv("pv").storage_class("local").size("10Gi").on_node("n1").claim_ref("ns", "c", "u").build()
    assert (pv.capacity, pv.storage_class, pv.claim_ref) == (10 * 2**30, "local", storage.ClaimRef("ns", "c", "u"))
    assert storage.pv_matches_node(pv, {"kubernetes.io/hostname": "n1"})
    assert not storage.pv_matches_node(pv, {"kubernetes.io/hostname": "n2"})
    pvc = make_pvc("c").storage_class("local").size("1Gi").selected_node("n1").build()
    assert (pvc.request, pvc.class_name, pvc.selected_node, pvc.fully_bound) == (2**30, "local", "n1", False)
    assert make_pvc("c").bound_to("pv").build().fully_bound
    pod = (
        make_pod("p")
        .pvc("c")
        .ephemeral_volume("tmp")
        .volume({"name": "cm", "configMap": {"name": "x"}})
        .volume({"name": "g", "gcePersistentDisk": {"pdName": "disk"}})
        .build()
    )
    assert [(v.name, v.claim, v.ephemeral, v.disk) for v in pod.volumes] == [
        ("c", "c", False, ()),
        ("tmp", "p-tmp", True, ()),
        ("g", "", False, ("gce", "disk")),
    ]
