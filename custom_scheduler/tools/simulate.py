"""``custom-scheduler simulate``: place pending pods on a cluster snapshot, offline, as the daemon would.

The same objects as the daemon decide: the profiles come from
:func:`custom_scheduler.server.app.build_frameworks`, the cluster lives in the daemon's
:class:`~custom_scheduler.core.cache.Cache`, each cycle refreshes one
:class:`~custom_scheduler.framework.types.Snapshot` from it, and
:meth:`Algorithm.schedule <custom_scheduler.core.algorithm.Algorithm.schedule>` picks the node
(exactly the daemon's call: same sampling, same rotating start index). A placement is *assumed* in
the cache and Reserve/Permit run, so later pods see it; nothing is bound.

Queue order is the QueueSort plugin's (PrioritySort: higher priority first, then file order, which
stands for the time the pods were queued). A pod rejected by the filters waits, as in the daemon's
unschedulable queue, and is retried when a later placement may have made it schedulable: kube's
``AssignedPodAdd`` event moves only pods with pod (anti-)affinity or topology spread constraints,
since a new pod frees nothing. Such a retry is queued behind the pods not yet tried.

A pod that PreEnqueue rejects (SchedulingGates: ``spec.schedulingGates`` not empty) is *gated*: as
in the daemon's queue it is never attempted, holds no room and is reported with the plugin's
message. Nothing in a simulation removes a gate, so it stays gated.

Where the daemon and a simulation can differ, by design:

- **Ties**: equal top scores are broken uniformly at random (reservoir sampling). ``--seed`` fixes
  the simulation's choices; the live daemon's are not reproducible. Every placement reports its tie
  set, so a comparison with the daemon is exact for pods without ties.
- Preemption: PostFilter runs as in the daemon, without an API client, so DefaultPreemption only
  plans; simulate then carries the plan out in its own cache: the victims disappear at once (no
  graceful termination), the preemptor is nominated to the node and retried, and every waiting pod
  is retried (kube's ``AssignedPodDelete``). Victims are not re-created by their controllers.
- Timing: the daemon's queue order depends on when pods arrived and on retry backoff; simulate
  assumes all pods were queued at once, in file order.

Gangs (a profile enabling GangScheduling, PodGroups in the snapshot): the members of a gang are
placed all or nothing by the daemon's group cycle. The gang store knows every simulated pod as a
member before the first is queued (all pods arrive at once), plus the snapshot's bound members;
the snapshot's *pending* pods are not simulated, so they are no members either. A gang whose
PodGroup is missing, or that has fewer members than minCount, is held by the PreEnqueue barrier:
its pods are reported ``gated``. A gang that cannot be placed whole leaves every member
``unschedulable`` with the group's message; one placed short of minCount while members are still
to come (e.g. one held by a scheduling gate) is ``waiting`` at Permit when the simulation ends
(Permit timeouts run on the virtual clock, which nothing moves past them). The ``groups`` section
reports each group's outcome.
"""

from __future__ import annotations

import argparse
import copy
import dataclasses
import json
import random
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from custom_scheduler.api import podgroup as gang
from custom_scheduler.api.model import Pod
from custom_scheduler.core import queue as q
from custom_scheduler.core.algorithm import Algorithm
from custom_scheduler.core.binding import Executor
from custom_scheduler.core.cycle import Decision
from custom_scheduler.core.nominator import Nominator
from custom_scheduler.core.ports import RecordingEvents
from custom_scheduler.core.scheduler import Scheduler
from custom_scheduler.framework.evictor import MemoryEvictor
from custom_scheduler.framework.gang_store import GangStore
from custom_scheduler.framework.runtime import Framework
from custom_scheduler.framework.types import NodeInfo, Snapshot
from custom_scheduler.plugins import gang_scheduling
from custom_scheduler.tools import report
from custom_scheduler.tools.explain import choose_profile, offline_frameworks
from custom_scheduler.tools.snapshot import (
    EXIT_OK,
    ClusterState,
    ToolError,
    build_cache,
    dump_yaml,
    load_cluster,
    load_pods,
    load_scheduler_config,
    pod_key,
    quiet_logs,
    resolve_priority,
    to_pod,
    write_text,
)

#: A pod that keeps preempting and still not fitting stops being retried after this many attempts.
MAX_ATTEMPTS = 20


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
class GroupOutcome:
    """Where one PodGroup of the simulated pods ended (``min_count`` None: no such PodGroup).

    ``members`` counts every member the gang store knows (the snapshot's bound ones too),
    ``placed`` those bound at the end, ``pods`` the simulated members in file order."""

    key: str
    api: str  # the PodGroup's apiVersion
    min_count: int | None
    result: str  # scheduled | unschedulable | waiting | gated
    members: int
    placed: int
    message: str = ""
    pods: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {
            "key": self.key,
            "api": self.api,
            "minCount": self.min_count,
            "result": self.result,
            "members": self.members,
            "placed": self.placed,
            "message": self.message,
            "pods": list(self.pods),
        }


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


def _pending(doc: Mapping[str, Any], index: int, priority_classes: Sequence[Mapping[str, Any]]) -> Pod:
    d = copy.deepcopy(dict(doc))
    d = resolve_priority(d, priority_classes)
    spec = d.setdefault("spec", {})
    spec.pop("nodeName", None)
    d.pop("status", None)
    return to_pod(d, default_uid=f"simulate:{index}:{pod_key(d)}")


class _VirtualClock:
    """The offline queue's time: it only moves when the driver skips to the next backoff expiry."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now

    def advance(self, to: float) -> None:
        self.now = max(self.now, to)


def simulate(
    state: ClusterState,
    pod_docs: Sequence[Mapping[str, Any]],
    cfg: Any,
    registry: Any,
    *,
    seed: int | None = None,
    profile: str | None = None,
) -> SimulationResult:
    """Place ``pod_docs`` (Pod JSON, file order) on ``state`` with ``cfg``'s profiles.

    A pod's ``spec.nodeName`` and status are ignored: every pod is placed as if pending. Raises
    :class:`ToolError` for pods already assigned in the cluster or given twice.
    """
    if seed is None:
        seed = random.randrange(2**31)
    pods = [_pending(doc, i, state.priority_classes) for i, doc in enumerate(pod_docs)]
    seen: dict[str, int] = {}
    for p in pods:
        seen[p.key] = seen.get(p.key, 0) + 1
    dups = sorted(k for k, n in seen.items() if n > 1)
    if dups:
        raise ToolError(f"pods given more than once: {', '.join(dups[:10])}")
    existing = {pod_key(d): d.get("spec", {}).get("nodeName") for d in state.assigned_pods()}
    clash = sorted(k for k in seen if k in existing)
    if clash:
        raise ToolError(
            f"pod {clash[0]} is already assigned to {existing[clash[0]]} in the cluster snapshot"
            + (f" (and {len(clash) - 1} more)" if len(clash) > 1 else "")
            + "; remove it from the snapshot or from the pods file"
        )

    # The daemon's Scheduler with offline ports: a virtual clock for the queue's backoffs,
    # decisions confirmed at once (as the watch would confirm a bind), victims removed from the
    # cache at once, events recorded in memory.
    cache = build_cache(state)
    clock = _VirtualClock()
    outcomes: dict[str, Outcome] = {}
    preempted: list[Preemption] = []
    placed = 0
    sort_holder: list[Framework] = []
    queue = q.SchedulingQueue(
        lambda a, b: sort_holder[0].queue_sort.less(a.pod, a.timestamp, b.pod, b.timestamp),
        initial_backoff=float(cfg.pod_initial_backoff_seconds),
        max_backoff=float(cfg.pod_max_backoff_seconds),
        clock=clock,
        pre_enqueue=lambda pod: sched.pre_enqueue(pod),  # noqa: PLW0108 - sched is built below
    )
    by_uid: dict[str, Pod] = {}
    # PodGroups and their members as the daemon's informers fill the store; "placed" is the
    # cache's view, as in the daemon (an assumption counts before any bind).
    gangs = state.gang_store(is_placed=lambda uid: cache.get_pod(uid) is not None, pending=False)

    def failed(pod: Pod, reason: str, message: str) -> None:
        out = outcomes.get(pod.uid)
        if out is not None:
            out.attempts += 1
            out.result, out.message = ("unschedulable" if reason == "Unschedulable" else "error"), message

    events = _Events(failed)

    def confirm(pod: Pod, node: str) -> None:
        nonlocal placed
        placed += 1
        out = outcomes[pod.uid]
        out.attempts += 1
        out.result, out.node, out.order, out.message = "scheduled", node, placed, ""
        out.ties = out.ties or [node]  # a gang's other members: the cycle reports only the first
        gangs.member_updated(by_uid[pod.uid], pod)
        sched.on_pod_update(by_uid[pod.uid], pod)

    def victim_gone(v: Pod, preemptor: Pod, node: str) -> None:
        preempted.append(Preemption(v.key, node, preemptor.key))
        out = outcomes.get(v.uid)
        if out is not None:
            out.result, out.node, out.message = "preempted", node, f"preempted by {preemptor.key} on {node}"
        gangs.member_deleted(v)
        sched.on_pod_delete(v)

    def decided(d: Decision) -> None:
        # Failures and placements are counted where every member of a group cycle passes (the
        # event port, ``confirm``); the decision adds what only it knows: scores and nominations.
        out = outcomes.get(d.uid)
        if out is None:
            return
        if d.result in ("unschedulable", "error"):
            post = d.post_filter
            if post is not None and post.status.is_success and post.nominated_node_name:
                out.message = (
                    f"{d.message} (nominated to {post.nominated_node_name} after preempting {len(post.victims)} pod(s))"
                )
        elif d.schedule is not None and d.schedule.scores:
            top = max(sc.total for sc in d.schedule.scores)
            out.score = top
            out.ties = sorted(sc.name for sc in d.schedule.scores if sc.total == top)
        elif d.result in ("scheduled", "waiting"):
            out.ties = [d.node]

    group_failures: dict[tuple[str, str], str] = {}
    snapshot = Snapshot()
    nominator = Nominator()
    fwks = offline_frameworks(
        cfg,
        registry,
        state,
        snapshot,
        nominator.pods_on,
        gangs=gangs,
        event_sink=_event_sink(events, group_failures),
        activator=queue.activate,
        permit_clock=clock,
    )
    sort_holder.append(next(iter(fwks.values())))
    sched = Scheduler(
        profiles=fwks,
        cache=cache,
        queue=queue,
        writer=events,
        algorithm=Algorithm(percentage_of_nodes_to_score=cfg.percentage_of_nodes_to_score),
        nominator=nominator,
        snapshot=snapshot,
        evictor=MemoryEvictor(victim_gone),
        executor=Executor(),
        confirm=confirm,
        rng=random.Random(seed),
        clock=clock,
        on_decision=decided,
    )
    sched.cycle.detail = True
    cache.update_snapshot(sched.snapshot)
    before = usage(sched.snapshot)

    notes: list[str] = []
    queued: list[Pod] = []
    for p in pods:
        fwk, note = choose_profile(fwks, p, profile)
        if note and not any(n.startswith("Pods whose schedulerName") for n in notes):
            notes.append(
                f"Pods whose schedulerName is not a profile of the configuration (e.g. {p.key}: "
                f"{p.scheduler_name!r}) were placed with profile {fwk.profile_name!r}."
            )
        if p.pod_group and fwk.pod_group is None and not any(n.startswith("Pods of PodGroups") for n in notes):
            notes.append(
                f"Pods of PodGroups (e.g. {p.key}) were placed one by one: profile {fwk.profile_name!r} does not "
                f"enable {gang_scheduling.NAME}, so no gang is placed all or nothing."
            )
        # The pod is scheduled by the profile chosen for it, as the daemon schedules its own.
        pod = dataclasses.replace(p, scheduler_name=fwk.profile_name) if p.scheduler_name != fwk.profile_name else p
        outcomes[pod.uid] = Outcome(pod.key, fwk.profile_name)
        by_uid[pod.uid] = pod
        queued.append(pod)
    default_profile = profile or next(iter(fwks))
    # Every member exists before any is queued (all pods arrive at once): the barrier then
    # counts a gang's whole file, as the daemon does once the informer has seen all of it.
    for pod in queued:
        gangs.member_added(pod)
    for pod in queued:
        sched.on_pod_add(pod)
    sched.run_until_idle(clock.advance, max_cycles=MAX_ATTEMPTS * max(1, len(pods)))

    held: dict[str, str] = {}  # uid -> GangScheduling's barrier message
    for pod in queued:
        out = outcomes[pod.uid]
        fwk = fwks[pod.scheduler_name]
        if queue.where(pod.uid) is q.SubQueue.GATED:
            pre = fwk.run_pre_enqueue(pod)
            out.result, out.message = "gated", pre.message
            if pre.plugin == gang_scheduling.NAME:
                held[pod.uid] = pre.message
        elif (wp := fwk.waiting.get(pod.uid)) is not None:
            out.attempts += 1
            out.result, out.node = "waiting", wp.node_name
            out.message = f"waiting at Permit ({', '.join(wp.pending_plugins())}) when the simulation ended"
    cache.update_snapshot(sched.snapshot)
    return SimulationResult(
        cluster=state.source,
        profile=default_profile,
        seed=seed,
        outcomes=[outcomes[p.uid] for p in queued],
        before=before,
        after=usage(sched.snapshot),
        notes=notes,
        preempted=preempted,
        groups=_groups(gangs, queued, outcomes, held, group_failures),
    )


class _Events(RecordingEvents):
    """The event port offline: records what the daemon would write, and hands every failed
    attempt to ``on_failure``. Every failure passes here (the PodScheduled condition), for a pod
    of its own cycle and for each member of a group cycle that commits nothing, whereas
    ``on_decision`` hears only of the member the cycle popped."""

    def __init__(self, on_failure: Callable[[Pod, str, str], None]) -> None:
        super().__init__()
        self._on_failure = on_failure

    def pod_condition(self, pod: Pod, *, status: str, reason: str, message: str, nominated: str | None = None) -> None:
        super().pod_condition(pod, status=status, reason=reason, message=message, nominated=nominated)
        if status == "False":
            self._on_failure(pod, reason, message)


def _event_sink(events: RecordingEvents, group_failures: dict[tuple[str, str], str]) -> Callable[..., None]:
    """The plugins' event sink offline: pod events to the recorder, PodGroup events into each
    group's last failure message (what the groups section reports)."""

    def sink(obj: Any, *, type_: str, reason: str, action: str, note: str, controller: str = "", **kind: str) -> None:
        if isinstance(obj, gang.PodGroup):
            if reason == "FailedScheduling":
                group_failures[(obj.api, obj.key)] = note
            else:
                group_failures.pop((obj.api, obj.key), None)
        else:
            events.event(obj, type_=type_, reason=reason, action=action, note=note, controller=controller)

    return sink


def _groups(
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
                api=gang.NATIVE_GROUP_VERSION if api == gang.NATIVE else gang.CRD_GROUP_VERSION,
                min_count=pg.min_count if pg is not None else None,
                result=result,
                members=len(members),
                placed=bound,
                message=message,
                pods=[o.pod for o in member_outcomes],
            )
        )
    return out


def run(args: argparse.Namespace, registry: Any) -> SimulationResult:
    cfg = load_scheduler_config(args.config, registry)
    state = load_cluster(args.cluster)
    pods = load_pods(args.pods)
    return simulate(state, pods, cfg, registry, seed=args.seed, profile=args.profile)


def format_result(res: SimulationResult, output: str) -> str:
    d = res.to_dict()
    if output == "json":
        return json.dumps(d, indent=2) + "\n"
    if output == "yaml":
        return dump_yaml(d)
    return report.simulation_text(d)


# -- the command ------------------------------------------------------------------------------------


def cmd_simulate(args: argparse.Namespace) -> int:
    from custom_scheduler.plugins.builtin import full_registry

    try:
        with quiet_logs():
            res = run(args, full_registry())
        d = res.to_dict()
        if args.html:
            write_text(args.html, report.simulation_html(d))
    except ToolError as e:
        print(f"custom-scheduler simulate: {e}", file=sys.stderr)
        return e.code
    sys.stdout.write(format_result(res, args.output))
    return EXIT_OK
