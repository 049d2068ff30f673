"""The scheduling cycle of one pod: snapshot → algorithm → PostFilter → assume/Reserve/Permit.

One implementation for the daemon, ``simulate`` and shadow mode; what differs is the ports
(:mod:`custom_scheduler.core.ports`). The cycle runs on one thread at a time (the daemon's
scheduling thread, or the offline driver), so the snapshot and the plugins' cycle state need no
locking. Its outcome is a :class:`Decision` value, and the pod ends the cycle in exactly one of:
handed to its binding cycle (:class:`~custom_scheduler.core.binding.BindingCycle`), requeued through
:meth:`SchedulingCycle.fail` (event ``FailedScheduling`` and the PodScheduled condition), or
skipped (not ours, being deleted, already assumed).

PostFilter's result is a value too: the nominated node goes to the nominator at once (so the next
cycles keep room for it), the victims and the lost nominations to the evictor port, which in the
daemon sends the API calls off this thread.

The random source (ties between equal scores, preemption's candidate offset) is ``rng``, owned
here and given to each cycle's :class:`CycleState`: a seed reproduces a run.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

import structlog

from custom_scheduler.api.model import Pod
from custom_scheduler.core import queue as q
from custom_scheduler.core.algorithm import Algorithm, ScheduleResult
from custom_scheduler.core.binding import Assumed, BindingCycle
from custom_scheduler.core.cache import Cache
from custom_scheduler.core.ports import Clock, EventSink, NominatorPort, Observer, QueuePort
from custom_scheduler.framework.evictor import Evictor, NoEvictor
from custom_scheduler.framework.interface import PodGroupPlugin, PostFilterResult
from custom_scheduler.framework.runtime import Framework, FrameworkError
from custom_scheduler.framework.types import SUCCESS, Code, CycleState, FitError, Snapshot, Status

log = structlog.get_logger("custom_scheduler.scheduler")


@dataclass(slots=True)
class _Trial:
    """One placement of a group's members: who was assumed where, who failed, the verdict."""

    placed: list[tuple[q.QueuedPodInfo, CycleState, Pod, str]] = field(default_factory=list)
    failed: list[tuple[q.QueuedPodInfo, str]] = field(default_factory=list)
    fits: dict[str, FitError] = field(default_factory=dict)  # uid -> why it fit nowhere
    results: dict[str, ScheduleResult] = field(default_factory=dict)  # uid -> where it was placed
    nominations: dict[str, str] = field(default_factory=dict)  # uid -> in-memory nomination it had
    untried: list[q.QueuedPodInfo] = field(default_factory=list)
    verdict: Status = SUCCESS


@dataclass(slots=True)
class Decision:
    """What happened to one pod in one cycle (for logs, shadow mode, simulate and tests)."""

    pod: str
    result: str  # scheduled | unschedulable | error | skipped | waiting
    node: str = ""
    message: str = ""
    post_filter: PostFilterResult | None = None
    schedule: ScheduleResult | None = None
    uid: str = ""


def run_post_filter(fwk: Framework, state: CycleState, pod: Pod, fit: FitError) -> PostFilterResult | None:
    """The PostFilter step of a failed cycle, shared with ``explain``: the profile's PostFilter
    plugins' decision (None when it has none), its message appended to ``fit``."""
    if not fwk.post_filter:
        return None
    post = fwk.run_post_filter(state, pod, fit.statuses)
    if post.message:
        fit.post_filter_msg = post.message
    return post


class SchedulingCycle:
    def __init__(
        self,
        *,
        profiles: Mapping[str, Framework],
        cache: Cache,
        queue: QueuePort,
        nominator: NominatorPort,
        events: EventSink | None,
        binding: BindingCycle,
        evictor: Evictor | None = None,
        algorithm: Algorithm | None = None,
        observer: Observer | None = None,
        rng: random.Random | None = None,
        clock: Clock = time.monotonic,
        on_decision: Callable[[Decision], None] | None = None,
        snapshot: Snapshot | None = None,
    ) -> None:
        self.profiles = dict(profiles)
        self.cache = cache
        self.queue = queue
        self.nominator = nominator
        self.events = events
        self.binding = binding
        # One place records failures and requeues, for both cycles.
        self.fail = binding.fail
        self.evictor: Evictor = evictor if evictor is not None else NoEvictor()
        self.rng = rng if rng is not None else random.Random()
        self.algorithm = algorithm or Algorithm()
        self.algorithm.rng = self.rng
        self.observer = observer or Observer()
        self.clock = clock
        self.on_decision = on_decision
        self.snapshot = snapshot if snapshot is not None else Snapshot()
        # Per-plugin scores in the result (simulate reports ties); the daemon leaves it to the
        # algorithm, which keeps them only when they are cheap.
        self.detail: bool | None = None

    def new_state(self) -> CycleState:
        return CycleState(self.rng)

    def schedule_one(self, qpi: q.QueuedPodInfo) -> Decision:
        with structlog.contextvars.bound_contextvars(
            pod=qpi.pod.key, uid=qpi.pod.uid, profile=qpi.pod.scheduler_name, attempt=qpi.attempts
        ):
            return self._decided(self._schedule_one(qpi))

    def _decided(self, d: Decision) -> Decision:
        if self.on_decision is not None:
            self.on_decision(d)
        return d

    def _schedule_one(self, qpi: q.QueuedPodInfo) -> Decision:
        pod = qpi.pod
        fwk = self.profiles.get(pod.scheduler_name)
        if fwk is None or pod.deleting or self.cache.get_pod(pod.uid) is not None:
            # Not ours any more, being deleted, or already assumed/bound: skip.
            self.queue.done(pod.uid)
            return Decision(pod.key, "skipped", uid=pod.uid)
        gang = fwk.pod_group
        group = gang.group_of(pod) if gang is not None else None
        if gang is not None and group is not None:
            return self._schedule_group(fwk, gang, group, qpi)
        start = self.clock()
        self.cache.update_snapshot(self.snapshot)
        state = self.new_state()
        cycle = self.queue.scheduling_cycle
        try:
            result = self.algorithm.schedule(
                fwk, state, pod, self.snapshot, self.nominator.by_node(), detail=self.detail
            )
        except FitError as fit:
            post = self._post_filter(fwk, state, pod, fit)
            msg = str(fit)
            qpi.unschedulable_plugins = fit.rejecting_plugins
            nominated = post.nominated_node_name if post is not None and post.status.is_success else None
            self.fail(fwk, qpi, cycle, "Unschedulable", msg, nominated=nominated)
            self.observer.attempt(fwk.profile_name, "unschedulable", self.clock() - start)
            return Decision(pod.key, "unschedulable", message=msg, post_filter=post, uid=pod.uid)
        except (FrameworkError, RuntimeError) as e:
            self.fail(fwk, qpi, cycle, "SchedulerError", str(e))
            self.observer.attempt(fwk.profile_name, "error", self.clock() - start)
            return Decision(pod.key, "error", message=str(e), uid=pod.uid)

        d = self.assume_and_reserve(fwk, state, qpi, result.node, cycle, start)
        d.schedule = result
        return d

    def assume_and_reserve(
        self, fwk: Framework, state: CycleState, qpi: q.QueuedPodInfo, node: str, cycle: int, start: float
    ) -> Decision:
        """Assume ``qpi``'s pod on ``node``, run Reserve and Permit, and hand it to its binding
        cycle; undo and fail on a rejection. Permit ``WAIT`` still hands it over: the binding
        cycle waits (the pod is reported as ``waiting``)."""
        pod = qpi.pod
        assumed = self.cache.assume(pod, node)
        self.nominator.remove(pod)
        st = fwk.run_reserve(state, assumed, node)
        if st.is_success:
            st = fwk.run_permit(state, assumed, node)
        if not st.is_success and st.code is not Code.WAIT:
            fwk.run_unreserve(state, assumed, node)
            self.cache.forget(pod.uid)
            rejected = st.code in (Code.UNSCHEDULABLE, Code.UNSCHEDULABLE_AND_UNRESOLVABLE)
            if rejected and st.plugin:
                qpi.unschedulable_plugins = {st.plugin}
            msg = st.message or "reserve/permit rejected the pod"
            self.fail(fwk, qpi, cycle, "Unschedulable" if rejected else "SchedulerError", msg)
            self.observer.attempt(fwk.profile_name, "unschedulable" if rejected else "error", self.clock() - start)
            return Decision(pod.key, "unschedulable" if rejected else "error", node, msg, uid=pod.uid)
        self.observer.attempt(fwk.profile_name, "scheduled", self.clock() - start)
        self.binding.start(Assumed(fwk, state, qpi, assumed, node, cycle, self.clock()))
        return Decision(pod.key, "waiting" if st.code is Code.WAIT else "scheduled", node, uid=pod.uid)

    # -- the pod-group cycle --------------------------------------------------------------------
    def _schedule_group(self, fwk: Framework, gang: PodGroupPlugin, group: str, first: q.QueuedPodInfo) -> Decision:
        """One cycle for a whole gang (upstream's ``podGroupSchedulingDefaultAlgorithm``).

        The group's other queued members are taken from the queue with the popped one and placed
        one after the other in one snapshot, each assumed and reserved so the next sees its room
        taken. ``placement_feasible`` is asked before and after each; as soon as it says the gang
        cannot be placed, or when all were tried without enough, every assumption is reverted and
        every member fails with the group's message: no gang is ever left half-placed by a cycle,
        so two gangs that fit alone but not together cannot block each other. Otherwise the placed
        members go through Permit (which lets them through once the gang is whole, or parks them
        with the group's timeout when members outside this cycle may still come) to their binding
        cycles, and members that did not fit individually are retried on their own.

        With a topology constraint (``gang.topology_key``) the whole placement is tried in each
        domain of that node label and made in the one where the gang fits tightest (the least
        free CPU left, which packs accelerators and keeps whole domains free for the next gang).
        """
        members = [first, *self.queue.take_members(lambda p: p.uid != first.pod.uid and gang.group_of(p) == group)]
        members = [m for m in members if not self._skip(m)]
        start = self.clock()
        cycle = self.queue.scheduling_cycle
        self.cache.update_snapshot(self.snapshot)
        domain_nodes: set[str] | None = None
        key = gang.topology_key(group)
        if key and members:
            domain_nodes = self._best_domain(fwk, gang, group, members, key)
        trial = self._place_members(fwk, gang, group, members, domain_nodes)
        verdict = trial.verdict
        if key and domain_nodes is None:
            verdict = Status(Code.UNSCHEDULABLE, (f"no {key} domain fits the whole pod group",), verdict.plugin)

        if verdict.code is Code.UNSCHEDULABLE and members and trial.fits and domain_nodes is None and not key:
            plan = self._preempt_for_group(fwk, gang, group, members, trial)
            if plan is not None:
                return self._group_preempting(fwk, gang, group, members, trial, plan, cycle, start)

        if verdict.code is Code.UNSCHEDULABLE or not members:
            self._revert(fwk, trial)
            message = f"pod group {group} is unschedulable: {verdict.message}"
            if trial.failed:
                message += f"; {trial.failed[0][1]}"
            for qpi in members:
                qpi.unschedulable_plugins = {*qpi.unschedulable_plugins, verdict.plugin or "GangScheduling"}
                self._fail_member(fwk, qpi, cycle, "Unschedulable", message)
            gang.group_attempted(group, "unschedulable", message, [])
            self.observer.group_attempt(fwk.profile_name, "unschedulable", self.clock() - start)
            decisions = {
                q.pod.uid: Decision(q.pod.key, "unschedulable", message=message, uid=q.pod.uid) for q in members
            }
            return self._group_decisions(first, decisions)

        committed: list[tuple[Pod, str]] = []
        decisions = {}
        failed = list(trial.failed)
        waiting = verdict.code is Code.WAIT
        for qpi, state, assumed, node in trial.placed:
            self.nominator.remove(qpi.pod)
            st = fwk.run_permit(state, assumed, node)
            if not st.is_success and st.code is not Code.WAIT:
                fwk.run_unreserve(state, assumed, node)
                self.cache.forget(assumed.uid)
                failed.append((qpi, st.message or "permit rejected the pod"))
                continue
            committed.append((assumed, node))
            d = Decision(assumed.key, "waiting" if waiting else "scheduled", node, uid=assumed.uid)
            d.schedule = trial.results.get(assumed.uid)
            decisions[assumed.uid] = d
            # Each member's binding cycle logs as that member, not as the pod that was popped.
            with structlog.contextvars.bound_contextvars(pod=assumed.key, uid=assumed.uid, attempt=qpi.attempts):
                self.binding.start(Assumed(fwk, state, qpi, assumed, node, cycle, self.clock()))
        for qpi, msg in failed:
            reason = "Unschedulable" if qpi.unschedulable_plugins else "SchedulerError"
            self._fail_member(fwk, qpi, cycle, reason, msg)
            decisions[qpi.pod.uid] = Decision(qpi.pod.key, reason.lower(), message=msg, uid=qpi.pod.uid)
        for qpi in trial.untried:  # the verdict was final before they were reached
            self.queue.add_backoff(qpi)
            self.queue.done(qpi.pod.uid)
        outcome = "waiting" if waiting else "scheduled"
        gang.group_attempted(group, outcome, verdict.message, committed)
        self.observer.group_attempt(fwk.profile_name, outcome, self.clock() - start)
        return self._group_decisions(first, decisions)

    def _group_decisions(self, first: q.QueuedPodInfo, decisions: dict[str, Decision]) -> Decision:
        """Report every member's outcome (``on_decision``); the popped one's is returned to
        :meth:`schedule_one`, which reports it."""
        for uid, d in decisions.items():
            if uid != first.pod.uid:
                self._decided(d)
        return decisions.get(first.pod.uid) or Decision(first.pod.key, "skipped", uid=first.pod.uid)

    def _fail_member(self, fwk: Framework, qpi: q.QueuedPodInfo, cycle: int, reason: str, message: str) -> None:
        with structlog.contextvars.bound_contextvars(pod=qpi.pod.key, uid=qpi.pod.uid, attempt=qpi.attempts):
            self.fail(fwk, qpi, cycle, reason, message)

    def _group_preempting(
        self,
        fwk: Framework,
        gang: PodGroupPlugin,
        group: str,
        members: list[q.QueuedPodInfo],
        trial: _Trial,
        plan: list[tuple[q.QueuedPodInfo, str, tuple[Pod, ...]]],
        cycle: int,
        start: float,
    ) -> Decision:
        """Carry out a gang preemption: evict, nominate the members that needed room, and let
        the whole gang wait (nothing of it is bound before its victims are gone)."""
        self._revert(fwk, trial)
        evicted = 0
        for qpi, node, victims in plan:
            self.nominator.add(qpi.pod, node)
            if victims:
                self.evictor.start(qpi.pod, node, victims, ())
                evicted += len(victims)
        nominated = {qpi.pod.uid: node for qpi, node, _ in plan}
        message = f"pod group {group} is waiting for the preemption of {evicted} pod(s)"
        for qpi in members:
            qpi.unschedulable_plugins = {*qpi.unschedulable_plugins, "DefaultPreemption"}
            with structlog.contextvars.bound_contextvars(pod=qpi.pod.key, uid=qpi.pod.uid, attempt=qpi.attempts):
                self.fail(fwk, qpi, cycle, "Unschedulable", message, nominated=nominated.get(qpi.pod.uid))
        gang.group_attempted(group, "waiting_on_preemption", message, [])
        self.observer.preemption(fwk.profile_name, evicted)
        self.observer.group_attempt(fwk.profile_name, "waiting_on_preemption", self.clock() - start)
        decisions = {q.pod.uid: Decision(q.pod.key, "unschedulable", message=message, uid=q.pod.uid) for q in members}
        return self._group_decisions(members[0], decisions)

    def _skip(self, qpi: q.QueuedPodInfo) -> bool:
        """A member being deleted or already assumed/bound takes no part (its cycle ends here)."""
        pod = qpi.pod
        if pod.deleting or self.cache.get_pod(pod.uid) is not None:
            self.queue.done(pod.uid)
            return True
        return False

    def _place_members(
        self,
        fwk: Framework,
        gang: PodGroupPlugin,
        group: str,
        members: list[q.QueuedPodInfo],
        only: set[str] | None,
    ) -> _Trial:
        """Assume and reserve ``members`` one after the other (on ``only`` nodes when given),
        stopping as soon as ``placement_feasible`` says the gang cannot be placed."""
        trial = _Trial()
        size = len(members)
        trial.verdict = gang.placement_feasible(group, cycle_size=size, tried=0, placed=0)
        if trial.verdict.code is Code.UNSCHEDULABLE:
            trial.untried = list(members)
            return trial
        for i, qpi in enumerate(members):
            pod = qpi.pod
            state = self.new_state()
            if only is not None:
                state.restrict_nodes(only)
            try:
                # Read per member: one placed before it is no longer nominated (it is assumed).
                result = self.algorithm.schedule(fwk, state, pod, self.snapshot, self.nominator.by_node())
            except FitError as fit:
                qpi.unschedulable_plugins = fit.rejecting_plugins
                trial.failed.append((qpi, str(fit)))
                trial.fits[pod.uid] = fit
            except (FrameworkError, RuntimeError) as e:
                trial.failed.append((qpi, str(e)))
            else:
                assumed = self.cache.assume(pod, result.node)
                st = fwk.run_reserve(state, assumed, result.node)
                if st.is_success:
                    # An assumed member is no longer a nominated one (or the next member would
                    # count it twice on that node); the nomination comes back on a revert.
                    was = self.nominator.node_of(pod.uid)
                    if was:
                        trial.nominations[pod.uid] = was
                        self.nominator.remove(pod)
                    trial.placed.append((qpi, state, assumed, result.node))
                    trial.results[pod.uid] = result
                    self.cache.update_snapshot(self.snapshot)  # the next member sees this one
                else:
                    fwk.run_unreserve(state, assumed, result.node)
                    self.cache.forget(pod.uid)
                    trial.failed.append((qpi, st.message or "reserve rejected the pod"))
            trial.verdict = gang.placement_feasible(group, cycle_size=size, tried=i + 1, placed=len(trial.placed))
            if trial.verdict.code is Code.UNSCHEDULABLE:
                trial.untried = members[i + 1 :]
                break
        return trial

    def _revert(self, fwk: Framework, trial: _Trial) -> None:
        for qpi, state, assumed, node in reversed(trial.placed):
            fwk.run_unreserve(state, assumed, node)
            self.cache.forget(assumed.uid)
            was = trial.nominations.get(assumed.uid)
            if was:
                self.nominator.add(qpi.pod, was)
        trial.placed.clear()
        self.cache.update_snapshot(self.snapshot)

    def _preempt_for_group(
        self, fwk: Framework, gang: PodGroupPlugin, group: str, members: list[q.QueuedPodInfo], trial: _Trial
    ) -> list[tuple[q.QueuedPodInfo, str, tuple[Pod, ...]]] | None:
        """Gang-aware preemption: would the *whole* gang fit if PostFilter's victims were gone?

        With the members that fit still assumed, every other member in turn asks PostFilter for
        a node and victims; the victims, widened to their whole gangs (``gang.group_mates``:
        evicting part of a running gang would leave it broken), are held out of the cache and the
        member is assumed on that node, so later members see both. Only when the gang is then
        feasible is the plan returned (member, node, victims); either way every assumption made
        here is undone and the held pods are put back: the caller evicts and nominates.
        """
        if not fwk.post_filter:
            return None
        plan: list[tuple[q.QueuedPodInfo, str, tuple[Pod, ...]]] = []
        placed_uids = {qpi.pod.uid for qpi, *_ in trial.placed}
        extra = _Trial(nominations=trial.nominations)
        ok = True
        try:
            for qpi in members:
                pod = qpi.pod
                if pod.uid in placed_uids:
                    continue
                state = self.new_state()
                victims: tuple[Pod, ...] = ()
                try:
                    result = self.algorithm.schedule(fwk, state, pod, self.snapshot, self.nominator.by_node())
                    node = result.node
                except FitError as fit:
                    post = fwk.run_post_filter(state, pod, fit.statuses)
                    if not (post.status.is_success and post.nominated_node_name):
                        ok = False
                        break
                    node = post.nominated_node_name
                    wider: dict[str, Pod] = {}
                    for v in post.victims:
                        wider[v.uid] = v
                        for mate in gang.group_mates(v):
                            wider.setdefault(mate.uid, mate)
                    victims = tuple(self.cache.hold_out(wider.values()))
                    self.cache.update_snapshot(self.snapshot)
                except (FrameworkError, RuntimeError):
                    ok = False
                    break
                assumed = self.cache.assume(pod, node)
                st = fwk.run_reserve(state, assumed, node)
                extra.placed.append((qpi, state, assumed, node))
                if not st.is_success:
                    ok = False
                    break
                self.cache.update_snapshot(self.snapshot)
                plan.append((qpi, node, victims))
            if ok:
                total = len(trial.placed) + len(extra.placed)
                verdict = gang.placement_feasible(group, cycle_size=len(members), tried=len(members), placed=total)
                ok = verdict.is_success and any(v for _, _, v in plan)
        finally:
            self._revert(fwk, extra)
            self.cache.restore_held()
            self.cache.update_snapshot(self.snapshot)
        return plan if ok else None

    def _best_domain(
        self, fwk: Framework, gang: PodGroupPlugin, group: str, members: list[q.QueuedPodInfo], key: str
    ) -> set[str] | None:
        """The nodes of the ``key`` domain where the whole gang fits with the least CPU left
        over (ties: the domain's name), found by dry-run placements that are reverted; None when
        it fits in no domain."""
        domains: dict[str, set[str]] = {}
        for ni in self.snapshot.node_list:
            value = ni.node.labels.get(key) if ni.node is not None else None
            if value is not None:
                domains.setdefault(value, set()).add(ni.name)
        best: tuple[float, str] | None = None
        chosen: set[str] | None = None
        for value in sorted(domains):
            names = domains[value]
            trial = self._place_members(fwk, gang, group, members, names)
            ok = trial.verdict.code is not Code.UNSCHEDULABLE and trial.placed
            if ok:
                free = 0.0
                for n in names:
                    info = self.snapshot.get(n)
                    if info is not None and info.node is not None:
                        free += max(0, info.node.allocatable.get("cpu") - info.requested.get("cpu"))
                if best is None or (free, value) < best:
                    best, chosen = (free, value), names
            self._revert(fwk, trial)
            for qpi in members:
                qpi.unschedulable_plugins = set()
        return chosen

    def _post_filter(self, fwk: Framework, state: CycleState, pod: Pod, fit: FitError) -> PostFilterResult | None:
        """PostFilter after a FitError; its message joins the FitError, its decision is carried out."""
        post = run_post_filter(fwk, state, pod, fit)
        if post is None:
            return None
        self.observer.preemption(fwk.profile_name, len(post.victims))
        if post.status.is_success and post.nominated_node_name:
            node = post.nominated_node_name
            for c in post.cleared_nominations:
                self.nominator.remove(c)
            self.nominator.add(pod, node)
            self.evictor.start(pod, node, post.victims, post.cleared_nominations)
        elif post.clear_nomination:
            # Nothing can make room: the pod should not keep a nomination it cannot use. (Other
            # failures keep it: waiting for its victims to terminate is one.)
            self.nominator.remove(pod)
            self.evictor.clear_nominations([pod])
        return post
