"""What ``explain`` says about a gang's reservation, read from its PodGroup (issue #28, item 3).

The daemon writes each reservation on the gang's PodGroup (the ``custom-scheduler.io/reservation``
annotation, :mod:`custom_scheduler.framework.reservation_annotation`). Offline, GangScheduling rebuilds
its book from those annotations as a new leader does, so a pod kept off reserved capacity gets the
daemon's own reason from Filter (``node capacity reserved for pod group ns/g until ...``). This
module is the other half: for a member of a gang that holds a reservation, which capacity on which
nodes, until when, and who wrote it; an expired one is reported as holding nothing.
"""

from __future__ import annotations

from typing import Any

import structlog

from custom_scheduler.api.podgroup import PodGroup
from custom_scheduler.framework import reservation_annotation as ra
from custom_scheduler.framework.reservations import NEVER

log = structlog.get_logger("custom_scheduler.tools.explain")


def reservation_of(pg: PodGroup | None, now: float) -> tuple[dict[str, Any] | None, str]:
    """The reservation ``pg`` carries: (its JSON for the report, the sentence for the text view), or
    (None, "") when it carries none or one this scheduler cannot read (logged)."""
    if pg is None or pg.reservation is None:
        return None, ""
    rec = ra.decode(pg.reservation)
    if isinstance(rec, ra.Invalid):
        log.warning("gang_reservation_annotation_ignored", group=pg.key, why=rec.why)
        return None, ""
    expired = rec.expires <= now
    start = "unknown" if rec.expected_start == NEVER else ra.rfc3339(rec.expected_start)
    nodes = {n: {k: ra.format_amount(k, v) for k, v in sorted(a.items())} for n, a in sorted(rec.amounts.items())}
    doc = {
        "holder": rec.holder,
        "domain": rec.domain,
        "nodes": nodes,
        "created": ra.rfc3339(rec.created),
        "expectedStart": None if rec.expected_start == NEVER else start,
        "expires": ra.rfc3339(rec.expires),
        "expired": expired,
    }
    where = "; ".join(f"{n}: " + ", ".join(f"{k}={v}" for k, v in a.items()) for n, a in nodes.items())
    who = f" (written by {rec.holder})" if rec.holder else ""
    if expired:
        text = (
            f"Pod group {pg.key}'s reservation{who} in {rec.domain} expired at {doc['expires']}: it holds "
            "nothing now; the daemon plans a new one if the gang still does not fit."
        )
    else:
        text = (
            f"Pod group {pg.key} holds a reservation{who} in {rec.domain} until {doc['expires']} "
            f"(gang expected to start {start}): {where}. Other pods may use that capacity only if they "
            "declare a runtime ending before the expected start."
        )
    return doc, text
