"""Helpers for the HTTPS health/metrics port: a client, and a fake review API for unit tests.

The daemon's port speaks only TLS and wants a bearer token for ``/metrics``, so every test that
reads it goes through :func:`get` with the token of an identity the API server authorizes (the
admin's, usually), never around the authentication.
"""

from __future__ import annotations

import ssl
import urllib.error
import urllib.request
from typing import Any


def client_context(ca_pem: bytes = b"") -> ssl.SSLContext:
    """Verify against ``ca_pem`` when given; otherwise accept any certificate (the daemon's
    self-signed one, as a kubelet probe does)."""
    if ca_pem:
        return ssl.create_default_context(cadata=ca_pem.decode())
    ctx = ssl.create_default_context()
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    return ctx


def get(
    url: str,
    *,
    token: str | None = None,
    method: str = "GET",
    headers: dict[str, str] | None = None,
    ca_pem: bytes = b"",
    timeout: float = 5.0,
) -> tuple[int, bytes, str]:
    """``(status, body, content type)`` of one request; HTTP errors are answers, not exceptions."""
    h = dict(headers or {})
    if token is not None:
        h["Authorization"] = f"Bearer {token}"
    req = urllib.request.Request(url, method=method, headers=h)
    ctx = client_context(ca_pem) if url.startswith("https:") else None
    try:
        with urllib.request.urlopen(req, timeout=timeout, context=ctx) as resp:
            return resp.status, resp.read(), resp.headers.get("Content-Type", "")
    except urllib.error.HTTPError as e:
        with e:
            return e.code, e.read(), e.headers.get("Content-Type", "")


class FakeReviewApi:
    """Answers TokenReview and SubjectAccessReview posts like an API server with RBAC.

    Args:
        users: token → (username, groups).
        allowed: (username, path, verb) triples that SubjectAccessReview allows.
    """

    def __init__(self, users: dict[str, tuple[str, tuple[str, ...]]], allowed: set[tuple[str, str, str]]) -> None:
        self.users = users
        self.allowed = allowed
        self.calls: list[str] = []
        self.fail: Exception | None = None

    def post(self, path: str, body: Any, **kw: Any) -> Any:
        kind = body["kind"]
        self.calls.append(kind)
        if self.fail is not None:
            raise self.fail
        if kind == "TokenReview":
            hit = self.users.get(body["spec"]["token"])
            if hit is None:
                return {"status": {"authenticated": False, "error": "invalid bearer token"}}
            return {"status": {"authenticated": True, "user": {"username": hit[0], "uid": "u1", "groups": hit[1]}}}
        spec = body["spec"]
        attrs = spec["nonResourceAttributes"]
        ok = (spec["user"], attrs["path"], attrs["verb"]) in self.allowed
        return {"status": {"allowed": ok, **({} if ok else {"reason": "no RBAC policy matched"})}}

    def count(self, kind: str) -> int:
        return self.calls.count(kind)


def tls_health_server(hosts: list[str]) -> Any:
    """A started health server on 127.0.0.1 serving HTTPS with a fresh self-signed certificate for
    ``hosts`` (its CA in ``.certs.ca_pem``); ``GET /healthz`` answers ``ok`` to anyone. A test
    stands in for an API server's TLS with it; the caller stops it."""
    from custom_scheduler.server.delegated_auth import DelegatingAuth
    from custom_scheduler.server.health import HealthServer
    from custom_scheduler.server.metrics import Metrics
    from custom_scheduler.server.serving import ServingCerts

    return HealthServer(
        "127.0.0.1:0",
        lambda: True,
        Metrics(process_collectors=False),
        auth=DelegatingAuth(FakeReviewApi({}, set())),
        certs=ServingCerts.self_signed(hosts),
    ).start()
