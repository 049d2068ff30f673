"""Reservations for starving gangs: the pure bookkeeping (issue #28, item 3).

A gang that needs many nodes' worth of capacity starves behind a steady stream of small pods: each
time a small pod ends, the freed capacity goes to the next small pod, and the gang never sees
enough free at once. A *reservation* stops that: once a gang has been pending longer than a
threshold, it claims capacity in the domain where it would fit soonest, and the nodes of that
domain stop giving the reserved amounts to other pods — except to pods that *declare* they will be
gone before the gang is expected to start (backfill, as batch schedulers such as Slurm do).

This module is the arithmetic, with no I/O and no clock of its own (``now`` is always an argument),
so the tests read the same answers the plugin acts on:

- :func:`declared_end` — when a pod will have freed its node, from its declared runtime: the
  ``custom-scheduler.io/expected-runtime`` annotation (a Go duration) or ``activeDeadlineSeconds``
  (the kubelet fails the pod that long after it started), whichever ends first, counted from the
  pod's start; a pod that declares nothing frees "never" as far as planning goes.
- :func:`soonest` — the domain and time at which the gang fits first, judged by what is free now
  plus what the running pods free at their declared ends, and which amounts on which nodes to hold.
- :func:`admit` — the backfill rule Filter applies on a reserved node.
- :class:`ReservationBook` — the reservations in force and the gangs' pending clocks, thread-safe
  (the scheduling thread, the expiry timers and the metrics scrape all read it).

Amounts are plain ``{resource name: integer}`` vectors in the units of
:class:`~custom_scheduler.api.resources.Resources` (milli-CPU, bytes, counts); ``pods`` counts
pod slots, so a node out of pod slots is out of room too.
"""

from __future__ import annotations

import bisect
import math
import threading
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from custom_scheduler.api.model import Pod
from custom_scheduler.api.resources import CPU, EPHEMERAL_STORAGE, MEMORY, PODS, Resources
from custom_scheduler.config.durations import parse_duration

Vector = Mapping[str, int]
#: The annotation a pod declares its expected runtime with (a Go duration, e.g. ``"90s"``).
RUNTIME_ANNOTATION = "custom-scheduler.io/expected-runtime"
NEVER = math.inf


def vector(res: Resources, pods: int = 0) -> dict[str, int]:
    """``res`` as a vector of its non-zero amounts, plus ``pods`` pod slots."""
    out = {CPU: res.milli_cpu, MEMORY: res.memory, EPHEMERAL_STORAGE: res.ephemeral_storage, PODS: pods}
    out.update(res.scalar)
    return {k: v for k, v in out.items() if v}


def add(a: Vector, b: Vector, sign: int = 1) -> dict[str, int]:
    out = dict(a)
    for k, v in b.items():
        out[k] = out.get(k, 0) + sign * v
    return out


def fits(demand: Vector, room: Vector) -> bool:
    """Every amount ``demand`` asks for is within ``room``."""
    return all(v <= room.get(k, 0) for k, v in demand.items() if v > 0)


def parse_runtime(value: str) -> float | None:
    """A declared runtime in seconds, or None when it is not a positive Go duration (a bad value
    declares nothing: the pod is planned as running "forever", never backfilled)."""
    try:
        seconds = parse_duration(value)
    except ValueError:
        return None
    return seconds if seconds > 0 else None


def declared_end(pod: Pod, annotation: str, now: float) -> float | None:
    """When ``pod`` will have freed its node by its own declaration, or None (it declares nothing).

    Two declarations count, and the earlier end wins: the runtime ``annotation`` (a promise) and
    ``spec.activeDeadlineSeconds`` (enforced: the kubelet fails the pod that long after its
    ``status.startTime``). Both count from the pod's start; a pod not started yet (pending, or
    bound a moment ago) counts from ``now``."""
    runtimes = []
    raw = pod.annotations.get(annotation)
    if raw is not None and (runtime := parse_runtime(raw)) is not None:
        runtimes.append(runtime)
    if pod.active_deadline_seconds is not None:
        runtimes.append(float(pod.active_deadline_seconds))
    if not runtimes:
        return None
    start = pod.start_time if pod.start_time is not None else now
    return start + min(runtimes)


# --- planning --------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class NodeOutlook:
    """A node as planning sees it: what is ``free`` now and what its pods free when
    (``releases``: (time, amounts), ``NEVER`` for a pod that declares no runtime)."""

    name: str
    free: Vector
    releases: tuple[tuple[float, Vector], ...] = ()

    def room_at(self, t: float) -> dict[str, int]:
        room = dict(self.free)
        for at, amount in self.releases:
            if at <= t:
                room = add(room, amount)
        return room


@dataclass(frozen=True, slots=True)
class DomainNodes:
    """A candidate domain: its name (for messages) and its nodes."""

    name: str
    nodes: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class Placement:
    """Where and when a gang fits first: ``start`` (``NEVER``: only once pods that declare no
    runtime end) and the amounts to hold on each node."""

    domain: str
    start: float
    amounts: Mapping[str, Vector]


_BASIC = frozenset({CPU, MEMORY, EPHEMERAL_STORAGE, PODS})


def size(v: Vector) -> tuple[int, int, int]:
    """How big an amount is, accelerators (extended resources) first, then CPU and memory."""
    return (sum(n for k, n in v.items() if k not in _BASIC), v.get(CPU, 0), v.get(MEMORY, 0))


def pack(demands: Sequence[Vector], rooms: Mapping[str, Vector]) -> dict[str, dict[str, int]] | None:
    """Best-fit packing of ``demands`` (largest first) into ``rooms``: each demand goes to the node
    where it fits with the least room left; the amounts per node, or None when one does not fit."""
    left = {n: dict(r) for n, r in rooms.items()}
    held: dict[str, dict[str, int]] = {}
    for d in sorted(demands, key=size, reverse=True):
        best: tuple[tuple[int, int, int], str] | None = None
        for name in sorted(left):
            if fits(d, left[name]):
                slack = size(add(left[name], d, -1))
                if best is None or slack < best[0]:
                    best = (slack, name)
        if best is None:
            return None
        left[best[1]] = add(left[best[1]], d, -1)
        held[best[1]] = add(held.get(best[1], {}), d)
    return held


def _earliest(demands: Sequence[Vector], outlooks: Sequence[NodeOutlook], now: float) -> Placement | None:
    """The first time ``demands`` pack into ``outlooks`` (binary search over the release times:
    room only grows with time), or None when they never do."""
    times = sorted({now, *(max(at, now) for o in outlooks for at, _ in o.releases if at != NEVER)})

    def at(t: float) -> dict[str, dict[str, int]] | None:
        return pack(demands, {o.name: o.room_at(t) for o in outlooks})

    if at(times[-1]) is None:
        held = at(NEVER)
        return None if held is None else Placement("", NEVER, held)
    i = bisect.bisect_left(range(len(times)), True, key=lambda k: at(times[k]) is not None)
    held = at(times[i])
    assert held is not None  # times[-1] fits, so the search ends on a fitting time
    return Placement("", times[i], held)


def soonest(
    demands: Sequence[Vector], domains: Sequence[DomainNodes], outlooks: Mapping[str, NodeOutlook], now: float
) -> Placement | None:
    """The domain where ``demands`` (the gang's members still to place) fit first; ties go to the
    domain with fewer nodes (a tighter domain keeps more of the cluster free), then the name. None
    when no domain holds the gang even with every pod gone."""
    best: tuple[float, int, str, Placement] | None = None
    for d in domains:
        nodes = [outlooks[n] for n in d.nodes if n in outlooks]
        if not nodes:
            continue
        p = _earliest(demands, nodes, now)
        if p is None:
            continue
        key = (p.start, len(d.nodes), d.name)
        if best is None or key < best[:3]:
            best = (*key, Placement(d.name, p.start, p.amounts))
    return None if best is None else best[3]


# --- the backfill rule -----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Verdict:
    """Filter's answer on a reserved node; ``why`` says which rule let the pod in."""

    admitted: bool
    why: str


def admit(demand: Vector, free: Vector, reserved: Vector, pod_end: float | None, expected_start: float) -> Verdict:
    """Whether a pod that is not a member of the reserving gang may use this node.

    ``free`` is what the node has free now, ``reserved`` what the reservations on it hold. The pod
    may take what is free beyond the reservation; into the reserved capacity only when its declared
    end (``pod_end``) comes no later than the gang's ``expected_start`` (backfill: it will be gone
    by the time the gang needs the room). With no expected start (the gang waits on pods that
    declare no runtime) nothing backfills: any moment may be the one the gang fits."""
    if fits(add(demand, reserved), free):
        return Verdict(True, "beyond the reservation")
    if pod_end is not None and expected_start != NEVER and pod_end <= expected_start:
        return Verdict(True, "backfill")
    return Verdict(False, "")


# --- the book --------------------------------------------------------------------------------------


@dataclass(slots=True)
class Reservation:
    """Capacity held for one gang: ``amounts`` per node, until ``expires``."""

    group: str
    """The gang plugin's group key (``api:namespace/name``)."""
    profile: str
    domain: str
    amounts: Mapping[str, Vector]
    expected_start: float
    created: float
    expires: float
    held_off: dict[str, Pod] = field(default_factory=dict)
    """Pods Filter kept off a reserved node: activated when the reservation ends."""

    def total(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for amount in self.amounts.values():
            out = add(out, amount)
        return out


#: At most this many held-off pods are remembered per reservation (the rest wait for other events).
MAX_HELD_OFF = 10_000


class ReservationBook:
    """The reservations in force and the gangs' pending clocks (thread-safe)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._by_group: dict[str, Reservation] = {}
        self._by_node: dict[str, list[Reservation]] = {}
        self._pending_since: dict[str, float] = {}
        self.restored = False
        """Whether the book was rebuilt from the PodGroups' annotations (once per process)."""

    def claim_restore(self) -> bool:
        """True for the one caller that rebuilds the book (the first, of any profile's plugin)."""
        with self._lock:
            first, self.restored = not self.restored, True
            return first

    def empty(self) -> bool:
        """No reservation anywhere (read without the lock: Filter's fast path on every node)."""
        return not self._by_group

    # -- pending clocks ---------------------------------------------------------------------------
    def pending(self, group: str, now: float) -> float:
        """Start ``group``'s pending clock unless it runs; returns when it started."""
        with self._lock:
            return self._pending_since.setdefault(group, now)

    def restart_clock(self, group: str, now: float) -> None:
        with self._lock:
            self._pending_since[group] = now

    def forget(self, group: str) -> Reservation | None:
        """``group`` was placed or deleted: stop its clock and end its reservation (returned)."""
        with self._lock:
            self._pending_since.pop(group, None)
            return self._remove_locked(group)

    # -- reservations -----------------------------------------------------------------------------
    def add(self, r: Reservation) -> None:
        with self._lock:
            self._remove_locked(r.group)
            self._by_group[r.group] = r
            for node in r.amounts:
                self._by_node.setdefault(node, []).append(r)

    def end(self, group: str) -> Reservation | None:
        with self._lock:
            return self._remove_locked(group)

    def _remove_locked(self, group: str) -> Reservation | None:
        r = self._by_group.pop(group, None)
        if r is None:
            return None
        for node in r.amounts:
            rs = [x for x in self._by_node.get(node, ()) if x is not r]
            if rs:
                self._by_node[node] = rs
            else:
                self._by_node.pop(node, None)
        return r

    def get(self, group: str) -> Reservation | None:
        with self._lock:
            return self._by_group.get(group)

    def on_node(self, node: str) -> list[Reservation]:
        with self._lock:
            return list(self._by_node.get(node, ()))

    def expired(self, now: float) -> list[Reservation]:
        with self._lock:
            return [r for r in self._by_group.values() if r.expires <= now]

    def all(self) -> list[Reservation]:
        with self._lock:
            return list(self._by_group.values())

    def hold_off(self, r: Reservation, pod: Pod) -> None:
        with self._lock:
            if len(r.held_off) < MAX_HELD_OFF:
                r.held_off[pod.uid] = pod

    def summary(self) -> dict[str, tuple[int, dict[str, int]]]:
        """Per profile: how many reservations, and the capacity they hold by resource (metrics)."""
        out: dict[str, tuple[int, dict[str, int]]] = {}
        for r in self.all():
            n, total = out.get(r.profile, (0, {}))
            out[r.profile] = (n + 1, add(total, r.total()))
        return out


def reserved_on(reservations: Iterable[Reservation], node: str, exempt: str | None) -> tuple[dict[str, int], float]:
    """What ``reservations`` hold on ``node`` (all but the gang ``exempt``'s own) and the earliest
    expected start among them (the backfill deadline)."""
    total: dict[str, int] = {}
    start = NEVER
    for r in reservations:
        if r.group == exempt:
            continue
        total = add(total, r.amounts.get(node, {}))
        start = min(start, r.expected_start)
    return total, start
