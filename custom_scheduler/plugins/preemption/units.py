"""Preemption victims as units: kube-scheduler 1.37's workload-aware preemption.

A running pod of a PodGroup is not always evicted on its own. Upstream 1.37 (``framework/preemption/
types.go``, ``util.go``) turns the pods of the snapshot into *victims*:

- a pod whose native PodGroup has ``disruptionMode: all`` belongs to one victim holding every
  scheduled pod of that group, on whatever node: evicting any of them evicts all of them, and a
  group is only evicted if its priority is below the preemptor's (and reprieved only as a whole);
- every other pod (``disruptionMode: single`` or unset, a scheduler-plugins CRD group, no group) is
  a victim of its own.

A victim's priority is its PodGroup's ``spec.priority`` (0 when unset) for a pod that names a native
group the store knows, else the pod's own; victims are ordered by importance (upstream's
``MoreImportantVictim``): higher priority, then a group before a single pod of a group before a
plain pod, then more pods, then the earlier start.

Why a unit and not a widening afterwards: with ``all`` the group's pods on *other* nodes leave too,
so the dry run on one node must account for them (PreFilter extensions told of every removal) and
the choice between nodes must see the real cost. With ``single`` the minimal set stays minimal: a
gang is not evicted whole because one of its pods is in the way (upstream's e2e spec "should preempt
partial group with Single disruption mode").
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from custom_scheduler.api import podgroup as gang
from custom_scheduler.api.model import Pod
from custom_scheduler.api.podgroup import PodGroup
from custom_scheduler.framework.types import NodeInfo

#: Upstream's victim ranks (``victimRank``): a PodGroup victim, or a pod of a group, outranks a
#: plain pod. (CompositePodGroups, rank 3, are alpha and not read here.)
RANK_POD = 1
RANK_POD_GROUP = 2

GroupLookup = Callable[[Pod], PodGroup | None]


@dataclass(frozen=True, slots=True)
class Victim:
    """One unit of eviction: its pods with the node each runs on, its priority and importance."""

    members: tuple[tuple[str, Pod], ...]
    """(node name, pod) for every pod evicted with this victim; the node is the snapshot's."""
    priority: int
    rank: int
    earliest_start: float
    group: bool = False
    """True for a ``disruptionMode: all`` PodGroup (upstream's ``IsGroup``, for the disruption count)."""

    @property
    def pods(self) -> tuple[Pod, ...]:
        return tuple(p for _, p in self.members)

    def importance(self) -> tuple[int, int, int, float]:
        """Sort key putting the more important victim first (``MoreImportantVictim``)."""
        return (-self.priority, -self.rank, -len(self.members), self.earliest_start)


def _start(pod: Pod, now: float) -> float:
    return pod.start_time if pod.start_time is not None else now


@dataclass
class VictimIndex:
    """The victims of one preemption attempt, built lazily from the snapshot's nodes.

    ``group_for`` is the PodGroup lookup (the gang store's); ``nodes`` the snapshot's NodeInfos,
    scanned once, and only when some pod belongs to an ``all`` group, for the group's pods on
    other nodes.
    """

    group_for: GroupLookup
    nodes: Sequence[NodeInfo]
    now: float = field(default_factory=time.time)
    _spread: dict[tuple[str, str], list[tuple[str, Pod]]] | None = None

    def priority(self, pod: Pod) -> int:
        """The priority ``pod`` has as a victim (upstream's ``GetPodPriority``)."""
        group = self._native_group(pod)
        if group is None:
            return pod.priority
        return group.priority if group.priority is not None else 0

    def _native_group(self, pod: Pod) -> PodGroup | None:
        if not pod.pod_group or not pod.pod_group_native:
            return None
        group = self.group_for(pod)
        return group if group is not None and group.api == gang.NATIVE else None

    def on_node(self, node: NodeInfo) -> list[Victim]:
        """The victims with at least one pod on ``node`` (an ``all`` group once, with all its pods)."""
        out: list[Victim] = []
        seen: set[tuple[str, str]] = set()
        for pod in node.pods.values():
            group = self._native_group(pod)
            if group is None or not group.disrupt_all:
                rank = RANK_POD_GROUP if group is not None else RANK_POD
                out.append(Victim(((node.name, pod),), self.priority(pod), rank, _start(pod, self.now)))
                continue
            key = (group.api, group.key)
            if key in seen:
                continue
            seen.add(key)
            members = tuple(self._placed(key)) or ((node.name, pod),)
            start = min(_start(p, self.now) for _, p in members)
            prio = group.priority if group.priority is not None else 0
            out.append(Victim(members, prio, RANK_POD_GROUP, start, group=True))
        return out

    def _placed(self, key: tuple[str, str]) -> list[tuple[str, Pod]]:
        """Every pod of the group ``key`` placed in the snapshot (scanned once per attempt)."""
        if self._spread is None:
            spread: dict[tuple[str, str], list[tuple[str, Pod]]] = {}
            for ni in self.nodes:
                for p in ni.pods.values():
                    group = self._native_group(p)
                    if group is not None and group.disrupt_all:
                        spread.setdefault((group.api, group.key), []).append((ni.name, p))
            self._spread = spread
        return self._spread.get(key, [])


# --- job-level preemption (issue #28) --------------------------------------------------------------


def widen_to_gangs(
    victims: Sequence[Pod],
    preemptor_priority: int,
    group_for: GroupLookup,
    bound_members: Callable[[PodGroup], Sequence[Pod]],
    priority: Callable[[Pod], int],
) -> tuple[Pod, ...] | None:
    """``victims`` as whole units for a gang that preempts (job-level preemption).

    A victim gang (minCount > 1) may lose only its members above minCount — the *extras* of an
    elastic gang, any of its bound pods being as good as another — so the evictions never leave it
    below its quorum; one victim more and the whole gang goes, its pods on every node (a gang never
    keeps part of its core). A ``disruptionMode: all`` group is already whole (upstream's unit), a
    pod without a gang is a unit of one. None when widening would take a pod whose priority is
    not below ``preemptor_priority``: that gang cannot be a victim, so the plan is void.
    """
    out: dict[str, Pod] = {p.uid: p for p in victims}
    by_group: dict[tuple[str, str], tuple[PodGroup, list[Pod]]] = {}
    for p in victims:
        group = group_for(p) if p.pod_group else None
        if group is None or not group.gang or group.min_count <= 1 or group.disrupt_all:
            continue
        by_group.setdefault((group.api, group.key), (group, []))[1].append(p)
    for group, taken in by_group.values():
        bound = list({q.uid: q for q in (*bound_members(group), *taken)}.values())
        if len(taken) <= len(bound) - group.min_count:
            continue  # only extras: the gang keeps its quorum
        for p in bound:
            if priority(p) >= preemptor_priority:
                return None
            out.setdefault(p.uid, p)
    return tuple(out.values())
