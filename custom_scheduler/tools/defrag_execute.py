"""``defrag --execute``: evict a verified plan's pods through the Eviction API, at a bounded rate.

Why the Eviction API (``POST pods/NAME/eviction``) rather than a delete: the API server checks the
PodDisruptionBudgets at that moment and refuses (429) an eviction that would break one, so a
budget spent since the plan was made still holds. Each eviction carries the planned pod's UID as a
precondition, so a pod re-created under the same name since the plan is not touched (409).

Rules, in order:

- nothing happens for a plan that is infeasible or that the offline framework did not verify;
- ``--max-evictions N``: a plan that needs more than N evictions is refused whole, before any
  (half a defrag strands as much as it frees);
- evictions follow the plan's order (a gang's members one after another), one every
  ``60 / rate`` seconds;
- a pod already gone (404) or replaced (409) is skipped and counted;
- the first refusal (429: a PDB; or any other API error) stops the execution, with the message
  the API server gave, and the report says which pods were evicted before it.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TextIO

from custom_scheduler.api.model import Pod
from custom_scheduler.kube import api_errors as kerrors

Sleep = Callable[[float], None]


@dataclass(slots=True)
class Execution:
    """What an execution did: pods evicted and skipped (with why), and why it stopped, if it did."""

    evicted: list[str] = field(default_factory=list)
    skipped: list[dict[str, str]] = field(default_factory=list)
    stopped: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {"evicted": list(self.evicted), "skipped": list(self.skipped), "stopped": self.stopped}


def eviction_body(pod: Pod) -> dict[str, Any]:
    """The policy/v1 Eviction of ``pod``, with its UID as a precondition."""
    return {
        "apiVersion": "policy/v1",
        "kind": "Eviction",
        "metadata": {"name": pod.name, "namespace": pod.namespace},
        "deleteOptions": {"preconditions": {"uid": pod.uid}},
    }


def evict_all(
    client: Any,
    pods: list[Pod],
    *,
    rate: float,
    max_evictions: int | None = None,
    sleep: Sleep = time.sleep,
    log: TextIO | None = None,
) -> Execution:
    """Evict ``pods`` in order (see the module docstring); ``sleep`` is the pause between two."""
    out = Execution()
    if max_evictions is not None and len(pods) > max_evictions:
        out.stopped = (
            f"the plan needs {len(pods)} evictions, more than --max-evictions {max_evictions}; nothing evicted"
        )
        return out
    interval = 60.0 / rate
    for i, pod in enumerate(pods):
        if i:
            sleep(interval)
        path = f"/api/v1/namespaces/{pod.namespace}/pods/{pod.name}/eviction"
        try:
            client.post(path, eviction_body(pod))
        except kerrors.NotFound:
            out.skipped.append({"pod": pod.key, "reason": "already gone"})
            continue
        except kerrors.Conflict:
            out.skipped.append({"pod": pod.key, "reason": "replaced since the plan (another UID)"})
            continue
        except kerrors.ApiError as e:
            why = "refused by a PodDisruptionBudget" if e.status == 429 else f"refused (HTTP {e.status})"
            out.stopped = f"eviction of {pod.key} {why}: {e}"
            break
        except kerrors.KubeError as e:
            out.stopped = f"eviction of {pod.key} failed: {e}"
            break
        out.evicted.append(pod.key)
        if log is not None:
            print(f"custom-scheduler defrag: evicted {pod.key} ({i + 1}/{len(pods)})", file=log)
    return out


def execute_plan(
    client: Any,
    result: Any,
    *,
    rate: float,
    max_evictions: int | None = None,
    sleep: Sleep = time.sleep,
    log: TextIO | None = None,
) -> Execution:
    """Execute a :class:`~custom_scheduler.tools.defrag.Defrag` (``result``): only a feasible,
    verified plan is carried out."""
    if not result.plan.feasible:
        return Execution(stopped="no plan to execute")
    if not result.verified:
        return Execution(stopped="the plan was not verified by the offline framework; nothing evicted")
    return evict_all(client, result.plan.evicted_pods(), rate=rate, max_evictions=max_evictions, sleep=sleep, log=log)
