"""Benchmark workloads: N fake nodes and M pending pods as API JSON, and the placement checks.

Every workload is deterministic for a given (nodes, pods, seed), so the custom scheduler and
kube-scheduler get exactly the same objects (only ``schedulerName`` and the namespace differ).

- ``plain``: requests only (a few node shapes over three zones, a few pod sizes).
- ``mixed``: the plain nodes, 20 % of them tainted ``dedicated=infra:NoSchedule`` and labelled
  ``dedicated=infra``, half labelled ``disktype=ssd``. Pods: 30 % ``web`` spread over zones
  (``maxSkew: 1``, ``DoNotSchedule``), 20 % ``ssd`` with required node affinity, 15 % ``infra``
  tolerating the taint and requiring the dedicated nodes, up to 10 % ``cache`` with required
  anti-affinity on ``kubernetes.io/hostname``, the rest plain ``batch``.
- ``gpu``: 10 % of the nodes carry ``nvidia.com/gpu: 8`` and a ``nvidia.com/gpu:NoSchedule`` taint;
  up to 20 % of the pods ask for one or two GPUs and tolerate the taint.
- ``dra``: the GPUs through Dynamic Resource Allocation (resource.k8s.io/v1). Half of the nodes have
  a ResourceSlice of 4-8 GPUs (driver ``gpu.example.com``, one pool per node), a DeviceClass selects
  the driver, and most pods (up to 90 % of the GPUs) reference a ResourceClaimTemplate of one GPU,
  so the resourceclaim controller creates a claim per pod and the scheduler allocates it; the rest
  ask for nothing else. No taints: the point is the allocation path, not isolation.

:func:`placement` computes the quality numbers and the constraint checks from the final pod list;
the same function judges both schedulers.
"""

from __future__ import annotations

import math
import random
import statistics
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from custom_scheduler import quantity

WORKLOADS = ("plain", "mixed", "gpu", "dra")

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
#: Checked when the claims are given (the dra workload): a device in two claims' allocations; an
#: allocation whose device is not on its pod's node (or in no slice); a bound pod whose claim is
#: not allocated or not reserved for it.
DRA_CHECKS = ("dra_double_allocation", "dra_wrong_node", "dra_unallocated")
DRA_API = "/apis/resource.k8s.io/v1"
DRA_DRIVER = "gpu.example.com"
DRA_TEMPLATE = "one-gpu"

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


def build(name: str, n_nodes: int, n_pods: int, run_id: str, seed: int = 1) -> Workload:
    if name == "plain":
        return plain(n_nodes, n_pods, run_id, seed)
    if name == "mixed":
        return mixed(n_nodes, n_pods, run_id, seed)
    if name == "gpu":
        return gpu(n_nodes, n_pods, run_id, seed)
    if name == "dra":
        return dra(n_nodes, n_pods, run_id, seed)
    raise ValueError(f"unknown workload {name!r} (choose from {', '.join(WORKLOADS)})")


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


def _node_affinity_ok(pod: JSON, labels: Mapping[str, str]) -> bool:
    sel = pod["spec"].get("nodeSelector") or {}
    if any(labels.get(k) != v for k, v in sel.items()):
        return False
    req = ((pod["spec"].get("affinity") or {}).get("nodeAffinity") or {}).get(
        "requiredDuringSchedulingIgnoredDuringExecution"
    )
    if not req:
        return True
    terms = req["nodeSelectorTerms"]
    return any(all(_expr_ok(labels, e) for e in term.get("matchExpressions") or ()) for term in terms)


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
    out["dra_double_allocation"] += sum(n - 1 for n in seen.values() if n > 1)
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


def placement(
    nodes: list[JSON],
    pods: list[JSON],
    claims: list[JSON] | None = None,
    slices: Sequence[JSON] = (),
) -> dict[str, Any]:
    """Quality numbers and constraint violations for the bound ``pods`` over ``nodes``; with
    ``claims`` (the dra workload) also the DRA_CHECKS."""
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
            if not _node_affinity_ok(p, labels):
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
                if key in (n["metadata"].get("labels") or {}) and _node_affinity_ok(p, n["metadata"]["labels"])
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
            skew = max(per_dom.values()) - min(per_dom.values()) if per_dom else 0
            label = f"{key}/{ident[1]}"
            max_skews[label] = skew
            if skew > int(c["maxSkew"]):
                violations["topology_spread"] += 1

    checks: tuple[str, ...] = CHECKS
    if claims is not None:
        violations.update(dra_violations(bound, claims, list(slices)))
        checks = CHECKS + DRA_CHECKS
    return {
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
