"""Storage events → which unschedulable pods move, and the storage structs parsed from JSON."""

from __future__ import annotations

from custom_scheduler.api import storage
from custom_scheduler.core.volume_events import BINDING, LIMITS, RESTRICTIONS, ZONE, requeue_for
from custom_scheduler.framework import volumes as fv
from tests.builders import csinode_obj, make_pod, make_pv, make_pvc, storage_class_obj


def test_pvc_add_concerns_the_pods_using_it() -> None:
    rq = requeue_for(fv.PVC, None, make_pvc("data", "ns").build())
    assert rq is not None
    assert rq.event == "PersistentVolumeClaimAdd"
    assert rq.plugins == {BINDING, ZONE, RESTRICTIONS, LIMITS}
    assert rq.pre_check is not None
    assert rq.pre_check(make_pod("p", "ns").pvc("data").build())
    assert not rq.pre_check(make_pod("p", "other").pvc("data").build())
    assert not rq.pre_check(make_pod("p", "ns").pvc("else").build())


def test_pvc_update_and_pv_events() -> None:
    old, new = make_pvc("d").build(), make_pvc("d").bound_to("pv").build()
    rq = requeue_for(fv.PVC, old, new)
    assert rq is not None
    assert rq.plugins == {BINDING, ZONE}
    pv = make_pv("pv").label("topology.kubernetes.io/zone", "a")
    rq = requeue_for(fv.PV, None, pv.build())
    assert rq is not None
    assert rq.plugins == {BINDING, ZONE}
    assert rq.pre_check is None
    rq = requeue_for(fv.PV, pv.build(), pv.phase("Bound").build())
    assert rq is not None
    assert rq.plugins == {BINDING}
    assert requeue_for(fv.PV, pv.build(), None) is None


def test_class_csinode_and_capacity_hints() -> None:
    sc = storage.storage_class_from_json(storage_class_obj("s"))
    rq = requeue_for(fv.STORAGE_CLASS, None, sc)
    assert rq is not None
    assert rq.plugins == {BINDING, ZONE}
    assert requeue_for(fv.STORAGE_CLASS, sc, sc) is None
    grown = storage.storage_class_from_json(storage_class_obj("s", allowed_zones=("z",)))
    assert requeue_for(fv.STORAGE_CLASS, sc, grown) is not None
    two = storage.csinode_from_json(csinode_obj("n", {"d": 2}))
    three = storage.csinode_from_json(csinode_obj("n", {"d": 3}))
    rq = requeue_for(fv.CSI_NODE, two, three)
    assert rq is not None
    assert rq.plugins == {LIMITS}
    assert requeue_for(fv.CSI_NODE, three, two) is None


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
    assert requeue_for(fv.VOLUME_ATTACHMENT, None, va) is None
    assert requeue_for(fv.VOLUME_ATTACHMENT, va, va) is None
    rq = requeue_for(fv.VOLUME_ATTACHMENT, va, None)
    assert rq is not None
    assert rq.event == "VolumeAttachmentDelete"
    assert rq.plugins == {LIMITS}
    assert rq.pre_check is not None
    for pod, want in (
        (make_pod("p").pvc("c"), True),
        (make_pod("p").ephemeral_volume("tmp"), False),  # upstream's hint tests persistentVolumeClaim only
        (make_pod("p").volume({"name": "cm", "configMap": {"name": "x"}}), False),
    ):
        assert rq.pre_check(pod.build()) is want


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
