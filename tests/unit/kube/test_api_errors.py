"""API errors keep what callers route on: the status class, Retry-After and the Status's causes."""

from __future__ import annotations

import orjson
import pytest

from custom_scheduler.kube import api_errors

TERMINATING = orjson.dumps(
    {
        "kind": "Status",
        "status": "Failure",
        "reason": "Forbidden",
        "code": 403,
        "message": (
            'events "p.1" is forbidden: unable to create new content in namespace t because it is being terminated'
        ),
        "details": {
            "name": "p.1",
            "kind": "events",
            "causes": [{"type": "NamespaceTerminating", "message": "namespace t is being terminated"}],
        },
    }
)


@pytest.mark.parametrize(
    ("status", "body", "klass", "terminating"),
    [
        pytest.param(403, TERMINATING, api_errors.ApiError, True, id="namespace-terminating"),
        pytest.param(403, b'{"reason": "Forbidden", "message": "no"}', api_errors.ApiError, False, id="rbac-forbidden"),
        pytest.param(404, b'{"reason": "NotFound"}', api_errors.NotFound, False, id="not-found"),
        pytest.param(503, b"not json", api_errors.ServerError, False, id="5xx-not-json"),
    ],
)
def test_from_response(status: int, body: bytes, klass: type[api_errors.ApiError], terminating: bool) -> None:
    e = api_errors.ApiError.from_response(status, body, {"Retry-After": "2"})
    assert type(e) is klass
    assert e.namespace_terminating is terminating
    assert e.retry_after == 2.0
