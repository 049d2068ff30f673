"""Plugin protocols for each extension point, and the Handle plugins get at construction.

A plugin is a class with a ``name`` and any subset of the methods below; the runtime finds its
extension points with ``isinstance`` checks against these ``runtime_checkable`` protocols (Python's
counterpart of Go's interface assertions). Filter and Score are synchronous and do no I/O: they read
only the snapshot they are given, which is what makes them trivial to unit-test and lets ``explain``
and ``simulate`` run them offline. Only Bind (and PostFilter's preemption, through the Handle) talk
to the API server, and they run off the scheduling thread.

Method shapes (kube-scheduler's in Python):

=================  =====================================================  ==================
protocol           method                                                 returns
=================  =====================================================  ==================
PreEnqueuePlugin   ``pre_enqueue(pod)``                                   Status
QueueSortPlugin    ``less(a, b)``                                         bool
PreFilterPlugin    ``pre_filter(state, pod, nodes)``                      Status (SKIP ok)
FilterPlugin       ``filter(state, pod, node_info)``                      Status
PostFilterPlugin   ``post_filter(state, pod, statuses)``                  PostFilterResult
PreScorePlugin     ``pre_score(state, pod, nodes)``                       Status (SKIP ok)
ScorePlugin        ``score(state, pod, node_info)``                       int
ScoreExtensions    ``normalize_score(state, pod, scores)`` (in place)     Status
ReservePlugin      ``reserve`` / ``unreserve(state, pod, node_name)``     Status / None
PermitPlugin       ``permit(state, pod, node_name)``                      Status
PreBindPlugin      ``pre_bind(state, pod, node_name)``                    Status
PreBindWaiter      ``pre_bind_pending(state, pod, node_name)``            Future[Status] | None
BindPlugin         ``bind(state, pod, node_name)``                        Status (SKIP ok)
PostBindPlugin     ``post_bind(state, pod, node_name)``                   None
=================  =====================================================  ==================

``PreEnqueuePlugin.pre_enqueue`` runs in the scheduling queue, under its lock, whenever a pod would
enter activeQ (added, updated while gated, back from backoff or unschedulable). A non-success keeps
the pod out of activeQ as *gated*: it is never attempted, so it gets no event and no condition. It
must be cheap, pure and must not call the queue (kube-scheduler's SchedulingGates reads one field).

``PreFilterPlugin.pre_filter`` may narrow the candidate nodes with ``state.restrict_nodes(...)``
(kube-scheduler's PreFilterResult). ``PreFilterExtensions`` lets preemption and nominated-pod
evaluation update a plugin's precomputed state when pods are added to or removed from a node.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any, ClassVar, Protocol, runtime_checkable

from custom_scheduler.fence import Fence
from custom_scheduler.framework.dra import DRAStore
from custom_scheduler.framework.types import CycleState, NodeInfo, NodeScore, Snapshot, Status
from custom_scheduler.framework.volumes import VolumeStore
from custom_scheduler.labels import Selector
from custom_scheduler.loadmetrics import MetricsSource
from custom_scheduler.model import Pod, PodDisruptionBudget


@runtime_checkable
class Plugin(Protocol):
    name: ClassVar[str]


@runtime_checkable
class PreEnqueuePlugin(Plugin, Protocol):
    def pre_enqueue(self, pod: Pod) -> Status:
        """Whether ``pod`` may enter activeQ at all (Success), or must wait as gated."""
        ...


@runtime_checkable
class QueueSortPlugin(Plugin, Protocol):
    def less(self, a: Pod, a_ts: float, b: Pod, b_ts: float) -> bool:
        """Whether ``a`` (queued at ``a_ts``) goes before ``b`` (queued at ``b_ts``)."""
        ...


@runtime_checkable
class PreFilterPlugin(Plugin, Protocol):
    def pre_filter(self, state: CycleState, pod: Pod, nodes: Sequence[NodeInfo]) -> Status: ...


@runtime_checkable
class PreFilterExtensions(Plugin, Protocol):
    def add_pod(self, state: CycleState, pod: Pod, pod_to_add: Pod, node_info: NodeInfo) -> Status: ...

    def remove_pod(self, state: CycleState, pod: Pod, pod_to_remove: Pod, node_info: NodeInfo) -> Status: ...


@runtime_checkable
class FilterPlugin(Plugin, Protocol):
    def filter(self, state: CycleState, pod: Pod, node_info: NodeInfo) -> Status: ...


@dataclass(frozen=True, slots=True)
class PostFilterResult:
    status: Status
    nominated_node_name: str = ""
    message: str = ""


@runtime_checkable
class PostFilterPlugin(Plugin, Protocol):
    def post_filter(self, state: CycleState, pod: Pod, statuses: Mapping[str, Status]) -> PostFilterResult: ...


@runtime_checkable
class PreScorePlugin(Plugin, Protocol):
    def pre_score(self, state: CycleState, pod: Pod, nodes: Sequence[NodeInfo]) -> Status: ...


@runtime_checkable
class ScorePlugin(Plugin, Protocol):
    def score(self, state: CycleState, pod: Pod, node_info: NodeInfo) -> int: ...


@runtime_checkable
class ScoreExtensions(Plugin, Protocol):
    def normalize_score(self, state: CycleState, pod: Pod, scores: list[NodeScore]) -> Status: ...


@runtime_checkable
class ReservePlugin(Plugin, Protocol):
    def reserve(self, state: CycleState, pod: Pod, node_name: str) -> Status: ...

    def unreserve(self, state: CycleState, pod: Pod, node_name: str) -> None: ...


@runtime_checkable
class PermitPlugin(Plugin, Protocol):
    def permit(self, state: CycleState, pod: Pod, node_name: str) -> Status: ...


@runtime_checkable
class PreBindPlugin(Plugin, Protocol):
    def pre_bind(self, state: CycleState, pod: Pod, node_name: str) -> Status: ...


@runtime_checkable
class PreBindWaiter(Plugin, Protocol):
    def pre_bind_pending(self, state: CycleState, pod: Pod, node_name: str) -> Future[Status] | None:
        """After ``pre_bind`` succeeded: what the binding cycle must still wait for before Bind
        (a Future resolved by an event, never by a parked thread), or None."""
        ...


@runtime_checkable
class BindPlugin(Plugin, Protocol):
    def bind(self, state: CycleState, pod: Pod, node_name: str) -> Status: ...


@runtime_checkable
class PostBindPlugin(Plugin, Protocol):
    def post_bind(self, state: CycleState, pod: Pod, node_name: str) -> None: ...


class Handle(Protocol):
    """What the framework lends plugins: the current snapshot and, for I/O plugins, the API."""

    def snapshot_nodes(self) -> Sequence[NodeInfo]:
        """Every node of the current cycle's snapshot (PreFilter of spread/affinity counts pods here)."""
        ...

    def get_node(self, name: str) -> NodeInfo | None: ...

    def current_snapshot(self) -> Snapshot:
        """The snapshot of the current cycle (vectorised plugins read its ``arrays``)."""
        ...

    @property
    def client(self) -> Any:
        """The :class:`custom_scheduler.kube.client.KubeClient`, or None offline (explain, simulate)."""
        ...

    @property
    def profile_name(self) -> str: ...

    def namespace_labels(self, namespace: str) -> Mapping[str, str] | None:
        """Labels of a namespace (for affinity ``namespaceSelector``); None when unknown."""
        ...

    def pdbs(self) -> Sequence[PodDisruptionBudget]:
        """Every PodDisruptionBudget in the cluster (preemption prefers victims that keep them)."""
        ...

    def nominated_pods(self, node_name: str) -> Sequence[Pod]:
        """Pods nominated to ``node_name`` by earlier preemptions and not yet bound."""
        ...

    def run_filter_with_nominated(self, state: CycleState, pod: Pod, node_info: NodeInfo) -> Status:
        """Run this profile's Filter plugins on ``node_info`` (with nominated pods accounted);
        preemption's dry runs use it on modified copies of a node."""
        ...

    def run_pre_filter_extension_add_pod(
        self, state: CycleState, pod: Pod, pod_to_add: Pod, node_info: NodeInfo
    ) -> Status: ...

    def run_pre_filter_extension_remove_pod(
        self, state: CycleState, pod: Pod, pod_to_remove: Pod, node_info: NodeInfo
    ) -> Status: ...

    def record_event(self, pod: Pod, *, type_: str, reason: str, action: str, note: str) -> None:
        """Emit an Event about ``pod`` (asynchronously; never blocks the cycle)."""
        ...

    def default_spread_selector(self, pod: Pod) -> Selector | None:
        """The union of the selectors of Services, ReplicaSets, StatefulSets and
        ReplicationControllers that select ``pod`` (PodTopologySpread's system default
        constraints); None when nothing selects it or the information is not available."""
        ...

    def metrics_source(self, name: str) -> MetricsSource | None:
        """The node-usage source installed under ``name`` (NodeLoad's ``metricsSource``); None when
        none is (offline tools, a daemon without NodeLoad)."""
        ...

    @property
    def volumes(self) -> VolumeStore:
        """PVs, PVCs, StorageClasses and CSI objects, with the volume assume cache and the
        binding waiter (the volume plugins' listers; empty when nothing feeds it)."""
        ...

    @property
    def dra(self) -> DRAStore:
        """ResourceSlices, DeviceClasses and ResourceClaims with the allocated-devices cache
        (DynamicResources' listers; empty when nothing feeds it)."""
        ...

    @property
    def fence(self) -> Fence:
        """Leadership as a token: a plugin that writes on a pod's behalf (Bind) calls
        ``fence.admit()`` right before each request and gives up when it says no."""
        ...


#: A plugin factory: ``(args, handle) -> plugin``; ``args`` is the already-validated Args object.
PluginFactory = Callable[[Any, Handle], Plugin]
