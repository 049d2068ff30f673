"""GangScheduling's requeue rules: which changes may release a gang member it held back.

Upstream registers a pod added (pending or bound) that may complete a group, a PodGroup added, and
a PodGroup updated (its hint: a gang's minCount decreased). Here the
:class:`~custom_scheduler.framework.gang_store.GangStore` already tells which group changed (a
:class:`~custom_scheduler.framework.gang_store.GangChange`: a group appeared, lowered its
minCount, gained a member, or its API turned out not to be served), so the daemon sends that change
as the event's new object and the one hint asks whether the rejected pod belongs to it.

Pods GangScheduling's Filter keeps off a node reserved for a starving gang
(:mod:`.gang_reservations`) need no event of their own: the reservation remembers them and
activates them (``Handle.activate``) when it ends — the gang placed, deleted, or the reservation
expired. And as capacity beyond a reservation frees when a pod leaves a node, an assigned pod
deleted requeues such a pod (:func:`room_beyond_reservation`).
"""

from __future__ import annotations

from typing import Any

from custom_scheduler.api import podgroup as gang
from custom_scheduler.api.model import Pod
from custom_scheduler.framework import gang_store
from custom_scheduler.framework.cluster_events import (
    ASSIGNED_POD_ADD,
    ASSIGNED_POD_DELETE,
    UNSCHEDULED_POD_ADD,
    Action,
    ClusterEvent,
    ClusterEventWithHint,
    Hint,
    Resource,
)

POD_GROUP_ADD = ClusterEvent(Resource.POD_GROUP, Action.ADD)
POD_GROUP_UPDATE = ClusterEvent(Resource.POD_GROUP, Action.UPDATE)
#: The PodGroup API a member names is not served: its held members go alone.
POD_GROUP_API_ABSENT = ClusterEvent(Resource.POD_GROUP, Action.DELETE, "PodGroupApiAbsent")

_EVENTS = {
    gang_store.POD_GROUP_ADD: POD_GROUP_ADD,
    gang_store.POD_GROUP_UPDATE: POD_GROUP_UPDATE,
    gang_store.POD_GROUP_MEMBER_ADD: UNSCHEDULED_POD_ADD,
    gang_store.POD_GROUP_API_ABSENT: POD_GROUP_API_ABSENT,
}


def change_event(change: gang_store.GangChange) -> ClusterEvent:
    """The cluster event a gang store change is (an unknown label: a PodGroup update)."""
    return _EVENTS.get(change.event, POD_GROUP_UPDATE)


def member_of_change(pod: Pod, old: Any, new: Any) -> Hint:
    """The changed group is the pod's; a pod added is in the pod's group (a change of any other
    kind: the pod may be helped)."""
    if isinstance(new, gang_store.GangChange):
        return Hint.QUEUE if new.matches(pod) else Hint.SKIP
    if isinstance(new, Pod):
        same = gang.api_of(new) == gang.api_of(pod) and gang.group_of(new) == gang.group_of(pod)
        return Hint.QUEUE if same and gang.group_of(pod) else Hint.SKIP
    return Hint.QUEUE


def room_beyond_reservation(pod: Pod, old: Any, new: Any) -> Hint:
    """A pod left a node: a pod GangScheduling's Filter kept off a reserved node may now fit in
    the capacity beyond the reservation. Gang members are not held off by their own reservation
    (their retries follow the rules above and the resource plugins')."""
    return Hint.SKIP if gang.group_of(pod) else Hint.QUEUE


def registrations() -> list[ClusterEventWithHint]:
    return [
        ClusterEventWithHint(ASSIGNED_POD_DELETE, room_beyond_reservation),
        ClusterEventWithHint(UNSCHEDULED_POD_ADD, member_of_change),
        ClusterEventWithHint(ASSIGNED_POD_ADD, member_of_change),
        ClusterEventWithHint(POD_GROUP_ADD, member_of_change),
        ClusterEventWithHint(POD_GROUP_UPDATE, member_of_change),
        ClusterEventWithHint(POD_GROUP_API_ABSENT, member_of_change),
    ]
