"""A gang's reservation as an annotation on its PodGroup: the codec (issue #28, item 3).

Why an annotation: the :class:`~custom_scheduler.framework.reservations.ReservationBook` is the
leader's memory. A new leader (after a failover or a restart) would start with an empty book, and
the short pods queued behind a starving gang would take the capacity the gang had waited for; and
``explain`` run from a laptop could not tell why a pod is kept off a node. So the leader writes each
reservation on the gang's PodGroup (``custom-scheduler.io/reservation``), a new leader rebuilds its
book from those that have not expired, and ``explain`` reads them like the daemon does.

The value is a small JSON object, readable with ``kubectl get podgroup -o yaml``::

    {"version": 1, "holder": "sched-7d9f_3b1c...", "profile": "custom-scheduler",
     "domain": "the whole cluster", "created": "2026-12-06T02:30:00Z",
     "expectedStart": "2026-12-06T02:30:40Z", "expires": "2026-12-06T02:40:00Z",
     "nodes": {"gpu-1": {"nvidia.com/gpu": "8", "pods": "1"}}}

Times are RFC 3339 in whole seconds (the precision of the Event and FailedScheduling texts, so a
rebuilt reservation says the same); ``expectedStart`` is null when unknown (the gang fits only once
pods that declare no runtime end). Amounts are Kubernetes quantities: CPU as ``"1500m"``, memory as
``"4Gi"``, counts as integers.

Pure: :func:`decode` returns a :class:`Record` or an :class:`Invalid` *value* (a bad or foreign value
never raises); the caller decides to log it.
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from custom_scheduler.api.model import parse_time
from custom_scheduler.api.podgroup import ANN_RESERVATION
from custom_scheduler.api.quantity import QuantityError, format_bytes, format_milli_cpu, to_int, to_milli
from custom_scheduler.api.resources import CPU, EPHEMERAL_STORAGE, MEMORY
from custom_scheduler.framework.reservations import NEVER, Reservation, Vector

ANNOTATION = ANN_RESERVATION
VERSION = 1
#: The API server's limit on all of an object's annotations together: a longer value is not ours.
MAX_LENGTH = 256 * 1024


@dataclass(frozen=True, slots=True)
class Record:
    """A reservation as written on its PodGroup (times in epoch seconds, ``NEVER`` when unknown)."""

    holder: str
    profile: str
    domain: str
    created: float
    expected_start: float
    expires: float
    amounts: Mapping[str, Vector]

    def reservation(self, group: str) -> Reservation:
        """The book's entry for the gang ``group`` (``api:namespace/name``)."""
        return Reservation(
            group,
            self.profile,
            self.domain,
            {n: dict(a) for n, a in self.amounts.items()},
            self.expected_start,
            self.created,
            self.expires,
        )


@dataclass(frozen=True, slots=True)
class Invalid:
    """Why an annotation value is not a reservation this scheduler wrote."""

    why: str


def rfc3339(t: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(t))


def _bytes_like(name: str) -> bool:
    return name in (MEMORY, EPHEMERAL_STORAGE) or name.startswith("hugepages-")


def format_amount(name: str, value: int) -> str:
    """One amount as a quantity: milli-CPU as cores, bytes with a binary suffix, counts plain."""
    if name == CPU:
        return format_milli_cpu(value)
    return format_bytes(value) if _bytes_like(name) else str(value)


def encode(r: Reservation, holder: str) -> str:
    """The annotation value for ``r``, written by ``holder`` (the leader's identity); compact,
    keys sorted, so the same reservation is always the same string."""
    doc = {
        "version": VERSION,
        "holder": holder,
        "profile": r.profile,
        "domain": r.domain,
        "created": rfc3339(r.created),
        "expectedStart": None if r.expected_start == NEVER else rfc3339(r.expected_start),
        "expires": rfc3339(r.expires),
        "nodes": {
            node: {k: format_amount(k, v) for k, v in sorted(amount.items()) if v}
            for node, amount in sorted(r.amounts.items())
        },
    }
    return json.dumps(doc, sort_keys=True, separators=(",", ":"))


class _Bad(ValueError):
    """Raised inside :func:`decode` for the first problem; returned as :class:`Invalid`."""


def _time(doc: Mapping[str, Any], key: str, *, nullable: bool = False) -> float:
    raw = doc.get(key)
    if raw is None and nullable:
        return NEVER
    t = parse_time(raw) if isinstance(raw, str) else None
    if t is None:
        raise _Bad(f"{key} must be an RFC 3339 time, got {raw!r:.40}")
    return t


def _vector(node: str, amount: Mapping[Any, Any]) -> dict[str, int]:
    vec: dict[str, int] = {}
    for name, q in amount.items():
        if not isinstance(name, str) or not name or isinstance(q, bool) or not isinstance(q, str | int):
            raise _Bad(f"nodes.{node:.60}.{name!s:.60}: a quantity must be a string, got {q!r:.40}")
        try:
            value = to_milli(q) if name == CPU else to_int(q)
        except QuantityError as e:
            raise _Bad(f"nodes.{node:.60}.{name:.60}: {e}") from e
        if value < 0:
            raise _Bad(f"nodes.{node:.60}.{name:.60}: must not be negative, got {q!r:.40}")
        if value:
            vec[name] = value
    return vec


def _amounts(raw: object) -> dict[str, dict[str, int]]:
    if not isinstance(raw, Mapping) or not raw:
        raise _Bad("nodes must be a non-empty map of node name to amounts")
    out: dict[str, dict[str, int]] = {}
    for node, amount in raw.items():
        if not isinstance(node, str) or not node or not isinstance(amount, Mapping):
            raise _Bad(f"nodes.{node!s:.60} must map resource names to quantities")
        out[node] = _vector(node, amount)
    return out


def decode(raw: str) -> Record | Invalid:
    """The reservation in an annotation value, or why it is not one (not JSON, another writer's
    format, a version this scheduler does not know, a missing or mistyped field)."""
    try:
        return _decode(raw)
    except _Bad as e:
        return Invalid(str(e))


def _decode(raw: str) -> Record:
    if len(raw) > MAX_LENGTH:
        raise _Bad(f"longer than {MAX_LENGTH} characters")
    try:
        doc = json.loads(raw)
    except (ValueError, RecursionError) as e:
        raise _Bad(f"not JSON: {str(e)[:80]}") from e
    if not isinstance(doc, Mapping):
        raise _Bad(f"not a JSON object but {type(doc).__name__}")
    if doc.get("version") != VERSION:
        raise _Bad(f"version must be {VERSION}, got {doc.get('version')!r:.40}")
    texts = [doc.get(k, "") for k in ("holder", "profile", "domain")]
    if not all(isinstance(v, str) for v in texts):
        raise _Bad("holder, profile and domain must be strings")
    return Record(
        holder=str(texts[0]),
        profile=str(texts[1]),
        domain=str(texts[2]),
        created=_time(doc, "created"),
        expected_start=_time(doc, "expectedStart", nullable=True),
        expires=_time(doc, "expires"),
        amounts=_amounts(doc.get("nodes")),
    )
