"""The daemon's decision recorder: every cycle's decision into the ring, and shadow comparisons.

Three inputs, one thread of its own:

- the scheduling cycle's ``on_decision`` (the hot path): one ``deque.append`` of the decision
  value, nothing else; the entries are built off that thread;
- the pod informer: a pod of ours seen bound (pending → nodeName set). For the scheduling daemon
  that is the "bound by whom" entry; for a shadow (``--dry-run``) it is the real scheduler's
  choice, compared with the shadow's own (:func:`~custom_scheduler.core.decision_record.compare`),
  counted in ``custom_scheduler_shadow_decisions_total{profile,result}`` and recorded;
- a clock: every ``drain_every`` seconds the pending inputs become entries, and at most once per
  ``RingConfig.interval`` the entries since the last write go to the ring in one API write.

Only while this replica holds the fence (leads) does it write; a shadow has no elector and always
does, to a ring of its own name: the one write a shadow makes, batched like the leader's.
When the API refuses a write the entries stay buffered (up to the ring's size, oldest dropped
first) and go with the next flush.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict, deque
from collections.abc import Callable, Collection
from typing import Any

import prometheus_client as prom
import structlog

from custom_scheduler.api.model import Pod
from custom_scheduler.core import decision_record as dr
from custom_scheduler.core.decision import Decision
from custom_scheduler.core.decision_store import DecisionRing, Entry
from custom_scheduler.framework.fence import Fence
from custom_scheduler.kube import api_errors as kerrors
from custom_scheduler.server import metric_specs as ms

log = structlog.get_logger("custom_scheduler.server.decision_log")

#: Shadow decisions kept in memory until their pod is bound (each a
#: :class:`~custom_scheduler.core.decision_record.ShadowView`: tens of KB on a large cluster).
SHADOW_MEMORY = 1000
#: Seconds between two warnings about failed record writes.
WARN_EVERY = 60.0
#: Nodes decided kept in memory for the "bound by whom" entry (a string each).
NODE_MEMORY = 20000


class DecisionLog:
    """Records decisions (and, in shadow mode, compares them); see the module docstring.

    ``profiles`` returns the current profile names (a reload may change them); ``profile_of``
    the profile of a pod by uid (the informer's view), for decisions, which do not carry it.
    """

    def __init__(
        self,
        ring: DecisionRing | None,
        *,
        shadow: bool,
        profiles: Callable[[], Collection[str]],
        profile_of: Callable[[str], str],
        fence: Fence | None = None,
        registry: prom.CollectorRegistry | None = None,
        clock: Callable[[], float] = time.time,
        drain_every: float = 0.5,
    ) -> None:
        self.ring = ring
        self.shadow = shadow
        self.profiles = profiles
        self.profile_of = profile_of
        self.fence = fence if fence is not None else Fence()
        self.clock = clock
        self.drain_every = drain_every
        self.interval = ring.cfg.interval if ring is not None else 5.0
        # Entries kept while writes fail (RBAC, API down): two segments, then the oldest go.
        self.capacity = 2 * ring.cfg.segment_entries if ring is not None else 10000
        self._pending: deque[tuple[str, float, Any]] = deque()
        self._buffer: list[Entry] = []
        self._lock = threading.Lock()  # _decided: read by the informer thread, written by the drain
        # uid -> (what compare reads (shadow) or the node chosen, profile), newest last.
        self._decided: OrderedDict[str, tuple[dr.ShadowView | str, str]] = OrderedDict()
        self._last_write = 0.0
        self.written = 0
        self.dropped = 0
        self.failures = 0
        self.shadow_metric = ms.SHADOW_DECISIONS.build(registry) if registry is not None and shadow else None
        self.entries_metric = ms.DECISION_RECORD_ENTRIES.build(registry) if registry is not None else None
        self._last_warning = -WARN_EVERY
        # Set by :meth:`run` (this replica schedules): a standby's informer sees every binding its
        # leader makes, and must not queue them for a recorder that is not running.
        self.active = False

    # -- inputs (other threads) -------------------------------------------------------------------
    def on_decision(self, d: Decision) -> None:
        """The scheduling thread's hook: one append, the work is done by :meth:`drain`."""
        self._pending.append(("d", self.clock(), d))

    def pod_added(self, pod: Pod) -> None:
        """A pod listed or added already bound counts only when we decided it (a relist after our
        decision); the thousands bound before this process started are not our business."""
        if self.active and pod.node_name:
            with self._lock:
                known = pod.uid in self._decided
            if known:
                self._pending.append(("b", self.clock(), pod))

    def pod_updated(self, old: Pod, new: Pod) -> None:
        if self.active and new.node_name and not old.node_name and new.scheduler_name in self.profiles():
            self._pending.append(("b", self.clock(), new))

    def pod_deleted(self, pod: Pod) -> None:
        """Nothing to do: the record outlives the pod (that is its point)."""

    def init_metric(self) -> None:
        """Every profile's shadow series at 0, so a dashboard's rate() sees them from the start."""
        if self.shadow_metric is not None:
            for p in self.profiles():
                for r in dr.SHADOW_RESULTS:
                    self.shadow_metric.labels(profile=p, result=r)

    # -- the recorder's thread --------------------------------------------------------------------
    def run(self, stop: threading.Event) -> None:
        """Drain and flush until ``stop``; then a last drain and write."""
        self.init_metric()
        self.active = True
        while not stop.wait(self.drain_every):
            self.step()
        self.step(force=True)

    def step(self, *, force: bool = False) -> None:
        """One turn of :meth:`run`; never raises (a record problem must not stop the recorder)."""
        try:
            self.drain()
            self.flush(force=force)
        except Exception:
            log.exception("decision_record_failed")

    def drain(self) -> list[Entry]:
        """Turn the pending inputs into entries (in arrival order); returns them."""
        out: list[Entry] = []
        while self._pending:
            kind, t, obj = self._pending.popleft()
            out.extend(self._decision(t, obj) if kind == "d" else self._bound(t, obj))
        if out:
            self._buffer.extend(out)
            over = len(self._buffer) - self.capacity
            if over > 0:
                del self._buffer[:over]
                self._count_dropped(over)
        return out

    def _decision(self, t: float, d: Decision) -> list[Entry]:
        profile = self.profile_of(d.uid)
        entries = dr.decision_entries(d, t=t, profile=profile)
        if entries:
            kept = dr.shadow_view(d) if self.shadow else (d.node if d.result in ("scheduled", "waiting") else "")
            with self._lock:
                self._decided[d.uid] = (kept, profile)
                self._decided.move_to_end(d.uid)
                while len(self._decided) > (SHADOW_MEMORY if self.shadow else NODE_MEMORY):
                    self._decided.popitem(last=False)
        return entries

    def _bound(self, t: float, pod: Pod) -> list[Entry]:
        with self._lock:
            got = self._decided.pop(pod.uid, None)
        kept, profile = got if got is not None else (None, pod.scheduler_name)
        if self.shadow:
            outcome = dr.compare(kept if isinstance(kept, dr.ShadowView) else None, pod.node_name)
            if self.shadow_metric is not None:
                self.shadow_metric.labels(profile=profile, result=outcome.result).inc()
            return [outcome.entry(t=t, key=pod.key, uid=pod.uid, profile=profile)]
        by = profile if kept == pod.node_name else "another binder"
        return [dr.bound_entry(t=t, key=pod.key, uid=pod.uid, profile=profile, node=pod.node_name, by=by)]

    def flush(self, *, force: bool = False) -> int:
        """Write the buffered entries when the interval has passed (or ``force``) and this
        replica leads; returns the entries written."""
        if self.ring is None or not self._buffer or not self.fence.held:
            return 0
        now = time.monotonic()
        if not force and now - self._last_write < self.interval:
            return 0
        self._last_write = now
        batch = self._buffer
        try:
            n = self.ring.append(batch)
        except kerrors.KubeError as e:
            self.failures += 1
            if now - self._last_warning >= WARN_EVERY:  # e.g. RBAC without configmaps: not every flush
                self._last_warning = now
                log.warning(
                    "decision_record_write_failed", error=str(e)[:300], buffered=len(batch), failures=self.failures
                )
            return 0
        self._buffer = []
        self.written += n
        if self.entries_metric is not None:
            self.entries_metric.labels(result="written").inc(n)
        self._count_dropped(len(batch) - n)
        return n

    def _count_dropped(self, n: int) -> None:
        if n > 0:
            self.dropped += n
            if self.entries_metric is not None:
                self.entries_metric.labels(result="dropped").inc(n)
