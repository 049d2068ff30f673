"""explain, simulate and snapshot with storage: PVs, PVCs and classes are read, written and
decide placements offline exactly as the volume plugins do in the daemon."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from custom_scheduler import config
from custom_scheduler.framework.registry import Registry
from custom_scheduler.plugins import volume_binding
from custom_scheduler.tools import snapshot
from custom_scheduler.tools.explain import explain_pod
from custom_scheduler.tools.simulate import simulate
from tests.builders import csinode_obj, make_node, make_pod, make_pv, make_pvc, storage_class_obj


def _state() -> snapshot.ClusterState:
    def pvc(name: str) -> dict[str, Any]:
        o = make_pvc(name).storage_class("local").obj()
        o["metadata"]["uid"] = f"uid-{name}"
        o["metadata"]["resourceVersion"] = "1"
        return o

    pv = make_pv("pv-a").storage_class("local").on_node("a").obj()
    pv["metadata"]["resourceVersion"] = "1"
    pv["status"] = {"phase": "Available"}
    return snapshot.ClusterState(
        nodes=[make_node("a").obj(), make_node("b").obj()],
        storage=[
            storage_class_obj("local"),
            pv,
            pvc("c1"),
            pvc("c2"),
            {**csinode_obj("a", {"x": 1}), "kind": "CSINode"},
        ],
        source="test",
    )


def test_explain_gives_each_nodes_volume_reason(default_config: config.SchedulerConfig, registry: Registry) -> None:
    ex = explain_pod(_state(), make_pod("p").pvc("c1").obj(), default_config, registry)
    assert ex.node == "a"
    (b,) = [v for v in ex.verdicts if v.name == "b"]
    assert (b.feasible, b.plugin, b.reasons) == (False, "VolumeBinding", [volume_binding.ERR_REASON_BIND_CONFLICT])


def test_simulate_never_gives_one_pv_to_two_pods(default_config: config.SchedulerConfig, registry: Registry) -> None:
    pods = [make_pod("p1").pvc("c1").obj(), make_pod("p2").pvc("c2").obj()]
    res = simulate(_state(), pods, default_config, registry, seed=1)
    by = {o.pod: o for o in res.outcomes}
    assert (by["default/p1"].result, by["default/p1"].node) == ("scheduled", "a")
    assert by["default/p2"].result == "unschedulable"
    assert "2 node(s) didn't find available persistent volumes to bind" in by["default/p2"].message


def test_snapshot_carries_storage_sections(tmp_path: Path) -> None:
    doc = snapshot.snapshot_document(_state())
    assert [o["metadata"]["name"] for o in doc["persistentVolumes"]] == ["pv-a"]
    assert [o["metadata"]["name"] for o in doc["persistentVolumeClaims"]] == ["c1", "c2"]
    assert [o["metadata"]["name"] for o in doc["storageClasses"]] == ["local"]
    assert [o["metadata"]["name"] for o in doc["csiNodes"]] == ["a"]
    path = tmp_path / "snap.yaml"
    path.write_text(yaml.safe_dump(doc))
    again = snapshot.load_cluster(str(path))
    assert sorted(o["kind"] for o in again.storage) == sorted(o["kind"] for o in _state().storage)
    assert again.volume_store().get_pv("pv-a") is not None


def test_explain_counts_volume_attachments(default_config: config.SchedulerConfig, registry: Registry) -> None:
    """A VolumeAttachment in the snapshot takes the only slot of node a's driver: explain sends
    a pod with another volume of that driver to b, and the snapshot file keeps the attachment."""

    def csi_pv(name: str) -> dict[str, Any]:
        o = make_pv(name).csi("d.csi", f"vol-{name}").claim_ref("default", f"c-{name}").obj()
        o["status"] = {"phase": "Bound"}
        return o

    def claim(pv: str) -> dict[str, Any]:
        o = make_pvc(f"c-{pv}").bound_to(pv).obj()
        o["metadata"]["uid"] = f"uid-{pv}"
        return o

    attachment = {
        "apiVersion": "storage.k8s.io/v1",
        "kind": "VolumeAttachment",
        "metadata": {"name": "va-old"},
        "spec": {"attacher": "d.csi", "nodeName": "a", "source": {"persistentVolumeName": "old"}},
    }
    state = snapshot.ClusterState(
        nodes=[make_node("a").obj(), make_node("b").obj()],
        storage=[
            csi_pv("old"),
            csi_pv("new"),
            claim("new"),
            {**csinode_obj("a", {"d.csi": 1}), "kind": "CSINode"},
            attachment,
        ],
        source="test",
    )
    ex = explain_pod(state, make_pod("p").pvc("c-new").obj(), default_config, registry)
    assert ex.node == "b"
    (a,) = [v for v in ex.verdicts if v.name == "a"]
    assert (a.feasible, a.plugin, a.reasons) == (False, "NodeVolumeLimits", ["node(s) exceed max volume count"])
    doc = snapshot.snapshot_document(state)
    assert [o["metadata"]["name"] for o in doc["volumeAttachments"]] == ["va-old"]
    assert [a.name for a in state.volume_store().volume_attachments_on("a")] == ["va-old"]
