"""NodeLoad: place pods by real node usage (metrics.k8s.io), not only by requests.

Requests say what pods reserved; a node can be far busier (pods above their requests, no requests
at all) or far idler than its requests suggest. This plugin reads measured cpu and memory usage from
a :class:`~custom_scheduler.framework.loadmetrics.MetricsSource` (metrics-server's NodeMetrics by default,
refreshed in the background; see :mod:`custom_scheduler.framework.loadmetrics`) and prefers the least loaded
nodes.

**Load of a node** = measured usage + an *estimate* for pods that the sample cannot show yet: the
non-zero requests (100m / 200Mi for containers without requests, as scoring uses everywhere) of

- pods on the node that were not there when the plugin first saw the node's current sample (the
  plugin keeps, per node, the set of pod UIDs at sample time, and renews it when a newer sample
  arrives), and
- pods this scheduler placed (Reserve) after the start of the sample's window, even if they were
  already on the node when the sample was first seen.

The estimate is what keeps a burst from piling onto the node that looked idle: the samples are tens
of seconds old, but each pod placed in the burst raises its node's estimated load for the next.

**Score** = ``100 − Σ wᵢ·utilᵢ / Σ wᵢ`` over the configured ``resources`` (cpu and memory, weights
1–100, default 1 each), where ``utilᵢ`` is the node's load *with the incoming pod* as a percentage
of allocatable, capped at 100. No normalisation: an idle node scores near 100, a saturated one 0.

**Filter** (only when ``thresholds`` are configured, e.g. ``{cpu: 80, memory: 90}``): a node whose
load (without the incoming pod) is above a threshold percentage is rejected with
``node(s) are overloaded: cpu usage above 80%``. UnschedulableAndUnresolvable: preemption cannot lower
measured usage. Such pods wait for a cluster event or the queue's periodic flush; the daemon can also
requeue them after each metrics refresh (``MetricsServerSource.add_listener``).

**No data.** With no source installed, no sample for the node, a sample older than ``staleAfter``,
or a node without allocatable cpu/memory, the node scores ``neutralScore`` (default 50) and passes
the filter; one log line is written when a node enters that state (and one when it leaves it).
Never an exception.

Args: ``resources``, ``thresholds``, ``staleAfter`` (Go duration, default ``3m``),
``refreshInterval`` (default ``30s``: how often the daemon's metrics-server source LISTs),
``neutralScore``, ``estimatePods`` (default true; false scores by samples alone) and
``metricsSource`` (the name of the source to read, default ``default``).

The source is found through the Handle (``handle.metrics_source(name)``), in the
:class:`~custom_scheduler.framework.loadmetrics.Sources` its composition root owns; the daemon builds one from
the config with :func:`metrics_source_for` and rebuilds it when a reload changes
:func:`source_params`.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

import structlog

from custom_scheduler.api.model import Pod
from custom_scheduler.api.resources import CPU, MEMORY
from custom_scheduler.config import durations
from custom_scheduler.framework import cluster_events as ce
from custom_scheduler.framework import loadmetrics, registry
from custom_scheduler.framework.interface import Handle
from custom_scheduler.framework.loadmetrics import NodeUsage
from custom_scheduler.framework.types import (
    MAX_NODE_SCORE,
    MIN_NODE_SCORE,
    SKIP,
    SUCCESS,
    CycleState,
    NodeInfo,
    StateKey,
    Status,
)
from custom_scheduler.plugins import args_reader, resource_allocation
from custom_scheduler.plugins.resource_allocation import ResourceSpec

log = structlog.get_logger("custom_scheduler.plugins.load_aware")

NAME = "NodeLoad"

SUPPORTED_RESOURCES = (CPU, MEMORY)
DEFAULT_RESOURCES: tuple[ResourceSpec, ...] = (ResourceSpec(CPU, 1), ResourceSpec(MEMORY, 1))
DEFAULT_STALE_AFTER = 180.0
DEFAULT_NEUTRAL_SCORE = 50
MAX_WEIGHT = 100

ERR_REASON_OVERLOADED_FORMAT = "node(s) are overloaded: {resource} usage above {threshold}%"

NO_SOURCE = "no metrics source installed"
MISSING = "no metrics for the node"
STALE = "metrics older than staleAfter"
NO_CAPACITY = "node has no allocatable cpu/memory"


#: The event the daemon sends when NodeLoad's metrics source refreshed (nodes' load changed).
METRICS_REFRESHED = ce.ClusterEvent(ce.Resource.NODE_METRICS, ce.Action.UPDATE)


def overloaded_reason(resource: str, threshold: int) -> str:
    return ERR_REASON_OVERLOADED_FORMAT.format(resource=resource, threshold=threshold)


# --- args ----------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class NodeLoadArgs:
    resources: tuple[ResourceSpec, ...] = DEFAULT_RESOURCES
    """Resources the score averages (cpu, memory) with weights 1-100."""
    thresholds: tuple[tuple[str, int], ...] = ()
    """(resource, percent 1-100): the filter rejects nodes loaded above it; empty = no filter."""
    stale_after: float = DEFAULT_STALE_AFTER
    """Seconds after which a sample is ignored (``staleAfter``)."""
    refresh_interval: float = loadmetrics.DEFAULT_REFRESH_INTERVAL
    """Seconds between the daemon's metrics LISTs (``refreshInterval``)."""
    neutral_score: int = DEFAULT_NEUTRAL_SCORE
    """Score of nodes without usable metrics (``neutralScore``, 0-100)."""
    estimate_pods: bool = True
    """Add the requests of pods placed since the sample (``estimatePods``)."""
    metrics_source: str = loadmetrics.DEFAULT_SOURCE
    """Name of the installed :class:`~custom_scheduler.framework.loadmetrics.MetricsSource` (``metricsSource``)."""
    metrics_url: str = ""
    """``metricsURL``: read NodeMetricsList JSON from this base URL (``<url>/apis/metrics.k8s.io/
    v1beta1/nodes``) instead of through the API server, e.g. a metrics-server or exporter Service
    reached directly. Empty (the default): the API server's aggregated ``metrics.k8s.io``."""

    def to_config(self) -> dict[str, Any]:
        extra = {"metricsURL": self.metrics_url} if self.metrics_url else {}
        return {
            **extra,
            "resources": [{"name": r.name, "weight": r.weight} for r in self.resources],
            "thresholds": dict(self.thresholds),
            "staleAfter": durations.format_duration(self.stale_after),
            "refreshInterval": durations.format_duration(self.refresh_interval),
            "neutralScore": self.neutral_score,
            "estimatePods": self.estimate_pods,
            "metricsSource": self.metrics_source,
        }


_FIELDS = (
    "resources",
    "thresholds",
    "staleAfter",
    "refreshInterval",
    "neutralScore",
    "estimatePods",
    "metricsSource",
    "metricsURL",
)


def _duration(r: args_reader.ArgsReader, doc: Mapping[str, Any], key: str, path: str, default: float) -> float:
    raw = doc.get(key)
    if raw is None:
        return default
    if not isinstance(raw, str):
        r.error(f"{path}.{key}", 'must be a duration string such as "30s"')
        return default
    try:
        value = durations.parse_duration(raw)
    except ValueError as e:
        r.error(f"{path}.{key}", str(e))
        return default
    if value <= 0:
        r.error(f"{path}.{key}", "must be greater than 0")
        return default
    return value


def parse_args(raw: Mapping[str, Any] | None, path: str) -> NodeLoadArgs:
    """Parse, default and validate ``NodeLoadArgs``.

    Raises:
        ConfigError: listing every invalid field, with paths below ``path``.
    """
    r = args_reader.ArgsReader(path)
    doc = r.mapping(raw, path, fields=_FIELDS, kind="NodeLoadArgs")
    resources = resource_allocation.read_resource_specs(r, doc, "resources", path) or DEFAULT_RESOURCES
    seen: set[str] = set()
    for i, res in enumerate(resources):
        if res.name not in SUPPORTED_RESOURCES:
            r.error(
                f"{path}.resources[{i}].name", f'Unsupported value: "{res.name}": supported values: "cpu", "memory"'
            )
        if res.name in seen:
            r.error(f"{path}.resources[{i}].name", f'Duplicate value: "{res.name}"')
        seen.add(res.name)
        if not 0 < res.weight <= MAX_WEIGHT:
            r.error(f"{path}.resources[{i}].weight", f"must be in the range 1-{MAX_WEIGHT}")
    thresholds: list[tuple[str, int]] = []
    for name, value, tp in r.entries(doc, "thresholds", path, "resource name to percent, e.g. {cpu: 80}"):
        if name not in SUPPORTED_RESOURCES:
            r.error(tp, 'Unsupported resource: supported values: "cpu", "memory"')
        elif isinstance(value, bool) or not isinstance(value, int) or not 0 < value <= 100:
            r.error(tp, "must be an integer percentage in the range 1-100")
        else:
            thresholds.append((name, value))
    stale_after = _duration(r, doc, "staleAfter", path, DEFAULT_STALE_AFTER)
    refresh = _duration(r, doc, "refreshInterval", path, loadmetrics.DEFAULT_REFRESH_INTERVAL)
    neutral = r.integer(doc, "neutralScore", path, DEFAULT_NEUTRAL_SCORE)
    if not MIN_NODE_SCORE <= neutral <= MAX_NODE_SCORE:
        r.error(f"{path}.neutralScore", f"must be in the range {MIN_NODE_SCORE}-{MAX_NODE_SCORE}")
    estimate = doc.get("estimatePods", True)
    if not isinstance(estimate, bool):
        r.error(f"{path}.estimatePods", "must be a boolean")
        estimate = True
    source = r.string(doc, "metricsSource", path, loadmetrics.DEFAULT_SOURCE)
    if not source:
        r.error(f"{path}.metricsSource", "must not be empty")
    url = r.string(doc, "metricsURL", path, "")
    if url and not url.startswith(("http://", "https://")):
        r.error(f"{path}.metricsURL", "must be an http:// or https:// URL")
    r.raise_errors()
    return NodeLoadArgs(
        tuple(resources), tuple(thresholds), stale_after, refresh, neutral, estimate, source or "default", url
    )


# --- pure helpers --------------------------------------------------------------------------------


def utilisation_percent(used: int, allocatable: int) -> int:
    """``used`` as a percentage of ``allocatable``, capped at 100 (0 when nothing is allocatable)."""
    if allocatable <= 0:
        return 0
    return min(MAX_NODE_SCORE, used * 100 // allocatable)


def load_score(
    load: Mapping[str, int], allocatable: Mapping[str, int], resources: Sequence[ResourceSpec]
) -> int | None:
    """``100 − weighted mean utilisation``; None when no configured resource is allocatable."""
    total = weights = 0
    for r in resources:
        alloc = allocatable.get(r.name, 0)
        if alloc <= 0:
            continue
        total += r.weight * utilisation_percent(load.get(r.name, 0), alloc)
        weights += r.weight
    if not weights:
        return None
    return MAX_NODE_SCORE - total // weights


def _allocatable(node_info: NodeInfo) -> dict[str, int]:
    a = node_info.allocatable
    return {CPU: a.milli_cpu, MEMORY: a.memory}


@dataclass(frozen=True, slots=True)
class _CycleData:
    now: float
    pod_cpu: int
    pod_memory: int


# --- plugin --------------------------------------------------------------------------------------

PRE_FILTER_KEY: StateKey[_CycleData] = StateKey(f"PreFilter{NAME}")
PRE_SCORE_KEY: StateKey[_CycleData] = StateKey(f"PreScore{NAME}")

#: How often (seconds) Reserve prunes the placements it remembers.
_PRUNE_EVERY = 60.0


class NodeLoad:
    """PreFilter/Filter on load thresholds; PreScore/Score by load; Reserve remembers placements."""

    name: ClassVar[str] = NAME

    def __init__(self, args: NodeLoadArgs | None, handle: Handle, *, clock: Callable[[], float] = time.time) -> None:
        self.handle = handle
        self.args = args or NodeLoadArgs()
        self._clock = clock
        self._lock = threading.Lock()
        self._baselines: dict[str, tuple[float, frozenset[str]]] = {}
        self._placed: dict[str, float] = {}
        self._degraded: dict[str, str] = {}
        self._last_prune = clock()

    def events_to_register(self) -> list[ce.ClusterEventWithHint]:
        """Fresh node metrics (the source's refresh, :data:`METRICS_REFRESHED`) and new nodes."""
        return [ce.ClusterEventWithHint(METRICS_REFRESHED), ce.ClusterEventWithHint(ce.NODE_ADD)]

    # -- load -------------------------------------------------------------------------------------
    def _note(self, node: str, problem: str | None) -> None:
        """Log a node entering (or leaving) the no-usable-metrics state, once per transition."""
        with self._lock:
            prev = self._degraded.get(node)
            if prev == problem:
                return
            if problem is None:
                self._degraded.pop(node, None)
            else:
                self._degraded[node] = problem
        if problem is None:
            log.info("node_load_metrics_available", node=node)
        else:
            log.warning("node_load_metrics_unusable", node=node, reason=problem, score=self.args.neutral_score)

    def sample(self, node_name: str, now: float) -> NodeUsage | None:
        """The node's usable sample, or None (logged) when missing or stale."""
        source = self.handle.metrics_source(self.args.metrics_source)
        if source is None:
            self._note("*", NO_SOURCE)
            return None
        if "*" in self._degraded:
            self._note("*", None)
        usage = source.get(node_name)
        if usage is None:
            self._note(node_name, MISSING)
            return None
        if now - usage.timestamp > self.args.stale_after:
            self._note(node_name, STALE)
            return None
        if node_name in self._degraded:
            self._note(node_name, None)
        return usage

    def estimate(self, node_info: NodeInfo, usage: NodeUsage) -> tuple[int, int]:
        """(milli-CPU, bytes) of the pods on the node that ``usage`` does not reflect yet."""
        if not self.args.estimate_pods:
            return 0, 0
        name = node_info.name
        with self._lock:
            base = self._baselines.get(name)
            if base is None or base[0] != usage.timestamp:
                base = (usage.timestamp, frozenset(node_info.pods))
                self._baselines[name] = base
            placed = self._placed
            cutoff = usage.timestamp - usage.window
            cpu = mem = 0
            uids = base[1]
            for uid, p in node_info.pods.items():
                at = placed.get(uid)
                if uid not in uids or (at is not None and at > cutoff):
                    cpu += p.non_zero_milli_cpu
                    mem += p.non_zero_memory
        return cpu, mem

    def node_load(self, node_info: NodeInfo, now: float) -> dict[str, int] | None:
        """Measured usage + estimate, per resource; None without a usable sample."""
        usage = self.sample(node_info.name, now)
        if usage is None:
            return None
        cpu, mem = self.estimate(node_info, usage)
        return {CPU: usage.milli_cpu + cpu, MEMORY: usage.memory + mem}

    def _cycle(self, pod: Pod) -> _CycleData:
        return _CycleData(self._clock(), pod.non_zero_milli_cpu, pod.non_zero_memory)

    # -- filter -----------------------------------------------------------------------------------
    def pre_filter(self, state: CycleState, pod: Pod, nodes: Sequence[NodeInfo]) -> Status:
        if not self.args.thresholds:
            return SKIP
        state.write(PRE_FILTER_KEY, self._cycle(pod))
        return SUCCESS

    def filter(self, state: CycleState, pod: Pod, node_info: NodeInfo) -> Status:
        if not self.args.thresholds:
            return SUCCESS
        data = state.get(PRE_FILTER_KEY) or self._cycle(pod)
        load = self.node_load(node_info, data.now)
        if load is None:
            return SUCCESS
        alloc = _allocatable(node_info)
        reasons = [
            overloaded_reason(name, threshold)
            for name, threshold in self.args.thresholds
            if alloc.get(name, 0) > 0 and load[name] * 100 > threshold * alloc[name]
        ]
        if reasons:
            return Status.unresolvable(*reasons)
        return SUCCESS

    # -- score ------------------------------------------------------------------------------------
    def pre_score(self, state: CycleState, pod: Pod, nodes: Sequence[NodeInfo]) -> Status:
        state.write(PRE_SCORE_KEY, self._cycle(pod))
        return SUCCESS

    def score(self, state: CycleState, pod: Pod, node_info: NodeInfo) -> int:
        data = state.get(PRE_SCORE_KEY) or self._cycle(pod)
        alloc = _allocatable(node_info)
        if not any(alloc.get(r.name, 0) > 0 for r in self.args.resources):
            self._note(node_info.name, NO_CAPACITY)
            return self.args.neutral_score
        load = self.node_load(node_info, data.now)
        if load is None:
            return self.args.neutral_score
        load[CPU] += data.pod_cpu
        load[MEMORY] += data.pod_memory
        score = load_score(load, alloc, self.args.resources)
        return self.args.neutral_score if score is None else score

    # -- reserve ----------------------------------------------------------------------------------
    def reserve(self, state: CycleState, pod: Pod, node_name: str) -> Status:
        now = self._clock()
        with self._lock:
            self._placed[pod.uid] = now
            if now - self._last_prune >= _PRUNE_EVERY:
                self._prune(now)
        return SUCCESS

    def unreserve(self, state: CycleState, pod: Pod, node_name: str) -> None:
        with self._lock:
            self._placed.pop(pod.uid, None)

    def _prune(self, now: float) -> None:
        """Forget placements and baselines too old to matter (their samples would be stale)."""
        horizon = now - self.args.stale_after - 600.0
        self._placed = {uid: t for uid, t in self._placed.items() if t >= horizon}
        self._baselines = {n: b for n, b in self._baselines.items() if b[0] >= horizon}
        self._last_prune = now


SPEC = registry.PluginSpec(NAME, factory=NodeLoad, parse_args=parse_args)


# --- the daemon's source -------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class SourceParams:
    """What the daemon's metrics-server source for a config is built from."""

    name: str
    interval: float
    url: str


def source_params(config: Any) -> SourceParams | None:
    """The source ``config``'s NodeLoad profiles ask for, or None when no profile enables NodeLoad.

    The refresh interval is the smallest ``refreshInterval`` among the profiles' NodeLoad args; the
    name and URL are the last and first given (one source serves every profile). A reload whose
    params differ needs a new source.
    """
    interval: float | None = None
    source_name = loadmetrics.DEFAULT_SOURCE
    url = ""
    for prof in getattr(config, "profiles", ()):
        if NAME not in prof.plugin_names():
            continue
        args = prof.plugin_args.get(NAME) or NodeLoadArgs()
        interval = args.refresh_interval if interval is None else min(interval, args.refresh_interval)
        source_name = args.metrics_source
        url = url or args.metrics_url
    return None if interval is None else SourceParams(source_name, interval, url)


def metrics_source_for(
    config: Any, client: loadmetrics.Getter, sources: loadmetrics.Sources
) -> loadmetrics.MetricsServerSource | None:
    """The :class:`~custom_scheduler.framework.loadmetrics.MetricsServerSource` the daemon should run for
    ``config``, installed in ``sources``; or None.

    None when no profile enables NodeLoad, or a source is already installed under the name NodeLoad
    uses (a test or an embedding program installed its own). The caller owns ``start()``/``stop()``.
    """
    params = source_params(config)
    if params is None:
        return None
    if sources.get(params.name) is not None:
        log.info("node_metrics_source_preinstalled", name=params.name)
        return None
    getter: loadmetrics.Getter = loadmetrics.URLGetter(params.url) if params.url else client
    src = loadmetrics.MetricsServerSource(getter, interval=params.interval, name=params.name)
    sources.install(src, params.name)
    return src
