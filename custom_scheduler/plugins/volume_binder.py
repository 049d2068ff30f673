"""VolumeBinding's binder (upstream's ``volumebinding/binder.go``): the pod's claims sorted by state,
what they need on one node, and whether what PreBind wrote has finished binding.

Pure functions of the pod, the node and the :class:`~custom_scheduler.framework.volumes.VolumeStore`
(no API calls, no plugin state), so the plugin's Filter, PreBind's wait and the unit tests run the
same code. Apart from :mod:`.volume_binding` because the plugin is the extension points around it
(state, scoring, the assume cache and the API writes), as upstream keeps the binder beside its plugin.

- :func:`check_pod_claims` / :func:`get_pod_volume_claims`: PreFilter's view of the claims
  (``podHasPVCs``, ``GetPodVolumeClaims``).
- :func:`find_pod_volumes`: Filter's ``FindPodVolumes``, in upstream's named steps
  (``checkBoundClaims``, the selected-node split, ``findMatchingVolumes``,
  ``checkVolumeProvisions``), each returning its verdicts.
- :func:`check_bindings`: PreBind's completion check (``checkBindings``), one static binding and
  one provisioned claim at a time.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from custom_scheduler.api.model import Pod
from custom_scheduler.api.model import resource_version_number as _rv
from custom_scheduler.api.storage import (
    CLAIM_LOST,
    NOT_SUPPORTED_PROVISIONER,
    WAIT_FOR_FIRST_CONSUMER,
    CSIStorageCapacity,
    PersistentVolume,
    PersistentVolumeClaim,
    find_matching_volume,
    not_found,
    pv_matches_node,
    topology_allows,
)
from custom_scheduler.framework.volumes import BindingFailed, VolumeStore

ERR_REASON_BIND_CONFLICT = "node(s) didn't find available persistent volumes to bind"
ERR_REASON_NODE_CONFLICT = "node(s) didn't match PersistentVolume's node affinity"
ERR_REASON_NOT_ENOUGH_SPACE = "node(s) did not have enough free storage"
ERR_REASON_PV_NOT_EXIST = "node(s) unavailable due to one or more pvc(s) bound to non-existent pv(s)"


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


@dataclass(slots=True)
class _Verdicts:
    """``FindPodVolumes``' four verdicts, each true until a step finds otherwise (a pod without
    volumes fits), turned into the Filter reasons in upstream's order at the end."""

    bound_ok: bool = True  # boundVolumesSatisfied: the bound claims' PVs admit the node
    unbound_ok: bool = True  # unboundVolumesSatisfied: every delayed claim can be bound or provisioned
    storage_ok: bool = True  # sufficientStorage: the node reaches a CSIStorageCapacity with room
    pvs_found: bool = True  # boundPVsFound: the bound claims' PVs exist

    def reasons(self) -> list[str]:
        pairs = (
            (self.bound_ok, ERR_REASON_NODE_CONFLICT),
            (self.unbound_ok, ERR_REASON_BIND_CONFLICT),
            (self.storage_ok, ERR_REASON_NOT_ENOUGH_SPACE),
            (self.pvs_found, ERR_REASON_PV_NOT_EXIST),
        )
        return [reason for ok, reason in pairs if not ok]


def find_pod_volumes(
    pod: Pod, claims: PodVolumeClaims, node_name: str, node_labels: Mapping[str, str], store: VolumeStore
) -> tuple[PodVolumes, list[str]]:
    """``FindPodVolumes``: what the pod's claims need on this node, and the reasons it does not
    fit (empty when it fits). Raises ValueError for a claim to provision with no usable class.

    Upstream's steps: the bound claims (``checkBoundClaims``), then the delayed ones split by their
    selected node, matched to Available PVs (``findMatchingVolumes``), and what is left checked for
    provisioning (``checkVolumeProvisions``). Unlike upstream, a bound claim that does not fit ends
    the search: the delayed claims are not looked at for a node that is out already."""
    volumes, verdicts = PodVolumes(), _Verdicts()
    verdicts.bound_ok, verdicts.pvs_found = _check_bound_claims(claims.bound, node_labels, store)
    if not (verdicts.bound_ok and verdicts.pvs_found) or not claims.unbound_delayed:
        return volumes, verdicts.reasons()
    split = _split_by_selected_node(claims.unbound_delayed, node_name)
    if split is None:
        verdicts.unbound_ok = False
        return volumes, verdicts.reasons()
    to_match, to_provision = split
    if to_match:
        verdicts.unbound_ok, volumes.static, unmatched = _find_matching_volumes(to_match, claims, node_labels)
        to_provision.extend(unmatched)
    if to_provision:
        # Whether the claims left can be provisioned decides alone (as upstream, which overwrites).
        verdicts.unbound_ok, verdicts.storage_ok, volumes.dynamic = _check_volume_provisions(
            to_provision, node_labels, store
        )
    return volumes, verdicts.reasons()


def _check_bound_claims(
    bound: Sequence[PersistentVolumeClaim], node_labels: Mapping[str, str], store: VolumeStore
) -> tuple[bool, bool]:
    """``checkBoundClaims``: (the PVs admit the node, the PVs exist), stopping at the first miss."""
    for pvc in bound:
        pv = store.get_pv(pvc.volume_name)
        if pv is None:
            return True, False
        if not pv_matches_node(pv, node_labels):
            return False, True
    return True, True


def _split_by_selected_node(
    delayed: Sequence[PersistentVolumeClaim], node_name: str
) -> tuple[list[PersistentVolumeClaim], list[PersistentVolumeClaim]] | None:
    """(claims to match against PVs, claims whose ``selected-node`` is this node, to provision);
    None when one was selected for another node (upstream's fast path: this node cannot do)."""
    to_match: list[PersistentVolumeClaim] = []
    to_provision: list[PersistentVolumeClaim] = []
    for pvc in delayed:
        if pvc.selected_node is None:
            to_match.append(pvc)
        elif pvc.selected_node == node_name:
            to_provision.append(pvc)
        else:
            return None
    return to_match, to_provision


def _find_matching_volumes(
    to_match: Sequence[PersistentVolumeClaim], claims: PodVolumeClaims, node_labels: Mapping[str, str]
) -> tuple[bool, list[Binding], list[PersistentVolumeClaim]]:
    """``findMatchingVolumes``: (every claim found a PV, the static bindings, the claims that found
    none). Smallest requests first, so each claim takes the smallest PV that fits it, and never a
    PV another claim of the pod took."""
    chosen: set[str] = set()
    bindings: list[Binding] = []
    unmatched: list[PersistentVolumeClaim] = []
    for pvc in sorted(to_match, key=lambda c: c.request or 0):
        pv = find_matching_volume(pvc, claims.pvs_by_class.get(pvc.class_name, ()), node_labels, chosen)
        if pv is None:
            unmatched.append(pvc)
            continue
        chosen.add(pv.name)
        bindings.append(Binding(pv, pvc))
    return not unmatched, bindings, unmatched


def _check_volume_provisions(
    to_provision: Sequence[PersistentVolumeClaim], node_labels: Mapping[str, str], store: VolumeStore
) -> tuple[bool, bool, list[Provision]]:
    """``checkVolumeProvisions``: (every claim is provisionable from the node, there is storage
    for each, the provisions; none unless both). Raises ValueError for a claim without a class,
    or whose class does not exist."""
    provisions: list[Provision] = []
    for pvc in to_provision:
        if not pvc.class_name:
            raise ValueError(f'no class for claim "{pvc.key}"')
        sc = store.storage_class(pvc.class_name)
        if sc is None:
            raise ValueError(f'failed to find storage class "{pvc.class_name}"')
        provisionable = sc.provisioner and sc.provisioner != NOT_SUPPORTED_PROVISIONER
        if not provisionable or not topology_allows(sc, node_labels):
            return False, True, []
        enough, cap = _has_enough_capacity(store, sc.provisioner, pvc, sc.name, node_labels)
        if not enough:
            return True, False, []
        provisions.append(Provision(pvc, cap))
    return True, True, provisions


def check_bindings(
    pod: Pod, node_name: str, bindings: Sequence[Binding], claims: Sequence[PersistentVolumeClaim], store: VolumeStore
) -> bool:
    """``checkBindings`` on the API's copies: True when every claim the pod's PreBind wrote is
    fully bound; False to keep waiting; raises BindingFailed when the binding must be retried
    (pod gone, node gone or no longer matching, claimRef reset, provisioning given up).

    Upstream's order: the node, the pod, then each static binding and each provisioned claim,
    stopping at the first that is not done."""
    labels = store.node_labels(node_name)
    if labels is None:
        raise BindingFailed(f'failed to get node "{node_name}": node "{node_name}" not found')
    if not store.pod_exists(pod.uid):
        raise BindingFailed(f"pod does not exist any more: {not_found('pods', pod.name)}")
    return all(_static_binding_done(b, node_name, labels, store) for b in bindings) and all(
        _provisioning_done(c, node_name, labels, store) for c in claims
    )


def _static_binding_done(b: Binding, node_name: str, labels: Mapping[str, str], store: VolumeStore) -> bool:
    """One static binding: its claim fully bound to the PV PreBind wrote (False: not yet)."""
    pv = store.get_pv_api(b.pv.name)
    pvc = store.get_pvc_api(b.pvc.namespace, b.pvc.name)
    if pv is None:
        raise BindingFailed(f"failed to check binding: {not_found('persistentvolumes', b.pv.name)}")
    if pvc is None:
        raise BindingFailed(f"failed to check binding: {not_found('persistentvolumeclaims', b.pvc.key)}")
    if _rv(b.pv.resource_version) > _rv(pv.resource_version):
        return False  # our update has not come back through the watch yet
    _check_node_affinity(pv, node_name, labels)
    if pv.claim_ref is None or not pv.claim_ref.uid:
        raise BindingFailed(f'ClaimRef got reset for pv "{pv.name}"')
    return pvc.fully_bound


def _provisioning_done(c: PersistentVolumeClaim, node_name: str, labels: Mapping[str, str], store: VolumeStore) -> bool:
    """One claim to provision: fully bound to a PV that admits the node (False: not yet)."""
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
        _check_node_affinity(pv, node_name, labels)
    return pvc.fully_bound


def _check_node_affinity(pv: PersistentVolume, node_name: str, labels: Mapping[str, str]) -> None:
    """Raise BindingFailed when ``pv``'s node affinity no longer admits the node (its labels
    changed meanwhile)."""
    if not pv_matches_node(pv, labels):
        raise BindingFailed(
            f'pv "{pv.name}" node affinity doesn\'t match node "{node_name}": no matching NodeSelectorTerms'
        )
