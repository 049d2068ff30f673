"""explain's precise reasons and "what would make it fit", table-driven: a pod and a node in, the
particulars (which taint, which label, short by how much of what) and the smallest change out."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest

from custom_scheduler.framework.types import NodeInfo
from custom_scheduler.tools import explain_reasons as er
from tests.builders import NodeBuilder, PodBuilder, make_node, make_pod


def _ni(node: NodeBuilder, *pods: PodBuilder) -> NodeInfo:
    ni = NodeInfo(node.build())
    for p in pods:
        ni.add_pod(p.node(ni.name).build())
    return ni


NODE = make_node("n1").capacity(cpu="4", memory="8Gi", pods="10")
SSD = {"matchExpressions": [{"key": "disktype", "operator": "In", "values": ["ssd"]}]}
ZONE_B = {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["b"]}]}


@dataclass
class Case:
    name: str
    plugin: str
    pod: PodBuilder
    node: NodeBuilder
    running: list[PodBuilder] = field(default_factory=list)
    details: list[str] = field(default_factory=list)
    changes: list[str] = field(default_factory=list)
    unknown: list[str] = field(default_factory=list)


CASES = [
    Case(
        "cpu short by 1.5",
        "NodeResourcesFit",
        make_pod("p").req(cpu="3"),
        NODE,
        [make_pod("r").req(cpu="2500m")],
        ["cpu: requests 3, free 1.5 of 4"],
        ["free 1.5 cpu (cpu: requests 3, free 1.5 of 4)"],
    ),
    Case(
        "memory and an extended resource",
        "NodeResourcesFit",
        make_pod("p").req(memory="6Gi").req_named({"example.com/gpu": "2"}),
        make_node("n1").capacity(cpu="4", memory="8Gi", pods="10").capacity_named({"example.com/gpu": "1"}),
        [make_pod("r").req(memory="3Gi")],
        ["memory: requests 6Gi, free 5Gi of 8Gi", "example.com/gpu: requests 2, free 1 of 1"],
        [
            "free 1Gi memory (memory: requests 6Gi, free 5Gi of 8Gi)",
            "example.com/gpu: requests 2, more than the node's 1 in all (no eviction makes room)",
        ],
    ),
    Case(
        "too many pods",
        "NodeResourcesFit",
        make_pod("p"),
        make_node("n1").capacity(cpu="4", memory="8Gi", pods="1"),
        [make_pod("r")],
        ["pods: requests 1, free 0 of 1"],
        ["free 1 pods (pods: requests 1, free 0 of 1)"],
    ),
    Case(
        "which taint, not the tolerated one",
        "TaintToleration",
        make_pod("p").toleration("dedicated", "batch", "NoSchedule"),
        make_node("n1")
        .taint("dedicated", "batch")
        .taint("gpu", "", "NoExecute")
        .taint("soft", "x", "PreferNoSchedule"),
        [],
        ["untolerated taint gpu:NoExecute"],
        ["tolerate taint gpu:NoExecute"],
    ),
    Case(
        "nodeSelector label missing and different",
        "NodeAffinity",
        make_pod("p").node_selector(disktype="ssd", zone="a"),
        make_node("n1").label("zone", "b"),
        [],
        ["nodeSelector disktype=ssd: node has no label disktype", "nodeSelector zone=a: node has zone=b"],
        ["label disktype=ssd", "label zone=a"],
    ),
    Case(
        "the closest required term is proposed, the other recorded",
        "NodeAffinity",
        make_pod("p").required_node_affinity(
            {
                "matchExpressions": [
                    {"key": "disktype", "operator": "In", "values": ["ssd"]},
                    {"key": "arch", "operator": "Exists"},
                ]
            },
            ZONE_B,
        ),
        make_node("n1").label("zone", "a"),
        [],
        [
            "required term 2: zone In [b]: node has zone=a",
            "required term 1: disktype In [ssd]: node has no label disktype",
            "required term 1: arch Exists: node has no label arch",
        ],
        ["label zone=b"],
    ),
    Case(
        "NotIn asks for the label's removal",
        "NodeAffinity",
        make_pod("p").required_node_affinity(
            {"matchExpressions": [{"key": "tier", "operator": "NotIn", "values": ["spot"]}]}
        ),
        make_node("n1").label("tier", "spot"),
        [],
        ["required term 1: tier NotIn [spot]: node has tier=spot"],
        ["remove label tier (or set it outside ['spot'])"],
    ),
    Case(
        "cordoned",
        "NodeUnschedulable",
        make_pod("p"),
        make_node("n1").unschedulable(),
        [],
        ["node is cordoned (spec.unschedulable)"],
        ["uncordon the node"],
    ),
    Case(
        "which claim the volume plugin judged",
        "VolumeBinding",
        make_pod("p").pvc("data", volume="vol"),
        NODE,
        [],
        ["volume vol: PVC data"],
        [],
        ["VolumeBinding"],
    ),
    Case(
        "which host port, used by which pod",
        "NodePorts",
        make_pod("p").host_port(8080).host_port(53, "UDP", ip="10.0.0.1").host_port(9090),
        NODE,
        [
            make_pod("web").host_port(8080, ip="10.0.0.2"),
            make_pod("dns").host_port(53, "UDP"),
            make_pod("x").host_port(9090, "UDP"),
        ],
        ["hostPort 8080/TCP is used by default/web", "hostPort 53/UDP on 10.0.0.1 is used by default/dns"],
        ["free hostPort 8080/TCP (used by default/web)", "free hostPort 53/UDP on 10.0.0.1 (used by default/dns)"],
    ),
    Case(
        "the node the pod names",
        "NodeName",
        make_pod("p").node("n2"),
        NODE,
        [],
        ["the pod names node n2 (spec.nodeName)"],
        [],
        ["NodeName"],
    ),
    Case("a plugin with nothing to add", "InterPodAffinity", make_pod("p"), NODE, [], [], [], ["InterPodAffinity"]),
]


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_details_and_fix(case: Case) -> None:
    pod = case.pod.build()
    ni = _ni(case.node, *case.running)
    assert er.details(case.plugin, pod, ni) == case.details
    fix = er.node_fix(pod, ni, [case.plugin])
    assert list(fix.changes) == case.changes
    assert list(fix.unknown) == case.unknown


@pytest.mark.parametrize(
    ("resource", "amount", "text"),
    [
        ("cpu", 1500, "1.5"),
        ("cpu", 250, "0.25"),
        ("cpu", 4000, "4"),
        ("memory", 1536 * 1024 * 1024, "1.5Gi"),
        ("memory", 200 * 1024 * 1024, "200Mi"),
        ("memory", 512, "512"),
        ("ephemeral-storage", 2 << 40, "2Ti"),
        ("nvidia.com/gpu", 3, "3"),
    ],
)
def test_format_amount(resource: str, amount: int, text: str) -> None:
    assert er.format_amount(resource, amount) == text


def test_a_matching_term_leaves_only_the_node_selector() -> None:
    pod = make_pod("p").node_selector(zone="a").required_node_affinity(SSD, ZONE_B).build()
    ni = _ni(make_node("n1").label("zone", "b"))
    assert [m.detail for m in er.label_misses(pod, ni)] == ["nodeSelector zone=a: node has zone=b"]


def test_best_fixes_prefers_known_and_small_changes() -> None:
    pod = make_pod("p").req(cpu="3").build()
    nearly = _ni(make_node("nearly").capacity(cpu="4", memory="8Gi", pods="10"), make_pod("a").req(cpu="1500m"))
    far = _ni(make_node("far").capacity(cpu="4", memory="8Gi", pods="10"), make_pod("b").req(cpu="3500m"))
    tainted = _ni(make_node("tainted").capacity(cpu="4", memory="8Gi", pods="10").taint("k", "v"))
    fixes = [
        er.node_fix(pod, far, ["NodeResourcesFit"]),
        er.node_fix(pod, tainted, ["TaintToleration", "InterPodAffinity"]),
        er.node_fix(pod, nearly, ["NodeResourcesFit"]),
    ]
    assert [f.node for f in er.best_fixes(fixes, limit=2)] == ["nearly", "far"]
    assert (
        er.best_fixes(fixes)[-1].text()
        == "tainted: tolerate taint k=v:NoSchedule; pass InterPodAffinity (no simple change known)"
    )
