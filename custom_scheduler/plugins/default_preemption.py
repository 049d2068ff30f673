"""DefaultPreemption (PostFilter): when no node fits, evict lower-priority pods to make room.

Runs only after Filter found no feasible node. Semantics are kube-scheduler's (v1.28+):

1. **Eligibility.** A pod with ``preemptionPolicy: Never`` never preempts. A pod already nominated
   by an earlier preemption waits while a lower-priority pod on its nominated node is still
   terminating because of that preemption (``DisruptionTarget`` condition), unless the nominated
   node has become UnschedulableAndUnresolvable for it.
2. **Candidates** are the nodes whose filter status was Unschedulable (or that have no status);
   nodes rejected as UnschedulableAndUnresolvable cannot be helped by evicting pods.
3. **Dry run and choice** (:mod:`custom_scheduler.plugins.preemption.selection`): the victims per
   node on copies of the node and of the cycle state, ``numCandidates`` from the args, a random
   offset, then one node by the tie-break rules.
4. **The result**, not an action: the chosen node, the victims and the lower-priority pods
   nominated there that lose their nomination. The scheduling cycle nominates the node and hands the
   evictions to its :class:`~custom_scheduler.framework.evictor.Evictor` (the API calls run off
   the scheduling thread in the daemon; ``simulate`` removes the victims in memory; ``explain`` and
   shadow mode only report them). The preemptor stays unschedulable for this cycle and is retried
   when its victims are gone.

When nothing helps, the result's message is ``preemption: `` followed by a FitError text over all
nodes (``No preemption victims found for incoming pod``, ``Preemption is not helpful for
scheduling``, or the filter reasons that remain with every lower-priority pod gone); the scheduler
appends it to its own FitError, which gives kube-scheduler's double period.

The candidate offset comes from the cycle's RNG (``state.rng``), so a seeded ``explain`` or
``simulate`` reproduces the choice.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

import structlog

from custom_scheduler.api.model import Pod
from custom_scheduler.framework import cluster_events as ce
from custom_scheduler.framework.evictor import DISRUPTION_TARGET, REASON_PREEMPTION_BY_SCHEDULER
from custom_scheduler.framework.extender import ExtenderError
from custom_scheduler.framework.interface import Handle, PostFilterResult
from custom_scheduler.framework.registry import PluginSpec
from custom_scheduler.framework.types import SUCCESS, Code, CycleState, FitError, NodeInfo, Status
from custom_scheduler.plugins import args_reader
from custom_scheduler.plugins.preemption import extender_candidates, selection
from custom_scheduler.plugins.preemption.selection import ERR_REASON_NO_VICTIMS, Candidate
from custom_scheduler.plugins.preemption.units import VictimIndex

log = structlog.get_logger("custom_scheduler.preemption")

NAME = "DefaultPreemption"

MESSAGE_PREFIX = "preemption: "
#: PreEnqueue's reason while the pod's own preemption runs (upstream's text).
WAITING_FOR_PREEMPTION = "waiting for the preemption for this pod to be finished"
MSG_NOT_ELIGIBLE_NEVER = "not eligible due to preemptionPolicy=Never."
MSG_NOT_ELIGIBLE_TERMINATING = "not eligible due to a terminating pod on the nominated node."
ERR_REASON_NOT_HELPFUL = "Preemption is not helpful for scheduling"

PREEMPT_NEVER = "Never"


# --- args ----------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class DefaultPreemptionArgs:
    """``DefaultPreemptionArgs`` (kubescheduler.config.k8s.io/v1)."""

    min_candidate_nodes_percentage: int = 10
    """``minCandidateNodesPercentage``: candidates to dry-run, as a share of the candidate nodes (0..100)."""
    min_candidate_nodes_absolute: int = 100
    """``minCandidateNodesAbsolute``: at least this many candidates (>= 0); both zero is invalid."""


def parse_args(raw: Mapping[str, Any] | None, path: str) -> DefaultPreemptionArgs:
    """Read and validate ``DefaultPreemptionArgs``; raises ConfigError with every bad field."""
    r = args_reader.ArgsReader(path)
    doc = r.mapping(
        raw, path, fields=("minCandidateNodesPercentage", "minCandidateNodesAbsolute"), kind="DefaultPreemptionArgs"
    )
    pct = r.integer(doc, "minCandidateNodesPercentage", path, 10)
    absolute = r.integer(doc, "minCandidateNodesAbsolute", path, 100)
    pct_path, abs_path = f"{path}.minCandidateNodesPercentage", f"{path}.minCandidateNodesAbsolute"
    if not 0 <= pct <= 100:
        r.error(pct_path, f"Invalid value: {pct}: not in valid range [0, 100]")
    if absolute < 0:
        r.error(abs_path, f"Invalid value: {absolute}: not in valid range [0, inf)")
    if pct == 0 and absolute == 0:
        r.error(pct_path, "Invalid value: 0: cannot be zero at the same time as minCandidateNodesAbsolute")
        r.error(abs_path, "Invalid value: 0: cannot be zero at the same time as minCandidateNodesPercentage")
    r.raise_errors()
    return DefaultPreemptionArgs(pct, absolute)


def victim_index(handle: Handle, nodes: Sequence[NodeInfo]) -> VictimIndex:
    """The victims of one attempt: pods, and ``disruptionMode: all`` PodGroups as units."""
    return VictimIndex(handle.gangs.group_for, nodes)


def eligibility(handle: Handle, pod: Pod, statuses: Mapping[str, Status]) -> str:
    """Why ``pod`` may not preempt now, or ``""`` when it may."""
    if pod.preemption_policy == PREEMPT_NEVER:
        return MSG_NOT_ELIGIBLE_NEVER
    nominated = pod.nominated_node_name
    if nominated:
        st = statuses.get(nominated)
        if st is not None and st.code is Code.UNSCHEDULABLE_AND_UNRESOLVABLE:
            return ""  # the nominated node cannot work any more: preempt elsewhere
        ni = handle.get_node(nominated)
        if ni is not None:
            index = victim_index(handle, ())
            for p in ni.pods.values():
                if p.deleting and p.disruption_target and index.priority(p) < index.priority(pod):
                    return MSG_NOT_ELIGIBLE_TERMINATING
    return ""


def split_candidate_nodes(
    nodes: Sequence[NodeInfo], statuses: Mapping[str, Status]
) -> tuple[list[NodeInfo], dict[str, Status]]:
    """Nodes where evicting pods might help (status Unschedulable, or none), and the statuses of
    the others (``Preemption is not helpful for scheduling``)."""
    potential: list[NodeInfo] = []
    hopeless: dict[str, Status] = {}
    not_helpful = Status.unresolvable(ERR_REASON_NOT_HELPFUL)
    for ni in nodes:
        st = statuses.get(ni.name)
        if st is None or st.code is Code.UNSCHEDULABLE:
            potential.append(ni)
        else:
            hopeless[ni.name] = not_helpful
    return potential, hopeless


def failure_message(pod: Pod, num_nodes: int, statuses: Mapping[str, Status]) -> str:
    """``preemption: 0/N nodes are available: <histogram>.``"""
    return MESSAGE_PREFIX + str(FitError(pod, num_nodes, dict(statuses)))


# --- plugin --------------------------------------------------------------------------------------


class DefaultPreemption:
    """PostFilter: find a node where evicting lower-priority pods lets the pod fit, and evict them."""

    name: ClassVar[str] = NAME

    def __init__(self, args: DefaultPreemptionArgs | None, handle: Handle) -> None:
        self.args = args or DefaultPreemptionArgs()
        self.handle = handle

    def pre_enqueue(self, pod: Pod) -> Status:
        """Hold a pod back while its own preemption is still being carried out (upstream's, with
        asynchronous preemption): retried before its victims are gone it could preempt again
        elsewhere. The evictor releases it when done (the queue re-runs PreEnqueue then)."""
        if self.handle.preempting(pod.uid):
            return Status(Code.UNSCHEDULABLE_AND_UNRESOLVABLE, (WAITING_FOR_PREEMPTION,), NAME)
        return SUCCESS

    def events_to_register(self) -> list[ce.ClusterEventWithHint]:
        """Upstream's, with asynchronous preemption (on): a victim's deletion is noted, but it is
        the evictor's completion (PreEnqueue released) that retries the preemptor."""
        return [ce.ClusterEventWithHint(ce.ASSIGNED_POD_DELETE, lambda pod, old, new: ce.Hint.SKIP)]

    def post_filter(self, state: CycleState, pod: Pod, statuses: Mapping[str, Status]) -> PostFilterResult:
        reason = eligibility(self.handle, pod, statuses)
        if reason:
            log.debug("preemption_not_eligible", pod=pod.key, reason=reason)
            return _unschedulable(MESSAGE_PREFIX + reason)

        nodes = list(self.handle.snapshot_nodes())
        if not nodes:
            return _error(MESSAGE_PREFIX + "no nodes available")
        potential, out = split_candidate_nodes(nodes, statuses)
        candidates: list[Candidate] = []
        if potential:
            offset = state.rng.randrange(len(potential))
            wanted = selection.num_candidates(
                len(potential), self.args.min_candidate_nodes_percentage, self.args.min_candidate_nodes_absolute
            )
            candidates, dry = selection.dry_run_preemption(
                self.handle,
                state,
                pod,
                potential,
                list(self.handle.pdbs()),
                offset,
                wanted,
                index=victim_index(self.handle, nodes),
                remote=self.handle.get_node,
            )
            out.update(dry)
        if not candidates:
            errs = [s for s in out.values() if s.code is Code.ERROR]
            if errs:
                return _error(MESSAGE_PREFIX + "; ".join(s.message for s in errs))
            # Nothing can make room: the pod should not keep a nomination it cannot use (upstream's
            # result with an empty nominated node in override mode; the scheduler clears it).
            msg = failure_message(pod, len(nodes), out)
            return PostFilterResult(
                Status(Code.UNSCHEDULABLE, (msg,), NAME), message=msg, clear_nomination=bool(pod.nominated_node_name)
            )

        try:  # the HTTP extenders may narrow the candidates (upstream's callExtenders)
            candidates = extender_candidates.call_extenders(self.handle, pod, candidates)
        except ExtenderError as e:
            return _error(MESSAGE_PREFIX + str(e))
        best = selection.pick_one_node(candidates)
        if best is None:  # the extenders left no candidate
            return _unschedulable(MESSAGE_PREFIX + "no candidate node for preemption")
        to_clear = tuple(
            p for p in self.handle.nominated_pods(best.node) if p.priority < pod.priority and p.uid != pod.uid
        )
        log.info(
            "preemption_decided",
            pod=pod.key,
            node=best.node,
            victims=[v.key for v in best.victims.pods],
            pdb_violations=best.victims.num_pdb_violations,
        )
        return PostFilterResult(
            SUCCESS,
            nominated_node_name=best.node,
            victims=tuple(best.victims.pods),
            cleared_nominations=to_clear,
            num_pdb_violations=best.victims.num_pdb_violations,
        )


def _unschedulable(message: str) -> PostFilterResult:
    return PostFilterResult(Status(Code.UNSCHEDULABLE, (message,), NAME), message=message)


def _error(message: str) -> PostFilterResult:
    return PostFilterResult(Status.as_error(message, NAME), message=message)


SPEC = PluginSpec(NAME, factory=DefaultPreemption, parse_args=parse_args)

__all__ = [
    "DISRUPTION_TARGET",
    "ERR_REASON_NOT_HELPFUL",
    "ERR_REASON_NO_VICTIMS",
    "MSG_NOT_ELIGIBLE_NEVER",
    "MSG_NOT_ELIGIBLE_TERMINATING",
    "NAME",
    "REASON_PREEMPTION_BY_SCHEDULER",
    "SPEC",
    "DefaultPreemption",
    "DefaultPreemptionArgs",
    "eligibility",
    "failure_message",
    "parse_args",
    "split_candidate_nodes",
]
