"""The Handle given to plugins: the snapshot of the current cycle, the API client, namespaces.

One implementation serves the daemon, ``explain`` and ``simulate``: they differ only in the
snapshot they hand over and whether a client is present (offline: None). Every collaborator (the
nominator's lister, the event sink, the PDB lister, the queue's activate, the fence) comes in
through the constructor, so a handle is complete once built; the attributes stay assignable for
unit tests that swap one.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from custom_scheduler.api.labels import Selector
from custom_scheduler.api.model import Pod, PodDisruptionBudget
from custom_scheduler.framework.clusterapi import ClusterClient
from custom_scheduler.framework.dra_store import DRAStore
from custom_scheduler.framework.extender import NO_EXTENDERS, Extenders
from custom_scheduler.framework.fence import Fence
from custom_scheduler.framework.gang_store import GangStore
from custom_scheduler.framework.interface import RequestsFit
from custom_scheduler.framework.loadmetrics import MetricsSource, Sources
from custom_scheduler.framework.requests_fit import requests_fit
from custom_scheduler.framework.types import CycleState, NodeInfo, Snapshot, Status
from custom_scheduler.framework.volumes import VolumeStore
from custom_scheduler.framework.waiting import WaitingPodMap

if TYPE_CHECKING:
    from custom_scheduler.framework.runtime import Framework


class SnapshotHandle:
    def __init__(
        self,
        snapshot: Snapshot,
        *,
        profile_name: str,
        client: ClusterClient | None = None,
        namespace_labels: Callable[[str], Mapping[str, str] | None] | None = None,
        namespace_version: Callable[[], int] | None = None,
        default_spread_selector: Callable[[Pod], Selector | None] | None = None,
        volumes: VolumeStore | None = None,
        dra: DRAStore | None = None,
        metrics_sources: Sources | None = None,
        gangs: GangStore | None = None,
        pdb_lister: Callable[[], Sequence[PodDisruptionBudget]] | None = None,
        nominated_lister: Callable[[str], Sequence[Pod]] | None = None,
        event_sink: Callable[..., None] | None = None,
        activator: Callable[[Sequence[Pod]], object] | None = None,
        preempting: Callable[[str], bool] | None = None,
        fence: Fence | None = None,
        extenders: Extenders | None = None,
    ) -> None:
        self.snapshot = snapshot
        self._profile = profile_name
        self._client = client
        self._ns = namespace_labels or (lambda ns: None)
        self._ns_version = namespace_version or (lambda: 0)
        self._spread = default_spread_selector or (lambda pod: None)
        self._volumes = volumes if volumes is not None else VolumeStore()
        self._dra = dra if dra is not None else DRAStore()
        self._metrics = metrics_sources if metrics_sources is not None else Sources()
        self._gangs = gangs if gangs is not None else GangStore()
        self.framework: Framework | None = None
        self.pdb_lister: Callable[[], Sequence[PodDisruptionBudget]] = pdb_lister or list
        self.nominated_lister: Callable[[str], Sequence[Pod]] = nominated_lister or (lambda node: ())
        self.event_sink: Callable[..., None] | None = event_sink
        # The queue's activate (offline: nothing to activate).
        self.activator: Callable[[Sequence[Pod]], object] = activator or (lambda pods: None)
        # The evictor's "is this pod's preemption still running" (offline: never).
        self._preempting: Callable[[str], bool] = preempting or (lambda uid: False)
        # Never revoked unless the composition root hands in the elector's (App does).
        self.fence: Fence = fence if fence is not None else Fence()
        # The configured HTTP extenders (shared by every profile's handle).
        self._extenders = extenders if extenders is not None else NO_EXTENDERS

    def snapshot_nodes(self) -> Sequence[NodeInfo]:
        return self.snapshot.node_list

    def get_node(self, name: str) -> NodeInfo | None:
        return self.snapshot.get(name)

    def current_snapshot(self) -> Snapshot:
        return self.snapshot

    @property
    def client(self) -> ClusterClient | None:
        return self._client

    @property
    def profile_name(self) -> str:
        return self._profile

    def namespace_labels(self, namespace: str) -> Mapping[str, str] | None:
        return self._ns(namespace)

    def namespace_labels_version(self) -> int:
        return self._ns_version()

    def default_spread_selector(self, pod: Pod) -> Selector | None:
        return self._spread(pod)

    def metrics_source(self, name: str) -> MetricsSource | None:
        return self._metrics.get(name)

    @property
    def volumes(self) -> VolumeStore:
        return self._volumes

    @property
    def dra(self) -> DRAStore:
        return self._dra

    @property
    def gangs(self) -> GangStore:
        return self._gangs

    @property
    def extenders(self) -> Extenders:
        return self._extenders

    def pdbs(self) -> Sequence[PodDisruptionBudget]:
        return self.pdb_lister()

    def nominated_pods(self, node_name: str) -> Sequence[Pod]:
        return self.nominated_lister(node_name)

    def _fwk(self) -> Framework:
        if self.framework is None:
            raise RuntimeError("handle is not attached to a framework")
        return self.framework

    def run_filter_with_nominated(self, state: CycleState, pod: Pod, node_info: NodeInfo) -> Status:
        return self._fwk().run_filter_with_nominated(state, pod, node_info, self.nominated_pods(node_info.name))

    def run_pre_filter_extension_add_pod(
        self, state: CycleState, pod: Pod, pod_to_add: Pod, node_info: NodeInfo
    ) -> Status:
        return self._fwk().run_pre_filter_extension_add_pod(state, pod, pod_to_add, node_info)

    def run_pre_filter_extension_remove_pod(
        self, state: CycleState, pod: Pod, pod_to_remove: Pod, node_info: NodeInfo
    ) -> Status:
        return self._fwk().run_pre_filter_extension_remove_pod(state, pod, pod_to_remove, node_info)

    def extensions_see_added_pods(self, state: CycleState) -> bool:
        return self._fwk().extensions_see_added_pods(state)

    def requests_fit(self, state: CycleState, pod: Pod) -> RequestsFit | None:
        fwk = self._fwk()
        return requests_fit(fwk.filter, state, pod, fwk.extensions_see_added_pods(state), self.nominated_pods)

    @property
    def waiting_pods(self) -> WaitingPodMap:
        return self._fwk().waiting

    def activate(self, pods: Sequence[Pod]) -> None:
        self.activator(pods)

    def preempting(self, uid: str) -> bool:
        """Whether the pod's own preemption is still evicting its victims (upstream's
        ``IsPodRunningPreemption``)."""
        return self._preempting(uid)

    def record_event(
        self, pod: Any, *, type_: str, reason: str, action: str, note: str, kind: str = "Pod", api_version: str = "v1"
    ) -> None:
        if self.event_sink is None:
            return
        if kind == "Pod":
            self.event_sink(pod, type_=type_, reason=reason, action=action, note=note, controller=self._profile)
        else:
            self.event_sink(
                pod,
                type_=type_,
                reason=reason,
                action=action,
                note=note,
                controller=self._profile,
                kind=kind,
                api_version=api_version,
            )
