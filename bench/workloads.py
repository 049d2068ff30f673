"""Benchmark workloads: N fake nodes and M pending pods as API JSON, and the placement checks.

Every workload is deterministic for a given (nodes, pods, seed), so the custom scheduler and
kube-scheduler get exactly the same objects (only ``schedulerName`` and the namespace differ).

UPSTREAM holds the shapes of upstream's ``test/integration/scheduler_perf`` suites under their names
(SchedulingBasic, SchedulingPodAntiAffinity, TopologySpreading, ...): upstream's node and pod
templates, init pods bound before the measured ones, gated pods, priorities and churn (see each
builder's docstring and bench/README.md). UPSTREAM_MORE are the rest a kubelet-less cluster runs,
built in bench/perf_event_handling.py and bench/perf_more.py; the event_handling ones are scripts
(bench/script.py) of events between barriers. OURS are below.

- ``plain``: requests only (a few node shapes over three zones, a few pod sizes).
- ``mixed``: the plain nodes, 20 % of them tainted ``dedicated=infra:NoSchedule`` and labelled
  ``dedicated=infra``, half labelled ``disktype=ssd``. Pods: 30 % ``web`` spread over zones
  (``maxSkew: 1``, ``DoNotSchedule``), 20 % ``ssd`` with required node affinity, 15 % ``infra``
  tolerating the taint and requiring the dedicated nodes, up to 10 % ``cache`` with required
  anti-affinity on ``kubernetes.io/hostname``, the rest plain ``batch``.
- ``gpu``: 10 % of the nodes carry ``nvidia.com/gpu: 8`` and a ``nvidia.com/gpu:NoSchedule`` taint;
  up to 20 % of the pods ask for one or two GPUs and tolerate the taint.
- ``pools``: four node pools (general, highmem, compute, tainted spot), pods pinned to pools by
  nodeSelector, by required node affinity, or tolerating and preferring spot.
- ``dra``: the GPUs through Dynamic Resource Allocation (resource.k8s.io/v1). Half of the nodes have
  a ResourceSlice of 4-8 GPUs (driver ``gpu.example.com``, one pool per node), a DeviceClass selects
  the driver, and most pods (up to 90 % of the GPUs) reference a ResourceClaimTemplate of one GPU,
  so the resourceclaim controller creates a claim per pod and the scheduler allocates it; the rest
  ask for nothing else. No taints: the point is the allocation path, not isolation.
- ``dra-partitions``: DRA GPUs as a driver publishes them today (the stand-in of
  ``custom_scheduler/devenv/dra_driver.py``): every other node has two MIG-capable GPUs
  (partitions over shared counters) and one shared GPU (consumable capacity); pods claim a
  partition by ``firstAvailable`` (biggest first) or a 1g.5gb one, or a 4Gi/10 % share of a shared
  GPU (see :mod:`bench.dra_partitions`).
- ``gangs``: native ``scheduling.k8s.io/v1beta1`` PodGroups (gang, ``minCount`` = the group's size),
  created before their members; at full size (1800 pods) 100 gangs of 8 and 10 gangs of 100, 1-CPU
  members on 4- and 8-CPU nodes so that everything fits. Judged per gang by :func:`gang_report`.

:func:`placement` computes the quality numbers and the constraint checks from the final pod list;
the same function judges both schedulers.
"""

from __future__ import annotations

import math
import random
import statistics
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from bench import dra_partitions as dra_parts
from bench import script
from bench import topology as topo
from custom_scheduler.api import quantity
from custom_scheduler.api.podgroup import ANN_TOPOLOGY_PREFERRED

#: The shapes of upstream's test/integration/scheduler_perf suites (v1.37.2), by their names.
UPSTREAM = (
    "SchedulingBasic",
    "SchedulingPodAntiAffinity",
    "TopologySpreading",
    "SchedulingNodeAffinity",
    "SchedulingPreferredPodAffinity",
    "PreemptionBasic",
    "Unschedulable",
    "SchedulingWithMixedChurn",
    "SchedulingWhileGated",
)
#: The rest of upstream's scheduler_perf workloads a kubelet-less cluster runs, event_handling's
#: first (requeue precision): built by bench/perf_event_handling.py and bench/perf_more.py.
UPSTREAM_MORE = (
    "EventHandlingPodDelete",
    "EventHandlingPodUpdate",
    "EventHandlingNodeAdd",
    "EventHandlingPodAdd",
    "EventHandlingNodeUpdate",
    "SchedulingDaemonset",
    "SchedulingDeletedPodsWithFinalizers",
    "SchedulingWithExtendedResource",
    "HostPortConflict",
    "ResourceSaturation",
    "PreferredTopologySpreading",
    "DefaultTopologySpreading",
    "SchedulingWithNodeInclusionPolicy",
    "SchedulingPodMatchingAntiAffinity",
    "SchedulingPodAffinity",
    "SchedulingPreferredPodAntiAffinity",
    "MixedSchedulingBasePod",
    "SchedulingRequiredPodAntiAffinityWithNSSelector",
    "SchedulingPreferredAntiAffinityWithNSSelector",
    "SchedulingRequiredPodAffinityWithNSSelector",
    "SchedulingPreferredAffinityWithNSSelector",
    "SchedulingGatedPodsWithPodAffinityImpactForThroughput",
    "PreemptionAsync",
)
#: Ours: heterogeneous nodes and pods, extended-resource GPUs, node pools, DRA GPUs.
OURS = ("plain", "mixed", "gpu", "pools", "dra", "dra-partitions", "gangs")
WORKLOADS = UPSTREAM + UPSTREAM_MORE + OURS

ZONE_KEY = "topology.kubernetes.io/zone"
HOST_KEY = "kubernetes.io/hostname"
GPU = "nvidia.com/gpu"
ROLE_LABEL = "bench.custom-scheduler.io/class"
RUN_LABEL = "bench.custom-scheduler.io/run"
ZONES = ("zone-a", "zone-b", "zone-c")
NODE_SHAPES = (("8", "32Gi"), ("16", "64Gi"), ("32", "128Gi"))
POD_CPUS = ("100m", "250m", "500m", "1")
POD_MEMS = ("128Mi", "256Mi", "512Mi", "1Gi")
PAUSE_IMAGE = "registry.k8s.io/pause:3.9"
CHECKS = ("resources", "taints", "node_affinity", "anti_affinity", "topology_spread")
#: Checked when the workload has pods that must stay pending (gated ones, ones that never fit) or
#: churn nodes no pod fits on: any of those pods bound, any pod on such a node.
PENDING_CHECKS = ("gated_bound", "unschedulable_bound", "churn_node")
#: Checked when the claims are given (the dra workloads): a device in two claims' allocations (one
#: that allows multiple allocations aside); an allocation whose device is not on its pod's node (or
#: in no slice); a bound pod whose claim is not allocated or not reserved for it; partitions
#: consuming more than their counters, shares more than their device's capacity.
DRA_CHECKS = ("dra_double_allocation", "dra_wrong_node", "dra_unallocated", *dra_parts.CHECKS)
DRA_API = "/apis/resource.k8s.io/v1"
DRA_DRIVER = "gpu.example.com"
DRA_TEMPLATE = "one-gpu"
#: Checked for the gangs workload: a gang not wholly bound at the end; a gang partially bound (some
#: members bound, others not) for longer than the limit; the probe's incomplete gang having a member
#: bound (the scheduler is not all-or-nothing: its gang plugin is off).
GANG_CHECKS = ("gang_incomplete", "gang_partial_too_long", "gang_probe_not_held")
PODGROUP_API = "/apis/scheduling.k8s.io/v1beta1"
#: The full-size mix, (gangs, members each): 100 gangs of 8 and 10 gangs of 100 = 1800 pods.
GANG_MIX_FULL = ((100, 8), (10, 100))

JSON = dict[str, Any]


@dataclass
class Workload:
    name: str
    nodes: list[JSON]
    pods: list[JSON]
    classes: Counter[str] = field(default_factory=Counter)
    slices: list[JSON] = field(default_factory=list)
    """ResourceSlices (cluster-scoped, labelled with the run): created after the nodes."""
    device_classes: list[JSON] = field(default_factory=list)
    """DeviceClasses (cluster-scoped, named and labelled after the run)."""
    claim_templates: list[JSON] = field(default_factory=list)
    """ResourceClaimTemplates, created in the round's namespace before the pods."""
    init_pods: list[JSON] = field(default_factory=list)
    """Upstream's ``initPods``: created and bound before the measured phase, not measured."""
    gated_pods: list[JSON] = field(default_factory=list)
    """Pods with schedulingGates, created before the init pods; they must stay pending."""
    priority_classes: list[JSON] = field(default_factory=list)
    """PriorityClasses (cluster-scoped, named and labelled after the run)."""
    churn: Churn | None = None
    """What happens beside the measured pods while they are scheduled."""
    pod_groups: list[JSON] = field(default_factory=list)
    """PodGroups (scheduling.k8s.io/v1beta1), created in the round's namespace before the pods."""
    steps: tuple[script.Step, ...] = ()
    """A script (:mod:`bench.script`) run instead of the burst: it creates ``pods`` itself."""
    checks: dict[str, Callable[[Sequence[JSON], Sequence[JSON]], int]] = field(default_factory=dict)
    """More placement checks, by name: (every node of the round, final pods) -> violations
    (:mod:`bench.perf_checks`)."""
    namespace_labels: dict[str, str] = field(default_factory=dict)
    """Labels of the round's namespace (what a ``namespaceSelector`` of the pods selects)."""

    def gang_members(self) -> dict[str, list[str]]:
        """PodGroup name -> its measured pods' names (``spec.schedulingGroup.podGroupName``)."""
        out: dict[str, list[str]] = {pg["metadata"]["name"]: [] for pg in self.pod_groups}
        for p in self.pods:
            group = (p["spec"].get("schedulingGroup") or {}).get("podGroupName")
            if group in out:
                out[group].append(p["metadata"]["name"])
        return out


@dataclass(frozen=True)
class Churn:
    """Background activity during the measured phase (run by the harness, the same for both).

    - ``recreate`` (upstream's churn op, mode recreate): every ``interval_s`` a node no pod fits
      on (``pods: 0``), a pod that never fits and a Service are created, and the previous ones deleted.
    - ``create`` (mode create): every ``interval_s`` one more pod that never fits (``fits``: one
      that does, by preempting: it is not judged by ``unschedulable_bound``).
    - ``delete-init``: the init pods deleted at ``per_second`` (upstream's deletePods op).
    """

    mode: str
    interval_s: float = 1.0
    per_second: float = 50.0
    pod: JSON | None = None
    fits: bool = False
    node: JSON | None = None
    service: JSON | None = None


def node_name(run_id: str, i: int) -> str:
    return f"bench-{run_id}-n{i:05d}"


def _node(run_id: str, i: int, *, extra_labels: Mapping[str, str] | None = None) -> JSON:
    name = node_name(run_id, i)
    cpu, mem = NODE_SHAPES[(i // len(ZONES)) % len(NODE_SHAPES)]
    alloc = {"cpu": cpu, "memory": mem, "pods": "110", "ephemeral-storage": "100Gi"}
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "labels": {
                HOST_KEY: name,
                "kubernetes.io/os": "linux",
                "kubernetes.io/arch": "amd64",
                ZONE_KEY: ZONES[i % len(ZONES)],
                RUN_LABEL: run_id,
                **(extra_labels or {}),
            },
        },
        "spec": {"taints": []},
        "status": {"capacity": dict(alloc), "allocatable": dict(alloc)},
    }


def _pod(
    idx: int,
    rng: random.Random,
    cls: str,
    *,
    extra_requests: Mapping[str, str] | None = None,
    **spec: Any,
) -> JSON:
    requests = {"cpu": rng.choice(POD_CPUS), "memory": rng.choice(POD_MEMS), **(extra_requests or {})}
    resources: JSON = {"requests": requests}
    if extra_requests:
        resources["limits"] = dict(extra_requests)  # extended resources: limits == requests
    app = spec.pop("app", cls)
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": f"p{idx:06d}", "labels": {"app": app, ROLE_LABEL: cls}},
        "spec": {
            "containers": [{"name": "app", "image": PAUSE_IMAGE, "resources": resources}],
            "terminationGracePeriodSeconds": 0,
            **spec,
        },
    }


def plain(n_nodes: int, n_pods: int, run_id: str, seed: int = 1) -> Workload:
    rng = random.Random(seed)
    nodes = [_node(run_id, i) for i in range(n_nodes)]
    pods = [_pod(i, rng, "plain") for i in range(n_pods)]
    return Workload("plain", nodes, pods, Counter(plain=n_pods))


DEDICATED_TAINT = {"key": "dedicated", "value": "infra", "effect": "NoSchedule"}
GPU_TAINT = {"key": GPU, "value": "present", "effect": "NoSchedule"}


def _required_affinity(key: str, values: list[str]) -> JSON:
    return {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [{"matchExpressions": [{"key": key, "operator": "In", "values": values}]}]
            }
        }
    }


def mixed(n_nodes: int, n_pods: int, run_id: str, seed: int = 1) -> Workload:
    rng = random.Random(seed)
    nodes = []
    tainted = 0
    for i in range(n_nodes):
        labels = {"disktype": "ssd"} if i % 2 == 0 else {}
        if i % 5 == 4:
            labels["dedicated"] = "infra"
        node = _node(run_id, i, extra_labels=labels)
        if i % 5 == 4:
            node["spec"]["taints"] = [dict(DEDICATED_TAINT)]
            tainted += 1
        nodes.append(node)
    untainted = n_nodes - tainted
    n_web = n_pods * 30 // 100
    n_ssd = n_pods * 20 // 100
    n_infra = n_pods * 15 // 100 if tainted else 0
    n_cache = min(n_pods * 10 // 100, untainted // 2)
    classes = ["web"] * n_web + ["ssd"] * n_ssd + ["infra"] * n_infra + ["cache"] * n_cache
    classes += ["batch"] * (n_pods - len(classes))
    rng.shuffle(classes)
    pods = []
    for i, cls in enumerate(classes):
        if cls == "web":
            spread = [
                {
                    "maxSkew": 1,
                    "topologyKey": ZONE_KEY,
                    "whenUnsatisfiable": "DoNotSchedule",
                    "labelSelector": {"matchLabels": {"app": "web"}},
                }
            ]
            pods.append(_pod(i, rng, cls, topologySpreadConstraints=spread))
        elif cls == "ssd":
            pods.append(_pod(i, rng, cls, affinity=_required_affinity("disktype", ["ssd"])))
        elif cls == "infra":
            tol = [{"key": "dedicated", "operator": "Equal", "value": "infra", "effect": "NoSchedule"}]
            pods.append(_pod(i, rng, cls, tolerations=tol, affinity=_required_affinity("dedicated", ["infra"])))
        elif cls == "cache":
            anti = {
                "podAntiAffinity": {
                    "requiredDuringSchedulingIgnoredDuringExecution": [
                        {"labelSelector": {"matchLabels": {"app": "cache"}}, "topologyKey": HOST_KEY}
                    ]
                }
            }
            pods.append(_pod(i, rng, cls, affinity=anti))
        else:
            pods.append(_pod(i, rng, cls))
    return Workload("mixed", nodes, pods, Counter(classes))


def gpu(n_nodes: int, n_pods: int, run_id: str, seed: int = 1) -> Workload:
    rng = random.Random(seed)
    nodes = []
    gpu_nodes = 0
    for i in range(n_nodes):
        is_gpu = i % 10 == 9 or (n_nodes < 10 and i == n_nodes - 1)
        node = _node(run_id, i, extra_labels={"nvidia.com/gpu.present": "true"} if is_gpu else None)
        if is_gpu:
            node["status"]["capacity"][GPU] = "8"
            node["status"]["allocatable"][GPU] = "8"
            node["spec"]["taints"] = [dict(GPU_TAINT)]
            gpu_nodes += 1
        nodes.append(node)
    # Keep GPU demand at most ~80 % of GPU capacity (1.5 GPUs per GPU pod on average).
    n_gpu = min(n_pods * 20 // 100, int(gpu_nodes * 8 * 0.8 / 1.5))
    classes = ["gpu"] * n_gpu + ["cpu"] * (n_pods - n_gpu)
    rng.shuffle(classes)
    pods = []
    tol = [{"key": GPU, "operator": "Exists", "effect": "NoSchedule"}]
    for i, cls in enumerate(classes):
        if cls == "gpu":
            pods.append(_pod(i, rng, cls, extra_requests={GPU: str(rng.choice((1, 2)))}, tolerations=tol))
        else:
            pods.append(_pod(i, rng, cls))
    return Workload("gpu", nodes, pods, Counter(classes))


def dra(n_nodes: int, n_pods: int, run_id: str, seed: int = 1) -> Workload:
    rng = random.Random(seed)
    nodes = [_node(run_id, i) for i in range(n_nodes)]
    class_name = f"bench-gpu-{run_id}"
    slices: list[JSON] = []
    for i, node in enumerate(nodes):
        if i % 2 == 0 and n_nodes > 1:
            continue  # every other node is a GPU node
        name = node["metadata"]["name"]
        n = rng.randint(4, 8)
        devices = [
            {"name": f"gpu-{d}", "attributes": {"model": {"string": "a100"}, "index": {"int": d}}} for d in range(n)
        ]
        slices.append(
            {
                "apiVersion": "resource.k8s.io/v1",
                "kind": "ResourceSlice",
                "metadata": {"name": f"{name}-gpus", "labels": {RUN_LABEL: run_id}},
                "spec": {
                    "driver": DRA_DRIVER,
                    "nodeName": name,
                    "pool": {"name": name, "generation": 1, "resourceSliceCount": 1},
                    "devices": devices,
                },
            }
        )
    device_class: JSON = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "DeviceClass",
        "metadata": {"name": class_name, "labels": {RUN_LABEL: run_id}},
        "spec": {"selectors": [{"cel": {"expression": f'device.driver == "{DRA_DRIVER}"'}}]},
    }
    template: JSON = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": DRA_TEMPLATE},
        "spec": {"spec": {"devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": class_name}}]}}},
    }
    gpus = sum(len(sl["spec"]["devices"]) for sl in slices)
    n_gpu = min(n_pods * 80 // 100, int(gpus * 0.9))
    classes = ["gpu"] * n_gpu + ["cpu"] * (n_pods - n_gpu)
    rng.shuffle(classes)
    pods = []
    for i, cls in enumerate(classes):
        if cls == "gpu":
            pod = _pod(i, rng, cls, resourceClaims=[{"name": "gpu", "resourceClaimTemplateName": DRA_TEMPLATE}])
            pod["spec"]["containers"][0]["resources"]["claims"] = [{"name": "gpu"}]
            pods.append(pod)
        else:
            pods.append(_pod(i, rng, cls))
    return Workload("dra", nodes, pods, Counter(classes), slices, [device_class], [template])


def dra_partitions(n_nodes: int, n_pods: int, run_id: str, seed: int = 1) -> Workload:
    rng = random.Random(seed)
    nodes = [_node(run_id, i) for i in range(n_nodes)]
    names = [n["metadata"]["name"] for n in nodes]
    slices = dra_parts.slices(names, (RUN_LABEL, run_id))
    classes = dra_parts.pod_classes(n_nodes, n_pods)
    rng.shuffle(classes)
    pods = []
    for i, cls in enumerate(classes):
        if cls == "cpu":
            pods.append(_pod(i, rng, cls))
            continue
        pod = _pod(i, rng, cls, resourceClaims=[{"name": "dev", "resourceClaimTemplateName": cls}])
        pod["spec"]["containers"][0]["resources"]["claims"] = [{"name": "dev"}]
        pods.append(pod)
    device_classes = dra_parts.device_classes(run_id, (RUN_LABEL, run_id))
    templates = dra_parts.templates(run_id)
    return Workload("dra-partitions", nodes, pods, Counter(classes), slices, device_classes, templates)


POOLS = (("general", "8", "32Gi"), ("highmem", "16", "128Gi"), ("compute", "32", "64Gi"), ("spot", "8", "32Gi"))
SPOT_TAINT = {"key": "spot", "value": "true", "effect": "NoSchedule"}


def pools(n_nodes: int, n_pods: int, run_id: str, seed: int = 1) -> Workload:
    """Node pools (label ``pool``): general, highmem, compute and a tainted spot pool, a quarter of
    the nodes each. Pods: 30 % pinned to a pool by nodeSelector, 20 % requiring highmem or compute
    by node affinity, 20 % tolerating spot and preferring it (weight 50), the rest anywhere."""
    rng = random.Random(seed)
    nodes = []
    for i in range(n_nodes):
        pool, cpu, mem = POOLS[i % len(POOLS)]
        node = _node(run_id, i, extra_labels={"pool": pool})
        alloc = {"cpu": cpu, "memory": mem, "pods": "110", "ephemeral-storage": "100Gi"}
        node["status"] = {"capacity": dict(alloc), "allocatable": dict(alloc)}
        if pool == "spot":
            node["spec"]["taints"] = [dict(SPOT_TAINT)]
        nodes.append(node)
    n_pinned, n_big, n_spot = n_pods * 30 // 100, n_pods * 20 // 100, n_pods * 20 // 100
    classes = ["pinned"] * n_pinned + ["big"] * n_big + ["spot"] * n_spot
    classes += ["any"] * (n_pods - len(classes))
    rng.shuffle(classes)
    pods = []
    for i, cls in enumerate(classes):
        if cls == "pinned":
            pods.append(_pod(i, rng, cls, nodeSelector={"pool": rng.choice(("general", "highmem", "compute"))}))
        elif cls == "big":
            pods.append(_pod(i, rng, cls, affinity=_required_affinity("pool", ["highmem", "compute"])))
        elif cls == "spot":
            pref = {
                "nodeAffinity": {
                    "preferredDuringSchedulingIgnoredDuringExecution": [
                        {
                            "weight": 50,
                            "preference": {"matchExpressions": [{"key": "pool", "operator": "In", "values": ["spot"]}]},
                        }
                    ]
                }
            }
            tol = [{"key": "spot", "operator": "Equal", "value": "true", "effect": "NoSchedule"}]
            pods.append(_pod(i, rng, cls, tolerations=tol, affinity=pref))
        else:
            pods.append(_pod(i, rng, cls))
    return Workload("pools", nodes, pods, Counter(classes))


# -- upstream's scheduler_perf shapes ---------------------------------------------------------------
#
# Templates (test/integration/scheduler_perf/templates, v1.37.2): node-default is 4 CPU, 32Gi,
# 110 pods; pod-default requests (and limits) 100m / 500Mi. Init and measured counts keep
# upstream's ratios to --pods (the measured count); --nodes is initNodes.

UPSTREAM_NODE = {"cpu": "4", "memory": "32Gi", "pods": "110"}


def _upstream_node(run_id: str, i: int, labels: Mapping[str, str] | None = None, pods: str = "110") -> JSON:
    """node-default: no zone label unless ``labels`` has one (labelNodePrepareStrategy)."""
    name = node_name(run_id, i)
    alloc = {**UPSTREAM_NODE, "pods": pods}
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": {HOST_KEY: name, RUN_LABEL: run_id, **(labels or {})}},
        "spec": {"taints": []},
        "status": {"capacity": dict(alloc), "allocatable": dict(alloc)},
    }


def _upstream_pod(
    name: str, cls: str, *, cpu: str = "100m", mem: str = "500Mi", limits: bool = True, **spec: Any
) -> JSON:
    """pod-default and its variants (one pause container, requests == limits unless told)."""
    labels = {ROLE_LABEL: cls, **spec.pop("labels", {})}
    resources: JSON = {"requests": {"cpu": cpu, "memory": mem}} if cpu or mem else {}
    if limits and resources:
        resources["limits"] = dict(resources["requests"])
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": labels},
        "spec": {
            "containers": [{"name": "pause", "image": PAUSE_IMAGE, "resources": resources}],
            "terminationGracePeriodSeconds": 0,
            **spec,
        },
    }


def _priority_class(run_id: str, value: int) -> JSON:
    return {
        "apiVersion": "scheduling.k8s.io/v1",
        "kind": "PriorityClass",
        "metadata": {"name": priority_class_name(run_id, value), "labels": {RUN_LABEL: run_id}},
        "value": value,
    }


def priority_class_name(run_id: str, value: int) -> str:
    """Upstream's templates set ``spec.priority``; a real API server's Priority admission only
    takes it from a PriorityClass, so each priority is one class per run."""
    return f"bench-{run_id}-p{value}"


def _never_fits(run_id: str) -> JSON:
    """pod-high-priority-large-cpu: 9 CPUs on 4-CPU nodes, priority 10 (preemption is tried, in vain)."""
    return _upstream_pod(
        "churn", "never-fits", cpu="9", limits=False, priorityClassName=priority_class_name(run_id, 10)
    )


def _upstream(name: str, init: list[JSON], measured: list[JSON], nodes: list[JSON], **kw: Any) -> Workload:
    classes = Counter(p["metadata"]["labels"][ROLE_LABEL] for p in measured)
    return Workload(name, nodes, measured, classes, init_pods=init, **kw)


def scheduling_basic(n_nodes: int, n_pods: int, run_id: str, seed: int = 1) -> Workload:
    """SchedulingBasic (500Nodes: 500 init, 1000 measured): pod-default throughout."""
    nodes = [_upstream_node(run_id, i) for i in range(n_nodes)]
    init = [_upstream_pod(f"i{i:06d}", "init") for i in range(n_pods // 2)]
    return _upstream("SchedulingBasic", init, [_upstream_pod(f"p{i:06d}", "basic") for i in range(n_pods)], nodes)


def _anti_affinity_term() -> JSON:
    return {
        "podAntiAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": [
                {"labelSelector": {"matchLabels": {"color": "green"}}, "topologyKey": HOST_KEY}
            ]
        }
    }


def scheduling_pod_anti_affinity(n_nodes: int, n_pods: int, run_id: str, seed: int = 1) -> Workload:
    """SchedulingPodAntiAffinity (500Nodes: 100 init, 400 measured): every pod green with required
    anti-affinity to green on the hostname, so at most one per node: the measured count is capped
    at the nodes the init pods leave."""
    nodes = [_upstream_node(run_id, i) for i in range(n_nodes)]
    n_init = min(n_pods // 4, n_nodes // 5)
    n_measured = max(0, min(n_pods, n_nodes - n_init))

    def mk(name: str, cls: str) -> JSON:
        return _upstream_pod(name, cls, labels={"color": "green"}, affinity=_anti_affinity_term())

    init = [mk(f"i{i:06d}", "init") for i in range(n_init)]
    return _upstream("SchedulingPodAntiAffinity", init, [mk(f"p{i:06d}", "anti") for i in range(n_measured)], nodes)


def topology_spreading(n_nodes: int, n_pods: int, run_id: str, seed: int = 1) -> Workload:
    """TopologySpreading (500Nodes: 1000 init pod-default, 1000 measured): nodes over zones
    moon-1..3, measured pods blue with a zone spread, maxSkew 5, DoNotSchedule."""
    nodes = [_upstream_node(run_id, i, {ZONE_KEY: f"moon-{i % 3 + 1}"}) for i in range(n_nodes)]
    init = [_upstream_pod(f"i{i:06d}", "init") for i in range(n_pods)]
    spread = [
        {
            "maxSkew": 5,
            "topologyKey": ZONE_KEY,
            "whenUnsatisfiable": "DoNotSchedule",
            "labelSelector": {"matchLabels": {"color": "blue"}},
        }
    ]
    measured = [
        _upstream_pod(f"p{i:06d}", "spread", labels={"color": "blue"}, topologySpreadConstraints=spread)
        for i in range(n_pods)
    ]
    return _upstream("TopologySpreading", init, measured, nodes)


def scheduling_node_affinity(n_nodes: int, n_pods: int, run_id: str, seed: int = 1) -> Workload:
    """SchedulingNodeAffinity (500Nodes: 500 init, 1000 measured): every node labelled zone1 (as
    upstream's labelNodePrepareStrategy), pods requiring zone In [zone1, zone2]."""
    nodes = [_upstream_node(run_id, i, {ZONE_KEY: "zone1"}) for i in range(n_nodes)]
    aff = _required_affinity(ZONE_KEY, ["zone1", "zone2"])
    init = [_upstream_pod(f"i{i:06d}", "init", affinity=aff) for i in range(n_pods // 2)]
    measured = [_upstream_pod(f"p{i:06d}", "node-affinity", affinity=aff) for i in range(n_pods)]
    return _upstream("SchedulingNodeAffinity", init, measured, nodes)


def scheduling_preferred_pod_affinity(n_nodes: int, n_pods: int, run_id: str, seed: int = 1) -> Workload:
    """SchedulingPreferredPodAffinity (500Nodes: 500 init, 1000 measured): red pods preferring
    (weight 1) nodes with red pods on the hostname."""
    nodes = [_upstream_node(run_id, i) for i in range(n_nodes)]
    aff = {
        "podAffinity": {
            "preferredDuringSchedulingIgnoredDuringExecution": [
                {
                    "weight": 1,
                    "podAffinityTerm": {"labelSelector": {"matchLabels": {"color": "red"}}, "topologyKey": HOST_KEY},
                }
            ]
        }
    }

    def mk(name: str, cls: str) -> JSON:
        return _upstream_pod(name, cls, labels={"color": "red"}, affinity=aff)

    init = [mk(f"i{i:06d}", "init") for i in range(n_pods // 2)]
    return _upstream(
        "SchedulingPreferredPodAffinity", init, [mk(f"p{i:06d}", "preferred") for i in range(n_pods)], nodes
    )


def preemption_basic(n_nodes: int, n_pods: int, run_id: str, seed: int = 1) -> Workload:
    """PreemptionBasic (1000Nodes: 4000 init, 1000 measured): 4 low-priority 900m pods per node
    fill 3.6 of its 4 CPUs, each measured pod (3970m, priority 9999999) must preempt a node's
    four: the measured count is capped at one per node."""
    nodes = [_upstream_node(run_id, i) for i in range(n_nodes)]
    low = priority_class_name(run_id, 0)
    high = priority_class_name(run_id, 9999999)
    init = [_upstream_pod(f"i{i:06d}", "low", cpu="900m", priorityClassName=low) for i in range(4 * n_nodes)]
    measured = [
        _upstream_pod(f"p{i:06d}", "high", cpu="3970m", priorityClassName=high) for i in range(min(n_pods, n_nodes))
    ]
    pcs = [_priority_class(run_id, 0), _priority_class(run_id, 9999999)]
    return _upstream("PreemptionBasic", init, measured, nodes, priority_classes=pcs)


def unschedulable(n_nodes: int, n_pods: int, run_id: str, seed: int = 1) -> Workload:
    """Unschedulable (500Nodes/10Init/1kPods): pod-default measured pods while a pod that never
    fits (9 CPUs, priority 10) is added every 200 ms and stays pending."""
    nodes = [_upstream_node(run_id, i) for i in range(n_nodes)]
    init = [_upstream_pod(f"i{i:06d}", "init") for i in range(max(1, n_pods // 100))]
    measured = [_upstream_pod(f"p{i:06d}", "basic") for i in range(n_pods)]
    churn = Churn("create", interval_s=0.2, pod=_never_fits(run_id))
    return _upstream(
        "Unschedulable", init, measured, nodes, churn=churn, priority_classes=[_priority_class(run_id, 10)]
    )


def scheduling_with_mixed_churn(n_nodes: int, n_pods: int, run_id: str, seed: int = 1) -> Workload:
    """SchedulingWithMixedChurn (1000Nodes: 1000 measured): pod-default measured pods while every
    second a node (``pods: 0``), a pod that never fits and a Service replace the previous ones."""
    nodes = [_upstream_node(run_id, i) for i in range(n_nodes)]
    measured = [_upstream_pod(f"p{i:06d}", "basic") for i in range(n_pods)]
    churn_node = _upstream_node(run_id, 0, pods="0")
    churn_node["metadata"]["labels"][ROLE_LABEL] = "churn"
    service = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": "churn"},
        "spec": {"selector": {"app": "foo"}, "ports": [{"protocol": "TCP", "port": 8080, "targetPort": 8080}]},
    }
    churn = Churn("recreate", interval_s=1.0, pod=_never_fits(run_id), node=churn_node, service=service)
    return _upstream(
        "SchedulingWithMixedChurn", [], measured, nodes, churn=churn, priority_classes=[_priority_class(run_id, 10)]
    )


def scheduling_while_gated(n_nodes: int, n_pods: int, run_id: str, seed: int = 1) -> Workload:
    """SchedulingWhileGated (1Node_10000GatedPods: 10000 gated, 20000 deleting, 20000 measured):
    light pods (no requests); the gated ones stay in the queue to the end while the init pods are
    deleted at 50/s during the measured phase. Nodes take upstream's pod count (90000) as one
    node would; here there are --nodes of them."""
    nodes = [_upstream_node(run_id, i, pods="90000") for i in range(n_nodes)]
    gate = [{"name": "test.k8s.io/hold"}]
    gated = [_upstream_pod(f"g{i:06d}", "gated", cpu="", mem="", schedulingGates=gate) for i in range(n_pods // 2)]
    init = [_upstream_pod(f"i{i:06d}", "deleting", cpu="", mem="") for i in range(n_pods)]
    measured = [_upstream_pod(f"p{i:06d}", "light", cpu="", mem="") for i in range(n_pods)]
    return _upstream(
        "SchedulingWhileGated", init, measured, nodes, gated_pods=gated, churn=Churn("delete-init", per_second=50.0)
    )


GANG_NODE_SHAPES = (("4", "16Gi"), ("8", "32Gi"))


def gang_mix(n_pods: int) -> tuple[tuple[int, int], ...]:
    """The default (gangs, size) mix for ``n_pods``: the two full-size shapes (GANG_MIX_FULL: ten
    gangs of 8 per gang of 100, the large ones holding 5/9 of the pods) scaled by ``n_pods / 1800``.
    Below 180 pods one large gang remains and shrinks to 5/9 of the pods, so a smoke size still has
    one gang much larger than the rest."""
    (_, small), (_, large) = GANG_MIX_FULL
    n_large = max(1, round(n_pods / 180))
    size_large = max(2, min(large, (n_pods * 5 // 9) // n_large))
    n_small = max(1, (n_pods - n_large * size_large) // small)
    return ((n_small, small), (n_large, size_large))


def parse_gang_mix(text: str) -> tuple[tuple[int, int], ...]:
    """``"100x8,10x100"`` -> ((100, 8), (10, 100)); empty -> empty (use :func:`gang_mix`)."""
    out = []
    for part in (p.strip() for p in text.split(",")):
        if not part:
            continue
        count, sep, size = part.partition("x")
        if not sep or not count.isdigit() or not size.isdigit() or int(count) < 1 or int(size) < 1:
            raise ValueError(f"gang mix {text!r}: want COUNTxSIZE[,COUNTxSIZE...], e.g. 100x8,10x100")
        out.append((int(count), int(size)))
    return tuple(out)


def _pod_group(name: str, min_count: int) -> JSON:
    return {
        "apiVersion": "scheduling.k8s.io/v1beta1",
        "kind": "PodGroup",
        "metadata": {"name": name},
        "spec": {"schedulingPolicy": {"gang": {"minCount": min_count}}},
    }


def gang_member(name: str, group: str) -> JSON:
    """A 1-CPU / 1Gi member of ``group`` (``spec.schedulingGroup``: the native API, no label)."""
    pod = _upstream_pod(name, "gang", cpu="1", mem="1Gi", limits=False, labels={"gang": group})
    pod["spec"]["schedulingGroup"] = {"podGroupName": group}
    return pod


def gangs(n_nodes: int, n_pods: int, run_id: str, seed: int = 1, mix: Sequence[tuple[int, int]] = ()) -> Workload:
    """Gangs of the native API: per gang a PodGroup with ``minCount`` = its size, then its members.

    ``mix`` is (gangs, size) pairs (default :func:`gang_mix` of ``n_pods``). The gangs' order is
    shuffled with the seed, so the large ones are spread through the burst, but a gang's members
    are created one after the other (as a Job controller would). Nodes alternate 4 and 8 CPUs
    (16/32Gi) over three zones, every member asks for 1 CPU and 1Gi: nothing here is about fitting,
    only about placing whole gangs."""
    rng = random.Random(seed)
    shapes = [size for count, size in (mix or gang_mix(n_pods)) for _ in range(count)]
    rng.shuffle(shapes)
    nodes = []
    for i in range(n_nodes):
        node = _node(run_id, i)
        cpu, mem = GANG_NODE_SHAPES[i % len(GANG_NODE_SHAPES)]
        alloc = {"cpu": cpu, "memory": mem, "pods": "110", "ephemeral-storage": "100Gi"}
        node["status"] = {"capacity": dict(alloc), "allocatable": dict(alloc)}
        nodes.append(node)
    groups, pods = [], []
    for g, size in enumerate(shapes):
        group = f"g{g:03d}-of-{size}"
        groups.append(_pod_group(group, size))
        pods += [gang_member(f"{group}-m{m:03d}", group) for m in range(size)]
    classes = Counter(f"gang-of-{size}" for size in shapes)
    return Workload("gangs", nodes, pods, classes, pod_groups=groups)


#: Workloads run only by name (not in WORKLOADS, so not part of ``--workload all`` nor the smoke suite).
BY_NAME_ONLY = (topo.NAME,)


def topology_gangs(n_nodes: int, n_pods: int, run_id: str, seed: int = 1) -> Workload:
    """GPU gangs of 8-128 members on a zone ⊃ block ⊃ rack cluster (:mod:`bench.topology`).

    Each node has 8 GPUs, 64 CPUs and 512Gi; each gang's PodGroup requires one block through the
    native ``spec.schedulingConstraints.topology`` (what kube-scheduler's TopologyPlacementGenerator
    reads) and prefers one rack through ``custom-scheduler.io/topology-preferred`` (ours; upstream
    has no preferred level). Members ask for 1 CPU, 4Gi and 1-8 GPUs (one size per gang)."""
    rng = random.Random(seed)
    shapes = topo.gang_shapes(n_pods, n_nodes, seed)
    rng.shuffle(shapes)
    alloc = {"cpu": "64", "memory": "512Gi", "pods": "110", topo.GPU: str(topo.GPUS_PER_NODE)}
    nodes = []
    for i in range(n_nodes):
        node = _upstream_node(run_id, i, topo.node_levels(i, n_nodes))
        node["status"] = {"capacity": dict(alloc), "allocatable": dict(alloc)}
        nodes.append(node)
    groups, pods = [], []
    for g, (size, gpus) in enumerate(shapes):
        group = f"t{g:03d}-of-{size}x{gpus}"
        pg = _pod_group(group, size)
        pg["metadata"]["annotations"] = {ANN_TOPOLOGY_PREFERRED: topo.PREFERRED}
        pg["spec"]["schedulingConstraints"] = {"topology": [{"key": topo.REQUIRED}]}
        groups.append(pg)
        for m in range(size):
            pod = _upstream_pod(f"{group}-m{m:03d}", "topology-gang", cpu="1", mem="4Gi", labels={"gang": group})
            res = pod["spec"]["containers"][0]["resources"]
            res["requests"][topo.GPU] = res["limits"][topo.GPU] = str(gpus)
            pod["spec"]["schedulingGroup"] = {"podGroupName": group}
            pods.append(pod)
    classes = Counter(f"gang-of-{size}" for size, _ in shapes)
    return Workload(topo.NAME, nodes, pods, classes, pod_groups=groups)


BUILDERS: dict[str, Callable[[int, int, str, int], Workload]] = {
    "SchedulingBasic": scheduling_basic,
    "SchedulingPodAntiAffinity": scheduling_pod_anti_affinity,
    "TopologySpreading": topology_spreading,
    "SchedulingNodeAffinity": scheduling_node_affinity,
    "SchedulingPreferredPodAffinity": scheduling_preferred_pod_affinity,
    "PreemptionBasic": preemption_basic,
    "Unschedulable": unschedulable,
    "SchedulingWithMixedChurn": scheduling_with_mixed_churn,
    "SchedulingWhileGated": scheduling_while_gated,
    "plain": plain,
    "mixed": mixed,
    "gpu": gpu,
    "pools": pools,
    "dra": dra,
    "dra-partitions": dra_partitions,
    "gangs": gangs,
}


def build(
    name: str, n_nodes: int, n_pods: int, run_id: str, seed: int = 1, *, gang_mix: Sequence[tuple[int, int]] = ()
) -> Workload:
    """The workload ``name``; ``gang_mix`` overrides the gangs workload's (gangs, size) pairs."""
    if name == "gangs":
        return gangs(n_nodes, n_pods, run_id, seed, gang_mix)
    if name == topo.NAME:
        return topology_gangs(n_nodes, n_pods, run_id, seed)
    fn = BUILDERS.get(name) or more_builders().get(name)
    if fn is None:
        raise ValueError(f"unknown workload {name!r} (choose from {', '.join(WORKLOADS)})")
    return fn(n_nodes, n_pods, run_id, seed)


def more_builders() -> dict[str, Callable[[int, int, str, int], Workload]]:
    """The builders of UPSTREAM_MORE, imported here (their modules build on this one)."""
    from bench import perf_event_handling, perf_more  # they import this module

    return {**perf_event_handling.BUILDERS, **perf_more.BUILDERS}


def for_scheduler(pods: Iterable[JSON], scheduler_name: str, namespace: str) -> list[JSON]:
    """The pods with ``schedulerName`` and namespace set (shallow copies of the top levels)."""
    out = []
    for p in pods:
        q = {**p, "metadata": {**p["metadata"], "namespace": namespace}, "spec": {**p["spec"]}}
        q["spec"]["schedulerName"] = scheduler_name
        out.append(q)
    return out


# -- placement quality and constraint checks --------------------------------------------------------


def _requests(pod: JSON) -> dict[str, int]:
    total: dict[str, int] = defaultdict(int)
    for c in pod["spec"].get("containers") or ():
        for k, v in ((c.get("resources") or {}).get("requests") or {}).items():
            total[k] += quantity.to_milli(v) if k == "cpu" else quantity.to_int(v)
    return total


def _alloc(node: JSON) -> dict[str, int]:
    return {
        k: quantity.to_milli(v) if k == "cpu" else quantity.to_int(v)
        for k, v in (node["status"].get("allocatable") or {}).items()
    }


def _tolerates(tolerations: list[JSON], taint: JSON) -> bool:
    for t in tolerations:
        if t.get("effect") and t["effect"] != taint["effect"]:
            continue
        op = t.get("operator") or "Equal"
        if not t.get("key"):
            if op == "Exists":
                return True
            continue
        if t["key"] != taint["key"]:
            continue
        if op == "Exists" or (t.get("value") or "") == (taint.get("value") or ""):
            return True
    return False


def _node_tolerated(pod: JSON, node: JSON) -> bool:
    """Every NoSchedule/NoExecute taint of ``node`` tolerated (a spread's ``nodeTaintsPolicy: Honor``)."""
    tol = pod["spec"].get("tolerations") or []
    taints = node["spec"].get("taints") or []
    return all(_tolerates(tol, t) for t in taints if t.get("effect") in ("NoSchedule", "NoExecute"))


def _expr_ok(labels: Mapping[str, str], e: JSON) -> bool:
    op, key, values = e["operator"], e["key"], e.get("values") or []
    if op == "In":
        return key in labels and labels[key] in values
    if op == "NotIn":
        return labels.get(key) not in values
    if op == "Exists":
        return key in labels
    if op == "DoesNotExist":
        return key not in labels
    raise ValueError(f"operator {op} is not checked by the benchmark")


def _node_affinity_ok(pod: JSON, labels: Mapping[str, str], name: str = "") -> bool:
    """nodeSelector and required node affinity; ``matchFields`` on ``metadata.name`` (the only
    field the API allows) against ``name``."""
    sel = pod["spec"].get("nodeSelector") or {}
    if any(labels.get(k) != v for k, v in sel.items()):
        return False
    req = ((pod["spec"].get("affinity") or {}).get("nodeAffinity") or {}).get(
        "requiredDuringSchedulingIgnoredDuringExecution"
    )
    if not req:
        return True
    fields = {"metadata.name": name}
    return any(
        all(_expr_ok(labels, e) for e in term.get("matchExpressions") or ())
        and all(_expr_ok(fields, e) for e in term.get("matchFields") or ())
        for term in req["nodeSelectorTerms"]
    )


def _matches(selector: JSON, labels: Mapping[str, str]) -> bool:
    if any(labels.get(k) != v for k, v in (selector.get("matchLabels") or {}).items()):
        return False
    return all(_expr_ok(labels, e) for e in selector.get("matchExpressions") or ())


def _pstdev(xs: list[float]) -> float:
    return statistics.pstdev(xs) if len(xs) > 1 else 0.0


def dra_violations(pods: list[JSON], claims: list[JSON], slices: list[JSON]) -> Counter[str]:
    """The DRA_CHECKS over the final pods and claims (``slices``: where each device is)."""
    where: dict[tuple[str, str, str], str] = {}
    for sl in slices:
        spec = sl["spec"]
        for d in spec.get("devices") or ():
            where[(spec["driver"], spec["pool"]["name"], d["name"])] = spec.get("nodeName") or ""
    by_name = {p["metadata"]["name"]: p for p in pods}
    out: Counter[str] = Counter()
    seen: Counter[tuple[str, str, str]] = Counter()
    allocated: dict[str, JSON] = {}
    for c in claims:
        st = c.get("status") or {}
        alloc = st.get("allocation")
        if not alloc:
            continue
        allocated[c["metadata"]["name"]] = c
        results = (alloc.get("devices") or {}).get("results") or ()
        ids = [(r["driver"], r["pool"], r["device"]) for r in results]
        seen.update(ids)
        for ref in st.get("reservedFor") or ():
            pod = by_name.get(ref.get("name", ""))
            node = pod["spec"].get("nodeName") if pod else None
            if node and any(where.get(d) != node for d in ids):
                out["dra_wrong_node"] += 1
    shared = dra_parts.shared_devices(slices)
    out["dra_double_allocation"] += sum(n - 1 for d, n in seen.items() if n > 1 and d not in shared)
    out.update(dra_parts.violations(claims, slices))
    for p in pods:
        if not p["spec"].get("nodeName") or not p["spec"].get("resourceClaims"):
            continue
        statuses = {
            s["name"]: s.get("resourceClaimName") for s in (p.get("status") or {}).get("resourceClaimStatuses") or ()
        }
        for rc in p["spec"]["resourceClaims"]:
            name = rc.get("resourceClaimName") or statuses.get(rc["name"])
            claim = allocated.get(name or "")
            reserved = (claim.get("status") or {}).get("reservedFor") or () if claim else ()
            if not any(r.get("uid") == p["metadata"].get("uid") for r in reserved):
                out["dra_unallocated"] += 1
    return out


def pending_violations(
    pods: Iterable[JSON], must_stay_pending: Mapping[str, Iterable[str]], churn_nodes: Iterable[str] = ()
) -> Counter[str]:
    """PENDING_CHECKS: ``must_stay_pending`` maps a check to the names of pods that must not be
    bound (gated ones: ``gated_bound``; ones that never fit: ``unschedulable_bound``); any pod on one
    of ``churn_nodes`` (they take no pods) is a ``churn_node`` violation."""
    out: Counter[str] = Counter()
    on = {p["metadata"]["name"]: p["spec"].get("nodeName") for p in pods}
    for check, names in must_stay_pending.items():
        out[check] += sum(1 for n in names if on.get(n))
    forbidden = set(churn_nodes)
    out["churn_node"] += sum(1 for node in on.values() if node in forbidden)
    return out


def _gpu_packing(per_node: Mapping[str, list[JSON]], by_name: Mapping[str, JSON]) -> dict[str, Any]:
    """Extended-resource GPUs: nodes with a GPU in use, and GPU nodes left entirely free (a whole
    free node is what a large job needs: more of them is tighter packing)."""
    used_nodes = free_nodes = 0
    for name, node_pods in per_node.items():
        cap = _alloc(by_name[name]).get(GPU, 0)
        if not cap:
            continue
        used = sum(_requests(p).get(GPU, 0) for p in node_pods)
        used_nodes += 1 if used else 0
        free_nodes += 0 if used else 1
    return {"gpu_nodes_used": used_nodes, "gpu_nodes_free": free_nodes}


def _dra_packing(claims: list[JSON], slices: Sequence[JSON]) -> dict[str, Any]:
    """DRA GPUs: nodes with an allocated device, and nodes whose slices' devices are all free."""
    node_of: dict[tuple[str, str, str], str] = {}
    for sl in slices:
        spec = sl["spec"]
        for d in spec.get("devices") or ():
            node_of[(spec["driver"], spec["pool"]["name"], d["name"])] = spec.get("nodeName") or ""
    used = set()
    for c in claims:
        alloc = (c.get("status") or {}).get("allocation") or {}
        for r in (alloc.get("devices") or {}).get("results") or ():
            used.add(node_of.get((r["driver"], r["pool"], r["device"]), ""))
    used.discard("")
    with_devices = {n for n in node_of.values() if n}
    return {"gpu_nodes_used": len(used), "gpu_nodes_free": len(with_devices - used)}


def placement(  # noqa: C901, PLR0912, PLR0915 -- one pass over the bound pods, one branch per rule checked (resources, taints, affinity, spread, gates, devices, gangs)
    nodes: list[JSON],
    pods: list[JSON],
    claims: list[JSON] | None = None,
    slices: Sequence[JSON] = (),
    *,
    must_stay_pending: Mapping[str, Iterable[str]] | None = None,
    churn_nodes: Iterable[str] = (),
) -> dict[str, Any]:
    """Quality numbers and constraint violations for the bound ``pods`` over ``nodes``; with
    ``claims`` (the dra workload) also the DRA_CHECKS, with ``must_stay_pending`` (gated pods, pods
    that never fit, churn nodes) the PENDING_CHECKS."""
    by_name = {n["metadata"]["name"]: n for n in nodes}
    bound = [p for p in pods if p["spec"].get("nodeName") in by_name]
    per_node: dict[str, list[JSON]] = {name: [] for name in by_name}
    for p in bound:
        per_node[p["spec"]["nodeName"]].append(p)

    counts = [len(v) for v in per_node.values()]
    cpu_util, mem_util = [], []
    violations: Counter[str] = Counter()
    for name, node_pods in per_node.items():
        node = by_name[name]
        alloc = _alloc(node)
        used: dict[str, int] = defaultdict(int)
        for p in node_pods:
            for k, v in _requests(p).items():
                used[k] += v
        cpu_util.append(used["cpu"] / alloc["cpu"] if alloc.get("cpu") else 0.0)
        mem_util.append(used["memory"] / alloc["memory"] if alloc.get("memory") else 0.0)
        for k, v in used.items():
            if v > alloc.get(k, 0):
                violations["resources"] += 1
        if len(node_pods) > alloc.get("pods", 110):
            violations["resources"] += 1
        taints = [t for t in (node["spec"].get("taints") or []) if t.get("effect") in ("NoSchedule", "NoExecute")]
        labels = node["metadata"].get("labels") or {}
        for p in node_pods:
            tol = p["spec"].get("tolerations") or []
            if any(not _tolerates(tol, t) for t in taints):
                violations["taints"] += 1
            if not _node_affinity_ok(p, labels, name):
                violations["node_affinity"] += 1

    # Required anti-affinity: no other pod matching the term's selector in the pod's topology domain
    # (each offending pair is counted from both sides when both carry the term).
    def domain(pod: JSON, key: str) -> str | None:
        return (by_name[pod["spec"]["nodeName"]]["metadata"].get("labels") or {}).get(key)

    by_domain: dict[str, dict[str | None, list[JSON]]] = {}
    for p in bound:
        terms = ((p["spec"].get("affinity") or {}).get("podAntiAffinity") or {}).get(
            "requiredDuringSchedulingIgnoredDuringExecution"
        ) or []
        for term in terms:
            key = term["topologyKey"]
            if key not in by_domain:
                index: dict[str | None, list[JSON]] = defaultdict(list)
                for q in bound:
                    index[domain(q, key)].append(q)
                by_domain[key] = index
            for q in by_domain[key][domain(p, key)]:
                if q is p or q["metadata"].get("namespace") != p["metadata"].get("namespace"):
                    continue
                if _matches(term["labelSelector"], q["metadata"].get("labels") or {}):
                    violations["anti_affinity"] += 1

    # Topology spread (DoNotSchedule): skew over the domains of the nodes the pod may use.
    max_skews: dict[str, int] = {}
    seen: set[tuple[str, str]] = set()
    for p in bound:
        for c in p["spec"].get("topologySpreadConstraints") or ():
            if c.get("whenUnsatisfiable") != "DoNotSchedule":
                continue
            ident = (c["topologyKey"], repr(sorted((c["labelSelector"].get("matchLabels") or {}).items())))
            if ident in seen:
                continue
            seen.add(ident)
            key = c["topologyKey"]
            domains = {
                (n["metadata"].get("labels") or {})[key]
                for n in nodes
                if key in (n["metadata"].get("labels") or {})
                and _node_affinity_ok(p, n["metadata"]["labels"], n["metadata"]["name"])
                and (c.get("nodeTaintsPolicy") != "Honor" or _node_tolerated(p, n))
            }
            per_dom = dict.fromkeys(domains, 0)
            for q in bound:
                if q["metadata"].get("namespace") != p["metadata"].get("namespace"):
                    continue
                if not _matches(c["labelSelector"], q["metadata"].get("labels") or {}):
                    continue
                d = (by_name[q["spec"]["nodeName"]]["metadata"].get("labels") or {}).get(key)
                if d in per_dom:
                    per_dom[d] += 1
            # fewer domains than minDomains: the global minimum is 0 (PodTopologySpread's rule)
            floor = 0 if len(per_dom) < int(c.get("minDomains") or 1) else min(per_dom.values(), default=0)
            skew = max(per_dom.values()) - floor if per_dom else 0
            label = f"{key}/{ident[1]}"
            max_skews[label] = skew
            if skew > int(c["maxSkew"]):
                violations["topology_spread"] += 1

    checks: tuple[str, ...] = CHECKS
    packing = _gpu_packing(per_node, by_name)
    if claims is not None:
        violations.update(dra_violations(bound, claims, list(slices)))
        checks = checks + DRA_CHECKS
        packing = _dra_packing(claims, slices)
    if must_stay_pending is not None:
        violations.update(pending_violations(pods, must_stay_pending, churn_nodes))
        checks = checks + PENDING_CHECKS
    return {
        **packing,
        "bound_on_bench_nodes": len(bound),
        "nodes_used": sum(1 for c in counts if c),
        "pods_per_node_max": max(counts, default=0),
        "pods_per_node_stddev": _pstdev([float(c) for c in counts]),
        "cpu_util_mean": statistics.fmean(cpu_util) if cpu_util else 0.0,
        "cpu_util_max": max(cpu_util, default=0.0),
        "cpu_util_stddev": _pstdev(cpu_util),
        "mem_util_stddev": _pstdev(mem_util),
        "spread_skew": max_skews,
        "violations": {k: violations.get(k, 0) for k in checks},
        "violations_total": sum(violations.values()),
    }


def percentile(sorted_xs: list[float], q: float) -> float:
    """Nearest-rank percentile of an ascending list (``q`` in 0..100); NaN for an empty list."""
    if not sorted_xs:
        return math.nan
    k = max(0, min(len(sorted_xs) - 1, math.ceil(q / 100 * len(sorted_xs)) - 1))
    return sorted_xs[k]


@dataclass(frozen=True)
class GangTimes:
    """One gang's timeline on the harness's clock: when its first member's create call returned,
    when its first and last members were seen bound (None: none bound / not all bound)."""

    size: int
    first_created: float
    first_bound: float | None
    all_bound: float | None

    def partial_s(self, end: float) -> float:
        """How long the gang was partially bound: from the first member's bind to the last one's,
        or to ``end`` when it never became whole. An all-or-nothing scheduler commits the gang in
        one cycle, so this is only its bind latency; a per-pod one lets it run to the end."""
        if self.first_bound is None:
            return 0.0
        return (self.all_bound if self.all_bound is not None else end) - self.first_bound


def gang_times(
    members: Mapping[str, Sequence[str]], created: Mapping[str, float], bound: Mapping[str, float]
) -> dict[str, GangTimes]:
    """Each gang's :class:`GangTimes` from pod name -> create-returned and -> first-seen-bound."""
    out = {}
    for group, names in members.items():
        binds = [bound[n] for n in names if n in bound]
        made = [created[n] for n in names if n in created]
        out[group] = GangTimes(
            size=len(names),
            first_created=min(made, default=math.nan),
            first_bound=min(binds) if binds else None,
            all_bound=max(binds) if binds and len(binds) == len(names) else None,
        )
    return out


def gang_report(times: Mapping[str, GangTimes], end: float, partial_limit_s: float) -> dict[str, Any]:
    """The gangs workload's numbers and GANG_CHECKS (except the probe's) from :func:`gang_times`.

    ``time_to_all_bound``: first member created -> last member bound, over the gangs that became
    whole (p50/p99/max overall and per gang size); ``partial_max_s``: the longest time any gang was
    partially bound (still partial at ``end`` counts up to ``end``). Violations: ``gang_incomplete``
    (gangs not whole at the end, partially bound or not at all), ``gang_partial_too_long`` (gangs
    partially bound for more than ``partial_limit_s``)."""
    whole = {g: t for g, t in times.items() if t.all_bound is not None}
    spans = sorted(t.all_bound - t.first_created for t in whole.values() if t.all_bound is not None)
    partial = sorted(t.partial_s(end) for t in times.values())
    by_size: dict[int, list[float]] = {t.size: [] for t in times.values()}
    for t in whole.values():
        if t.all_bound is not None:
            by_size[t.size].append(t.all_bound - t.first_created)
    return {
        "gangs": len(times),
        "gangs_whole": len(whole),
        "time_to_all_bound_p50_s": percentile(spans, 50),
        "time_to_all_bound_p99_s": percentile(spans, 99),
        "time_to_all_bound_max_s": spans[-1] if spans else math.nan,
        "by_size": {
            str(size): {
                "gangs": sum(1 for t in times.values() if t.size == size),
                "whole": len(xs),
                "time_to_all_bound_p50_s": percentile(sorted(xs), 50),
                "time_to_all_bound_max_s": max(xs, default=math.nan),
            }
            for size, xs in sorted(by_size.items())
        },
        "partial_max_s": partial[-1] if partial else 0.0,
        "partial_p99_s": percentile(partial, 99) if partial else 0.0,
        "partial_limit_s": partial_limit_s,
        "violations": {
            "gang_incomplete": len(times) - len(whole),
            "gang_partial_too_long": sum(1 for x in partial if x > partial_limit_s),
        },
    }


@dataclass(frozen=True)
class GangProbe:
    """The objects of the all-or-nothing probe run before the gangs' burst: a gang of ``min_count``
    of which only ``held`` members are created at first, ``plain`` pods created after them (once
    they are bound, the scheduler has had its chance at the held members), then ``last``."""

    pod_group: JSON
    held: list[JSON]
    plain: list[JSON]
    last: JSON


def gang_probe(min_count: int = 3, n_plain: int = 2) -> GangProbe:
    group = "probe"
    members = [gang_member(f"probe-m{m}", group) for m in range(min_count)]
    plain = [_upstream_pod(f"probe-plain{k}", "probe-plain", cpu="1", mem="1Gi", limits=False) for k in range(n_plain)]
    return GangProbe(_pod_group(group, min_count), members[:-1], plain, members[-1])


# -- GangStarvation (issue #28 item 3): a 16-GPU gang behind a steady stream of short 1-GPU pods ----
#
# Not a burst like the shapes above: kwok nodes (custom_scheduler.devenv.kwok) run the pods, a Job
# keeps ``parallelism`` short 1-GPU pods going (each completes after STARVATION_RUNTIME_S through
# kwok's pod-complete stage, which acts on Job pods with its annotation, and is replaced by the Job
# controller), and a gang of STARVATION_GANG members x 8 GPUs arrives once every GPU is busy.
# bench/starvation.py runs it; the objects are here with the other workloads'.

STARVATION_GPU = "nvidia.com/gpu"
STARVATION_NODE_GPUS = 8
STARVATION_GANG = 2  # members of 8 GPUs: a 16-GPU gang
STARVATION_RUNTIME_S = 10
#: The annotation kwok's pod-complete stage reads (custom_scheduler.devenv.kwok.COMPLETE_AFTER_ANNOTATION).
KWOK_COMPLETE_AFTER = "pod-complete.stage.kwok.x-k8s.io/delay"
#: GangScheduling's default reservation runtime annotation (custom_scheduler.framework.reservations).
EXPECTED_RUNTIME = "custom-scheduler.io/expected-runtime"


def starvation_node(name: str, pool: str) -> JSON:
    """A kwok node (``kwok.x-k8s.io/node: fake``) of 8 GPUs, 64 CPUs, labelled ``pool``."""
    alloc = {STARVATION_GPU: str(STARVATION_NODE_GPUS), "cpu": "64", "memory": "256Gi", "pods": "110"}
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "labels": {HOST_KEY: name, "pool": pool, "type": "kwok"},
            "annotations": {"kwok.x-k8s.io/node": "fake"},
        },
        "status": {"capacity": dict(alloc), "allocatable": dict(alloc)},
    }


def _gpu_container(gpus: int) -> JSON:
    q = {STARVATION_GPU: str(gpus)}
    return {"name": "c", "image": "registry.k8s.io/pause:3.10", "resources": {"requests": q, "limits": q}}


def starvation_owner() -> JSON:
    """A suspended Job that never makes a pod: the owner of the stream's pods. kwok's pod-complete
    stage finishes only pods owned by a Job, and owning them keeps the bench (not the Job
    controller, whose pace varies with its backlog) in charge of the stream's rate."""
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "stream-owner"},
        "spec": {
            "suspend": True,
            "template": {
                "spec": {"restartPolicy": "Never", "containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10"}]}
            },
        },
    }


def starvation_stream_pod(
    name: str, scheduler_name: str, pool: str, owner: JSON, runtime_s: int = STARVATION_RUNTIME_S
) -> JSON:
    """One stream pod: 1 GPU for ``runtime_s`` seconds, which it declares (the annotation
    GangScheduling's backfill reads; kube-scheduler ignores it). ``owner`` is the created Job."""
    ref = {"apiVersion": "batch/v1", "kind": "Job", "name": owner["metadata"]["name"], "uid": owner["metadata"]["uid"]}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "labels": {"app": "stream"},
            "annotations": {KWOK_COMPLETE_AFTER: f"{runtime_s}s", EXPECTED_RUNTIME: f"{runtime_s}s"},
            "ownerReferences": [ref],
        },
        "spec": {
            "schedulerName": scheduler_name,
            "restartPolicy": "Never",
            "nodeSelector": {"pool": pool},
            "containers": [_gpu_container(1)],
        },
    }


def starvation_gang(scheduler_name: str, pool: str, members: int = STARVATION_GANG) -> tuple[JSON, list[JSON]]:
    """The gang: a native PodGroup of ``members`` and its members of 8 GPUs each (no runtime declared)."""
    group = _pod_group("big", members)
    pods = []
    for m in range(members):
        pod: JSON = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": f"big-{m}", "labels": {"gang": "big"}},
            "spec": {
                "schedulerName": scheduler_name,
                "nodeSelector": {"pool": pool},
                "schedulingGroup": {"podGroupName": "big"},
                "containers": [_gpu_container(STARVATION_NODE_GPUS)],
            },
        }
        pods.append(pod)
    return group, pods
