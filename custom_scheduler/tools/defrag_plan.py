"""The pure planning of ``custom-scheduler defrag``: which pods to move so that a request shape fits.

A *shape* is ``count`` pods that each request ``requests`` (e.g. two pods of 8 GPUs). The planner
looks at the cluster as the Fit filter does (allocatable minus the requests of the node's pods, and
the pod count) and chooses *moves*: units of pods to evict, which their controllers re-create and
the scheduler places elsewhere.

What may move (:func:`units_of`), each rule with the reason reported when it holds a pod back:

- a pod **owned by a controller** (an ``ownerReference`` with ``controller: true``), since a bare
  pod, once evicted, is gone for good (``include_bare`` lifts this);
- not a **DaemonSet** pod (its controller re-creates it on the same node) nor a mirror pod;
- not already **terminating**;
- **priority** not above the shape's (when the shape has one: a pending pod's, or ``--priority``);
- a **gang** (the assigned pods of one PodGroup) moves only whole, as one unit: it may move only
  if each member may, and its priority is its highest member's;
- **PodDisruptionBudgets**: every PDB covering a pod of the unit must still allow that many
  disruptions (``status.disruptionsAllowed``, counted down as the plan evicts).

How the moves are chosen (:func:`plan`): the shape's pods are given nodes one at a time; for each,
the node that needs the cheapest evictions wins, the cost being the number of pods evicted, then
their priorities (fewer and less important pods first), then the node's name. On a node, units
are taken in order of priority, pod count and then most of the missing resources freed, until the
pod fits; units that turn out unnecessary are dropped again. With a domain label, the shape must
land in one domain: each domain is planned alone and the cheapest wins. Every evicted pod must
fit somewhere else afterwards (first fit, largest first, never on a node the shape takes), or the
target is not taken. This arithmetic proposes; the offline framework (``defrag.py``) verifies.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from custom_scheduler.api.model import Pod, PodDisruptionBudget
from custom_scheduler.api.resources import Resources
from custom_scheduler.framework.types import NodeInfo

#: Why a pod may not move (the reasons the report counts).
BARE = "not owned by a controller (--include-bare moves it)"
DAEMON = "a DaemonSet or mirror pod"
TERMINATING = "already terminating"
PRIORITY = "priority above the shape's"
GANG_MEMBER = "a member of its gang may not move"


@dataclass(frozen=True, slots=True)
class Shape:
    """``count`` pods each requesting ``requests``; ``priority`` None: no priority limit."""

    count: int
    requests: Resources
    priority: int | None = None
    name: str = "shape"


@dataclass(frozen=True, slots=True)
class PodFacts:
    """What planning needs to know of a pod beyond the scheduler's projection."""

    controlled: bool
    daemon: bool = False


@dataclass(frozen=True, slots=True)
class Unit:
    """Pods that move together: one pod, or every assigned pod of a gang."""

    key: str
    pods: tuple[Pod, ...]
    priority: int
    blocked: str = ""
    """Why the unit may not move (one of the reasons above); ``""`` when it may."""

    @property
    def nodes(self) -> set[str]:
        return {p.node_name for p in self.pods}


@dataclass(slots=True)
class Plan:
    """The planner's answer. ``targets``: node → how many shape pods it takes; ``moves``: the units
    evicted, in eviction order; ``feasible`` False when no choice of moves makes the shape fit
    (``reason`` says why)."""

    shape: Shape
    targets: dict[str, int] = field(default_factory=dict)
    moves: list[Unit] = field(default_factory=list)
    domain: str | None = None
    feasible: bool = True
    reason: str = ""
    held_back: dict[str, int] = field(default_factory=dict)
    """How many pods on the shape's candidate nodes may not move, by reason."""

    @property
    def evictions(self) -> int:
        return sum(len(u.pods) for u in self.moves)

    def evicted_pods(self) -> list[Pod]:
        return [p for u in self.moves for p in u.pods]


# -- units ------------------------------------------------------------------------------------------


def _blocked(pod: Pod, facts: PodFacts, shape: Shape, include_bare: bool) -> str:
    if facts.daemon:
        return DAEMON
    if pod.deleting:
        return TERMINATING
    if not facts.controlled and not include_bare:
        return BARE
    if shape.priority is not None and pod.priority > shape.priority:
        return PRIORITY
    return ""


def units_of(
    pods: Iterable[Pod], facts: Mapping[str, PodFacts], shape: Shape, *, include_bare: bool = False
) -> list[Unit]:
    """The assigned ``pods`` as units (a gang's members together), each with why it may not move.
    ``facts`` is keyed by pod uid; a pod without facts counts as bare."""
    singles: list[Unit] = []
    gangs: dict[str, list[Pod]] = {}
    for pod in pods:
        if pod.pod_group:
            gangs.setdefault(f"{pod.namespace}/{pod.pod_group}", []).append(pod)
            continue
        why = _blocked(pod, facts.get(pod.uid, PodFacts(False)), shape, include_bare)
        singles.append(Unit(pod.key, (pod,), pod.priority, why))
    for key, members in gangs.items():
        whys = [_blocked(p, facts.get(p.uid, PodFacts(False)), shape, include_bare) for p in members]
        why = next((w for w in whys if w), "")
        members.sort(key=lambda p: p.key)
        singles.append(Unit(f"gang {key}", tuple(members), max(p.priority for p in members), why))
    return sorted(singles, key=lambda u: u.key)


# -- budgets ----------------------------------------------------------------------------------------


class Budgets:
    """The PDBs' remaining allowed disruptions, counted down as the plan evicts."""

    def __init__(self, pdbs: Sequence[PodDisruptionBudget]) -> None:
        self._pdbs = list(pdbs)
        self.left = {f"{b.namespace}/{b.name}": b.disruptions_allowed for b in self._pdbs}

    def covering(self, pod: Pod) -> list[str]:
        return [
            f"{b.namespace}/{b.name}"
            for b in self._pdbs
            if b.namespace == pod.namespace and b.selector.matches(pod.labels)
        ]

    def need(self, unit: Unit) -> dict[str, int]:
        need: dict[str, int] = {}
        for pod in unit.pods:
            for key in self.covering(pod):
                need[key] = need.get(key, 0) + 1
        return need

    def allows(self, unit: Unit) -> bool:
        return all(self.left.get(k, 0) >= n for k, n in self.need(unit).items())

    def take(self, unit: Unit) -> None:
        for k, n in self.need(unit).items():
            self.left[k] -= n

    def copy(self) -> Budgets:
        other = Budgets(self._pdbs)
        other.left = dict(self.left)
        return other


# -- node arithmetic --------------------------------------------------------------------------------


def _names(r: Resources) -> list[str]:
    return ["cpu", "memory", "ephemeral-storage", *r.scalar]


@dataclass(slots=True)
class _Room:
    """A node's free resources and free pod slots as the plan changes them."""

    name: str
    labels: Mapping[str, str]
    free: Resources
    slots: int
    usable: bool

    def deficit(self, req: Resources) -> dict[str, int]:
        d = {n: req.get(n) - self.free.get(n) for n in _names(req) if req.get(n) > self.free.get(n)}
        if self.slots < 1:
            d["pods"] = 1
        return d

    def take(self, req: Resources, sign: int = 1) -> None:
        self.free.add(req, -sign)
        self.slots -= sign


def rooms_of(nodes: Iterable[NodeInfo]) -> dict[str, _Room]:
    """Each node's room, as Fit sees it. A cordoned node hosts nothing new (``usable`` False)."""
    out: dict[str, _Room] = {}
    for ni in nodes:
        if ni.node is None:
            continue
        free = ni.allocatable.copy()
        free.add(ni.requested, -1)
        out[ni.name] = _Room(
            ni.name, ni.node.labels, free, ni.allocatable.allowed_pods - len(ni.pods), not ni.node.unschedulable
        )
    return out


def _copy_rooms(rooms: Mapping[str, _Room]) -> dict[str, _Room]:
    return {n: _Room(r.name, r.labels, r.free.copy(), r.slots, r.usable) for n, r in rooms.items()}


def _freed_here(unit: Unit, node: str) -> tuple[Resources, int]:
    """What evicting ``unit`` frees on ``node``: its pods' requests there, and their pod slots."""
    freed = Resources()
    here = [p for p in unit.pods if p.node_name == node]
    for p in here:
        freed.add(p.requests)
    return freed, len(here)


def _fits_after(room: _Room, req: Resources, units: Sequence[Unit]) -> bool:
    trial = _Room(room.name, room.labels, room.free.copy(), room.slots, room.usable)
    for u in units:
        freed, slots = _freed_here(u, room.name)
        trial.free.add(freed)
        trial.slots += slots
    return not trial.deficit(req)


def _evictions_for(room: _Room, req: Resources, units: Sequence[Unit], budgets: Budgets) -> list[Unit] | None:
    """The cheapest units to evict from ``room``'s node so ``req`` fits there: ``[]`` when it fits
    already, None when no allowed choice makes it fit. Greedy (less important, smaller, freeing more
    of what is missing first), then pruned of units the others make unnecessary."""
    deficit = room.deficit(req)
    if not deficit:
        return []

    def relevant(u: Unit) -> int:
        freed, slots = _freed_here(u, room.name)
        return sum(min(freed.get(n) if n != "pods" else slots, need) for n, need in deficit.items())

    candidates = sorted(
        (u for u in units if not u.blocked and budgets.allows(u) and relevant(u) > 0),
        key=lambda u: (u.priority, len(u.pods), -relevant(u), u.key),
    )
    trial = budgets.copy()
    chosen: list[Unit] = []
    for u in candidates:
        if _fits_after(room, req, chosen):
            break
        if trial.allows(u):
            trial.take(u)
            chosen.append(u)
    if not _fits_after(room, req, chosen):
        return None
    for u in reversed(list(chosen)):
        rest = [c for c in chosen if c is not u]
        if _fits_after(room, req, rest):
            chosen = rest
    return chosen


def _replaceable(pods: Sequence[Pod], rooms: Mapping[str, _Room]) -> bool:
    """Whether every pod of ``pods`` fits somewhere in ``rooms`` (first fit, largest first): the
    arithmetic's promise that evicted pods have a home (the verification checks the rest)."""
    trial = [r for _, r in sorted(_copy_rooms(rooms).items()) if r.usable]
    order = sorted(
        pods, key=lambda p: (-sum(p.requests.scalar.values()), -p.requests.milli_cpu, -p.requests.memory, p.key)
    )
    for pod in order:
        home = next((r for r in trial if not r.deficit(pod.requests)), None)
        if home is None:
            return False
        home.take(pod.requests)
    return True


def _cost(units: Sequence[Unit]) -> tuple[int, int]:
    return sum(len(u.pods) for u in units), sum(u.priority * len(u.pods) for u in units)


@dataclass(slots=True)
class _Planning:
    """One attempt in one domain (or the whole cluster): the rooms, budgets and units as it goes."""

    rooms: dict[str, _Room]
    candidates: list[str]
    budgets: Budgets
    by_node: dict[str, list[Unit]]
    plan: Plan

    def place_one(self) -> bool:
        """Give the next shape pod a node: the cheapest whose evictions leave every evicted pod a
        home. False when none can."""
        req = self.plan.shape.requests
        options: list[tuple[tuple[int, int, str], str, list[Unit]]] = []
        for name in self.candidates:
            room = self.rooms[name]
            if not room.usable:
                continue
            chosen = _evictions_for(room, req, self.by_node.get(name, []), self.budgets)
            if chosen is not None:
                options.append(((*_cost(chosen), name), name, chosen))
        for _, name, chosen in sorted(options, key=lambda o: o[0]):
            after = _copy_rooms(self.rooms)
            for u in chosen:
                for p in u.pods:
                    after[p.node_name].take(p.requests, -1)
            after[name].take(req)
            if _replaceable([*self.plan.evicted_pods(), *(p for u in chosen for p in u.pods)], after):
                self._commit(name, chosen, after)
                return True
        return False

    def _commit(self, name: str, chosen: Sequence[Unit], after: dict[str, _Room]) -> None:
        self.rooms = after
        gone = {u.key for u in chosen}
        for u in chosen:
            self.budgets.take(u)
        self.by_node = {n: [u for u in us if u.key not in gone] for n, us in self.by_node.items()}
        self.plan.moves.extend(chosen)
        self.plan.targets[name] = self.plan.targets.get(name, 0) + 1


def _plan_in(
    rooms: Mapping[str, _Room],
    names: set[str],
    units: Sequence[Unit],
    budgets: Budgets,
    shape: Shape,
    domain: str | None,
) -> Plan:
    by_node: dict[str, list[Unit]] = {}
    held: dict[str, int] = {}
    for u in units:
        for n in u.nodes:
            by_node.setdefault(n, []).append(u)
        if u.blocked and u.nodes & names:
            held[u.blocked] = held.get(u.blocked, 0) + len(u.pods)
    work = _Planning(
        _copy_rooms(rooms), sorted(names), budgets.copy(), by_node, Plan(shape, domain=domain, held_back=held)
    )
    for i in range(shape.count):
        if not work.place_one():
            plan = work.plan
            plan.feasible = False
            plan.reason = (
                f"{shape.count - i} of {shape.count} pod(s) fit on no node"
                + (f" of domain {domain}" if domain else "")
                + " even after moving every pod allowed to move"
            )
            return plan
    return work.plan


def plan(
    nodes: Iterable[NodeInfo],
    units: Sequence[Unit],
    budgets: Budgets,
    shape: Shape,
    *,
    domain_label: str = "",
    avoid: frozenset[str] = frozenset(),
) -> Plan:
    """The least disruptive moves that make ``shape`` fit (see the module docstring); with
    ``domain_label``, all of it in the one domain that needs the fewest. ``avoid``: nodes the shape
    must not be given (targets of an earlier plan the framework rejected)."""
    rooms = rooms_of(nodes)
    if not domain_label:
        return _plan_in(rooms, set(rooms) - avoid, units, budgets, shape, None)
    domains = sorted({r.labels[domain_label] for r in rooms.values() if r.labels.get(domain_label)})
    if not domains:
        return Plan(shape, feasible=False, reason=f"no node has the label {domain_label}")
    plans = [
        _plan_in(
            rooms, {n for n, r in rooms.items() if r.labels.get(domain_label) == d} - avoid, units, budgets, shape, d
        )
        for d in domains
    ]
    feasible = [p for p in plans if p.feasible]
    if feasible:
        return min(feasible, key=lambda p: (*_cost(p.moves), p.domain or ""))
    held: dict[str, int] = {}
    for p in plans:
        for k, n in p.held_back.items():
            held[k] = held.get(k, 0) + n
    return Plan(shape, feasible=False, reason="; ".join(f"{p.domain}: {p.reason}" for p in plans), held_back=held)
