"""The scheduling cycle of a PodGroup (upstream's ``schedule_one_podgroup.go``).

The pod cycle (:class:`~custom_scheduler.core.cycle.SchedulingCycle`) hands a popped pod that
belongs to a gang to :meth:`GroupCycle.schedule`, which places the whole gang in one cycle, or
none of it: two gangs that fit alone but not together can never block each other with half-placed
members. It shares the pod cycle's collaborators (cache, queue, nominator, algorithm, snapshot,
binding cycle, evictor) and runs on the same single thread, so it needs no locking either.

A cycle is a sequence of named steps over one :class:`_Attempt`: take the members, place them
(in the best topology domain when the group asks for one), then one of carry out a gang
preemption, reject the whole gang, or commit the placed members to Permit and their binding
cycles.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import structlog

from custom_scheduler.api.model import Pod
from custom_scheduler.core.algorithm import Algorithm, ScheduleResult
from custom_scheduler.core.binding import Assumed, BindingCycle
from custom_scheduler.core.cache import Cache
from custom_scheduler.core.decision import Decision
from custom_scheduler.core.ports import Clock, NominatorPort, Observer, QueuePort
from custom_scheduler.core.queued_pod_info import QueuedPodInfo
from custom_scheduler.framework.evictor import Evictor
from custom_scheduler.framework.interface import PodGroupPlugin
from custom_scheduler.framework.runtime import Framework, FrameworkError
from custom_scheduler.framework.types import SUCCESS, Code, CycleState, FitError, Snapshot, Status

Plan = list[tuple[QueuedPodInfo, str, tuple[Pod, ...]]]
"""A gang preemption: each member that needs room, its node, and the pods to evict there."""


@dataclass(slots=True)
class _Trial:
    """One placement of a group's members: who was assumed where, who failed, the verdict."""

    placed: list[tuple[QueuedPodInfo, CycleState, Pod, str]] = field(default_factory=list)
    failed: list[tuple[QueuedPodInfo, str]] = field(default_factory=list)
    fits: dict[str, FitError] = field(default_factory=dict)  # uid -> why it fit nowhere
    results: dict[str, ScheduleResult] = field(default_factory=dict)  # uid -> where it was placed
    nominations: dict[str, str] = field(default_factory=dict)  # uid -> in-memory nomination it had
    untried: list[QueuedPodInfo] = field(default_factory=list)
    verdict: Status = SUCCESS


@dataclass(slots=True, frozen=True)
class _Attempt:
    """One group cycle's fixed inputs, which every step reads."""

    fwk: Framework
    gang: PodGroupPlugin
    group: str
    first: QueuedPodInfo
    """The popped member; its decision is returned, the others' are reported."""
    members: list[QueuedPodInfo]
    """The popped member and the others taken from the queue, in queue order."""
    cycle: int
    start: float

    @property
    def name(self) -> str:
        """The group as a user names it (``namespace/name``), not the plugin's internal key."""
        return self.group.partition(":")[2] or self.group


class GroupCycle:
    """Schedules a whole gang in one cycle, for :class:`~custom_scheduler.core.cycle.SchedulingCycle`.

    Args:
        new_state: a fresh CycleState on the pod cycle's random source.
        report: the pod cycle's ``on_decision`` hook, for the members other than the popped one.
    """

    def __init__(
        self,
        *,
        cache: Cache,
        queue: QueuePort,
        nominator: NominatorPort,
        binding: BindingCycle,
        evictor: Evictor,
        algorithm: Algorithm,
        observer: Observer,
        clock: Clock,
        snapshot: Snapshot,
        new_state: Callable[[], CycleState],
        report: Callable[[Decision], Decision],
    ) -> None:
        self.cache = cache
        self.queue = queue
        self.nominator = nominator
        self.binding = binding
        self.fail = binding.fail
        self.evictor = evictor
        self.algorithm = algorithm
        self.observer = observer
        self.clock = clock
        self.snapshot = snapshot
        self.new_state = new_state
        self.report = report

    def schedule(self, fwk: Framework, gang: PodGroupPlugin, group: str, first: QueuedPodInfo) -> Decision:
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
        Without one, a gang that does not fit may preempt (:meth:`_preempt_for_group`).
        """
        members = [first, *self.queue.take_members(lambda p: p.uid != first.pod.uid and gang.group_of(p) == group)]
        members = [m for m in members if not self._skip(m)]
        start = self.clock()
        cycle = self.queue.scheduling_cycle
        a = _Attempt(fwk, gang, group, first, members, cycle, start)
        self.cache.update_snapshot(self.snapshot)
        trial, verdict, key = self._place(a)
        if verdict.code is Code.UNSCHEDULABLE and members and trial.fits and not key:
            plan = None if self._ongoing_preemption(a) else self._preempt_for_group(a, trial)
            if plan is not None:
                return self._preempting(a, trial, plan)
        if verdict.code is Code.UNSCHEDULABLE or not members:
            return self._reject(a, trial, verdict)
        return self._commit(a, trial, verdict)

    # -- the steps ------------------------------------------------------------------------------
    def _skip(self, qpi: QueuedPodInfo) -> bool:
        """A member being deleted or already assumed/bound takes no part (its cycle ends here)."""
        pod = qpi.pod
        if pod.deleting or self.cache.get_pod(pod.uid) is not None:
            self.queue.done(pod.uid)
            return True
        return False

    def _place(self, a: _Attempt) -> tuple[_Trial, Status, str | None]:
        """Place the members, in the best domain of the group's topology key when it has one.
        Returns the trial, its verdict (unschedulable when no domain fits the whole gang) and the
        topology key (None or "" without one)."""
        key = a.gang.topology_key(a.group)
        domain_nodes: set[str] | None = None
        if key and a.members:
            domain_nodes = self._best_domain(a, key)
        trial = self._place_members(a, domain_nodes)
        verdict = trial.verdict
        if key and domain_nodes is None:
            verdict = Status(Code.UNSCHEDULABLE, (f"no {key} domain fits the whole pod group",), verdict.plugin)
        return trial, verdict, key

    def _reject(self, a: _Attempt, trial: _Trial, verdict: Status) -> Decision:
        """The gang cannot be placed: revert every assumption and fail every member with the
        group's message."""
        self._revert(a.fwk, trial)
        message = f"pod group {a.name} is unschedulable: {verdict.message}"
        if trial.failed:
            # The verdict counts members placed and still to try; say what became of the others.
            message += f"; {len(trial.failed)} member(s) fit no node: {trial.failed[0][1]}"
        for qpi in a.members:
            qpi.unschedulable_plugins = {*qpi.unschedulable_plugins, verdict.plugin or "GangScheduling"}
            self._fail_member(a.fwk, qpi, a.cycle, "Unschedulable", message)
        a.gang.group_attempted(a.group, "unschedulable", message, [])
        self.observer.group_attempt(a.fwk.profile_name, "unschedulable", self.clock() - a.start)
        decisions = {m.pod.uid: Decision(m.pod.key, "unschedulable", message=message, uid=m.pod.uid) for m in a.members}
        return self._decisions(a.first, decisions)

    def _commit(self, a: _Attempt, trial: _Trial, verdict: Status) -> Decision:
        """The gang can be placed: run Permit on the placed members and start their binding
        cycles; members that did not fit, or that Permit rejected, fail on their own, and
        members never tried back off."""
        fwk = a.fwk
        committed: list[tuple[Pod, str]] = []
        decisions: dict[str, Decision] = {}
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
                self.binding.start(Assumed(fwk, state, qpi, assumed, node, a.cycle, self.clock()))
        for qpi, msg in failed:
            reason = "Unschedulable" if qpi.unschedulable_plugins else "SchedulerError"
            self._fail_member(fwk, qpi, a.cycle, reason, msg)
            decisions[qpi.pod.uid] = Decision(qpi.pod.key, reason.lower(), message=msg, uid=qpi.pod.uid)
        for qpi in trial.untried:  # the verdict was final before they were reached
            self.queue.add_backoff(qpi)
            self.queue.done(qpi.pod.uid)
        outcome = "waiting" if waiting else "scheduled"
        a.gang.group_attempted(a.group, outcome, verdict.message, committed)
        self.observer.group_attempt(fwk.profile_name, outcome, self.clock() - a.start)
        return self._decisions(a.first, decisions)

    def _preempting(self, a: _Attempt, trial: _Trial, plan: Plan) -> Decision:
        """Carry out a gang preemption: evict, nominate the members that needed room, and let
        the whole gang wait (nothing of it is bound before its victims are gone)."""
        self._revert(a.fwk, trial)
        evicted = 0
        for qpi, node, victims in plan:
            self.nominator.add(qpi.pod, node)
            if victims:
                self.evictor.start(qpi.pod, node, victims, ())
                evicted += len(victims)
        nominated = {qpi.pod.uid: node for qpi, node, _ in plan}
        message = f"pod group {a.name} is waiting for the preemption of {evicted} pod(s)"
        for qpi in a.members:
            qpi.unschedulable_plugins = {*qpi.unschedulable_plugins, "DefaultPreemption"}
            with structlog.contextvars.bound_contextvars(pod=qpi.pod.key, uid=qpi.pod.uid, attempt=qpi.attempts):
                self.fail(a.fwk, qpi, a.cycle, "Unschedulable", message, nominated=nominated.get(qpi.pod.uid))
        a.gang.group_attempted(a.group, "waiting_on_preemption", message, [])
        self.observer.preemption(a.fwk.profile_name, evicted)
        self.observer.group_attempt(a.fwk.profile_name, "waiting_on_preemption", self.clock() - a.start)
        decisions = {m.pod.uid: Decision(m.pod.key, "unschedulable", message=message, uid=m.pod.uid) for m in a.members}
        return self._decisions(a.members[0], decisions)

    def _decisions(self, first: QueuedPodInfo, decisions: dict[str, Decision]) -> Decision:
        """Report every member's outcome (``report``); the popped one's is returned to the pod
        cycle, which reports it."""
        for uid, d in decisions.items():
            if uid != first.pod.uid:
                self.report(d)
        return decisions.get(first.pod.uid) or Decision(first.pod.key, "skipped", uid=first.pod.uid)

    def _fail_member(self, fwk: Framework, qpi: QueuedPodInfo, cycle: int, reason: str, message: str) -> None:
        with structlog.contextvars.bound_contextvars(pod=qpi.pod.key, uid=qpi.pod.uid, attempt=qpi.attempts):
            self.fail(fwk, qpi, cycle, reason, message)

    # -- placements -----------------------------------------------------------------------------
    def _place_members(self, a: _Attempt, only: set[str] | None) -> _Trial:
        """Assume and reserve the members one after the other (on ``only`` nodes when given),
        stopping as soon as ``placement_feasible`` says the gang cannot be placed."""
        fwk, members = a.fwk, a.members
        trial = _Trial()
        size = len(members)
        trial.verdict = a.gang.placement_feasible(a.group, cycle_size=size, tried=0, placed=0)
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
                self._assume_member(fwk, trial, qpi, state, result)
            trial.verdict = a.gang.placement_feasible(a.group, cycle_size=size, tried=i + 1, placed=len(trial.placed))
            if trial.verdict.code is Code.UNSCHEDULABLE:
                trial.untried = members[i + 1 :]
                break
        return trial

    def _assume_member(
        self, fwk: Framework, trial: _Trial, qpi: QueuedPodInfo, state: CycleState, result: ScheduleResult
    ) -> None:
        """Assume and reserve one member where the algorithm placed it, recording it on ``trial``."""
        pod = qpi.pod
        assumed = self.cache.assume(pod, result.node)
        st = fwk.run_reserve(state, assumed, result.node)
        if st.is_success:
            # An assumed member is no longer a nominated one (or the next member would count it
            # twice on that node); the nomination comes back on a revert.
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

    def _revert(self, fwk: Framework, trial: _Trial) -> None:
        for qpi, state, assumed, node in reversed(trial.placed):
            fwk.run_unreserve(state, assumed, node)
            self.cache.forget(assumed.uid)
            was = trial.nominations.get(assumed.uid)
            if was:
                self.nominator.add(qpi.pod, was)
        trial.placed.clear()
        self.cache.update_snapshot(self.snapshot)

    def _best_domain(self, a: _Attempt, key: str) -> set[str] | None:
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
            trial = self._place_members(a, names)
            if trial.verdict.code is not Code.UNSCHEDULABLE and trial.placed:
                free = self._free_cpu(names)
                if best is None or (free, value) < best:
                    best, chosen = (free, value), names
            self._revert(a.fwk, trial)
            for qpi in a.members:
                qpi.unschedulable_plugins = set()
        return chosen

    def _free_cpu(self, names: set[str]) -> float:
        """The CPU left unrequested on these nodes of the snapshot."""
        free = 0.0
        for n in names:
            info = self.snapshot.get(n)
            if info is not None and info.node is not None:
                free += max(0, info.node.allocatable.get("cpu") - info.requested.get("cpu"))
        return free

    # -- preemption -----------------------------------------------------------------------------
    def _ongoing_preemption(self, a: _Attempt) -> bool:
        """The group already preempted and its victims are not gone yet (upstream's
        ``isOngoingPreemption``): a member's evictions are still being sent, or a member's
        nominated node still holds a lower-priority pod terminating by preemption. Preempting
        again now would take more victims than the group needs (those of the first round are
        still on the nodes)."""
        for node, pods in self.nominator.by_node().items():
            mates = [p for p in pods if a.gang.group_of(p) == a.group]
            if not mates:
                continue
            if any(self.evictor.running(p.uid) for p in mates):
                return True
            info = self.snapshot.get(node)
            lowest = min(p.priority for p in mates)
            if info is not None and any(
                v.deleting and v.disruption_target and v.priority < lowest for v in info.pods.values()
            ):
                return True
        return False

    def _preempt_for_group(self, a: _Attempt, trial: _Trial) -> Plan | None:
        """Gang-aware preemption: would the *whole* gang fit if PostFilter's victims were gone?

        With the members that fit still assumed, every other member in turn asks PostFilter for
        a node and victims (pods, and whole PodGroups with ``disruptionMode: all``: 1.37's
        workload-aware preemption), which are held out of the cache, and the member is assumed on
        that node, so later members see both. Only when the gang is then
        feasible is the plan returned (member, node, victims); either way every assumption made
        here is undone and the held pods are put back: the caller evicts and nominates.
        """
        fwk = a.fwk
        if not fwk.post_filter:
            return None
        plan: Plan = []
        placed_uids = {qpi.pod.uid for qpi, *_ in trial.placed}
        extra = _Trial(nominations=trial.nominations)
        ok = True
        try:
            for qpi in a.members:
                if qpi.pod.uid in placed_uids:
                    continue
                step = self._preempt_member(a, qpi, extra)
                if step is None:
                    ok = False
                    break
                plan.append(step)
            if ok:
                total = len(trial.placed) + len(extra.placed)
                size = len(a.members)
                verdict = a.gang.placement_feasible(a.group, cycle_size=size, tried=size, placed=total)
                ok = verdict.is_success and any(v for _, _, v in plan)
        finally:
            self._revert(fwk, extra)
            self.cache.restore_held()
            self.cache.update_snapshot(self.snapshot)
        return plan if ok else None

    def _preempt_member(
        self, a: _Attempt, qpi: QueuedPodInfo, extra: _Trial
    ) -> tuple[QueuedPodInfo, str, tuple[Pod, ...]] | None:
        """Place one member for :meth:`_preempt_for_group`: where it fits, or where PostFilter
        would make room (its victims held out of the cache). The member
        stays assumed on ``extra``; None when it fits nowhere even so."""
        fwk, pod = a.fwk, qpi.pod
        state = self.new_state()
        victims: tuple[Pod, ...] = ()
        try:
            result = self.algorithm.schedule(fwk, state, pod, self.snapshot, self.nominator.by_node())
            node = result.node
        except FitError as fit:
            post = fwk.run_post_filter(state, pod, fit.statuses)
            if not (post.status.is_success and post.nominated_node_name):
                return None
            node = post.nominated_node_name
            # A victim PodGroup with disruptionMode all is already whole in PostFilter's result.
            victims = tuple(self.cache.hold_out(post.victims))
            self.cache.update_snapshot(self.snapshot)
        except (FrameworkError, RuntimeError):
            # A plugin failed on this member: no plan can be trusted, so the group preempts
            # nothing and is rejected with the verdict its placement already had.
            return None
        assumed = self.cache.assume(pod, node)
        st = fwk.run_reserve(state, assumed, node)
        extra.placed.append((qpi, state, assumed, node))
        if not st.is_success:
            return None
        self.cache.update_snapshot(self.snapshot)
        return qpi, node, victims
