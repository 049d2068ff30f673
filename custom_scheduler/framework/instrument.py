"""What the framework reports for metrics, and the timing it does for that.

kube-scheduler's framework records three things (pkg/scheduler/framework/runtime/framework.go):
the duration of every extension point in every cycle (``scheduler_framework_extension_point_duration_seconds``),
the duration of each plugin in a sampled share of cycles (``scheduler_plugin_execution_duration_seconds``:
``pluginMetricsSamplePercent = 10``, drawn per cycle in schedule_one.go and carried by the CycleState),
and how often each PreFilter, Filter, PreScore and Score plugin was asked (``scheduler_plugin_evaluation_total``).
The framework must not know the metrics library (it is a layer below ``server/``), so it talks to a
:class:`Recorder`; the daemon passes one that writes into its registry, everything else (explain,
simulate, the in-memory benchmarks) gets :data:`NO_RECORDER`, which does nothing.

Cost is the point of this module's shape: the daemon is benchmarked against kube-scheduler, so a
cycle that is not sampled pays one clock read pair per extension point and a few integer additions
per plugin, never anything per node. A sampled cycle times each plugin's call; batch calls (a
filter mask, a batch scorer) once per plugin, and per-node Filter calls through
:class:`FilterTimer`, which adds up each plugin's time over the cycle's nodes and reports one
sample per plugin and status (upstream reports one per node; a per-node sample would cost a
histogram update per node and plugin).
"""

from __future__ import annotations

import operator
import time
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, cast

from custom_scheduler.api.model import Pod
from custom_scheduler.framework import interface as fi
from custom_scheduler.framework.types import Code, CycleState, NodeInfo, Snapshot, Status

#: Percentage of scheduling cycles whose plugins are timed (upstream's pluginMetricsSamplePercent).
PLUGIN_METRICS_SAMPLE_PERCENT = 10

#: The ``status`` label of a Code, as upstream's ``Code.String()`` spells it.
CODE_LABELS: Mapping[Code, str] = {
    Code.SUCCESS: "Success",
    Code.ERROR: "Error",
    Code.UNSCHEDULABLE: "Unschedulable",
    Code.UNSCHEDULABLE_AND_UNRESOLVABLE: "UnschedulableAndUnresolvable",
    Code.WAIT: "Wait",
    Code.SKIP: "Skip",
}

# Extension point labels (upstream's metrics.PreFilter, ...).
PRE_FILTER = "PreFilter"
FILTER = "Filter"
POST_FILTER = "PostFilter"
PRE_SCORE = "PreScore"
SCORE = "Score"
SCORE_NORMALIZE = "ScoreExtensionNormalize"
RESERVE = "Reserve"
UNRESERVE = "Unreserve"
PERMIT = "Permit"
PRE_BIND = "PreBind"
PRE_BIND_PRE_FLIGHT = "PreBindPreFlight"
BIND = "Bind"
POST_BIND = "PostBind"

now = time.perf_counter


class Recorder:
    """The framework's metrics hooks; this base does nothing (explain, simulate, benchmarks).

    Calls come from the scheduling thread (PreFilter to Permit) and from binding threads (PreBind
    to PostBind, the Permit wait), so an implementation must be thread-safe where they overlap.
    """

    def extension_point(self, point: str, code: Code, profile: str, seconds: float) -> None:
        """All plugins of ``point`` ran for one pod (every cycle)."""

    def plugin_duration(self, plugin: str, point: str, code: Code, seconds: float) -> None:
        """One plugin's time at ``point`` (sampled cycles only)."""

    def evaluations(self, point: str, profile: str, counts: Iterable[tuple[str, int]]) -> None:
        """How many times each plugin was asked at ``point`` in one cycle: once per pod at
        PreFilter and PreScore (not when it answered Skip), once per node at Filter and Score."""

    def permit_wait(self, code: Code, seconds: float) -> None:
        """A pod waited at Permit for ``seconds`` and the wait ended with ``code``."""


NO_RECORDER = Recorder()


class FilterTimer:
    """Times the Filter plugins of one sampled cycle: wrap them with :meth:`wrap` (a wrapper
    answers ``filter`` and, when the plugin has them, ``filter_mask`` and ``filter_statuses``),
    run the pass, then :meth:`report` one sample per plugin and status with the time summed over the nodes."""

    __slots__ = ("_acc",)

    def __init__(self) -> None:
        self._acc: dict[tuple[str, Code], float] = {}

    def wrap(self, plugins: Sequence[fi.FilterPlugin]) -> list[fi.FilterPlugin]:
        return [cast(fi.FilterPlugin, _TimedFilter(p, self._acc)) for p in plugins]

    def wrap_masks(self, masks: Mapping[str, fi.FilterMaskPlugin]) -> dict[str, fi.FilterMaskPlugin]:
        return {name: cast(fi.FilterMaskPlugin, _TimedFilter(p, self._acc)) for name, p in masks.items()}

    def wrap_both(
        self, plugins: Sequence[fi.FilterPlugin], masks: Mapping[str, fi.FilterMaskPlugin]
    ) -> tuple[list[fi.FilterPlugin], dict[str, fi.FilterMaskPlugin]]:
        """:meth:`wrap` and :meth:`wrap_masks` at once (a masked pass takes both)."""
        return self.wrap(plugins), self.wrap_masks(masks)

    def report(self, recorder: Recorder) -> None:
        for (plugin, code), seconds in self._acc.items():
            recorder.plugin_duration(plugin, FILTER, code, seconds)


class _TimedFilter:
    """A Filter plugin whose calls add their time to a :class:`FilterTimer`."""

    __slots__ = ("_acc", "_p", "filter_reads_node_only", "name")

    def __init__(self, plugin: Any, acc: dict[tuple[str, Code], float]) -> None:
        self._p = plugin
        self._acc = acc
        self.name: str = plugin.name
        self.filter_reads_node_only: bool = getattr(plugin, "filter_reads_node_only", False)

    def filter(self, state: CycleState, pod: Pod, node_info: NodeInfo) -> Status:
        t = now()
        st: Status = self._p.filter(state, pod, node_info)
        key = (self.name, st.code)
        self._acc[key] = self._acc.get(key, 0.0) + now() - t
        return st

    def filter_mask(self, state: CycleState, pod: Pod, snap: Snapshot) -> Any:
        t = now()
        m = self._p.filter_mask(state, pod, snap)
        key = (self.name, Code.SUCCESS)
        self._acc[key] = self._acc.get(key, 0.0) + now() - t
        return m

    def filter_statuses(self, state: CycleState, pod: Pod, snap: Snapshot, rows: Any) -> Any:
        given = getattr(self._p, "filter_statuses", None)
        if given is None:
            return None  # the plugin has none: its filter is called per row
        t = now()
        got = given(state, pod, snap, rows)
        key = (self.name, Code.UNSCHEDULABLE)
        self._acc[key] = self._acc.get(key, 0.0) + now() - t
        return got


_PLUGIN = operator.attrgetter("plugin")


def filter_evaluations(names: Sequence[str], statuses: Iterable[Status], processed: int) -> list[tuple[str, int]]:
    """Per-node Filter evaluations of each plugin in ``names`` (the active ones, in order) over
    ``processed`` nodes, from the rejections: a node rejected by the k-th plugin was asked by the
    first k+1 only, as upstream's loop stops at the first rejection. Costs one pass over the
    rejections, nothing per feasible node."""
    rejected = Counter(map(_PLUGIN, statuses))  # C loops: PreFilter's exclusions are here too
    out = []
    left = processed
    for name in names:
        out.append((name, left))
        left -= rejected.get(name, 0)
    return out
