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
PermitPlugin       ``permit(state, pod, node_name)``                      (Status, timeout s)
PreBindPlugin      ``pre_bind(state, pod, node_name)``                    Status
PreBindWaiter      ``pre_bind_pending(state, pod, node_name)``            Future[Status] | None
BindPlugin         ``bind(state, pod, node_name)``                        BindResult
PostBindPlugin     ``post_bind(state, pod, node_name)``                   None
EnqueueExtensions  ``events_to_register()``                               [ClusterEventWithHint]
SignPlugin         ``sign_pod(pod)``                                      fragments | None
=================  =====================================================  ==================

``SignPlugin.sign_pod`` (upstream's SignPod) returns the parts of the pod the plugin reads, as
``(key, value)`` fragments, or None when it cannot vouch that two pods equal in them get the same
verdicts and scores (then the pod is not batched); see :mod:`~custom_scheduler.framework.batching`.

``EnqueueExtensions.events_to_register`` (upstream's EventsToRegister) lists the cluster events
that may undo this plugin's rejections, each with a queueing hint (see
:mod:`~custom_scheduler.framework.cluster_events`). A pod it rejected is retried only on those
events, and only when the hint says QUEUE. A plugin that can reject without implementing it is
asked about nothing and moves on every event (upstream unrolls it to a wildcard).

``PreEnqueuePlugin.pre_enqueue`` runs in the scheduling queue, under its lock, whenever a pod would
enter activeQ (added, updated while gated, back from backoff or unschedulable). A non-success keeps
the pod out of activeQ as *gated*: it is never attempted, so it gets no event and no condition. It
must be cheap, pure and must not call the queue (kube-scheduler's SchedulingGates reads one field).

``PreFilterPlugin.pre_filter`` may narrow the candidate nodes with ``state.restrict_nodes(...)``
(kube-scheduler's PreFilterResult). ``PreFilterExtensions`` lets preemption and nominated-pod
evaluation update a plugin's precomputed state when pods are added to or removed from a node.

``PostFilterPlugin.post_filter`` *decides*; it does not write. Its result names the node to
nominate, the victims to evict and the lower-priority nominations to clear, and the scheduler's
preemption port carries them out (off the scheduling thread in the daemon, in memory in
``simulate``), so every caller reads the same value instead of a plugin attribute.

``PermitPlugin.permit`` answers ``(status, timeout)`` as upstream's ``(*Status, time.Duration)``:
``Code.WAIT`` parks the pod, already assumed, until a plugin allows it through the Handle's
:class:`WaitingPods` (``allow``/``reject``) or ``timeout`` seconds pass (then it is rejected).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import Future
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar, Protocol, runtime_checkable

from custom_scheduler.api.labels import Selector
from custom_scheduler.api.model import Pod, PodDisruptionBudget
from custom_scheduler.api.resources import Resources
from custom_scheduler.framework.cluster_events import ClusterEventWithHint
from custom_scheduler.framework.clusterapi import ClusterClient
from custom_scheduler.framework.dra_store import DRAStore
from custom_scheduler.framework.fence import Fence
from custom_scheduler.framework.gang_store import GangStore
from custom_scheduler.framework.loadmetrics import MetricsSource
from custom_scheduler.framework.types import BindResult, CycleState, NodeInfo, NodeScore, Snapshot, Status
from custom_scheduler.framework.volumes import VolumeStore


@runtime_checkable
class Plugin(Protocol):
    name: ClassVar[str]


@runtime_checkable
class PreEnqueuePlugin(Plugin, Protocol):
    def pre_enqueue(self, pod: Pod) -> Status:
        """Whether ``pod`` may enter activeQ at all (Success), or must wait as gated."""
        ...


@runtime_checkable
class EnqueueExtensions(Plugin, Protocol):
    def events_to_register(self) -> Sequence[ClusterEventWithHint]:
        """The events that may make a pod this plugin rejected schedulable, with their hints."""
        ...


@runtime_checkable
class SignPlugin(Plugin, Protocol):
    def sign_pod(self, pod: Pod) -> Sequence[tuple[str, Any]] | None:
        """The pod's fragments this plugin's verdicts and scores depend on; None: not signable."""
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
    """What PostFilter decided: ``status`` success with ``nominated_node_name`` when evicting
    ``victims`` lets the pod fit there; ``cleared_nominations`` are lower-priority pods nominated to
    that node that lose their nomination. ``message`` is appended to the pod's FitError."""

    status: Status
    nominated_node_name: str = ""
    message: str = ""
    victims: tuple[Pod, ...] = ()
    cleared_nominations: tuple[Pod, ...] = ()
    num_pdb_violations: int = 0
    clear_nomination: bool = False
    """The pod's own nomination can no longer work (no candidate anywhere): drop it. Any other
    failure keeps it, e.g. while the victims of an earlier preemption are still terminating."""


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
    def permit(self, state: CycleState, pod: Pod, node_name: str) -> tuple[Status, float]: ...


@runtime_checkable
class PodGroupPlugin(Plugin, Protocol):
    """A plugin that makes a group's pods go through one scheduling cycle together (gangs).

    The scheduling cycle asks :meth:`group_of` of every popped pod; pods of a group are taken from
    the queue together, placed one after the other in one snapshot, and committed all or none by
    :meth:`placement_feasible` (upstream's ``PlacementFeasible`` of the pod-group cycle).
    """

    def group_of(self, pod: Pod) -> str | None:
        """The key of the gang ``pod`` belongs to, or None to schedule it alone."""
        ...

    def placement_feasible(self, group: str, *, cycle_size: int, tried: int, placed: int) -> Status:
        """After ``tried`` of the cycle's ``cycle_size`` members were tried and ``placed`` of them
        assumed: SUCCESS (enough: commit), WAIT (not yet, and members outside this cycle may
        still come: commit and wait at Permit) or UNSCHEDULABLE (cannot be: revert all)."""
        ...

    def topology_key(self, group: str) -> str | None:
        """A node label the whole gang must share one value of (zone, rack), or None."""
        ...

    def group_attempted(self, group: str, result: str, message: str, placed: Sequence[tuple[Pod, str]]) -> None:
        """One group cycle ended (``scheduled`` | ``unschedulable`` | ``waiting`` | ``error``):
        status and events for the group; ``placed`` are the (pod, node) committed."""
        ...


class WaitingPod(Protocol):
    """A pod parked at Permit (upstream's ``fwk.WaitingPod``)."""

    @property
    def pod(self) -> Pod: ...

    @property
    def node_name(self) -> str: ...

    def pending_plugins(self) -> Sequence[str]:
        """Permit plugins that answered WAIT and have not allowed the pod yet."""
        ...

    def allow(self, plugin: str) -> None:
        """``plugin`` lets the pod through; it binds once every waiting plugin has."""
        ...

    def reject(self, plugin: str, message: str) -> None:
        """End the wait with Unschedulable ``message``: the binding cycle undoes the reservation."""
        ...


class WaitingPods(Protocol):
    """The pods waiting at Permit, shared by the profile's plugins."""

    def get(self, uid: str) -> WaitingPod | None: ...

    def __iter__(self) -> Iterator[WaitingPod]: ...


@runtime_checkable
class PreBindPlugin(Plugin, Protocol):
    def pre_bind(self, state: CycleState, pod: Pod, node_name: str) -> Status: ...


@runtime_checkable
class PreBindPreFlightPlugin(Plugin, Protocol):
    def pre_bind_pre_flight(self, state: CycleState, pod: Pod, node_name: str) -> Status:
        """Whether this plugin's PreBind will have work for ``pod`` on ``node_name`` (upstream's
        PreBindPreFlight): SUCCESS if so, SKIP if not, an ERROR. Cheap and without API calls: it
        decides whether the pod is nominated to the node before a binding that may take long."""
        ...


@runtime_checkable
class PreBindWaiter(Plugin, Protocol):
    def pre_bind_pending(self, state: CycleState, pod: Pod, node_name: str) -> Future[Status] | None:
        """After ``pre_bind`` succeeded: what the binding cycle must still wait for before Bind
        (a Future resolved by an event, never by a parked thread), or None."""
        ...


@runtime_checkable
class BindPlugin(Plugin, Protocol):
    def bind(self, state: CycleState, pod: Pod, node_name: str) -> BindResult: ...


@runtime_checkable
class PostBindPlugin(Plugin, Protocol):
    def post_bind(self, state: CycleState, pod: Pod, node_name: str) -> None: ...


#: The profile's filters' verdict on one node, nominated pods accounted, as if the node's pods
#: requested ``requested`` in all and numbered ``pods``: ``node_fit(requested, pods)``.
NodeFit = Callable[[Resources, int], Status]

#: ``requests_fit(state, node_info)``: that node's :data:`NodeFit` for the cycle's pod (see
#: :meth:`DryRunner.requests_fit`).
RequestsFit = Callable[[CycleState, NodeInfo], NodeFit]


class DryRunner(Protocol):
    """The part of the Handle a preemption dry run needs: the profile's filters and PreFilter
    extensions, run on modified copies of a node (and of the cycle state)."""

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

    def extensions_see_added_pods(self, state: CycleState) -> bool:
        """Whether some PreFilter extension is told of pods added and removed for ``state``'s pod
        (False: the two calls above do nothing, and a dry run need not make them)."""
        ...

    def requests_fit(self, state: CycleState, pod: Pod) -> RequestsFit | None:
        """:meth:`run_filter_with_nominated` as a function of a node's requested resources and pod
        count, when that is all the filters read of the node's pods for ``state``'s pod: every
        active filter reads only the Node (``filter_reads_node_only``) or is a
        :class:`RequestsFilterPlugin`, and no PreFilter extension follows added pods. A dry run
        then tallies removals and additions instead of copying the node. None otherwise."""
        ...


class Handle(DryRunner, Protocol):
    """What the framework lends plugins: the current snapshot and, for I/O plugins, the API (and,
    from :class:`DryRunner`, the profile's filters for preemption's dry runs)."""

    def snapshot_nodes(self) -> Sequence[NodeInfo]:
        """Every node of the current cycle's snapshot (PreFilter of spread/affinity counts pods here)."""
        ...

    def get_node(self, name: str) -> NodeInfo | None: ...

    def current_snapshot(self) -> Snapshot:
        """The snapshot of the current cycle (vectorised plugins read its ``arrays``)."""
        ...

    @property
    def client(self) -> ClusterClient | None:
        """The API (the daemon's :class:`~custom_scheduler.kube.client.KubeClient`), or None offline
        (explain, simulate, shadow mode)."""
        ...

    @property
    def profile_name(self) -> str: ...

    def namespace_labels(self, namespace: str) -> Mapping[str, str] | None:
        """Labels of a namespace (for affinity ``namespaceSelector``); None when unknown."""
        ...

    def namespace_labels_version(self) -> int:
        """A number that changes whenever any namespace's labels may have changed (fixed offline):
        sums that read namespace labels are kept across cycles only while it stays the same."""
        ...

    def pdbs(self) -> Sequence[PodDisruptionBudget]:
        """Every PodDisruptionBudget in the cluster (preemption prefers victims that keep them)."""
        ...

    def nominated_pods(self, node_name: str) -> Sequence[Pod]:
        """Pods nominated to ``node_name`` by earlier preemptions and not yet bound."""
        ...

    def record_event(
        self, pod: Any, *, type_: str, reason: str, action: str, note: str, kind: str = "Pod", api_version: str = "v1"
    ) -> None:
        """Emit an Event about ``pod`` (asynchronously; never blocks the cycle); another namespaced
        object (a PodGroup) with its ``kind`` and ``api_version``."""
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
    def waiting_pods(self) -> WaitingPods:
        """Pods parked at Permit (Coscheduling allows a gang's waiting members once it is whole)."""
        ...

    def activate(self, pods: Sequence[Pod]) -> None:
        """Move these pending pods to activeQ now (upstream's ``Handle.Activate``), e.g. a gang's
        other members once one of them reached Permit."""
        ...

    def preempting(self, uid: str) -> bool:
        """Whether the pod's own preemption is still evicting its victims (upstream's
        ``Executor.IsPodRunningPreemption``), for DefaultPreemption's PreEnqueue."""
        ...

    @property
    def gangs(self) -> GangStore:
        """PodGroups of both APIs and their members (GangScheduling's lister)."""
        ...

    @property
    def fence(self) -> Fence:
        """Leadership as a token: a plugin that writes on a pod's behalf (Bind) calls
        ``fence.admit()`` right before each request and gives up when it says no."""
        ...


#: A plugin factory: ``(args, handle) -> plugin``; ``args`` is the already-validated Args object.
PluginFactory = Callable[[Any, Handle], Plugin]


# --- declared fast paths -------------------------------------------------------------------------
#
# Optional, faster ways to compute what an extension point already computes per node. A plugin
# offers one by implementing the protocol; the Framework checks ``isinstance`` once, when it is
# built, and from then on calls the fast path instead of the per-node method where the fast path
# applies. The per-node method stays the definition: a fast path must give exactly its results,
# which the property tests under tests/unit (plugins/test_batch_scores.py,
# core/test_vectorised_filters.py) check against the per-node methods.

if TYPE_CHECKING:  # annotations only: the protocols are checked by method name at run time
    from custom_scheduler.framework.arrays import Column, Mask, Rows


@runtime_checkable
class FilterMaskPlugin(FilterPlugin, Protocol):
    """A filter that can judge every node of a snapshot at once from its columns.

    Why: on the daemon's path the resource, taint and unschedulable checks are the same few
    integer comparisons on every node; over :attr:`Snapshot.arrays` (``framework.arrays.NodeArrays``,
    row ``i`` describes ``snap.node_list[i]``) they cost a few numpy operations per pod instead of
    a Python call per node.
    """

    def filter_mask(self, state: CycleState, pod: Pod, snap: Snapshot) -> Mask | bool | None:
        """Whether :meth:`filter` would return SUCCESS for each node of ``snap.node_list``.

        Called after PreFilter, in the same cycle state, only when ``snap.arrays`` is set and every
        row has its Node, and only for the snapshot's own NodeInfos (never for the modified copies
        preemption and nominated pods use: those always go through :meth:`filter`). Returns a bool
        array of ``len(snap.node_list)`` (True: ``filter`` succeeds on that node), ``True`` when it
        succeeds on every node, or None when this pod cannot be judged from the columns (the
        framework then calls :meth:`filter` per node). Any non-success of ``filter``, whatever its
        code, is False. The rejection reasons are not part of the mask: when no node passes, the
        framework runs :meth:`filter` per node to report them (or :meth:`filter_statuses`, when
        the plugin also declares :class:`FilterStatusesPlugin`).

        A plugin whose Filter reads only ``node_info.node`` (never the pods on the node) may say so
        with a class attribute ``filter_reads_node_only = True``: its mask then also answers for a
        copy of the node with pods nominated to it added (the whole pass of
        :mod:`~custom_scheduler.framework.masked_filter`), so the filter is not called on the copy.
        """
        ...


@runtime_checkable
class FilterStatusesPlugin(FilterMaskPlugin, Protocol):
    """A masked filter that also gives, at once, its status on each node its mask rejects.

    Why: when a pod fits few nodes or none (each preemptor of a wave), every rejected node's
    status is reported (the FitError, PostFilter's input); a Python Filter call per rejected node
    is then most of the masked pass.
    """

    def filter_statuses(self, state: CycleState, pod: Pod, snap: Snapshot, rows: Rows) -> Sequence[Status] | None:
        """:meth:`filter`'s status on each of ``snap.node_list[rows]``, in order, exactly (reasons,
        code; plugin stamped or not). Called as :meth:`filter_mask` is, with rows its mask
        rejected; None to have :meth:`filter` called per row instead."""
        ...


class RequestsFilterPlugin(Protocol):
    """A Filter that reads of a node's pods only the sum of their requests and their number
    (NodeResourcesFit).

    Why: a preemption dry run asks the filters about each candidate node again and again as it
    removes victims and adds them back; with such filters (and the others reading only the Node)
    it keeps a tally instead of a modified copy of the node (:meth:`DryRunner.requests_fit`)."""

    name: str

    def filter_requested(
        self, state: CycleState, pod: Pod, node_info: NodeInfo, requested: Resources, pods: int
    ) -> Status:
        """:meth:`FilterPlugin.filter`'s status, exactly, on ``node_info`` were its pods'
        requests summed to ``requested`` and their number ``pods``."""
        ...


@runtime_checkable
class BatchScorePlugin(ScorePlugin, Protocol):
    """A scorer that scores many nodes in one call."""

    def score_batch(self, state: CycleState, pod: Pod, nodes: Sequence[NodeInfo]) -> Sequence[int] | Column:
        """``[score(state, pod, ni) for ni in nodes]``, exactly, as ints or an int64 array.

        Called after PreScore in the same cycle state, instead of :meth:`ScorePlugin.score`. When
        ``nodes`` is a ``framework.arrays.NodeRows`` its ``cols`` and ``rows`` give each node's row
        in the snapshot's columns (the framework hands them over whenever they are known), so a
        plugin may compute the scores element-wise on the columns; otherwise ``nodes`` is any
        sequence and the plugin computes per node.
        """
        ...


@runtime_checkable
class BatchNormalizePlugin(ScoreExtensions, Protocol):
    """A score normaliser that works on plain ints, without :class:`NodeScore` objects."""

    def normalize_batch(self, state: CycleState, pod: Pod, raw: list[int]) -> list[int]:
        """The scores :meth:`ScoreExtensions.normalize_score` would leave, node-aligned with ``raw``
        (this plugin's raw scores of the nodes being scored), as a new list: ``raw`` is the raw
        detail ``explain`` reports and must not be modified."""
        ...
