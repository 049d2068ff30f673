"""Arithmetic and normalisation shared by the score plugins, in Go's integer semantics.

Why this module exists: kube-scheduler computes scores with Go ``int64`` arithmetic, whose division
truncates toward zero, and ``math.Round``, which rounds halves away from zero. Python's ``//`` floors
and ``round`` rounds halves to even, so a literal transcription of a formula silently drifts by one
point whenever a numerator goes negative (a decreasing RequestedToCapacityRatio shape) or a mean lands
on ``.5``. Every plugin that reproduces an upstream formula goes through these helpers instead.

:func:`default_normalize_score` is kube-scheduler's ``DefaultNormalizeScore``: scale raw scores so the
best node gets ``MAX_NODE_SCORE``, optionally reversed (TaintToleration counts bad taints, so fewer is
better).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from custom_scheduler.framework.types import MAX_NODE_SCORE, NodeScore
from custom_scheduler.plugins import args_reader

#: Shape scores are configured on 0..10 and scaled to 0..MAX_NODE_SCORE.
MAX_CUSTOM_PRIORITY_SCORE = 10
MAX_UTILIZATION = 100


@dataclass(frozen=True, slots=True)
class UtilizationShapePoint:
    """One point of a piecewise-linear scoring shape (NodeResourcesFit's RequestedToCapacityRatio
    and VolumeBinding's storage scoring share upstream's type and validation)."""

    utilization: int
    """Utilisation in percent, 0..100; strictly increasing along the shape."""
    score: int
    """Score at that utilisation, 0..10 (scaled by 10 to the 0..100 node score)."""


def parse_shape(r: args_reader.ArgsReader, doc: Any, path: str) -> tuple[UtilizationShapePoint, ...]:
    """``doc.shape`` as points, with upstream's validation errors recorded on ``r``."""
    points: list[UtilizationShapePoint] = []
    for i, item in enumerate(r.items(doc, "shape", path)):
        p = f"{path}.shape[{i}]"
        d = r.mapping(item, p, fields=("utilization", "score"))
        points.append(UtilizationShapePoint(r.integer(d, "utilization", p, 0), r.integer(d, "score", p, 0)))
    if not points:
        r.error(f"{path}.shape", "at least one point must be specified")
    for i in range(1, len(points)):
        if points[i - 1].utilization >= points[i].utilization:
            r.error(f"{path}.shape[{i}].utilization", "values must be sorted in increasing order")
            break
    for i, point in enumerate(points):
        if not 0 <= point.utilization <= MAX_UTILIZATION:
            r.error(f"{path}.shape[{i}].utilization", f"not in valid range [0, {MAX_UTILIZATION}]")
        if not 0 <= point.score <= MAX_CUSTOM_PRIORITY_SCORE:
            r.error(f"{path}.shape[{i}].score", f"not in valid range [0, {MAX_CUSTOM_PRIORITY_SCORE}]")
    return tuple(points)


def go_div(a: int, b: int) -> int:
    """Integer division truncating toward zero, like Go's ``/`` on integers.

    Raises:
        ZeroDivisionError: when ``b`` is 0, as Go would panic.
    """
    q = abs(a) // abs(b)
    return q if (a >= 0) == (b > 0) else -q


def go_round_ratio(numerator: int, denominator: int) -> int:
    """``math.Round(float64(numerator) / float64(denominator))`` for a positive denominator.

    Computed exactly in integers: halves round away from zero, as Go's ``math.Round`` does.
    """
    if numerator >= 0:
        return (2 * numerator + denominator) // (2 * denominator)
    return -((2 * -numerator + denominator) // (2 * denominator))


def default_normalize_score(scores: list[NodeScore], *, reverse: bool, max_priority: int = MAX_NODE_SCORE) -> None:
    """Scale ``scores`` in place to ``[0, max_priority]`` relative to the highest raw score.

    With ``reverse`` the scale is flipped (``max_priority - scaled``). When every raw score is 0 the
    scores stay 0, or all become ``max_priority`` when reversed (no node is worse than another).
    """
    max_count = 0
    for s in scores:
        max_count = max(max_count, s.score)
    if max_count == 0:
        if reverse:
            for s in scores:
                s.score = max_priority
        return
    for s in scores:
        scaled = go_div(max_priority * s.score, max_count)
        s.score = max_priority - scaled if reverse else scaled


def default_normalize_list(raw: Sequence[int], *, reverse: bool, max_priority: int = MAX_NODE_SCORE) -> list[int]:
    """:func:`default_normalize_score` on plain integers: the batch path, which builds no
    NodeScore objects (identical results, property-tested)."""
    if not raw:
        return []
    max_count = max(raw)
    max_count = max_count if max_count > 0 else 0
    if max_count == 0:
        return [max_priority] * len(raw) if reverse else list(raw)
    if min(raw) < 0:  # Go truncates toward zero; floor division only agrees on non-negatives
        scaled = [go_div(max_priority * s, max_count) for s in raw]
    else:
        scaled = [(max_priority * s) // max_count for s in raw]
    return [max_priority - x for x in scaled] if reverse else scaled


def broken_linear(shape: Sequence[tuple[int, int]], p: int) -> int:
    """Evaluate the piecewise-linear function through ``shape`` points ``(x, y)`` at ``p``.

    Flat before the first point and after the last; linear (with Go's truncating division) between.
    ``shape`` must be non-empty with strictly increasing ``x``.
    """
    for i, (x, y) in enumerate(shape):
        if p <= x:
            if i == 0:
                return y
            px, py = shape[i - 1]
            return py + go_div((y - py) * (p - px), x - px)
    return shape[-1][1]
