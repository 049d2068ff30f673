"""The rest of upstream's scheduler_perf workloads a kubelet-less cluster runs
(test/integration/scheduler_perf/{misc,batching,topology_spreading,affinity,default_preemption},
v1.37.2), beside the nine of bench/workloads.py and the event_handling ones
(bench/perf_event_handling.py).

Sizes, as for the nine: ``--nodes`` is ``initNodes``, ``--pods`` is ``measurePods``, and the init
pods keep the ratio to the measured ones of upstream's 500-node variant (each builder names its
variant and what is capped: one pod per node where a pod takes a node's worth of something).
Upstream's ``sched-0``/``sched-1`` and ``init-ns-*``/``measure-ns-0`` namespaces are one here; their
terms name every namespace of the workload (``namespaces: [sched-1, sched-0]``, or a
``namespaceSelector`` every one of them matches), so one namespace matches the same pods: the
namespaceSelector workloads label the round's namespace ``team=devops`` and keep the selector.

Not here (see bench/README.md): PreemptionPodGroupDisruptionMode (its PodGroups are
scheduling.k8s.io/v1alpha3, which the bench's API server does not serve), and the volumes, dra,
podgroup, nodedeclaredfeatures, starvation and workload_preemption folders.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Sequence
from typing import Any

from bench import perf_checks as checks
from bench import perf_objects as o
from bench import script
from bench.workloads import (
    HOST_KEY,
    ROLE_LABEL,
    ZONE_KEY,
    Churn,
    Workload,
    _priority_class,
    _upstream_node,
    _upstream_pod,
    priority_class_name,
)

JSON = o.JSON
#: batching's scheduler-config-no-topology.yaml: no default spreading, so pods batch by signature.
NO_TOPOLOGY = ("HostPortConflict", "ResourceSaturation")
#: The pluginConfig of that file, for both schedulers' profiles (indented by the caller).
NO_TOPOLOGY_CONFIG = (
    "pluginConfig:",
    "- name: PodTopologySpread",
    "  args: {defaultingType: List, defaultConstraints: []}",
)
#: Plugins the kube-scheduler "matched" profile keeps for these workloads (it otherwise disables
#: them, since the other workloads' pods have no volumes or claims): PodDelete's pods have volumes;
#: upstream runs SchedulingWithExtendedResource with DynamicResourceAllocation on (DRAExtendedResource).
KUBE_KEEPS: dict[str, tuple[str, ...]] = {
    "EventHandlingPodDelete": ("VolumeRestrictions", "NodeVolumeLimits", "VolumeBinding", "VolumeZone"),
    "SchedulingWithExtendedResource": ("DynamicResources",),
}
#: HostPortConflict's and ResourceSaturation's signatureBatchSize (the first of upstream's variants):
#: every 10 pods share a ``signature`` label, so opportunistic batching has runs of 10 to reuse.
SIGNATURE_BATCH = 10
GREEN, BLUE, RED, YELLOW = ({"color": c} for c in ("green", "blue", "red", "yellow"))
DEVOPS = {"team": "devops"}
APP = {"app": "scheduler-perf"}


def plugin_config(workload: str, indent: str) -> str:
    """The profile lines the workload adds to both schedulers' configs ("" for most)."""
    if workload not in NO_TOPOLOGY:
        return ""
    return "".join(f"{indent}{line}\n" for line in NO_TOPOLOGY_CONFIG)


def _nodes(run_id: str, n: int, labels: dict[str, str] | None = None) -> list[JSON]:
    return [_upstream_node(run_id, i, labels) for i in range(n)]


def _wl(name: str, nodes: list[JSON], measured: list[JSON], init: Sequence[JSON] = (), **kw: Any) -> Workload:
    classes = Counter(p["metadata"]["labels"][ROLE_LABEL] for p in measured)
    return Workload(name, nodes, measured, classes, init_pods=list(init), **kw)


def _many(prefix: str, count: int, make: Callable[[str], JSON]) -> list[JSON]:
    return [make(f"{prefix}{i:06d}") for i in range(count)]


# -- misc -------------------------------------------------------------------------------------------


def scheduling_daemonset(n_nodes: int, n_pods: int, run_id: str, seed: int = 1) -> Workload:
    """SchedulingDaemonset (15000Nodes: 15000 nodes + 1, 30000 pods): every pod requires the one
    named node by ``matchFields`` on ``metadata.name``, as a DaemonSet's pods do, so NodeAffinity's
    PreFilter result narrows the cycle to that node (90000 pods). ``--nodes`` other nodes."""
    named = o.node(run_id, "scheduler-perf-node", pods="90000")
    name = named["metadata"]["name"]
    expr = {"key": "metadata.name", "operator": "In", "values": [name]}
    aff = {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [{"matchFields": [expr]}]}
        }
    }
    pods = _many("p", n_pods, lambda nm: o.pod(nm, "daemonset", affinity=aff))
    return _wl("SchedulingDaemonset", [named, *_nodes(run_id, n_nodes)], pods)


def scheduling_deleted_pods_with_finalizers(n_nodes: int, n_pods: int, run_id: str, seed: int = 1) -> Workload:
    """SchedulingDeletedPodsWithFinalizers (1000Node_1000DeletingPods: 1000 nodes, 1000 deleting,
    1000 measured): light pods with a finalizer are created and deleted (100/s) while the measured
    light pods are: a deleted pod stays (its finalizer) with a deletionTimestamp, and the scheduler
    must not spend its cycles on it. Deleting pods = ``--pods``; the round removes the finalizers
    at its end."""
    deleting = _many("d", n_pods, lambda nm: o.pod(nm, "deleting"))
    for p in deleting:
        p["metadata"]["finalizers"] = ["test.k8s.io/finalizer"]
    b = script.Builder()
    doomed = b.pods(deleting, measured=False)
    b.delete(sorted(doomed), 100.0, background=True)
    b.measure()
    b.pods(_many("p", n_pods, lambda nm: o.pod(nm, "light")))
    return _wl("SchedulingDeletedPodsWithFinalizers", _nodes(run_id, n_nodes), b.measured_pods, steps=tuple(b.steps))


def scheduling_with_extended_resource(n_nodes: int, n_pods: int, run_id: str, seed: int = 1) -> Workload:
    """SchedulingWithExtendedResource (500pods_500nodes: 500 nodes with the resource, none without,
    500 pods): node i has one ``foo.com/bar-<i>``, pod i asks for it, so exactly one node fits each
    pod. Pods at most one per node."""
    nodes = [
        o.node(run_id, f"ext{i:05d}", labels={"node-with-extended-resource": "true"}, extra={f"foo.com/bar-{i}": "1"})
        for i in range(n_nodes)
    ]

    def mk(i: int) -> JSON:
        p = o.pod(f"p{i:06d}", "extended-resource")
        p["spec"]["containers"][0]["resources"] = {
            "requests": {f"foo.com/bar-{i}": "1"},
            "limits": {f"foo.com/bar-{i}": "1"},
        }
        return p

    return _wl("SchedulingWithExtendedResource", nodes, [mk(i) for i in range(min(n_pods, n_nodes))])


# -- batching ---------------------------------------------------------------------------------------


def _signed(i: int, p: JSON) -> JSON:
    p["metadata"]["labels"]["signature"] = f"signature-label-{i // SIGNATURE_BATCH}"
    return p


def host_port_conflict(n_nodes: int, n_pods: int, run_id: str, seed: int = 1) -> Workload:
    """HostPortConflict (20000Nodes_20000Pods_10BatchSize): every pod (100m / 100Mi) takes host port
    80, so each node holds one. Pods at most one per node; no default spreading (both profiles);
    batches of 10 pods share a signature label."""
    pods = [
        _signed(i, o.with_host_port(o.pod(f"p{i:06d}", "hostport-80", cpu="100m", mem="100Mi"), 80))
        for i in range(min(n_pods, n_nodes))
    ]
    return _wl("HostPortConflict", _nodes(run_id, n_nodes), pods, checks={"host_ports": checks.host_port_conflicts})


def resource_saturation(n_nodes: int, n_pods: int, run_id: str, seed: int = 1) -> Workload:
    """ResourceSaturation (20000Nodes_20000Pods_10BatchSize): pods of 3 CPU / 1Gi on 4-CPU nodes,
    one per node: each bind makes its node full for the rest. Pods at most one per node; no default
    spreading; batches of 10 share a signature label."""
    pods = [_signed(i, o.pod(f"p{i:06d}", "saturation", cpu="3", mem="1Gi")) for i in range(min(n_pods, n_nodes))]
    return _wl("ResourceSaturation", _nodes(run_id, n_nodes), pods)


# -- topology_spreading -----------------------------------------------------------------------------


def _moons(run_id: str, n: int) -> list[JSON]:
    return [_upstream_node(run_id, i, {ZONE_KEY: f"moon-{i % 3 + 1}"}) for i in range(n)]


def preferred_topology_spreading(n_nodes: int, n_pods: int, run_id: str, seed: int = 1) -> Workload:
    """PreferredTopologySpreading (500Nodes: 1000 init pod-default, 1000 measured): TopologySpreading's
    shape with a soft constraint: blue pods, zone spread maxSkew 5, ScheduleAnyway."""
    init = _many("i", n_pods, lambda nm: _upstream_pod(nm, "init"))
    spread = [o.spread(ZONE_KEY, 5, BLUE, hard=False)]
    pods = _many(
        "p", n_pods, lambda nm: _upstream_pod(nm, "preferred-spread", labels=BLUE, topologySpreadConstraints=spread)
    )
    return _wl("PreferredTopologySpreading", _moons(run_id, n_nodes), pods, init)


def default_topology_spreading(n_nodes: int, n_pods: int, run_id: str, seed: int = 1) -> Workload:
    """DefaultTopologySpreading (500Nodes: 1000 init pod-default, 1000 measured): pods of a Service
    (``app: scheduler-perf``, no requests) and no constraints of their own, so PodTopologySpread's
    system defaults spread them (hostname maxSkew 3, zone maxSkew 5, both soft). The Service is
    created before the measured pods."""
    init = _many("i", n_pods, lambda nm: _upstream_pod(nm, "init"))
    service = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": "service-0"},
        "spec": {"selector": dict(APP), "ports": [{"protocol": "TCP", "port": 80, "targetPort": 8000}]},
    }
    b = script.Builder().objects("/api/v1/namespaces/{namespace}/services", [service]).measure()
    b.pods(_many("p", n_pods, lambda nm: o.pod(nm, "with-label", labels=APP)))
    return _wl("DefaultTopologySpreading", _moons(run_id, n_nodes), b.measured_pods, init, steps=tuple(b.steps))


def scheduling_with_node_inclusion_policy(n_nodes: int, n_pods: int, run_id: str, seed: int = 1) -> Workload:
    """SchedulingWithNodeInclusionPolicy (500Nodes: 400 normal nodes, 100 tainted ``foo``, 400 pods):
    pods spread over hostnames (maxSkew 1, DoNotSchedule) honouring node affinity and taints, so the
    tainted nodes are no domains. A fifth of ``--nodes`` tainted; pods at most 40 per normal node
    (CPU)."""
    normal = max(1, n_nodes * 4 // 5)
    nodes = _nodes(run_id, normal)
    for i in range(normal, n_nodes):
        tainted = _upstream_node(run_id, i)
        tainted["spec"]["taints"] = [o.taint("foo")]
        nodes.append(tainted)
    spread = {**o.spread(HOST_KEY, 1, {"foo": "bar"}), "nodeAffinityPolicy": "Honor", "nodeTaintsPolicy": "Honor"}
    pods = _many(
        "p",
        min(n_pods, 40 * normal),
        lambda nm: _upstream_pod(nm, "inclusion-policy", labels={"foo": "bar"}, topologySpreadConstraints=[spread]),
    )
    return _wl("SchedulingWithNodeInclusionPolicy", nodes, pods)


# -- affinity ---------------------------------------------------------------------------------------


def _affine(nm: str, cls: str, color: dict[str, str], affinity: JSON) -> JSON:
    return _upstream_pod(nm, cls, labels=color, affinity=affinity)


def scheduling_pod_matching_anti_affinity(n_nodes: int, n_pods: int, run_id: str, seed: int = 1) -> Workload:
    """SchedulingPodMatchingAntiAffinity (500Nodes: 100 init, 400 measured): green init pods with
    required anti-affinity to green (hostname); the measured pods are green without it, so the
    init pods' terms keep them off their nodes (the symmetric check). Init pods ``pods / 4``, at
    most a fifth of the nodes."""
    anti = o.required("podAntiAffinity", GREEN)
    init = _many("i", min(n_pods // 4, n_nodes // 5), lambda nm: _affine(nm, "init", GREEN, anti))
    pods = _many("p", n_pods, lambda nm: _upstream_pod(nm, "matching", labels=GREEN))
    return _wl("SchedulingPodMatchingAntiAffinity", _nodes(run_id, n_nodes), pods, init)


def scheduling_pod_affinity(n_nodes: int, n_pods: int, run_id: str, seed: int = 1) -> Workload:
    """SchedulingPodAffinity (500Nodes: 500 init, 1000 measured; every node zone1): blue pods with
    required affinity to blue over zones."""
    aff = o.required("podAffinity", BLUE, ZONE_KEY)
    init = _many("i", n_pods // 2, lambda nm: _affine(nm, "init", BLUE, aff))
    pods = _many("p", n_pods, lambda nm: _affine(nm, "affinity", BLUE, aff))
    nodes = _nodes(run_id, n_nodes, {ZONE_KEY: "zone1"})
    return _wl("SchedulingPodAffinity", nodes, pods, init, checks={"pod_affinity": checks.pod_affinity_unmet})


def scheduling_preferred_pod_anti_affinity(n_nodes: int, n_pods: int, run_id: str, seed: int = 1) -> Workload:
    """SchedulingPreferredPodAntiAffinity (500Nodes: 500 init, 1000 measured): yellow pods preferring
    (weight 1) nodes without yellow pods."""
    anti = o.preferred("podAntiAffinity", YELLOW)
    init = _many("i", n_pods // 2, lambda nm: _affine(nm, "init", YELLOW, anti))
    pods = _many("p", n_pods, lambda nm: _affine(nm, "preferred-anti", YELLOW, anti))
    return _wl("SchedulingPreferredPodAntiAffinity", _nodes(run_id, n_nodes), pods, init)


def mixed_scheduling_base_pod(n_nodes: int, n_pods: int, run_id: str, seed: int = 1) -> Workload:
    """MixedSchedulingBasePod (500Nodes: 200 init pods of each of five templates, 1000 measured
    pod-default; every node zone1): init pods plain, with required affinity (blue, zone), required
    anti-affinity (green, hostname; at most one per node), preferred affinity (red) and preferred
    anti-affinity (yellow); the measured pods plain among them."""
    k = n_pods // 5
    kinds: list[tuple[str, dict[str, str], JSON | None, int]] = [
        ("init-default", {}, None, k),
        ("init-affinity", BLUE, o.required("podAffinity", BLUE, ZONE_KEY), k),
        ("init-anti-affinity", GREEN, o.required("podAntiAffinity", GREEN), min(k, n_nodes)),
        ("init-preferred-affinity", RED, o.preferred("podAffinity", RED), k),
        ("init-preferred-anti-affinity", YELLOW, o.preferred("podAntiAffinity", YELLOW), k),
    ]
    init: list[JSON] = []
    for j, (cls, color, aff, count) in enumerate(kinds):
        spec: dict[str, Any] = {"affinity": aff} if aff else {}
        init += [_upstream_pod(f"i{j}-{i:06d}", cls, labels=color, **spec) for i in range(count)]
    pods = _many("p", n_pods, lambda nm: _upstream_pod(nm, "basic"))
    nodes = _nodes(run_id, n_nodes, {ZONE_KEY: "zone1"})
    return _wl("MixedSchedulingBasePod", nodes, pods, init, checks={"pod_affinity": checks.pod_affinity_unmet})


def _ns_selector_workload(
    name: str, n_nodes: int, n_pods: int, run_id: str, color: dict[str, str], affinity: JSON, zones: bool = False
) -> Workload:
    """The four ``*WithNSSelector`` workloads (500Nodes: 10 namespaces of 4 init pods, 100 measured):
    init pods = 2/5 of the measured ones; the round's one namespace is labelled ``team=devops``,
    which the terms' namespaceSelector asks for."""
    init = _many("i", n_pods * 2 // 5, lambda nm: _affine(nm, "init", color, affinity))
    pods = _many("p", n_pods, lambda nm: _affine(nm, "ns-selector", color, affinity))
    nodes = _nodes(run_id, n_nodes, {ZONE_KEY: "zone1"} if zones else None)
    hard = "requiredDuringSchedulingIgnoredDuringExecution" in (affinity.get("podAffinity") or {})
    wl_checks = {"pod_affinity": checks.pod_affinity_unmet} if hard else {}
    return _wl(name, nodes, pods, init, namespace_labels=dict(DEVOPS), checks=wl_checks)


def required_anti_affinity_ns_selector(n_nodes: int, n_pods: int, run_id: str, seed: int = 1) -> Workload:
    """SchedulingRequiredPodAntiAffinityWithNSSelector: green pods, required anti-affinity to green
    pods of ``team=devops`` namespaces (hostname): one per node, so init + measured are capped at
    the nodes, keeping their 2:5 ratio."""
    total = n_pods + n_pods * 2 // 5
    pods = n_pods if total <= n_nodes else n_nodes * 5 // 7
    anti = o.required("podAntiAffinity", GREEN, namespaceSelector={"matchLabels": DEVOPS})
    return _ns_selector_workload("SchedulingRequiredPodAntiAffinityWithNSSelector", n_nodes, pods, run_id, GREEN, anti)


def preferred_anti_affinity_ns_selector(n_nodes: int, n_pods: int, run_id: str, seed: int = 1) -> Workload:
    """SchedulingPreferredAntiAffinityWithNSSelector: green pods preferring (weight 1) nodes without
    green pods of ``team=devops`` namespaces."""
    anti = o.preferred("podAntiAffinity", GREEN, namespaceSelector={"matchLabels": DEVOPS})
    return _ns_selector_workload("SchedulingPreferredAntiAffinityWithNSSelector", n_nodes, n_pods, run_id, GREEN, anti)


def required_affinity_ns_selector(n_nodes: int, n_pods: int, run_id: str, seed: int = 1) -> Workload:
    """SchedulingRequiredPodAffinityWithNSSelector (every node zone1): blue pods with required
    affinity to blue pods of ``team=devops`` namespaces over zones."""
    aff = o.required("podAffinity", BLUE, ZONE_KEY, namespaceSelector={"matchLabels": DEVOPS})
    name = "SchedulingRequiredPodAffinityWithNSSelector"
    return _ns_selector_workload(name, n_nodes, n_pods, run_id, BLUE, aff, zones=True)


def preferred_affinity_ns_selector(n_nodes: int, n_pods: int, run_id: str, seed: int = 1) -> Workload:
    """SchedulingPreferredAffinityWithNSSelector: red pods preferring (weight 1) nodes with red pods
    of ``team=devops`` namespaces."""
    aff = o.preferred("podAffinity", RED, namespaceSelector={"matchLabels": DEVOPS})
    return _ns_selector_workload("SchedulingPreferredAffinityWithNSSelector", n_nodes, n_pods, run_id, RED, aff)


def gated_pods_with_pod_affinity(n_nodes: int, n_pods: int, run_id: str, seed: int = 1) -> Workload:
    """SchedulingGatedPodsWithPodAffinityImpactForThroughput (1Node_10000GatedPods: 10000 gated,
    20000 measured): gated pods with required affinity to ``app: scheduler-perf`` stay in the queue
    (a barrier waits until each was tried) while the measured pods, which carry that label, are
    bound: each bind is an AssignedPodAdd event the queue must not spend on the gated pods. Gated =
    pods / 2; nodes take upstream's one node's 90000 pods, ``--nodes`` of them (as
    SchedulingWhileGated)."""
    nodes = [_upstream_node(run_id, i, pods="90000") for i in range(n_nodes)]
    aff = o.required("podAffinity", APP)
    gate = [{"name": "scheduling-gate-1"}]
    gated = _many("g", n_pods // 2, lambda nm: o.pod(nm, "gated", labels=APP, affinity=aff, schedulingGates=gate))
    b = script.Builder().barrier(script.names(gated), attempted=True).measure()
    b.pods(_many("p", n_pods, lambda nm: o.pod(nm, "with-label", labels=APP)))
    return _wl(
        "SchedulingGatedPodsWithPodAffinityImpactForThroughput",
        nodes,
        b.measured_pods,
        gated_pods=gated,
        steps=tuple(b.steps),
    )


# -- default_preemption -----------------------------------------------------------------------------


def preemption_async(n_nodes: int, n_pods: int, run_id: str, seed: int = 1) -> Workload:
    """PreemptionAsync (500Nodes: 2000 init, 500 measured): four low-priority 900m pods per node,
    pod-default measured pods in the 400m left, while every 200 ms a high-priority pod (3970m,
    priority 9999999) arrives and preempts a node's worth (the churn pods fit, by preemption).
    Measured pods at most one per node (upstream's ratio)."""
    low, high = priority_class_name(run_id, 0), priority_class_name(run_id, 9999999)
    init = _many("i", 4 * n_nodes, lambda nm: _upstream_pod(nm, "low", cpu="900m", priorityClassName=low))
    preemptor = _upstream_pod("churn", "preemptor", cpu="3970m", priorityClassName=high)
    pods = _many("p", min(n_pods, n_nodes), lambda nm: _upstream_pod(nm, "basic"))
    pcs = [_priority_class(run_id, 0), _priority_class(run_id, 9999999)]
    churn = Churn("create", interval_s=0.2, pod=preemptor, fits=True)
    return _wl("PreemptionAsync", _nodes(run_id, n_nodes), pods, init, churn=churn, priority_classes=pcs)


BUILDERS: dict[str, Callable[[int, int, str, int], Workload]] = {
    "SchedulingDaemonset": scheduling_daemonset,
    "SchedulingDeletedPodsWithFinalizers": scheduling_deleted_pods_with_finalizers,
    "SchedulingWithExtendedResource": scheduling_with_extended_resource,
    "HostPortConflict": host_port_conflict,
    "ResourceSaturation": resource_saturation,
    "PreferredTopologySpreading": preferred_topology_spreading,
    "DefaultTopologySpreading": default_topology_spreading,
    "SchedulingWithNodeInclusionPolicy": scheduling_with_node_inclusion_policy,
    "SchedulingPodMatchingAntiAffinity": scheduling_pod_matching_anti_affinity,
    "SchedulingPodAffinity": scheduling_pod_affinity,
    "SchedulingPreferredPodAntiAffinity": scheduling_preferred_pod_anti_affinity,
    "MixedSchedulingBasePod": mixed_scheduling_base_pod,
    "SchedulingRequiredPodAntiAffinityWithNSSelector": required_anti_affinity_ns_selector,
    "SchedulingPreferredAntiAffinityWithNSSelector": preferred_anti_affinity_ns_selector,
    "SchedulingRequiredPodAffinityWithNSSelector": required_affinity_ns_selector,
    "SchedulingPreferredAffinityWithNSSelector": preferred_affinity_ns_selector,
    "SchedulingGatedPodsWithPodAffinityImpactForThroughput": gated_pods_with_pod_affinity,
    "PreemptionAsync": preemption_async,
}
