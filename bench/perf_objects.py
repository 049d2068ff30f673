"""Object builders shared by the scheduler_perf workloads of bench/perf_event_handling.py and
bench/perf_more.py: nodes named after the round, the pod fields upstream's templates use (spread,
pod (anti-)affinity, host ports, volumes), pre-bound volume pairs and CSINodes.

Every object carries the round's label (``RUN_LABEL``) or lives in its namespace, so the harness's
cleanup finds it. Upstream spreads some workloads over namespaces (``blockeraffinity``,
``interpodaffinity``, ``sched-0``/``sched-1``, ``init-ns-*``); the bench runs one namespace per
round, so each builder keeps the matching upstream meant by giving pods that must not match each
other different labels (its docstring says where).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from bench.workloads import HOST_KEY, ROLE_LABEL, RUN_LABEL, _upstream_pod

JSON = dict[str, Any]
#: The CSI driver of upstream's pv-csi.yaml, and the per-node volume limit of EventHandlingPodDelete.
CSI_DRIVER = "ebs.csi.aws.com"
CSI_ALLOCATABLE = f"attachable-volumes-csi-{CSI_DRIVER}"


def node(
    run_id: str,
    name: str,
    *,
    cpu: str = "4",
    memory: str = "32Gi",
    pods: str = "110",
    labels: Mapping[str, str] | None = None,
    taints: Sequence[JSON] = (),
    unschedulable: bool = False,
    extra: Mapping[str, str] | None = None,
) -> JSON:
    """A Ready node ``bench-<run>-<name>`` (upstream's node templates: capacity = allocatable),
    labelled with its hostname as upstream's node preparer does."""
    full = f"bench-{run_id}-{name}"
    alloc = {"cpu": cpu, "memory": memory, "pods": pods, **(extra or {})}
    spec: JSON = {"taints": [dict(t) for t in taints]}
    if unschedulable:
        spec["unschedulable"] = True
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": full, "labels": {HOST_KEY: full, RUN_LABEL: run_id, **(labels or {})}},
        "spec": spec,
        "status": {"capacity": dict(alloc), "allocatable": dict(alloc)},
    }


def taint(key: str) -> JSON:
    return {"key": key, "effect": "NoSchedule"}


def tolerate(key: str) -> JSON:
    return {"key": key, "operator": "Exists", "effect": "NoSchedule"}


def pod(name: str, cls: str, *, cpu: str = "", mem: str = "", limits: bool = False, **spec: Any) -> JSON:
    """A pause pod (no requests unless given; requests only unless ``limits``), class ``cls``."""
    return _upstream_pod(name, cls, cpu=cpu, mem=mem, limits=limits, **spec)


def spread(key: str, max_skew: int, selector: Mapping[str, str], *, min_domains: int = 0, hard: bool = True) -> JSON:
    c: JSON = {
        "maxSkew": max_skew,
        "topologyKey": key,
        "whenUnsatisfiable": "DoNotSchedule" if hard else "ScheduleAnyway",
        "labelSelector": {"matchLabels": dict(selector)},
    }
    if min_domains:
        c["minDomains"] = min_domains
    return c


def pod_term(selector: Mapping[str, str], key: str = HOST_KEY, **extra: Any) -> JSON:
    return {"labelSelector": {"matchLabels": dict(selector)}, "topologyKey": key, **extra}


def required(kind: str, selector: Mapping[str, str], key: str = HOST_KEY, **extra: Any) -> JSON:
    """``affinity`` with one required ``podAffinity`` or ``podAntiAffinity`` term."""
    return {kind: {"requiredDuringSchedulingIgnoredDuringExecution": [pod_term(selector, key, **extra)]}}


def preferred(kind: str, selector: Mapping[str, str], key: str = HOST_KEY, **extra: Any) -> JSON:
    """``affinity`` with one preferred (weight 1) ``podAffinity`` or ``podAntiAffinity`` term."""
    term = {"weight": 1, "podAffinityTerm": pod_term(selector, key, **extra)}
    return {kind: {"preferredDuringSchedulingIgnoredDuringExecution": [term]}}


def node_affinity(key: str, values: Sequence[str]) -> JSON:
    expr = {"key": key, "operator": "In", "values": list(values)}
    return {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [{"matchExpressions": [expr]}]}
        }
    }


def with_host_port(p: JSON, port: int) -> JSON:
    p["spec"]["containers"][0]["ports"] = [{"containerPort": port, "hostPort": port}]
    return p


def with_claim(p: JSON, claim: str) -> JSON:
    p["spec"]["volumes"] = [{"name": "vol", "persistentVolumeClaim": {"claimName": claim}}]
    return p


def upstream_port(i: int) -> int:
    """``8{{ Mod .Index 12 }}``: the string 8 followed by i mod 12 (80..89, 810, 811)."""
    return int(f"8{i % 12}")


def volume_pair(run_id: str, claim: str, access_mode: str) -> tuple[JSON, JSON]:
    """pv-csi.yaml + pvc.yaml (ReadOnlyMany) or pvc-once-pod.yaml (ReadWriteOncePod): a 1Gi CSI
    volume of :data:`CSI_DRIVER` and its claim, bound to each other (``volumeName``, the
    ``bind-completed`` annotation; the runner writes ``claimRef`` and both statuses). No storage
    class on either, so nothing provisions or rebinds them."""
    pv_name = f"bench-{run_id}-{claim}"
    pv = {
        "apiVersion": "v1",
        "kind": "PersistentVolume",
        "metadata": {"name": pv_name, "labels": {RUN_LABEL: run_id}},
        "spec": {
            "accessModes": [access_mode],
            "capacity": {"storage": "1Gi"},
            "csi": {"driver": CSI_DRIVER, "volumeHandle": pv_name},
            "persistentVolumeReclaimPolicy": "Retain",
            "storageClassName": "",
        },
    }
    pvc = {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {"name": claim, "annotations": {"pv.kubernetes.io/bind-completed": "true"}},
        "spec": {
            "accessModes": [access_mode],
            "resources": {"requests": {"storage": "1Gi"}},
            "volumeName": pv_name,
            "storageClassName": "",
        },
    }
    return pv, pvc


def csinode(n: JSON, count: int) -> JSON:
    """The CSINode a CSI node plugin would register: :data:`CSI_DRIVER` with ``count`` volumes
    (what NodeVolumeLimits reads; upstream's nodeAllocatableStrategy ``csiNodeAllocatable``)."""
    name = n["metadata"]["name"]
    return {
        "apiVersion": "storage.k8s.io/v1",
        "kind": "CSINode",
        "metadata": {"name": name, "labels": {RUN_LABEL: n["metadata"]["labels"][RUN_LABEL]}},
        "spec": {"drivers": [{"name": CSI_DRIVER, "nodeID": name, "allocatable": {"count": count}}]},
    }


def role(p: JSON) -> str:
    return str(p["metadata"]["labels"][ROLE_LABEL])
