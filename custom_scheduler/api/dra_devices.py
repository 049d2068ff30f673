"""DRA device extras of Kubernetes 1.37: taints and tolerations, DeviceTaintRules, consumable capacity.

Pure values and the arithmetic upstream does on them, kept apart from the slice/claim projections
in :mod:`custom_scheduler.api.dra` so that module stays a projection:

- **Taints** (``DRADeviceTaints``, GA and on in 1.37): a device's ``taints`` (from its slice and
  from every matching DeviceTaintRule, resource.k8s.io/v1) with effect NoSchedule or NoExecute
  keep it from being allocated unless the request tolerates them (``resourceclaim.ToleratesTaint``).
- **Consumable capacity** (``DRAConsumableCapacity`` + ``DRAFractionalCapacityRange``, beta and on):
  a device with ``allowMultipleAllocations`` is shared by several claims, each consuming part of
  its ``capacity``; ``requestPolicy`` (default, validRange, validValues) rounds a request up or
  refuses it. Ported from ``structured/internal/incubating/consumable_capacity.go``.

Quantities are exact :class:`~decimal.Decimal` values (the API's ``resource.Quantity`` is exact
too), each keeping the text it came from, because the allocation result carries the consumed
capacity back to the API server in upstream's format (the request's own text, or a rounded value
in the step's format).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from decimal import ROUND_CEILING, Decimal
from typing import Any

from custom_scheduler.api import quantity

JSON = Mapping[str, Any]

NO_SCHEDULE, NO_EXECUTE = "NoSchedule", "NoExecute"
#: Effects that keep a device from being allocated; others (``None``, unknown ones) are ignored.
BLOCKING_EFFECTS = frozenset({NO_SCHEDULE, NO_EXECUTE})
TAINT_RULE_API = "/apis/resource.k8s.io/v1/devicetaintrules"

_MAX_INT64 = Decimal(2**63 - 1)
_MILLI = Decimal("0.001")
_NOT_REPRESENTABLE = "capacity request cannot be represented in the device's range arithmetic"


# --- quantities ---------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Qty:
    """A quantity's exact value and the text it is written back as."""

    value: Decimal
    text: str


def qty(raw: object) -> Qty:
    """Parse a quantity from JSON; raises ``quantity.QuantityError`` on garbage."""
    text = str(raw).strip()
    return Qty(quantity.parse(text), text)


def _format_of(text: str) -> str:
    if any(text.endswith(s) for s in ("Ki", "Mi", "Gi", "Ti", "Pi", "Ei")):
        return "BinarySI"
    return "DecimalExponent" if "e" in text.lower() else "DecimalSI"


_DECIMAL_SUFFIX = {18: "E", 15: "P", 12: "T", 9: "G", 6: "M", 3: "k", 0: "", -3: "m", -6: "u", -9: "n"}


def format_quantity(value: Decimal, fmt: str) -> str:
    """``resource.Quantity``'s canonical text for ``value`` in format ``fmt`` (BinarySI,
    DecimalSI, DecimalExponent): the largest suffix that keeps the number whole."""
    if value == 0:
        return "0"
    if fmt == "BinarySI" and value == value.to_integral_value() and abs(value) >= 1024:
        n = int(value)
        for suffix, mult in (("Ei", 2**60), ("Pi", 2**50), ("Ti", 2**40), ("Gi", 2**30), ("Mi", 2**20), ("Ki", 2**10)):
            if n % mult == 0:
                return f"{n // mult}{suffix}"
        return str(n)
    for exp, suffix in _DECIMAL_SUFFIX.items():
        scaled = value.scaleb(-exp)
        if scaled == scaled.to_integral_value():
            if fmt == "DecimalExponent":
                return f"{int(scaled)}e{exp}" if exp else str(int(scaled))
            return f"{int(scaled)}{suffix}"
    nano = value.quantize(Decimal("1e-9"), rounding=ROUND_CEILING)  # Quantity rounds up to nano
    return f"{int(nano.scaleb(9))}n"


# --- taints -------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Taint:
    key: str
    value: str = ""
    effect: str = ""


@dataclass(frozen=True, slots=True)
class Toleration:
    key: str = ""
    operator: str = ""
    value: str = ""
    effect: str = ""

    def tolerates(self, taint: Taint) -> bool:
        """``resourceclaim.ToleratesTaint``: effect and key (empty: any), then Equal or Exists."""
        if self.effect and self.effect != taint.effect:
            return False
        if self.key and self.key != taint.key:
            return False
        if self.operator in ("", "Equal"):
            return self.value == taint.value
        return self.operator == "Exists"


def taint_from_json(doc: JSON) -> Taint:
    return Taint(str(doc.get("key", "")), str(doc.get("value") or ""), str(doc.get("effect") or ""))


def toleration_from_json(doc: JSON) -> Toleration:
    return Toleration(
        str(doc.get("key") or ""),
        str(doc.get("operator") or ""),
        str(doc.get("value") or ""),
        str(doc.get("effect") or ""),
    )


def taint_blocks(taints: tuple[Taint, ...], tolerations: tuple[Toleration, ...]) -> bool:
    """``taintPreventsAllocation``: a NoSchedule/NoExecute taint no toleration tolerates."""
    return any(t.effect in BLOCKING_EFFECTS and not any(tol.tolerates(t) for tol in tolerations) for t in taints)


@dataclass(frozen=True, slots=True)
class DeviceTaintRule:
    """A DeviceTaintRule (resource.k8s.io/v1): one taint for every device its selector picks.

    No selector picks nothing; an empty one picks every device; driver, pool and device narrow it
    (the resourceslice tracker's ``applyPatches``)."""

    name: str
    taint: Taint
    has_selector: bool = False
    driver: str | None = None
    pool: str | None = None
    device: str | None = None
    resource_version: str = ""

    def applies(self, driver: str, pool: str, device: str) -> bool:
        if not self.has_selector:
            return False
        if self.driver is not None and self.driver != driver:
            return False
        if self.pool is not None and self.pool != pool:
            return False
        return self.device is None or self.device == device


def device_taint_rule_from_json(doc: JSON) -> DeviceTaintRule:
    meta, spec = doc.get("metadata") or {}, doc.get("spec") or {}
    sel = spec.get("deviceSelector")

    def opt(k: str) -> str | None:
        v = (sel or {}).get(k)
        return None if v is None else str(v)

    return DeviceTaintRule(
        name=str(meta.get("name", "")),
        taint=taint_from_json(spec.get("taint") or {}),
        has_selector=sel is not None,
        driver=opt("driver"),
        pool=opt("pool"),
        device=opt("device"),
        resource_version=str(meta.get("resourceVersion", "")),
    )


# --- consumable capacity ------------------------------------------------------------------------


class CapacityError(Exception):
    """A capacity request or value the allocator cannot work with (upstream aborts allocation)."""


@dataclass(frozen=True, slots=True)
class Policy:
    default: Qty | None = None
    valid_values: tuple[Qty, ...] = ()
    min: Qty | None = None
    max: Qty | None = None
    step: Qty | None = None
    has_range: bool = False


@dataclass(frozen=True, slots=True)
class DeviceCapacity:
    value: Qty
    policy: Policy | None = None


def _opt_qty(raw: object) -> Qty | None:
    return None if raw is None else qty(raw)


def device_capacity_from_json(doc: JSON) -> DeviceCapacity:
    p = doc.get("requestPolicy")
    policy = None
    if p is not None:
        rng = p.get("validRange")
        policy = Policy(
            default=_opt_qty(p.get("default")),
            valid_values=tuple(qty(v) for v in p.get("validValues") or ()),
            min=_opt_qty((rng or {}).get("min")),
            max=_opt_qty((rng or {}).get("max")),
            step=_opt_qty((rng or {}).get("step")),
            has_range=rng is not None,
        )
    return DeviceCapacity(qty(doc.get("value", "0")), policy)


Capacities = Mapping[str, DeviceCapacity]
Consumed = Mapping[str, Decimal]


def _milli_ok(q: Decimal) -> bool:
    return q == q.quantize(_MILLI) if q.is_finite() else False


def _use_milli(p: Policy) -> bool:
    """``useMilli``: fractional arithmetic when min/max/step are whole milli values, step >= 1m."""
    if any(q is not None and not _milli_ok(q.value) for q in (p.min, p.max, p.step)):
        return False
    return p.step is None or p.step.value >= _MILLI


def _round_up_range(req: Qty, p: Policy) -> Qty:
    """``roundUpRange``: at least min, then up to the next step from min."""
    assert p.min is not None
    if req.value < p.min.value:
        return p.min
    if p.step is None:
        return req
    if _use_milli(p):
        if not _milli_ok(req.value):
            raise CapacityError(f"request {req.text} is not a representable milli value")
        start, step, got = p.min.value, p.step.value, req.value
    else:
        if req.value > _MAX_INT64:
            raise CapacityError(f"request {req.text} exceeds MaxInt64")
        start, step = p.min.value.to_integral_value(ROUND_CEILING), p.step.value.to_integral_value(ROUND_CEILING)
        got = req.value.to_integral_value(ROUND_CEILING)
    n = ((got - start) / step).to_integral_value(ROUND_CEILING)
    value = start + step * n
    if value > _MAX_INT64:
        raise CapacityError(f"rounding request {req.text} up to the next step passes MaxInt64")
    return Qty(value, format_quantity(value, _format_of(p.step.text)))


def _consumed_of(req: Qty | None, cap: DeviceCapacity) -> Qty:
    """``calculateConsumedCapacity``: what one request takes of one capacity."""
    p = cap.policy
    if req is None:
        return p.default if p is not None and p.default is not None else cap.value
    if p is None:
        return req
    if p.has_range and p.min is not None:
        return _round_up_range(req, p)
    if p.valid_values:
        return next((v for v in p.valid_values if req.value <= v.value), req)
    return req


def _violates(v: Decimal, p: Policy | None) -> bool:
    if p is None or (p.default is not None and v == p.default.value):
        return False
    if p.has_range:
        if p.max is not None and v > p.max.value:
            return True
        if p.step is not None and p.min is not None:
            if _use_milli(p):
                if not _milli_ok(v):
                    return True
                return (v - p.min.value) % p.step.value != 0
            ceil = Decimal.to_integral_value
            return (ceil(v, ROUND_CEILING) - ceil(p.min.value, ROUND_CEILING)) % ceil(p.step.value, ROUND_CEILING) != 0
        return False
    return bool(p.valid_values) and all(v != x.value for x in p.valid_values)


def consumed_capacity(requests: Mapping[str, Qty] | None, caps: Capacities) -> dict[str, Qty]:
    """``GetConsumedCapacityFromRequest``: per capacity of the device, what the request takes.
    Raises CapacityError for an unrepresentable request or a negative result."""
    out: dict[str, Qty] = {}
    for name, cap in caps.items():
        try:
            got = _consumed_of((requests or {}).get(name), cap)
        except CapacityError as e:
            raise CapacityError(f'capacity "{name}": {_NOT_REPRESENTABLE}: {e}') from None
        if got.value < 0:
            raise CapacityError(f'capacity "{name}": capacity value is negative')
        out[name] = got
    return out


def fits(
    requests: Mapping[str, Qty] | None, caps: Capacities, allocated: Consumed | None, allocating: Consumed | None
) -> bool:
    """``CmpRequestOverCapacity``: whether the request, on top of what is ``allocated`` (other
    claims) and ``allocating`` (this search), stays within every capacity and its policy. A
    request naming a capacity the device lacks does not fit; CapacityError is fatal."""
    if requests and any(name not in caps for name in requests):
        return False
    consumed = consumed_capacity(requests, caps)
    for name, cap in caps.items():
        v = consumed[name].value
        if _violates(v, cap.policy):
            return False
        total = v + (allocated or {}).get(name, 0) + (allocating or {}).get(name, 0)
        if total > cap.value.value:
            return False
    return True


# --- pools with counters ------------------------------------------------------------------------

CounterMap = Mapping[str, Decimal]
Consumption = tuple[tuple[str, tuple[tuple[str, Decimal], ...]], ...]
"""A device's ``consumesCounters``: (counter set, ((counter, amount), ...))."""


@dataclass(frozen=True, slots=True)
class Pool:
    """One resource pool as the allocator sees it from a node (upstream's ``Pool``).

    ``counter_sets`` are the pool's ``sharedCounters``; ``consumers`` every device of the pool (also
    those the node does not reach) that consumes counters, so what allocated devices took can be
    subtracted. ``invalid`` (the reason) and ``incomplete`` pools hand out no device."""

    driver: str
    name: str
    counter_sets: Mapping[str, CounterMap]
    consumers: Mapping[str, Consumption]
    invalid: str = ""
    incomplete: bool = False

    @property
    def id(self) -> str:
        return f"{self.driver}/{self.name}"

    def available(self, allocated: Callable[[str], bool]) -> dict[str, dict[str, Decimal]]:
        """The counters left after every device for which ``allocated(name)`` holds (may go
        negative: then nothing is left, as upstream treats it)."""
        left = {cs: dict(counters) for cs, counters in self.counter_sets.items()}
        for device, consumption in self.consumers.items():
            if not allocated(device):
                continue
            for cs, counters in consumption:
                have = left.get(cs)
                if have is None:
                    continue
                for name, amount in counters:
                    if name in have:
                        have[name] -= amount
        return left
