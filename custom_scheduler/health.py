"""``/healthz``, ``/livez``, ``/readyz`` and ``/metrics`` on one plain-HTTP port.

Endpoints:

- ``/healthz`` and ``/livez``: 200 ``ok`` while ``healthy()`` says the process loop is alive (wire
  it to the leader elector's :meth:`~custom_scheduler.leader.LeaderElector.check`, so a leader whose
  renew loop is wedged gets restarted), else 500. A liveness probe restarts the container on 500.
- ``/readyz``: 200 ``ok`` only once ``ready()`` says the informer caches have synced, 503 before.
  Standbys are ready too: their caches are warm, and readiness only gates Service endpoints.
- ``/metrics``: the Prometheus text format (OpenMetrics if the scraper asks) from a
  :class:`~custom_scheduler.metrics.Metrics` registry.

Plain HTTP, deliberately: kube-scheduler serves these on an HTTPS port (10259) with delegated
authentication and authorization (TokenReview/SubjectAccessReview) for ``/metrics``. We serve
HTTP on the same default port, so probes must say ``scheme: HTTP`` (the manifests do), and nothing
here is secret: no config, no pod data, only health bits and aggregate metrics. Restrict who can
reach the port with a NetworkPolicy if that matters in your cluster.

Deliberately not here: ``/configz``, ``/debug/pprof``, per-check ``?verbose`` output.
"""

from __future__ import annotations

import socket
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import structlog

from custom_scheduler.metrics import Metrics

log = structlog.get_logger("custom_scheduler.health")


def parse_address(address: str) -> tuple[str, int]:
    """Split ``host:port`` (``[::]:10259`` for IPv6; empty host = every IPv4 address)."""
    host, sep, port = address.rpartition(":")
    if not sep or not port.isdigit():
        raise ValueError(f"bind address must be host:port, got {address!r}")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    return host, int(port)


class _Server(ThreadingHTTPServer):
    daemon_threads = True  # a stuck scrape must never keep the process alive
    allow_reuse_address = True


class _Server6(_Server):
    address_family = socket.AF_INET6


class HealthServer:
    """A small threaded HTTP server for probes and Prometheus scrapes.

    Args:
        address: ``host:port`` to bind; port 0 picks a free port (see :attr:`port`).
        ready: True once the caches have synced (drives ``/readyz``).
        metrics: the registry served on ``/metrics``.
        healthy: True while the process is alive and well (drives ``/healthz`` and ``/livez``).
    """

    def __init__(
        self,
        address: str,
        ready: Callable[[], bool],
        metrics: Metrics,
        healthy: Callable[[], bool] = lambda: True,
    ) -> None:
        self.host, self._port = parse_address(address)
        self.ready = ready
        self.metrics = metrics
        self.healthy = healthy
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None

    @property
    def port(self) -> int:
        """The bound port once started (the real one when configured as 0)."""
        if self._server is not None:
            return int(self._server.server_address[1])
        return self._port

    @property
    def url(self) -> str:
        host = self.host or "127.0.0.1"
        if host in ("0.0.0.0", "::"):
            host = "127.0.0.1" if host == "0.0.0.0" else "::1"
        if ":" in host:
            host = f"[{host}]"
        return f"http://{host}:{self.port}"

    def start(self) -> HealthServer:
        """Bind and serve on a daemon thread. Raises ``OSError`` if the address is taken."""
        if self._server is not None:
            return self
        klass = _Server6 if ":" in self.host else _Server
        self._server = klass((self.host, self._port), self._handler_class())
        # A short poll interval only makes stop() prompt; the selector wakes on requests anyway.
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.1}, name="health-server", daemon=True
        )
        self._thread.start()
        log.info("health_server_started", address=f"{self.host}:{self.port}")
        return self

    def stop(self, timeout: float = 5.0) -> None:
        if self._server is None:
            return
        self._server.shutdown()
        self._server.server_close()
        if self._thread is not None:
            self._thread.join(timeout)
        self._server = None
        self._thread = None

    # -- request handling -------------------------------------------------------------------------
    def respond(self, path: str, accept: str = "") -> tuple[int, bytes, str]:
        """Status, body and content type for ``path`` (the handler's logic, callable directly)."""
        route = path.split("?", 1)[0].rstrip("/") or "/"
        text = "text/plain; charset=utf-8"
        if route in ("/healthz", "/livez"):
            return (200, b"ok", text) if _safe(self.healthy) else (500, b"unhealthy", text)
        if route == "/readyz":
            return (200, b"ok", text) if _safe(self.ready) else (503, b"not ready: caches not synced", text)
        if route == "/metrics":
            body, content_type = self.metrics.render(accept)
            return 200, body, content_type
        return 404, b"not found", text

    def _handler_class(self) -> type[BaseHTTPRequestHandler]:
        server = self

        class Handler(BaseHTTPRequestHandler):
            server_version = "custom-scheduler"
            sys_version = ""

            def _serve(self, *, with_body: bool) -> None:
                try:
                    status, body, content_type = server.respond(self.path, self.headers.get("Accept", ""))
                except Exception:
                    log.exception("health_request_failed", path=self.path)
                    status, body, content_type = 500, b"internal error", "text/plain; charset=utf-8"
                self.send_response(status)
                self.send_header("Content-Type", content_type)
                self.send_header("Content-Length", str(len(body)))
                self.send_header("Cache-Control", "no-store")
                self.end_headers()
                if with_body:
                    self.wfile.write(body)

            def do_GET(self) -> None:
                self._serve(with_body=True)

            def do_HEAD(self) -> None:
                self._serve(with_body=False)

            def log_message(self, format: str, *args: Any) -> None:
                # Probes hit these every few seconds: no access log at info.
                log.debug("health_request", line=format % args)

        return Handler


def _safe(check: Callable[[], bool]) -> bool:
    try:
        return bool(check())
    except Exception:
        log.exception("health_check_failed")
        return False
