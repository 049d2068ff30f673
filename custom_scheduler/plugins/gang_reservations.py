"""GangScheduling's reservations with backfill: the plugin side (issue #28, item 3).

The arithmetic is :mod:`custom_scheduler.framework.reservations`; this module decides *when* to
reserve and acts on the cluster:

- **When.** Every group cycle reports its outcome (``group_attempted``). A gang's first
  unschedulable cycle starts its pending clock; a cycle that fails once the clock has run for the
  ``threshold`` reserves capacity for it (and a timer wakes the gang at the threshold, so a gang
  nothing else requeues is retried and reserves on time). Placing the gang, its deletion, or the
  ``expiry`` end the reservation; on expiry the clock restarts, so a gang still starving reserves
  again from a fresh plan (a plan made on a wrong estimate never holds capacity for longer).
- **Filter.** On a reserved node a pod that is not a member of the reserving gang is rejected when
  it would eat into the reserved amounts, unless it declares a runtime ending before the gang's
  expected start (backfill). Capacity beyond the reservation stays usable. Nodes without a
  reservation cost one dictionary lookup.
- **Requeue.** The pods Filter kept off a node are remembered and activated when the reservation
  ends; the gang's own members are activated when its reserved nodes have the room (so its backoff
  does not add to the wait) and at the expected start.
- **Visible.** ``Reserved`` and ``ReservationExpired`` Events on the PodGroup, the reason text of a
  rejected node (which gang, until when), and the ``custom_scheduler_gang_reservation*`` gauges the
  daemon reads from the :class:`~custom_scheduler.framework.reservations.ReservationBook` at scrape.
- **Durable.** Each reservation is written on its PodGroup as the ``custom-scheduler.io/reservation``
  annotation (:mod:`custom_scheduler.framework.reservation_annotation`, sent off the scheduling
  thread by :mod:`.gang_reservation_writes`) and removed when it ends. The first cycle of a process
  rebuilds the book from the annotations not yet expired (:meth:`GangReservations.restore`), so a
  new leader keeps honouring them, and offline tools (``explain``, ``simulate``) see them too.

The book lives on the process's :class:`~custom_scheduler.framework.gang_store.GangStore`, so a
configuration reload keeps the reservations in force. Timers run only in the daemon (a Handle with
an API client): offline tools neither wait nor reserve.
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import structlog

from custom_scheduler.api import podgroup as gang
from custom_scheduler.api.model import Pod, tolerates_all
from custom_scheduler.api.podgroup import PodGroup
from custom_scheduler.config.durations import format_duration, parse_duration
from custom_scheduler.framework import gang_topology as topo
from custom_scheduler.framework import reservation_annotation as ra
from custom_scheduler.framework import reservations as rv
from custom_scheduler.framework.interface import Handle
from custom_scheduler.framework.types import SUCCESS, NodeInfo, Status
from custom_scheduler.plugins import args_reader
from custom_scheduler.plugins.gang_reservation_writes import ReservationWrites
from custom_scheduler.plugins.node_affinity import compile_required_node_affinity

log = structlog.get_logger("custom_scheduler.plugins.gang_reservations")

DEFAULT_THRESHOLD = 30.0
#: Ten minutes: long enough for a gang behind pods of a few minutes to start within one
#: reservation, short enough that capacity held on a wrong estimate (pods that declared no runtime,
#: a node gone) is re-planned well within the 15-minute cap on any Permit wait.
DEFAULT_EXPIRY = 600.0
_FIELDS = ("enabled", "threshold", "expiry", "runtimeAnnotation")
#: The gang is woken at most this often when its reserved nodes have room (Filter may see it often).
_WAKE_INTERVAL = 1.0


@dataclass(frozen=True, slots=True)
class ReservationArgs:
    """GangSchedulingArgs' ``reservation``: on by default for gangs."""

    enabled: bool = True
    threshold: float = DEFAULT_THRESHOLD
    expiry: float = DEFAULT_EXPIRY
    runtime_annotation: str = rv.RUNTIME_ANNOTATION

    def to_config(self) -> dict[str, Any]:
        return {
            "enabled": self.enabled,
            "threshold": format_duration(self.threshold),
            "expiry": format_duration(self.expiry),
            "runtimeAnnotation": self.runtime_annotation,
        }


DEFAULT_ARGS = ReservationArgs()


def parse_reservation(r: args_reader.ArgsReader, raw: object, path: str) -> ReservationArgs:
    """``reservation`` of GangSchedulingArgs: durations as Go duration strings (``"30s"``), a
    threshold of 1 s to 24 h, an expiry of 10 s to 24 h, the annotation a label-style key."""
    doc = r.mapping(raw, path, fields=_FIELDS)
    enabled = doc.get("enabled", True)
    if not isinstance(enabled, bool):
        r.error(f"{path}.enabled", f"must be a boolean, got {type(enabled).__name__}")
        enabled = True
    threshold = _duration(r, doc, "threshold", path, DEFAULT_THRESHOLD, 1.0)
    expiry = _duration(r, doc, "expiry", path, DEFAULT_EXPIRY, 10.0)
    annotation = r.string(doc, "runtimeAnnotation", path, rv.RUNTIME_ANNOTATION)
    for msg in args_reader.qualified_name_errors(annotation):
        r.error(f"{path}.runtimeAnnotation", f"{annotation!r} is not an annotation key: {msg}")
    return ReservationArgs(enabled, threshold, expiry, annotation)


def _duration(
    r: args_reader.ArgsReader, doc: Mapping[str, Any], key: str, path: str, default: float, low: float
) -> float:
    value = doc.get(key)
    if value is None:
        return default
    if not isinstance(value, str):
        r.error(f"{path}.{key}", f'must be a duration string such as "30s" or "10m", got {type(value).__name__}')
        return default
    try:
        seconds = parse_duration(value)
    except ValueError as e:
        r.error(f"{path}.{key}", str(e))
        return default
    if not low <= seconds <= 86400:
        r.error(f"{path}.{key}", f"must be between {format_duration(low)} and 24h, got {value!r}")
        return default
    return seconds


def _iso(t: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(t)) if t != rv.NEVER else "unknown"


def reason(r: rv.Reservation, annotation: str) -> str:
    """Filter's reason on a reserved node: which gang holds it, until when, how to backfill."""
    key = r.group.partition(":")[2]
    start = _iso(r.expected_start)
    return (
        f"node capacity reserved for pod group {key} until {_iso(r.expires)} (gang expected to start "
        f"{start}); a pod may use it only if its {annotation} annotation or its activeDeadlineSeconds "
        "says it ends before then"
    )


def free_on(ni: NodeInfo) -> dict[str, int]:
    """What ``ni`` has free now: allocatable minus requested, and pod slots minus pods."""
    alloc = ni.allocatable
    return rv.add(rv.vector(alloc, alloc.allowed_pods), rv.vector(ni.requested, len(ni.pods)), -1)


def outlook(ni: NodeInfo, annotation: str, now: float) -> rv.NodeOutlook:
    """What ``ni`` has free now and what its pods free when (by their declared runtimes)."""
    free = free_on(ni)
    releases = []
    for p in ni.pods.values():
        end = rv.declared_end(p, annotation, now)
        releases.append((rv.NEVER if end is None else end, rv.vector(p.requests, 1)))
    return rv.NodeOutlook(ni.name, free, tuple(releases))


def eligible(pod: Pod) -> Callable[[NodeInfo], bool]:
    """Whether the gang could use a node at all: schedulable, matching its member's nodeSelector
    and required node affinity, and no NoSchedule/NoExecute taint the member does not tolerate (a
    reservation there would hold capacity the gang can never take)."""
    affinity = compile_required_node_affinity(pod)

    def ok(ni: NodeInfo) -> bool:
        node = ni.node
        if node is None or node.unschedulable or not affinity.matches(node):
            return False
        hard = (t for t in node.taints if t.effect in ("NoSchedule", "NoExecute"))
        return all(tolerates_all(pod.tolerations, t) for t in hard)

    return ok


Schedule = Callable[[float, Callable[[], None]], None]


def _timer(delay: float, fn: Callable[[], None]) -> None:
    t = threading.Timer(max(0.0, delay), fn)
    t.daemon = True
    t.start()


class GangReservations:
    """Reservations for one profile's GangScheduling; see the module docstring."""

    def __init__(
        self,
        args: ReservationArgs,
        handle: Handle,
        lookup: Callable[[str], PodGroup | None],
        topology: Callable[[str], topo.TopologyRequest | None],
        *,
        clock: Callable[[], float] = time.time,
        schedule: Schedule | None = None,
        writes: ReservationWrites | None = None,
    ) -> None:
        self.args = args
        self.handle = handle
        self.gangs = handle.gangs
        self.book: rv.ReservationBook = handle.gangs.reservations
        self._lookup = lookup
        self._topology = topology
        self._clock = clock
        self._schedule_with = schedule
        self.writes = writes if writes is not None else ReservationWrites(handle)
        self._woken: dict[str, float] = {}
        # When the gang was last planned (a gang no domain can hold is re-planned once per
        # threshold, not at every cycle) and when its threshold alarm rings.
        self._planned: dict[str, float] = {}
        self._alarm: dict[str, float] = {}

    @property
    def _schedule(self) -> Schedule | None:
        """Timers: the one given, else real ones in the daemon (a Handle with an API client),
        none offline. Asked when needed: the client is bound after the plugins are built."""
        if self._schedule_with is not None:
            return self._schedule_with
        return _timer if getattr(self.handle, "client", None) is not None else None

    # -- Filter -----------------------------------------------------------------------------------
    def idle(self) -> bool:
        """Nothing for Filter to check (off, or no reservation anywhere): its fast path. The
        first call of the process rebuilds the book from the PodGroups' annotations."""
        if not self.args.enabled:
            return True
        if not self.book.restored:
            self.restore()
        return self.book.empty()

    def filter(self, pod: Pod, ni: NodeInfo, own_group: str | None) -> Status:
        rs = self.book.on_node(ni.name)
        if not rs:
            return SUCCESS
        now = self._clock()
        live = [r for r in rs if not self._ended(r, now)]
        reserved, start = rv.reserved_on(live, ni.name, own_group)
        if not reserved:
            return SUCCESS
        free = free_on(ni)
        end = rv.declared_end(pod, self.args.runtime_annotation, now)
        if rv.admit(rv.vector(pod.requests, 1), free, reserved, end, start).admitted:
            return SUCCESS
        holders = [r for r in live if r.group != own_group and ni.name in r.amounts]
        for r in holders:
            self.book.hold_off(r, pod)
            self._wake_if_ready(r, now)
        first = min(holders, key=lambda r: r.expected_start)
        return Status.unschedulable(reason(first, self.args.runtime_annotation))

    def _ended(self, r: rv.Reservation, now: float) -> bool:
        """End ``r`` if it expired or its gang is gone; True when it no longer holds anything."""
        if r.expires <= now:
            self._expire(r, now)
            return True
        if self._lookup(r.group) is None:
            if self.book.forget(r.group) is r:
                self._released(r)
            return True
        return False

    def _wake_if_ready(self, r: rv.Reservation, now: float) -> None:
        """Activate the gang when every reserved node has its amounts free (its backoff would only
        add to the wait), at most once per ``_WAKE_INTERVAL``."""
        if now - self._woken.get(r.group, 0.0) < _WAKE_INTERVAL:
            return
        for node, amount in r.amounts.items():
            ni = self.handle.get_node(node)
            if ni is None:
                return
            if not rv.fits(amount, free_on(ni)):
                return
        self._woken[r.group] = now
        self._wake(r.group)

    def _wake(self, group: str) -> None:
        pg = self._lookup(group)
        if pg is not None:
            self.handle.activate(self.gangs.unplaced(pg))

    # -- the group cycle's outcome ----------------------------------------------------------------
    def attempted(self, group: str, result: str) -> None:
        """Start, keep or stop ``group``'s pending clock, and reserve once it passed the threshold."""
        if not self.args.enabled:
            return
        if not self.book.restored:
            self.restore()
        now = self._clock()
        if result == "scheduled":
            r = self.book.forget(group)
            for d in (self._woken, self._planned, self._alarm):
                d.pop(group, None)
            if r is not None:
                self.writes.put(group, None)
                self._released(r)
            return
        if result != "unschedulable":
            return
        since = self.book.pending(group, now)
        if self.book.get(group) is not None:
            return
        due = since + self.args.threshold
        if now < due:
            if self._schedule is not None and self._alarm.get(group) != due:
                self._alarm[group] = due
                self._schedule(due - now, lambda: self._wake(group))
            return
        if now - self._planned.get(group, -rv.NEVER) >= self.args.threshold:
            self._planned[group] = now
            self.reserve(group, now)

    def reserve(self, group: str, now: float) -> rv.Reservation | None:
        """Plan and record a reservation for ``group`` (None when no domain can ever hold it)."""
        pg = self._lookup(group)
        if pg is None:
            return None
        members = self.gangs.unplaced(pg)
        need = pg.min_count - len(self.gangs.placed(pg))
        if need <= 0 or not members:
            return None
        demands = sorted((rv.vector(p.requests, 1) for p in members), key=rv.size, reverse=True)[:need]
        usable = eligible(members[0])
        nodes = [ni for ni in self.handle.snapshot_nodes() if usable(ni)]
        outlooks = {ni.name: outlook(ni, self.args.runtime_annotation, now) for ni in nodes}
        placement = rv.soonest(demands, self._domains(group, nodes), outlooks, now)
        if placement is None:
            log.info("gang_reservation_impossible", group=pg.key, members=need)
            return None
        r = rv.Reservation(
            group,
            self.handle.profile_name,
            placement.domain,
            placement.amounts,
            placement.start,
            now,
            now + self.args.expiry,
        )
        self.book.add(r)
        self.writes.put(group, ra.encode(r, self._holder()))
        self._announce(pg, r, now)
        self._timers(r, now)
        return r

    def _timers(self, r: rv.Reservation, now: float) -> None:
        """The daemon's timers for ``r``: the expiry sweep, and the gang woken at its expected start."""
        if self._schedule is None:
            return
        self._schedule(r.expires - now, self.sweep)
        if r.expected_start != rv.NEVER and r.expected_start > now:
            group = r.group
            self._schedule(r.expected_start - now + 0.2, lambda: self._wake(group))

    def _holder(self) -> str:
        """Who writes the annotation: the leader's Lease identity, else the host's name."""
        return str(getattr(getattr(self.handle, "fence", None), "holder", "") or socket.gethostname())

    # -- restoring (a new leader) -----------------------------------------------------------------
    def restore(self) -> list[rv.Reservation]:
        """Rebuild the book from the reservations written on the PodGroups, once per process (the
        first cycle of a new leader after a failover or restart; offline tools reading a cluster or
        a snapshot): each one not yet expired whose gang is still short of its quorum and has
        members waiting. An expired, fulfilled or memberless one's annotation is removed; a value
        that is not a reservation (malformed, or another writer's) is logged and left alone."""
        if not self.book.claim_restore():
            return []
        now = self._clock()
        out = []
        for pg in self.gangs.groups():
            if pg.reservation is None:
                continue
            group = f"{pg.api}:{pg.key}"
            rec = ra.decode(pg.reservation)
            if isinstance(rec, ra.Invalid):
                log.warning("gang_reservation_annotation_ignored", group=group, why=rec.why)
                continue
            # Only a gang that still waits keeps its room: one already placed, or whose pods are
            # gone (a Job deleted, its namespace terminating), would hold capacity for nobody.
            # Offline (no API client: explain, simulate) a snapshot may hold the PodGroup without
            # its members, and the reservation is still what the daemon enforces: keep it.
            offline = getattr(self.handle, "client", None) is None
            waiting = offline or bool(self.gangs.unplaced(pg))
            if rec.expires <= now or not pg.gang or len(self.gangs.placed(pg)) >= pg.min_count or not waiting:
                self.writes.put(group, None)
                continue
            r = rec.reservation(group)
            self.book.add(r)
            self._timers(r, now)
            log.info("gang_reservation_restored", group=group, holder=rec.holder, nodes=sorted(r.amounts))
            out.append(r)
        return out

    def _domains(self, group: str, nodes: Sequence[NodeInfo]) -> list[rv.DomainNodes]:
        """The node sets the gang may use: its topology tiers' domains, else the whole cluster."""
        req = self._topology(group)
        labelled = [(ni.name, ni.node.labels if ni.node else {}) for ni in nodes]
        if req is None:
            return [rv.DomainNodes("the whole cluster", tuple(n for n, _ in labelled))]
        plan = topo.plan(req, labelled)
        if not plan.constrained:
            return [rv.DomainNodes("the whole cluster", tuple(n for n, _ in labelled))]
        return [rv.DomainNodes(d.name, tuple(sorted(d.nodes))) for t in plan.tiers for d in t.domains]

    # -- ending -----------------------------------------------------------------------------------
    def sweep(self) -> None:
        """End every expired reservation (the expiry timer; Filter also ends them as it meets them)."""
        now = self._clock()
        for r in self.book.expired(now):
            self._expire(r, now)

    def _expire(self, r: rv.Reservation, now: float) -> None:
        if self.book.end(r.group) is not r:
            return  # another thread ended it first
        self.writes.put(r.group, None)
        self.book.restart_clock(r.group, now)
        self._planned.pop(r.group, None)
        pg = self._lookup(r.group)
        if pg is not None:
            self._event(
                pg,
                "ReservationExpired",
                f"reservation in {r.domain} expired at {_iso(r.expires)}; re-planned if the gang still does not fit",
            )
        log.info("gang_reservation_expired", group=r.group)
        self._released(r)

    def _released(self, r: rv.Reservation) -> None:
        if r.held_off:
            self.handle.activate(list(r.held_off.values()))

    def _announce(self, pg: PodGroup, r: rv.Reservation, now: float) -> None:
        total = ", ".join(f"{k}={v}" for k, v in sorted(r.total().items()))
        when = (
            "unknown (pods there declare no runtime)"
            if r.expected_start == rv.NEVER
            else f"in {r.expected_start - now:.0f}s"
        )
        note = (
            f"reserved {total} on {len(r.amounts)} node(s) in {r.domain} after {self.args.threshold:.0f}s pending; "
            f"expected start {when}; expires {_iso(r.expires)}"
        )
        self._event(pg, "Reserved", note)
        log.info(
            "gang_reserved", group=pg.key, domain=r.domain, nodes=sorted(r.amounts), expected_start=r.expected_start
        )

    def _event(self, pg: PodGroup, reason_: str, note: str) -> None:
        self.handle.record_event(
            pg,
            type_="Normal",
            reason=reason_,
            action="Reserving",
            note=note,
            kind="PodGroup",
            api_version=gang.group_version(pg.api),
        )
