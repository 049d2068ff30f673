"""DefaultBinder: POST a ``Binding`` to the ``pods/binding`` subresource.

The Binding carries the pod's UID, which the API server (1.22+) checks as a precondition, so a
pod deleted and recreated under the same name is never bound by mistake.

Retries (tenacity, exponential backoff with jitter, honouring ``Retry-After``) cover 429, 5xx and
connection api_errors. They are safe because of the answer-to-a-retry rule: a 409 saying the pod is
already assigned *to the node we asked for* means an earlier attempt went through, so it counts as
success. Any other 409 (assigned elsewhere, being deleted) or a 404 is final: the pod is not ours
to bind any more, and the caller forgets the assumption. The answer is a
:class:`~custom_scheduler.framework.types.BindResult` whose outcome the scheduler routes on, with
the retries of this call (a local count: sixteen bind threads share one plugin instance).

Fencing: every attempt, the first and each retry, asks the Handle's fence right before the POST.
Once the elector has revoked it (the Lease is lost) the bind gives up with
``BindOutcome.FENCED`` without sending anything: a retry loop that slept through the loss must not
wake up and write as if it still led.
"""

from __future__ import annotations

from typing import Any, ClassVar

import structlog
import tenacity

from custom_scheduler.api.model import Pod
from custom_scheduler.framework.clusterapi import api_errors, pod_path
from custom_scheduler.framework.fence import FencedOff
from custom_scheduler.framework.interface import Handle
from custom_scheduler.framework.registry import PluginSpec, no_args
from custom_scheduler.framework.types import BindOutcome, BindResult, Code, CycleState, Status

log = structlog.get_logger("custom_scheduler.binder")

NAME = "DefaultBinder"
BIND_TIMEOUT = 30.0

REASON_POD_GONE = "pod not found"
REASON_ASSIGNED_ELSEWHERE = "pod is already assigned to another node"
REASON_FENCED = "leadership lost: not binding"


def _wait_retry_after(retry_state: tenacity.RetryCallState) -> float:
    exp = tenacity.wait_exponential_jitter(multiplier=0.1, max=5.0, jitter=0.2)(retry_state)
    outcome = retry_state.outcome
    e = outcome.exception() if outcome is not None else None
    if isinstance(e, api_errors.ApiError) and e.retry_after:
        return max(float(e.retry_after), exp)
    return exp


def _log_retry(retry_state: tenacity.RetryCallState) -> None:
    outcome = retry_state.outcome
    e = outcome.exception() if outcome is not None else None
    log.info(
        "bind_retry",
        attempt=retry_state.attempt_number,
        error=str(e)[:200],
        sleep=round(retry_state.next_action.sleep, 3) if retry_state.next_action else None,
    )


class DefaultBinder:
    name: ClassVar[str] = NAME

    def __init__(self, args: Any, handle: Handle) -> None:
        self.handle = handle

    def bind(self, state: CycleState, pod: Pod, node_name: str) -> BindResult:
        client = self.handle.client
        if client is None:
            # Offline handles have no client; the framework never binds there (an error, not a crash).
            return BindResult(BindOutcome.ERROR, Status(Code.ERROR, ("no API client to bind pods",), NAME))
        body = {
            "apiVersion": "v1",
            "kind": "Binding",
            "metadata": {"name": pod.name, "namespace": pod.namespace, "uid": pod.uid},
            "target": {"apiVersion": "v1", "kind": "Node", "name": node_name},
        }
        path = pod_path(pod.namespace, pod.name, "binding")

        retries = 0

        def before_sleep(rs: tenacity.RetryCallState) -> None:
            nonlocal retries
            retries += 1
            _log_retry(rs)

        retrying = tenacity.Retrying(
            retry=tenacity.retry_if_exception(api_errors.is_retryable),
            wait=_wait_retry_after,
            stop=tenacity.stop_after_attempt(8) | tenacity.stop_before_delay(BIND_TIMEOUT),
            before_sleep=before_sleep,
            reraise=True,
        )
        fence = self.handle.fence

        def post() -> Any:
            if not fence.admit():
                raise FencedOff(pod.key)
            return client.post(path, body, timeout=(5.0, 15.0))

        def result(outcome: BindOutcome, *reasons: str, error: BaseException | None = None) -> BindResult:
            st = Status(Code.ERROR, reasons, NAME, error) if reasons else Status()
            return BindResult(outcome, st, retries)

        try:
            retrying(post)
        except FencedOff:
            return result(BindOutcome.FENCED, REASON_FENCED)
        except api_errors.Conflict as e:
            # The API server's own wording is the only way to tell "already ours" from "elsewhere".
            if f'already assigned to node "{node_name}"' in e.message:
                return result(BindOutcome.ALREADY_BOUND)
            return result(BindOutcome.CONFLICT, REASON_ASSIGNED_ELSEWHERE, e.message, error=e)
        except api_errors.NotFound as e:
            return result(BindOutcome.GONE, REASON_POD_GONE, error=e)
        except api_errors.KubeError as e:
            return result(BindOutcome.ERROR, f"binding rejected: {e}", error=e)
        return result(BindOutcome.BOUND)


SPEC = PluginSpec(NAME, DefaultBinder, no_args)
