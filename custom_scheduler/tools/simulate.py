"""``custom-scheduler simulate``: place pending pods on a cluster snapshot, offline, as the daemon would.

The same objects as the daemon decide, wired as the daemon wires them
(:func:`custom_scheduler.core.assembly.assemble`): the profiles come from
:func:`custom_scheduler.framework.profiles.build_frameworks`, the cluster lives in the daemon's
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
from typing import Any

from custom_scheduler.api import podgroup as gang
from custom_scheduler.api.model import MalformedObject, Pod
from custom_scheduler.config.schema import SchedulerConfig
from custom_scheduler.core import queue as q
from custom_scheduler.core.algorithm import ScheduleResult
from custom_scheduler.core.assembly import FrameworkInputs, Ports, assemble
from custom_scheduler.core.binding import Executor
from custom_scheduler.core.cycle import Decision
from custom_scheduler.core.ports import RecordingEvents
from custom_scheduler.framework.evictor import MemoryEvictor
from custom_scheduler.framework.registry import Registry
from custom_scheduler.framework.runtime import Framework
from custom_scheduler.framework.types import FitError, Status
from custom_scheduler.plugins import gang_scheduling
from custom_scheduler.tools import report
from custom_scheduler.tools.explain import choose_profile, offline_frameworks
from custom_scheduler.tools.sim_diagnosis import DiagnosingAlgorithm, diagnose
from custom_scheduler.tools.simulation_result import (
    Outcome,
    PodDiagnosis,
    Preemption,
    SimulationResult,
    group_outcomes,
    usage,
)
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
    resolve_priority,
    run_command,
    to_pod,
    write_text,
)

#: A pod that keeps preempting and still not fitting stops being retried after this many attempts.
MAX_ATTEMPTS = 20


def _pending(doc: Mapping[str, Any], index: int, priority_classes: Sequence[Mapping[str, Any]]) -> Pod:
    if not isinstance(doc.get("spec", {}), dict):
        raise ToolError(f"pod {pod_key(doc)}: spec is not an object")
    d = copy.deepcopy(dict(doc))
    d = resolve_priority(d, priority_classes)
    spec = d.setdefault("spec", {})
    spec.pop("nodeName", None)
    d.pop("status", None)
    return to_pod(d, default_uid=f"simulate:{index}:{pod_key(d)}")


def pending_pods(state: ClusterState, pod_docs: Sequence[Mapping[str, Any]]) -> list[Pod]:
    """``pod_docs`` as pending pods (``spec.nodeName`` and status dropped), in file order. Raises
    :class:`ToolError` for pods given twice or already assigned in ``state``: placing one again
    would count it twice."""
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
    return pods


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
    cfg: SchedulerConfig,
    registry: Registry,
    *,
    seed: int | None = None,
    profile: str | None = None,
    diagnose: bool = False,
) -> SimulationResult:
    """Place ``pod_docs`` (Pod JSON, file order) on ``state`` with ``cfg``'s profiles.

    A pod's ``spec.nodeName`` and status are ignored: every pod is placed as if pending. Raises
    :class:`ToolError` for pods already assigned in the cluster or given twice, and for objects
    that do not parse (a quantity that is none, a field of the wrong type). ``diagnose``
    keeps every pod's per-node verdicts and scores (``SimulationResult.diagnoses``, for the
    ``ui`` page), at the cost of filtering again the nodes the algorithm's fast path does not report.
    """
    if seed is None:
        seed = random.randrange(2**31)
    try:
        pods = pending_pods(state, pod_docs)
        sim = Simulation(state, cfg, registry, seed=seed, diagnose=diagnose)
    except MalformedObject as e:  # a wrong type or quantity in a node or pod: bad input, not a bug
        raise ToolError(f"invalid object: {e}") from None
    sim.feed(pods, profile)
    sim.run_until_idle()
    return sim.result(profile)


class Simulation:
    """One simulation: the daemon's Scheduler (:func:`assemble`) with offline ports, fed the pods
    at once and run until nothing is left to try.

    The ports: a virtual clock for the queue's backoffs and Permit's timeouts, decisions confirmed
    at once (as the watch would confirm a bind), victims removed from the cache at once, events
    recorded in memory. The outcome of each pod is kept where the daemon would tell the API server:
    a failure by the PodScheduled condition (:meth:`_failed`), a placement by the confirmation of
    its bind (:meth:`_confirm`), a preemption by its victims' deletion (:meth:`_victim_gone`).
    """

    def __init__(
        self, state: ClusterState, cfg: SchedulerConfig, registry: Registry, *, seed: int, diagnose: bool = False
    ) -> None:
        self.state = state
        self.seed = seed
        self._registry = registry
        self.cache = build_cache(state)
        self.clock = _VirtualClock()
        self.outcomes: dict[str, Outcome] = {}
        self.preempted: list[Preemption] = []
        self.notes: list[str] = []
        self.queued: list[Pod] = []  # as fed, with the profile chosen for each
        self._fed: dict[str, Pod] = {}  # uid -> its pod in ``queued``, the version before its bind
        self._placed = 0
        # PodGroups and their members as the daemon's informers fill the store; "placed" is the
        # cache's view, as in the daemon (an assumption counts before any bind).
        self.gangs = state.gang_store(is_placed=self._is_placed, pending=False)
        self.group_failures: dict[tuple[str, str], str] = {}  # (api, PodGroup) -> its last failure
        self.events = _Events(self._failed)
        ports = Ports(
            events=self.events,
            evictor=MemoryEvictor(self._victim_gone),
            executor=Executor(),
            confirm=self._confirm,
            rng=random.Random(seed),
            on_decision=self._decided,
        )
        assembly = assemble(cfg, self.cache, self._frameworks, ports, clock=self.clock)
        self.scheduler, self.queue = assembly.scheduler, assembly.queue
        self.scheduler.cycle.detail = True
        self.diagnoses: dict[str, PodDiagnosis] = {}
        if diagnose:
            # Both cycles share one algorithm; the diagnosing one replaces it before any cycle runs.
            algorithm = DiagnosingAlgorithm(self.scheduler.cycle.algorithm, self._diagnosed)
            self.scheduler.cycle.algorithm = self.scheduler.cycle.group_cycle.algorithm = algorithm
        self.cache.update_snapshot(self.scheduler.snapshot)
        self.before = usage(self.scheduler.snapshot)

    @property
    def profiles(self) -> dict[str, Framework]:
        return self.scheduler.profiles

    def _frameworks(self, cfg: SchedulerConfig, inputs: FrameworkInputs) -> dict[str, Framework]:
        return offline_frameworks(
            cfg,
            self._registry,
            self.state,
            inputs.snapshot,
            inputs.nominated,
            gangs=self.gangs,
            event_sink=self._plugin_event,
            activator=inputs.activate,
            preempting=inputs.preempting,
            permit_clock=self.clock,
        )

    # -- the steps --------------------------------------------------------------------------------
    def feed(self, pods: Sequence[Pod], profile: str | None) -> None:
        """Queue ``pods`` as if all arrived at once, each scheduled by ``profile`` or its own."""
        for p in pods:
            fwk, note = choose_profile(self.profiles, p, profile)
            self._note_profile(p, fwk, bool(note))
            # The pod is scheduled by the profile chosen for it, as the daemon schedules its own.
            pod = dataclasses.replace(p, scheduler_name=fwk.profile_name) if p.scheduler_name != fwk.profile_name else p
            self.outcomes[pod.uid] = Outcome(pod.key, fwk.profile_name)
            self._fed[pod.uid] = pod
            self.queued.append(pod)
        # Every member exists before any is queued (all pods arrive at once): the barrier then
        # counts a gang's whole file, as the daemon does once the informer has seen all of it.
        for pod in self.queued:
            self.gangs.member_added(pod)
        for pod in self.queued:
            self.scheduler.on_pod_add(pod)

    def run_until_idle(self) -> None:
        """Schedule until nothing is left to try, skipping the clock over backoffs: at most
        :data:`MAX_ATTEMPTS` cycles per fed pod in all, so pods that keep preempting and still do
        not fit cannot loop for ever."""
        self.scheduler.run_until_idle(self.clock.advance, max_cycles=MAX_ATTEMPTS * max(1, len(self.queued)))

    def result(self, profile: str | None) -> SimulationResult:
        """Where every fed pod ended, the nodes' usage before and after, and each group's outcome
        (once, after :meth:`run_until_idle`: the pods still gated or waiting are marked now)."""
        held = self._settle_unplaced()
        self.cache.update_snapshot(self.scheduler.snapshot)
        return SimulationResult(
            cluster=self.state.source,
            profile=profile or next(iter(self.profiles)),
            seed=self.seed,
            outcomes=[self.outcomes[p.uid] for p in self.queued],
            before=self.before,
            after=usage(self.scheduler.snapshot),
            notes=self.notes,
            preempted=self.preempted,
            groups=group_outcomes(self.gangs, self.queued, self.outcomes, held, self.group_failures),
            diagnoses={p.key: self.diagnoses[p.uid] for p in self.queued if p.uid in self.diagnoses},
        )

    def _settle_unplaced(self) -> dict[str, str]:
        """Mark the pods still gated by PreEnqueue and those waiting at Permit; returns the uids the
        GangScheduling barrier holds, with its message."""
        held: dict[str, str] = {}
        for pod in self.queued:
            out = self.outcomes[pod.uid]
            fwk = self.profiles[pod.scheduler_name]
            if self.queue.where(pod.uid) is q.SubQueue.GATED:
                pre = fwk.run_pre_enqueue(pod)
                out.result, out.message = "gated", pre.message
                if pre.plugin == gang_scheduling.NAME:
                    held[pod.uid] = pre.message
            elif (wp := fwk.waiting.get(pod.uid)) is not None:
                out.attempts += 1
                out.result, out.node = "waiting", wp.node_name
                out.message = f"waiting at Permit ({', '.join(wp.pending_plugins())}) when the simulation ended"
        return held

    def _note_profile(self, pod: Pod, fwk: Framework, foreign: bool) -> None:
        """Say once that pods of no profile were placed with another, and once that a profile
        without GangScheduling placed PodGroup members one by one."""
        if foreign and not any(n.startswith("Pods whose schedulerName") for n in self.notes):
            self.notes.append(
                f"Pods whose schedulerName is not a profile of the configuration (e.g. {pod.key}: "
                f"{pod.scheduler_name!r}) were placed with profile {fwk.profile_name!r}."
            )
        if pod.pod_group and fwk.pod_group is None and not any(n.startswith("Pods of PodGroups") for n in self.notes):
            self.notes.append(
                f"Pods of PodGroups (e.g. {pod.key}) were placed one by one: profile {fwk.profile_name!r} does not "
                f"enable {gang_scheduling.NAME}, so no gang is placed all or nothing."
            )

    # -- the offline ports ------------------------------------------------------------------------
    def _is_placed(self, uid: str) -> bool:
        return self.cache.get_pod(uid) is not None

    def _diagnosed(
        self, pod: Pod, nodes: Sequence[str], found: ScheduleResult | FitError, extra: Mapping[str, Status]
    ) -> None:
        if pod.uid in self.outcomes:
            self.diagnoses[pod.uid] = diagnose(pod.key, nodes, found, extra)

    def _failed(self, pod: Pod, reason: str, message: str) -> None:
        """A failed attempt. The failure handler has requeued the pod by now, so the queue's own
        count (QueuedPodInfo.attempts, one per pop) is read; a placement is the attempt after."""
        out = self.outcomes.get(pod.uid)
        if out is not None:
            queued = self.queue.get(pod.uid)
            out.attempts = queued.attempts if queued is not None else out.attempts + 1
            out.result, out.message = ("unschedulable" if reason == "Unschedulable" else "error"), message

    def _confirm(self, pod: Pod, node: str) -> None:
        """A bind, confirmed at once: the pod as the watch would report it bound."""
        self._placed += 1
        out = self.outcomes[pod.uid]
        out.attempts += 1
        out.result, out.node, out.order, out.message = "scheduled", node, self._placed, ""
        out.ties = out.ties or [node]  # a gang's other members: the cycle reports only the first
        self.gangs.member_updated(self._fed[pod.uid], pod)
        self.scheduler.on_pod_update(self._fed[pod.uid], pod)

    def _victim_gone(self, v: Pod, preemptor: Pod, node: str) -> None:
        self.preempted.append(Preemption(v.key, node, preemptor.key))
        out = self.outcomes.get(v.uid)
        if out is not None:
            out.result, out.node, out.message = "preempted", node, f"preempted by {preemptor.key} on {node}"
        self.gangs.member_deleted(v)
        self.scheduler.on_pod_delete(v)

    def _decided(self, d: Decision) -> None:
        """Add what only the decision knows: scores and nominations. Failures and placements are
        counted where every member of a group cycle passes (:meth:`_failed`, :meth:`_confirm`)."""
        out = self.outcomes.get(d.uid)
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

    def _plugin_event(
        self, obj: Any, *, type_: str, reason: str, action: str, note: str, controller: str = "", **kind: str
    ) -> None:
        """The plugins' event sink: pod events to the recorder, PodGroup events into each group's
        last failure message (what the groups section reports)."""
        if isinstance(obj, gang.PodGroup):
            if reason == "FailedScheduling":
                self.group_failures[(obj.api, obj.key)] = note
            else:
                self.group_failures.pop((obj.api, obj.key), None)
        else:
            self.events.event(obj, type_=type_, reason=reason, action=action, note=note, controller=controller)


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


def run(args: argparse.Namespace, registry: Registry) -> SimulationResult:
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

    def work() -> SimulationResult:
        res = run(args, full_registry())
        if args.html:
            write_text(args.html, report.simulation_html(res.to_dict()))
        return res

    res = run_command("simulate", work)
    if isinstance(res, ToolError):
        return res.code
    sys.stdout.write(format_result(res, args.output))
    return EXIT_OK
