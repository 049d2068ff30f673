"""Keep-alive HTTP/1.1 connections for the kube client's non-streaming requests: the request
written by hand in one ``sendall``, the answer parsed by ``http.client.HTTPResponse``.

Why not urllib3 for these: every Binding, Event and status PATCH is one small request, and
urllib3's layers above ``http.client`` (PoolManager's URL parsing and pool keys, the connection
pool's retry and timeout objects, header dictionaries built twice, its own response object) cost
about 700 µs of CPU per request on this machine, ``http.client``'s own connection 270 µs, this
250 µs (1000 Event POSTs to the real API server over TLS, thread CPU). At two writes per
scheduled pod that was a third of the daemon's CPU per pod. Watches keep urllib3's streaming.

What urllib3 did that this keeps:
- a bounded set of idle connections per client, reused last-in first-out;
- a connection the server closed while idle is noticed before reuse (it polls readable) and
  replaced, instead of failing the next request;
- separate connect and read timeouts;
- TLS as the kubeconfig says: its CA (file or data), client certificate, ``verify_ssl``,
  ``tls_server_name`` (the name sent and checked).

:func:`lean_pool` returns None for what it does not do (a proxy, socket options, an
``assert_hostname``): the client then keeps urllib3 for everything, as before.
"""

from __future__ import annotations

import http.client
import select
import socket
import ssl
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit


@dataclass(frozen=True, slots=True)
class Answer:
    """One response read to its end: status, headers (case-insensitive ``get``) and body."""

    status: int
    headers: http.client.HTTPMessage
    data: bytes


class Stream:
    """A streamed answer on its own connection: ``status``, ``headers``, the body in pieces as
    they arrive (chunked framing removed), and :meth:`shutdown` to end it from another thread
    (a blocked read then fails at once). The connection is closed at the end, never kept: a watch
    ends with its connection, or after its ``timeoutSeconds``, rarely enough that a new connection
    costs nothing worth the bookkeeping of a reusable one."""

    def __init__(self, sock: socket.socket, resp: Any) -> None:
        self._sock = sock
        self._resp = resp
        self.status: int = resp.status
        self.headers: http.client.HTTPMessage = resp.msg

    def read_all(self) -> bytes:
        """The whole body (an error status's), then the connection closed."""
        try:
            return bytes(self._resp.read())
        finally:
            self.close()

    def chunks(self, size: int = 65536) -> Iterator[bytes]:
        """The body as it comes, until its end; the connection closed after."""
        try:
            while True:
                piece = self._resp.read1(size)
                if not piece:
                    return
                yield piece
        finally:
            self.close()

    def shutdown(self) -> None:
        try:
            self._sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass  # closed already

    def close(self) -> None:
        self._resp.close()
        self._sock.close()


class LeanPool:
    """Idle keep-alive connections to one API server; thread-safe. A connection is owned by one
    request at a time: taken from the idle list (or opened), used, and put back only if the
    response was read to its end and the server did not ask to close it.

    A request is written in one ``sendall`` (head and body together: one TLS record, no Nagle
    stall between them) and its answer parsed by ``http.client.HTTPResponse``, which handles
    Content-Length, chunked and close-delimited bodies, 1xx answers and bodiless statuses."""

    def __init__(
        self,
        scheme: str,
        host: str,
        port: int,
        context: ssl.SSLContext | None,
        server_name: str | None,
        maxsize: int,
    ) -> None:
        self.scheme, self.host, self.port = scheme, host, port
        self._context = context
        self._server_name = server_name or host
        self._maxsize = max(1, maxsize)
        self._idle: list[socket.socket] = []
        self._lock = threading.Lock()
        default = 443 if scheme == "https" else 80
        name = f"[{host}]" if ":" in host else host
        self._host_header = (name if port == default else f"{name}:{port}").encode("ascii")

    def request(
        self, method: str, target: str, body: bytes | None, headers: dict[str, str], timeout: tuple[float, float]
    ) -> Answer:
        """Send one request and read its whole answer. Connection-level failures raise
        ``OSError`` or ``http.client.HTTPException``; the connection is then dropped.

        A kept connection the server closed just as it was taken (its idle timeout racing our
        send) is replaced once and the request sent again where Go's HTTP client would replay it
        on a reused connection: when the request could not be written, or, for GET, HEAD,
        OPTIONS and TRACE, when the connection ended before any answer. A POST that may have
        reached the server is never sent twice here; its caller decides."""
        sock, resp = self._start(method, self._message(method, target, body, headers), timeout)
        try:
            data = resp.read()
        except BaseException:
            sock.close()
            raise
        if resp.will_close:
            sock.close()
        else:
            self._give(sock)
        return Answer(resp.status, resp.msg, data)

    def stream(self, method: str, target: str, headers: dict[str, str], timeout: tuple[float, float]) -> Stream:
        """Send one request and read the head of its answer, leaving the body to be read as it
        comes (a watch), with ``timeout[1]`` as the idle read timeout. A kept connection is taken
        when there is one (the LIST before a watch leaves one: a watch then costs no new TLS
        handshake) and replaced as :meth:`request` replaces it."""
        sock, resp = self._start(method, self._message(method, target, None, headers), timeout)
        return Stream(sock, resp)

    def _start(self, method: str, msg: bytes, timeout: tuple[float, float]) -> tuple[socket.socket, Any]:
        """Send ``msg`` and read its answer's head, on a kept connection or a new one (see
        :meth:`request` for when it is sent again)."""
        sock, reused = self._take(timeout[0])
        try:
            return sock, self._begin(sock, method, msg, timeout[1])
        except _Unsent:
            if not reused:
                raise
        except (ConnectionResetError, http.client.RemoteDisconnected):
            if not reused or method not in _REPLAYABLE:
                raise
        sock = self._open(timeout[0])
        return sock, self._begin(sock, method, msg, timeout[1])

    def _message(self, method: str, target: str, body: bytes | None, headers: dict[str, str]) -> bytes:
        head = [b"%s %s HTTP/1.1" % (method.encode("ascii"), target.encode("ascii")), b"Host: " + self._host_header]
        for k, v in headers.items():
            if "\n" in v or "\r" in v or "\n" in k or "\r" in k or ":" in k:
                raise ValueError(f"invalid HTTP header {k!r}")  # http.client's refusal, before sending
            head.append(f"{k}: {v}".encode("latin-1"))
        if body is not None or method in _BODY_METHODS:
            head.append(b"Content-Length: %d" % len(body or b""))
        return b"\r\n".join(head) + b"\r\n\r\n" + (body or b"")

    def _begin(self, sock: socket.socket, method: str, msg: bytes, read_timeout: float) -> Any:
        """Write the request, read the answer's status line and headers; the connection is closed
        on any failure."""
        try:
            sock.settimeout(read_timeout)
            try:
                sock.sendall(msg)
            except (BrokenPipeError, ConnectionResetError) as e:
                raise _Unsent(*e.args) from e
            resp = http.client.HTTPResponse(sock, method=method)
            resp.begin()
            return resp
        except BaseException:
            sock.close()
            raise

    def _take(self, connect_timeout: float) -> tuple[socket.socket, bool]:
        """A connection and whether it was kept from an earlier request."""
        while True:
            with self._lock:
                sock = self._idle.pop() if self._idle else None
            if sock is None:
                return self._open(connect_timeout), False
            if _usable(sock):
                return sock, True
            sock.close()  # the server closed it (or sent something unasked) while it sat idle

    def _open(self, connect_timeout: float) -> socket.socket:
        sock = socket.create_connection((self.host, self.port), connect_timeout)
        try:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            if self._context is not None:
                return self._context.wrap_socket(sock, server_hostname=self._server_name)
        except BaseException:
            sock.close()
            raise
        return sock

    def _give(self, sock: socket.socket) -> None:
        with self._lock:
            if len(self._idle) < self._maxsize:
                self._idle.append(sock)
                return
        sock.close()

    def close(self) -> None:
        with self._lock:
            idle, self._idle = self._idle, []
        for sock in idle:
            sock.close()


#: Methods Go's client replays on a reused connection that ended before answering (isReplayable).
_REPLAYABLE = frozenset({"GET", "HEAD", "OPTIONS", "TRACE"})


class _Unsent(ConnectionError):
    """The connection failed while the request was being written: the server cannot have
    acted on it (a request is written in one ``sendall``, and an incomplete one is never served)."""


#: Methods whose requests carry a body length even when empty (as http.client sends them).
_BODY_METHODS = frozenset({"POST", "PUT", "PATCH"})


def _usable(sock: socket.socket) -> bool:
    """An idle connection is usable while the server has sent nothing on it: readable means a
    close (or bytes nobody asked for), and either way the next answer could not be trusted."""
    try:
        p = select.poll()
        p.register(sock, select.POLLIN)
        return not p.poll(0)
    except (OSError, ValueError):
        return False


def tls_context(configuration: Any) -> ssl.SSLContext:
    """The TLS settings of a ``kubernetes.client.Configuration`` (or our Credentials), as its
    urllib3 pool applies them. The system's CA store is loaded only when the kubeconfig names no
    CA and verification is on: loading it costs about 40 ms, once per client at start-up."""
    if not getattr(configuration, "verify_ssl", True):
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
    else:
        cafile = getattr(configuration, "ssl_ca_cert", None) or None
        cadata = getattr(configuration, "ca_cert_data", None) or None
        ctx = ssl.create_default_context(ssl.Purpose.SERVER_AUTH, cafile=cafile, cadata=cadata)
    cert, key = getattr(configuration, "cert_file", None), getattr(configuration, "key_file", None)
    if cert:
        ctx.load_cert_chain(cert, key or None)
    return ctx


def lean_pool(configuration: Any, maxsize: int, context: ssl.SSLContext | None = None) -> LeanPool | None:
    """A :class:`LeanPool` for ``configuration``'s API server, or None where the configuration
    asks for what only urllib3 does here (a proxy, socket options, ``assert_hostname``).
    ``context``: the client's TLS context when it has built one (else built here)."""
    if getattr(configuration, "proxy", None) or getattr(configuration, "socket_options", None) is not None:
        return None
    if getattr(configuration, "assert_hostname", None) is not None:
        return None
    url = urlsplit(str(configuration.host))
    if url.scheme not in ("http", "https") or not url.hostname or url.path.strip("/"):
        return None  # a path prefix (an API server behind a path) is left to the URL-joining client
    port = url.port or (443 if url.scheme == "https" else 80)
    if url.scheme == "https" and context is None:
        context = tls_context(configuration)
    elif url.scheme != "https":
        context = None
    server_name = getattr(configuration, "tls_server_name", None) or None
    return LeanPool(url.scheme, url.hostname, port, context, server_name, maxsize)
