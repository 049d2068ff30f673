"""Errors from talking to the API server, classified by what the caller should do.

::

    KubeError
    ├── TransportError        connection refused/reset, timeouts, TLS: retry with backoff
    └── ApiError              the server answered with a non-2xx status
        ├── NotFound          404: the object is gone
        ├── Conflict          409: lost a race (already bound, stale resourceVersion, UID mismatch)
        ├── Gone              410: resourceVersion too old or continue token expired: re-list
        ├── TooManyRequests   429: API Priority and Fairness; honour Retry-After
        └── ServerError       5xx: retry with backoff

:func:`is_retryable` is the single predicate the tenacity policies use.
"""

from __future__ import annotations

from typing import Any

import orjson


class KubeError(Exception):
    """Base of every error raised by :mod:`custom_scheduler.kube`."""


class TransportError(KubeError):
    """The request did not get an HTTP answer (connection error, timeout)."""


class IdleTimeout(TransportError):
    """A stream (a watch) sent nothing for its whole idle read timeout. Routine on a resource
    nothing changes: the API server's watch cache sends a bookmark only after it has seen an event
    of that resource. Re-opening the watch is what tells a quiet one from a half-open connection."""


class ApiError(KubeError):
    """A non-2xx answer. ``reason`` and ``message`` come from the server's Status, when present."""

    def __init__(
        self,
        status: int,
        reason: str = "",
        message: str = "",
        retry_after: float | None = None,
        causes: tuple[str, ...] = (),
    ) -> None:
        self.status = status
        self.reason = reason
        self.message = message
        self.retry_after = retry_after
        self.causes = causes  # the Status's details.causes[].type, e.g. "NamespaceTerminating"
        super().__init__(f"{status} {reason}: {message}" if reason or message else str(status))

    @property
    def namespace_terminating(self) -> bool:
        """A create refused because its namespace is being deleted (NamespaceLifecycle admission):
        the object it was about is going away with the namespace."""
        return self.status == 403 and "NamespaceTerminating" in self.causes

    @classmethod
    def from_response(cls, status: int, body: bytes, headers: Any = None) -> ApiError:
        reason, message = "", ""
        causes: tuple[str, ...] = ()
        try:
            doc = orjson.loads(body) if body else {}
            if isinstance(doc, dict):
                reason, message = str(doc.get("reason", "")), str(doc.get("message", ""))
                details = doc.get("details")
                if isinstance(details, dict):
                    causes = tuple(str(c.get("type", "")) for c in details.get("causes") or () if isinstance(c, dict))
        except orjson.JSONDecodeError:
            message = body[:200].decode(errors="replace")
        retry_after = None
        if headers is not None:
            raw = headers.get("Retry-After")
            if raw:
                try:
                    retry_after = float(raw)
                except ValueError:
                    retry_after = None
        klass = _BY_STATUS.get(status)
        if klass is None:
            klass = ServerError if status >= 500 else ApiError
        return klass(status, reason, message, retry_after, causes)


class NotFound(ApiError):
    pass


class Conflict(ApiError):
    pass


class Gone(ApiError):
    pass


class TooManyRequests(ApiError):
    pass


class ServerError(ApiError):
    pass


_BY_STATUS: dict[int, type[ApiError]] = {404: NotFound, 409: Conflict, 410: Gone, 429: TooManyRequests}


def is_retryable(e: BaseException) -> bool:
    """Transient failures worth retrying: transport errors, 429 and 5xx."""
    return isinstance(e, (TransportError, TooManyRequests, ServerError))
