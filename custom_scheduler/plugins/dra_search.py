"""The structured allocator's backtracking search (upstream's ``allocateOne``/``allocateDevice``
of the ``incubating`` variant), over the options :mod:`custom_scheduler.plugins.dra_allocator`
computed once per request.

Claims in order, each request in order, the first alternative (``firstAvailable`` subrequest)
that can be filled, its devices picked in candidate order. A pick is undone when a later one
fails, restoring exactly what it changed: the device's holders in this search (admin access may
share a device with other claims, never with its own), its pool's counters, its share of an
``allowMultipleAllocations`` device's capacity. Only the ``deadline`` bounds the search
(AllocationTimeout), as only upstream's context bounds its search: no step limit turns a slow
answer into a wrong "does not fit".
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from custom_scheduler.api import dra_devices as ddev
from custom_scheduler.api.dra import ALL, Candidate, Constraint, DeviceID, Request, ResourceClaim, device_id_str
from custom_scheduler.api.dra_pools import AllocatedState


class AllocationError(Exception):
    """Allocation cannot even be attempted (a selector's CEL error, a missing class): an error,
    not "does not fit"."""


class AllocationTimeout(Exception):
    """The search passed its deadline before finding an allocation or proving there is none
    (upstream's ``context.DeadlineExceeded`` from the allocator)."""


#: ``resourceapi.AllocationResultsMaxSize``: the most results one claim's allocation may hold.
ALLOCATION_RESULTS_MAX_SIZE = 32

#: Picks between two looks at the clock (a power of two: the test is a mask). A pick costs about a
#: microsecond, so a search overruns its deadline by well under a millisecond.
DEADLINE_CHECK_STEPS = 256
_CHECK_MASK = DEADLINE_CHECK_STEPS - 1


def check_deadline(deadline: float | None) -> None:
    if deadline is not None and time.monotonic() >= deadline:
        raise AllocationTimeout


def claim_ref(claim: ResourceClaim) -> str:
    return f"{claim.namespace}/{claim.name}"


Options = list[list[list[list[Candidate]]]]
"""Per claim, per request, per alternative: the devices it may take (static checks done once)."""


@dataclass(frozen=True, slots=True)
class Pick:
    """One device for one request (or subrequest): ``consumed`` is its share's capacity."""

    alt: Request
    cand: Candidate
    consumed: dict[str, ddev.Qty] | None = None
    counted: bool = False


_UNSET = object()


def _applies(constraint: Constraint, request_name: str) -> bool:
    if not constraint.requests:
        return True
    parent = request_name.split("/", 1)[0]
    return request_name in constraint.requests or parent in constraint.requests


def _attr(c: Candidate, name: str) -> object:
    """The attribute's value with its type (upstream compares typed values: int 1 is not true)."""
    v = c.device.attributes.get(name, _UNSET)
    return v if v is _UNSET else (type(v), v)


class Counters:
    """``checkAvailableCounters``: each pool's counters left by allocated devices (computed on
    first use), and what this search's picks consume on top."""

    def __init__(self, allocated: Callable[[DeviceID], bool]) -> None:
        self._allocated = allocated
        self._available: dict[str, dict[str, dict[str, Decimal]]] = {}
        self._used: dict[str, dict[str, dict[str, Decimal]]] = {}

    def take(self, cand: Candidate) -> bool:
        """Consume the device's counters if every counter of its pool stays covered."""
        pool = cand.pool
        if pool is None:
            return False  # counters without a pool to account them: never hand them out
        avail = self._available.get(pool.id)
        if avail is None:
            avail = pool.available(lambda name: self._allocated((pool.driver, pool.name, name)))
            self._available[pool.id] = avail
        used = self._used.setdefault(pool.id, {})
        _add(used, cand.device.consumes_counters, 1)
        for cs, counters in avail.items():
            got = used.get(cs) or {}
            if any(have < got.get(name, 0) for name, have in counters.items()):
                _add(used, cand.device.consumes_counters, -1)
                return False
        return True

    def give_back(self, cand: Candidate) -> None:
        assert cand.pool is not None
        _add(self._used[cand.pool.id], cand.device.consumes_counters, -1)


def _add(used: dict[str, dict[str, Decimal]], consumption: ddev.Consumption, sign: int) -> None:
    for cs, counters in consumption:
        into = used.setdefault(cs, {})
        for name, amount in counters:
            into[name] = into.get(name, Decimal(0)) + sign * amount


class Search:
    """The backtracking search; :meth:`run` gives each claim's picks, or None when nothing fits."""

    def __init__(
        self,
        claims: Sequence[ResourceClaim],
        options: Options,
        in_use: Mapping[DeviceID, Any] | frozenset[DeviceID] | set[DeviceID],
        shared: Mapping[DeviceID, Mapping[str, Decimal]],
        deadline: float | None,
    ) -> None:
        self.claims = claims
        self.options = options
        self.shared = shared
        self.deadline = deadline
        self.taken: dict[DeviceID, set[int]] = {}
        """``allocatingDevices``: exclusive devices picked in this search, by claim index."""
        self.sharing: dict[DeviceID, tuple[int, dict[str, Decimal]]] = {}
        """``allocatingCapacity``: shares picked in this search (count, capacity they consume)."""
        allocated = in_use.allocated if isinstance(in_use, AllocatedState) else in_use.__contains__
        self.counters = Counters(allocated)
        self.chosen: list[list[Pick]] = [[] for _ in claims]
        self.steps = 0

    def run(self) -> list[list[Pick]] | None:
        return self.chosen if self._fill(0, 0) else None

    def _fill(self, ci: int, ri: int) -> bool:
        """Fill request ``ri`` of claim ``ci`` and everything after it."""
        if ci == len(self.claims):
            return True
        if ri == len(self.claims[ci].requests):
            return self._fill(ci + 1, 0)
        for ai, alt in enumerate(self.claims[ci].requests[ri].alternatives):
            opts = self.options[ci][ri][ai]
            need = len(opts) if alt.mode == ALL else alt.count
            if need == 0 or len(opts) < need:
                continue
            if need > ALLOCATION_RESULTS_MAX_SIZE - len(self.chosen[ci]):
                continue  # upstream's errAllocationResultMaxSizeExceeded: this alternative cannot be the one
            done = self._pick_all(ci, ri, alt, opts, 0) if alt.mode == ALL else self._pick(ci, ri, alt, opts, need, 0)
            if done:
                return True
        return False

    def _tick(self) -> None:
        self.steps += 1
        if not self.steps & _CHECK_MASK:
            check_deadline(self.deadline)

    def _pick(self, ci: int, ri: int, alt: Request, opts: list[Candidate], need: int, start: int) -> bool:
        """Pick ``need`` more devices for ``alt`` from ``opts[start:]``, then go on to the next request."""
        if need == 0:
            return self._fill(ci, ri + 1)
        for i in range(start, len(opts) - need + 1):
            self._tick()
            cand = opts[i]
            if not self._free(ci, alt, cand) or not self._take(ci, alt, cand, must=False):
                continue
            if self._pick(ci, ri, alt, opts, need - 1, i + 1):
                return True
            self._undo(ci)
        return False

    def _pick_all(self, ci: int, ri: int, alt: Request, opts: list[Candidate], k: int) -> bool:
        """``allocationMode: All``: every device of ``opts`` or none (a constraint that rejects one
        is an error, as upstream: the claim contradicts itself)."""
        if k == len(opts):
            return self._fill(ci, ri + 1)
        self._tick()
        cand = opts[k]
        if not self._free(ci, alt, cand) or not self._take(ci, alt, cand, must=True):
            return False
        if self._pick_all(ci, ri, alt, opts, k + 1):
            return True
        self._undo(ci)
        return False

    def _free(self, ci: int, alt: Request, cand: Candidate) -> bool:
        """Not picked in this search, or (admin access) not for this claim."""
        holders = self.taken.get(cand.id)
        return not holders or (alt.admin_access and ci not in holders)

    def _constraints_ok(self, ci: int, req_name: str, cand: Candidate) -> bool:
        for con in self.claims[ci].constraints:
            if not _applies(con, req_name):
                continue
            name = con.match_attribute or con.distinct_attribute
            val = _attr(cand, name)
            if val is _UNSET:
                return False
            for p in self.chosen[ci]:
                if _applies(con, p.alt.name) and (_attr(p.cand, name) == val) != bool(con.match_attribute):
                    return False
        return True

    def _take(self, ci: int, alt: Request, cand: Candidate, must: bool) -> bool:
        """``allocateDevice``: counters, constraints, capacity; records the pick when it fits."""
        dev = cand.device
        counted = False
        if dev.consumes_counters and not (dev.allow_multiple and (cand.id in self.shared or cand.id in self.sharing)):
            if not self.counters.take(cand):
                return False
            counted = True
        if not self._constraints_ok(ci, alt.name, cand):
            if counted:
                self.counters.give_back(cand)
            if must:
                raise AllocationError(
                    f"claim {claim_ref(self.claims[ci])}, request {alt.name}: cannot add device "
                    f"{device_id_str(cand.id)} because a claim constraint would not be satisfied"
                )
            return False
        consumed = self._share(ci, alt, cand) if dev.allow_multiple else None
        if dev.allow_multiple and consumed is None:
            if counted:
                self.counters.give_back(cand)
            return False
        if not dev.allow_multiple:
            self.taken.setdefault(cand.id, set()).add(ci)
        self.chosen[ci].append(Pick(alt, cand, consumed, counted))
        return True

    def _share(self, ci: int, alt: Request, cand: Candidate) -> dict[str, ddev.Qty] | None:
        """A share of a shareable device: what it consumes, if the device's capacity (minus other
        claims' shares and this search's) admits it; None otherwise."""
        dev = cand.device
        count, mine = self.sharing.get(cand.id, (0, {}))
        try:
            if not ddev.fits(alt.capacity, dev.capacity, self.shared.get(cand.id), mine):
                return None
            consumed = ddev.consumed_capacity(alt.capacity, dev.capacity)
        except ddev.CapacityError as e:
            raise AllocationError(
                f"claim {claim_ref(self.claims[ci])}, request {alt.name}: rechecking capacity for device "
                f"{device_id_str(cand.id)}: {e}"
            ) from None
        total = dict(mine)
        for k, q in consumed.items():
            total[k] = total.get(k, Decimal(0)) + q.value
        self.sharing[cand.id] = (count + 1, total)
        return consumed

    def _undo(self, ci: int) -> None:
        """Take back claim ``ci``'s latest pick."""
        p = self.chosen[ci].pop()
        if p.consumed is not None:
            count, total = self.sharing[p.cand.id]
            if count == 1:
                del self.sharing[p.cand.id]
            else:
                left = {k: v - (p.consumed[k].value if k in p.consumed else 0) for k, v in total.items()}
                self.sharing[p.cand.id] = (count - 1, left)
        else:
            holders = self.taken[p.cand.id]
            holders.discard(ci)
            if not holders:
                del self.taken[p.cand.id]
        if p.counted:
            self.counters.give_back(p.cand)
