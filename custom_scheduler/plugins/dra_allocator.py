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
"""

from __future__ import annotations

import re
import threading
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


def _claim_ref(claim: ResourceClaim) -> str:
    return f"{claim.namespace}/{claim.name}"


def _matching(
    claim: ResourceClaim,
    req: Request,
    classes: Callable[[str], DeviceClass | None],
    candidates: Sequence[Candidate],
    cels: CELCache,
) -> list[Candidate]:
    cls = classes(req.device_class)
    if cls is None:
        raise AllocationError(
            f"claim {_claim_ref(claim)}, request {req.name}: could not retrieve device class {req.device_class}: "
            f'deviceclass.resource.k8s.io "{req.device_class}" not found'
        )
    out = []
    for c in candidates:
        ok = True
        for i, expr in enumerate(cls.selectors):
            try:
                if not cels.matches(expr, c.device):
                    ok = False
                    break
            except CELError as e:
                where = "" if str(e).startswith("compile") else f" on device {device_id_str(c.id)}"
                raise AllocationError(f"class {cls.name}: selector #{i}{where}: CEL {e}") from None
        if not ok:
            continue
        for i, expr in enumerate(req.selectors):
            try:
                if not cels.matches(expr, c.device):
                    ok = False
                    break
            except CELError as e:
                where = "" if str(e).startswith("compile") else f" on device {device_id_str(c.id)}"
                raise AllocationError(f"claim {_claim_ref(claim)}: selector #{i}{where}: CEL {e}") from None
        if ok:
            out.append(c)
    return out


def _applies(constraint: Constraint, request_name: str) -> bool:
    if not constraint.requests:
        return True
    parent = request_name.split("/", 1)[0]
    return request_name in constraint.requests or parent in constraint.requests


_UNSET = object()


def allocate(
    claims: Sequence[ResourceClaim],
    candidates: Sequence[Candidate],
    in_use: Mapping[DeviceID, Any] | frozenset[DeviceID] | set[DeviceID],
    classes: Callable[[str], DeviceClass | None],
    cels: CELCache,
    node_name: str,
    *,
    max_steps: int = 100_000,
) -> list[Allocation] | None:
    """Allocate every claim of ``claims`` from ``candidates`` (a node's devices), or None when they
    do not fit. Raises AllocationError for what no node can fix (CEL errors, missing classes)."""
    if not candidates and any(c.requests for c in claims):
        # A node without devices (half the nodes of a typical DRA cluster): nothing can fit, but a
        # missing class is still the same error as with devices, in the same order.
        for claim in claims:
            for dr in claim.requests:
                for alt in dr.alternatives:
                    _matching(claim, alt, classes, (), cels)
        return None
    free = [c for c in candidates if c.id not in in_use]
    # Per claim, per request, per alternative: the devices it may take (selectors evaluated once).
    options: list[list[list[list[Candidate]]]] = []
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
        options.append(per_req)

    if len(claims) == 1 and len(claims[0].requests) == 1 and not claims[0].constraints:
        only = claims[0].requests[0]
        if len(only.alternatives) == 1:
            # The common shape (one claim, one ``exactly`` request, no constraints): the search
            # below would take the first ``need`` matching devices in order, one step each, with
            # nothing to backtrack over; take them directly.
            alt, opts = only.alternatives[0], options[0][0][0]
            need = len(opts) if alt.mode == ALL else alt.count
            if need == 0 or len(opts) < need or need > max_steps:
                return None
            picked = opts[:need]
            results = tuple(DeviceResult(alt.name, c.id[0], c.id[1], c.id[2]) for c in picked)
            return [Allocation(results, _node_selector([c.slice for c in picked], node_name))]

    used: set[DeviceID] = set()
    chosen: list[list[tuple[str, Candidate]]] = [[] for _ in claims]
    steps = 0

    def constraint_ok(ci: int, req_name: str, cand: Candidate) -> bool:
        for con in claims[ci].constraints:
            if not _applies(con, req_name):
                continue
            val = cand.device.attributes.get(con.match_attribute, _UNSET)
            if val is _UNSET:
                return False
            for rn, prev in chosen[ci]:
                if _applies(con, rn) and prev.device.attributes.get(con.match_attribute, _UNSET) != val:
                    return False
        return True

    def fill(ci: int, ri: int) -> bool:
        nonlocal steps
        if ci == len(claims):
            return True
        if ri == len(claims[ci].requests):
            return fill(ci + 1, 0)
        dr = claims[ci].requests[ri]
        for ai, alt in enumerate(dr.alternatives):
            opts = options[ci][ri][ai]
            need = len(opts) if alt.mode == ALL else alt.count
            if need == 0 or len(opts) < need:
                continue
            if pick(ci, ri, alt, opts, need, 0):
                return True
        return False

    def pick(ci: int, ri: int, alt: Request, opts: list[Candidate], need: int, start: int) -> bool:
        nonlocal steps
        if need == 0:
            return fill(ci, ri + 1)
        for i in range(start, len(opts) - need + 1):
            steps += 1
            if steps > max_steps:
                return False
            cand = opts[i]
            if cand.id in used or not constraint_ok(ci, alt.name, cand):
                continue
            used.add(cand.id)
            chosen[ci].append((alt.name, cand))
            if pick(ci, ri, alt, opts, need - 1, i + 1):
                return True
            chosen[ci].pop()
            used.discard(cand.id)
        return False

    if not fill(0, 0):
        return None
    out = []
    for picks in chosen:
        results = tuple(DeviceResult(rn, c.id[0], c.id[1], c.id[2]) for rn, c in picks)
        out.append(Allocation(results, _node_selector([c.slice for _, c in picks], node_name)))
    return out


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
