"""The structured device allocator: upstream's ``k8s.io/dynamic-resource-allocation/structured``
kept beside the DynamicResources plugin that drives it, apart from the API projections in
:mod:`custom_scheduler.api.dra` (as upstream keeps the allocator apart from the API types).

:func:`allocate` is the pure part of upstream's structured allocator, the ``incubating`` variant
that 1.37 selects with its default gates (consumable capacity and binding conditions are beta and
on, which the ``stable`` variant does not support): given the claims to allocate, the devices a
node reaches (pool by pool, see :mod:`custom_scheduler.api.dra_pools`) and the allocated state, it
finds one device per requested slot (``exactly`` with ``count`` or ``allocationMode: All``,
``firstAvailable`` subrequests in order) with the class's and the request's CEL selectors, and
backtracks (:mod:`custom_scheduler.plugins.dra_search`) over what depends on earlier picks:

- a device is taken once, except with ``adminAccess`` (not consumed: it may be allocated while
  in use, only not twice to the same claim) or ``allowMultipleAllocations`` (shared while its
  capacity lasts; each share gets a ``shareID`` and its ``consumedCapacity``);
- a device that consumes counters fits only while its pool's counter sets, minus what every
  allocated, assumed, pending and just-picked device consumes, stay non-negative;
- a device tainted NoSchedule/NoExecute is skipped unless the request tolerates the taint;
- ``matchAttribute`` and ``distinctAttribute`` constraints.

Error messages are upstream's (``claim ns/name: selector #0: CEL compile error: ...``), so a user
reads the same reason as from kube-scheduler. CEL lives in :mod:`custom_scheduler.plugins.dra_cel`.

DynamicResources calls it once per node of every pod, so what does not depend on the node is done
once per pod (:class:`Prepared`, built in PreFilter, as upstream builds its allocator there): the
constraints checked, each request's class looked up, the answer for a node without devices. Which of
a node's devices a pair of selector lists matches is kept on that node's devices (they change only
when its slices do), one plain ``exactly`` request takes its devices directly, and the allocation
results are written out (:class:`Chosen`) only for the node that gets the pod.

The search can be exponential, so, as upstream bounds it with ``DynamicResourcesArgs.filterTimeout``
through its context, :func:`allocate` takes a ``deadline`` (a :func:`time.monotonic` instant) and
raises :class:`AllocationTimeout` once it passed (checked every :data:`DEADLINE_CHECK_STEPS` picks
and after each request's selectors).
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from custom_scheduler.api import dra_devices as ddev
from custom_scheduler.api.dra import (
    ALL,
    Allocation,
    Candidate,
    DeviceClass,
    DeviceID,
    DeviceResult,
    Request,
    ResourceClaim,
    device_id_str,
)
from custom_scheduler.api.dra_pools import AllocatedState, NodeDevices
from custom_scheduler.plugins.dra_cel import DEVICE_MEMO_MAX, CELCache, CELError
from custom_scheduler.plugins.dra_search import (
    ALLOCATION_RESULTS_MAX_SIZE,
    DEADLINE_CHECK_STEPS,
    AllocationError,
    AllocationTimeout,
    Options,
    Pick,
    Search,
    check_deadline,
    claim_ref,
)

__all__ = [
    "ALLOCATION_RESULTS_MAX",
    "DEADLINE_CHECK_STEPS",
    "DEVICE_MEMO_MAX",
    "AllocationError",
    "AllocationTimeout",
    "CELCache",
    "CELError",
    "NodeUnschedulable",
    "allocate",
]

#: ``ErrFailedAllocationOnNode`` text when nothing fits and a pool reaching the node is invalid.
REASON_INVALID_POOLS = "invalid resource pools were encountered"

#: ``resourceapi.AllocationResultsMaxSize``: at most this many results in one claim's allocation
#: (API validation refuses a bigger ``status.allocation``, so the allocator never builds one).
ALLOCATION_RESULTS_MAX = ALLOCATION_RESULTS_MAX_SIZE

InUse = Mapping[DeviceID, Any] | frozenset[DeviceID] | set[DeviceID]

#: Selector pairs whose matches one node's devices keep (:func:`_matching_on`) before starting over.
MATCHED_MEMO_MAX = 32


class NodeUnschedulable(Exception):
    """Upstream's ``ErrFailedAllocationOnNode``: this node cannot serve the claims, for the reason in
    the message (Unschedulable, not an error: other nodes may)."""


def _missing_class(claim: ResourceClaim, req: Request) -> AllocationError:
    return AllocationError(
        f"claim {claim_ref(claim)}, request {req.name}: could not retrieve device class {req.device_class}: "
        f'deviceclass.resource.k8s.io "{req.device_class}" not found'
    )


def _matching(
    claim: ResourceClaim,
    req: Request,
    cls: DeviceClass | None,
    candidates: Sequence[Candidate],
    cels: CELCache,
) -> list[Candidate]:
    """The candidates that pass the request's class selectors, then its own, in order (``cls``:
    the request's class, None when it does not exist)."""
    if cls is None:
        raise _missing_class(claim, req)
    if not cls.selectors and not req.selectors:
        return list(candidates)
    of_class, of_claim = f"class {cls.name}", f"claim {claim_ref(claim)}"
    return [
        c
        for c in candidates
        if _selected(cls.selectors, c, cels, of_class) and _selected(req.selectors, c, cels, of_claim)
    ]


def _matching_on(
    claim: ResourceClaim, req: Request, cls: DeviceClass | None, candidates: Sequence[Candidate], cels: CELCache
) -> tuple[list[Candidate], bool]:
    """:func:`_matching`, kept on a node's :class:`~custom_scheduler.api.dra_pools.NodeDevices` per
    pair of selector lists (every pod of a burst asks the same of the same devices, and the answer
    depends on the devices alone), and whether every match is a plain device (``simple``). Only an
    answer without error is kept, so an error is raised again, with its claim's name, every time."""
    if cls is None:
        raise _missing_class(claim, req)
    memo = candidates.matched if isinstance(candidates, NodeDevices) else None
    key = (cls.selectors, req.selectors)
    got = memo.get(key) if memo is not None else None
    if got is None:
        found = _matching(claim, req, cls, candidates, cels)
        got = (found, all(c.device.simple for c in found))
        if memo is not None:
            if len(memo) >= MATCHED_MEMO_MAX:
                memo.clear()
            memo[key] = got
    return got


def _selected(selectors: Sequence[str], c: Candidate, cels: CELCache, owner: str) -> bool:
    """Whether every one of ``owner``'s selectors accepts the device; a CEL error is an
    AllocationError with upstream's message (``class gpu: selector #0 on device ...: CEL ...``)."""
    for i, expr in enumerate(selectors):
        try:
            if not cels.matches(expr, c.device):
                return False
        except CELError as e:
            expression_level = str(e).startswith(("compile error", "cost error"))
            where = "" if expression_level else f" on device {device_id_str(c.id)}"
            raise AllocationError(f"{owner}: selector #{i}{where}: CEL {e}") from None
    return True


def _capacity_fits(claim: ResourceClaim, req: Request, c: Candidate, allocated: Mapping[str, Decimal] | None) -> bool:
    """``CmpRequestOverCapacity`` on what other claims hold; a device with nothing to check (no
    capacity request, no policy, not shared) fits without computing."""
    if req.capacity is None and c.device.simple:
        return True
    try:
        return ddev.fits(req.capacity, c.device.capacity, allocated, None)
    except ddev.CapacityError as e:
        raise AllocationError(
            f"claim {claim_ref(claim)}, request {req.name}: checking capacity for device {device_id_str(c.id)}: {e}"
        ) from None


def _usable(claim: ResourceClaim, req: Request, c: Candidate, in_use: InUse, shared: Mapping[DeviceID, Any]) -> bool:
    """What does not depend on the other picks: free (unless admin access), no untolerated taint,
    capacity left after other claims."""
    if not req.admin_access and c.id in in_use:
        return False
    if c.device.taints and ddev.taint_blocks(c.device.taints, req.tolerations):
        return False
    return _capacity_fits(claim, req, c, shared.get(c.id))


def _all_devices(
    claim: ResourceClaim, req: Request, matching: list[Candidate], in_use: InUse, bad_pools: Sequence[ddev.Pool]
) -> tuple[list[Candidate], int]:
    """``allocationMode: All``: every matching device whose static capacity admits the request,
    or nothing when one of them cannot be had, and how many "all" is (what counts against
    :data:`ALLOCATION_RESULTS_MAX`); an error when a pool is incomplete or invalid."""
    for p in bad_pools:
        state = "being updated" if p.incomplete else "invalid"
        raise AllocationError(
            f"claim {claim_ref(claim)}, request {req.name}: asks for all devices, "
            f"but resource pool {p.id} is currently {state}"
        )
    every = [c for c in matching if _capacity_fits(claim, req, c, None)]
    if any(not _usable(claim, req, c, in_use, {}) for c in every):
        return [], len(every)  # All means all: one device taken, tainted or full and it cannot fit
    return every, len(every)


def check_claim_limit(claim: ResourceClaim, request: str, need: int, counted: int) -> int:
    """Upstream's check while gathering a claim's requests: ``need`` more devices (the fewest any
    alternative of ``request`` takes) on top of ``counted`` must stay within
    :data:`ALLOCATION_RESULTS_MAX`, or the claim can never be allocated (an error on any node).
    Returns the new count."""
    if need > ALLOCATION_RESULTS_MAX - counted:
        raise AllocationError(
            f"claim {claim_ref(claim)}, request {request}: adding {need} devices exceeds the claim limit "
            f"of {ALLOCATION_RESULTS_MAX}, with {counted} already accounted for"
        )
    return counted + need


def _constraint_error(claims: Sequence[ResourceClaim]) -> str:
    """The first constraint no allocator supports, in upstream's words ("" when none)."""
    for claim in claims:
        for i, con in enumerate(claim.constraints):
            if not con.match_attribute and not con.distinct_attribute:
                return f"claim {claim_ref(claim)}, constraint #{i}: empty constraint (unsupported constraint type?)"
    return ""


class Prepared:
    """One pod's claims made ready for :meth:`allocate` on each node: what does not depend on the
    node is done once (upstream's allocator is likewise built once per pod in PreFilter): the
    constraints checked, each request's class looked up, and the answer for a node without devices
    (it depends on the claims alone). The errors keep their place: :meth:`allocate` raises them
    on each node in the order the per-node computation would meet them."""

    def __init__(self, claims: Sequence[ResourceClaim], classes: Callable[[str], DeviceClass | None]) -> None:
        self.claims = claims
        self.constraint_error = _constraint_error(claims)
        self.classes: dict[str, DeviceClass | None] = {
            alt.device_class: classes(alt.device_class)
            for claim in claims
            for dr in claim.requests
            for alt in dr.alternatives
        }
        self.has_requests = any(c.requests for c in claims)
        self.single = _single(claims) if not self.constraint_error else None
        """The one claim and its one ``exactly`` request, when that is all (the common shape)."""
        self._without_devices: AllocationError | bool | None = False
        """The answer for a node without devices: an error, None (nothing fits), False: not yet known."""

    def allocate(
        self,
        candidates: Sequence[Candidate],
        in_use: InUse,
        cels: CELCache,
        node_name: str,
        *,
        deadline: float | None = None,
    ) -> list[Allocation] | None:
        """:func:`allocate` on one node with this pod's claims."""
        got = self.choose(candidates, in_use, cels, node_name, deadline=deadline)
        return None if got is None else got.allocations()

    def choose(
        self,
        candidates: Sequence[Candidate],
        in_use: InUse,
        cels: CELCache,
        node_name: str,
        *,
        deadline: float | None = None,
    ) -> Chosen | None:
        """:meth:`allocate`'s devices, before they are written out as allocation results."""
        if self.constraint_error:
            raise AllocationError(self.constraint_error)
        bad_pools: Sequence[ddev.Pool] = getattr(candidates, "bad_pools", ())
        if not candidates and not bad_pools and self.has_requests:
            self._no_devices()
            return None
        if self.single is not None:
            direct = self._take_direct(candidates, in_use, cels, deadline)
            if direct is not None:
                alt = self.single[1]
                if direct and _local_device(direct[0]):
                    return Chosen(self.claims, node_name, direct=(alt, direct))  # its node selector cannot fail
                return self._chosen([[Pick(alt, c) for c in direct]] if direct else None, bad_pools, node_name)
        options = self._options(candidates, in_use, cels, deadline)
        chosen = _take_first(self.claims, options)
        if chosen is None:
            shared = in_use.shared if isinstance(in_use, AllocatedState) else {}
            chosen = Search(self.claims, options, in_use, shared, deadline).run()
        return self._chosen(chosen, bad_pools, node_name)

    def _chosen(self, chosen: list[list[Pick]] | None, bad_pools: Sequence[ddev.Pool], node_name: str) -> Chosen | None:
        """The search's outcome: None when nothing fits (NodeUnschedulable when invalid pools
        may be why), else the picks, once their node selectors are known to be buildable."""
        if chosen is None:
            if any(p.invalid for p in bad_pools):
                raise NodeUnschedulable(REASON_INVALID_POOLS)
            return None
        for claim, picks in zip(self.claims, chosen, strict=True):
            if _may_fail(picks):
                _node_selector(claim, picks, node_name)  # its error is this node's
        return Chosen(self.claims, node_name, picks=chosen)

    def _take_direct(
        self, candidates: Sequence[Candidate], in_use: InUse, cels: CELCache, deadline: float | None
    ) -> list[Candidate] | None:
        """The single request of :attr:`single` when every device it matches is plain: the first
        ``count`` free ones, in order, as the search would take them (it has nothing to backtrack
        over), or [] when there are not enough (the search fails too). None: take the general
        way (the request or a device needs the full checks)."""
        assert self.single is not None
        claim, alt = self.single
        matching, plain = _matching_on(claim, alt, self.classes[alt.device_class], candidates, cels)
        if not plain or alt.capacity is not None:
            return None
        check_deadline(deadline)
        need = alt.count
        if alt.admin_access:
            free = matching[:need]
        else:
            free = []
            for c in matching:
                if c.id not in in_use:
                    free.append(c)
                    if len(free) == need:
                        break
        if need == 0 or len(free) < need:
            return []
        return free

    def _no_devices(self) -> None:
        """A node without devices (half the nodes of a typical DRA cluster): nothing can fit, but a
        missing class or a claim over the result limit is still the same error as with devices, in
        the same order. Computed on the first such node, then repeated."""
        got = self._without_devices
        if got is False:
            try:
                got = None
                for claim in self.claims:
                    counted = 0
                    for dr in claim.requests:
                        for alt in dr.alternatives:
                            if self.classes[alt.device_class] is None:
                                raise _missing_class(claim, alt)
                        fewest = min(0 if alt.mode == ALL else alt.count for alt in dr.alternatives)
                        counted = check_claim_limit(claim, dr.name, fewest, counted)
            except AllocationError as e:
                got = e
            self._without_devices = got
        if isinstance(got, AllocationError):
            raise AllocationError(str(got))

    def _options(
        self, candidates: Sequence[Candidate], in_use: InUse, cels: CELCache, deadline: float | None
    ) -> Options:
        """What each alternative of each request may take (selectors and the static checks once).
        Raises AllocationTimeout when ``deadline`` passed (checked after each request)."""
        shared = in_use.shared if isinstance(in_use, AllocatedState) else {}
        bad_pools = getattr(candidates, "bad_pools", ())
        options: Options = []
        for claim in self.claims:
            per_req = []
            counted = 0
            for dr in claim.requests:
                per_alt = []
                fewest = None
                for alt in dr.alternatives:
                    matching, plain = _matching_on(claim, alt, self.classes[alt.device_class], candidates, cels)
                    if alt.mode == ALL:
                        devices, n = _all_devices(claim, alt, matching, in_use, bad_pools)
                        per_alt.append(devices)
                    else:
                        per_alt.append(_usable_of(claim, alt, matching, plain, in_use, shared))
                        n = alt.count
                    fewest = n if fewest is None else min(fewest, n)
                counted = check_claim_limit(claim, dr.name, fewest or 0, counted)
                per_req.append(per_alt)
                check_deadline(deadline)
            options.append(per_req)
        return options


def _single(claims: Sequence[ResourceClaim]) -> tuple[ResourceClaim, Request] | None:
    """The claim and request when ``claims`` are one claim with one ``exactly`` request for a
    count of devices within the result limit, and no constraints."""
    if len(claims) != 1 or len(claims[0].requests) != 1 or claims[0].constraints:
        return None
    alts = claims[0].requests[0].alternatives
    if len(alts) != 1 or alts[0].mode == ALL or alts[0].count > ALLOCATION_RESULTS_MAX:
        return None
    return claims[0], alts[0]


def _usable_of(
    claim: ResourceClaim,
    alt: Request,
    matching: list[Candidate],
    plain: bool,
    in_use: InUse,
    shared: Mapping[DeviceID, Any],
) -> list[Candidate]:
    """The matching devices :func:`_usable` admits. Plain devices (no taints, no capacity, not
    shared) asked for without a capacity request: only "is it free" is left to ask."""
    if plain and alt.capacity is None:
        return list(matching) if alt.admin_access else [c for c in matching if c.id not in in_use]
    return [c for c in matching if _usable(claim, alt, c, in_use, shared)]


def allocate(
    claims: Sequence[ResourceClaim],
    candidates: Sequence[Candidate],
    in_use: InUse,
    classes: Callable[[str], DeviceClass | None],
    cels: CELCache,
    node_name: str,
    *,
    deadline: float | None = None,
) -> list[Allocation] | None:
    """Allocate every claim of ``claims`` from ``candidates`` (a node's devices; a
    :class:`~custom_scheduler.api.dra_pools.NodeDevices` also names its unusable pools), or None
    when they do not fit. ``in_use`` is the allocated state (an
    :class:`~custom_scheduler.api.dra_pools.AllocatedState` also knows the shared devices; a plain
    set: devices held exclusively). Raises AllocationError for what no node can fix (CEL errors,
    missing classes), NodeUnschedulable when invalid pools may be why nothing fits, and
    AllocationTimeout when ``deadline`` (a :func:`time.monotonic` instant) passes first.

    One node's allocation; DynamicResources keeps one :class:`Prepared` per pod instead."""
    return Prepared(claims, classes).allocate(candidates, in_use, cels, node_name, deadline=deadline)


def _take_first(claims: Sequence[ResourceClaim], options: Options) -> list[list[Pick]] | None:
    """The common shape (one claim, one request with one alternative, no constraints, plain
    devices): the search would take the first ``need`` matching devices in order, one step each,
    with nothing to backtrack over; take them directly. None: let the search decide."""
    if len(claims) != 1 or len(claims[0].requests) != 1 or claims[0].constraints:
        return None
    only = claims[0].requests[0]
    if len(only.alternatives) != 1:
        return None
    alt, opts = only.alternatives[0], options[0][0][0]
    need = len(opts) if alt.mode == ALL else alt.count
    if need == 0 or len(opts) < need or not all(c.device.simple for c in opts[:need]):
        return None
    return [[Pick(alt, c) for c in opts[:need]]]


def _result(p: Pick) -> DeviceResult:
    shared = p.cand.device.allow_multiple
    return DeviceResult(
        p.alt.name,
        *p.cand.id,
        admin_access=p.alt.admin_access,
        tolerations=p.alt.tolerations_raw,
        share_id=str(uuid.uuid4()) if shared else "",
        consumed=tuple((k, q.text) for k, q in (p.consumed or {}).items()) if shared else (),
        binding_conditions=p.cand.device.binding_conditions,
        binding_failure_conditions=p.cand.device.binding_failure_conditions,
    )


@dataclass(frozen=True, slots=True)
class Chosen:
    """The devices picked for each claim on one node. Filter finds them on every feasible node,
    but only the node the pod goes to (or one scored by them) needs the allocation results
    written out (:meth:`allocations`). Building a node selector may fail, which is that node's
    Filter error, so :meth:`Prepared.choose` builds it at once wherever it could (see
    :func:`_may_fail`)."""

    claims: Sequence[ResourceClaim]
    node_name: str
    picks: list[list[Pick]] | None = None
    """Each claim's picks (None: ``direct`` holds the one claim's)."""
    direct: tuple[Request, list[Candidate]] | None = None
    """The one request of the one claim and its devices (no :class:`Pick` made for most nodes)."""

    def all_picks(self) -> list[list[Pick]]:
        if self.picks is not None:
            return self.picks
        assert self.direct is not None
        alt, devices = self.direct
        return [[Pick(alt, c) for c in devices]]

    def allocations(self) -> list[Allocation]:
        return [
            Allocation(tuple(_result(p) for p in picks), _node_selector(claim, picks, self.node_name))
            for claim, picks in zip(self.claims, self.all_picks(), strict=True)
        ]


def _local_device(c: Candidate) -> bool:
    """The device is local to one node, or binds to the node it is allocated for: the node
    selector is that node's name, whatever the other devices are."""
    s, d = c.slice, c.device
    return bool(d.node_name if s.per_device else s.node_name) or d.binds_to_node


def _may_fail(picks: Sequence[Pick]) -> bool:
    """Whether :func:`_node_selector` may raise for these picks: not when the first is local (it
    answers from that one alone)."""
    return bool(picks) and not _local_device(picks[0].cand)


def _node_selector(claim: ResourceClaim, picks: Sequence[Pick], node_name: str) -> dict[str, Any] | None:
    """``createNodeSelector``: this node (``metadata.name``) when a device is local to one node;
    else the one-term node selectors of the devices' slices (or of the devices, with per-device node
    selection) merged into one term; None (everywhere) when no device restricts it."""
    fields: list[dict[str, Any]] = []
    exprs: list[dict[str, Any]] = []
    for p in picks:
        s, d = p.cand.slice, p.cand.device
        name, raw = (d.node_name, d.node_selector_raw) if s.per_device else (s.node_name, s.node_selector_raw)
        if name or d.binds_to_node:  # local to one node, or binds to the node it is allocated for
            return {
                "nodeSelectorTerms": [
                    {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node_name]}]}
                ]
            }
        terms = (raw or {}).get("nodeSelectorTerms") or []
        if len(terms) > 1:
            raise AllocationError(
                f"create NodeSelector for claim {claim.name}: "
                f"unsupported ResourceSlice.NodeSelector with {len(terms)} terms"
            )
        if terms:
            _merge(terms[0].get("matchFields") or [], fields)
            _merge(terms[0].get("matchExpressions") or [], exprs)
    if not fields and not exprs:
        return None
    term: dict[str, Any] = {}
    if exprs:
        term["matchExpressions"] = exprs
    if fields:
        term["matchFields"] = fields
    return {"nodeSelectorTerms": [term]}


def _merge(src: Sequence[Mapping[str, Any]], into: list[dict[str, Any]]) -> None:
    """``addNewNodeSelectorRequirements``: add each requirement not already there (same key,
    operator and set of values)."""
    for r in src:
        values = set(r.get("values") or ())
        if not any(
            x.get("key") == r.get("key")
            and x.get("operator") == r.get("operator")
            and set(x.get("values") or ()) == values
            for x in into
        ):
            into.append(dict(r))
