"""What one cycle did with one pod, as a value.

Its own module because both cycles make them, the pod cycle (:mod:`~custom_scheduler.core.cycle`)
and the group cycle it delegates to (:mod:`~custom_scheduler.core.group_cycle`), and the group
cycle may not import the pod cycle that imports it. :mod:`custom_scheduler.core.cycle` re-exports
it, which is where the rest of the package imports it from.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from custom_scheduler.core.algorithm import ScheduleResult
from custom_scheduler.framework.interface import PostFilterResult
from custom_scheduler.framework.types import Status


@dataclass(slots=True)
class Decision:
    """What happened to one pod in one cycle (for logs, shadow mode, simulate and tests)."""

    pod: str
    result: str  # scheduled | unschedulable | error | skipped | waiting
    node: str = ""
    message: str = ""
    post_filter: PostFilterResult | None = None
    schedule: ScheduleResult | None = None
    uid: str = ""
    statuses: Mapping[str, Status] = field(default_factory=dict)
    """An unschedulable pod's rejection per node (the FitError's): the decision record counts
    them per plugin and reason, which the aggregated ``message`` no longer tells apart."""
