"""A recording stand-in for the framework's ClusterClient (preemption writes with PATCH and DELETE).

Shared by the plugin tests (to prove DefaultPreemption writes nothing), the evictor tests (what
ApiEvictor sends, in which order) and the fencing tests (that it sends nothing once fenced).
Unit tests only: anything about how the real API server answers belongs to the integration tests.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from custom_scheduler.framework.clusterapi import ClusterClient, Timeout
from custom_scheduler.kube.client import STRATEGIC_PATCH_CT

Call = tuple[str, str, Any]
"""(method, path, body) of one request."""


@dataclass
class FakeClient:
    """Records every request; ``fail`` maps a path suffix to the exception every call on it raises;
    ``on_call`` runs after a request is recorded and before it is answered (to revoke a fence
    mid-preemption). Thread-safe: ApiEvictor evicts victims in parallel."""

    calls: list[Call] = field(default_factory=list)
    fail: dict[str, Exception] = field(default_factory=dict)
    on_call: Callable[[Call], None] | None = None
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def _call(self, method: str, path: str, body: Any) -> Any:
        call = (method, path, body)
        with self._lock:
            self.calls.append(call)
        if self.on_call is not None:
            self.on_call(call)
        for suffix, exc in self.fail.items():
            if path.endswith(suffix):
                raise exc
        return {}

    # The five verbs of framework.clusterapi.ClusterClient (mypy checks the fake against it). Reads
    # and creates are recorded too, so a test that expects no request sees any of them.
    def get(self, path: str, *, timeout: Timeout = (5.0, 30.0)) -> Any:
        return self._call("GET", path, None)

    def post(self, path: str, body: Mapping[str, Any], *, timeout: Timeout = (5.0, 30.0)) -> Any:
        return self._call("POST", path, body)

    def put(self, path: str, body: Mapping[str, Any], *, timeout: Timeout = (5.0, 30.0)) -> Any:
        return self._call("PUT", path, body)

    def patch(
        self, path: str, body: Mapping[str, Any], content_type: str = "", *, timeout: Timeout = (5.0, 30.0)
    ) -> Any:
        # Every preemption write is a strategic-merge patch of the status subresource.
        assert content_type == STRATEGIC_PATCH_CT
        return self._call("PATCH", path, body)

    def delete(self, path: str, body: Mapping[str, Any] | None = None, *, timeout: Timeout = (5.0, 30.0)) -> Any:
        return self._call("DELETE", path, body)

    def paths(self) -> list[tuple[str, str]]:
        """(method, path) of every request so far, in order."""
        with self._lock:
            return [(m, p) for m, p, _ in self.calls]


if TYPE_CHECKING:

    def _fake_client_is_a_cluster_client(c: FakeClient) -> ClusterClient:
        return c  # mypy checks the fake against the protocol the framework takes
