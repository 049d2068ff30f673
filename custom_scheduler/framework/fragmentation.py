"""Stranded accelerators: free GPUs that the common request sizes cannot use.

A cluster can have many GPUs free and still not run an 8-GPU job: one free GPU on each of eight
nodes hosts eight 1-GPU pods but no 8-GPU pod, since a pod's GPUs must all be on its node. The
numbers here say how much of the free capacity is usable by which request size, so an operator
sees fragmentation before a job waits on it (and ``custom-scheduler defrag`` can be run).

Definitions, per accelerator resource ``R`` (an extended resource such as ``nvidia.com/gpu``),
over the *schedulable* nodes that offer ``R`` (allocatable > 0; a cordoned node's GPUs host
nothing new, so they are neither free nor stranded here):

- ``free(n) = max(0, allocatable(n, R) - requested(n, R))``, the requests of the node's bound and
  assumed pods, as the Fit filter counts them;
- ``free = Σ free(n)``; ``largest_free_block = max free(n)`` (the largest single request of ``R``
  that fits anywhere, by GPU count alone);
- for each common size ``S`` (default 1, 2, 4, 8): ``stranded(S) = Σ free(n) over nodes with
  0 < free(n) < S``: free GPUs that no pod asking for ``S`` of them can use; and ``hostable(S) =
  Σ ⌊free(n) / S⌋``: how many such pods fit at once (by GPU count; cpu, memory, taints and
  affinity can only lower it). ``free - S × hostable(S)`` is what remains after packing size ``S``,
  a superset of ``stranded(S)``;
- per topology domain (the value of the domain label, default ``topology.kubernetes.io/zone``;
  nodes without the label are in no domain): ``free`` and ``largest_free_block`` of its nodes, for
  gangs that must land in one domain.

Pure functions over :class:`~custom_scheduler.framework.types.NodeInfo`, so the daemon (from its
cache, at scrape time) and the tools (from a snapshot) compute the same numbers.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from custom_scheduler.framework.types import NodeInfo, Snapshot

DEFAULT_RESOURCES: tuple[str, ...] = ("nvidia.com/gpu",)
DEFAULT_SIZES: tuple[int, ...] = (1, 2, 4, 8)
DEFAULT_DOMAIN_LABEL = "topology.kubernetes.io/zone"

#: Environment variables that configure the daemon's fragmentation metrics (see :func:`config_from_env`).
ENV_SIZES = "CUSTOM_SCHEDULER_ACCELERATOR_SIZES"
ENV_DOMAIN_LABEL = "CUSTOM_SCHEDULER_ACCELERATOR_DOMAIN_LABEL"


@dataclass(frozen=True, slots=True)
class FragmentationConfig:
    """What to measure: the accelerator resources, the common request sizes, the domain label."""

    resources: tuple[str, ...] = DEFAULT_RESOURCES
    sizes: tuple[int, ...] = DEFAULT_SIZES
    domain_label: str = DEFAULT_DOMAIN_LABEL


@dataclass(frozen=True, slots=True)
class DomainFree:
    """One topology domain's free accelerators of one resource."""

    free: int
    largest_free_block: int


@dataclass(frozen=True, slots=True)
class ResourceFragmentation:
    """The numbers of the module docstring for one resource."""

    resource: str
    nodes: int
    """Schedulable nodes offering the resource."""
    capacity: int
    free: int
    largest_free_block: int
    stranded: Mapping[int, int]
    hostable: Mapping[int, int]
    domains: Mapping[str, DomainFree] = field(default_factory=dict)


def node_free(ni: NodeInfo, resource: str) -> int | None:
    """Free units of ``resource`` on a node, or None when the node does not count (no node object,
    cordoned, or no allocatable of the resource)."""
    node = ni.node
    if node is None or node.unschedulable:
        return None
    cap = node.allocatable.scalar.get(resource, 0)
    if cap <= 0:
        return None
    return max(0, cap - ni.requested.scalar.get(resource, 0))


def fragmentation(
    nodes: Iterable[NodeInfo], cfg: FragmentationConfig = FragmentationConfig()
) -> list[ResourceFragmentation]:
    """The fragmentation of every configured resource over ``nodes``, in ``cfg.resources`` order."""
    infos = list(nodes)
    return [_one(infos, resource, cfg) for resource in cfg.resources]


def _one(infos: Sequence[NodeInfo], resource: str, cfg: FragmentationConfig) -> ResourceFragmentation:
    frees: list[int] = []
    capacity = 0
    domains: dict[str, list[int]] = {}
    for ni in infos:
        free = node_free(ni, resource)
        if free is None:
            continue
        assert ni.node is not None  # node_free checked it
        frees.append(free)
        capacity += ni.node.allocatable.scalar.get(resource, 0)
        domain = ni.node.labels.get(cfg.domain_label) if cfg.domain_label else None
        if domain:
            domains.setdefault(domain, []).append(free)
    return ResourceFragmentation(
        resource=resource,
        nodes=len(frees),
        capacity=capacity,
        free=sum(frees),
        largest_free_block=max(frees, default=0),
        stranded={s: sum(f for f in frees if 0 < f < s) for s in cfg.sizes},
        hostable={s: sum(f // s for f in frees) for s in cfg.sizes},
        domains={d: DomainFree(sum(fs), max(fs, default=0)) for d, fs in sorted(domains.items())},
    )


# -- configuration --------------------------------------------------------------------------------


def parse_sizes(text: str) -> tuple[int, ...]:
    """``"1,2,4,8"`` as sizes (positive, deduplicated, sorted). Raises ValueError naming the bad entry."""
    sizes: set[int] = set()
    for raw in text.split(","):
        part = raw.strip()
        if not part:
            continue
        try:
            n = int(part)
        except ValueError:
            raise ValueError(f"request size {part!r} is not an integer") from None
        if n <= 0:
            raise ValueError(f"request size {n} must be positive")
        sizes.add(n)
    if not sizes:
        raise ValueError("no request sizes given")
    return tuple(sorted(sizes))


def config_from_env(
    resources: Sequence[str] = DEFAULT_RESOURCES, environ: Mapping[str, str] | None = None
) -> tuple[FragmentationConfig, list[str]]:
    """The daemon's configuration: ``resources`` (the AcceleratorIsolation ``resources`` of its
    profiles), sizes from :data:`ENV_SIZES`, the domain label from :data:`ENV_DOMAIN_LABEL` (empty:
    no domains). A bad value is not fatal (a metric is no reason to stop scheduling): the default
    is kept and the problem returned, for the daemon to log."""
    env = os.environ if environ is None else environ
    problems: list[str] = []
    sizes = DEFAULT_SIZES
    raw = env.get(ENV_SIZES)
    if raw is not None:
        try:
            sizes = parse_sizes(raw)
        except ValueError as e:
            problems.append(f"{ENV_SIZES}={raw!r}: {e}; using {','.join(map(str, DEFAULT_SIZES))}")
    label = env.get(ENV_DOMAIN_LABEL, DEFAULT_DOMAIN_LABEL).strip()
    return FragmentationConfig(tuple(dict.fromkeys(resources)) or DEFAULT_RESOURCES, sizes, label), problems


def profile_resources(plugin_args: Iterable[Mapping[str, object]]) -> tuple[str, ...]:
    """The accelerator resources AcceleratorIsolation is configured with in any profile (each
    profile's ``plugin_args``), in order of appearance; the default when no profile enables it."""
    names: list[str] = []
    for args in plugin_args:
        acc = args.get("AcceleratorIsolation")
        names.extend(str(r) for r in getattr(acc, "resources", ()) or ())
    return tuple(dict.fromkeys(names)) or DEFAULT_RESOURCES


# -- the daemon's view ----------------------------------------------------------------------------


class AcceleratorView:
    """Fragmentation of the daemon's cache, computed when asked (at each scrape).

    It keeps a snapshot of its own, brought up to date through ``update_snapshot`` (the cache's
    :meth:`~custom_scheduler.core.cache.Cache.update_snapshot`, which copies only the nodes changed
    since), so a scrape never reads NodeInfos the informers are changing. The cache's *primary*
    snapshot is the first one it updates: the daemon gives it the scheduling loop's before wiring
    this view, so this one is never mistaken for it."""

    def __init__(self, update_snapshot: Callable[[Snapshot], None], cfg: FragmentationConfig) -> None:
        self._update = update_snapshot
        self.cfg = cfg
        self._snapshot = Snapshot()
        self._lock = threading.Lock()

    def __call__(self) -> list[ResourceFragmentation]:
        with self._lock:
            self._update(self._snapshot)
            return fragmentation(self._snapshot.node_infos.values(), self.cfg)


def daemon_view(
    update_snapshot: Callable[[Snapshot], None], primary: Snapshot, plugin_args: Iterable[Mapping[str, object]]
) -> tuple[AcceleratorView, list[str]]:
    """The daemon's view and the configuration problems to log. ``primary`` (the scheduling loop's
    snapshot) is updated first, so the cache takes it as its primary snapshot before this view's
    own is ever updated (the cache tracks changed nodes for the first snapshot it updates only)."""
    update_snapshot(primary)
    cfg, problems = config_from_env(profile_resources(plugin_args))
    return AcceleratorView(update_snapshot, cfg), problems
