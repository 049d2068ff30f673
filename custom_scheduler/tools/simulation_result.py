"""What ``simulate`` reports: where each pod ended, each PodGroup's outcome, the nodes' usage.

Plain values, filled by :class:`custom_scheduler.tools.simulate.Simulation` as the cycles report
(a placement, a failure, a preemption) and read by ``-o json``/``-o yaml`` through
:meth:`SimulationResult.to_dict` and by :mod:`custom_scheduler.tools.report`. Kept apart from the
simulation so the report's shape is visible in one place.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from custom_scheduler.api import podgroup as gang
from custom_scheduler.api.model import Pod
from custom_scheduler.framework.gang_store import GangStore
from custom_scheduler.framework.types import NodeInfo, Snapshot
from custom_scheduler.tools.cluster_state import GroupReport


@dataclass(slots=True)
class Preemption:
    """One victim of a simulated preemption."""

    pod: str
    node: str
    by: str


@dataclass(slots=True)
class Usage:
    requested: int
    allocatable: int

    @property
    def percent(self) -> float | None:
        return None if self.allocatable <= 0 else 100.0 * self.requested / self.allocatable

    def to_dict(self) -> dict[str, Any]:
        p = self.percent
        pct = None if p is None else round(p, 1)
        return {"requested": self.requested, "allocatable": self.allocatable, "percent": pct}


@dataclass(slots=True)
class NodeUsage:
    node: str
    cpu: Usage
    memory: Usage
    pods: Usage
    extended: dict[str, Usage] = field(default_factory=dict)

    @classmethod
    def of(cls, ni: NodeInfo) -> NodeUsage:
        alloc, req = ni.allocatable, ni.requested
        return cls(
            ni.name,
            Usage(req.milli_cpu, alloc.milli_cpu),
            Usage(req.memory, alloc.memory),
            Usage(len(ni.pods), alloc.allowed_pods),
            {k: Usage(req.scalar.get(k, 0), v) for k, v in sorted(alloc.scalar.items()) if v > 0},
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "cpu": self.cpu.to_dict(),
            "memory": self.memory.to_dict(),
            "pods": self.pods.to_dict(),
            "extended": {k: u.to_dict() for k, u in self.extended.items()},
        }

    def over_allocatable(self) -> list[str]:
        """Resources requested beyond allocatable (empty when the node is not over-committed)."""
        main = (("cpu", self.cpu), ("memory", self.memory), ("pods", self.pods))
        out = [n for n, u in main if u.requested > u.allocatable]
        out.extend(k for k, u in self.extended.items() if u.requested > u.allocatable)
        return out


@dataclass(slots=True)
class Outcome:
    """The last attempt for one pod."""

    pod: str
    profile: str
    result: str = "pending"  # scheduled | unschedulable | preempted | error | gated | waiting
    node: str = ""
    score: int | None = None
    ties: list[str] = field(default_factory=list)
    message: str = ""
    attempts: int = 0
    order: int = 0  # 1-based position among placements


@dataclass(slots=True)
class NodeDiagnosis:
    """One node as the framework judged it in a pod's last attempt: the Filter plugin that
    rejected it (the first one, which is what the daemon reports) or, for a feasible node, each
    Score plugin's weighted score and the total."""

    node: str
    verdict: str  # feasible | rejected | not evaluated
    plugin: str = ""
    code: str = ""
    reasons: list[str] = field(default_factory=list)
    total: int | None = None
    scores: dict[str, int] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {
            "node": self.node,
            "verdict": self.verdict,
            "plugin": self.plugin,
            "code": self.code,
            "reasons": list(self.reasons),
            "total": self.total,
            "scores": dict(self.scores),
        }


@dataclass(slots=True)
class PodDiagnosis:
    """The framework's diagnosis of a pod's last attempt that reached Filter: every node's verdict
    (kept for the ``ui`` page, not printed by ``-o json``: it grows with pods x nodes)."""

    pod: str
    nodes: list[NodeDiagnosis]
    note: str = ""

    def to_dict(self) -> dict[str, Any]:
        plugins = sorted({p for n in self.nodes for p in n.scores})
        return {"pod": self.pod, "note": self.note, "scorePlugins": plugins, "nodes": [n.to_dict() for n in self.nodes]}


@dataclass(frozen=True, slots=True)
class GroupOutcome(GroupReport):
    """Where one PodGroup of the simulated pods ended.

    ``members`` counts every member the gang store knows (the snapshot's bound ones too),
    ``placed`` those bound at the end, ``pods`` the simulated members in file order."""

    result: str  # scheduled | unschedulable | waiting | gated
    message: str = ""
    pods: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return self._report({"result": self.result}, {"message": self.message, "pods": list(self.pods)})


def group_outcome(
    group: gang.PodGroup | None,
    pods: Sequence[Outcome],
    *,
    held: str | None,
    members: int,
    placed: int,
    assumed_or_bound: int,
    failure: str,
) -> tuple[str, str]:
    """A group's (result, message) from where its members ended: ``gated`` while the barrier
    (``held``: its message) keeps them out of the queue, ``scheduled`` once minCount are bound
    (1 for a basic group), ``waiting`` while members wait at Permit for the rest (with
    PlacementFeasible's count), else ``unschedulable`` with the last group cycle's message
    (``failure``, its FailedScheduling event) or a member's."""
    if held is not None:
        return "gated", held
    need = group.min_count if group is not None and group.gang else 1
    if placed >= need:
        return "scheduled", ""
    if group is not None and any(o.result == "waiting" for o in pods):
        left = members - assumed_or_bound
        v = gang.placement_verdict(group, already_placed=assumed_or_bound, placed=0, remaining=left)
        return "waiting", v.message
    if failure:
        return "unschedulable", failure
    return "unschedulable", next((o.message for o in pods if o.message), "")


@dataclass(slots=True)
class SimulationResult:
    cluster: str
    profile: str
    seed: int
    outcomes: list[Outcome]
    before: list[NodeUsage]
    after: list[NodeUsage]
    notes: list[str] = field(default_factory=list)
    preempted: list[Preemption] = field(default_factory=list)
    groups: list[GroupOutcome] = field(default_factory=list)
    diagnoses: dict[str, PodDiagnosis] = field(default_factory=dict)
    """``namespace/name`` -> the last attempt's per-node diagnosis (pods never attempted have none)."""

    @property
    def placements(self) -> list[Outcome]:
        return sorted((o for o in self.outcomes if o.result == "scheduled"), key=lambda o: o.order)

    def placement_map(self) -> dict[str, str]:
        """``namespace/name`` → node, for placed pods."""
        return {o.pod: o.node for o in self.placements}

    def to_dict(self) -> dict[str, Any]:
        before = {u.node: u for u in self.before}
        unsched = [o for o in self.outcomes if o.result == "unschedulable"]
        errors = [o for o in self.outcomes if o.result == "error"]
        gated = [o for o in self.outcomes if o.result == "gated"]
        waiting = [o for o in self.outcomes if o.result == "waiting"]
        return {
            "cluster": self.cluster,
            "profile": self.profile,
            "seed": self.seed,
            "summary": {
                "nodes": len(self.after),
                "pods": len(self.outcomes),
                "placed": len(self.placements),
                "unschedulable": len(unsched),
                "errors": len(errors),
                "preempted": len(self.preempted),
                "gated": len(gated),
                "waiting": len(waiting),
            },
            "placements": [
                {
                    "order": o.order,
                    "pod": o.pod,
                    "node": o.node,
                    "score": o.score,
                    "ties": list(o.ties),
                    "attempts": o.attempts,
                    "profile": o.profile,
                }
                for o in self.placements
            ],
            "unschedulablePods": [{"pod": o.pod, "message": o.message, "attempts": o.attempts} for o in unsched],
            "gatedPods": [{"pod": o.pod, "message": o.message} for o in gated],
            "waitingPods": [{"pod": o.pod, "node": o.node, "message": o.message} for o in waiting],
            "preempted": [{"pod": p.pod, "node": p.node, "by": p.by} for p in self.preempted],
            "errorPods": [{"pod": o.pod, "message": o.message, "attempts": o.attempts} for o in errors],
            "groups": [g.to_dict() for g in self.groups],
            "utilisation": [
                {"node": u.node, "before": before[u.node].to_dict(), "after": u.to_dict()}
                for u in self.after
                if u.node in before
            ],
            "notes": list(self.notes),
        }


def usage(snap: Snapshot) -> list[NodeUsage]:
    return [NodeUsage.of(ni) for ni in sorted(snap.node_list, key=lambda n: n.name)]


def group_outcomes(
    gangs: GangStore,
    queued: Sequence[Pod],
    outcomes: Mapping[str, Outcome],
    held: Mapping[str, str],
    group_failures: Mapping[tuple[str, str], str],
) -> list[GroupOutcome]:
    """One :class:`GroupOutcome` per PodGroup the simulated pods name, in file order."""
    by_group: dict[tuple[gang.Api, str], list[Pod]] = {}
    for pod in queued:
        api, key = gang.api_of(pod), gang.group_of(pod)
        if api is not None and key is not None:
            by_group.setdefault((api, key), []).append(pod)
    out: list[GroupOutcome] = []
    for (api, key), pods in by_group.items():
        pg = gangs.get(key, api)
        members = gangs.members(pg) if pg is not None else pods
        member_outcomes = [outcomes[p.uid] for p in pods]
        bound = sum(1 for p in members if p.node_name)
        result, message = group_outcome(
            pg,
            member_outcomes,
            held=next((held[p.uid] for p in pods if p.uid in held), None),
            members=len(members),
            placed=bound,
            assumed_or_bound=len(gangs.placed(pg)) if pg is not None else bound,
            failure=group_failures.get((api, key), ""),
        )
        out.append(
            GroupOutcome(
                key=key,
                api=gang.group_version(api),
                min_count=pg.min_count if pg is not None else None,
                result=result,
                members=len(members),
                placed=bound,
                message=message,
                pods=[o.pod for o in member_outcomes],
            )
        )
    return out
