"""VolumeBinding: a pod's PersistentVolumeClaims must be bound, or bindable, from the node.

kube-scheduler's ``VolumeBinding`` (``pkg/scheduler/framework/plugins/volumebinding``), whose job is
the part of volume binding that depends on the node, i.e. claims of ``WaitForFirstConsumer``
classes ("delayed binding"); the PV controller binds Immediate claims on its own. The node-dependent
logic, upstream's ``binder.go`` (``FindPodVolumes``, ``checkBindings``), is :mod:`.volume_binder`;
this module is the extension points around it.

- **PreFilter**: a missing, Lost or terminating claim makes the pod UnschedulableAndUnresolvable
  with the claim's error; an unbound claim of an Immediate class (or one pre-bound through
  ``volumeName`` but not yet bound) is ``pod has unbound immediate PersistentVolumeClaims``: the PV
  controller must bind it first, and its update requeues the pod. A pod without claims is Skip.
- **Filter** per node (UnschedulableAndUnresolvable, reasons in upstream's order): a bound claim's
  PV must exist and its node affinity admit the node; an unbound delayed claim that already has a
  ``selected-node`` only fits that node; otherwise the smallest matching Available PV is chosen
  (never the same PV for two claims of the pod), and claims without one must be provisionable:
  a class with a provisioner (not ``kubernetes.io/no-provisioner``) whose ``allowedTopologies``
  admit the node and, when its CSIDriver opts into capacity tracking, a CSIStorageCapacity that
  the node reaches with room for the claim.
- **Score** (StorageCapacityScoring, on by default since 1.37): per class, the utilisation
  ``requested * 100 / capacity`` of the chosen static PVs (or, with only dynamic provisioning, of
  the node's CSIStorageCapacity) through the configured shape (default: 0% → 10, 100% → 0, scaled
  by 10), averaged over classes.
- **Reserve** assumes each chosen PV with its claimRef, and each claim to provision with the
  ``selected-node`` annotation, in the :class:`~custom_scheduler.framework.volumes.VolumeStore`;
  later cycles see the assumed versions, so a burst never gives one PV to two pods.
  **Unreserve** restores them.
- **PreBind** updates the PVs and claims through the API, then registers a wait for the PV
  controller to report every claim fully bound (``bind-completed``), the PVs' claimRefs still set
  and node affinity still matching, within ``bindTimeoutSeconds`` (default 600). The wait is a
  Future (``pre_bind_pending``) resolved by the store's waiter on PV/PVC events, so the binding
  pool's thread is free while it waits. Failure or timeout fails the binding cycle; the scheduler
  then unreserves and retries the pod.

Not carried over: translating in-tree PVs to CSI for the node-affinity check (a migrated in-tree
PV is judged by its own node affinity), and the alpha in-place-resize deferral.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any, ClassVar

from custom_scheduler.api.model import Pod
from custom_scheduler.api.storage import (
    bind_volume_to_claim,
    claim_with_selected_node,
    pv_from_json,
    pvc_from_json,
)
from custom_scheduler.framework import cluster_events as ce
from custom_scheduler.framework import registry
from custom_scheduler.framework.interface import Handle
from custom_scheduler.framework.types import (
    MAX_NODE_SCORE,
    SKIP,
    SUCCESS,
    Code,
    CycleState,
    NodeInfo,
    StateKey,
    Status,
)
from custom_scheduler.framework.volumes import VolumeStore
from custom_scheduler.plugins import args_reader, helpers, signers, volume_hints
from custom_scheduler.plugins.helpers import MAX_CUSTOM_PRIORITY_SCORE, MAX_UTILIZATION, UtilizationShapePoint
from custom_scheduler.plugins.volume_binder import (
    ERR_REASON_BIND_CONFLICT,
    ERR_REASON_NODE_CONFLICT,
    ERR_REASON_NOT_ENOUGH_SPACE,
    ERR_REASON_PV_NOT_EXIST,
    Binding,
    ClaimError,
    PodVolumeClaims,
    PodVolumes,
    Provision,
    check_bindings,
    check_pod_claims,
    find_pod_volumes,
    get_pod_volume_claims,
)

__all__ = [  # the binder's names too, so callers of the plugin's module keep finding them here
    "DEFAULT_BIND_TIMEOUT_SECONDS",
    "DEFAULT_SHAPE",
    "ERR_REASON_BIND_CONFLICT",
    "ERR_REASON_NODE_CONFLICT",
    "ERR_REASON_NOT_ENOUGH_SPACE",
    "ERR_REASON_PV_NOT_EXIST",
    "ERR_REASON_UNBOUND_IMMEDIATE",
    "NAME",
    "SPEC",
    "STATE_KEY",
    "Binding",
    "ClaimError",
    "PodVolumeClaims",
    "PodVolumes",
    "Provision",
    "VolumeBinding",
    "VolumeBindingArgs",
    "check_bindings",
    "check_pod_claims",
    "find_pod_volumes",
    "get_pod_volume_claims",
    "parse_args",
    "score_volumes",
]

NAME = "VolumeBinding"

ERR_REASON_UNBOUND_IMMEDIATE = "pod has unbound immediate PersistentVolumeClaims"

DEFAULT_BIND_TIMEOUT_SECONDS = 600

STATE_KEY: StateKey[_State] = StateKey(NAME)


# --- args ----------------------------------------------------------------------------------------


DEFAULT_SHAPE: tuple[UtilizationShapePoint, ...] = (
    UtilizationShapePoint(0, MAX_CUSTOM_PRIORITY_SCORE),
    UtilizationShapePoint(100, 0),
)


@dataclass(frozen=True, slots=True)
class VolumeBindingArgs:
    bind_timeout_seconds: int = DEFAULT_BIND_TIMEOUT_SECONDS
    """How long PreBind waits for the PV controller to finish binding (0 or more)."""
    shape: tuple[UtilizationShapePoint, ...] = DEFAULT_SHAPE
    """The scoring function of storage utilisation (StorageCapacityScoring's default: emptier is better)."""


def parse_args(raw: Mapping[str, Any] | None, path: str) -> VolumeBindingArgs:
    """Parse, default and validate ``VolumeBindingArgs`` (kube-scheduler's v1 field names)."""
    r = args_reader.ArgsReader(path)
    doc = r.mapping(raw, path, fields=("bindTimeoutSeconds", "shape"), kind="VolumeBindingArgs")
    timeout = r.integer(doc, "bindTimeoutSeconds", path, DEFAULT_BIND_TIMEOUT_SECONDS)
    if timeout < 0:
        r.error(f"{path}.bindTimeoutSeconds", "invalid BindTimeoutSeconds, should not be a negative value")
    shape = DEFAULT_SHAPE
    if doc.get("shape") is not None:
        shape = helpers.parse_shape(r, doc, path)
    r.raise_errors()
    return VolumeBindingArgs(timeout, shape)


# --- scoring -------------------------------------------------------------------------------------


def _shape_fn(shape: Sequence[UtilizationShapePoint]) -> list[tuple[int, int]]:
    scale = MAX_NODE_SCORE // MAX_CUSTOM_PRIORITY_SCORE
    return [(p.utilization, p.score * scale) for p in shape]


def score_volumes(volumes: PodVolumes, shape: Sequence[UtilizationShapePoint]) -> int:
    """The node's score: per storage class, ``shape(requested * 100 / capacity)`` (100% when the
    capacity is 0 or exceeded), averaged over classes and rounded as Go's ``math.Round``.

    Static bindings group by the PV's class (requested: the claims, capacity: the PVs); with only
    dynamic provisioning, provisions with a known CSIStorageCapacity group by the claim's class
    (capacity: that pool's, once per class)."""
    fn = _shape_fn(shape)
    classes: dict[str, list[int]] = {}
    if volumes.static:
        for b in volumes.static:
            acc = classes.setdefault(b.pv.storage_class, [0, 0])
            acc[0] += b.pvc.request or 0
            acc[1] += b.pv.capacity
    else:
        for p in volumes.dynamic:
            if p.capacity is None:
                continue
            acc = classes.setdefault(p.pvc.class_name, [0, 0])
            acc[1] = p.capacity.capacity or 0
            acc[0] += p.pvc.request or 0
    if not classes:
        return 0
    total = 0
    for requested, capacity in classes.values():
        util = MAX_UTILIZATION if capacity == 0 or requested > capacity else requested * MAX_UTILIZATION // capacity
        total += helpers.broken_linear(fn, util)
    return helpers.go_round_ratio(total, len(classes))


def _pv_path(name: str) -> str:
    return f"/api/v1/persistentvolumes/{name}"


def _pvc_path(namespace: str, name: str) -> str:
    return f"/api/v1/namespaces/{namespace}/persistentvolumeclaims/{name}"


# --- the plugin ----------------------------------------------------------------------------------


@dataclass(slots=True)
class _State:
    claims: PodVolumeClaims | None = None
    by_node: dict[str, PodVolumes] = field(default_factory=dict)
    has_static: bool = False
    all_bound: bool = False
    pending: Future[Status] | None = None


class VolumeBinding:
    name: ClassVar[str] = NAME

    def __init__(self, args: VolumeBindingArgs | None, handle: Handle) -> None:
        self.args = args or VolumeBindingArgs()
        self.handle = handle

    def sign_pod(self, pod: Pod) -> signers.Fragments:
        """What this plugin reads of the pod (opportunistic batching)."""
        return signers.volumes(pod)

    def events_to_register(self) -> list[ce.ClusterEventWithHint]:
        """The storage changes that may help (see :mod:`.volume_hints`)."""
        return volume_hints.registrations(NAME)

    @property
    def store(self) -> VolumeStore:
        return self.handle.volumes

    # -- scheduling cycle -------------------------------------------------------------------------
    def pre_filter(self, state: CycleState, pod: Pod, nodes: Sequence[NodeInfo]) -> Status:
        if not pod.volumes:
            return SKIP
        try:
            if not check_pod_claims(pod, self.store):
                return SKIP
        except ClaimError as e:
            return Status.unresolvable(str(e))
        try:
            claims = get_pod_volume_claims(pod, self.store)
        except (ValueError, ClaimError) as e:
            return Status.as_error(str(e))
        if claims.unbound_immediate:
            return Status.unresolvable(ERR_REASON_UNBOUND_IMMEDIATE)
        state.write(STATE_KEY, _State(claims=claims))
        return SUCCESS

    def filter(self, state: CycleState, pod: Pod, node_info: NodeInfo) -> Status:
        s = state.read(STATE_KEY)
        node = node_info.node
        if node is None or s.claims is None:
            return Status.as_error("node not found")
        volumes, reasons = find_pod_volumes(pod, s.claims, node.name, node.labels, self.store)
        if reasons:
            return Status(Code.UNSCHEDULABLE_AND_UNRESOLVABLE, tuple(reasons))
        s.by_node[node.name] = volumes
        s.has_static = s.has_static or bool(volumes.static)
        return SUCCESS

    def pre_score(self, state: CycleState, pod: Pod, nodes: Sequence[NodeInfo]) -> Status:
        # Nodes without volume work all score 0, which cannot change the ranking: skip them.
        s = state.get(STATE_KEY)
        if s is None or not any(v.static or v.dynamic for v in s.by_node.values()):
            return SKIP
        return SUCCESS

    def score(self, state: CycleState, pod: Pod, node_info: NodeInfo) -> int:
        s = state.read(STATE_KEY)
        volumes = s.by_node.get(node_info.name)
        return score_volumes(volumes, self.args.shape) if volumes is not None else 0

    def reserve(self, state: CycleState, pod: Pod, node_name: str) -> Status:
        s = state.get(STATE_KEY)
        if s is None:
            return SUCCESS
        volumes = s.by_node.get(node_name)
        if volumes is None or self._all_bound(pod):
            s.all_bound = True
            return SUCCESS
        store = self.store
        static: list[Binding] = []
        dynamic: list[Provision] = []
        try:
            for b in volumes.static:
                new_pv, dirty = bind_volume_to_claim(b.pv, b.pvc)
                if dirty:
                    store.assume_pv(new_pv)
                static.append(Binding(new_pv, b.pvc))
            for p in volumes.dynamic:
                claim = claim_with_selected_node(p.pvc, node_name)
                store.assume_pvc(claim)
                dynamic.append(Provision(claim, p.capacity))
        except ValueError as e:
            _revert(store, PodVolumes(static, dynamic))
            return Status.as_error(str(e))
        s.by_node[node_name] = PodVolumes(static, dynamic)
        s.all_bound = False
        return SUCCESS

    def _all_bound(self, pod: Pod) -> bool:
        for v in pod.volumes:
            if v.claim:
                pvc = self.store.get_pvc(pod.namespace, v.claim)
                if pvc is None or not pvc.fully_bound:
                    return False
        return True

    def unreserve(self, state: CycleState, pod: Pod, node_name: str) -> None:
        s = state.get(STATE_KEY)
        if s is None:
            return
        volumes = s.by_node.get(node_name)
        if volumes is not None:
            _revert(self.store, volumes)

    # -- binding cycle ----------------------------------------------------------------------------
    def pre_bind_pre_flight(self, state: CycleState, pod: Pod, node_name: str) -> Status:
        """Upstream's: work to do unless every claim of the pod is already bound."""
        s = state.get(STATE_KEY)
        if s is None or s.all_bound:
            return Status(Code.SKIP)
        if node_name not in s.by_node:
            return Status.as_error(f'no pod volume found for node "{node_name}"')
        return SUCCESS

    def pre_bind(self, state: CycleState, pod: Pod, node_name: str) -> Status:
        s = state.get(STATE_KEY)
        if s is None or s.all_bound:
            return SUCCESS
        volumes = s.by_node.get(node_name)
        if volumes is None:
            return Status.as_error(f'no pod volume found for node "{node_name}"')
        client = self.handle.client
        if client is None:
            return Status.as_error("no API client to bind volumes")
        done_static = done_dynamic = 0
        try:
            for b in volumes.static:
                b.pv = pv_from_json(client.put(_pv_path(b.pv.name), b.pv.raw))
                done_static += 1
            for p in volumes.dynamic:
                p.pvc = pvc_from_json(client.put(_pvc_path(p.pvc.namespace, p.pvc.name), p.pvc.raw))
                done_dynamic += 1
        except Exception as e:
            _revert(self.store, PodVolumes(volumes.static[done_static:], volumes.dynamic[done_dynamic:]))
            return Status.as_error(f"binding volumes: {e}")
        bindings = list(volumes.static)
        claims = [p.pvc for p in volumes.dynamic]
        s.pending = self.store.wait_for(
            lambda: check_bindings(pod, node_name, bindings, claims, self.store),
            float(self.args.bind_timeout_seconds),
            what=pod.key,
        )
        return SUCCESS

    def pre_bind_pending(self, state: CycleState, pod: Pod, node_name: str) -> Future[Status] | None:
        s = state.get(STATE_KEY)
        return s.pending if s is not None else None


def _revert(store: VolumeStore, volumes: PodVolumes) -> None:
    for b in volumes.static:
        store.restore_pv(b.pv)
    for p in volumes.dynamic:
        store.restore_pvc(p.pvc)


SPEC = registry.PluginSpec(NAME, factory=VolumeBinding, parse_args=parse_args)
