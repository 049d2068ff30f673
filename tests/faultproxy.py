"""A fault-injecting HTTP proxy in front of the real API server, for fault tests.

The scheduler under test talks plain HTTP to this proxy on loopback; the proxy forwards every
request to the real kube-apiserver over TLS with the admin token, streaming responses (watches)
line by line. Rules inject faults for matching requests: a status code (with an optional
Retry-After), a dropped connection, a delay, or a watch that goes silent without closing.

``log`` keeps ``(method, path, status)`` per answered request; ``timed`` the same with the
``time.monotonic()`` at which the request arrived (before any injected delay), so tests can
compare a write's arrival with an event in the process (the fencing test: the moment leadership
was lost). Both are appended under the GIL only, never rewritten.
"""

from __future__ import annotations

import http.server
import re
import socketserver
import ssl
import threading
import time
from dataclasses import dataclass, field
from typing import Any

import urllib3

from custom_scheduler.devenv.controlplane import ControlPlane, free_port


@dataclass
class Rule:
    method: str
    path_regex: str
    times: int = 1
    status: int = 0  # inject this status instead of forwarding
    retry_after: float | None = None
    drop: bool = False  # close the connection without an answer
    delay: float = 0.0  # sleep before forwarding
    silent: bool = False  # forward headers, then never send data (a stalled watch)
    drop_after_forward: bool = False  # forward, let the server act, then drop the client's connection
    watch_error: int = 0  # answer a watch with 200 and one ERROR event of this code (410: expired)
    body: bytes = b""
    hits: int = 0

    def matches(self, method: str, path: str) -> bool:
        return self.times > 0 and method == self.method and re.search(self.path_regex, path) is not None


@dataclass
class FaultProxy:
    cp: ControlPlane
    rules: list[Rule] = field(default_factory=list)
    log: list[tuple[str, str, int]] = field(default_factory=list)
    timed: list[tuple[float, str, str, int]] = field(default_factory=list)
    port: int = 0
    streams: set[Any] = field(default_factory=set)
    _server: Any = None
    _lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def add(self, rule: Rule) -> Rule:
        with self._lock:
            self.rules.append(rule)
        return rule

    def record(self, received_at: float, method: str, path: str, status: int) -> None:
        self.timed.append((received_at, method, path, status))
        self.log.append((method, path, status))

    def _take(self, method: str, path: str) -> Rule | None:
        with self._lock:
            for r in self.rules:
                if r.matches(method, path):
                    r.times -= 1
                    r.hits += 1
                    return r
        return None

    def answers(self, path_suffix: str, until: int = 201, timeout: float = 10.0) -> list[int]:
        """Statuses the proxy relayed for requests whose path ends with ``path_suffix``, once one of
        them is ``until``. The API server can show a write's effect (to a direct GET) a moment
        before the proxy has recorded the answer, so tests wait for the log rather than read it."""

        def seen() -> list[int] | None:
            got = [s for _, p, s in self.log if p.endswith(path_suffix)]
            return got if until in got else None

        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            got = seen()
            if got is not None:
                return got
            time.sleep(0.02)
        return [s for _, p, s in self.log if p.endswith(path_suffix)]

    def break_streams(self) -> int:
        """Drop every open streamed response (watches), as a network blip would."""
        with self._lock:
            conns = list(self.streams)
        for c in conns:
            try:
                c.shutdown(2)
            except OSError:
                pass
        return len(conns)

    def kubeconfig(self, tmpdir: Any) -> str:
        path = f"{tmpdir}/proxy-kubeconfig.yaml"
        with open(path, "w") as f:
            f.write(
                "apiVersion: v1\nkind: Config\n"
                f"clusters: [{{name: p, cluster: {{server: '{self.url}'}}}}]\n"
                "users: [{name: u, user: {token: unused}}]\n"
                "contexts: [{name: p, context: {cluster: p, user: u}}]\ncurrent-context: p\n"
            )
        return path

    def start(self) -> FaultProxy:
        proxy = self
        ctx = ssl.create_default_context(cafile=str(self.cp.ca_file))
        pool = urllib3.HTTPSConnectionPool("127.0.0.1", self.cp.port, ssl_context=ctx, maxsize=64, block=False)
        token = self.cp.admin_token

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:
                pass

            def _handle(self) -> None:  # noqa: PLR0915 -- one request's path through the proxy: match a rule, then answer, stall, cut or forward
                received_at = time.monotonic()
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else None
                rule = proxy._take(self.command, self.path)
                if rule is not None and rule.delay:
                    time.sleep(rule.delay)
                if rule is not None and rule.drop:
                    proxy.record(received_at, self.command, self.path, -1)
                    self.close_connection = True
                    self.connection.shutdown(2)
                    return
                if rule is not None and rule.watch_error:
                    line = (
                        b'{"type":"ERROR","object":{"kind":"Status","apiVersion":"v1","status":"Failure",'
                        b'"message":"too old resource version: injected","reason":"Expired","code":%d}}\n'
                        % rule.watch_error
                    )
                    self.send_response(200)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(line)))
                    self.end_headers()
                    self.wfile.write(line)
                    proxy.record(received_at, self.command, self.path, 200)
                    return
                if rule is not None and rule.status:
                    payload = rule.body or (
                        b'{"kind":"Status","apiVersion":"v1","status":"Failure","reason":"Injected","code":%d,'
                        b'"message":"injected by the fault proxy"}' % rule.status
                    )
                    self.send_response(rule.status)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(payload)))
                    if rule.retry_after is not None:
                        self.send_header("Retry-After", str(rule.retry_after))
                    self.end_headers()
                    self.wfile.write(payload)
                    proxy.record(received_at, self.command, self.path, rule.status)
                    return
                headers = {k: v for k, v in self.headers.items() if k.lower() not in ("host", "authorization")}
                headers["Authorization"] = f"Bearer {token}"
                try:
                    resp = pool.urlopen(
                        self.command,
                        self.path,
                        body=body,
                        headers=headers,
                        preload_content=False,
                        retries=False,
                        timeout=urllib3.Timeout(connect=5, read=600),
                    )
                except Exception:
                    proxy.record(received_at, self.command, self.path, 502)
                    self.send_error(502)
                    return
                proxy.record(received_at, self.command, self.path, resp.status)
                if rule is not None and rule.drop_after_forward:
                    resp.read()
                    resp.release_conn()
                    self.close_connection = True
                    self.connection.shutdown(2)
                    return
                self.send_response(resp.status)
                for k, v in resp.headers.items():
                    if k.lower() not in ("transfer-encoding", "content-length", "connection"):
                        self.send_header(k, v)
                self.send_header("Transfer-Encoding", "chunked")
                self.end_headers()
                with proxy._lock:
                    proxy.streams.add(self.connection)
                try:
                    if rule is not None and rule.silent:
                        # Headers went out; now stall like a half-open connection.
                        time.sleep(3600)
                    for chunk in resp.stream(4096, decode_content=False):
                        self.wfile.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
                        self.wfile.flush()
                    self.wfile.write(b"0\r\n\r\n")
                except (OSError, urllib3.exceptions.HTTPError):
                    self.close_connection = True
                finally:
                    with proxy._lock:
                        proxy.streams.discard(self.connection)
                    resp.release_conn()

            do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = _handle

        class Server(socketserver.ThreadingMixIn, http.server.HTTPServer):
            daemon_threads = True
            allow_reuse_address = True

        self.port = free_port()
        self._server = Server(("127.0.0.1", self.port), Handler)
        threading.Thread(target=self._server.serve_forever, name="fault-proxy", daemon=True).start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
