"""kube-scheduler's feature gates that change how this scheduler behaves, set with
``run --feature-gates=Name=true|false,...`` as kube-scheduler's flag is.

Only gates whose behaviour is implemented here are accepted; each defaults to its 1.37 default
(both below are beta and on). An unknown name or a value that is not a boolean is an error with
the list of known gates, never silently ignored: a kube-scheduler user copying a flag must learn
that it does nothing here.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from custom_scheduler.errors import ConfigError, FieldError


@dataclass(frozen=True, slots=True)
class FeatureGates:
    opportunistic_batching: bool = True
    """OpportunisticBatching: an equal pod reuses the previous pod's ranking (framework.batching)."""
    scheduler_pop_from_backoff_q: bool = True
    """SchedulerPopFromBackoffQ: an idle scheduler tries a backing-off pod at once."""


DEFAULT_GATES = FeatureGates()

#: Gate name -> field of :class:`FeatureGates`.
KNOWN = {
    "OpportunisticBatching": "opportunistic_batching",
    "SchedulerPopFromBackoffQ": "scheduler_pop_from_backoff_q",
}


def parse(text: str | None) -> FeatureGates:
    """``"A=true,B=false"`` -> the gates (the defaults for those not named).

    Raises:
        ConfigError: an unknown gate, or a value other than true/false.
    """
    if not text:
        return DEFAULT_GATES
    changes: dict[str, bool] = {}
    errors: list[FieldError] = []
    for item in (i.strip() for i in text.split(",")):
        if not item:
            continue
        name, sep, value = item.partition("=")
        name, value = name.strip(), value.strip().lower()
        if name not in KNOWN:
            errors.append(FieldError("--feature-gates", f"unknown gate {name!r} (known: {', '.join(sorted(KNOWN))})"))
        elif not sep or value not in ("true", "false"):
            errors.append(FieldError("--feature-gates", f"{name} must be true or false, not {value!r}"))
        else:
            changes[KNOWN[name]] = value == "true"
    if errors:
        raise ConfigError(errors)
    return dataclasses.replace(DEFAULT_GATES, **changes)
