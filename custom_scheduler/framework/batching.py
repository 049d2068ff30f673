"""Opportunistic batching: a pod equal to the one just placed reuses that pod's ranking of nodes.

kube-scheduler 1.37's ``OpportunisticBatch`` (framework/runtime/batch.go, gate
OpportunisticBatching, beta and on). Each plugin of the profile's PreFilter, Filter, PreScore and
Score points *signs* the pod: the parts of it that plugin reads (its requests, tolerations, node
selector, volumes...), or refuses to (a pod with pod affinity, topology-spread constraints, DRA
claims). Two pods with the same signature get the same feasibility and scores on the same nodes.
When a pod's cycle ends with a node chosen among several, the other feasible nodes are kept,
sorted by total score. The next pod, if it is the very next cycle, has the same signature, is not
nominated, and comes within :data:`MAX_AGE`, gets the best remaining node as a *hint*:

- the previously chosen node is filtered again for the new pod; if it still fits it is rescored
  with the cached candidates (its score changed: it now holds the previous pod), else it drops out;
- the head of the ranking is the hint; the cycle filters only that node and, if it passes, takes
  it without filtering or scoring any other (one feasible node needs no scoring).

Anything that does not hold flushes the kept ranking, with upstream's reason label. A profile with
a plugin that cannot sign at all (an out-of-tree or scenario plugin without ``sign_pod``) or with
extenders never batches. With kube-scheduler's default plugins and args, PodTopologySpread's
system-default constraints make no pod signable, so batching changes nothing there; profiles with
``defaultingType: List`` (or without PodTopologySpread) batch their plain pods.

Pure bookkeeping: the cycle passes in the filter and rescoring it runs.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

#: A batch older than this is not reused (upstream's maxBatchAge).
MAX_AGE = 0.5

# Upstream's label values (pkg/scheduler/metrics).
NO_HINT, HINT_USED, HINT_NOT_USED = "no_hint", "hint_used", "hint_not_used"
FLUSH_POD_FAILED = "pod_failed"
FLUSH_POD_SKIPPED = "pod_skipped"
FLUSH_POD_NOMINATED = "pod_nominated"
FLUSH_NODE_MISSING = "node_missing"
FLUSH_EMPTY_LIST = "empty_list"
FLUSH_EXPIRED = "expired"
FLUSH_POD_INCOMPATIBLE = "pod_incompatible"
FLUSH_POD_NOT_BATCHABLE = "pod_not_batchable"
FLUSH_FILTER_ERROR = "filter_error"
FLUSH_RESCORE_ERROR = "rescore_error"

Signature = tuple[Any, ...]
"""A pod's signature: the scheduler name and each signing plugin's fragments, hashable."""

#: Filter verdict on the last chosen node: True fits, False rejected, None an error.
FilterLast = Callable[[str], bool | None]
#: Rescore the given node names (the cached ones plus the last chosen): name -> total, or None.
Rescore = Callable[[Sequence[str]], dict[str, int] | None]


@dataclass(slots=True)
class _Batch:
    signature: Signature
    ranked: list[tuple[str, int]]
    """Remaining feasible nodes, best first (ties: name order)."""
    created: float


@dataclass(slots=True)
class _LastCycle:
    cycle: int = -2
    chosen: str = ""
    succeeded: bool = False


@dataclass(slots=True)
class OpportunisticBatch:
    """One profile's batch state (the scheduling thread alone touches it)."""

    clock: Callable[[], float] = time.monotonic
    _batch: _Batch | None = None
    _last: _LastCycle = field(default_factory=_LastCycle)
    attempts: Counter[str] = field(default_factory=Counter)
    """Hints given and used, by upstream's ``scheduler_batch_attempts_total`` result label."""
    flushes: Counter[str] = field(default_factory=Counter)
    """Rankings dropped, by reason (``scheduler_batch_cache_flushed_total``)."""
    batched: int = 0

    def hint(
        self,
        signature: Signature | None,
        nominated: bool,
        cycle: int,
        filter_last: FilterLast,
        rescore: Rescore,
    ) -> str:
        """The node to try first for this pod, or "" (then the cycle searches as usual)."""
        hint = ""
        if self._compatible(signature, nominated, cycle) and self._refresh(filter_last, rescore):
            assert self._batch is not None
            hint = self._batch.ranked.pop(0)[0]
        if not hint:
            self.attempts[NO_HINT] += 1
        return hint

    def store(
        self, signature: Signature | None, hinted: str, chosen: str, others: Sequence[tuple[str, int]], cycle: int
    ) -> None:
        """A pod of ``cycle`` was placed on ``chosen`` (``hinted``: the hint it was given, or "");
        ``others``: the other feasible nodes with their totals, when it was a full search."""
        self._last = _LastCycle(cycle, chosen, True)
        if hinted and hinted == chosen:
            self.attempts[HINT_USED] += 1
            self.batched += 1
            return
        if hinted:
            self.attempts[HINT_NOT_USED] += 1
        if signature is not None and others:
            ranked = sorted(others, key=lambda ns: (-ns[1], ns[0]))
            self._batch = _Batch(signature, ranked, self.clock())
        else:
            self._flush(FLUSH_POD_NOT_BATCHABLE if signature is None else FLUSH_EMPTY_LIST)

    def failed(self, cycle: int) -> None:
        """The pod of ``cycle`` was not placed: its ranking says nothing about the next pod."""
        self._last = _LastCycle(cycle, "", False)

    # -- internals --------------------------------------------------------------------------------
    def _flush(self, reason: str) -> None:
        self.flushes[reason] += 1
        self._batch = None

    def _compatible(self, signature: Signature | None, nominated: bool, cycle: int) -> bool:
        batch = self._batch
        if batch is None or not batch.ranked:
            return False
        if cycle != self._last.cycle + 1:
            self._flush(FLUSH_POD_SKIPPED)  # another pod (of any profile) was scheduled between
            return False
        if not self._last.succeeded:
            self._flush(FLUSH_POD_FAILED)
            return False
        if nominated:
            self._flush(FLUSH_POD_NOMINATED)
            return False
        if signature is None or signature != batch.signature:
            self._flush(FLUSH_POD_INCOMPATIBLE)
            return False
        if self.clock() > batch.created + MAX_AGE:
            self._flush(FLUSH_EXPIRED)
            return False
        return True

    def _refresh(self, filter_last: FilterLast, rescore: Rescore) -> bool:
        """Upstream's refreshHintCandidates: the last chosen node re-enters the ranking, rescored,
        while it still fits the new pod."""
        batch = self._batch
        assert batch is not None
        verdict = filter_last(self._last.chosen)
        if verdict is None:
            self._flush(FLUSH_FILTER_ERROR)
            return False
        if not verdict:
            return True
        names = [n for n, _ in batch.ranked] + [self._last.chosen]
        fresh = rescore(names)
        if fresh is None:
            self._flush(FLUSH_RESCORE_ERROR)
            return False
        if set(fresh) != set(names):
            self._flush(FLUSH_NODE_MISSING)
            return False
        batch.ranked = sorted(fresh.items(), key=lambda ns: (-ns[1], ns[0]))
        return True


class Signer:
    """A profile's pod signing (upstream's ``SignPod``): the scheduler name and every fragment of
    the plugins at PreFilter, Filter, PreScore and Score. ``enabled`` is False when one of them
    cannot sign at all; :meth:`sign` gives None for a pod one of them refuses, at once when one
    refuses every pod as configured (``signs_no_pod``)."""

    def __init__(self, plugins: Sequence[object]) -> None:
        unique: dict[str, object] = {}
        for p in plugins:
            unique.setdefault(getattr(p, "name", repr(p)), p)
        signers = [p for p in unique.values() if callable(getattr(p, "sign_pod", None))]
        # Plugins that may refuse a pod sign first: a refusal then costs no other plugin's
        # fragments (the result is the same in any order: fragments of one key are equal).
        self._signers = sorted(signers, key=lambda p: not getattr(p, "may_refuse_signing", False))
        self.unsigned = sorted(n for n, p in unique.items() if p not in signers)
        self.enabled = not self.unsigned
        #: Plugins that, as configured, refuse every pod (PodTopologySpread with default
        #: constraints): :meth:`sign` answers None at once instead of collecting every other
        #: plugin's fragments first. Batching still runs, so its metrics count each such pod as
        #: upstream's do (a ``pod_not_batchable`` flush).
        self.refuse_all = sorted(n for n, p in unique.items() if getattr(p, "signs_no_pod", False))

    def sign(self, pod: Any) -> Signature | None:
        if not self.enabled or self.refuse_all:
            return None
        fragments: dict[str, Any] = {"schedulerName": pod.scheduler_name}
        for p in self._signers:
            got = p.sign_pod(pod)  # type: ignore[attr-defined]
            if got is None:
                return None
            fragments.update(got)
        return tuple(sorted(fragments.items()))
