"""VolumeZone: a pod's bound PersistentVolumes must be in the node's zone and region.

kube-scheduler's ``VolumeZone``. PreFilter collects, for each of the pod's claims (not generic
ephemeral volumes) that is bound to a PV, the PV's zone/region labels (beta and GA keys; a value
may list several zones joined by ``__``). Filter rejects a node whose label for such a key (or the
GA key of a beta one) is missing or not among the PV's values, UnschedulableAndUnresolvable
``node(s) had no available volume zone``; a node with no zone or region label at all passes.

A claim not yet bound is fine if its class is WaitForFirstConsumer (VolumeBinding decides); any
other unbound claim, a missing claim, class or PV is UnschedulableAndUnresolvable with upstream's
message. A pod whose PVs carry no topology labels is Skip.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, ClassVar

from custom_scheduler.api.model import Pod
from custom_scheduler.api.storage import (
    GA_LABEL,
    TOPOLOGY_LABELS,
    WAIT_FOR_FIRST_CONSUMER,
    not_found,
    pv_zone_topologies,
)
from custom_scheduler.framework import cluster_events as ce
from custom_scheduler.framework import registry
from custom_scheduler.framework.interface import Handle
from custom_scheduler.framework.types import SKIP, SUCCESS, Code, CycleState, NodeInfo, StateKey, Status
from custom_scheduler.plugins import signers, volume_hints

NAME = "VolumeZone"

ERR_REASON_CONFLICT = "node(s) had no available volume zone"

PRE_FILTER_KEY: StateKey[list[tuple[str, frozenset[str]]]] = StateKey(f"PreFilter{NAME}")

_REJECT = Status(Code.UNSCHEDULABLE_AND_UNRESOLVABLE, (ERR_REASON_CONFLICT,), NAME)


class VolumeZone:
    name: ClassVar[str] = NAME

    def __init__(self, args: Any, handle: Handle) -> None:
        del args
        self.handle = handle

    def sign_pod(self, pod: Pod) -> signers.Fragments:
        """What this plugin reads of the pod (opportunistic batching)."""
        return signers.volumes(pod)

    def events_to_register(self) -> list[ce.ClusterEventWithHint]:
        """The storage changes that may help (see :mod:`.volume_hints`)."""
        return volume_hints.registrations(NAME)

    def pv_topologies(self, pod: Pod) -> list[tuple[str, frozenset[str]]] | Status:
        """(label key, allowed values) of every PV the pod's claims are bound to, or the status
        that rejects the pod outright."""
        store = self.handle.volumes
        out: list[tuple[str, frozenset[str]]] = []
        for v in pod.volumes:
            if v.ephemeral or (not v.claim and v.disk) or v.csi_driver:
                continue
            if not v.claim:
                return Status.unresolvable("PersistentVolumeClaim had no name")
            pvc = store.get_pvc_api(pod.namespace, v.claim)
            if pvc is None:
                return Status.unresolvable(not_found("persistentvolumeclaim", v.claim))
            if not pvc.volume_name:
                sc_name = pvc.class_name
                if not sc_name:
                    return Status.unresolvable("PersistentVolumeClaim had no pv name and storageClass name")
                sc = store.storage_class(sc_name)
                if sc is None:
                    return Status.unresolvable(not_found("storageclass.storage.k8s.io", sc_name))
                if sc.binding_mode is None:
                    return Status.unresolvable(f'VolumeBindingMode not set for StorageClass "{sc_name}"')
                if sc.binding_mode == WAIT_FOR_FIRST_CONSUMER:
                    continue
                return Status.unresolvable("PersistentVolume had no name")
            pv = store.get_pv_api(pvc.volume_name)
            if pv is None:
                return Status.unresolvable(not_found("persistentvolume", pvc.volume_name))
            out.extend(pv_zone_topologies(pv))
        return out

    def pre_filter(self, state: CycleState, pod: Pod, nodes: Sequence[NodeInfo]) -> Status:
        if not pod.volumes:
            return SKIP
        got = self.pv_topologies(pod)
        if isinstance(got, Status):
            return got
        if not got:
            return SKIP
        state.write(PRE_FILTER_KEY, got)
        return SUCCESS

    def filter(self, state: CycleState, pod: Pod, node_info: NodeInfo) -> Status:
        topologies = state.read(PRE_FILTER_KEY)
        node = node_info.node
        if node is None:
            return Status.as_error("node not found")
        node_labels = node.labels
        if not any(k in node_labels for k in TOPOLOGY_LABELS):
            return SUCCESS
        for key, values in topologies:
            value = node_labels.get(key)
            if value is None:
                value = node_labels.get(GA_LABEL.get(key, key))
            if value is None or value not in values:
                return _REJECT
        return SUCCESS


SPEC = registry.PluginSpec(NAME, factory=VolumeZone, parse_args=registry.no_args)
