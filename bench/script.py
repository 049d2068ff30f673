"""Scripts: upstream scheduler_perf's op lists (createNodes, createPods, barrier, updateAny,
deletePods, startCollectingMetrics) as data, for the workloads that are sequences rather than bursts.

Why: the first nine upstream shapes (bench/workloads.py) are one burst of measured pods after the
init pods, with at most one background activity beside it. Upstream's event_handling workloads, and
a few others, are sequences: pods made unschedulable, a barrier until the scheduler has tried each,
then the events that may or may not help them (nodes added or updated, pods deleted or updated),
then a barrier until all are bound. They measure requeue precision: how many attempts a scheduler
spends on pods that an event could not help. A :class:`~bench.workloads.Workload` with ``steps``
runs them instead of the burst; :mod:`bench.script_run` executes them, the same for both schedulers.

The steps before :class:`Measure` run before the measured window (as upstream's ops before
``startCollectingMetrics``), the rest inside it; the measured pods (``Workload.pods``) are created by
the steps, never in a burst. Pure data: every object is built once per (nodes, pods, seed) and only
the namespace and ``schedulerName`` are filled in by the runner.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

JSON = dict[str, Any]


@dataclass(frozen=True)
class CreateNodes:
    """upstream's createNodes: Ready nodes, created concurrently, waited on."""

    nodes: tuple[JSON, ...]


@dataclass(frozen=True)
class CreatePods:
    """createPods: ``wait`` is upstream's default (block until all are bound); without it,
    ``skipWaitToCompletion``."""

    pods: tuple[JSON, ...]
    wait: bool = False


@dataclass(frozen=True)
class CreateVolumes:
    """createPods' ``persistentVolumeTemplatePath`` + ``persistentVolumeClaimTemplatePath``: one
    PersistentVolume and one claim per pair, bound to each other before any pod uses them (upstream
    writes both statuses Bound; here the PV's ``claimRef`` also carries the claim's UID, so the PV
    controller the bench's control plane runs keeps the pair as it is)."""

    pairs: tuple[tuple[JSON, JSON], ...]


@dataclass(frozen=True)
class CreateObjects:
    """createAny: objects POSTed to ``path`` (``{namespace}`` replaced by the round's)."""

    path: str
    objects: tuple[JSON, ...]


@dataclass(frozen=True)
class Barrier:
    """barrier: wait until every pod of ``names`` is bound or, with ``attempted`` (upstream's
    ``stageRequirement: Attempted``), has been tried at least once (a PodScheduled condition)."""

    names: frozenset[str]
    attempted: bool = False


@dataclass(frozen=True)
class Release:
    """The event that may unblock ``names`` starts now: until here, no more than ``early`` of them
    may have been bound, since what keeps them unschedulable is still in place (the
    ``held_bound`` check). Not an upstream op: upstream trusts its barriers; a bind seen before the
    event is a scheduler that placed a pod where it does not fit."""

    names: frozenset[str]
    early: int = 0


@dataclass(frozen=True)
class Update:
    """updateAny: one patch per object, ``per_second`` of them (0: as fast as they go).

    ``target`` is ``node`` or ``pod``. A node patch's ``status`` goes to the status subresource
    (upstream calls Update, then UpdateStatus). ``patch_type``: ``merge``, ``strategic`` (a pod's
    ``resize`` subresource: containers merge by name) or ``tolerations`` (append the patch's
    ``tolerations`` to the pod's: tolerations may only be added, and have no merge key)."""

    target: str
    patches: tuple[tuple[str, JSON], ...]
    per_second: float = 100.0
    subresource: str = ""
    patch_type: str = "merge"


@dataclass(frozen=True)
class DeletePods:
    """deletePods at ``per_second``; ``background`` is ``skipWaitToCompletion``: the deletions go
    on while the next steps run (and stop when the round ends)."""

    names: tuple[str, ...]
    per_second: float = 100.0
    background: bool = False


@dataclass(frozen=True)
class Measure:
    """startCollectingMetrics: the steps after this one are the measured window."""


Step = CreateNodes | CreatePods | CreateVolumes | CreateObjects | Barrier | Release | Update | DeletePods | Measure


def setup(steps: Sequence[Step]) -> list[Step]:
    """The steps before :class:`Measure` (none if there is no Measure: all of them are measured)."""
    idx = _measure_index(steps)
    return list(steps[:idx]) if idx is not None else []


def measured(steps: Sequence[Step]) -> list[Step]:
    idx = _measure_index(steps)
    return list(steps[idx + 1 :]) if idx is not None else list(steps)


def _measure_index(steps: Sequence[Step]) -> int | None:
    return next((i for i, s in enumerate(steps) if isinstance(s, Measure)), None)


def created_pods(steps: Iterable[Step]) -> list[JSON]:
    """Every pod the steps create, in order."""
    return [p for s in steps if isinstance(s, CreatePods) for p in s.pods]


def created_nodes(steps: Iterable[Step]) -> list[JSON]:
    return [n for s in steps if isinstance(s, CreateNodes) for n in s.nodes]


def paced_seconds(steps: Iterable[Step]) -> float:
    """How long the paced steps take at least (updates and deletions at their rates, background
    deletions too: pods they unblock wait for them)."""
    total = 0.0
    for s in steps:
        if isinstance(s, Update) and s.per_second > 0:
            total += len(s.patches) / s.per_second
        elif isinstance(s, DeletePods) and s.per_second > 0:
            total += len(s.names) / s.per_second
    return total


def names(pods: Iterable[JSON]) -> frozenset[str]:
    return frozenset(p["metadata"]["name"] for p in pods)


def held_bound(releases: Iterable[tuple[Release, float]], bound: Mapping[str, float]) -> int:
    """Pods seen bound before the :class:`Release` of the event that could unblock them, beyond its
    ``early`` (``releases``: each with the time it happened; ``bound``: pod -> when its bind was
    seen, on the same clock). A bind seen before the event cannot have been caused by it."""
    return sum(max(0, sum(1 for n in r.names if n in bound and bound[n] < t) - r.early) for r, t in releases)


@dataclass
class Builder:
    """Collects steps in order; pods created after :meth:`measure` with ``measured=True`` are the
    workload's measured pods (upstream's metrics collection, by namespace or ``type: unsched``)."""

    steps: list[Step] = field(default_factory=list)
    measured_pods: list[JSON] = field(default_factory=list)
    created: list[JSON] = field(default_factory=list)

    def measure(self) -> Builder:
        self.steps.append(Measure())
        return self

    def nodes(self, nodes: Sequence[JSON]) -> Builder:
        self.steps.append(CreateNodes(tuple(nodes)))
        return self

    def pods(self, pods: Sequence[JSON], *, wait: bool = False, measured: bool = True) -> frozenset[str]:
        """Create ``pods``; returns their names (for barriers and releases)."""
        self.steps.append(CreatePods(tuple(pods), wait))
        self.created += pods
        if measured:
            self.measured_pods += pods
        return names(pods)

    def volumes(self, pairs: Sequence[tuple[JSON, JSON]]) -> Builder:
        self.steps.append(CreateVolumes(tuple(pairs)))
        return self

    def objects(self, path: str, objs: Sequence[JSON]) -> Builder:
        self.steps.append(CreateObjects(path, tuple(objs)))
        return self

    def barrier(self, names_: Iterable[str] | None = None, *, attempted: bool = False) -> Builder:
        """Wait for ``names_`` (default: every pod created so far)."""
        which = frozenset(names_) if names_ is not None else names(self.created)
        self.steps.append(Barrier(which, attempted))
        return self

    def release(self, names_: Iterable[str], early: int = 0) -> Builder:
        self.steps.append(Release(frozenset(names_), early))
        return self

    def update(self, step: Update) -> Builder:
        self.steps.append(step)
        return self

    def delete(self, names_: Sequence[str], per_second: float = 100.0, *, background: bool = False) -> Builder:
        self.steps.append(DeletePods(tuple(names_), per_second, background))
        return self
