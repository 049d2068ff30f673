"""VolumeRestrictions, VolumeZone and NodeVolumeLimits: upstream's reasons, on a VolumeStore."""

from __future__ import annotations

from typing import Any

import pytest

from custom_scheduler.api import storage
from custom_scheduler.api.model import Pod
from custom_scheduler.framework.types import SKIP, SUCCESS, CycleState, NodeInfo, Status
from custom_scheduler.plugins import node_volume_limits as nvl
from custom_scheduler.plugins import volume_restrictions as vr
from custom_scheduler.plugins import volume_zone as vz
from tests.builders import PodBuilder, PVBuilder, PVCBuilder, csinode_obj, make_node, make_pod, make_pv, make_pvc
from tests.builders import storage_class_obj as sc_obj
from tests.unit.plugins.support import node_info
from tests.unit.plugins.volume_support import csidriver_obj, handle_of, store_of, volume_attachment_obj

ZONE = "topology.kubernetes.io/zone"
BETA_ZONE = "failure-domain.beta.kubernetes.io/zone"


def run(plugin: Any, pod: Pod, ni: NodeInfo) -> Status:
    state = CycleState()
    st: Status = plugin.pre_filter(state, pod, [ni])
    if not st.is_success:
        return st
    result: Status = plugin.filter(state, pod, ni)
    return result.with_plugin("")


# -- VolumeRestrictions ---------------------------------------------------------------------------

DISK = Status.unschedulable(vr.ERR_REASON_DISK_CONFLICT)
RWOP = Status.unschedulable(vr.ERR_REASON_READ_WRITE_ONCE_POD_CONFLICT)


def disk(kind: str, ro: bool = False, **fields: Any) -> PodBuilder:
    return make_pod().volume({"name": "d", kind: {**fields, "readOnly": ro}})


@pytest.mark.parametrize(
    ("pod", "existing", "want"),
    [
        pytest.param(disk("gcePersistentDisk", pdName="x"), disk("gcePersistentDisk", pdName="x"), DISK, id="gce"),
        pytest.param(
            disk("gcePersistentDisk", True, pdName="x"),
            disk("gcePersistentDisk", True, pdName="x"),
            SUCCESS,
            id="gce-both-read-only",
        ),
        pytest.param(
            disk("gcePersistentDisk", pdName="x"), disk("gcePersistentDisk", pdName="y"), SUCCESS, id="gce-other"
        ),
        pytest.param(
            disk("awsElasticBlockStore", True, volumeID="v"),
            disk("awsElasticBlockStore", True, volumeID="v"),
            DISK,
            id="aws-even-read-only",
        ),
        pytest.param(disk("iscsi", iqn="q", lun=0), disk("iscsi", iqn="q", lun=1), DISK, id="iscsi-same-iqn"),
        pytest.param(
            disk("rbd", monitors=["m1", "m2"], pool="p", image="i"),
            disk("rbd", monitors=["m2"], pool="p", image="i"),
            DISK,
            id="rbd-overlapping-monitors",
        ),
        pytest.param(
            disk("rbd", monitors=["m1"], pool="p", image="i"),
            disk("rbd", monitors=["m3"], pool="p", image="i"),
            SUCCESS,
            id="rbd-other-monitors",
        ),
        pytest.param(
            disk("gcePersistentDisk", pdName="x"), disk("awsElasticBlockStore", volumeID="x"), SUCCESS, id="kinds"
        ),
    ],
)
def test_in_tree_disk_conflicts(pod: PodBuilder, existing: PodBuilder, want: Status) -> None:
    ni = node_info(make_node("n").build(), existing.node("n").build())
    pl = vr.VolumeRestrictions(None, handle_of(store_of(), [ni]))
    assert run(pl, pod.build(), ni) == want


def test_rwop_claim_in_use_anywhere_rejects_every_node() -> None:
    store = store_of(pvcs=[make_pvc("data").access("ReadWriteOncePod")])
    user = make_pod("user").pvc("data").node("n1").build()
    n1, n2 = node_info(make_node("n1").build(), user), node_info(make_node("n2").build())
    pl = vr.VolumeRestrictions(None, handle_of(store, [n1, n2]))
    pod = make_pod("second").pvc("data").build()
    assert run(pl, pod, n2) == RWOP
    # Preemption's dry run removes the user: the claim is free again.
    state = CycleState()
    assert pl.pre_filter(state, pod, [n1, n2]) == SUCCESS
    assert pl.remove_pod(state, pod, user, n1) == SUCCESS
    assert pl.filter(state, pod, n1) == SUCCESS


@pytest.mark.parametrize(
    ("pvcs", "pod", "want"),
    [
        pytest.param([], make_pod().build(), SKIP, id="no-volumes"),
        pytest.param([make_pvc("data")], make_pod().pvc("data").build(), SKIP, id="rwo-claim"),
        pytest.param(
            [make_pvc("data").access("ReadWriteOncePod")], make_pod().pvc("data").build(), SKIP, id="rwop-unused"
        ),
        pytest.param(
            [],
            make_pod().pvc("gone").build(),
            Status.unresolvable('persistentvolumeclaim "gone" not found'),
            id="missing",
        ),
    ],
)
def test_restrictions_pre_filter(pvcs: list[PVCBuilder], pod: Pod, want: Status) -> None:
    pl = vr.VolumeRestrictions(None, handle_of(store_of(pvcs=pvcs), [node_info(make_node("n").build())]))
    assert pl.pre_filter(CycleState(), pod, []) == want


def test_pvc_refs_follow_the_nodes_pods() -> None:
    p = make_pod("u").pvc("data").node("n").build()
    ni = node_info(make_node("n").build(), p)
    assert ni.pvc_refs == {"default/data": 1}
    assert ni.clone().pvc_refs == {"default/data": 1}
    ni.remove_pod(p)
    assert ni.pvc_refs == {}


# -- VolumeZone -----------------------------------------------------------------------------------

ZONE_CONFLICT = Status.unresolvable(vz.ERR_REASON_CONFLICT)


def zoned_store(pv: PVBuilder) -> Any:
    return store_of(
        pvs=[pv],
        pvcs=[make_pvc("c").bound_to(pv.build().name), make_pvc("later").storage_class("wffc")],
        classes=[sc_obj("wffc"), sc_obj("imm", wffc=False)],
    )


@pytest.mark.parametrize(
    ("pv", "node", "want"),
    [
        pytest.param(make_pv("pv").label(ZONE, "z1"), make_node().label(ZONE, "z1"), SUCCESS, id="same-zone"),
        pytest.param(make_pv("pv").label(ZONE, "z1"), make_node().label(ZONE, "z2"), ZONE_CONFLICT, id="other-zone"),
        pytest.param(make_pv("pv").label(ZONE, "z1__z2"), make_node().label(ZONE, "z2"), SUCCESS, id="multi-zone"),
        pytest.param(
            make_pv("pv").label(BETA_ZONE, "z1"), make_node().label(ZONE, "z1"), SUCCESS, id="beta-pv-ga-node"
        ),
        pytest.param(make_pv("pv").label(ZONE, "z1"), make_node(), SUCCESS, id="node-without-zones"),
        pytest.param(
            make_pv("pv").label(ZONE, "z1"),
            make_node().label("topology.kubernetes.io/region", "r"),
            ZONE_CONFLICT,
            id="node-with-region-only",
        ),
    ],
)
def test_volume_zone(pv: PVBuilder, node: Any, want: Status) -> None:
    pl = vz.VolumeZone(None, handle_of(zoned_store(pv)))
    assert run(pl, make_pod().pvc("c").build(), node_info(node.build())) == want


@pytest.mark.parametrize(
    ("pod", "pvcs", "want"),
    [
        pytest.param(make_pod().pvc("later"), [], SKIP, id="unbound-wffc-is-skipped"),
        pytest.param(
            make_pod().pvc("x"),
            [make_pvc("x").storage_class("imm")],
            Status.unresolvable("PersistentVolume had no name"),
            id="unbound-immediate",
        ),
        pytest.param(
            make_pod().pvc("x"),
            [make_pvc("x")],
            Status.unresolvable("PersistentVolumeClaim had no pv name and storageClass name"),
            id="no-class",
        ),
        pytest.param(
            make_pod().pvc("x"),
            [make_pvc("x").storage_class("nope")],
            Status.unresolvable('storageclass.storage.k8s.io "nope" not found'),
            id="missing-class",
        ),
        pytest.param(
            make_pod().pvc("x"),
            [make_pvc("x").bound_to("gone")],
            Status.unresolvable('persistentvolume "gone" not found'),
            id="missing-pv",
        ),
        pytest.param(
            make_pod().pvc("x"), [], Status.unresolvable('persistentvolumeclaim "x" not found'), id="missing-claim"
        ),
    ],
)
def test_volume_zone_pre_filter(pod: PodBuilder, pvcs: list[PVCBuilder], want: Status) -> None:
    store = zoned_store(make_pv("pv").label(ZONE, "z1"))
    for b in pvcs:
        store.put("PersistentVolumeClaim", b.build())
    assert vz.VolumeZone(None, handle_of(store)).pre_filter(CycleState(), pod.build(), []) == want


# -- NodeVolumeLimits -----------------------------------------------------------------------------

DRIVER = "ebs.csi.aws.com"
LIMIT = Status.unschedulable(nvl.ERR_REASON_MAX_VOLUME_COUNT_EXCEEDED)


def csi_world(n_claims: int, limit: int | None, *, csinode: bool = True) -> Any:
    pvs = [make_pv(f"pv{i}").csi(DRIVER, f"vol-{i}") for i in range(n_claims)]
    pvcs = [make_pvc(f"c{i}").bound_to(f"pv{i}") for i in range(n_claims)]
    pvcs.append(make_pvc("dyn").storage_class("csi"))
    return store_of(
        pvs=pvs,
        pvcs=pvcs,
        classes=[sc_obj("csi", DRIVER)],
        csinodes=[csinode_obj("n", {DRIVER: limit})] if csinode else [],
    )


def on_node(*claims: str) -> Pod:
    b = make_pod().node("n")
    for c in claims:
        b.pvc(c)
    return b.build()


@pytest.mark.parametrize(
    ("existing", "new", "limit", "want"),
    [
        pytest.param([("c0", "c1")], ("c2",), 2, LIMIT, id="third-volume-over-limit"),
        pytest.param([("c0",)], ("c2",), 2, SUCCESS, id="within-limit"),
        pytest.param([("c0", "c1")], ("c1",), 2, SUCCESS, id="shared-volume-counts-once"),
        pytest.param([("c0",), ("c1",)], ("dyn",), 2, LIMIT, id="unbound-claim-counts-by-provisioner"),
        pytest.param([("c0", "c1")], ("c2",), None, SUCCESS, id="driver-without-limit"),
    ],
)
def test_node_volume_limits(
    existing: list[tuple[str, ...]], new: tuple[str, ...], limit: int | None, want: Status
) -> None:
    store = csi_world(3, limit)
    ni = node_info(make_node("n").build(), *(on_node(*cs) for cs in existing))
    pod = make_pod("new")
    for c in new:
        pod.pvc(c)
    assert run(nvl.NodeVolumeLimits(None, handle_of(store)), pod.build(), ni) == want


def test_node_volume_limits_missing_claim_and_driver_not_installed() -> None:
    store = csi_world(1, 5, csinode=False)
    ni = node_info(make_node("n").build())
    pl = nvl.NodeVolumeLimits(None, handle_of(store))
    assert run(pl, make_pod().pvc("gone").build(), ni) == Status.unresolvable(
        'looking up PVC default/gone: persistentvolumeclaim "gone" not found'
    )
    assert run(pl, make_pod().pvc("c0").build(), ni) == SUCCESS  # no CSINode: no limits
    store.put("CSIDriver", storage.csidriver_from_json(csidriver_obj(DRIVER, required=True)))
    assert run(pl, make_pod().pvc("c0").build(), ni) == Status.unschedulable(
        f"{DRIVER} CSI driver is not installed on the node"
    )
    assert pl.pre_filter(CycleState(), make_pod().build(), []) == SKIP


def va(pv: str | None, node: str = "n", attacher: str = DRIVER) -> dict[str, Any]:
    return volume_attachment_obj(f"va-{pv}-{node}-{attacher}", pv, node, attacher)


@pytest.mark.parametrize(
    ("existing", "attachments", "new", "limit", "want"),
    [
        pytest.param([], [va("pv0")], ("c1",), 1, LIMIT, id="attached-without-pod-counts"),
        pytest.param([], [va("pv0")], ("c1",), 2, SUCCESS, id="attached-within-limit"),
        pytest.param([("c0",)], [va("pv0")], ("c1",), 2, SUCCESS, id="attached-and-used-by-pod-counts-once"),
        pytest.param([("c0",)], [va("pv1")], ("c2",), 2, LIMIT, id="pod-volume-plus-other-attached"),
        pytest.param([], [va("pv0", node="m")], ("c1",), 1, SUCCESS, id="other-nodes-attachment"),
        pytest.param([], [va("gone")], ("c1",), 1, SUCCESS, id="unknown-pv-not-counted"),
        pytest.param([], [va("plain")], ("c1",), 1, SUCCESS, id="non-csi-pv-not-counted"),
        pytest.param([], [va(None)], ("c1",), 1, SUCCESS, id="inline-spec-not-counted"),
        pytest.param([], [va("pv0", attacher="")], ("c1",), 1, SUCCESS, id="no-attacher-not-counted"),
        pytest.param([], [va("pv0", attacher="other.csi")], ("c1",), 1, SUCCESS, id="counts-under-its-attacher"),
        pytest.param([], [va("pv0")], ("dyn",), 1, LIMIT, id="unbound-claim-against-attached"),
        # Upstream dedups the new pod's volumes against the pods' only: a volume still attached,
        # with no pod using it, counts once as attached and once as new.
        pytest.param([], [va("pv0")], ("c0",), 1, LIMIT, id="new-pod-volume-attached-counts-twice"),
        pytest.param([], [va("pv0")], ("c0",), 2, SUCCESS, id="new-pod-volume-attached-within-limit"),
        pytest.param([], [va("pv0"), va("pv1")], ("c2",), None, SUCCESS, id="driver-without-limit"),
    ],
)
def test_node_volume_limits_volume_attachments(
    existing: list[tuple[str, ...]],
    attachments: list[dict[str, Any]],
    new: tuple[str, ...],
    limit: int | None,
    want: Status,
) -> None:
    store = csi_world(3, limit)
    store.put("PersistentVolume", make_pv("plain").build())
    for a in attachments:
        store.put("VolumeAttachment", storage.volume_attachment_from_json(a))
    ni = node_info(make_node("n").build(), *(on_node(*cs) for cs in existing))
    pod = make_pod("new")
    for c in new:
        pod.pvc(c)
    assert run(nvl.NodeVolumeLimits(None, handle_of(store)), pod.build(), ni) == want


def test_volume_attachment_index_follows_updates_and_deletes() -> None:
    store = store_of(attachments=[va("pv0")])
    assert [a.pv_name for a in store.volume_attachments_on("n")] == ["pv0"]
    moved = storage.volume_attachment_from_json({**va("pv0"), "spec": {**va("pv0")["spec"], "nodeName": "m"}})
    store.put("VolumeAttachment", moved)
    assert store.volume_attachments_on("n") == []
    assert store.volume_attachments_on("m") == [moved]
    store.delete("VolumeAttachment", moved)
    assert store.volume_attachments_on("m") == []
