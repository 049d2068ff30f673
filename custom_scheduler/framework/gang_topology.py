"""Topology domains for gangs: which node sets a PodGroup is tried in, tightest first (issue #28).

A cluster's nodes carry a hierarchy of labels — e.g. ``topology.kubernetes.io/zone`` ⊃
``example.com/block`` ⊃ ``example.com/rack`` ⊃ ``kubernetes.io/hostname`` — configured as
GangScheduling's ``topologyLevels`` (widest first). A PodGroup asks for a *required* level (every
member in one domain of it: the native ``schedulingConstraints.topology[0].key`` or the
``custom-scheduler.io/topology-required`` annotation) and/or a *preferred* one (the level to try
from; Kueue's ``podset-preferred-topology`` meaning). :func:`plan` turns that into *tiers*: the
levels to try, tightest first, each with its domains (one label value → its nodes), so the group
cycle can take the tightest level where the gang fits and climb only when it must:

- required R in the hierarchy: from the preferred level (else the hierarchy's tightest) up to R,
  never beyond it;
- required R not in the hierarchy: R alone (the native one-level constraint, as before);
- preferred P only: from P up to the hierarchy's widest level, then the whole cluster (Kueue's
  "admitted as distributed" fallback);
- neither: no tiers — the gang is placed anywhere, as without topology.

Late members and replacements: once members are placed (bound or assumed), only the domains that
hold *all* of their nodes remain, so a new member joins the domain its siblings share; the
domain is derived from the placed members' nodes' labels, never written anywhere.

Everything here is pure (node names and labels in, tiers out), so the group cycle and the tests
read the same answers; choosing among dry-run results is :func:`choose`.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from custom_scheduler.api.model import Pod
from custom_scheduler.api.resources import CPU, EPHEMERAL_STORAGE, MEMORY, Resources

#: The default hierarchy (widest first): the well-known labels every cluster may carry.
DEFAULT_LEVELS: tuple[str, ...] = (
    "topology.kubernetes.io/region",
    "topology.kubernetes.io/zone",
    "kubernetes.io/hostname",
)
#: The level of :func:`plan`'s last resort for a preferred-only group: every node.
ANYWHERE = ""


@dataclass(frozen=True, slots=True)
class TopologyRequest:
    """What a group asks for: ``levels`` is the configured hierarchy (widest first)."""

    levels: tuple[str, ...]
    required: str | None = None
    preferred: str | None = None


@dataclass(frozen=True, slots=True)
class Domain:
    """The nodes sharing ``value`` of label ``level`` (``level`` empty: the whole cluster)."""

    level: str
    value: str
    nodes: frozenset[str]

    @property
    def name(self) -> str:
        return f"{self.level}={self.value}" if self.level else "the whole cluster"


@dataclass(frozen=True, slots=True)
class Tier:
    """One level's domains, sorted by value (so every choice is deterministic)."""

    level: str
    domains: tuple[Domain, ...]


@dataclass(frozen=True, slots=True)
class Plan:
    """The tiers to try, tightest first; ``constrained`` False means place anywhere (no topology).
    ``note`` says why no domain is left when tiers are all empty (for the pods' message)."""

    tiers: tuple[Tier, ...]
    constrained: bool
    note: str = ""

    @property
    def empty(self) -> bool:
        return self.constrained and not any(t.domains for t in self.tiers)


UNCONSTRAINED = Plan((), False)


def levels_to_try(req: TopologyRequest) -> tuple[tuple[str, ...], bool]:
    """The levels to try, tightest first, and whether the whole cluster comes last."""
    tight_first = tuple(reversed(req.levels))
    required, preferred = req.required, req.preferred
    if required:
        if required not in tight_first:
            return (required,), False
        stop = tight_first.index(required)
        start = tight_first.index(preferred) if preferred in tight_first else 0
        return tight_first[min(start, stop) : stop + 1], False
    if preferred:
        if preferred not in tight_first:
            return (preferred,), True
        return tight_first[tight_first.index(preferred) :], True
    return (), False


def domains_of(level: str, nodes: Iterable[tuple[str, Mapping[str, str]]]) -> tuple[Domain, ...]:
    """The domains of ``level`` among ``nodes`` (name, labels); a node without the label is in none."""
    by_value: dict[str, set[str]] = {}
    for name, labels in nodes:
        value = labels.get(level)
        if value is not None:
            by_value.setdefault(value, set()).add(name)
    return tuple(Domain(level, v, frozenset(by_value[v])) for v in sorted(by_value))


def plan(req: TopologyRequest, nodes: Sequence[tuple[str, Mapping[str, str]]], pinned: Collection[str] = ()) -> Plan:
    """The tiers for ``req`` over ``nodes``; ``pinned`` are the nodes of members already placed,
    which every remaining domain must contain (late members stay with their siblings)."""
    levels, anywhere = levels_to_try(req)
    if not levels:
        return UNCONSTRAINED
    tiers = [Tier(level, domains_of(level, nodes)) for level in levels]
    if anywhere:
        tiers.append(Tier(ANYWHERE, (Domain(ANYWHERE, "", frozenset(n for n, _ in nodes)),)))
    if pinned:
        pin = frozenset(pinned)
        tiers = [Tier(t.level, tuple(d for d in t.domains if pin <= d.nodes)) for t in tiers]
    out = Plan(tuple(tiers), True)
    if out.empty:
        widest = levels[-1]
        if pinned:
            note = f"its placed members' nodes ({', '.join(sorted(pinned)[:3])}) share no {widest} domain"
        else:
            note = f"no node has the label {widest}"
        return Plan(out.tiers, True, note)
    return out


@dataclass(frozen=True, slots=True)
class DomainTrial:
    """One dry-run placement of the gang in ``domain`` (tier ``tier``, 0 the tightest)."""

    tier: int
    domain: Domain
    placed: int
    all_fit: bool
    leftover: float
    """What stays free in the domain after the placement (packing: the less the better)."""

    def rank(self) -> tuple[bool, int, int, int, float, str]:
        """The order of preference: a domain where every member fits, at the tightest level, then
        (only when none does — an elastic gang short of room) the most members placed; then the
        least left over, then the value."""
        tier_if_fit = self.tier if self.all_fit else 0
        return (not self.all_fit, tier_if_fit, -self.placed, self.tier, self.leftover, self.domain.value)


def choose(trials: Iterable[DomainTrial]) -> DomainTrial | None:
    """The best of the feasible dry runs (see :meth:`DomainTrial.rank`), or None."""
    return min(trials, key=DomainTrial.rank, default=None)


def explain(chosen: DomainTrial, tried: int) -> str:
    """The sentence the pods' and the group's messages carry about the chosen domain."""
    what = "every member fits" if chosen.all_fit else f"{chosen.placed} member(s) fit"
    return f"placed in {chosen.domain.name} ({what}; {tried} domain(s) tried, tightest level first)"


@dataclass(frozen=True, slots=True)
class JobVictims:
    """A preemption's victims as units, and how many of them a PodDisruptionBudget protects."""

    pods: tuple[Pod, ...]
    pdb_violations: int


@runtime_checkable
class GangTopology(Protocol):
    """What the group cycle asks of a gang plugin beyond ``PodGroupPlugin`` (issue #28)."""

    def topology_request(self, group: str) -> TopologyRequest | None:
        """The group's levels, or None when it asks for no topology."""
        ...

    def job_victims(self, group: str, preemptor: Pod, victims: Sequence[Pod]) -> JobVictims | None:
        """Job-level preemption: ``victims`` widened so no gang loses part of its core (None:
        impossible)."""
        ...


# --- the resource pre-check ------------------------------------------------------------------------
def checked_resources(requests: Iterable[Resources], dra_backed: Callable[[str], bool]) -> tuple[str, ...]:
    """The resources a domain's free amounts are compared on before a dry run: CPU, memory and
    ephemeral storage, plus every extended resource a member requests (GPUs above all: a rack with
    spare CPU but too few free GPUs must be skipped, not dry-run member by member) except those a
    DeviceClass backs (DRA allocates them; nodes do not publish them).

    A necessary condition only, as NodeResourcesFit judges with its defaults: a resource its
    ``ignoredResources`` lists is still counted here (rare: such resources are usually not on the
    nodes at all, and then no domain is skipped for them the first time, see the group cycle)."""
    keys = {CPU, MEMORY, EPHEMERAL_STORAGE}
    for r in requests:
        keys.update(k for k, v in r.scalar.items() if v and not dra_backed(k))
    return tuple(sorted(keys))


def quorum_needs(requests: Sequence[Resources], quorum: int, keys: Sequence[str]) -> dict[str, int]:
    """Per resource, what the ``quorum`` smallest requests of it add up to: a domain with less free
    cannot hold enough members, whatever the plugins say."""
    return {k: sum(sorted(r.get(k) for r in requests)[:quorum]) for k in keys}


def domain_free(infos: Iterable[tuple[Resources, Resources]], keys: Sequence[str]) -> dict[str, int]:
    """Per resource, what is left unrequested on the nodes given as (allocatable, requested)."""
    free = dict.fromkeys(keys, 0)
    for alloc, req in infos:
        for k in keys:
            free[k] += max(0, alloc.get(k) - req.get(k))
    return free


def packing_resource(keys: Sequence[str]) -> str:
    """The resource domains are packed by (tried from the least free up, ranked by what is left):
    the first extended resource the gang requests (its accelerators, the scarce part), else CPU."""
    return next((k for k in keys if k not in (CPU, MEMORY, EPHEMERAL_STORAGE)), CPU)


def too_small(free: Mapping[str, int], need: Mapping[str, int]) -> bool:
    return any(free.get(k, 0) < v for k, v in need.items())
