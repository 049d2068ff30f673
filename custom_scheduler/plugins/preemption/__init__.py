"""Preemption's decision, without I/O: which node to free, and which pods to evict there.

:mod:`.selection` holds the pure part of kube-scheduler's preemption (victim selection on one node,
the dry run over candidate nodes, the choice among candidates). The DefaultPreemption plugin
(:mod:`custom_scheduler.plugins.default_preemption`) adds eligibility, messages and the API writes.
"""

from __future__ import annotations

from custom_scheduler.framework.interface import DryRunner
from custom_scheduler.plugins.preemption.selection import (
    ERR_REASON_NO_VICTIMS,
    Candidate,
    Victims,
    dry_run_preemption,
    importance_key,
    num_candidates,
    pick_one_node,
    select_victims_on_node,
    split_by_pdb_violation,
)

__all__ = [
    "ERR_REASON_NO_VICTIMS",
    "Candidate",
    "DryRunner",
    "Victims",
    "dry_run_preemption",
    "importance_key",
    "num_candidates",
    "pick_one_node",
    "select_victims_on_node",
    "split_by_pdb_violation",
]
