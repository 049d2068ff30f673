"""Frameworks from profiles: one :class:`Framework` per profile, each with a complete Handle.

The one place frameworks are composed (upstream's ``profile.NewMap``): the daemon, ``explain``,
``simulate`` and the benchmarks all call :func:`build_frameworks`, handing it the registry and every
collaborator the Handle lends, so no tool needs the daemon's composition root to build a framework
and no Handle is patched after construction.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

from custom_scheduler.api.labels import Selector
from custom_scheduler.api.model import Pod, PodDisruptionBudget
from custom_scheduler.config.schema import Profile
from custom_scheduler.framework import loadmetrics
from custom_scheduler.framework.clusterapi import ClusterClient
from custom_scheduler.framework.dra_store import DRAStore
from custom_scheduler.framework.extender import Extenders
from custom_scheduler.framework.fence import Fence
from custom_scheduler.framework.gang_store import GangStore
from custom_scheduler.framework.handle import SnapshotHandle
from custom_scheduler.framework.instrument import NO_RECORDER, Recorder
from custom_scheduler.framework.registry import Registry
from custom_scheduler.framework.runtime import Framework
from custom_scheduler.framework.types import Snapshot
from custom_scheduler.framework.volumes import VolumeStore
from custom_scheduler.framework.waiting import WaitingPodMap


def build_frameworks(
    profiles: tuple[Profile, ...],
    registry: Registry,
    snapshot: Snapshot,
    *,
    client: ClusterClient | None,
    namespace_labels: Callable[[str], Mapping[str, str] | None] | None = None,
    namespace_version: Callable[[], int] | None = None,
    default_spread_selector: Callable[[Pod], Selector | None] | None = None,
    volumes: VolumeStore | None = None,
    dra: DRAStore | None = None,
    metrics_sources: loadmetrics.Sources | None = None,
    gangs: GangStore | None = None,
    pdb_lister: Callable[[], Sequence[PodDisruptionBudget]] | None = None,
    nominated_lister: Callable[[str], Sequence[Pod]] | None = None,
    event_sink: Callable[..., None] | None = None,
    activator: Callable[[Sequence[Pod]], object] | None = None,
    preempting: Callable[[str], bool] | None = None,
    fence: Fence | None = None,
    permit_clock: Callable[[], float] | None = None,
    extenders: Extenders | None = None,
    recorder: Recorder = NO_RECORDER,
) -> dict[str, Framework]:
    """One Framework per profile, each with a complete Handle over ``snapshot`` and the shared
    stores (the only place frameworks are composed: the daemon, explain and simulate call it)."""
    out = {}
    gangs = gangs if gangs is not None else GangStore()
    volumes = volumes if volumes is not None else VolumeStore()  # shared by every profile
    dra = dra if dra is not None else DRAStore()
    for prof in profiles:
        handle = SnapshotHandle(
            snapshot,
            profile_name=prof.scheduler_name,
            client=client,
            namespace_labels=namespace_labels,
            namespace_version=namespace_version,
            default_spread_selector=default_spread_selector,
            volumes=volumes,
            dra=dra,
            metrics_sources=metrics_sources,
            gangs=gangs,
            pdb_lister=pdb_lister,
            nominated_lister=nominated_lister,
            event_sink=event_sink,
            activator=activator,
            preempting=preempting,
            fence=fence,
            extenders=extenders,
        )
        fwk = Framework(
            prof.scheduler_name,
            prof.plugins,
            prof.plugin_args,
            registry,
            handle,
            percentage_of_nodes_to_score=prof.percentage_of_nodes_to_score,
            # Offline (simulate): Permit waits expire on the driver's virtual clock, no timer thread.
            waiting=None if permit_clock is None else WaitingPodMap(permit_clock, timer_thread=False),
            # The daemon's metrics (extension points, sampled plugin timings, evaluations).
            recorder=recorder,
        )
        handle.framework = fwk
        out[prof.scheduler_name] = fwk
    return out
