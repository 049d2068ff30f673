"""Victim selection, the dry run over candidate nodes, and the choice of one node (kube-scheduler v1.28+).

Everything here is a pure function of a pod, NodeInfo copies, PodDisruptionBudgets and a
:class:`~custom_scheduler.framework.interface.DryRunner` (the three Handle methods that run the
profile's filters and PreFilter extensions). Nothing talks to the API server, so ``explain``,
``simulate`` and the unit tests run the exact code the daemon runs.

**Victims on one node** (:func:`select_victims_on_node`, on a copy of the node and of the cycle
state): a victim is a pod, or every pod of a ``disruptionMode: all`` PodGroup (:mod:`.units`, 1.37's
workload-aware preemption). Remove every victim whose priority is *strictly lower* than the
preemptor's, telling the PreFilter extensions so their precomputed state (spread counts, affinity
counts) follows; if the preemptor still does not pass the filters (nominated pods accounted) the
node cannot help. Otherwise add the removed victims back one by one, most important first (higher
priority, a group before a pod, more pods, earlier start), first those whose eviction would violate
a PodDisruptionBudget and then the rest; a victim that breaks the fit when added back is evicted,
every other one is reprieved. The result is a minimal set in the sense kube-scheduler means: a more
important victim is never evicted when a less important one would do.

**Dry run** (:func:`dry_run_preemption`): candidate nodes are visited from a random offset, and the
search stops once ``num_candidates`` nodes can be freed and at least one of them violates no PDB.
PDB-clean candidates come first in the result. When the runner says the filters read of a node's
pods only their summed requests and number (``DryRunner.requests_fit``: NodeResourcesFit and
filters of the Node alone, no PreFilter extension to tell), each node is decided on a tally of
those (:class:`_Tally`) instead of a copy of the node and of the cycle state: the same victims and
statuses, without the copies and the NodeInfo bookkeeping of each removal and addition.

**Choice** (:func:`pick_one_node`), each rule only breaking the previous one's ties: fewest PDB
violations; lowest highest-priority victim; smallest sum of victim priorities (each offset by 2^31
so negative priorities still add up sensibly); fewest victims; latest start among the earliest-
started highest-priority victims; first in candidate order.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from custom_scheduler.api.model import Pod, PodDisruptionBudget
from custom_scheduler.framework.interface import DryRunner, RequestsFit
from custom_scheduler.framework.types import SUCCESS, Code, CycleState, NodeInfo, Status
from custom_scheduler.plugins.preemption.units import Victim, VictimIndex

#: The NodeInfo of another node of the snapshot, by name (for a group victim's pods there).
RemoteNodes = Callable[[str], NodeInfo | None]

#: Status reason of a node with no pod of lower priority than the preemptor.
ERR_REASON_NO_VICTIMS = "No preemption victims found for incoming pod"

#: Added to every victim priority before summing (kube-scheduler's MaxInt32 + 1).
PRIORITY_OFFSET = 2**31


@dataclass(frozen=True, slots=True)
class Victims:
    """The pods to evict on one node, most important first, and how many of them violate a PDB."""

    pods: tuple[Pod, ...]
    num_pdb_violations: int = 0


@dataclass(frozen=True, slots=True)
class Candidate:
    """A node the preemptor fits on once ``victims`` are gone."""

    node: str
    victims: Victims


def start_time(pod: Pod, now: float) -> float:
    """A pod's start time; pods not started yet (assumed, or without status) count as starting now."""
    return pod.start_time if pod.start_time is not None else now


def importance_key(now: float) -> Callable[[Pod], tuple[int, float]]:
    """Sort key putting more important pods first: higher priority, then earlier start."""
    return lambda p: (-p.priority, start_time(p, now))


def split_by_pdb_violation(pods: Iterable[Pod], pdbs: Sequence[PodDisruptionBudget]) -> tuple[list[Pod], list[Pod]]:
    """Split ``pods`` (order kept) into those whose eviction would violate a PDB and the others.

    Evictions are counted cumulatively in the given order (see :func:`_pdb_counter`)."""
    violates = _pdb_counter(pdbs)
    violating: list[Pod] = []
    others: list[Pod] = []
    for pod in pods:
        (violating if violates(pod) else others).append(pod)
    return violating, others


def split_victims_by_pdb_violation(
    victims: Iterable[Victim], pdbs: Sequence[PodDisruptionBudget]
) -> tuple[list[tuple[Victim, int]], list[Victim]]:
    """Split victims (order kept) into those with a pod whose eviction would violate a PDB, each
    with its number of such pods, and the others. A victim is atomic: one violating pod makes the
    whole victim violating (upstream's ``FilterVictimsWithPDBViolation``)."""
    if not pdbs:
        return [], list(victims)  # nothing to violate: no pod to ask about (most clusters' dry runs)
    violates = _pdb_counter(pdbs)
    violating: list[tuple[Victim, int]] = []
    others: list[Victim] = []
    for v in victims:
        n = sum(1 for p in v.pods if violates(p))
        if n:
            violating.append((v, n))
        else:
            others.append(v)
    return violating, others


def _pdb_counter(pdbs: Sequence[PodDisruptionBudget]) -> Callable[[Pod], bool]:
    """A predicate that counts one eviction per call: each matching PDB (same namespace, non-empty
    selector, pod not already in ``disruptedPods``) loses one allowed disruption, and the pod is
    violating when one of its PDBs goes below zero (the PDBs after it are then not charged)."""
    allowed = [pdb.disruptions_allowed for pdb in pdbs]

    def violates(pod: Pod) -> bool:
        if not pod.labels:  # a pod without labels matches no PDB
            return False
        for i, pdb in enumerate(pdbs):
            if pdb.namespace != pod.namespace or pod.name in pdb.disrupted_pods:
                continue
            sel = pdb.selector
            if sel.is_empty or not sel.matches(pod.labels):
                continue
            allowed[i] -= 1
            if allowed[i] < 0:
                return True
        return False

    return violates


class _Moves:
    """Removing and adding back one victim on the dry run's node copy: its pods on that node leave
    the copy; every pod (also those on other nodes, whose NodeInfos are not modified) is reported
    to the PreFilter extensions so their precomputed state follows (upstream's removeVictim)."""

    def __init__(
        self, runner: DryRunner, state: CycleState, pod: Pod, node_info: NodeInfo, remote: RemoteNodes
    ) -> None:
        self.runner, self.state, self.pod, self.node_info, self.remote = runner, state, pod, node_info, remote
        self.tell = runner.extensions_see_added_pods(state)  # else the extension calls do nothing

    def _where(self, name: str) -> NodeInfo | None:
        return self.node_info if name == self.node_info.name else self.remote(name)

    def remove(self, v: Victim) -> Status:
        for name, p in v.members:
            ni = self._where(name)
            if ni is None:
                continue
            if ni is self.node_info:
                ni.remove_pod(p)
            if not self.tell:
                continue
            st = self.runner.run_pre_filter_extension_remove_pod(self.state, self.pod, p, ni)
            if not st.is_success:
                return _as_error(st, f"removing pod {p.key} from node {name}")
        return SUCCESS

    def add(self, v: Victim) -> Status:
        for name, p in v.members:
            ni = self._where(name)
            if ni is None:
                continue
            if ni is self.node_info:
                ni.add_pod(p)
            if not self.tell:
                continue
            st = self.runner.run_pre_filter_extension_add_pod(self.state, self.pod, p, ni)
            if not st.is_success:
                return _as_error(st, f"adding pod {p.key} back to node {name}")
        return SUCCESS

    def fits(self) -> Status:
        return self.runner.run_filter_with_nominated(self.state, self.pod, self.node_info)


class _Tally:
    """:class:`_Moves` when the filters read of the node's pods only their summed requests and
    their number (:meth:`DryRunner.requests_fit`): the node is not modified, its pods' requests
    and count are kept as a node copy's would be (:meth:`NodeInfo.add_pod` and ``remove_pod``,
    for the pods on this node; no PreFilter extension to tell)."""

    def __init__(self, fit: RequestsFit, state: CycleState, node_info: NodeInfo) -> None:
        self.fit, self.node_info = fit(state, node_info), node_info
        self.pods = dict(node_info.pods)
        self.requested = node_info.requested.copy()

    def remove(self, v: Victim) -> Status:
        here = self.node_info.name
        for name, p in v.members:
            if name == here and (old := self.pods.pop(p.uid, None)) is not None:
                self.requested.add(old.requests, -1)
        return SUCCESS

    def add(self, v: Victim) -> Status:
        here = self.node_info.name
        for name, p in v.members:
            if name == here:
                self.pods[p.uid] = p
                self.requested.add(p.requests)
        return SUCCESS

    def fits(self) -> Status:
        return self.fit(self.requested, len(self.pods))


def select_victims_on_node(
    runner: DryRunner,
    state: CycleState,
    pod: Pod,
    node_info: NodeInfo,
    pdbs: Sequence[PodDisruptionBudget],
    *,
    now: float | None = None,
    index: VictimIndex | None = None,
    remote: RemoteNodes | None = None,
    fit: RequestsFit | None = None,
) -> tuple[Victims | None, Status]:
    """The fewest, least important victims to evict from ``node_info`` so that ``pod`` fits.

    Victims are units (:mod:`.units`): a pod, or every pod of a ``disruptionMode: all`` PodGroup
    (``index`` finds them; by default every pod is its own victim). ``remote`` gives the NodeInfo
    of another node a group victim also runs on. ``state`` and ``node_info`` are modified: pass
    copies; unless ``fit`` is given (the runner's :meth:`~DryRunner.requests_fit` for this pod
    and state), which decides on a tally and modifies neither. Returns ``(victims, SUCCESS)``
    with the victims' pods, or ``(None, status)`` with UnschedulableAndUnresolvable when no
    victim has a lower priority, the filters' status when the pod does not fit even with all of
    them gone, or an ERROR status when a PreFilter extension failed.
    """
    now = time.time() if now is None else now
    index = index if index is not None else VictimIndex(_no_group, (), now)
    # A pod of a PodGroup preempts with its group's priority, as upstream's pod-group preemptor:
    # so its own group's placed pods (same priority) are never its victims.
    preemptor = index.priority(pod)
    potential = [v for v in index.on_node(node_info) if v.priority < preemptor]
    if not potential:
        return None, Status.unresolvable(ERR_REASON_NO_VICTIMS)
    moves = _Moves(runner, state, pod, node_info, remote or _no_node) if fit is None else _Tally(fit, state, node_info)
    for v in potential:
        if not (st := moves.remove(v)).is_success:
            return None, st
    st = moves.fits()
    if not st.is_success:
        return None, st

    potential.sort(key=Victim.importance)
    violating, others = split_victims_by_pdb_violation(potential, pdbs)
    victims: list[Victim] = []
    num_violations = 0
    for v, violations in [*violating, *((v, 0) for v in others)]:
        if not (st := moves.add(v)).is_success:
            return None, st
        if moves.fits().is_success:
            continue  # reprieved
        if not (st := moves.remove(v)).is_success:
            return None, st
        victims.append(v)
        num_violations += violations
    if violating and others:
        victims.sort(key=Victim.importance)  # keep the most important first across both groups
    return Victims(tuple(p for v in victims for p in v.pods), num_violations), SUCCESS


def _no_group(_: Pod) -> None:
    return None


def _no_node(_: str) -> None:
    return None


def _as_error(st: Status, what: str) -> Status:
    if st.code is Code.ERROR:
        return st
    return Status.as_error(f"{what}: {st.message}", st.plugin)


def num_candidates(num_nodes: int, min_percentage: int, min_absolute: int) -> int:
    """How many candidate nodes the dry run looks for: ``max(n·pct/100, abs)``, at most ``n``."""
    n = num_nodes * min_percentage // 100
    n = max(n, min_absolute)
    return min(n, num_nodes)


def dry_run_preemption(
    runner: DryRunner,
    state: CycleState,
    pod: Pod,
    potential_nodes: Sequence[NodeInfo],
    pdbs: Sequence[PodDisruptionBudget],
    offset: int,
    wanted: int,
    *,
    now: float | None = None,
    index: VictimIndex | None = None,
    remote: RemoteNodes | None = None,
) -> tuple[list[Candidate], dict[str, Status]]:
    """Select victims on the potential nodes, visited from ``offset`` (wrapping), on copies.

    Stops once ``wanted`` candidates are found and at least one of them violates no PDB. Returns
    the candidates (PDB-clean first, each group in visiting order, each at most ``wanted`` long)
    and the status of every visited node that cannot be freed.
    """
    now = time.time() if now is None else now
    index = index if index is not None else VictimIndex(_no_group, (), now)
    preemptor = index.priority(pod)
    fit = runner.requests_fit(state, pod)  # with it, no copy of the node or the state is made
    clean: list[Candidate] = []
    violating: list[Candidate] = []
    statuses: dict[str, Status] = {}
    n = len(potential_nodes)
    for i in range(n):
        ni = potential_nodes[(offset + i) % n]
        if not any(index.priority(p) < preemptor for p in ni.pods.values()):
            # Nothing to evict: no need to copy the node.
            statuses[ni.name] = Status.unresolvable(ERR_REASON_NO_VICTIMS)
            continue
        if fit is None:
            victims, st = select_victims_on_node(
                runner, state.clone(), pod, ni.clone(), pdbs, now=now, index=index, remote=remote
            )
        else:
            victims, st = select_victims_on_node(runner, state, pod, ni, pdbs, now=now, index=index, fit=fit)
        if victims is not None and st.is_success and victims.pods:
            group = clean if victims.num_pdb_violations == 0 else violating
            if len(group) < wanted:
                group.append(Candidate(ni.name, victims))
            if clean and len(clean) + len(violating) >= wanted:
                break
            continue
        if victims is not None and st.is_success:
            st = Status.as_error(f"expected at least one victim pod on node {ni.name!r}")
        statuses[ni.name] = st
    return clean + violating, statuses


def pick_one_node(candidates: Sequence[Candidate], *, now: float | None = None) -> Candidate | None:
    """The candidate to preempt on (see the module docstring for the rules), or None if none."""
    if not candidates:
        return None
    now = time.time() if now is None else now

    def highest_priority(c: Candidate) -> int:
        return c.victims.pods[0].priority if c.victims.pods else 0

    def latest_start(c: Candidate) -> float:
        # The earliest start among the highest-priority victims; later is better.
        top = max((p.priority for p in c.victims.pods), default=0)
        return min((start_time(p, now) for p in c.victims.pods if p.priority == top), default=now)

    # Each score: higher is better.
    scores: tuple[Callable[[Candidate], float], ...] = (
        lambda c: -c.victims.num_pdb_violations,
        lambda c: -highest_priority(c),
        lambda c: -sum(p.priority + PRIORITY_OFFSET for p in c.victims.pods),
        lambda c: -len(c.victims.pods),
        latest_start,
    )
    remaining = list(candidates)
    for score in scores:
        if len(remaining) == 1:
            break
        values = [score(c) for c in remaining]
        best = max(values)
        remaining = [c for c, v in zip(remaining, values, strict=True) if v == best]
    return remaining[0]
