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

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

import structlog

from custom_scheduler.api.model import Pod
from custom_scheduler.core.algorithm import Algorithm, ScheduleResult
from custom_scheduler.core.binding import Assumed, BindingCycle
from custom_scheduler.core.cache import Cache
from custom_scheduler.core.decision import Decision
from custom_scheduler.core.ports import Clock, NominatorPort, Observer, QueuePort
from custom_scheduler.core.queued_pod_info import QueuedPodInfo
from custom_scheduler.framework import gang_topology as topo
from custom_scheduler.framework.evictor import Evictor
from custom_scheduler.framework.interface import PodGroupPlugin
from custom_scheduler.framework.runtime import Framework, FrameworkError
from custom_scheduler.framework.types import SUCCESS, Code, CycleState, FitError, Snapshot, Status

Plan = list[tuple[QueuedPodInfo, str, tuple[Pod, ...]]]
"""A gang preemption: each member that needs room, its node, and the pods to evict there."""
Cost = tuple[int, int, int, int, str]
"""A preemption plan's disruption, the least first: the highest victim priority, the number of
victims, the PodDisruptionBudgets they violate, then the domain's tier and value (determinism)."""


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
    note: str = ""  # the chosen topology domain, for the messages
    victims: dict[str, Pod] = field(default_factory=dict)  # a preemption plan's victims so far
    pdb_violations: int = 0


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

        With topology levels (:mod:`~custom_scheduler.framework.gang_topology`) the whole
        placement is tried in each domain of the tightest level first, climbing only when no
        domain of a level holds the gang, and made in the one where it fits with the least free
        CPU left (packing keeps whole domains free for the next gang). A gang that does not fit
        may preempt, inside one domain (:meth:`_preempt_in_domains`).
        """
        members = [first, *self.queue.take_members(lambda p: p.uid != first.pod.uid and gang.group_of(p) == group)]
        members = [m for m in members if not self._skip(m)]
        start = self.clock()
        cycle = self.queue.scheduling_cycle
        a = _Attempt(fwk, gang, group, first, members, cycle, start)
        self.cache.update_snapshot(self.snapshot)
        domains = self._topology(a)
        trial, verdict = self._place(a, domains)
        if verdict.code is Code.UNSCHEDULABLE and members and trial.fits and not self._ongoing_preemption(a):
            plan = self._preempt_in_domains(a, trial, domains)
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

    def _topology(self, a: _Attempt) -> topo.Plan:
        """The domains the group may be placed in, tightest first; the nodes of its members
        already placed (bound or assumed: both are in the snapshot) pin it to their domain."""
        g = a.gang
        req = g.topology_request(a.group) if isinstance(g, topo.GangTopology) else None
        if req is None:
            key = g.topology_key(a.group)
            req = topo.TopologyRequest((), key) if key else None
        if req is None or not a.members:
            return topo.UNCONSTRAINED
        nodes = [(ni.name, ni.node.labels) for ni in self.snapshot.node_list if ni.node is not None]
        pinned = {
            ni.name
            for ni in self.snapshot.node_list
            for p in ni.pods.values()
            if p.pod_group and f"{p.namespace}/{p.pod_group}" == a.name and g.group_of(p) == a.group
        }
        return topo.plan(req, nodes, pinned)

    def _place(self, a: _Attempt, domains: topo.Plan) -> tuple[_Trial, Status]:
        """Place the members: anywhere without topology, else in the best domain
        (:meth:`_best_domain`). The verdict is unschedulable when no domain holds the gang."""
        if not domains.constrained:
            trial = self._place_members(a, None)
            return trial, trial.verdict
        levels = " < ".join(t.level or "anywhere" for t in domains.tiers)
        if domains.empty:
            why = f"no topology domain ({levels}) can hold it: {domains.note}"
            return _Trial(untried=list(a.members)), Status(Code.UNSCHEDULABLE, (why,), a.gang.name)
        chosen, tried, failed = self._best_domain(a, domains)
        if chosen is None:
            why = f"it fits in no single topology domain ({levels}; {tried} domain(s) tried)"
            trial = _Trial(untried=list(a.members), fits=failed.fits)
            return trial, Status(Code.UNSCHEDULABLE, (why,), a.gang.name)
        trial = self._place_members(a, set(chosen.domain.nodes))
        trial.note = topo.explain(chosen, tried)
        return trial, trial.verdict

    def _reject(self, a: _Attempt, trial: _Trial, verdict: Status) -> Decision:
        """The gang cannot be placed: revert every assumption and fail every member with the
        group's message."""
        self._revert(a.fwk, trial)
        message = f"pod group {a.name} is unschedulable: {verdict.message}"
        if trial.failed:
            # The verdict counts members placed and still to try; say what became of the others.
            message += f"; {len(trial.failed)} member(s) fit no node: {trial.failed[0][1]}"
        for qpi in a.members:
            qpi.unschedulable_plugins = {*qpi.unschedulable_plugins, verdict.plugin or a.gang.name}
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
            d = Decision(assumed.key, "waiting" if waiting else "scheduled", node, trial.note, uid=assumed.uid)
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
        a.gang.group_attempted(a.group, outcome, trial.note or verdict.message, committed)
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
            qpi.unschedulable_plugins = {*qpi.unschedulable_plugins, *(p.name for p in a.fwk.post_filter)}
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

    def _best_domain(self, a: _Attempt, domains: topo.Plan) -> tuple[topo.DomainTrial | None, int, _Trial]:
        """Dry-run the gang in the domains, tier by tier (tightest first), stopping at the first
        tier where some domain holds every member; the best by
        :meth:`~custom_scheduler.framework.gang_topology.DomainTrial.rank`. Returns it (None: no
        domain reaches the quorum), how many domains were considered, and a trial carrying the
        members' fit errors (what a preemption needs); the members keep the plugins that rejected
        them in any dry run (their requeue hints).

        Within a tier the domains are tried from the least free of the gang's scarcest resource
        up (:func:`~.gang_topology.packing_resource`: its GPUs, else CPU): a placement of every
        member leaves ``free - their requests``, so the first domain that holds them all is the
        tightest fit of the tier and the rest need no dry run. A domain with less free than the
        quorum requests of any resource is skipped without one, once a dry run has met a
        rejection that room would resolve (see :func:`_resolvable`)."""
        feasible: list[topo.DomainTrial] = []
        tried = 0
        failed = _Trial()
        plugins: dict[str, set[str]] = {}
        keys, need = self._quorum_needs(a)
        key = topo.packing_resource(keys)
        hinted = False
        for i, tier in enumerate(domains.tiers):
            free = {d.value: self._free(d.nodes, keys) for d in tier.domains}
            for d in sorted(tier.domains, key=lambda d: (free[d.value][key], d.value)):
                tried += 1
                small = topo.too_small(free[d.value], need)
                if small and hinted:
                    # Cannot hold the quorum's requests: no dry run (PreFilter) for it. Small
                    # domains are dry-run until one rejection could be resolved by room (that
                    # dry run's plugins, NodeResourcesFit's "Insufficient ...", are then the
                    # members' requeue hints for the skipped ones too, and a preemption's
                    # starting point). A domain whose nodes reject the members for good (a
                    # selector, a taint) says nothing of what freed room would do: with only
                    # its hints, a pod leaving a skipped domain would never requeue the gang.
                    continue
                got = self._dry_run(a, i, d, failed, plugins, key)
                hinted = hinted or _resolvable(failed.fits.values())
                if got is not None:
                    feasible.append(got)
                    if got.all_fit:
                        break
            if any(t.all_fit for t in feasible):
                break
        chosen = topo.choose(feasible)
        if chosen is None:  # the members wait for what rejected them anywhere (requeue hints)
            for qpi in a.members:
                qpi.unschedulable_plugins = plugins.get(qpi.pod.uid, set())
        return chosen, tried, failed

    def _dry_run(
        self, a: _Attempt, tier: int, d: topo.Domain, failed: _Trial, plugins: dict[str, set[str]], key: str
    ) -> topo.DomainTrial | None:
        """Place the gang in ``d`` and revert: the result when it reaches the quorum; the fit
        errors go to ``failed`` and the rejecting plugins to ``plugins``."""
        trial = self._place_members(a, set(d.nodes))
        got = None
        if trial.verdict.code is not Code.UNSCHEDULABLE and trial.placed:
            all_fit = not trial.failed and not trial.untried
            got = topo.DomainTrial(tier, d, len(trial.placed), all_fit, self._free(d.nodes, (key,))[key])
        failed.fits.update(trial.fits)
        self._revert(a.fwk, trial)
        for qpi in a.members:
            plugins.setdefault(qpi.pod.uid, set()).update(qpi.unschedulable_plugins)
            qpi.unschedulable_plugins = set()
        return got

    def _free(self, names: frozenset[str], keys: Sequence[str]) -> dict[str, int]:
        """The amounts of ``keys`` left unrequested on these nodes of the snapshot."""
        infos = (self.snapshot.get(n) for n in names)
        return topo.domain_free(((i.node.allocatable, i.requested) for i in infos if i and i.node), keys)

    def _quorum_needs(self, a: _Attempt) -> tuple[tuple[str, ...], dict[str, int]]:
        """The resources compared before a dry run (:func:`~.gang_topology.checked_resources`) and
        what the fewest members that satisfy the group would request of each (the smallest ones):
        a domain with less free cannot hold the gang, whatever the plugins say."""
        size = len(a.members)
        k = next(
            (
                k
                for k in range(size + 1)
                if a.gang.placement_feasible(a.group, cycle_size=size, tried=size, placed=k).code
                is not Code.UNSCHEDULABLE
            ),
            size,
        )
        requests = [m.pod.requests for m in a.members]
        dra = a.fwk.handle.dra
        keys = topo.checked_resources(requests, lambda name: dra.extended_resource_class(name) is not None)
        return keys, topo.quorum_needs(requests, k, keys)

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

    def _preempt_in_domains(self, a: _Attempt, trial: _Trial, domains: topo.Plan) -> Plan | None:
        """Job-level preemption: the plan of :meth:`_preempt_for_group` in the domain where it
        disrupts least (:data:`Cost`), every domain of every tier dry-run; without topology, the
        plan over the whole cluster. The members' requeue hints are kept as the placement left them."""
        if not a.fwk.post_filter:
            return None
        if not domains.constrained:
            got = self._preempt_for_group(a, trial, None)
            return got[0] if got is not None else None
        hints = {qpi.pod.uid: set(qpi.unschedulable_plugins) for qpi in a.members}
        best: tuple[Cost, Plan] | None = None
        for i, tier in enumerate(domains.tiers):
            for d in tier.domains:
                placed = self._place_members(a, set(d.nodes))
                try:
                    got = self._preempt_for_group(a, placed, d.nodes)
                finally:
                    self._revert(a.fwk, placed)
                if got is not None and (best is None or (*got[1], i, d.value) < best[0]):
                    best = ((*got[1], i, d.value), got[0])
        for qpi in a.members:
            qpi.unschedulable_plugins = hints[qpi.pod.uid]
        return best[1] if best is not None else None

    def _preempt_for_group(
        self, a: _Attempt, trial: _Trial, only: frozenset[str] | None
    ) -> tuple[Plan, tuple[int, int, int]] | None:
        """Gang-aware preemption: would the *whole* gang fit if PostFilter's victims were gone?

        With the members that fit still assumed, every other member in turn asks PostFilter for
        a node (among ``only`` when given) and victims (pods, and whole PodGroups with
        ``disruptionMode: all``: 1.37's workload-aware preemption; whole gangs with job-level
        preemption), which are held out of the cache, and the member is assumed on that node, so
        later members see both. Only when the gang is then feasible is the plan returned (member,
        node, victims) with its disruption (highest victim priority, victims, PDB violations);
        either way every assumption made here is undone and the held pods are put back: the
        caller evicts and nominates.
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
                step = self._preempt_member(a, qpi, extra, only)
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
        if not ok:
            return None
        victims = extra.victims.values()
        return plan, (max((v.priority for v in victims), default=0), len(extra.victims), extra.pdb_violations)

    def _preempt_member(
        self, a: _Attempt, qpi: QueuedPodInfo, extra: _Trial, only: frozenset[str] | None
    ) -> tuple[QueuedPodInfo, str, tuple[Pod, ...]] | None:
        """Place one member for :meth:`_preempt_for_group`: where it fits, or where PostFilter
        would make room (its victims, as units, held out of the cache). The member stays assumed
        on ``extra``; None when it fits nowhere even so."""
        fwk, pod = a.fwk, qpi.pod
        state = self.new_state()
        if only is not None:
            state.restrict_nodes(only)
        victims: tuple[Pod, ...] = ()
        try:
            result = self.algorithm.schedule(fwk, state, pod, self.snapshot, self.nominator.by_node())
            node = result.node
        except FitError as fit:
            post = fwk.run_post_filter(state, pod, fit.statuses)
            if not (post.status.is_success and post.nominated_node_name):
                return None
            node = post.nominated_node_name
            new = self._units(a, pod, post.victims, post.num_pdb_violations, extra)
            if new is None:
                return None
            # A victim PodGroup with disruptionMode all is already whole in PostFilter's result.
            victims = tuple(self.cache.hold_out(new))
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

    def _units(
        self, a: _Attempt, pod: Pod, victims: tuple[Pod, ...], pdb_violations: int, extra: _Trial
    ) -> list[Pod] | None:
        """PostFilter's victims for one member, widened to units by the gang plugin (job-level
        preemption: no victim gang keeps part of its core); the new ones to hold out, recorded
        with their PDB cost on ``extra``. None: a victim gang cannot be taken whole."""
        if not isinstance(a.gang, topo.GangTopology):
            extra.victims.update((v.uid, v) for v in victims)
            extra.pdb_violations += pdb_violations
            return list(victims)
        got = a.gang.job_victims(a.group, pod, [*extra.victims.values(), *victims])
        if got is None:
            return None
        new = [v for v in got.pods if v.uid not in extra.victims]
        extra.victims.update((v.uid, v) for v in got.pods)
        extra.pdb_violations = got.pdb_violations
        return new


def _resolvable(fits: Iterable[FitError]) -> bool:
    """Some node rejected a member in a way room could resolve (``Unschedulable``, not
    ``UnschedulableAndUnresolvable``): the rejecting plugins name what freed capacity helps."""
    return any(st.code is Code.UNSCHEDULABLE for fit in fits for st in fit.statuses.values())
