"""VolumeBinding: a pod's PersistentVolumeClaims must be bound, or bindable, from the node.

kube-scheduler's ``VolumeBinding`` (``pkg/scheduler/framework/plugins/volumebinding``), whose job is
the part of volume binding that depends on the node, i.e. claims of ``WaitForFirstConsumer``
classes ("delayed binding"); the PV controller binds Immediate claims on its own.

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
    CLAIM_LOST,
    NOT_SUPPORTED_PROVISIONER,
    WAIT_FOR_FIRST_CONSUMER,
    CSIStorageCapacity,
    PersistentVolume,
    PersistentVolumeClaim,
    bind_volume_to_claim,
    claim_with_selected_node,
    find_matching_volume,
    not_found,
    pv_from_json,
    pv_matches_node,
    pvc_from_json,
    topology_allows,
)
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
from custom_scheduler.framework.volumes import BindingFailed, VolumeStore
from custom_scheduler.plugins import args_reader, helpers
from custom_scheduler.plugins.helpers import MAX_CUSTOM_PRIORITY_SCORE, MAX_UTILIZATION, UtilizationShapePoint

NAME = "VolumeBinding"

ERR_REASON_BIND_CONFLICT = "node(s) didn't find available persistent volumes to bind"
ERR_REASON_NODE_CONFLICT = "node(s) didn't match PersistentVolume's node affinity"
ERR_REASON_NOT_ENOUGH_SPACE = "node(s) did not have enough free storage"
ERR_REASON_PV_NOT_EXIST = "node(s) unavailable due to one or more pvc(s) bound to non-existent pv(s)"
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


# --- pure logic ----------------------------------------------------------------------------------


class ClaimError(Exception):
    """A claim the pod cannot use at all (missing, lost, terminating, not the pod's)."""


@dataclass(slots=True)
class PodVolumeClaims:
    """A pod's claims by state (``GetPodVolumeClaims``), and the PVs of each delayed claim's class."""

    bound: list[PersistentVolumeClaim] = field(default_factory=list)
    unbound_delayed: list[PersistentVolumeClaim] = field(default_factory=list)
    unbound_immediate: list[PersistentVolumeClaim] = field(default_factory=list)
    pvs_by_class: dict[str, list[PersistentVolume]] = field(default_factory=dict)


@dataclass(slots=True)
class Binding:
    """A static binding: ``pvc`` gets the existing ``pv``."""

    pv: PersistentVolume
    pvc: PersistentVolumeClaim


@dataclass(slots=True)
class Provision:
    """A claim to provision dynamically, with the node's CSIStorageCapacity when one was checked."""

    pvc: PersistentVolumeClaim
    capacity: CSIStorageCapacity | None = None


@dataclass(slots=True)
class PodVolumes:
    """What binding ``pod`` on one node takes: static bindings and claims to provision."""

    static: list[Binding] = field(default_factory=list)
    dynamic: list[Provision] = field(default_factory=list)


@dataclass(slots=True)
class _State:
    claims: PodVolumeClaims | None = None
    by_node: dict[str, PodVolumes] = field(default_factory=dict)
    has_static: bool = False
    all_bound: bool = False
    pending: Future[Status] | None = None


def check_pod_claims(pod: Pod, store: VolumeStore) -> bool:
    """``podHasPVCs``: whether the pod uses any claim; raises ClaimError for a claim that is
    missing, Lost, terminating or (for an ephemeral volume) not created for this pod."""
    has = False
    for v in pod.volumes:
        if not v.claim and not v.ephemeral:
            continue
        has = True
        pvc = store.get_pvc_api(pod.namespace, v.claim)
        if pvc is None:
            if v.ephemeral:
                raise ClaimError(
                    f'waiting for ephemeral volume controller to create the persistentvolumeclaim "{v.claim}"'
                )
            raise ClaimError(not_found("persistentvolumeclaim", v.claim))
        if pvc.phase == CLAIM_LOST:
            raise ClaimError(
                f'persistentvolumeclaim "{pvc.name}" bound to non-existent persistentvolume "{pvc.volume_name}"'
            )
        if pvc.deleting:
            raise ClaimError(f'persistentvolumeclaim "{pvc.name}" is being deleted')
        if v.ephemeral:
            check_ephemeral_owner(pod, pvc)
    return has


def check_ephemeral_owner(pod: Pod, pvc: PersistentVolumeClaim) -> None:
    """``ephemeral.VolumeIsForPod``: a generic ephemeral volume's claim must be controlled by the pod."""
    if pvc.namespace != pod.namespace or pvc.controller_uid != pod.uid:
        raise ClaimError(
            f"PVC {pvc.namespace}/{pvc.name} was not created for pod {pod.namespace}/{pod.name} (pod is not owner)"
        )


def is_delay_binding(pvc: PersistentVolumeClaim, store: VolumeStore) -> bool:
    """``IsDelayBindingMode``: the claim's class exists and is WaitForFirstConsumer. A class
    without a binding mode is an error (the API server always sets one)."""
    name = pvc.class_name
    if not name:
        return False
    sc = store.storage_class(name)
    if sc is None:
        return False
    if sc.binding_mode is None:
        raise ValueError(f'VolumeBindingMode not set for StorageClass "{name}"')
    return sc.binding_mode == WAIT_FOR_FIRST_CONSUMER


def get_pod_volume_claims(pod: Pod, store: VolumeStore) -> PodVolumeClaims:
    """Sort the pod's claims (assumed versions) into bound, delayed and immediate."""
    out = PodVolumeClaims()
    for v in pod.volumes:
        if not v.claim:
            continue
        pvc = store.get_pvc(pod.namespace, v.claim)
        if pvc is None:
            missing = not_found("persistentvolumeclaim", v.claim)
            raise ValueError(f'error getting PVC "{pod.namespace}/{v.claim}": {missing}')
        if v.ephemeral:
            check_ephemeral_owner(pod, pvc)
        if pvc.fully_bound:
            out.bound.append(pvc)
        elif is_delay_binding(pvc, store) and not pvc.volume_name:
            out.unbound_delayed.append(pvc)
        else:
            out.unbound_immediate.append(pvc)
    for pvc in out.unbound_delayed:
        out.pvs_by_class[pvc.class_name] = store.pvs_of_class(pvc.class_name)
    return out


def _has_enough_capacity(
    store: VolumeStore, provisioner: str, pvc: PersistentVolumeClaim, class_name: str, node_labels: Mapping[str, str]
) -> tuple[bool, CSIStorageCapacity | None]:
    """Whether a CSIStorageCapacity reachable from the node has room for the claim; only for CSI
    drivers that opt into capacity tracking (otherwise, or without a size, always enough)."""
    if pvc.request is None:
        return True, None
    driver = store.csidriver(provisioner)
    if driver is None or not driver.storage_capacity:
        return True, None
    for cap in store.capacities():
        limit = cap.volume_limit
        fits = cap.storage_class == class_name and limit is not None and limit >= pvc.request
        if fits and cap.node_topology.matches(node_labels):
            return True, cap
    return False, None


def find_pod_volumes(
    pod: Pod, claims: PodVolumeClaims, node_name: str, node_labels: Mapping[str, str], store: VolumeStore
) -> tuple[PodVolumes, list[str]]:
    """``FindPodVolumes``: what the pod's claims need on this node, and the reasons it does not
    fit (empty when it fits). Raises ValueError for a claim to provision with no usable class."""
    volumes = PodVolumes()
    bound_ok = unbound_ok = storage_ok = pvs_found = True

    def reasons() -> list[str]:
        out = []
        if not bound_ok:
            out.append(ERR_REASON_NODE_CONFLICT)
        if not unbound_ok:
            out.append(ERR_REASON_BIND_CONFLICT)
        if not storage_ok:
            out.append(ERR_REASON_NOT_ENOUGH_SPACE)
        if not pvs_found:
            out.append(ERR_REASON_PV_NOT_EXIST)
        return out

    for pvc in claims.bound:
        pv = store.get_pv(pvc.volume_name)
        if pv is None:
            pvs_found = False
            break
        if not pv_matches_node(pv, node_labels):
            bound_ok = False
            break
    if not (bound_ok and pvs_found):
        return volumes, reasons()
    if not claims.unbound_delayed:
        return volumes, reasons()

    to_match: list[PersistentVolumeClaim] = []
    to_provision: list[PersistentVolumeClaim] = []
    for pvc in claims.unbound_delayed:
        if pvc.selected_node is not None:
            if pvc.selected_node != node_name:
                unbound_ok = False
                return volumes, reasons()
            to_provision.append(pvc)
        else:
            to_match.append(pvc)
    if to_match:
        chosen: set[str] = set()
        # Smallest requests first, so each claim takes the smallest PV that fits it.
        for pvc in sorted(to_match, key=lambda c: c.request or 0):
            pv = find_matching_volume(pvc, claims.pvs_by_class.get(pvc.class_name, ()), node_labels, chosen)
            if pv is None:
                to_provision.append(pvc)
                unbound_ok = False
                continue
            chosen.add(pv.name)
            volumes.static.append(Binding(pv, pvc))
    if to_provision:
        unbound_ok = True
        for pvc in to_provision:
            if not pvc.class_name:
                raise ValueError(f'no class for claim "{pvc.key}"')
            sc = store.storage_class(pvc.class_name)
            if sc is None:
                raise ValueError(f'failed to find storage class "{pvc.class_name}"')
            provisionable = sc.provisioner and sc.provisioner != NOT_SUPPORTED_PROVISIONER
            if not provisionable or not topology_allows(sc, node_labels):
                unbound_ok = False
                volumes.dynamic = []
                return volumes, reasons()
            enough, cap = _has_enough_capacity(store, sc.provisioner, pvc, sc.name, node_labels)
            if not enough:
                storage_ok = False
                volumes.dynamic = []
                return volumes, reasons()
            volumes.dynamic.append(Provision(pvc, cap))
    return volumes, reasons()


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


def _rv(v: str) -> int:
    try:
        return int(v)
    except ValueError:
        return 0


def check_bindings(
    pod: Pod, node_name: str, bindings: Sequence[Binding], claims: Sequence[PersistentVolumeClaim], store: VolumeStore
) -> bool:
    """``checkBindings`` on the API's copies: True when every claim the pod's PreBind wrote is
    fully bound; False to keep waiting; raises BindingFailed when the binding must be retried
    (pod gone, node gone or no longer matching, claimRef reset, provisioning given up)."""
    labels = store.node_labels(node_name)
    if labels is None:
        raise BindingFailed(f'failed to get node "{node_name}": node "{node_name}" not found')
    if not store.pod_exists(pod.uid):
        raise BindingFailed(f"pod does not exist any more: {not_found('pods', pod.name)}")
    for b in bindings:
        pv = store.get_pv_api(b.pv.name)
        pvc = store.get_pvc_api(b.pvc.namespace, b.pvc.name)
        if pv is None:
            raise BindingFailed(f"failed to check binding: {not_found('persistentvolumes', b.pv.name)}")
        if pvc is None:
            raise BindingFailed(f"failed to check binding: {not_found('persistentvolumeclaims', b.pvc.key)}")
        if _rv(b.pv.resource_version) > _rv(pv.resource_version):
            return False  # our update has not come back through the watch yet
        if not pv_matches_node(pv, labels):
            raise BindingFailed(
                f'pv "{pv.name}" node affinity doesn\'t match node "{node_name}": no matching NodeSelectorTerms'
            )
        if pv.claim_ref is None or not pv.claim_ref.uid:
            raise BindingFailed(f'ClaimRef got reset for pv "{pv.name}"')
        if not pvc.fully_bound:
            return False
    for c in claims:
        pvc = store.get_pvc_api(c.namespace, c.name)
        if pvc is None:
            raise BindingFailed(f"failed to check provisioning pvc: {not_found('persistentvolumeclaims', c.key)}")
        if _rv(c.resource_version) > _rv(pvc.resource_version):
            return False
        if pvc.selected_node != node_name:
            # A provisioner that gives up removes the annotation to hand the claim back.
            raise BindingFailed(f'provisioning failed for PVC "{pvc.name}"')
        if pvc.volume_name:
            pv = store.get_pv_api(pvc.volume_name)
            if pv is None:
                return False  # the watch has not brought the new PV yet
            if not pv_matches_node(pv, labels):
                raise BindingFailed(
                    f'pv "{pv.name}" node affinity doesn\'t match node "{node_name}": no matching NodeSelectorTerms'
                )
        if not pvc.fully_bound:
            return False
    return True


def _pv_path(name: str) -> str:
    return f"/api/v1/persistentvolumes/{name}"


def _pvc_path(namespace: str, name: str) -> str:
    return f"/api/v1/namespaces/{namespace}/persistentvolumeclaims/{name}"


# --- the plugin ----------------------------------------------------------------------------------


class VolumeBinding:
    name: ClassVar[str] = NAME

    def __init__(self, args: VolumeBindingArgs | None, handle: Handle) -> None:
        self.args = args or VolumeBindingArgs()
        self.handle = handle

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
