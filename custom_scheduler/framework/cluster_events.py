"""Cluster events and queueing hints: how a plugin says which changes may undo its rejections.

kube-scheduler's EnqueueExtensions (``k8s.io/kube-scheduler/framework`` types.go, and
``pkg/scheduler/framework/events.go`` at v1.37.2). A plugin that rejected a pod registers the
:class:`ClusterEvent` s that could make the pod schedulable, each with an optional
:data:`HintFn` that looks at the changed object and answers :attr:`Hint.QUEUE` (retry the pod)
or :attr:`Hint.SKIP` (this change cannot help it). The scheduling queue then retries a rejected
pod only when one of *its* rejecting plugins says so, instead of on every node or pod change.

The vocabulary is upstream's, so labels (``NodeAdd``, ``AssignedPodDelete``,
``storage.k8s.io/CSINodeAdd``) are the ``event`` label values of
``scheduler_queue_incoming_pods_total``:

- :class:`Resource` names what changed; ``Pod`` matches all three pod views (``AssignedPod``: a
  bound pod; ``UnscheduledPod``: another pending pod; ``TargetPod``: the rejected pod itself).
- :class:`Action` is a bit set; a registration matches an incoming event when they share a bit and
  the incoming one is no broader (an incoming ``Update`` that no specific extractor recognised
  matches only registrations of the whole ``Update``).
- :func:`node_changes` and :func:`pod_changes` turn an update into the specific events, as
  upstream's ``NodeSchedulingPropertiesChange`` / ``PodSchedulingPropertiesChange`` do.

Pure: no I/O, no queue, no plugin; plugins import it to declare, the core to match.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass
from typing import Any

from custom_scheduler.api.model import Node, Pod
from custom_scheduler.api.resources import CPU, EPHEMERAL_STORAGE, MEMORY


class Action(enum.IntFlag):
    """What happened to the object (upstream's ``ActionType`` bits, same order)."""

    NONE = 0
    ADD = enum.auto()
    DELETE = enum.auto()
    UPDATE_NODE_ALLOCATABLE = enum.auto()
    UPDATE_NODE_LABEL = enum.auto()
    UPDATE_NODE_TAINT = enum.auto()
    UPDATE_NODE_CONDITION = enum.auto()
    UPDATE_NODE_ANNOTATION = enum.auto()
    UPDATE_NODE_DECLARED_FEATURE = enum.auto()
    UPDATE_NODE_PREEMPTION_POLICY = enum.auto()
    UPDATE_POD_LABEL = enum.auto()
    UPDATE_POD_SCALE_DOWN = enum.auto()
    UPDATE_POD_SCALE_UP = enum.auto()
    UPDATE_POD_TOLERATION = enum.auto()
    UPDATE_POD_SCHEDULING_GATES_ELIMINATED = enum.auto()
    UPDATE_POD_GENERATED_RESOURCE_CLAIM = enum.auto()
    UPDATE = (
        UPDATE_NODE_ALLOCATABLE
        | UPDATE_NODE_LABEL
        | UPDATE_NODE_TAINT
        | UPDATE_NODE_CONDITION
        | UPDATE_NODE_ANNOTATION
        | UPDATE_NODE_DECLARED_FEATURE
        | UPDATE_NODE_PREEMPTION_POLICY
        | UPDATE_POD_LABEL
        | UPDATE_POD_SCALE_DOWN
        | UPDATE_POD_SCALE_UP
        | UPDATE_POD_TOLERATION
        | UPDATE_POD_SCHEDULING_GATES_ELIMINATED
        | UPDATE_POD_GENERATED_RESOURCE_CLAIM
    )
    ALL = ADD | DELETE | UPDATE


#: Upstream's ``ActionType.String()`` for the values it names (combinations other than Update and
#: All have no name there, and are never sent as incoming events).
_ACTION_NAMES = {
    Action.ADD: "Add",
    Action.DELETE: "Delete",
    Action.UPDATE_NODE_ALLOCATABLE: "UpdateNodeAllocatable",
    Action.UPDATE_NODE_LABEL: "UpdateNodeLabel",
    Action.UPDATE_NODE_TAINT: "UpdateNodeTaint",
    Action.UPDATE_NODE_CONDITION: "UpdateNodeCondition",
    Action.UPDATE_NODE_ANNOTATION: "UpdateNodeAnnotation",
    Action.UPDATE_NODE_DECLARED_FEATURE: "UpdateNodeDeclaredFeature",
    Action.UPDATE_NODE_PREEMPTION_POLICY: "UpdateNodePreemptionPolicy",
    Action.UPDATE_POD_LABEL: "UpdatePodLabel",
    Action.UPDATE_POD_SCALE_DOWN: "UpdatePodScaleDown",
    Action.UPDATE_POD_SCALE_UP: "UpdatePodScaleUp",
    Action.UPDATE_POD_TOLERATION: "UpdatePodToleration",
    Action.UPDATE_POD_SCHEDULING_GATES_ELIMINATED: "UpdatePodSchedulingGatesEliminated",
    Action.UPDATE_POD_GENERATED_RESOURCE_CLAIM: "UpdatePodGeneratedResourceClaim",
    Action.UPDATE: "Update",
    Action.ALL: "All",
}


class Resource(enum.StrEnum):
    """What changed (upstream's ``EventResource`` strings, plus our node-metrics source)."""

    POD = "Pod"
    ASSIGNED_POD = "AssignedPod"
    UNSCHEDULED_POD = "UnscheduledPod"
    TARGET_POD = "TargetPod"
    NODE = "Node"
    PERSISTENT_VOLUME = "PersistentVolume"
    PERSISTENT_VOLUME_CLAIM = "PersistentVolumeClaim"
    CSI_NODE = "storage.k8s.io/CSINode"
    CSI_DRIVER = "storage.k8s.io/CSIDriver"
    VOLUME_ATTACHMENT = "storage.k8s.io/VolumeAttachment"
    CSI_STORAGE_CAPACITY = "storage.k8s.io/CSIStorageCapacity"
    STORAGE_CLASS = "storage.k8s.io/StorageClass"
    RESOURCE_CLAIM = "resource.k8s.io/ResourceClaim"
    RESOURCE_SLICE = "resource.k8s.io/ResourceSlice"
    DEVICE_CLASS = "resource.k8s.io/DeviceClass"
    POD_GROUP = "scheduling.k8s.io/PodGroup"
    NODE_METRICS = "custom-scheduler.io/NodeMetrics"
    """Our NodeLoad plugin's metrics source refreshed (no upstream counterpart)."""
    WILDCARD = "*"


_POD_VIEWS = frozenset({Resource.ASSIGNED_POD, Resource.UNSCHEDULED_POD, Resource.TARGET_POD})


@dataclass(frozen=True, slots=True)
class ClusterEvent:
    """One kind of change: a resource and what happened to it. ``custom_label`` overrides the
    label for the queue's own events (upstream's ``ForceActivate``, ``UnschedulableTimeout``)."""

    resource: Resource
    action: Action
    custom_label: str = ""

    @property
    def label(self) -> str:
        """The metric label: ``<resource><action>`` as upstream's ``ClusterEvent.Label``."""
        return self.custom_label or f"{self.resource}{_ACTION_NAMES.get(self.action, '')}"

    @property
    def is_wildcard(self) -> bool:
        return self.resource is Resource.WILDCARD and self.action == Action.ALL


def matches(registered: ClusterEvent, incoming: ClusterEvent) -> bool:
    """Whether ``incoming`` is ``registered`` or more specific (upstream's ``MatchClusterEvents``):
    a registration of ``Node/Update`` takes ``Node/UpdateNodeLabel``, not the other way round."""
    if registered.is_wildcard:
        return True
    same = (
        registered.resource is Resource.WILDCARD
        or registered.resource is incoming.resource
        or (registered.resource is Resource.POD and incoming.resource in _POD_VIEWS)
    )
    return same and bool(registered.action & incoming.action) and incoming.action <= registered.action


class Hint(enum.Enum):
    """A plugin's answer about one pod and one change (upstream's ``QueueingHint``)."""

    SKIP = "QueueSkip"
    QUEUE = "Queue"


HintFn = Callable[[Pod, Any, Any], Hint]
"""``(rejected pod, old object, new object) -> Hint``: old is None on an add, new None on a delete.
An exception counts as QUEUE (upstream: an erring hint must not strand the pod)."""


TargetsFn = Callable[[Any, Any], "frozenset[str] | None"]
"""``(old, new) -> the UIDs of the pods the change can concern``, or None for any pod (upstream's
PreQueueingHintFn): the queue then asks the hint only of those pods, not of every pod the plugin
rejected."""


PodKeysFn = Callable[[Pod], "frozenset[Hashable] | None"]
"""``rejected pod -> the keys it waits on`` (None: any change may concern it). See ``EventKeysFn``."""

EventKeysFn = Callable[[Any, Any], "frozenset[Hashable] | None"]
"""``(old, new) -> the keys the change carries`` (None: it may concern any pod). With ``PodKeysFn``
an index: the queue keeps the pods a plugin rejected by their keys and asks the hint only of those
sharing a key with the change (and those whose keys are None). The pair must never hide a pod the
hint would queue: hint QUEUE implies a shared key, or a None on either side."""


@dataclass(frozen=True, slots=True)
class ClusterEventWithHint:
    """One registration: the event, the hint that looks closer (None: always QUEUE), and
    optionally which pods the change can concern at all (``targets``, or the keyed index
    ``pod_keys`` / ``event_keys``)."""

    event: ClusterEvent
    hint: HintFn | None = None
    targets: TargetsFn | None = None
    pod_keys: PodKeysFn | None = None
    event_keys: EventKeysFn | None = None


# -- the queue's own events (wildcards: every pod they name moves) -----------------------------------
FORCE_ACTIVATE = ClusterEvent(Resource.WILDCARD, Action.ALL, "ForceActivate")
UNSCHEDULABLE_TIMEOUT = ClusterEvent(Resource.WILDCARD, Action.ALL, "UnschedulableTimeout")

# -- the common events, named once -------------------------------------------------------------------
NODE_ADD = ClusterEvent(Resource.NODE, Action.ADD)
NODE_DELETE = ClusterEvent(Resource.NODE, Action.DELETE)
ASSIGNED_POD_ADD = ClusterEvent(Resource.ASSIGNED_POD, Action.ADD)
ASSIGNED_POD_UPDATE = ClusterEvent(Resource.ASSIGNED_POD, Action.UPDATE)
ASSIGNED_POD_DELETE = ClusterEvent(Resource.ASSIGNED_POD, Action.DELETE)
UNSCHEDULED_POD_ADD = ClusterEvent(Resource.UNSCHEDULED_POD, Action.ADD)
UNSCHEDULED_POD_DELETE = ClusterEvent(Resource.UNSCHEDULED_POD, Action.DELETE)


def node_changes(old: Node, new: Node) -> list[ClusterEvent]:
    """The specific update events of a node (upstream's ``NodeSchedulingPropertiesChange``; our
    node model keeps no conditions, annotations or preemption policy, which no plugin here
    registers for). Empty when nothing a plugin reads changed (a heartbeat)."""
    found = Action.NONE
    if old.unschedulable and not new.unschedulable:
        found |= Action.UPDATE_NODE_TAINT  # upstream reports a node made schedulable as a taint change
    if old.allocatable != new.allocatable:
        found |= Action.UPDATE_NODE_ALLOCATABLE
    if old.labels != new.labels:
        found |= Action.UPDATE_NODE_LABEL
    if old.taints != new.taints:
        found |= Action.UPDATE_NODE_TAINT
    if old.declared_features != new.declared_features:
        found |= Action.UPDATE_NODE_DECLARED_FEATURE
    return [ClusterEvent(Resource.NODE, a) for a in _bits(found)]


def pod_changes(old: Pod, new: Pod, *, target: bool) -> list[ClusterEvent]:
    """The specific update events of a pod (upstream's ``PodSchedulingPropertiesChange``): seen as
    an ``AssignedPod`` when bound, else as the ``TargetPod`` (the pending pod itself) or an
    ``UnscheduledPod`` (another one). A change none of the extractors names is a plain Update."""
    resource = Resource.ASSIGNED_POD if new.node_name else (Resource.TARGET_POD if target else Resource.UNSCHEDULED_POD)
    found = Action.NONE
    if old.labels != new.labels:
        found |= Action.UPDATE_POD_LABEL
    if scaled_down(old, new):
        found |= Action.UPDATE_POD_SCALE_DOWN
    if scaled_down(new, old):
        found |= Action.UPDATE_POD_SCALE_UP
    if old.scheduling_gates and not new.scheduling_gates:
        found |= Action.UPDATE_POD_SCHEDULING_GATES_ELIMINATED
    if len(old.tolerations) != len(new.tolerations):
        found |= Action.UPDATE_POD_TOLERATION
    if old.resource_claims != new.resource_claims:
        found |= Action.UPDATE_POD_GENERATED_RESOURCE_CLAIM
    actions = _bits(found) or [Action.UPDATE]
    return [ClusterEvent(resource, a) for a in actions]


def scaled_down(old: Pod, new: Pod) -> tuple[str, ...]:
    """The resources ``new`` requests less of than ``old`` (upstream's ``extractPodScaleDown``)."""
    names = (CPU, MEMORY, EPHEMERAL_STORAGE, *old.requests.scalar)
    return tuple(r for r in names if old.requests.get(r) > new.requests.get(r))


def _bits(flags: Action) -> list[Action]:
    return [a for a in Action if a and a.value & (a.value - 1) == 0 and a in flags]


def any_interest(registrations: Sequence[ClusterEventWithHint], event: ClusterEvent) -> bool:
    """Whether one of ``registrations`` matches ``event``."""
    return any(matches(r.event, event) for r in registrations)


#: The stores' object kinds (framework.volumes, framework.dra_store) as event resources. A
#: DeviceTaintRule is seen as an update of the slices it taints, as upstream's resourceslice
#: tracker reports it.
_STORE_KINDS = {
    "PersistentVolume": Resource.PERSISTENT_VOLUME,
    "PersistentVolumeClaim": Resource.PERSISTENT_VOLUME_CLAIM,
    "StorageClass": Resource.STORAGE_CLASS,
    "CSINode": Resource.CSI_NODE,
    "CSIDriver": Resource.CSI_DRIVER,
    "CSIStorageCapacity": Resource.CSI_STORAGE_CAPACITY,
    "VolumeAttachment": Resource.VOLUME_ATTACHMENT,
    "ResourceSlice": Resource.RESOURCE_SLICE,
    "DeviceClass": Resource.DEVICE_CLASS,
    "ResourceClaim": Resource.RESOURCE_CLAIM,
}
DEVICE_TAINT_RULE = "DeviceTaintRule"


def store_event(kind: str, old: object, new: object) -> ClusterEvent | None:
    """The event of a change a volume or DRA store reports (``old`` None: an add; ``new`` None:
    a delete); None for a kind no plugin can register for."""
    if kind == DEVICE_TAINT_RULE:
        return ClusterEvent(Resource.RESOURCE_SLICE, Action.UPDATE)
    resource = _STORE_KINDS.get(kind)
    if resource is None:
        return None
    action = Action.ADD if old is None else (Action.DELETE if new is None else Action.UPDATE)
    return ClusterEvent(resource, action)


#: The resources whose informers feed the volume store, and those that need the DRA store (a
#: DeviceClass alone does not: NodeResourcesFit registers for classes only to notice an extended
#: resource name, which matters only where devices are published and claimed).
STORAGE_RESOURCES = frozenset(
    {
        Resource.PERSISTENT_VOLUME,
        Resource.PERSISTENT_VOLUME_CLAIM,
        Resource.STORAGE_CLASS,
        Resource.CSI_NODE,
        Resource.CSI_DRIVER,
        Resource.CSI_STORAGE_CAPACITY,
        Resource.VOLUME_ATTACHMENT,
    }
)
DRA_RESOURCES = frozenset({Resource.RESOURCE_CLAIM, Resource.RESOURCE_SLICE})
