"""AcceleratorIsolation: keep ordinary pods off GPU (accelerator) nodes; pack accelerator pods.

GPU nodes are expensive and scarce. Two things waste them: ordinary pods that take their cpu and
memory so that a GPU job no longer fits, and GPU jobs spread one per node so that no node is left
whole for a job that needs all of its GPUs. This plugin addresses both.

**Which nodes are accelerator nodes.** A node is an accelerator node when it offers any of the
configured ``resources`` (allocatable > 0; default ``nvidia.com/gpu``; names come only from config)
or carries one of the configured ``nodeLabels`` (``key`` means "the label exists", ``key=value``
means "the label has this value"), which also covers nodes whose device plugin has not registered
yet.

**Which pods are accelerator pods.** Pods that request (> 0) any of the configured resources.

**DRA devices** (resource.k8s.io/v1; read from the DRAStore through ``Handle.dra``, so assumed and
in-flight allocations count; the rule is :mod:`custom_scheduler.plugins.dra_accelerators`). A device
is an *accelerator device* when its ResourceSlice's driver matches ``draDrivers`` (default
``["gpu.*"]``: the GPU drivers' naming convention, ``gpu.nvidia.com``, ``gpu.amd.com``,
``gpu.intel.com``; an entry is a driver name, or a prefix ending in ``*``; ``[]`` ignores DRA). A
node that has accelerator devices *published for it* (``spec.nodeName``) is an accelerator node;
devices reachable through ``allNodes`` or a ``nodeSelector`` (network-attached) do not mark a node,
since every node could use them. A pod is an accelerator pod when one of its ResourceClaims is
allocated an accelerator device, or requests a *accelerator DeviceClass*: a class whose name matches
``draDeviceClasses`` or ``draDrivers`` (vendors name the class after the driver), or one of whose
CEL selectors compares ``device.driver`` with a matching driver name (``device.driver ==
"gpu.example.com"``, how classes are written). Claims are looked up, not evaluated: a pod whose
claims do not exist yet is gated by DynamicResources anyway.

**Filter** (``mode: Filter``, the default). An accelerator node rejects a pod that requests none of
the accelerator resources with ``node(s) are reserved for accelerator workloads``. The status is
UnschedulableAndUnresolvable: evicting pods from a GPU node never makes it accept an ordinary pod,
so preemption skips such nodes. With ``mode: Score`` the rejection becomes a soft penalty instead:
the Score gives accelerator nodes 0 and other nodes 100 for ordinary pods, so they land on GPU nodes
only when nothing else fits (or when the plugin's weight is outvoted).

**GPU model and memory.** Pods choose a GPU model or a minimum of GPU memory through the labels that
NVIDIA GPU feature discovery publishes (``nvidia.com/gpu.product``, ``nvidia.com/gpu.memory`` in
MiB). Either with ordinary node affinity (handled by NodeAffinity), or with these pod annotations,
checked here (the label keys are configurable with ``productLabel`` / ``memoryLabel``):

- ``custom-scheduler.io/gpu-product: A100`` — a comma-separated list of products; a node matches
  when its product label, split on ``-``, contains one of the listed products (also split on ``-``)
  as a contiguous run, case-insensitively: ``A100`` and ``A100-SXM4`` match ``NVIDIA-A100-SXM4-80GB``
  but ``A10`` does not. Reason: ``node(s) didn't match the requested GPU product "A100"``.
- ``custom-scheduler.io/gpu-min-memory: "40000"`` — MiB as an integer, or a quantity such as
  ``40Gi``; the node's memory label must be at least that. Reason:
  ``node(s) had less than 40000 MiB of GPU memory``.

Both are UnschedulableAndUnresolvable. An annotation that does not parse fails the pod in PreFilter
with a message naming it.

**Score** for accelerator pods: ``(packingWeight × packing + balanceWeight × balance) /
(packingWeight + balanceWeight)``, where *packing* is the most-allocated score of the requested
accelerator resources with the pod placed (``min(used + request, allocatable) × 100 /
allocatable``, averaged over the requested resources the node has; for DRA, the node's accelerator
devices allocated, assumed or pending plus the pod's unallocated accelerator requests, over the
node's accelerator devices, as one more entry of that average), so a node whose GPUs are already
partly used wins over an empty one; and *balance* is NodeResourcesBalancedAllocation's cpu/memory
score, so the pack does not strand a node's cpu or memory. Scores are 0–100; no normalisation.

The plugin only sees pods whose ``schedulerName`` is ours. Pods of other schedulers are kept off GPU
nodes by a taint (``nvidia.com/gpu=present:NoSchedule``); the ExtendedResourceToleration admission
plugin adds the matching toleration to pods that request the GPU resource (see docs/scenarios.md).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

from custom_scheduler.api import dra, quantity
from custom_scheduler.api.model import Node, Pod
from custom_scheduler.framework import cluster_events as ce
from custom_scheduler.framework import registry
from custom_scheduler.framework.dra_store import DRAStore
from custom_scheduler.framework.interface import Handle
from custom_scheduler.framework.types import (
    MAX_NODE_SCORE,
    MIN_NODE_SCORE,
    SKIP,
    SUCCESS,
    CycleState,
    NodeInfo,
    StateKey,
    Status,
)
from custom_scheduler.plugins import args_reader
from custom_scheduler.plugins.dra_accelerators import DRAAccelerators, dra_packing_score
from custom_scheduler.plugins.node_resources_balanced_allocation import balanced_resource_score

NAME = "AcceleratorIsolation"

MODE_FILTER = "Filter"
MODE_SCORE = "Score"
MODES = (MODE_FILTER, MODE_SCORE)

DEFAULT_RESOURCES: tuple[str, ...] = ("nvidia.com/gpu",)
DEFAULT_DRA_DRIVERS: tuple[str, ...] = ("gpu.*",)
"""DRA GPU drivers are named ``gpu.<vendor domain>`` (NVIDIA's, AMD's, Intel's, the examples')."""
DEFAULT_PRODUCT_LABEL = "nvidia.com/gpu.product"
DEFAULT_MEMORY_LABEL = "nvidia.com/gpu.memory"
DEFAULT_PACKING_WEIGHT = 3
DEFAULT_BALANCE_WEIGHT = 1
MAX_WEIGHT = 100

ANNOTATION_PRODUCT = "custom-scheduler.io/gpu-product"
"""Pod annotation: comma-separated GPU products the pod accepts (matched against ``productLabel``)."""
ANNOTATION_MIN_MEMORY = "custom-scheduler.io/gpu-min-memory"
"""Pod annotation: minimum GPU memory, MiB (``"40000"``) or a quantity (``"40Gi"``)."""

MIB = 1024 * 1024

ERR_REASON_RESERVED = "node(s) are reserved for accelerator workloads"
ERR_REASON_PRODUCT_FORMAT = 'node(s) didn\'t match the requested GPU product "{product}"'
ERR_REASON_MEMORY_FORMAT = "node(s) had less than {mib} MiB of GPU memory"
ERR_REASON_INVALID_NODE_INFO = "invalid nodeInfo: node not found"


def product_reason(product: str) -> str:
    return ERR_REASON_PRODUCT_FORMAT.format(product=product)


def memory_reason(mib: int) -> str:
    return ERR_REASON_MEMORY_FORMAT.format(mib=mib)


# --- args ----------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class LabelMatch:
    """``key`` (the label exists) or ``key=value`` (the label has that value)."""

    key: str
    value: str | None = None

    def matches(self, labels: Mapping[str, str]) -> bool:
        if self.value is None:
            return self.key in labels
        return labels.get(self.key) == self.value

    def __str__(self) -> str:
        return self.key if self.value is None else f"{self.key}={self.value}"


@dataclass(frozen=True, slots=True)
class AcceleratorIsolationArgs:
    resources: tuple[str, ...] = DEFAULT_RESOURCES
    """Accelerator resource names (``resources``); default ``[nvidia.com/gpu]``."""
    node_labels: tuple[LabelMatch, ...] = ()
    """Labels that also mark accelerator nodes (``nodeLabels``: ``key`` or ``key=value``)."""
    mode: str = MODE_FILTER
    """``Filter`` (hard: reject ordinary pods) or ``Score`` (soft: penalise)."""
    packing_weight: int = DEFAULT_PACKING_WEIGHT
    """Share of the accelerator-pod score from packing the accelerators (``packingWeight``, 0-100)."""
    balance_weight: int = DEFAULT_BALANCE_WEIGHT
    """Share from cpu/memory balance (``balanceWeight``, 0-100); the two must not both be 0."""
    product_label: str = DEFAULT_PRODUCT_LABEL
    """Node label holding the GPU product (``productLabel``)."""
    memory_label: str = DEFAULT_MEMORY_LABEL
    """Node label holding the GPU memory in MiB (``memoryLabel``)."""
    dra_drivers: tuple[str, ...] = DEFAULT_DRA_DRIVERS
    """DRA drivers whose devices are accelerators (``draDrivers``: names, or prefixes ending in ``*``)."""
    dra_device_classes: tuple[str, ...] = ()
    """DeviceClasses that are accelerator classes besides those the drivers imply (``draDeviceClasses``)."""

    def to_config(self) -> dict[str, Any]:
        return {
            "resources": list(self.resources),
            "nodeLabels": [str(m) for m in self.node_labels],
            "mode": self.mode,
            "packingWeight": self.packing_weight,
            "balanceWeight": self.balance_weight,
            "productLabel": self.product_label,
            "memoryLabel": self.memory_label,
            "draDrivers": list(self.dra_drivers),
            "draDeviceClasses": list(self.dra_device_classes),
        }


_FIELDS = (
    "resources",
    "nodeLabels",
    "mode",
    "packingWeight",
    "balanceWeight",
    "productLabel",
    "memoryLabel",
    "draDrivers",
    "draDeviceClasses",
)


def parse_args(raw: Mapping[str, Any] | None, path: str) -> AcceleratorIsolationArgs:
    """Parse, default and validate ``AcceleratorIsolationArgs``.

    Raises:
        ConfigError: listing every invalid field, with paths below ``path``.
    """
    r = args_reader.ArgsReader(path)
    doc = r.mapping(raw, path, fields=_FIELDS, kind="AcceleratorIsolationArgs")
    resources = _resources(r, doc, path)
    node_labels = _node_labels(r, doc, path)
    mode = r.string(doc, "mode", path, MODE_FILTER)
    if mode not in MODES:
        r.error(f"{path}.mode", f'Unsupported value: "{mode}": supported values: "Filter", "Score"')
    packing = r.integer(doc, "packingWeight", path, DEFAULT_PACKING_WEIGHT)
    balance = r.integer(doc, "balanceWeight", path, DEFAULT_BALANCE_WEIGHT)
    for key, weight in (("packingWeight", packing), ("balanceWeight", balance)):
        if not 0 <= weight <= MAX_WEIGHT:
            r.error(f"{path}.{key}", f"must be in the range 0-{MAX_WEIGHT}")
    if packing == 0 and balance == 0:
        r.error(f"{path}.packingWeight", "packingWeight and balanceWeight must not both be 0")
    product_label = r.string(doc, "productLabel", path, DEFAULT_PRODUCT_LABEL)
    memory_label = r.string(doc, "memoryLabel", path, DEFAULT_MEMORY_LABEL)
    for key, label in (("productLabel", product_label), ("memoryLabel", memory_label)):
        for msg in args_reader.qualified_name_errors(label):
            r.error(f"{path}.{key}", msg)
    dra_drivers = r.strings(doc, "draDrivers", path) if doc.get("draDrivers") is not None else DEFAULT_DRA_DRIVERS
    dra_classes = r.strings(doc, "draDeviceClasses", path)
    for key, patterns in (("draDrivers", dra_drivers), ("draDeviceClasses", dra_classes)):
        _check_patterns(r, f"{path}.{key}", patterns)
    r.raise_errors()
    return AcceleratorIsolationArgs(
        tuple(resources),
        tuple(node_labels),
        mode,
        packing,
        balance,
        product_label,
        memory_label,
        tuple(dra_drivers),
        tuple(dra_classes),
    )


def _resources(r: args_reader.ArgsReader, doc: Mapping[str, Any], path: str) -> Sequence[str]:
    """``resources``: extended resource names (domain/name), no duplicates; the default if unset."""
    resources = r.strings(doc, "resources", path) if doc.get("resources") is not None else DEFAULT_RESOURCES
    if not resources:
        r.error(f"{path}.resources", "must name at least one accelerator resource")
    seen: set[str] = set()
    for i, name in enumerate(resources):
        if name in seen:
            r.error(f"{path}.resources[{i}]", f'Duplicate value: "{name}"')
        seen.add(name)
        for msg in args_reader.qualified_name_errors(name):
            r.error(f"{path}.resources[{i}]", msg)
        if "/" not in name:
            r.error(f"{path}.resources[{i}]", "must be an extended resource name (domain/name, e.g. nvidia.com/gpu)")
    return resources


def _node_labels(r: args_reader.ArgsReader, doc: Mapping[str, Any], path: str) -> list[LabelMatch]:
    """``nodeLabels``: ``key`` or ``key=value``, each a valid label key (and value)."""
    node_labels: list[LabelMatch] = []
    for i, item in enumerate(r.strings(doc, "nodeLabels", path)):
        key, sep, value = item.partition("=")
        for msg in args_reader.qualified_name_errors(key):
            r.error(f"{path}.nodeLabels[{i}]", f"label key {msg}")
        if sep:
            for msg in args_reader.label_value_errors(value):
                r.error(f"{path}.nodeLabels[{i}]", f"label value {msg}")
        node_labels.append(LabelMatch(key, value if sep else None))
    return node_labels


def _check_patterns(r: args_reader.ArgsReader, path: str, patterns: Sequence[str]) -> None:
    """``draDrivers``/``draDeviceClasses``: names, or prefixes ending in one ``*``."""
    for i, pattern in enumerate(patterns):
        stem = pattern[:-1] if pattern.endswith("*") else pattern
        if not stem or "*" in stem:
            r.error(f"{path}[{i}]", 'must be a name or a prefix ending in "*" (e.g. "gpu.*")')


# --- pure helpers --------------------------------------------------------------------------------


def accelerator_requests(pod: Pod, resources: Sequence[str]) -> dict[str, int]:
    """The pod's requests (> 0) of the accelerator resources."""
    out: dict[str, int] = {}
    for name in resources:
        qty = pod.requests.scalar.get(name, 0)
        if qty > 0:
            out[name] = qty
    return out


def is_accelerator_node(node: Node, resources: Sequence[str], node_labels: Sequence[LabelMatch] = ()) -> bool:
    """Whether ``node`` offers any accelerator resource or carries a marking label."""
    alloc = node.allocatable.scalar
    if any(alloc.get(name, 0) > 0 for name in resources):
        return True
    return any(m.matches(node.labels) for m in node_labels)


def _tokens(text: str) -> tuple[str, ...]:
    return tuple(t for t in text.strip().lower().replace("_", "-").replace(" ", "-").split("-") if t)


def product_matches(wanted: str, label_value: str) -> bool:
    """Whether ``wanted``'s ``-`` separated tokens appear as a contiguous run in ``label_value``'s."""
    want, have = _tokens(wanted), _tokens(label_value)
    if not want:
        return False
    n = len(want)
    return any(have[i : i + n] == want for i in range(len(have) - n + 1))


def parse_min_memory_mib(value: str) -> int:
    """``"40000"`` (MiB) or a quantity (``"40Gi"``, ``"48G"``) → MiB, rounded up.

    Raises:
        ValueError: the value is neither.
    """
    text = value.strip()
    if text.isdigit():
        return int(text)
    try:
        n = quantity.to_int(text)
    except quantity.QuantityError as e:
        raise ValueError(str(e)) from None
    if n < 0:
        raise ValueError("must not be negative")
    return -(-n // MIB)


@dataclass(frozen=True, slots=True)
class PodAcceleratorState:
    """What PreFilter reduces the pod to."""

    requests: Mapping[str, int]
    """Requested accelerator resources (> 0); empty for an ordinary pod."""
    products: tuple[str, ...] = ()
    """From the product annotation; empty when not set."""
    min_memory_mib: int | None = None
    """From the memory annotation; None when not set."""
    dra_devices: int | None = None
    """Accelerator devices its DRA claims still need; None: no accelerator claim."""

    @property
    def is_accelerator_pod(self) -> bool:
        return bool(self.requests) or self.dra_devices is not None


def pod_state(pod: Pod, resources: Sequence[str], dra_devices: int | None = None) -> PodAcceleratorState:
    """Reduce ``pod`` to its accelerator requests and GPU annotations.

    Raises:
        ValueError: an annotation does not parse (the message names it).
    """
    products: tuple[str, ...] = ()
    raw_product = pod.annotations.get(ANNOTATION_PRODUCT)
    if raw_product is not None:
        products = tuple(p.strip() for p in raw_product.split(",") if p.strip())
        if not products:
            raise ValueError(f'invalid annotation {ANNOTATION_PRODUCT}="{raw_product}": no product named')
    min_mib: int | None = None
    raw_mem = pod.annotations.get(ANNOTATION_MIN_MEMORY)
    if raw_mem is not None:
        try:
            min_mib = parse_min_memory_mib(raw_mem)
        except ValueError:
            raise ValueError(
                f'invalid annotation {ANNOTATION_MIN_MEMORY}="{raw_mem}": '
                'must be MiB as an integer ("40000") or a quantity ("40Gi")'
            ) from None
    return PodAcceleratorState(accelerator_requests(pod, resources), products, min_mib, dra_devices)


def hardware_reasons(s: PodAcceleratorState, node: Node, product_label: str, memory_label: str) -> list[str]:
    """Why ``node``'s GPU product or memory does not satisfy the pod's annotations; empty when it does."""
    reasons: list[str] = []
    if s.products:
        have = node.labels.get(product_label, "")
        if not any(product_matches(p, have) for p in s.products):
            reasons.append(product_reason(",".join(s.products)))
    if s.min_memory_mib is not None:
        raw = node.labels.get(memory_label, "")
        try:
            ok = int(raw) >= s.min_memory_mib
        except ValueError:
            ok = False
        if not ok:
            reasons.append(memory_reason(s.min_memory_mib))
    return reasons


def packing_score(requests: Mapping[str, int], node_info: NodeInfo, extra: Sequence[int] = ()) -> int:
    """Most-allocated over the requested accelerator resources, with the pod placed, averaged with
    the ``extra`` scores (DRA devices); 0 when none."""
    total, count = sum(extra), len(extra)
    alloc = node_info.allocatable.scalar
    used = node_info.requested.scalar
    for name, req in requests.items():
        cap = alloc.get(name, 0)
        if cap <= 0:
            continue
        total += min(used.get(name, 0) + req, cap) * MAX_NODE_SCORE // cap
        count += 1
    return total // count if count else MIN_NODE_SCORE


def balance_score(pod: Pod, node_info: NodeInfo) -> int:
    """NodeResourcesBalancedAllocation's cpu/memory score with the pod placed (actual requests)."""
    alloc = node_info.allocatable
    used = node_info.requested
    req = pod.requests
    return balanced_resource_score(
        (used.milli_cpu + req.milli_cpu, used.memory + req.memory), (alloc.milli_cpu, alloc.memory)
    )


# --- plugin --------------------------------------------------------------------------------------

PRE_FILTER_KEY: StateKey[PodAcceleratorState] = StateKey(f"PreFilter{NAME}")
PRE_SCORE_KEY: StateKey[PodAcceleratorState] = StateKey(f"PreScore{NAME}")
DRA_IN_USE_KEY: StateKey[frozenset[dra.DeviceID]] = StateKey(f"PreScore{NAME}/dra")


class AcceleratorIsolation:
    """PreFilter/Filter: isolation and GPU model/memory; PreScore/Score: packing (or the soft penalty)."""

    name: ClassVar[str] = NAME

    def __init__(self, args: AcceleratorIsolationArgs | None, handle: Handle) -> None:
        self.handle = handle
        self.args = args or AcceleratorIsolationArgs()
        self._resources = self.args.resources
        self._labels = self.args.node_labels
        self._hard = self.args.mode == MODE_FILTER
        self.dra = DRAAccelerators(self.args.dra_drivers, self.args.dra_device_classes)

    def events_to_register(self) -> list[ce.ClusterEventWithHint]:
        """What the Filter reads: a node's labels and accelerator allocatable, the DRA devices it
        publishes, and the pod's own scenario annotations (no hints: each may help)."""
        node = ce.Action.ADD | ce.Action.UPDATE_NODE_LABEL | ce.Action.UPDATE_NODE_ALLOCATABLE
        return [
            ce.ClusterEventWithHint(ce.ClusterEvent(ce.Resource.NODE, node)),
            ce.ClusterEventWithHint(ce.ClusterEvent(ce.Resource.RESOURCE_SLICE, ce.Action.ADD | ce.Action.UPDATE)),
            ce.ClusterEventWithHint(ce.ClusterEvent(ce.Resource.TARGET_POD, ce.Action.UPDATE)),
        ]

    @property
    def _store(self) -> DRAStore:
        return self.handle.dra

    def is_accelerator_node(self, node: Node) -> bool:
        if is_accelerator_node(node, self._resources, self._labels):
            return True
        return bool(self.dra.node_devices(self._store, node.name))

    def _pod_state(self, pod: Pod) -> PodAcceleratorState:
        return pod_state(pod, self._resources, self.dra.pod_request(pod, self._store))

    def _score_state(self, pod: Pod) -> PodAcceleratorState:
        return PodAcceleratorState(
            accelerator_requests(pod, self._resources), dra_devices=self.dra.pod_request(pod, self._store)
        )

    def pre_filter(self, state: CycleState, pod: Pod, nodes: Sequence[NodeInfo]) -> Status:
        try:
            s = self._pod_state(pod)
        except ValueError as e:
            return Status.unresolvable(str(e))
        if not s.products and s.min_memory_mib is None and (s.is_accelerator_pod or not self._hard):
            return SKIP
        state.write(PRE_FILTER_KEY, s)
        return SUCCESS

    def filter(self, state: CycleState, pod: Pod, node_info: NodeInfo) -> Status:
        node = node_info.node
        if node is None:
            return Status.as_error(ERR_REASON_INVALID_NODE_INFO)
        s = state.get(PRE_FILTER_KEY)
        if s is None:  # PreFilter disabled in the profile: compute here.
            try:
                s = self._pod_state(pod)
            except ValueError as e:
                return Status.unresolvable(str(e))
        if self._hard and not s.is_accelerator_pod and self.is_accelerator_node(node):
            return Status.unresolvable(ERR_REASON_RESERVED)
        reasons = hardware_reasons(s, node, self.args.product_label, self.args.memory_label)
        if reasons:
            return Status.unresolvable(*reasons)
        return SUCCESS

    def pre_score(self, state: CycleState, pod: Pod, nodes: Sequence[NodeInfo]) -> Status:
        s = self._score_state(pod)
        if not s.is_accelerator_pod and self._hard:
            return SKIP  # Ordinary pods only reach non-accelerator nodes: nothing to rank.
        state.write(PRE_SCORE_KEY, s)
        if s.dra_devices is not None:
            # One copy per cycle: allocated, assumed and pending devices (a burst's earlier pods).
            state.write(DRA_IN_USE_KEY, self._store.allocated_devices())
        return SUCCESS

    def score(self, state: CycleState, pod: Pod, node_info: NodeInfo) -> int:
        node = node_info.node
        if node is None:
            return MIN_NODE_SCORE
        s = state.get(PRE_SCORE_KEY)
        if s is None:  # PreScore disabled in the profile: compute here.
            s = self._score_state(pod)
        if not s.is_accelerator_pod:
            return MIN_NODE_SCORE if self.is_accelerator_node(node) else MAX_NODE_SCORE
        pw, bw = self.args.packing_weight, self.args.balance_weight
        packing = packing_score(s.requests, node_info, self._dra_packing(state, s, node.name)) if pw else 0
        balance = balance_score(pod, node_info) if bw else 0
        return (pw * packing + bw * balance) // (pw + bw)

    def _dra_packing(self, state: CycleState, s: PodAcceleratorState, node_name: str) -> tuple[int, ...]:
        """The DRA entry of the packing average; none when the pod has no accelerator claim or
        the node no accelerator devices."""
        if s.dra_devices is None:
            return ()
        devices = self.dra.node_devices(self._store, node_name)
        if not devices:
            return ()
        in_use = state.get(DRA_IN_USE_KEY)
        if in_use is None:
            in_use = self._store.allocated_devices()
            state.write(DRA_IN_USE_KEY, in_use)
        used = sum(1 for d in devices if d in in_use)
        return (dra_packing_score(s.dra_devices, used, len(devices)),)


SPEC = registry.PluginSpec(
    NAME,
    factory=AcceleratorIsolation,
    parse_args=parse_args,
    pod_annotations=frozenset({ANNOTATION_PRODUCT, ANNOTATION_MIN_MEMORY}),
)
