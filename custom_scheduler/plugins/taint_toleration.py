"""TaintToleration: hard taints filter nodes, soft (PreferNoSchedule) taints lower their score.

Taints are how an operator reserves nodes (GPU nodes, dedicated pools): a NoSchedule or NoExecute
taint the pod does not tolerate rules the node out, and since evicting pods cannot remove a taint the
rejection is UnschedulableAndUnresolvable (preemption skips such nodes). The reason is
``node(s) had untolerated taint(s)``, without the taint: since v1.35 upstream keeps taint keys and
values (which may be sensitive) out of pod statuses and events; up to 1.34 it named the first
offending taint, ``node(s) had untolerated taint {key: value}``.

PreferNoSchedule taints only steer: the raw score counts the ones the pod does not tolerate (with the
tolerations whose effect is PreferNoSchedule or empty, collected once in PreScore), and normalisation
reverses it so the node with the fewest intolerable soft taints gets 100.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, ClassVar

import numpy as np

from custom_scheduler.api.model import Node, Pod, Taint, Toleration, tolerates_all
from custom_scheduler.framework import cluster_events as ce
from custom_scheduler.framework import registry
from custom_scheduler.framework.arrays import Mask, NodeArrays
from custom_scheduler.framework.interface import Handle
from custom_scheduler.framework.types import (
    SUCCESS,
    Code,
    CycleState,
    NodeInfo,
    NodeScore,
    Snapshot,
    StateKey,
    Status,
)
from custom_scheduler.plugins import helpers, signers

NAME = "TaintToleration"

NO_SCHEDULE, NO_EXECUTE, PREFER_NO_SCHEDULE = "NoSchedule", "NoExecute", "PreferNoSchedule"

ERR_REASON_UNTOLERATED = "node(s) had untolerated taint(s)"
ERR_REASON_INVALID_NODE_INFO = "invalid nodeInfo: node not found"

#: The pod's tolerations that can match PreferNoSchedule taints.
PRE_SCORE_KEY: StateKey[tuple[Toleration, ...]] = StateKey(f"PreScore{NAME}")


#: The one rejection (shared: a Status is never mutated once returned).
_UNTOLERATED = Status(Code.UNSCHEDULABLE_AND_UNRESOLVABLE, (ERR_REASON_UNTOLERATED,), NAME)


def find_untolerated_taint(taints: Sequence[Taint], tolerations: tuple[Toleration, ...]) -> Taint | None:
    """The first NoSchedule/NoExecute taint in ``taints`` not tolerated, or None."""
    for taint in taints:
        if taint.effect in (NO_SCHEDULE, NO_EXECUTE) and not tolerates_all(tolerations, taint):
            return taint
    return None


def count_intolerable_prefer_no_schedule(taints: Sequence[Taint], tolerations: tuple[Toleration, ...]) -> int:
    """How many PreferNoSchedule taints in ``taints`` none of ``tolerations`` tolerates."""
    return sum(1 for t in taints if t.effect == PREFER_NO_SCHEDULE and not tolerates_all(tolerations, t))


class TaintToleration:
    """Filter on hard taints; score (reversed) on untolerated soft taints."""

    name: ClassVar[str] = NAME
    #: Its Filter reads only the Node, never the pods on it (see ``FilterMaskPlugin``).
    filter_reads_node_only: ClassVar[bool] = True

    def __init__(self, args: Any, handle: Handle) -> None:
        del args, handle

    def sign_pod(self, pod: Pod) -> signers.Fragments:
        """What this plugin reads of the pod (opportunistic batching)."""
        return signers.tolerations(pod)

    def events_to_register(self) -> list[ce.ClusterEventWithHint]:
        """A node whose hard taints the pod now tolerates; the pod given a toleration."""
        return [
            ce.ClusterEventWithHint(
                ce.ClusterEvent(ce.Resource.NODE, ce.Action.ADD | ce.Action.UPDATE_NODE_TAINT), _after_node_change
            ),
            ce.ClusterEventWithHint(ce.ClusterEvent(ce.Resource.TARGET_POD, ce.Action.UPDATE_POD_TOLERATION)),
        ]

    def filter(self, state: CycleState, pod: Pod, node_info: NodeInfo) -> Status:
        node = node_info.node
        if node is None:
            return Status.as_error(ERR_REASON_INVALID_NODE_INFO)
        taints = node.taints
        if not taints:
            return SUCCESS
        if find_untolerated_taint(taints, pod.tolerations) is None:
            return SUCCESS
        return _UNTOLERATED

    def filter_mask(self, state: CycleState, pod: Pod, snap: Snapshot) -> Mask | bool | None:
        """:meth:`filter` for every snapshot node at once: the pod's tolerations are checked once
        per distinct taint set (True: all pass)."""
        a: NodeArrays = snap.arrays
        if len(a.taint_sets) == 1:
            return True  # no node has taints
        tolerations = pod.tolerations
        ok = np.fromiter(
            (find_untolerated_taint(ts, tolerations) is None for ts in a.taint_sets), np.bool_, len(a.taint_sets)
        )
        if ok.all():
            return True
        mask: Mask = ok[a.taint_set]
        return mask

    def pre_score(self, state: CycleState, pod: Pod, nodes: Sequence[NodeInfo]) -> Status:
        state.write(PRE_SCORE_KEY, tuple(t for t in pod.tolerations if t.effect in ("", PREFER_NO_SCHEDULE)))
        return SUCCESS

    def score(self, state: CycleState, pod: Pod, node_info: NodeInfo) -> int:
        node = node_info.node
        if node is None or not node.taints:
            return 0
        return count_intolerable_prefer_no_schedule(node.taints, state.read(PRE_SCORE_KEY))

    def score_batch(self, state: CycleState, pod: Pod, nodes: Sequence[NodeInfo]) -> list[int]:
        """:meth:`score` for every node at once; untainted nodes (the usual case) cost one check."""
        tolerations = state.read(PRE_SCORE_KEY)
        out = []
        for ni in nodes:
            node = ni.node
            taints = node.taints if node is not None else ()
            out.append(count_intolerable_prefer_no_schedule(taints, tolerations) if taints else 0)
        return out

    def normalize_score(self, state: CycleState, pod: Pod, scores: list[NodeScore]) -> Status:
        helpers.default_normalize_score(scores, reverse=True)
        return SUCCESS

    def normalize_batch(self, state: CycleState, pod: Pod, raw: list[int]) -> list[int]:
        """:meth:`normalize_score` on the batch path (no NodeScore objects)."""
        return helpers.default_normalize_list(raw, reverse=True)


def _after_node_change(pod: Pod, old: Node | None, new: Node) -> ce.Hint:
    was = old is None or find_untolerated_taint(old.taints, pod.tolerations) is not None
    now = find_untolerated_taint(new.taints, pod.tolerations) is not None
    return ce.Hint.QUEUE if was and not now else ce.Hint.SKIP


SPEC = registry.PluginSpec(NAME, factory=TaintToleration, parse_args=registry.no_args)
