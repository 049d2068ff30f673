"""A stand-in for a DRA driver: the ResourceSlices and DeviceClasses a GPU driver would publish.

No kubelet plugin runs in the local control plane, so nothing publishes devices; tests, the demo
and the benchmarks need realistic ones to schedule against. This module publishes, for a fake
driver ``gpu.example.com``, what NVIDIA's DRA driver (``k8s-dra-driver-gpu``) publishes for a node
(``resource.k8s.io/v1`` as kube-apiserver 1.37 accepts it, with the gates on by default):

- **whole GPUs** (``type: gpu``): model, an index, a UUID, the driver version as a semver
  ``version`` attribute, the PCIe root (``resource.kubernetes.io/pcieRoot``, the standard name
  other drivers align on with ``matchAttribute``), the memory as a capacity;
- **MIG-style partitions** (``type: mig``, DRAPartitionableDevices, beta and on): per
  partitionable GPU a counter set ``gpu-<i>-counters`` of 7 compute slices and 40Gi memory in a
  slice of its own (since 1.35 a slice holds either ``sharedCounters`` or ``devices``, never both),
  and one device per partition that could exist (7 × ``1g.5gb``, 3 × ``2g.10gb``, 2 × ``3g.20gb``,
  1 × ``7g.40gb``, the whole GPU), each consuming its share of the counters: allocating a
  ``3g.20gb`` leaves room for at most one more ``3g.20gb``, and the ``7g.40gb`` excludes all others;
- **shared GPUs** (``type: vgpu``, DRAConsumableCapacity, beta and on): ``allowMultipleAllocations``
  with a ``memory`` capacity under a ``validRange`` request policy (default 4Gi, steps of 1Gi) and a
  ``compute`` capacity (percent) under a ``validValues`` one, so several claims share one device;
- **tainted GPUs**: whole GPUs with ``taints: [{key: gpu.example.com/unhealthy, effect: NoSchedule}]``
  (DRADeviceTaints, GA in 1.37): only a request tolerating the taint gets one.

The builders (:func:`node_slices`, :func:`device_classes`) are pure and return API JSON;
:func:`publish` and :func:`unpublish` do the I/O and are idempotent, as a driver's
ResourceSlice controller is: publishing again what is there changes nothing, publishing a
different shape replaces the node's slices under the next pool generation.
"""

from __future__ import annotations

import contextlib
import copy
import hashlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from custom_scheduler.kube import api_errors
from custom_scheduler.kube.client import KubeClient

JSON = dict[str, Any]

DRIVER = "gpu.example.com"
API = "/apis/resource.k8s.io/v1"
PCIE_ROOT = "resource.kubernetes.io/pcieRoot"
UNHEALTHY = f"{DRIVER}/unhealthy"
#: The label every slice carries, so a driver (and a test) finds its own.
NODE_LABEL = f"{DRIVER}/node"

#: The DeviceClasses (named as NVIDIA's are: ``gpu.nvidia.com``, ``mig.nvidia.com``).
GPU_CLASS = DRIVER
MIG_CLASS = f"mig.{DRIVER}"
SHARED_CLASS = f"vgpu.{DRIVER}"
LARGE_CLASS = f"large.{DRIVER}"
EXTENDED_CLASS = f"extended.{DRIVER}"
#: The extended resource a pod may request instead of a claim (DRAExtendedResource, GA in 1.37):
#: the class naming it gives the pod whole GPUs through a claim the scheduler creates.
EXTENDED_RESOURCE = "example.com/gpu"

#: The counters of one partitionable GPU (an A100 40GB: 7 compute slices, 40Gi of memory).
COMPUTE_SLICES = 7
GPU_MEMORY = "40Gi"
#: (profile, compute slices, memory in Gi, how many a GPU can hold at most): one device each.
MIG_PROFILES: tuple[tuple[str, int, int, int], ...] = (
    ("1g.5gb", 1, 5, 7),
    ("2g.10gb", 2, 10, 3),
    ("3g.20gb", 3, 20, 2),
    ("7g.40gb", 7, 40, 1),
)
#: kube-apiserver's limits (``pkg/apis/resource/types.go``): devices in a slice with taints or
#: counter consumption, counter sets in a slice.
MAX_DEVICES_PER_SLICE = 64
MAX_COUNTER_SETS = 8
#: The shared GPU's request policies (``validRange`` for memory, ``validValues`` for compute).
SHARED_MEMORY_DEFAULT = "4Gi"
SHARED_COMPUTE_VALUES = ("10", "25", "50", "100")


@dataclass(frozen=True, slots=True)
class NodeResources:
    """The GPUs a node's driver publishes, by kind; indexes run over all of them in this order:
    whole, tainted, partitionable, shared (``gpu-0``, ``gpu-1``, ...). ``pcie_roots``: the GPUs
    alternate between that many PCIe roots (``pci0000:00``, ``pci0000:01``, ...). ``memory``: of
    each whole, tainted and shared GPU (a partitionable one is always an A100 40GB's shape)."""

    gpus: int = 0
    tainted: int = 0
    partitionable: int = 0
    shared: int = 0
    model: str = "a100-40gb"
    memory: str = GPU_MEMORY
    driver_version: str = "550.54.15"
    pcie_roots: int = 2

    @property
    def total(self) -> int:
        return self.gpus + self.tainted + self.partitionable + self.shared

    def kinds(self) -> list[str]:
        """The kind of each GPU index: ``gpu``, ``tainted``, ``mig`` or ``vgpu``."""
        return ["gpu"] * self.gpus + ["tainted"] * self.tainted + ["mig"] * self.partitionable + ["vgpu"] * self.shared


# -- devices ----------------------------------------------------------------------------------------


def _uuid(node: str, index: int) -> str:
    """A stable GPU UUID (``GPU-`` + a hash), as ``nvidia-smi`` reports one per physical GPU."""
    h = hashlib.sha256(f"{node}/{index}".encode()).hexdigest()
    return f"GPU-{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:32]}"


def _common(node: str, index: int, res: NodeResources, kind: str) -> JSON:
    return {
        "type": {"string": kind},
        "model": {"string": res.model},
        "uuid": {"string": _uuid(node, index)},
        "driverVersion": {"version": res.driver_version},
        PCIE_ROOT: {"string": f"pci0000:{index % max(res.pcie_roots, 1):02x}"},
    }


def whole_gpu(node: str, index: int, res: NodeResources, *, tainted: bool = False) -> JSON:
    """A whole GPU ``gpu-<index>``; ``tainted``: marked unhealthy (NoSchedule)."""
    attrs = _common(node, index, res, "gpu") | {"index": {"int": index}}
    device: JSON = {"name": f"gpu-{index}", "attributes": attrs, "capacity": {"memory": {"value": res.memory}}}
    if tainted:
        device["taints"] = [{"key": UNHEALTHY, "effect": "NoSchedule"}]
    return device


def counter_set_name(index: int) -> str:
    return f"gpu-{index}-counters"


def counter_set(index: int) -> JSON:
    """The shared counters of partitionable GPU ``index``."""
    counters = {"compute-slices": {"value": str(COMPUTE_SLICES)}, "memory": {"value": GPU_MEMORY}}
    return {"name": counter_set_name(index), "counters": counters}


def partition_name(index: int, profile: str, k: int) -> str:
    """``gpu-2-mig-3g-20gb-1``: device names are DNS labels, so the profile's dot becomes a dash."""
    return f"gpu-{index}-mig-{profile.replace('.', '-')}-{k}"


def partitions(node: str, index: int, res: NodeResources) -> list[JSON]:
    """Every partition GPU ``index`` could be cut into, each consuming its counters."""
    out: list[JSON] = []
    for profile, slices, mem, most in MIG_PROFILES:
        for k in range(most):
            attrs = _common(node, index, res, "mig") | {"profile": {"string": profile}, "parentIndex": {"int": index}}
            consumes = {"compute-slices": {"value": str(slices)}, "memory": {"value": f"{mem}Gi"}}
            out.append(
                {
                    "name": partition_name(index, profile, k),
                    "attributes": attrs,
                    "capacity": {"memory": {"value": f"{mem}Gi"}, "computeSlices": {"value": str(slices)}},
                    "consumesCounters": [{"counterSet": counter_set_name(index), "counters": consumes}],
                }
            )
    return out


def shared_gpu(node: str, index: int, res: NodeResources) -> JSON:
    """A GPU several claims share (``allowMultipleAllocations``), each taking part of its memory and
    compute as its request policies round the request."""
    memory_policy = {"default": SHARED_MEMORY_DEFAULT, "validRange": {"min": "1Gi", "step": "1Gi"}}
    compute_policy = {"default": SHARED_COMPUTE_VALUES[0], "validValues": list(SHARED_COMPUTE_VALUES)}
    return {
        "name": f"gpu-{index}",
        "attributes": _common(node, index, res, "vgpu") | {"index": {"int": index}},
        "capacity": {
            "memory": {"value": res.memory, "requestPolicy": memory_policy},
            "compute": {"value": SHARED_COMPUTE_VALUES[-1], "requestPolicy": compute_policy},
        },
        "allowMultipleAllocations": True,
    }


def devices(node: str, res: NodeResources) -> list[JSON]:
    """All devices of the node, in index order."""
    out: list[JSON] = []
    for index, kind in enumerate(res.kinds()):
        if kind == "mig":
            out.extend(partitions(node, index, res))
        elif kind == "vgpu":
            out.append(shared_gpu(node, index, res))
        else:
            out.append(whole_gpu(node, index, res, tainted=kind == "tainted"))
    return out


# -- slices and classes -----------------------------------------------------------------------------


def slice_name(node: str, part: str) -> str:
    return f"{node}-{DRIVER.replace('.', '-')}-{part}"


def node_slices(
    node: str, res: NodeResources, *, generation: int = 1, labels: Mapping[str, str] | None = None
) -> list[JSON]:
    """The ResourceSlices of ``node``: one pool named after the node, its counter sets in a slice
    of their own (if any GPU is partitionable), its devices in slices of at most 64. Empty for a
    node without GPUs."""
    if res.partitionable > MAX_COUNTER_SETS:
        raise ValueError(f"at most {MAX_COUNTER_SETS} partitionable GPUs per node (counter sets in a slice)")
    devs = devices(node, res)
    parts: list[tuple[str, JSON]] = []
    if res.partitionable:
        sets = [counter_set(i) for i, kind in enumerate(res.kinds()) if kind == "mig"]
        parts.append(("counters", {"sharedCounters": sets}))
    for k in range(0, len(devs), MAX_DEVICES_PER_SLICE):
        parts.append((f"devices-{k // MAX_DEVICES_PER_SLICE}", {"devices": devs[k : k + MAX_DEVICES_PER_SLICE]}))
    pool = {"name": node, "generation": generation, "resourceSliceCount": len(parts)}
    meta_labels = {NODE_LABEL: node, **(labels or {})}
    return [
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceSlice",
            "metadata": {"name": slice_name(node, part), "labels": dict(meta_labels)},
            "spec": {"driver": DRIVER, "nodeName": node, "pool": dict(pool), **body},
        }
        for part, body in parts
    ]


def _class(name: str, expression: str, labels: Mapping[str, str] | None, extended: str = "") -> JSON:
    meta: JSON = {"name": name}
    if labels:
        meta["labels"] = dict(labels)
    spec: JSON = {"selectors": [{"cel": {"expression": expression}}]}
    if extended:
        spec["extendedResourceName"] = extended
    return {"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass", "metadata": meta, "spec": spec}


def device_classes(suffix: str = "", labels: Mapping[str, str] | None = None, *, extended: bool = False) -> list[JSON]:
    """The driver's DeviceClasses (names + ``suffix``): whole GPUs (tainted ones included: a
    request tolerates the taint or does not get them), MIG partitions, shared GPUs, and whole GPUs
    with at least 80Gi (a class selecting on a capacity with ``quantity``); ``extended``: also the
    class backing the extended resource :data:`EXTENDED_RESOURCE` with whole GPUs (one class per
    extended resource in a cluster, so the bench's per-run classes leave it out)."""
    attr = f'device.attributes["{DRIVER}"]'
    driver = f'device.driver == "{DRIVER}"'
    whole = f'{driver} && {attr}.type == "gpu"'
    backing = [_class(EXTENDED_CLASS + suffix, whole, labels, EXTENDED_RESOURCE)] if extended else []
    return [
        _class(GPU_CLASS + suffix, whole, labels),
        _class(MIG_CLASS + suffix, f'{driver} && {attr}.type == "mig"', labels),
        _class(SHARED_CLASS + suffix, f'{driver} && {attr}.type == "vgpu"', labels),
        _class(
            LARGE_CLASS + suffix,
            f'{driver} && {attr}.type == "gpu" && device.capacity["{DRIVER}"].memory.compareTo(quantity("80Gi")) >= 0',
            labels,
        ),
        *backing,
    ]


# -- publishing -------------------------------------------------------------------------------------


def _listed(kube: KubeClient, node: str) -> list[JSON]:
    query = {"fieldSelector": f"spec.driver={DRIVER},spec.nodeName={node}"}
    items: list[JSON] = kube.get(f"{API}/resourceslices", query)["items"]
    return items


def _comparable(spec: JSON) -> JSON:
    """A slice spec without what the API server or a new generation changes: the pool generation,
    and the ``timeAdded`` the API server stamps on each taint at creation."""
    out = copy.deepcopy(spec)
    out.get("pool", {}).pop("generation", None)
    for device in out.get("devices") or ():
        for taint in device.get("taints") or ():
            taint.pop("timeAdded", None)
    return out


def _same(have: JSON, want: JSON) -> bool:
    """Whether a stored slice already says what ``want`` does (apart from :func:`_comparable`'s
    fields, the API server stores a slice's spec as sent)."""
    labels = (have.get("metadata") or {}).get("labels") or {}
    same_spec = _comparable(have.get("spec") or {}) == _comparable(want["spec"])
    return same_spec and labels == want["metadata"].get("labels", {})


def publish_node(
    kube: KubeClient, node: str, res: NodeResources, labels: Mapping[str, str] | None = None
) -> list[JSON]:
    """Make ``node``'s slices exactly :func:`node_slices`: nothing happens when they already are;
    otherwise every slice is written under the next pool generation (so the scheduler never mixes
    slices of two shapes) and slices of the old shape are deleted. Returns the slices as stored."""
    have = {s["metadata"]["name"]: s for s in _listed(kube, node)}
    want = node_slices(node, res, labels=labels)
    names = {s["metadata"]["name"] for s in want}
    if names == set(have) and all(_same(have[s["metadata"]["name"]], s) for s in want):
        return [have[s["metadata"]["name"]] for s in want]
    generation = 1 + max((int(s["spec"]["pool"].get("generation", 0)) for s in have.values()), default=0)
    stored = []
    for s in node_slices(node, res, generation=generation, labels=labels):
        name = s["metadata"]["name"]
        if name in have:
            s["metadata"]["resourceVersion"] = have[name]["metadata"]["resourceVersion"]
            stored.append(kube.put(f"{API}/resourceslices/{name}", s))
        else:
            stored.append(kube.post(f"{API}/resourceslices", s))
    for name in set(have) - names:
        with contextlib.suppress(api_errors.NotFound):
            kube.delete(f"{API}/resourceslices/{name}")
    return stored


def publish(
    kube: KubeClient, nodes: Mapping[str, NodeResources], labels: Mapping[str, str] | None = None
) -> dict[str, list[JSON]]:
    """:func:`publish_node` for each node; a node whose resources are empty loses its slices."""
    return {node: publish_node(kube, node, res, labels) for node, res in nodes.items()}


def unpublish(kube: KubeClient, nodes: Iterable[str]) -> None:
    """Delete the driver's slices of ``nodes`` (none there is fine)."""
    for node in nodes:
        for s in _listed(kube, node):
            with contextlib.suppress(api_errors.NotFound):
                kube.delete(f"{API}/resourceslices/{s['metadata']['name']}")


def ensure_device_classes(kube: KubeClient, classes: Iterable[JSON]) -> None:
    """Create the classes, or replace their spec where one of that name exists."""
    for cls in classes:
        name = cls["metadata"]["name"]
        try:
            kube.post(f"{API}/deviceclasses", cls)
        except api_errors.Conflict:
            current = kube.get(f"{API}/deviceclasses/{name}")
            if current.get("spec") != cls["spec"]:
                kube.put(f"{API}/deviceclasses/{name}", {**cls, "metadata": {**cls["metadata"], **_rv(current)}})


def _rv(obj: JSON) -> JSON:
    return {"resourceVersion": obj["metadata"]["resourceVersion"]}


def delete_device_classes(kube: KubeClient, classes: Iterable[JSON]) -> None:
    for cls in classes:
        with contextlib.suppress(api_errors.NotFound):
            kube.delete(f"{API}/deviceclasses/{cls['metadata']['name']}")
