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
4. **Execution**: for every victim, PATCH its status with the condition ``DisruptionTarget=True``
   (reason ``PreemptionByScheduler``), DELETE it gracefully (its kubelet finishes the termination),
   and emit a ``Preempted`` event on it; then clear ``status.nominatedNodeName`` of lower-priority
   pods nominated to the chosen node, which may no longer fit there. The result nominates the node;
   the scheduler records the nomination and patches the preemptor's ``nominatedNodeName``. The
   preemptor itself stays unschedulable for this cycle and is retried when its victims are gone.

When nothing helps, the result's message is ``preemption: `` followed by a FitError text over all
nodes (``No preemption victims found for incoming pod``, ``Preemption is not helpful for
scheduling``, or the filter reasons that remain with every lower-priority pod gone); the scheduler
appends it to its own FitError, which gives kube-scheduler's double period.

Offline (``explain``, ``simulate``, shadow mode: the Handle has no client) the decision is computed
the same way and only reported: :attr:`DefaultPreemption.last_outcome` and a log line, no writes.
"""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, ClassVar

import structlog
import tenacity

from custom_scheduler.framework.api import STRATEGIC_PATCH_CT, errors, pod_path
from custom_scheduler.framework.interface import Handle, PostFilterResult
from custom_scheduler.framework.registry import PluginSpec
from custom_scheduler.framework.types import SUCCESS, Code, CycleState, FitError, NodeInfo, Status
from custom_scheduler.model import Pod
from custom_scheduler.plugins import args_reader
from custom_scheduler.plugins.preemption import selection
from custom_scheduler.plugins.preemption.selection import ERR_REASON_NO_VICTIMS, Candidate, Victims

log = structlog.get_logger("custom_scheduler.preemption")

NAME = "DefaultPreemption"

MESSAGE_PREFIX = "preemption: "
MSG_NOT_ELIGIBLE_NEVER = "not eligible due to preemptionPolicy=Never."
MSG_NOT_ELIGIBLE_TERMINATING = "not eligible due to a terminating pod on the nominated node."
ERR_REASON_NOT_HELPFUL = "Preemption is not helpful for scheduling"

PREEMPT_NEVER = "Never"
DISRUPTION_TARGET = "DisruptionTarget"
REASON_PREEMPTION_BY_SCHEDULER = "PreemptionByScheduler"
DISRUPTION_MESSAGE_FORMAT = "{scheduler}: preempting to accommodate a higher priority pod"
EVENT_REASON = "Preempted"
EVENT_ACTION = "Preempting"
EVENT_NOTE_FORMAT = "Preempted by pod {uid} on node {node}"

#: Victims are evicted in parallel with at most this many API calls in flight (kube-scheduler's
#: parallelism default).
PARALLELISM = 16


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


# --- outcome -------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class PreemptionOutcome:
    """What one successful preemption decided (kept for explain/simulate and logs).

    :attr:`DefaultPreemption.last_outcome` holds the latest one; it is reset to None at the start of
    every PostFilter call, so it describes the current pod's attempt only."""

    preemptor: Pod
    node: str
    victims: Victims
    cleared_nominations: tuple[Pod, ...] = ()
    executed: bool = False
    """True when the evictions were sent to the API server; False offline."""


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
            for p in ni.pods.values():
                if p.priority < pod.priority and p.deleting and p.disruption_target:
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
        self.rng = random.Random()
        self.last_outcome: PreemptionOutcome | None = None

    def post_filter(self, state: CycleState, pod: Pod, statuses: Mapping[str, Status]) -> PostFilterResult:
        self.last_outcome = None
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
            offset = self.rng.randrange(len(potential))
            wanted = selection.num_candidates(
                len(potential), self.args.min_candidate_nodes_percentage, self.args.min_candidate_nodes_absolute
            )
            candidates, dry = selection.dry_run_preemption(
                self.handle, state, pod, potential, list(self.handle.pdbs()), offset, wanted
            )
            out.update(dry)
        if not candidates:
            errs = [s for s in out.values() if s.code is Code.ERROR]
            if errs:
                return _error(MESSAGE_PREFIX + "; ".join(s.message for s in errs))
            # Nothing can make room: the pod should not keep a nomination it cannot use.
            if pod.nominated_node_name:
                self._clear_nominations([pod])
            return _unschedulable(failure_message(pod, len(nodes), out))

        best = selection.pick_one_node(candidates)
        if best is None:  # pragma: no cover - candidates is not empty
            return _unschedulable(MESSAGE_PREFIX + "no candidate node for preemption")
        to_clear = tuple(
            p for p in self.handle.nominated_pods(best.node) if p.priority < pod.priority and p.uid != pod.uid
        )
        st = self._prepare(pod, best, to_clear)
        if not st.is_success:
            return PostFilterResult(st, message=MESSAGE_PREFIX + st.message)
        return PostFilterResult(SUCCESS, nominated_node_name=best.node)

    # -- execution --------------------------------------------------------------------------------
    def _prepare(self, pod: Pod, c: Candidate, to_clear: tuple[Pod, ...]) -> Status:
        """Evict the victims and clear lower-priority nominations (or only report them, offline)."""
        client = self.handle.client
        outcome = PreemptionOutcome(pod, c.node, c.victims, to_clear, executed=client is not None)
        self.last_outcome = outcome
        victims = [v.key for v in c.victims.pods]
        if client is None:
            log.info("preemption_planned", pod=pod.key, node=c.node, victims=victims, offline=True)
            return SUCCESS
        log.info("preempting", pod=pod.key, node=c.node, victims=victims, pdb_violations=c.victims.num_pdb_violations)
        # A victim already terminating needs no second request.
        todo = [v for v in c.victims.pods if not v.deleting]
        if len(todo) == 1:
            problems = [self._preempt_one(client, pod, c.node, todo[0])]
        elif todo:
            with ThreadPoolExecutor(min(PARALLELISM, len(todo)), thread_name_prefix="preempt") as pool:
                problems = list(pool.map(lambda v: self._preempt_one(client, pod, c.node, v), todo))
        else:
            problems = []
        failed = [p for p in problems if p]
        if failed:
            return Status.as_error("; ".join(failed), NAME)
        self._clear_nominations(to_clear)
        return SUCCESS

    def _preempt_one(self, client: Any, preemptor: Pod, node: str, victim: Pod) -> str:
        """Mark ``victim`` as a disruption target, delete it, record the event; an error text or ""."""
        condition = {
            "type": DISRUPTION_TARGET,
            "status": "True",
            "reason": REASON_PREEMPTION_BY_SCHEDULER,
            "message": DISRUPTION_MESSAGE_FORMAT.format(scheduler=preemptor.scheduler_name),
            "lastTransitionTime": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        }
        patch = {"metadata": {"uid": victim.uid}, "status": {"conditions": [condition]}}
        delete_opts = {"apiVersion": "v1", "kind": "DeleteOptions", "preconditions": {"uid": victim.uid}}
        # Fencing: a leader that lost its Lease mid-cycle must not evict anyone (a cheap flag).
        fence = self.handle.fence
        try:
            if not fence.admit():
                return f"leadership lost: not preempting pod {victim.key}"
            _retrying(client.patch, pod_path(victim.namespace, victim.name, "status"), patch, STRATEGIC_PATCH_CT)
            if not fence.admit():
                return f"leadership lost: not preempting pod {victim.key}"
            _retrying(client.delete, pod_path(victim.namespace, victim.name), delete_opts)
        except (errors.NotFound, errors.Conflict):
            # Gone already, or replaced by a new pod of the same name: nothing to preempt.
            log.info("preemption_victim_gone", pod=victim.key, preemptor=preemptor.key)
            return ""
        except errors.KubeError as e:
            log.warning("preemption_victim_failed", pod=victim.key, preemptor=preemptor.key, error=str(e)[:300])
            return f"preempting pod {victim.key}: {e}"
        self.handle.record_event(
            victim,
            type_="Normal",
            reason=EVENT_REASON,
            action=EVENT_ACTION,
            note=EVENT_NOTE_FORMAT.format(uid=preemptor.uid, node=node),
        )
        return ""

    def _clear_nominations(self, pods: Sequence[Pod]) -> None:
        """Set ``status.nominatedNodeName`` of ``pods`` to null; failures are logged, not fatal."""
        client = self.handle.client
        if client is None:
            return
        for p in pods:
            try:
                _retrying(
                    client.patch,
                    pod_path(p.namespace, p.name, "status"),
                    {"metadata": {"uid": p.uid}, "status": {"nominatedNodeName": None}},
                    STRATEGIC_PATCH_CT,
                )
            except (errors.NotFound, errors.Conflict):
                pass
            except errors.KubeError as e:
                log.warning("clear_nominated_node_failed", pod=p.key, error=str(e)[:300])


def _retrying(fn: Any, *args: Any) -> Any:
    """``fn(*args)``, retried briefly on transient API errors (connection, 429, 5xx)."""
    retryer = tenacity.Retrying(
        retry=tenacity.retry_if_exception(errors.is_retryable),
        wait=tenacity.wait_exponential_jitter(multiplier=0.05, max=1.0, jitter=0.05),
        stop=tenacity.stop_after_attempt(3),
        reraise=True,
    )
    return retryer(fn, *args)


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
    "PreemptionOutcome",
    "eligibility",
    "failure_message",
    "parse_args",
    "split_candidate_nodes",
]
