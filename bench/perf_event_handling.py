"""Upstream's event_handling workloads (test/integration/scheduler_perf/event_handling, v1.37.2):
requeue precision. Each makes groups of pods unschedulable, each group rejected by one plugin,
waits until the scheduler has tried every one of them (barrier ``Attempted``), then makes the events
that unblock them (pods deleted or updated, nodes added or updated) and waits until all are bound.
A scheduler that requeues a pod on every event, whether or not it could help, spends attempts that
show in "scheduling attempts per bound pod"; one that requeues on none never binds them.

Measured: the pods upstream collects metrics on (its ``type: unsched`` pods, or every pod of the
metrics namespaces), created by the script (:mod:`bench.script`) inside the measured window.
Beside the generic checks: ``held_bound`` (a pod bound before the event that could unblock it,
:class:`bench.script.Release`), and the per-workload ones in :mod:`bench.perf_checks`.

Sizes: upstream's "must be initNodes * 10" pairs nodes and pods (a node holds 10 of each group:
host ports, volumes, memory). Here ``--pods`` is upstream's ``measurePods`` (pods per group), and
the nodes per group are ``ceil(pods / 10)``, at most ``--nodes``; the workloads upstream runs on one
or two fixed nodes keep them and ignore ``--nodes``. Upstream's namespaces become one: pods that
upstream kept apart by namespace get labels that do not match each other (each builder says which).
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from bench import perf_checks as checks
from bench import perf_objects as o
from bench import script
from bench.workloads import HOST_KEY, ZONE_KEY, Workload

JSON = o.JSON
ALLOW = "allow"
UNSCHEDULABLE_TAINT = "node.kubernetes.io/unschedulable"
#: upstream's updatePerSecond and deletePodsPerSecond in these workloads.
RATE = 100.0
#: PodDelete: blockerPods / measurePods (480 / 500 at 50Nodes_500Pods: "slightly below initNodes * 10").
BLOCKER_RATIO = 480 / 500
#: PodDelete: the free pod slots the blockers leave at least (15 / 20 at 2Nodes_20Pods, "to be stable").
BLOCKER_SLACK = 5
#: PodDelete: the per-node CSI volume limit (nodeAllocatableStrategy).
VOLUME_LIMIT = 20
#: NodeAdd/NodeUpdate/PodDelete: measured pods per node of a group (upstream: measurePods = 10 * nodes).
PODS_PER_NODE = 10


def group_nodes(n_nodes: int, n_pods: int) -> int:
    """Nodes per group: ``ceil(pods / 10)`` as upstream pairs them, at most ``--nodes``, at least 1."""
    return max(1, min(n_nodes, math.ceil(n_pods / PODS_PER_NODE)))


def _workload(
    name: str,
    b: script.Builder,
    nodes: list[JSON],
    *,
    init_pods: Sequence[JSON] = (),
    wl_checks: Mapping[str, checks.CheckFn] | None = None,
) -> Workload:
    classes = Counter(o.role(p) for p in b.measured_pods)
    steps = tuple(b.steps)
    return Workload(
        name, nodes, b.measured_pods, classes, init_pods=list(init_pods), steps=steps, checks=dict(wl_checks or {})
    )


def _unsched(name: str, cls: str, **kw: Any) -> JSON:
    """A pod of a blocked group (upstream labels them ``type: unsched``)."""
    labels = {"type": "unsched", **kw.pop("labels", {})}
    return o.pod(name, cls, labels=labels, **kw)


def _group(prefix: str, count: int, make: Callable[[int, str], JSON]) -> list[JSON]:
    return [make(i, f"{prefix}-{i:05d}") for i in range(count)]


def pod_delete(n_nodes: int, n_pods: int, run_id: str, seed: int = 1) -> Workload:
    """EventHandlingPodDelete (50Nodes_500Pods: 50 nodes, 480 blockers per blocker group, 500 per
    measured group): AssignedPodDelete events. Two blocker groups fill the nodes: ``topology=blue``
    pods with host ports 80-811, 0.35 CPU / 3Gi, a hostname spread of maxSkew 10 (minDomains 10000)
    and a ReadOnlyMany CSI volume each; ``color=green`` pods with a ReadWriteOncePod claim each.
    Measured, each group held by one plugin: PodTopologySpread (maxSkew 11 over the blue pods),
    VolumeRestrictions (the green blockers' claims), NodePorts, NodeResources (0.2 CPU / 1Gi),
    NodeVolumeLimits (a volume each, 20 per node) and InterPodAffinity (anti-affinity to green).
    Then both blocker groups are deleted at 100/s each, side by side.

    Scaled: nodes ``ceil(pods / 10)`` (at most ``--nodes``), ``pods`` per measured group (at most
    10 per node), blockers 96 % of that and at least 5 fewer (upstream's 2Nodes_20Pods has 15).
    Upstream's anti-affine pods are green too, in a namespace of their own; here they carry no
    colour, so they repel only the green blockers as upstream's do.
    CSINodes (driver ebs.csi.aws.com, 20 volumes) stand in for the node plugin; kube-scheduler keeps
    its volume plugins for this workload."""
    n = group_nodes(n_nodes, n_pods)
    k = min(n_pods, PODS_PER_NODE * n)
    # Both of upstream's variants: the blue blockers' host ports repeat every 12 pods, so with only
    # a slot or two to spare the last ones can find every node with room holding their port (the
    # smoke size, 2 nodes and 19 blockers, failed so in 1 round of 7).
    nb = max(1, min(int(k * BLOCKER_RATIO), k - BLOCKER_SLACK))
    extra = {o.CSI_ALLOCATABLE: str(VOLUME_LIMIT)}
    nodes = [o.node(run_id, f"n{i:05d}", extra=extra) for i in range(n)]
    blue = {"topology": "blue"}

    def blocker_a(i: int, name: str) -> JSON:
        p = o.pod(name, "blocker-topology", cpu="350m", mem="3Gi", labels={**blue, "type": "blocker"})
        p["spec"]["topologySpreadConstraints"] = [o.spread(HOST_KEY, 10, blue, min_domains=10000)]
        return o.with_claim(o.with_host_port(p, o.upstream_port(i)), f"pvc-a-{i}")

    def blocker_b(i: int, name: str) -> JSON:
        return o.with_claim(o.pod(name, "blocker-affinity", labels={"color": "green", "type": "blocker"}), f"pvc-b-{i}")

    b = script.Builder()
    b.objects("/apis/storage.k8s.io/v1/csinodes", [o.csinode(nd, VOLUME_LIMIT) for nd in nodes])
    b.volumes([o.volume_pair(run_id, f"pvc-a-{i}", "ReadOnlyMany") for i in range(nb)])
    blockers_a = b.pods(_group("blk-a", nb, blocker_a), wait=True, measured=False)
    b.volumes([o.volume_pair(run_id, f"pvc-b-{i}", "ReadWriteOncePod") for i in range(nb)])
    blockers_b = b.pods(_group("blk-b", nb, blocker_b), wait=True, measured=False)
    b.measure()
    spread = [o.spread(HOST_KEY, 11, blue, min_domains=10000)]
    b.pods(
        _group(
            "pts", k, lambda i, name: _unsched(name, "podtopologyspread", labels=blue, topologySpreadConstraints=spread)
        )
    )
    vr = b.pods(_group("vr", nb, lambda i, name: o.with_claim(_unsched(name, "volumerestrictions"), f"pvc-b-{i}")))
    b.pods(_group("np", k, lambda i, name: o.with_host_port(_unsched(name, "nodeports"), o.upstream_port(i))))
    b.pods(_group("nr", k, lambda i, name: _unsched(name, "noderesources", cpu="200m", mem="1Gi")))
    b.volumes([o.volume_pair(run_id, f"pvc-l-{i}", "ReadOnlyMany") for i in range(nb)])
    b.pods(_group("nvl", nb, lambda i, name: o.with_claim(_unsched(name, "nodevolumelimits"), f"pvc-l-{i}")))
    anti = o.required("podAntiAffinity", {"color": "green"})
    b.pods(_group("ipa", k, lambda i, name: _unsched(name, "interpodaffinity", affinity=anti)))
    unsched = script.names(b.measured_pods)
    b.barrier(unsched, attempted=True)
    b.release(vr)  # each claim is the blocker's until it is deleted
    b.delete(sorted(blockers_a), RATE, background=True)
    b.delete(sorted(blockers_b), RATE, background=True)
    b.barrier(unsched)
    wl_checks = {
        "host_ports": checks.host_port_conflicts,
        "volume_shared": checks.shared_claims,
        "volume_limits": checks.volume_limit_exceeded,
    }
    return _workload("EventHandlingPodDelete", b, nodes, wl_checks=wl_checks)


def pod_update(n_nodes: int, n_pods: int, run_id: str, seed: int = 1) -> Workload:
    """EventHandlingPodUpdate (1Node_1000Pods: 1000 blockers, 1000 per group): pod update events.
    A cordoned node and a tainted one hold back pods without tolerations until each pod is given
    one (NodeUnschedulable, TaintToleration). Then on a third node 1000 blockers (labels
    ``color=green-<i>``, ``topology=blue``, 30000Mi in all) hold back: InterPodAffinity (pod i
    anti-affine to blocker i), NodeResources (30000Mi / pods each), PodTopologySpread (maxSkew =
    blockers over blue pods, minDomains 100) and SchedulingGates (gated pods). The blockers' labels
    are removed, then their memory resized to 1Mi (``resize`` subresource), then the gates
    removed, 100 objects a second each.

    Scaled: ``pods`` per group, blockers = pods; the three nodes as upstream (``--nodes`` unused).
    Upstream's anti-affine pods are labelled ``green-<i>`` in their own namespace; here they carry
    no colour. ``held_bound``: the NodeResources pods that fit beside the blockers from the start
    are allowed early."""
    m = nb = n_pods
    cordoned = o.node(run_id, "unschedulable", pods="90000", unschedulable=True)
    blue = {"topology": "blue"}
    b = script.Builder().measure()
    nu = b.pods(_group("nu", m, lambda i, name: _unsched(name, "nodeunschedulable")))
    b.nodes([o.node(run_id, "with-taint", pods="90000", taints=[o.taint("toleration")])])
    tt = b.pods(_group("tt", m, lambda i, name: _unsched(name, "tainttoleration")))
    b.barrier(attempted=True)
    for held, key in ((nu, UNSCHEDULABLE_TAINT), (tt, "toleration")):
        b.release(held)
        patch = {"tolerations": [o.tolerate(key)]}
        b.update(script.Update("pod", tuple((n, patch) for n in sorted(held)), RATE, patch_type="tolerations"))
    b.barrier()
    b.nodes([o.node(run_id, "scheduler-perf-node", pods="90000")])
    per_blocker = 30000 // nb

    def blocker(i: int, name: str) -> JSON:
        return o.pod(name, "blocker", cpu="0.0001", mem=f"{per_blocker}Mi", labels={"color": f"green-{i}", **blue})

    blockers = sorted(b.pods(_group("blk", nb, blocker), wait=True, measured=False))

    def ipa(i: int, name: str) -> JSON:
        return _unsched(name, "interpodaffinity", affinity=o.required("podAntiAffinity", {"color": f"green-{i}"}))

    ipa_names = b.pods(_group("ipa", m, ipa))
    per_nr = 30000 // m
    nr = b.pods(_group("nr", m, lambda i, name: _unsched(name, "noderesources", cpu="0.0001", mem=f"{per_nr}Mi")))
    spread = [o.spread(HOST_KEY, nb, blue, min_domains=100)]
    pts = b.pods(
        _group(
            "pts",
            nb,
            lambda i, name: _unsched(name, "podtopologyspread", labels=blue, topologySpreadConstraints=spread),
        )
    )
    gate = [{"name": "test.k8s.io/hold"}]
    sg = b.pods(_group("sg", m, lambda i, name: _unsched(name, "schedulinggates", schedulingGates=gate)))
    later = ipa_names | nr | pts | sg
    b.barrier(later, attempted=True)
    b.release(ipa_names).release(pts)
    unlabel = {"metadata": {"labels": {"color": None, "topology": None}}}
    b.update(script.Update("pod", tuple((n, unlabel) for n in blockers), RATE))
    free_mi = 32 * 1024 - nb * per_blocker
    b.release(nr, early=free_mi // per_nr if per_nr else m)
    shrink = {
        "spec": {"containers": [{"name": "pause", "resources": {"requests": {"cpu": "0.0001", "memory": "1Mi"}}}]}
    }
    b.update(
        script.Update("pod", tuple((n, shrink) for n in blockers), RATE, subresource="resize", patch_type="strategic")
    )
    b.release(sg)
    ungate = {"spec": {"schedulingGates": None}}
    b.update(script.Update("pod", tuple((n, ungate) for n in sorted(sg)), RATE))
    b.barrier(later)
    return _workload("EventHandlingPodUpdate", b, [cordoned])


def _labelled() -> dict[str, str]:
    return {ZONE_KEY: "zone1", "affinity": ALLOW, "topology": ALLOW}


def _affinity_groups(b: script.Builder, m: int, spread_skew: int, min_domains: int) -> frozenset[str]:
    """NodeAdd's and NodeUpdate's middle groups, all tolerating ``allow``: InterPodAffinity (green,
    required affinity to green over zones), NodeAffinity (``affinity In [allow]``) and
    PodTopologySpread (blue, over the ``topology`` key): held until nodes carry those labels."""
    tol = [o.tolerate(ALLOW)]
    green = {"color": "green"}
    aff = o.required("podAffinity", green, ZONE_KEY)
    ipa = b.pods(
        _group(
            "ipa", m, lambda i, name: _unsched(name, "interpodaffinity", labels=green, tolerations=tol, affinity=aff)
        )
    )
    na_aff = o.node_affinity("affinity", [ALLOW])
    na = b.pods(_group("na", m, lambda i, name: _unsched(name, "nodeaffinity", tolerations=tol, affinity=na_aff)))
    spread = [o.spread("topology", spread_skew, {"color": "blue"}, min_domains=min_domains)]
    pts = b.pods(
        _group(
            "pts",
            m,
            lambda i, name: _unsched(
                name, "podtopologyspread", labels={"color": "blue"}, tolerations=tol, topologySpreadConstraints=spread
            ),
        )
    )
    return ipa | na | pts


def node_add(n_nodes: int, n_pods: int, run_id: str, seed: int = 1) -> Workload:
    """EventHandlingNodeAdd (100Nodes_1000Pods: 100 nodes per group, 1000 pods per group): NodeAdd
    events. Every node but the last group's is tainted ``allow`` (the pods tolerate it). A cordoned
    node holds back NodeUnschedulable pods until a tiny node (0.1 CPU) is added, which holds back
    NodeResources pods (0.2 CPU) until large nodes (200 CPU) are; InterPodAffinity (zone),
    NodeAffinity and PodTopologySpread pods (maxSkew 1000, minDomains 10000) need labels only the
    cordoned node has, until labelled nodes are added; TaintToleration pods tolerate only a taint
    the last group of nodes carries.

    Scaled: ``pods`` per group, nodes per group ``ceil(pods / 10)`` (at most ``--nodes``); the spread's
    maxSkew is max(1000, pods), so every pod of the group fits in its one domain as upstream's 1000."""
    m = n_pods
    n = group_nodes(n_nodes, n_pods)
    tainted = [o.taint(ALLOW)]
    tol = [o.tolerate(ALLOW)]
    cordoned = o.node(run_id, "unschedulable", pods="3000", labels=_labelled(), taints=tainted, unschedulable=True)
    b = script.Builder().measure()
    nu = b.pods(_group("nu", m, lambda i, name: _unsched(name, "nodeunschedulable", tolerations=tol)))
    b.barrier(attempted=True).release(nu)
    b.nodes([o.node(run_id, "low-capacity", cpu="0.1", memory="100Mi", pods="3000", taints=tainted)])
    nr = b.pods(
        _group("nr", m, lambda i, name: _unsched(name, "noderesources", cpu="200m", mem="200Mi", tolerations=tol))
    )
    b.barrier(attempted=True).release(nr)
    b.nodes([o.node(run_id, f"high{i:05d}", cpu="200", memory="200Gi", pods="3000", taints=tainted) for i in range(n)])
    b.barrier()
    middle = _affinity_groups(b, m, max(1000, m), 10000)
    b.barrier(attempted=True).release(middle)
    b.nodes([o.node(run_id, f"labelled{i:05d}", pods="3000", labels=_labelled(), taints=tainted) for i in range(n)])
    b.barrier()
    tt = b.pods(
        _group("tt", m, lambda i, name: _unsched(name, "tainttoleration", tolerations=[o.tolerate("toleration")]))
    )
    b.barrier(attempted=True).release(tt)
    b.nodes([o.node(run_id, f"with-taint{i:05d}", pods="3000", taints=[o.taint("toleration")]) for i in range(n)])
    b.barrier()
    return _workload("EventHandlingNodeAdd", b, [cordoned], wl_checks={"pod_affinity": checks.pod_affinity_unmet})


def pod_add(n_nodes: int, n_pods: int, run_id: str, seed: int = 1) -> Workload:
    """EventHandlingPodAdd (1000Pods: 2 nodes, 1000 per group): AssignedPodAdd events. One green
    pod (an init pod) on one node; PodTopologySpread pods (blue, maxSkew 1 over hostnames) are
    anti-affine to green, so only the other node is theirs and one of them fits there; InterPodAffinity
    pod i needs a ``yellow-<i>`` pod on its node. Then blue pods that must join the green one
    (required affinity to green) balance the spread one by one, and yellow pods arrive for the rest.

    Scaled: ``pods`` per group on upstream's two nodes (``--nodes`` unused), each taking 3 pods per
    measured pod plus the canary and the green pod (upstream: 3000 for 1000)."""
    m = n_pods
    nodes = [o.node(run_id, f"n{i:05d}", pods=str(3 * m + 2)) for i in range(2)]
    green = {"color": "green"}
    seed_pod = o.pod("with-label", "with-label", labels=green)
    b = script.Builder().measure()
    blue = {"topology": "blue"}
    anti = o.required("podAntiAffinity", green)
    spread = [o.spread(HOST_KEY, 1, blue)]
    pts = b.pods(
        _group(
            "pts",
            m,
            lambda i, name: _unsched(
                name, "podtopologyspread", labels=blue, affinity=anti, topologySpreadConstraints=spread
            ),
        )
    )
    ipa = b.pods(
        _group(
            "ipa",
            m,
            lambda i, name: _unsched(
                name, "interpodaffinity", affinity=o.required("podAffinity", {"color": f"yellow-{i}"})
            ),
        )
    )
    b.barrier(pts | ipa, attempted=True)
    b.release(pts, early=1)
    join = o.required("podAffinity", green)
    b.pods(
        _group(
            "unblock-topology",
            m,
            lambda i, name: o.pod(name, "unblocker-topology", labels={**blue, **green}, affinity=join),
        ),
        wait=True,
        measured=False,
    )
    b.release(ipa)
    b.pods(
        _group(
            "unblock-affinity", m, lambda i, name: o.pod(name, "unblocker-affinity", labels={"color": f"yellow-{i}"})
        ),
        wait=True,
        measured=False,
    )
    b.barrier(pts | ipa)
    return _workload(
        "EventHandlingPodAdd", b, nodes, init_pods=[seed_pod], wl_checks={"pod_affinity": checks.pod_affinity_unmet}
    )


def node_update(n_nodes: int, n_pods: int, run_id: str, seed: int = 1) -> Workload:
    """EventHandlingNodeUpdate (100Nodes_1000Pods: 100 nodes per group, 1000 pods per group):
    NodeUpdate events. Each group's nodes are made to hold its pods back, then updated (100 a
    second) so they no longer do: cordoned nodes uncordoned (NodeUnschedulable); tiny nodes
    (0.0001 CPU, 1Mi) given 4 CPU / 32Gi in their status (NodeResources, pods of 0.35 CPU / 3Gi);
    unlabelled nodes labelled (InterPodAffinity, NodeAffinity, PodTopologySpread maxSkew 1); nodes
    tainted ``allow`` re-tainted ``toleration-<i>``, which pods 10i..10i+9 tolerate (TaintToleration).

    Scaled: nodes per group ``ceil(pods / 10)`` (at most ``--nodes``), pods per group at most 10 per
    node (each tiny node takes 10 of 0.35 CPU / 3Gi once grown; each re-tainted node 10 pods)."""
    n = group_nodes(n_nodes, n_pods)
    m = min(n_pods, PODS_PER_NODE * n)
    tainted = [o.taint(ALLOW)]
    tol = [o.tolerate(ALLOW)]
    cordoned = [
        o.node(run_id, f"unschedulable{i:05d}", pods="3000", taints=tainted, unschedulable=True) for i in range(n)
    ]
    b = script.Builder().measure()
    nu = b.pods(_group("nu", m, lambda i, name: _unsched(name, "nodeunschedulable", tolerations=tol)))
    b.barrier(attempted=True).release(nu)
    uncordon = {"spec": {"unschedulable": None}}
    b.update(script.Update("node", tuple((nd["metadata"]["name"], uncordon) for nd in cordoned), RATE))
    b.barrier()
    small = [
        o.node(
            run_id,
            f"low-capacity{i:05d}",
            cpu="0.0001",
            memory="1Mi",
            pods="3000",
            taints=[o.taint("allow-noderesources")],
        )
        for i in range(n)
    ]
    b.nodes(small)
    nr_tol = [o.tolerate("allow-noderesources")]
    nr = b.pods(
        _group("nr", m, lambda i, name: _unsched(name, "noderesources", cpu="350m", mem="3Gi", tolerations=nr_tol))
    )
    b.barrier(attempted=True).release(nr)
    full = {"cpu": "4", "memory": "32Gi", "pods": "3000"}
    grow = {"status": {"capacity": full, "allocatable": full}}
    b.update(script.Update("node", tuple((nd["metadata"]["name"], grow) for nd in small), RATE))
    b.barrier()
    bare = [o.node(run_id, f"without-labels{i:05d}", pods="3000", taints=tainted) for i in range(n)]
    b.nodes(bare)
    middle = _affinity_groups(b, m, 1, 1)
    b.barrier(attempted=True).release(middle)
    label = {"metadata": {"labels": _labelled()}}
    b.update(script.Update("node", tuple((nd["metadata"]["name"], label) for nd in bare), RATE))
    b.barrier()
    retaint = [o.node(run_id, f"without-taints{i:05d}", pods="3000", taints=tainted) for i in range(n)]
    b.nodes(retaint)
    tt = b.pods(
        _group(
            "tt",
            m,
            lambda i, name: _unsched(name, "tainttoleration", tolerations=[o.tolerate(f"toleration-{i // 10}")]),
        )
    )
    b.barrier(attempted=True).release(tt)
    patches = tuple(
        (nd["metadata"]["name"], {"spec": {"taints": [o.taint(f"toleration-{i}")]}}) for i, nd in enumerate(retaint)
    )
    b.update(script.Update("node", patches, RATE))
    b.barrier()
    return _workload("EventHandlingNodeUpdate", b, cordoned, wl_checks={"pod_affinity": checks.pod_affinity_unmet})


BUILDERS: dict[str, Callable[[int, int, str, int], Workload]] = {
    "EventHandlingPodDelete": pod_delete,
    "EventHandlingPodUpdate": pod_update,
    "EventHandlingNodeAdd": node_add,
    "EventHandlingPodAdd": pod_add,
    "EventHandlingNodeUpdate": node_update,
}
