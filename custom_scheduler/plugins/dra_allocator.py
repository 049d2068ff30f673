"""The structured device allocator: upstream's ``k8s.io/dynamic-resource-allocation/structured``
kept beside the DynamicResources plugin that drives it, apart from the API projections in
:mod:`custom_scheduler.api.dra` (as upstream keeps the allocator apart from the API types).

:func:`allocate` is the pure part of upstream's structured allocator: given the claims to allocate,
the devices a node reaches and the devices already in use, it finds one device per requested slot
(``exactly`` with ``count`` or ``allocationMode: All``, ``firstAvailable`` subrequests in order),
with the class's and the request's CEL selectors, never the same device twice, and
``matchAttribute`` constraints, backtracking when a later choice fails. Error messages are
upstream's (``claim ns/name: selector #0: CEL compile error: ...``), so a user reads the same reason
as from kube-scheduler. :class:`CELCache` compiles each selector once.

The search can be exponential (several requests whose ``matchAttribute`` constraint fails only at
the last pick try every combination before giving up), so, as upstream bounds it with
``DynamicResourcesArgs.filterTimeout`` through its context, :func:`allocate` takes a ``deadline``
(a :func:`time.monotonic` instant) and raises :class:`AllocationTimeout` once it passed. The clock
is read every :data:`DEADLINE_CHECK_STEPS` picks and after each request's selectors, so the check
costs nothing measurable and a runaway search still stops within a few milliseconds of its deadline.
"""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from custom_scheduler.api.dra import (
    ALL,
    Allocation,
    Candidate,
    Constraint,
    Device,
    DeviceClass,
    DeviceID,
    DeviceResult,
    Request,
    ResourceClaim,
    ResourceSlice,
    device_id_str,
)

# --- CEL ----------------------------------------------------------------------------------------

_DOMAIN_LOOKUP = re.compile(r"""\b(attributes|capacity)\s*\[\s*["']([^"']+)["']\s*\]""")


class CELError(Exception):
    """A selector that does not compile or fails on a device; the message is upstream's cause."""


@dataclass(frozen=True, slots=True)
class Compiled:
    program: Any
    error: str
    domains: tuple[tuple[str, str], ...]
    """(``attributes``/``capacity``, domain) pairs the expression indexes: upstream's maps return an
    empty map for an unknown domain, so those are filled in before evaluating."""


#: Selector outcomes kept per device (Device.cel_results) before that memo starts over.
DEVICE_MEMO_MAX = 64


class CELCache:
    """Compile each selector once (per process, shared by every cycle); thread-safe."""

    def __init__(self, max_size: int = 10_000) -> None:
        self._lock = threading.Lock()
        self._cache: dict[str, Compiled] = {}
        self._max = max_size

    def get(self, expr: str) -> Compiled:
        got = self._cache.get(expr)
        if got is not None:
            return got
        try:
            # Imported on first use: the package loads its interactive CLI (prompt_toolkit) on
            # import, ~0.1 s of every start-up that clusters without DRA would pay for nothing.
            import cel

            c = Compiled(cel.compile(expr), "", tuple(sorted(set(_DOMAIN_LOOKUP.findall(expr)))))
        except Exception as e:  # the library raises ValueError; anything else is as bad
            c = Compiled(None, _first_line(str(e)) or type(e).__name__, ())
        with self._lock:
            if len(self._cache) >= self._max:
                self._cache.clear()
            self._cache[expr] = c
        return c

    def matches(self, expr: str, device: Device) -> bool:
        """Evaluate ``expr`` on ``device`` (memoised on the device); raises CELError (message: the
        cause) on failure, every time it is asked, as the evaluation would."""
        memo = device.cel_results
        got = memo.get(expr)
        if got is None:
            got = self._evaluate(expr, device)
            if len(memo) >= DEVICE_MEMO_MAX:
                memo.clear()  # a device sees few distinct selectors; bound it anyway
            memo[expr] = got
        if got is True or got is False:
            return got
        raise CELError(got)

    def _evaluate(self, expr: str, device: Device) -> bool | str:
        """The outcome of ``expr`` on ``device``: the bool, or the CELError message."""
        try:
            return self._execute(expr, device)
        except CELError as e:
            return str(e)

    def _execute(self, expr: str, device: Device) -> bool:
        c = self.get(expr)
        if c.program is None:
            raise CELError(f"compile error: {c.error}")
        inp = device.cel_input
        dev = inp["device"]
        missing = [(m, d) for m, d in c.domains if d not in dev[m]]
        if missing:
            dev = {**dev, "attributes": dict(dev["attributes"]), "capacity": dict(dev["capacity"])}
            for m, d in missing:
                dev[m][d] = {}
            inp = {"device": dev}
        try:
            out = c.program.execute(inp)
        except KeyError as e:
            raise CELError(f"runtime error: no such key: {e.args[0] if e.args else e}") from None
        except Exception as e:
            raise CELError(f"runtime error: {_first_line(str(e)) or type(e).__name__}") from None
        if not isinstance(out, bool):
            raise CELError(f"runtime error: expression must evaluate to bool, got {type(out).__name__}")
        return out


def _first_line(s: str) -> str:
    return s.strip().splitlines()[0] if s.strip() else ""


# --- the allocator ------------------------------------------------------------------------------


class AllocationError(Exception):
    """Allocation cannot even be attempted (a selector's CEL error, a missing class): an error,
    not "does not fit"."""


class AllocationTimeout(Exception):
    """The search passed its deadline before finding an allocation or proving there is none
    (upstream's ``context.DeadlineExceeded`` from the allocator)."""


#: Picks between two looks at the clock (a power of two: the test is a mask). A pick costs about a
#: microsecond, so a search overruns its deadline by well under a millisecond.
DEADLINE_CHECK_STEPS = 256
_CHECK_MASK = DEADLINE_CHECK_STEPS - 1


def _check_deadline(deadline: float | None) -> None:
    if deadline is not None and time.monotonic() >= deadline:
        raise AllocationTimeout


def _claim_ref(claim: ResourceClaim) -> str:
    return f"{claim.namespace}/{claim.name}"


def _matching(
    claim: ResourceClaim,
    req: Request,
    classes: Callable[[str], DeviceClass | None],
    candidates: Sequence[Candidate],
    cels: CELCache,
) -> list[Candidate]:
    """The candidates that pass the request's class selectors, then its own, in order."""
    cls = classes(req.device_class)
    if cls is None:
        raise AllocationError(
            f"claim {_claim_ref(claim)}, request {req.name}: could not retrieve device class {req.device_class}: "
            f'deviceclass.resource.k8s.io "{req.device_class}" not found'
        )
    of_class, of_claim = f"class {cls.name}", f"claim {_claim_ref(claim)}"
    return [
        c
        for c in candidates
        if _selected(cls.selectors, c, cels, of_class) and _selected(req.selectors, c, cels, of_claim)
    ]


def _selected(selectors: Sequence[str], c: Candidate, cels: CELCache, owner: str) -> bool:
    """Whether every one of ``owner``'s selectors accepts the device; a CEL error is an
    AllocationError with upstream's message (``class gpu: selector #0 on device ...: CEL ...``)."""
    for i, expr in enumerate(selectors):
        try:
            if not cels.matches(expr, c.device):
                return False
        except CELError as e:
            where = "" if str(e).startswith("compile") else f" on device {device_id_str(c.id)}"
            raise AllocationError(f"{owner}: selector #{i}{where}: CEL {e}") from None
    return True


def _applies(constraint: Constraint, request_name: str) -> bool:
    if not constraint.requests:
        return True
    parent = request_name.split("/", 1)[0]
    return request_name in constraint.requests or parent in constraint.requests


_UNSET = object()

Options = list[list[list[list[Candidate]]]]
"""Per claim, per request, per alternative: the devices it may take (selectors evaluated once)."""

Picks = list[tuple[str, Candidate]]
"""One claim's choice: (request or subrequest name, device), in request order."""


def allocate(
    claims: Sequence[ResourceClaim],
    candidates: Sequence[Candidate],
    in_use: Mapping[DeviceID, Any] | frozenset[DeviceID] | set[DeviceID],
    classes: Callable[[str], DeviceClass | None],
    cels: CELCache,
    node_name: str,
    *,
    deadline: float | None = None,
) -> list[Allocation] | None:
    """Allocate every claim of ``claims`` from ``candidates`` (a node's devices), or None when they
    do not fit. Raises AllocationError for what no node can fix (CEL errors, missing classes), and
    AllocationTimeout when ``deadline`` (a :func:`time.monotonic` instant; None: no bound) passes
    before the answer is known."""
    if not candidates and any(c.requests for c in claims):
        # A node without devices (half the nodes of a typical DRA cluster): nothing can fit, but a
        # missing class is still the same error as with devices, in the same order.
        for claim in claims:
            for dr in claim.requests:
                for alt in dr.alternatives:
                    _matching(claim, alt, classes, (), cels)
        return None
    options = _options(claims, candidates, in_use, classes, cels, deadline)
    if len(claims) == 1 and len(claims[0].requests) == 1 and not claims[0].constraints:
        only = claims[0].requests[0]
        if len(only.alternatives) == 1:
            return _take_first(only.alternatives[0], options[0][0][0], node_name)
    chosen = _Search(claims, options, deadline).run()
    if chosen is None:
        return None
    return [_allocation(picks, node_name) for picks in chosen]


def _options(
    claims: Sequence[ResourceClaim],
    candidates: Sequence[Candidate],
    in_use: Mapping[DeviceID, Any] | frozenset[DeviceID] | set[DeviceID],
    classes: Callable[[str], DeviceClass | None],
    cels: CELCache,
    deadline: float | None = None,
) -> Options:
    """What each alternative of each request may take: the free devices its selectors accept;
    for ``allocationMode: All``, every device they accept, or none if one of those is in use.
    Raises AllocationTimeout when ``deadline`` passed (checked after each request: the selectors
    of thousands of devices are where a search without combinatorics spends its time)."""
    free = [c for c in candidates if c.id not in in_use]
    options: Options = []
    for claim in claims:
        per_req = []
        for dr in claim.requests:
            per_alt = []
            for alt in dr.alternatives:
                if alt.mode == ALL:
                    every = _matching(claim, alt, classes, candidates, cels)
                    # All means all: one device already taken by another claim and it cannot fit.
                    per_alt.append(every if every and all(c.id not in in_use for c in every) else [])
                else:
                    per_alt.append(_matching(claim, alt, classes, free, cels))
            per_req.append(per_alt)
            _check_deadline(deadline)
        options.append(per_req)
    return options


def _take_first(alt: Request, opts: list[Candidate], node_name: str) -> list[Allocation] | None:
    """The common shape (one claim, one request with one alternative, no constraints): the search
    would take the first ``need`` matching devices in order, one step each, with nothing to
    backtrack over; take them directly."""
    need = len(opts) if alt.mode == ALL else alt.count
    if need == 0 or len(opts) < need:
        return None
    return [_allocation([(alt.name, c) for c in opts[:need]], node_name)]


def _allocation(picks: Picks, node_name: str) -> Allocation:
    results = tuple(DeviceResult(rn, c.id[0], c.id[1], c.id[2]) for rn, c in picks)
    return Allocation(results, _node_selector([c.slice for _, c in picks], node_name))


class _Search:
    """Upstream's backtracking search: claims in order, each request in order, the first
    alternative (``firstAvailable`` subrequest) that can be filled, its ``need`` devices picked
    in candidate order, never one device twice, each pick checked against the claim's
    ``matchAttribute`` constraints; a dead end undoes the latest pick. Only ``deadline`` bounds
    it (AllocationTimeout), as only upstream's context bounds its search: no step limit turns
    a slow answer into a wrong "does not fit"."""

    def __init__(self, claims: Sequence[ResourceClaim], options: Options, deadline: float | None) -> None:
        self.claims = claims
        self.options = options
        self.deadline = deadline
        self.used: set[DeviceID] = set()
        self.chosen: list[Picks] = [[] for _ in claims]
        self.steps = 0

    def run(self) -> list[Picks] | None:
        return self.chosen if self._fill(0, 0) else None

    def _constraint_ok(self, ci: int, req_name: str, cand: Candidate) -> bool:
        for con in self.claims[ci].constraints:
            if not _applies(con, req_name):
                continue
            val = cand.device.attributes.get(con.match_attribute, _UNSET)
            if val is _UNSET:
                return False
            for rn, prev in self.chosen[ci]:
                if _applies(con, rn) and prev.device.attributes.get(con.match_attribute, _UNSET) != val:
                    return False
        return True

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
            if self._pick(ci, ri, alt, opts, need, 0):
                return True
        return False

    def _pick(self, ci: int, ri: int, alt: Request, opts: list[Candidate], need: int, start: int) -> bool:
        """Pick ``need`` more devices for ``alt`` from ``opts[start:]``, then go on to the next request."""
        if need == 0:
            return self._fill(ci, ri + 1)
        for i in range(start, len(opts) - need + 1):
            self.steps += 1
            if not self.steps & _CHECK_MASK:
                _check_deadline(self.deadline)
            cand = opts[i]
            if cand.id in self.used or not self._constraint_ok(ci, alt.name, cand):
                continue
            self.used.add(cand.id)
            self.chosen[ci].append((alt.name, cand))
            if self._pick(ci, ri, alt, opts, need - 1, i + 1):
                return True
            self.chosen[ci].pop()
            self.used.discard(cand.id)
        return False


def _node_selector(slices: Sequence[ResourceSlice], node_name: str) -> dict[str, Any] | None:
    """Where an allocation is usable: everywhere when every device is in an allNodes slice, the
    slices' common selector, else this node (``metadata.name`` field selector, as upstream)."""
    if all(s.all_nodes for s in slices):
        return None
    selectors = {repr(s.node_selector_raw) for s in slices if not s.all_nodes}
    if all(s.node_selector_raw is not None or s.all_nodes for s in slices) and len(selectors) == 1:
        first = next(s for s in slices if s.node_selector_raw is not None)
        return dict(first.node_selector_raw or {})
    return {"nodeSelectorTerms": [{"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node_name]}]}]}
