"""GangScheduling: all-or-nothing scheduling of a PodGroup's members (upstream's plugin, v1.37).

A gang is a PodGroup with a quorum: the native ``scheduling.k8s.io/v1beta1`` group with
``schedulingPolicy.gang.minCount``, or a scheduler-plugins ``scheduling.x-k8s.io/v1alpha1`` group
with ``minMember`` (see :mod:`custom_scheduler.api.podgroup`). Two extension points, as upstream:

- **PreEnqueue** — the barrier. A member stays out of activeQ (gated, no cycle, no event) until its
  PodGroup object exists and at least minCount members exist. Both are cluster events the store
  reports (:class:`~custom_scheduler.framework.gang_store.GangChange`), so the queue retries the group's
  pods on a PodGroup add, a lowered minCount or a member add, never on a timer. A native ``basic``
  group holds nothing back.
- **Permit** — the quorum. A member that got a node waits, assumed, while fewer than minCount
  members are assumed or bound, and wakes the group's unplaced members so they are tried now; the
  member that completes the quorum allows every waiting one. The wait's timeout is the group's
  ``scheduleTimeoutSeconds`` (CRD) or this plugin's ``permitTimeoutSeconds`` (upstream's fixed
  5 minutes); the framework caps it at 15 minutes and rejects the pod when it passes.

Topology (issue #28): ``topologyLevels`` is the cluster's hierarchy of node labels (widest first);
a group's required and preferred levels (:mod:`custom_scheduler.api.podgroup`) become the tiers of
:mod:`custom_scheduler.framework.gang_topology` the group cycle tries, tightest first. With
``jobLevelPreemption`` a gang that preempts takes other gangs as units (never part of their core,
:func:`~custom_scheduler.plugins.preemption.units.widen_to_gangs`); off by default, as upstream's
``disruptionMode: single`` lets a preemptor take part of a gang.

Reservations (issue #28 item 3, ours: upstream's plugin has no Filter): a gang pending longer than
``reservation.threshold`` reserves capacity where it fits soonest, and **Filter** keeps other pods
off the reserved amounts unless their declared runtime ends before the gang's expected start
(:mod:`custom_scheduler.plugins.gang_reservations`; on by default, ``reservation.enabled: false``
turns it off). Its PreFilter answers Skip while no node is reserved, so Filter then costs nothing.

The group cycle in core places a gang's queued members together and asks
:func:`custom_scheduler.api.podgroup.placement_verdict` whether to commit (upstream's PlacementFeasible).

Upstream enables the plugin by default with the ``GenericWorkload`` feature gate (beta in 1.37, off
by default), the gate that also makes the API server serve ``scheduling.k8s.io/v1beta1`` PodGroups
and keep ``spec.schedulingGroup``. Here it is in the default profile always, and acts only on pods
whose PodGroup API the cluster serves (:meth:`GangStore.serves`): where no PodGroup API exists it
passes every pod, as upstream's default profile without the gate; disabling it works as for any
plugin.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

from custom_scheduler.api import podgroup as gang
from custom_scheduler.api.model import Pod
from custom_scheduler.api.podgroup import PodGroup
from custom_scheduler.framework import registry
from custom_scheduler.framework.cluster_events import ClusterEventWithHint
from custom_scheduler.framework.gang_topology import DEFAULT_LEVELS, JobVictims, TopologyRequest
from custom_scheduler.framework.interface import Handle
from custom_scheduler.framework.types import SKIP, SUCCESS, Code, CycleState, NodeInfo, Status
from custom_scheduler.plugins import args_reader, gang_hints, gang_reservations
from custom_scheduler.plugins.preemption import units
from custom_scheduler.plugins.preemption.selection import split_by_pdb_violation

NAME = "GangScheduling"

#: Upstream's ``permitTimeoutDuration`` (gangscheduling.go): how long members wait at Permit.
DEFAULT_PERMIT_TIMEOUT_SECONDS = 300
#: The framework's cap on any Permit wait (upstream ``maxTimeout``).
MAX_PERMIT_TIMEOUT_SECONDS = 900

ERR_REASON_TOO_FEW = "waiting for minCount pods from a gang to appear in scheduling queue"
WAIT_REASON_QUORUM = "waiting for minCount pods from a gang to be scheduled"


def no_group_message(name: str) -> str:
    """Upstream's message (typo included) for a member whose PodGroup does not exist (yet)."""
    return f'waiting for pods\'s pod group "{name}" to appear in scheduling queue'


#: At most this many topology levels (a deeper hierarchy is a typo more often than a cluster).
MAX_TOPOLOGY_LEVELS = 8


@dataclass(frozen=True, slots=True)
class GangSchedulingArgs:
    """``permitTimeoutSeconds``: the Permit wait for groups that set no timeout of their own;
    ``topologyLevels``: the node-label hierarchy, widest first; ``jobLevelPreemption``: gangs
    preempt other gangs as units."""

    permit_timeout_seconds: int = DEFAULT_PERMIT_TIMEOUT_SECONDS
    topology_levels: tuple[str, ...] = DEFAULT_LEVELS
    job_level_preemption: bool = False
    reservation: gang_reservations.ReservationArgs = gang_reservations.DEFAULT_ARGS

    def to_config(self) -> dict[str, Any]:
        """The args as ``pluginConfig`` writes them (durations as Go duration strings)."""
        return {
            "permitTimeoutSeconds": self.permit_timeout_seconds,
            "topologyLevels": list(self.topology_levels),
            "jobLevelPreemption": self.job_level_preemption,
            "reservation": self.reservation.to_config(),
        }


_FIELDS = ("permitTimeoutSeconds", "topologyLevels", "jobLevelPreemption", "reservation")


def parse_args(raw: Mapping[str, Any] | None, path: str) -> GangSchedulingArgs:
    """Parse ``GangSchedulingArgs``.

    Raises:
        ConfigError: an unknown field, a timeout outside 1..900 seconds (the framework would
            cap a longer one silently; saying so at load time is kinder), a topology level that is
            not a label key or is repeated, an empty or too deep hierarchy, a non-boolean switch.
    """
    r = args_reader.ArgsReader(path)
    doc = r.mapping(raw, path, fields=_FIELDS, kind="GangSchedulingArgs")
    t = r.integer(doc, "permitTimeoutSeconds", path, DEFAULT_PERMIT_TIMEOUT_SECONDS)
    if not 1 <= t <= MAX_PERMIT_TIMEOUT_SECONDS:
        r.error(f"{path}.permitTimeoutSeconds", f"must be between 1 and {MAX_PERMIT_TIMEOUT_SECONDS}, got {t}")
    levels = _levels(r, doc, path)
    job = doc.get("jobLevelPreemption", False)
    if not isinstance(job, bool):
        r.error(f"{path}.jobLevelPreemption", f"must be a boolean, got {type(job).__name__}")
        job = False
    reservation = gang_reservations.parse_reservation(r, doc.get("reservation"), f"{path}.reservation")
    r.raise_errors()
    return GangSchedulingArgs(t, levels, job, reservation)


def _levels(r: args_reader.ArgsReader, doc: Mapping[str, Any], path: str) -> tuple[str, ...]:
    if doc.get("topologyLevels") is None:
        return DEFAULT_LEVELS
    levels = r.strings(doc, "topologyLevels", path)
    where = f"{path}.topologyLevels"
    if not levels and not r.errors:
        r.error(where, "must list at least one node label key (widest first), or be left out for the default")
    if len(levels) > MAX_TOPOLOGY_LEVELS:
        r.error(where, f"at most {MAX_TOPOLOGY_LEVELS} levels, got {len(levels)}")
    for i, key in enumerate(levels):
        for msg in args_reader.qualified_name_errors(key):
            r.error(f"{where}[{i}]", f"{key!r} is not a node label key: {msg}")
        if key in levels[:i]:
            r.error(f"{where}[{i}]", f"{key!r} is listed twice (each level once, widest first)")
    return levels


class GangScheduling:
    """PreEnqueue barrier and Permit quorum; see the module docstring."""

    #: Its ``sign_pod`` refuses some pods: the Signer asks it first.
    may_refuse_signing = True

    name: ClassVar[str] = NAME

    def __init__(self, args: GangSchedulingArgs | None, handle: Handle) -> None:
        self.args = args or GangSchedulingArgs()
        self.handle = handle
        self.gangs = handle.gangs
        self.reservations = gang_reservations.GangReservations(
            self.args.reservation, handle, self._group, self.topology_request
        )

    def events_to_register(self) -> list[ClusterEventWithHint]:
        """A group appearing, shrinking its minCount or gaining a member (see :mod:`.gang_hints`)."""
        return gang_hints.registrations()

    def sign_pod(self, pod: Pod) -> list[tuple[str, object]] | None:
        """A gang member is never batched (its group is placed as one); another pod is judged by
        reservations through its requests (signed by the resource plugins) and its declared
        runtime, an annotation: signed with its annotations."""
        if pod.pod_group:
            return None
        return [("annotations", tuple(sorted(pod.annotations.items())))]

    def _member(self, pod: Pod) -> bool:
        """``pod`` names a PodGroup of an API this cluster serves (else it is scheduled alone)."""
        return bool(pod.pod_group) and self.gangs.serves(gang.api_of(pod))

    def pre_enqueue(self, pod: Pod) -> Status:
        if not self._member(pod):
            return SUCCESS
        group = self.gangs.group_for(pod)
        if group is None:
            return Status.unresolvable(no_group_message(pod.pod_group)).with_plugin(NAME)
        if not group.gang:
            return SUCCESS
        if self.gangs.member_count(group) < group.min_count:
            return Status.unresolvable(ERR_REASON_TOO_FEW).with_plugin(NAME)
        return SUCCESS

    def pre_filter(self, state: CycleState, pod: Pod, nodes: Sequence[NodeInfo]) -> Status:
        """Ours, for reservations: while no node is reserved (nearly always) Filter has nothing to
        check, so it is skipped for the pod instead of being asked on every node."""
        return SKIP if self.reservations.idle() else SUCCESS

    def filter(self, state: CycleState, pod: Pod, node_info: NodeInfo) -> Status:
        """Reservations (ours; upstream's plugin has no Filter): a node reserved for a starving
        gang takes other pods only beyond the reserved amounts or for a declared short runtime."""
        if self.reservations.idle():
            return SUCCESS
        st = self.reservations.filter(pod, node_info, self.group_of(pod))
        return st if st.is_success else st.with_plugin(NAME)

    def permit_timeout(self, pod: Pod) -> float:
        """The Permit wait for ``pod``'s group: its own timeout, else the args' default."""
        group = self.gangs.group_for(pod)
        if group is not None and group.timeout is not None:
            return min(group.timeout, float(MAX_PERMIT_TIMEOUT_SECONDS))
        return float(self.args.permit_timeout_seconds)

    def permit(self, state: CycleState, pod: Pod, node_name: str) -> tuple[Status, float]:
        if not self._member(pod):
            return SUCCESS, 0.0
        group = self.gangs.group_for(pod)
        if group is None:
            # Deleted between PreEnqueue and now: upstream answers an error for the missing group.
            return Status(Code.ERROR, (f"failed to get podGroup {pod.namespace}/{pod.pod_group}",), NAME), 0.0
        if not group.gang:
            return SUCCESS, 0.0
        placed = self.gangs.placed(group) | {pod.uid}
        if len(placed) < group.min_count:
            # Wake the members still queued: this one may be what they were waiting for.
            self.handle.activate(self.gangs.unplaced(group))
            return Status(Code.WAIT, (WAIT_REASON_QUORUM,), NAME), self.permit_timeout(pod)
        waiting = self.handle.waiting_pods
        for uid in placed:
            wp = waiting.get(uid)
            if wp is not None:
                wp.allow(NAME)
        return SUCCESS, 0.0

    # -- the group cycle (framework.interface.PodGroupPlugin) -----------------------------------
    def group_of(self, pod: Pod) -> str | None:
        """Members of a gang go through one group cycle; a ``basic`` group's pods go alone."""
        if not self._member(pod):
            return None
        group = self.gangs.group_for(pod)
        if group is None or not group.gang:
            return None
        return f"{group.api}:{group.key}"

    def _group(self, key: str) -> PodGroup | None:
        api, _, name = key.partition(":")
        return self.gangs.get(name, gang.NATIVE if api == gang.NATIVE else gang.CRD)

    def placement_feasible(self, group: str, *, cycle_size: int, tried: int, placed: int) -> Status:
        """Upstream's PlacementFeasible with the members outside the cycle counted too.

        Everything placed so far (this cycle's assumptions included) is in the store's
        ``placed``; ``remaining`` are this cycle's untried members plus the unplaced members
        that are not in it (gated, or not queued yet), who may still come: then a short gang
        waits for them at Permit instead of being rejected at once.
        """
        pg = self._group(group)
        if pg is None:
            return Status(Code.UNSCHEDULABLE, (f"pod group {group} no longer exists",), NAME)
        scheduled = len(self.gangs.placed(pg))
        untried = cycle_size - tried
        outside = max(0, len(self.gangs.unplaced(pg)) - (cycle_size - placed))
        verdict = gang.placement_verdict(pg, already_placed=scheduled, placed=0, remaining=untried + outside)
        if verdict.satisfied:
            return SUCCESS
        if scheduled + untried + outside < verdict.min_count:
            return Status(Code.UNSCHEDULABLE, (verdict.message,), NAME)
        return Status(Code.WAIT, (verdict.message,), NAME)

    def topology_key(self, group: str) -> str | None:
        pg = self._group(group)
        return pg.topology_key if pg is not None else None

    def topology_request(self, group: str) -> TopologyRequest | None:
        """The group's required and preferred levels over the configured hierarchy, or None."""
        pg = self._group(group)
        if pg is None or not (pg.topology_required or pg.topology_preferred):
            return None
        return TopologyRequest(self.args.topology_levels, pg.topology_required, pg.topology_preferred)

    def job_victims(self, group: str, preemptor: Pod, victims: Sequence[Pod]) -> JobVictims | None:
        """``victims`` (all taken so far for ``group``'s preemption) as units, with the PDB
        violations they cost; unchanged without ``jobLevelPreemption``; None when a victim gang
        would have to go whole and cannot (a member not below the preemptor's priority)."""
        index = units.VictimIndex(self.gangs.group_for, ())
        pods: tuple[Pod, ...] | None = tuple(victims)
        if self.args.job_level_preemption:
            pods = units.widen_to_gangs(
                victims,
                index.priority(preemptor),
                self.gangs.group_for,
                lambda g: [p for p in self.gangs.members(g) if p.node_name],
                index.priority,
            )
        if pods is None:
            return None
        violating, _ = split_by_pdb_violation(pods, list(self.handle.pdbs()))
        return JobVictims(pods, len(violating))

    def group_attempted(self, group: str, result: str, message: str, placed: Sequence[tuple[Pod, str]]) -> None:
        """Status and an event on the PodGroup for one group cycle (reasons as for pods)."""
        self.reservations.attempted(group, result)
        pg = self._group(group)
        if pg is None:
            return
        kind = ("PodGroup", gang.group_version(pg.api))
        writer = self.gangs.status
        if result == "scheduled":
            note = f"Successfully assigned {len(placed)} pod(s) of pod group {pg.key}"
            if message:
                note += f": {message}"
            if writer is not None:
                writer.group_bound(pg, note, placed=frozenset(p.uid for p, _ in placed))
            self.handle.record_event(
                pg, type_="Normal", reason="Scheduled", action="Binding", note=note, kind=kind[0], api_version=kind[1]
            )
        elif result in ("unschedulable", "error", "waiting_on_preemption"):
            if writer is not None:
                writer.group_rejected(pg, message, error=result == "error")
            self.handle.record_event(
                pg,
                type_="Warning",
                reason="FailedScheduling",
                action="Scheduling",
                note=message,
                kind=kind[0],
                api_version=kind[1],
            )
        elif writer is not None:
            writer.group_attempting(pg)


SPEC = registry.PluginSpec(NAME, factory=GangScheduling, parse_args=parse_args)
