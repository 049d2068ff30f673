"""``/healthz``, ``/livez``, ``/readyz``, ``/metrics`` and ``/configz`` on one HTTPS port, as
kube-scheduler's secure port (10259).

Endpoints:

- ``/healthz`` and ``/livez``: 200 ``ok`` while ``healthy()`` says the process loop is alive (wire
  it to the leader elector's :meth:`~custom_scheduler.server.leader.LeaderElector.check`, so a leader whose
  renew loop is wedged gets restarted), else 500. A liveness probe restarts the container on 500.
- ``/readyz``: 200 ``ok`` only once ``ready()`` says the informer caches have synced, 503 before.
  Standbys are ready too: their caches are warm, and readiness only gates Service endpoints.
- ``/metrics``: the Prometheus text format (OpenMetrics if the scraper asks) from a
  :class:`~custom_scheduler.server.metrics.Metrics` registry, for callers the API server authenticates
  and authorizes (:class:`~custom_scheduler.server.delegated_auth.DelegatingAuth`); every other path
  also needs that before it gets its 404. The three probes need no credentials.
- ``/configz``: the running configuration as JSON, ``{"componentconfig": {...}}`` as component-base's
  configz handler writes it (:func:`custom_scheduler.config.render.configz_json`), behind exactly
  the same authentication and authorization as ``/metrics`` (the SubjectAccessReview names the
  path ``/configz``). It is rendered per request from ``configz()``, so after a config reload it
  shows the new config.

Only TLS is served (the certificate from :class:`~custom_scheduler.server.serving.ServingCerts`, taken
per connection so a rotated one is used at once); like Go's ``net/http``, a plain-HTTP request
gets ``400 Client sent an HTTP request to an HTTPS server.`` and nothing else. There is no
plain-HTTP port, as in kube-scheduler. The TLS handshake runs on the connection's own thread with
a timeout, so a client that connects and stalls cannot block the accept loop.

Deliberately not here: ``/debug/pprof``, per-check ``?verbose`` output.
"""

from __future__ import annotations

import socket
import ssl
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import structlog

from custom_scheduler.server.delegated_auth import DelegatingAuth
from custom_scheduler.server.metrics import Metrics
from custom_scheduler.server.serving import ServingCerts, default_hosts

log = structlog.get_logger("custom_scheduler.server.health")


def parse_address(address: str) -> tuple[str, int]:
    """Split ``host:port`` (``[::]:10259`` for IPv6; empty host = every IPv4 address)."""
    host, sep, port = address.rpartition(":")
    if not sep or not port.isdigit():
        raise ValueError(f"bind address must be host:port, got {address!r}")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    return host, int(port)


#: Seconds a connection may take for its TLS handshake and for each read of its request.
CONNECTION_TIMEOUT = 10.0
#: What Go's net/http answers a plain-HTTP request on a TLS port.
PLAIN_HTTP_ANSWER = (
    b"HTTP/1.0 400 Bad Request\r\nContent-Type: text/plain; charset=utf-8\r\nConnection: close\r\n\r\n"
    b"Client sent an HTTP request to an HTTPS server.\n"
)
_TLS_HANDSHAKE = 0x16  # the first byte of every TLS ClientHello record


class _Server(ThreadingHTTPServer):
    """Accepts plain TCP and does TLS per connection, on the connection's thread.

    Wrapping per connection (instead of wrapping the listening socket once) is what lets a
    rotated certificate take effect for the next connection without a restart."""

    daemon_threads = True  # a stuck scrape must never keep the process alive
    allow_reuse_address = True
    request_queue_size = 64  # socketserver's 5 drops SYNs when probes and scrapes coincide
    certs: ServingCerts

    def finish_request(self, request: Any, client_address: Any) -> None:
        request.settimeout(CONNECTION_TIMEOUT)
        try:
            first = request.recv(1, socket.MSG_PEEK)
            if not first:
                return
            if first[0] != _TLS_HANDSHAKE:
                request.sendall(PLAIN_HTTP_ANSWER)
                # Read what the client sent before closing: closing with unread data sends a
                # reset, which can reach the client before it has read the answer.
                request.shutdown(socket.SHUT_WR)
                request.settimeout(1.0)
                request.recv(65536)
                return
            tls = self.certs.context().wrap_socket(request, server_side=True)
        except (ssl.SSLError, OSError) as e:
            log.debug("tls_handshake_failed", client=str(client_address[0]), error=str(e))
            return
        try:
            super().finish_request(tls, client_address)
        finally:
            try:
                tls.shutdown(socket.SHUT_WR)  # as socketserver does: FIN after the answer
            except OSError:
                pass  # the client hung up first: the answer is done either way, and close() follows
            tls.close()


class _Server6(_Server):
    address_family = socket.AF_INET6


class HealthServer:
    """A small threaded HTTPS server for probes and Prometheus scrapes.

    Args:
        address: ``host:port`` to bind; port 0 picks a free port (see :attr:`port`).
        ready: True once the caches have synced (drives ``/readyz``).
        metrics: the registry served on ``/metrics``.
        healthy: True while the process is alive and well (drives ``/healthz`` and ``/livez``).
        auth: who may see anything but the probes (required: there is no unauthenticated mode).
        certs: the serving certificate; None: a self-signed one, made for the first connection.
        configz: the ``/configz`` body (JSON) of the config running now; None: no ``/configz``.
    """

    def __init__(
        self,
        address: str,
        ready: Callable[[], bool],
        metrics: Metrics,
        healthy: Callable[[], bool] = lambda: True,
        *,
        auth: DelegatingAuth,
        certs: ServingCerts | None = None,
        configz: Callable[[], bytes] | None = None,
    ) -> None:
        self.host, self._port = parse_address(address)
        self.configz = configz
        self.ready = ready
        self.metrics = metrics
        self.healthy = healthy
        self.auth = auth
        self.certs = certs
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
        return f"https://{host}:{self.port}"

    def start(self) -> HealthServer:
        """Bind and serve on a daemon thread. Raises ``OSError`` if the address is taken."""
        if self._server is not None:
            return self
        if self.certs is None:
            self.certs = ServingCerts.self_signed_on_first_use(default_hosts(self.host))
        klass = _Server6 if ":" in self.host else _Server
        self._server = klass((self.host, self._port), self._handler_class())
        self._server.certs = self.certs
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
    def respond(
        self, path: str, accept: str = "", *, method: str = "GET", authorization: str | None = None
    ) -> tuple[int, bytes, str]:
        """Status, body and content type for ``path`` (the handler's logic, callable directly).

        Everything but the probes passes :attr:`auth` first, unknown paths included, so an
        unauthenticated caller cannot even learn which paths exist."""
        route = path.split("?", 1)[0].rstrip("/") or "/"
        text = "text/plain; charset=utf-8"
        verdict = self.auth.check(method, route, authorization)
        if verdict is not None:
            return verdict.status, verdict.body, verdict.content_type
        if route in ("/healthz", "/livez"):
            return (200, b"ok", text) if _safe(self.healthy) else (500, b"unhealthy", text)
        if route == "/readyz":
            return (200, b"ok", text) if _safe(self.ready) else (503, b"not ready: caches not synced", text)
        if route == "/metrics":
            body, content_type = self.metrics.render(accept)
            return 200, body, content_type
        if route == "/configz" and self.configz is not None:
            return 200, self.configz(), "application/json"
        return 404, b"not found", text

    def _handler_class(self) -> type[BaseHTTPRequestHandler]:
        server = self

        class Handler(BaseHTTPRequestHandler):
            server_version = "custom-scheduler"
            sys_version = ""
            timeout = CONNECTION_TIMEOUT  # per read: a client that stops sending is dropped

            def _serve(self, *, with_body: bool) -> None:
                try:
                    status, body, content_type = server.respond(
                        self.path,
                        self.headers.get("Accept", ""),
                        method=self.command,
                        authorization=self.headers.get("Authorization"),
                    )
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
