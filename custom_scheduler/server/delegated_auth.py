"""Delegated authentication and authorization for the HTTPS port, as k8s.io/apiserver's
``DelegatingAuthenticationOptions`` / ``DelegatingAuthorizationOptions`` that kube-scheduler uses.

Who may read ``/metrics`` is the API server's decision, not ours: a caller sends
``Authorization: Bearer <token>``; a ``TokenReview`` (``authentication.k8s.io/v1``) says who the
token belongs to, and a ``SubjectAccessReview`` (``authorization.k8s.io/v1``) says whether that user
may ``get`` the non-resource URL (``nonResourceAttributes: {path: /metrics, verb: get}``). So a
Prometheus is let in by binding its ServiceAccount to a ClusterRole with
``nonResourceURLs: ["/metrics"], verbs: ["get"]`` (``manifests/rbac.yaml`` ships one), and the
scheduler's own ServiceAccount needs ``system:auth-delegator`` to ask.

As upstream:

- ``/healthz``, ``/readyz`` and ``/livez`` are always allowed (``AlwaysAllowPaths``): kubelet probes
  carry no credentials. We skip authentication for them too, so a probe never waits on the API.
- Members of ``system:masters`` are allowed without a SubjectAccessReview (``AlwaysAllowGroups``).
- Answers are cached (token → user 10 s, allowed 10 s, denied 10 s: the upstream defaults), keyed
  by a SHA-256 of the token, never the token itself. Failed API calls are not cached.
- A token the API server rejects gets 401, a user without the permission 403, and an API failure
  401 during authentication (the caller cannot be identified) or 500 during authorization.
- The verb is the lower-cased HTTP method (``get``; ``head`` for HEAD), as ``RequestInfo``.

Deliberate difference: a request without a bearer token gets 401. Upstream treats it as
``system:anonymous`` and asks the authorizer, which in a default RBAC cluster answers 403; we never
serve anything behind the probes to unauthenticated callers, whatever a binding grants anonymous
users. Client-certificate authentication (upstream's ``--client-ca-file`` / request-header
front proxies) is not supported: tokens are what Prometheus and ``kubectl`` carry.
"""

from __future__ import annotations

import hashlib
import threading
import time
from collections.abc import Callable, Hashable, Mapping
from dataclasses import dataclass
from typing import Any, Generic, Protocol, TypeVar

import orjson
import structlog

from custom_scheduler.kube import api_errors

log = structlog.get_logger("custom_scheduler.server.delegated_auth")

#: Paths served without credentials (upstream ``DelegatingAuthorizationOptions.AlwaysAllowPaths``).
ALWAYS_ALLOW_PATHS = frozenset({"/healthz", "/readyz", "/livez"})
#: Groups allowed everything without a SubjectAccessReview (upstream ``AlwaysAllowGroups``).
ALWAYS_ALLOW_GROUPS = frozenset({"system:masters"})
#: Upstream defaults: ``--authentication-token-webhook-cache-ttl`` and the two authorization TTLs.
AUTHN_CACHE_TTL = 10.0
AUTHZ_ALLOW_TTL = 10.0
AUTHZ_DENY_TTL = 10.0
#: Entries per cache; a scrape or two per token per interval needs few, and this bounds a flood of
#: random tokens.
CACHE_SIZE = 1024
#: Review calls time out like upstream's delegating clients (``ClientTimeout`` 10 s).
REVIEW_TIMEOUT = (5.0, 10.0)

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


class Poster(Protocol):
    """What the reviews need from :class:`~custom_scheduler.kube.client.KubeClient`."""

    def post(self, path: str, body: Any, **kw: Any) -> Any: ...


class TTLCache(Generic[K, V]):
    """A small thread-safe map whose entries expire; the oldest go first when it is full."""

    def __init__(self, max_entries: int = CACHE_SIZE, clock: Callable[[], float] = time.monotonic) -> None:
        self.max_entries = max_entries
        self._clock = clock
        self._data: dict[K, tuple[float, V]] = {}
        self._lock = threading.Lock()

    def get(self, key: K) -> V | None:
        with self._lock:
            hit = self._data.get(key)
            if hit is None:
                return None
            if hit[0] <= self._clock():
                del self._data[key]
                return None
            return hit[1]

    def put(self, key: K, value: V, ttl: float) -> None:
        if ttl <= 0:
            return
        with self._lock:
            now = self._clock()
            self._data.pop(key, None)
            if len(self._data) >= self.max_entries:
                for k in [k for k, (exp, _) in self._data.items() if exp <= now]:
                    del self._data[k]
                while len(self._data) >= self.max_entries:
                    del self._data[next(iter(self._data))]  # insertion order: the oldest
            self._data[key] = (now + ttl, value)

    def __len__(self) -> int:
        return len(self._data)


@dataclass(frozen=True, slots=True)
class User:
    """``TokenReview.status.user``, hashable so it can key the authorization cache."""

    name: str
    uid: str = ""
    groups: tuple[str, ...] = ()
    extra: tuple[tuple[str, tuple[str, ...]], ...] = ()

    @classmethod
    def from_review(cls, doc: Mapping[str, Any]) -> User:
        extra = doc.get("extra") or {}
        return cls(
            str(doc.get("username") or ""),
            str(doc.get("uid") or ""),
            tuple(doc.get("groups") or ()),
            tuple(sorted((str(k), tuple(v or ())) for k, v in extra.items())),
        )


@dataclass(frozen=True, slots=True)
class Verdict:
    """What to answer a request that may not proceed."""

    status: int
    body: bytes
    content_type: str = "application/json"


def _status(code: int, reason: str, message: str) -> Verdict:
    """A ``metav1.Status`` body, as the API server's response writers send it."""
    doc = {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason,
        "code": code,
    }
    return Verdict(code, orjson.dumps(doc))


UNAUTHORIZED = _status(401, "Unauthorized", "Unauthorized")


class _Unknown(Exception):
    """A review could not be completed (API error or malformed answer)."""


class DelegatingAuth:
    """Decides, per request, whether to serve it; see the module docstring.

    Args:
        client: posts the reviews (a client of its own: reviews must not wait behind binds).
        clock: for the caches (tests pass a fake).
    """

    def __init__(
        self,
        client: Poster,
        *,
        authn_ttl: float = AUTHN_CACHE_TTL,
        allow_ttl: float = AUTHZ_ALLOW_TTL,
        deny_ttl: float = AUTHZ_DENY_TTL,
        always_allow_paths: frozenset[str] = ALWAYS_ALLOW_PATHS,
        always_allow_groups: frozenset[str] = ALWAYS_ALLOW_GROUPS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.client = client
        self.authn_ttl, self.allow_ttl, self.deny_ttl = authn_ttl, allow_ttl, deny_ttl
        self.always_allow_paths = always_allow_paths
        self.always_allow_groups = always_allow_groups
        # A 1-tuple, so that a cached rejection (None) differs from a miss.
        self._tokens: TTLCache[bytes, tuple[User | None]] = TTLCache(clock=clock)
        self._decisions: TTLCache[tuple[User, str, str], tuple[bool, str]] = TTLCache(clock=clock)

    def check(self, method: str, path: str, authorization: str | None) -> Verdict | None:
        """None to serve ``path``; otherwise the 401/403/500 answer to send instead."""
        if path in self.always_allow_paths:
            return None
        token = _bearer(authorization)
        if not token:
            return UNAUTHORIZED
        try:
            user = self.authenticate(token)
        except _Unknown as e:
            log.error("authentication_failed", path=path, error=str(e))
            return UNAUTHORIZED
        if user is None:
            return UNAUTHORIZED
        verb = method.lower()
        try:
            allowed, reason = self.authorize(user, verb, path)
        except _Unknown as e:
            log.error("authorization_failed", path=path, user=user.name, error=str(e))
            return _status(500, "InternalError", f"Internal error occurred: {e}")
        if allowed:
            return None
        log.debug("request_forbidden", path=path, verb=verb, user=user.name, reason=reason)
        message = f'forbidden: User "{user.name}" cannot {verb} path "{path}"'
        return _status(403, "Forbidden", f"{message}: {reason}" if reason else message)

    def authenticate(self, token: str) -> User | None:
        """The token's user, or None when the API server does not accept it (cached either way)."""
        key = hashlib.sha256(token.encode()).digest()
        cached = self._tokens.get(key)
        if cached is not None:
            return cached[0]
        review = self._post(
            "/apis/authentication.k8s.io/v1/tokenreviews",
            {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview", "spec": {"token": token}},
        )
        status = review.get("status") or {}
        user = User.from_review(status.get("user") or {}) if status.get("authenticated") else None
        if user is not None and not user.name:
            raise _Unknown("TokenReview authenticated a token without a username")
        if user is None and status.get("error"):
            log.debug("token_rejected", error=str(status["error"])[:200])
        self._tokens.put(key, (user,), self.authn_ttl)
        return user

    def authorize(self, user: User, verb: str, path: str) -> tuple[bool, str]:
        """``(allowed, reason)`` for ``verb`` on the non-resource URL ``path`` (cached)."""
        if self.always_allow_groups.intersection(user.groups):
            return True, ""
        key = (user, verb, path)
        cached = self._decisions.get(key)
        if cached is not None:
            return cached
        spec: dict[str, Any] = {
            "user": user.name,
            "groups": list(user.groups),
            "nonResourceAttributes": {"path": path, "verb": verb},
        }
        if user.uid:
            spec["uid"] = user.uid
        if user.extra:
            spec["extra"] = {k: list(v) for k, v in user.extra}
        review = self._post(
            "/apis/authorization.k8s.io/v1/subjectaccessreviews",
            {"apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview", "spec": spec},
        )
        status = review.get("status") or {}
        # As upstream's webhook authorizer: anything but "allowed" (denied or no opinion) is a
        # denial, cached for the deny TTL; only a failed call is left uncached.
        decision = (bool(status.get("allowed")) and not status.get("denied"), str(status.get("reason") or ""))
        self._decisions.put(key, decision, self.allow_ttl if decision[0] else self.deny_ttl)
        return decision

    def _post(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        try:
            doc = self.client.post(path, body, timeout=REVIEW_TIMEOUT, rate_limited=False)
        except api_errors.KubeError as e:
            raise _Unknown(str(e)[:300]) from e
        if not isinstance(doc, dict):
            raise _Unknown(f"{path}: not an object")
        return doc


def _bearer(header: str | None) -> str:
    if not header:
        return ""
    scheme, _, token = header.strip().partition(" ")
    return token.strip() if scheme.lower() == "bearer" else ""
