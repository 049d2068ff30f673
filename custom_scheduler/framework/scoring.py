"""The Score extension point of a :class:`~custom_scheduler.framework.runtime.Framework`: raw
scores, normalisation, the [0, 100] check, weights.

Its own module because it is the framework's other hot path beside Filter, with fast paths of its
own (batch scorers over snapshot columns, normalisers on plain ints) and, in a sampled cycle, one
timing per plugin call (the whole batch, never per node: :mod:`~custom_scheduler.framework.instrument`).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from custom_scheduler.api.model import Pod
from custom_scheduler.framework import arrays
from custom_scheduler.framework import instrument as ins
from custom_scheduler.framework import interface as fi
from custom_scheduler.framework.types import MAX_NODE_SCORE, MIN_NODE_SCORE, Code, CycleState, NodeInfo, NodeScore

Scores = list[int] | npt.NDArray[np.int64]
"""One plugin's scores, node-aligned: batch scorers over snapshot columns return int64 arrays."""


class FrameworkError(RuntimeError):
    pass


def ints(scores: Scores) -> list[int]:
    return scores.tolist() if isinstance(scores, np.ndarray) else scores


@dataclass(slots=True)
class ScoredNode:
    """A feasible node's total and the per-plugin detail (raw, normalised, weighted) for explain."""

    name: str
    total: int = 0
    raw: dict[str, int] = field(default_factory=dict)
    normalized: dict[str, int] = field(default_factory=dict)
    weighted: dict[str, int] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Scorer:
    """One score plugin, its weight and the fast paths it declares, resolved when the framework is
    built so the scoring loop makes no capability checks."""

    plugin: fi.ScorePlugin
    weight: int
    batch: fi.BatchScorePlugin | None
    normalize: fi.ScoreExtensions | None
    normalize_batch: fi.BatchNormalizePlugin | None

    @classmethod
    def of(cls, p: fi.ScorePlugin, weight: int) -> Scorer:
        return cls(
            p,
            weight,
            p if isinstance(p, fi.BatchScorePlugin) else None,
            p if isinstance(p, fi.ScoreExtensions) else None,
            p if isinstance(p, fi.BatchNormalizePlugin) else None,
        )


def plugin_scores(
    scorers: Sequence[Scorer],
    handle: fi.Handle,
    recorder: ins.Recorder,
    state: CycleState,
    pod: Pod,
    nodes: Sequence[NodeInfo],
) -> Iterator[tuple[str, int, Scores, Scores]]:
    """Per active score plugin: (name, weight, raw scores, normalised scores), node-aligned.

    A plugin that declares :class:`~custom_scheduler.framework.interface.BatchScorePlugin` is
    called once for all nodes; otherwise ``score`` runs per node. Batch scorers get the nodes
    as :class:`~custom_scheduler.framework.arrays.NodeRows` when they are rows of the current
    snapshot (already so when the vectorised filter found them; else looked up here, once for
    all plugins). Likewise a :class:`~custom_scheduler.framework.interface.BatchNormalizePlugin`
    normalises plain ints; NodeScore objects are built only for plugins that normalise without.
    In a sampled cycle each plugin's scoring and normalising are timed as one call each.
    """
    if any(s.batch is not None for s in scorers) and not isinstance(nodes, arrays.NodeRows):
        with_rows = arrays.rows_for(handle.current_snapshot(), nodes)
        if with_rows is not None:
            nodes = with_rows
    timed = state.record_plugin_metrics
    for sc in scorers:
        p = sc.plugin
        if p.name in state.skip_score:
            continue
        t = ins.now() if timed else 0.0
        raw = _raw_scores(sc, state, pod, nodes)
        if timed:
            t = _timed(recorder, p.name, ins.SCORE, t)
        normalized = _normalized(sc, state, pod, nodes, raw)
        if timed:
            _timed(recorder, p.name, ins.SCORE_NORMALIZE, t)
        _check_range(p.name, normalized)
        yield p.name, sc.weight, raw, normalized


def _timed(recorder: ins.Recorder, plugin: str, point: str, since: float) -> float:
    end = ins.now()
    recorder.plugin_duration(plugin, point, Code.SUCCESS, end - since)
    return end


def _raw_scores(sc: Scorer, state: CycleState, pod: Pod, nodes: Sequence[NodeInfo]) -> Scores:
    p = sc.plugin
    try:
        if sc.batch is not None:
            got = sc.batch.score_batch(state, pod, nodes)
            return got if isinstance(got, np.ndarray | list) else list(got)
        return [p.score(state, pod, ni) for ni in nodes]
    except Exception as e:
        raise FrameworkError(f"running Score plugin {p.name!r}: {type(e).__name__}: {e}") from e


def _normalized(sc: Scorer, state: CycleState, pod: Pod, nodes: Sequence[NodeInfo], raw: Scores) -> Scores:
    p = sc.plugin
    if sc.normalize_batch is not None:
        try:
            return sc.normalize_batch.normalize_batch(state, pod, ints(raw))
        except Exception as e:
            raise FrameworkError(f"running NormalizeScore plugin {p.name!r}: {type(e).__name__}: {e}") from e
    if sc.normalize is not None:
        scores = [NodeScore(ni.name, int(r)) for ni, r in zip(nodes, raw, strict=True)]
        st = sc.normalize.normalize_score(state, pod, scores)
        if not st.is_success:
            raise FrameworkError(f"running NormalizeScore plugin {p.name!r}: {st.message}")
        return [s.score for s in scores]
    return raw


def _check_range(name: str, normalized: Scores) -> None:
    if isinstance(normalized, np.ndarray):
        ok = not len(normalized) or (normalized.min() >= MIN_NODE_SCORE and normalized.max() <= MAX_NODE_SCORE)
    else:
        ok = not normalized or (min(normalized) >= MIN_NODE_SCORE and max(normalized) <= MAX_NODE_SCORE)
    if not ok:
        bad = next(int(x) for x in normalized if not MIN_NODE_SCORE <= x <= MAX_NODE_SCORE)
        raise FrameworkError(
            f'plugin "{name}" returns an invalid score {bad}, '
            f"it should in the range of [{MIN_NODE_SCORE}, {MAX_NODE_SCORE}] after normalizing"
        )


def score_details(
    scorers: Sequence[Scorer],
    handle: fi.Handle,
    recorder: ins.Recorder,
    state: CycleState,
    pod: Pod,
    nodes: Sequence[NodeInfo],
) -> list[ScoredNode]:
    """Score, normalise and weight, keeping every plugin's detail (explain, simulate)."""
    out = [ScoredNode(ni.name) for ni in nodes]
    for name, weight, raw, normalized in plugin_scores(scorers, handle, recorder, state, pod, nodes):
        for sn, r, s in zip(out, ints(raw), ints(normalized), strict=True):
            w = s * weight
            sn.raw[name] = r
            sn.normalized[name] = s
            sn.weighted[name] = w
            sn.total += w
    return out


Totals = npt.NDArray[np.int64]
#: Where :func:`score_totals` puts each plugin's weighted column, when asked (None: nowhere).
Rows = list[tuple[str, Totals]] | None


def score_totals(
    scorers: Sequence[Scorer],
    handle: fi.Handle,
    recorder: ins.Recorder,
    state: CycleState,
    pod: Pod,
    nodes: Sequence[NodeInfo],
    rows: Rows = None,
) -> Totals:
    """The weighted totals only (same arithmetic as :func:`score_details`), summed as int64
    arrays (batch scorers return them; lists are converted once). ``rows``, when given, receives
    each plugin's weighted column (no extra arithmetic: the arrays the sum adds)."""
    totals = np.zeros(len(nodes), dtype=np.int64)
    for name, weight, _, normalized in plugin_scores(scorers, handle, recorder, state, pod, nodes):
        # int64 whatever a batch normaliser returned: an int32 array times a large weight would
        # wrap before the sum (no copy when it already is int64).
        scores = np.asarray(normalized, dtype=np.int64)
        weighted = scores if weight == 1 else scores * weight
        totals += weighted
        if rows is not None:
            rows.append((name, weighted))
    return totals
