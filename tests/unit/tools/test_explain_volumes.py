"""Which volume or claim keeps a pod off a node, table-driven; and through explain, on a cluster
state whose volume plugins reject the node, the same lines beside upstream's reason."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest

from custom_scheduler import config
from custom_scheduler.framework.registry import Registry
from custom_scheduler.framework.types import NodeInfo
from custom_scheduler.tools import snapshot
from custom_scheduler.tools.explain import explain_pod
from custom_scheduler.tools.explain_volumes import VolumeFacts, details
from tests.builders import make_node, make_pod, make_pv, make_pvc, storage_class_obj

ZONE = "topology.kubernetes.io/zone"
NODE = make_node("n1").label(ZONE, "a").capacity(cpu="4", memory="8Gi", pods="10")


@dataclass
class Case:
    name: str
    objects: list[dict[str, Any]]
    lines: list[str]


CASES = [
    Case("missing claim", [], ["volume vol: PVC default/data does not exist"]),
    Case(
        "bound to a missing volume",
        [make_pvc("data").bound_to("pv-gone").obj()],
        ["volume vol: PVC default/data is bound to PV pv-gone, which does not exist"],
    ),
    Case(
        "a local volume on another node",
        [make_pvc("data").bound_to("pv-1").obj(), make_pv("pv-1").on_node("n2").obj()],
        [
            "volume vol: PV pv-1 (PVC default/data) node affinity term 1: kubernetes.io/hostname In [n2]: "
            "node has kubernetes.io/hostname=n1"
        ],
    ),
    Case(
        "a volume in another zone",
        [make_pvc("data").bound_to("pv-1").obj(), make_pv("pv-1").label(ZONE, "b__c").obj()],
        [f"volume vol: PV pv-1 is in {ZONE}=b|c: node has {ZONE}=a"],
    ),
    Case(
        "unbound, Immediate",
        [make_pvc("data").storage_class("fast").obj(), storage_class_obj("fast", wffc=False)],
        [
            "volume vol: PVC default/data is unbound and StorageClass fast binds Immediately: "
            "the PV controller has not bound it yet"
        ],
    ),
    Case(
        "unbound, WaitForFirstConsumer",
        [make_pvc("data").storage_class("local").obj(), storage_class_obj("local")],
        [
            "volume vol: PVC default/data is unbound (StorageClass local binds on first use): "
            "neither a matching PV nor provisioning fits this node"
        ],
    ),
    Case(
        "unbound, missing class",
        [make_pvc("data").storage_class("nope").obj()],
        ["volume vol: PVC default/data is unbound; its StorageClass nope does not exist"],
    ),
    Case(
        "nothing against this node: the claim is still named",
        [make_pvc("data").bound_to("pv-1").obj(), make_pv("pv-1").label(ZONE, "a").obj()],
        ["volume vol: PVC default/data"],
    ),
]


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_volume_details(case: Case) -> None:
    pod = make_pod("p").pvc("data", volume="vol").build()
    assert details(pod, NodeInfo(NODE.build()), VolumeFacts.of(case.objects)) == case.lines


def test_explain_names_the_volume_beside_upstreams_reason(
    default_config: config.SchedulerConfig, registry: Registry
) -> None:
    """A pod whose claim is bound to a local PV on n2: n1 is rejected by VolumeBinding with
    upstream's words; the detail names the PV, the term and the label."""
    n1 = make_node("n1").label("kubernetes.io/hostname", "n1").capacity(cpu="4", memory="8Gi", pods="10")
    n2 = make_node("n2").label("kubernetes.io/hostname", "n2").capacity(cpu="4", memory="8Gi", pods="10")
    pv = make_pv("pv-1").on_node("n2").storage_class("local").claim_ref("default", "data").phase("Bound")
    state = snapshot.ClusterState(
        nodes=[n1.obj(), n2.obj()],
        storage=[make_pvc("data").storage_class("local").bound_to("pv-1").obj(), pv.obj(), storage_class_obj("local")],
        source="test",
    )
    ex = explain_pod(state, make_pod("p").pvc("data", volume="vol").obj(), default_config, registry)
    assert ex.node == "n2"
    [v1] = [v for v in ex.verdicts if v.name == "n1"]
    assert v1.plugin == "VolumeBinding"
    assert v1.reasons == ["node(s) didn't match PersistentVolume's node affinity"]
    assert v1.detail == [
        "volume vol: PV pv-1 (PVC default/data) node affinity term 1: kubernetes.io/hostname In [n2]: "
        "node has kubernetes.io/hostname=n1"
    ]
