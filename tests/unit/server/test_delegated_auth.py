"""DelegatingAuth against a fake review API: verdicts, the upstream caching rules, and failures."""

from __future__ import annotations

import hashlib
from typing import Any

import orjson
import pytest

from custom_scheduler.kube import api_errors
from custom_scheduler.server.delegated_auth import DelegatingAuth, TTLCache, User
from tests.secure import FakeReviewApi


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def api() -> FakeReviewApi:
    return FakeReviewApi(
        {
            "reader": ("prometheus", ("system:serviceaccounts",)),
            "nobody": ("nobody", ()),
            "admin": ("admin", ("system:masters",)),
        },
        {("prometheus", "/metrics", "get")},
    )


@pytest.fixture
def auth(api: FakeReviewApi, clock: Clock) -> DelegatingAuth:
    return DelegatingAuth(api, clock=clock)


def _status(auth: DelegatingAuth, path: str, header: str | None, method: str = "GET") -> int:
    verdict = auth.check(method, path, header)
    return 200 if verdict is None else verdict.status


@pytest.mark.parametrize(
    ("method", "path", "header", "status", "reviews"),
    [
        pytest.param("GET", "/healthz", None, 200, [], id="probe-no-review"),
        pytest.param("GET", "/readyz", "Bearer junk", 200, [], id="probe-ignores-token"),
        pytest.param("GET", "/metrics", None, 401, [], id="no-header"),
        pytest.param("GET", "/metrics", "Basic dXNlcjpwdw==", 401, [], id="not-bearer"),
        pytest.param("GET", "/metrics", "Bearer ", 401, [], id="empty-token"),
        pytest.param("GET", "/metrics", "Bearer junk", 401, ["TokenReview"], id="rejected-token"),
        pytest.param("GET", "/metrics", "Bearer nobody", 403, ["TokenReview", "SubjectAccessReview"], id="denied"),
        pytest.param("GET", "/metrics", "bearer reader", 200, ["TokenReview", "SubjectAccessReview"], id="allowed"),
        pytest.param("HEAD", "/metrics", "Bearer reader", 403, ["TokenReview", "SubjectAccessReview"], id="head-verb"),
        pytest.param("GET", "/metrics", "Bearer admin", 200, ["TokenReview"], id="system-masters-no-sar"),
    ],
)
def test_verdicts(
    auth: DelegatingAuth,
    api: FakeReviewApi,
    method: str,
    path: str,
    header: str | None,
    status: int,
    reviews: list[str],
) -> None:
    assert _status(auth, path, header, method) == status
    assert api.calls == reviews


def test_forbidden_body_is_a_status_naming_user_verb_and_path(auth: DelegatingAuth) -> None:
    verdict = auth.check("GET", "/metrics", "Bearer nobody")
    assert verdict is not None
    doc = orjson.loads(verdict.body)
    assert (doc["kind"], doc["reason"], doc["code"]) == ("Status", "Forbidden", 403)
    assert doc["message"] == 'forbidden: User "nobody" cannot get path "/metrics": no RBAC policy matched'


@pytest.mark.parametrize(
    ("header", "advance", "reviews"),
    [
        pytest.param("Bearer reader", 9.9, 2, id="allowed-cached-10s"),
        pytest.param("Bearer reader", 10.0, 4, id="allowed-expires"),
        pytest.param("Bearer nobody", 9.9, 2, id="denied-cached-10s"),
        pytest.param("Bearer nobody", 10.0, 4, id="denied-expires"),
        pytest.param("Bearer junk", 9.9, 1, id="rejected-token-cached-10s"),
        pytest.param("Bearer junk", 10.0, 2, id="rejected-token-expires"),
    ],
)
def test_answers_are_cached_for_the_upstream_ttls(
    auth: DelegatingAuth, api: FakeReviewApi, clock: Clock, header: str, advance: float, reviews: int
) -> None:
    """Token → user, allowed and denied are each kept 10 s (upstream's defaults), then asked again."""
    first = _status(auth, "/metrics", header)
    assert _status(auth, "/metrics", header) == first
    clock.now += advance
    assert _status(auth, "/metrics", header) == first
    assert len(api.calls) == reviews


def test_decisions_are_cached_per_path_and_verb(auth: DelegatingAuth, api: FakeReviewApi) -> None:
    assert _status(auth, "/metrics", "Bearer reader") == 200
    assert _status(auth, "/configz", "Bearer reader") == 403
    assert _status(auth, "/metrics", "Bearer reader", "HEAD") == 403
    assert api.count("TokenReview") == 1
    assert api.count("SubjectAccessReview") == 3


@pytest.mark.parametrize(
    ("fail_on", "status"),
    [pytest.param("TokenReview", 401, id="authentication"), pytest.param("SubjectAccessReview", 500, id="authz")],
)
def test_api_failures_are_not_cached(auth: DelegatingAuth, api: FakeReviewApi, fail_on: str, status: int) -> None:
    """401 when the token cannot be reviewed, 500 when the permission cannot; the next request asks again."""
    if fail_on == "SubjectAccessReview":
        auth.authenticate("reader")  # cache the user, so only the SAR fails
    api.fail = api_errors.TransportError("connection refused")
    assert _status(auth, "/metrics", "Bearer reader") == status
    api.fail = None
    assert _status(auth, "/metrics", "Bearer reader") == 200
    assert api.count(fail_on) == 2


def test_the_subject_access_review_carries_the_whole_user(clock: Clock) -> None:
    """User, uid, groups and extra from the TokenReview go into the SubjectAccessReview unchanged."""
    sent: list[dict[str, Any]] = []

    class Api:
        def post(self, path: str, body: Any, **kw: Any) -> Any:
            sent.append(body)
            if body["kind"] == "TokenReview":
                user = {"username": "sa", "uid": "42", "groups": ["g1", "g2"], "extra": {"scopes": ["a", "b"]}}
                return {"status": {"authenticated": True, "user": user}}
            return {"status": {"allowed": True}}

    assert DelegatingAuth(Api(), clock=clock).check("GET", "/metrics", "Bearer t") is None
    assert sent[0]["spec"] == {"token": "t"}
    assert sent[1]["apiVersion"] == "authorization.k8s.io/v1"
    assert sent[1]["spec"] == {
        "user": "sa",
        "uid": "42",
        "groups": ["g1", "g2"],
        "extra": {"scopes": ["a", "b"]},
        "nonResourceAttributes": {"path": "/metrics", "verb": "get"},
    }


def test_tokens_are_kept_only_as_hashes(auth: DelegatingAuth) -> None:
    auth.authenticate("reader")
    keys = list(auth._tokens._data)
    assert keys == [hashlib.sha256(b"reader").digest()]


@pytest.mark.parametrize(
    ("ops", "expected"),
    [
        pytest.param([("put", "a", 5.0), ("tick", 4.9)], {"a"}, id="live"),
        pytest.param([("put", "a", 5.0), ("tick", 5.0)], set(), id="expired"),
        pytest.param([("put", "a", 0.0)], set(), id="zero-ttl-not-stored"),
        pytest.param([("put", "a", 9.0), ("put", "b", 9.0), ("put", "c", 9.0)], {"b", "c"}, id="full-drops-oldest"),
        pytest.param(
            [("put", "a", 1.0), ("put", "b", 9.0), ("tick", 2.0), ("put", "c", 9.0)],
            {"b", "c"},
            id="full-expired-first",
        ),
        pytest.param(
            [("put", "a", 9.0), ("put", "b", 9.0), ("put", "a", 9.0), ("put", "c", 9.0)], {"a", "c"}, id="re-put"
        ),
    ],
)
def test_ttl_cache(clock: Clock, ops: list[tuple[Any, ...]], expected: set[str]) -> None:
    cache: TTLCache[str, int] = TTLCache(max_entries=2, clock=clock)
    for op in ops:
        if op[0] == "put":
            cache.put(op[1], 1, op[2])
        else:
            clock.now += op[1]
    assert {k for k in ("a", "b", "c") if cache.get(k) is not None} == expected


def test_user_from_review_is_hashable_and_order_independent() -> None:
    a = User.from_review({"username": "u", "groups": ["g"], "extra": {"y": ["1"], "x": ["2"]}})
    b = User.from_review({"username": "u", "groups": ["g"], "extra": {"x": ["2"], "y": ["1"]}})
    assert a == b
    assert hash(a) == hash(b)
