"""The kube client's keep-alive pool (``kube.http_pool``) against a real local HTTP/1.1 server:
connections kept and reused, every body framing read to its end, a connection the server closed
replaced, a read timeout and an error status reported as the urllib3 path reports them, TLS
checked against the CA and the ``tls-server-name``, and what the pool leaves to urllib3."""

from __future__ import annotations

import http.server
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest
from kubernetes.client import Configuration

from custom_scheduler.kube import api_errors, http_pool
from custom_scheduler.kube.client import KubeClient
from custom_scheduler.server.health import HealthServer
from tests.secure import tls_health_server


class _Server(http.server.ThreadingHTTPServer):
    connections: int
    closed: threading.Event
    seen: list[tuple[str, str, bytes, str]]


class _Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive unless told otherwise
    server: _Server

    def setup(self) -> None:
        super().setup()
        self.server.connections += 1

    def _answer(self, status: int, body: bytes, **headers: str) -> None:
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        for k, v in headers.items():
            self.send_header(k.replace("_", "-"), v)
        if "Transfer_Encoding" not in headers:
            self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self) -> None:
        self._route(b"")

    def do_POST(self) -> None:
        self._route(self.rfile.read(int(self.headers.get("Content-Length", "0"))))

    def _route(self, body: bytes) -> None:
        self.server.seen.append((self.command, self.path, body, self.headers.get("Content-Length", "")))
        if self.path == "/chunked":
            self._answer(200, b"", Transfer_Encoding="chunked")
            for part in (b'{"items"', b": [1, 2, 3]}"):
                self.wfile.write(b"%x\r\n%s\r\n" % (len(part), part))
            self.wfile.write(b"0\r\n\r\n")
        elif self.path.startswith("/watch"):  # two events, the second split across chunks
            self._answer(200, b"", Transfer_Encoding="chunked")
            parts = [b'{"type":"ADDED","n":1}\n{"type":', b'"MODIFIED","n":2}\n']
            if "hang" in self.path:  # then nothing more, the connection left open
                parts = parts[:1]
            for part in parts:
                self.wfile.write(b"%x\r\n%s\r\n" % (len(part), part))
                self.wfile.flush()
            if "hang" in self.path:
                self.server.closed.wait(10)
                return
            self.wfile.write(b"0\r\n\r\n")
        elif self.path == "/forbidden-watch":
            self._answer(403, b'{"kind":"Status","reason":"Forbidden","message":"no"}')
        elif self.path == "/close":
            self._answer(200, b'{"closing": true}', Connection="close")
            self.close_connection = True
        elif self.path == "/drop":  # answers as if keeping the connection, then closes it
            self._answer(200, b'{"dropped": true}')
            self.close_connection = True
        elif self.path == "/throttled":
            self._answer(429, b'{"kind":"Status","reason":"TooManyRequests","message":"slow down"}', Retry_After="3")
        elif self.path == "/slow":
            time.sleep(1.0)
            self._answer(200, b"{}")
        else:
            self._answer(200 if self.command == "GET" else 201, orjson.dumps({"path": self.path, "got": body.decode()}))

    def finish(self) -> None:
        super().finish()
        if self.close_connection:
            self.server.closed.set()

    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture
def server() -> Iterator[_Server]:
    srv = _Server(("127.0.0.1", 0), _Handler)
    srv.connections, srv.closed, srv.seen = 0, threading.Event(), []
    t = threading.Thread(target=srv.serve_forever, daemon=True)
    t.start()
    yield srv
    srv.shutdown()
    srv.server_close()


def _client(server: _Server, **cfg: Any) -> KubeClient:
    c = Configuration()
    c.host = f"http://127.0.0.1:{server.server_address[1]}"
    for k, v in cfg.items():
        setattr(c, k, v)
    return KubeClient(c, qps=0, burst=1)


def _wait(cond: Callable[[], bool], what: str, timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, what
        time.sleep(0.01)


def test_one_connection_carries_every_request_and_each_body_framing(server: _Server) -> None:
    client = _client(server)
    assert client._lean is not None
    assert client.get("/a") == {"path": "/a", "got": ""}
    assert client.get("/chunked") == {"items": [1, 2, 3]}
    assert client.post("/b", {"x": 1}) == {"path": "/b", "got": '{"x":1}'}
    assert client.get("/c", {"labelSelector": "app=x", "limit": 5, "empty": ""}) == {
        "path": "/c?labelSelector=app%3Dx&limit=5",
        "got": "",
    }
    assert server.connections == 1
    assert [(m, cl) for m, _, _, cl in server.seen] == [("GET", ""), ("GET", ""), ("POST", "7"), ("GET", "")]


def test_a_connection_the_server_closes_is_not_reused(server: _Server) -> None:
    client = _client(server)
    assert client.get("/close") == {"closing": True}
    assert client.get("/a")["path"] == "/a"
    assert server.connections == 2


def test_a_kept_connection_closed_while_idle_is_replaced_before_use(server: _Server) -> None:
    client = _client(server)
    pool = client._lean
    assert pool is not None
    assert client.get("/drop") == {"dropped": True}  # kept: the answer did not say close
    assert server.closed.wait(5)
    _wait(lambda: not http_pool._usable(pool._idle[0]), "the closed connection reads as closed")
    assert client.post("/after", {"n": 1})["got"] == '{"n":1}'  # a POST: not a replay, a fresh connection
    assert server.connections == 2
    assert [p for _, p, _, _ in server.seen] == ["/drop", "/after"]


def _closed_but_taken(server: _Server, monkeypatch: pytest.MonkeyPatch) -> KubeClient:
    """A client whose kept connection the server has closed, and whose pool no longer notices it:
    the race the poll cannot see, a close that arrives after the connection was taken."""
    client = _client(server)
    pool = client._lean
    assert pool is not None
    assert client.get("/drop") == {"dropped": True}
    assert server.closed.wait(5)
    _wait(lambda: not http_pool._usable(pool._idle[0]), "closed")
    monkeypatch.setattr(http_pool, "_usable", lambda sock: True)
    return client


def test_a_get_is_replayed_once_when_a_kept_connection_ends_unanswered(
    server: _Server, monkeypatch: pytest.MonkeyPatch
) -> None:
    client = _closed_but_taken(server, monkeypatch)
    assert client.get("/again")["path"] == "/again"
    assert server.connections == 2


def test_a_post_on_a_connection_that_ends_unanswered_is_never_sent_twice(
    server: _Server, monkeypatch: pytest.MonkeyPatch
) -> None:
    client = _closed_but_taken(server, monkeypatch)
    pool = client._lean
    assert pool is not None
    failures: list[BaseException] = []
    exchange = pool._begin

    def watched(*args: Any) -> Any:
        try:
            return exchange(*args)
        except BaseException as e:
            failures.append(e)
            raise

    monkeypatch.setattr(pool, "_begin", watched)
    # The kernel usually takes the write to the closed peer: then no answer comes, the POST may
    # have been served, and it must not be sent again. Only a write that failed is replayed.
    try:
        got = client.post("/once", {"n": 1})
    except api_errors.TransportError:
        got = None
    assert len(failures) == 1
    unsent = isinstance(failures[0], http_pool._Unsent)
    assert (got is not None) == unsent  # replayed (and answered) exactly when nothing was written
    assert [p for m, p, _, _ in server.seen if m == "POST"] == (["/once"] if unsent else [])


def test_an_error_status_and_a_read_timeout_as_the_urllib3_path_reports_them(server: _Server) -> None:
    client = _client(server)
    with pytest.raises(api_errors.ApiError) as err:
        client.get("/throttled")
    assert (err.value.status, err.value.reason, err.value.retry_after) == (429, "TooManyRequests", 3.0)
    with pytest.raises(api_errors.TransportError, match="GET /slow: TimeoutError"):
        client.get("/slow", timeout=(1.0, 0.2))
    assert client.get("/a")["path"] == "/a"  # the timed-out connection was dropped, not reused


def test_a_header_that_would_split_the_request_is_refused_before_sending(server: _Server) -> None:
    client = _client(server, api_key={"BearerToken": "t\r\nX-Evil: 1"}, api_key_prefix={"BearerToken": "Bearer"})
    with pytest.raises(ValueError, match="invalid HTTP header 'Authorization'"):
        client.get("/a")
    assert server.seen == []


@pytest.mark.parametrize(
    ("settings", "lean"),
    [
        pytest.param({}, True, id="plain"),
        pytest.param({"proxy": "http://proxy.example:3128"}, False, id="proxy"),
        pytest.param({"socket_options": []}, False, id="socket-options"),
        pytest.param({"assert_hostname": "apiserver"}, False, id="assert-hostname"),
        pytest.param({"host": "https://lb.example/k8s"}, False, id="path-prefix"),
        pytest.param({"host": "https://[::1]:6443"}, True, id="ipv6"),
    ],
)
def test_what_the_pool_leaves_to_urllib3(settings: dict[str, Any], lean: bool) -> None:
    c = Configuration()
    c.host = "http://127.0.0.1:6443"
    for k, v in settings.items():
        setattr(c, k, v)
    pool = http_pool.lean_pool(c, 4)
    assert (pool is not None) == lean
    if pool is not None and "[::1]" in c.host:
        assert (pool.host, pool.port, pool._host_header) == ("::1", 6443, b"[::1]:6443")


# -- TLS: the health server's HTTPS port, with a self-signed certificate for two names ----------


@pytest.fixture
def tls_server() -> Iterator[HealthServer]:
    srv = tls_health_server(["127.0.0.1", "apiserver.example"])
    yield srv
    srv.stop()


def _tls_client(srv: HealthServer, tmp_path: Path, **cfg: Any) -> KubeClient:
    assert srv.certs is not None
    ca = tmp_path / "ca.crt"
    ca.write_bytes(srv.certs.ca_pem)
    c = Configuration()
    c.host = srv.url
    c.ssl_ca_cert = str(ca)
    for k, v in cfg.items():
        setattr(c, k, v)
    return KubeClient(c, qps=0, burst=1)


@pytest.mark.parametrize(
    ("settings", "ok"),
    [
        pytest.param({}, True, id="its-ca"),
        pytest.param({"tls_server_name": "apiserver.example"}, True, id="server-name-in-cert"),
        pytest.param({"tls_server_name": "other.example"}, False, id="server-name-not-in-cert"),
        pytest.param({"ssl_ca_cert": None}, False, id="unknown-ca"),
        pytest.param({"ssl_ca_cert": None, "verify_ssl": False}, True, id="not-verified"),
    ],
)
def test_tls_is_checked_as_the_kubeconfig_says(
    tls_server: HealthServer, tmp_path: Path, settings: dict[str, Any], ok: bool
) -> None:
    client = _tls_client(tls_server, tmp_path, **settings)
    assert client._lean is not None
    if ok:
        assert client.request_raw("GET", "/healthz") == b"ok"
    else:
        with pytest.raises(api_errors.TransportError, match="CERTIFICATE_VERIFY_FAILED"):
            client.request_raw("GET", "/healthz")


def test_ca_data_is_trusted_as_a_ca_file_is(tls_server: HealthServer, tmp_path: Path) -> None:
    assert tls_server.certs is not None
    client = _tls_client(tls_server, tmp_path, ssl_ca_cert=None, ca_cert_data=tls_server.certs.ca_pem.decode())
    assert client.request_raw("GET", "/healthz") == b"ok"


# -- watches on the lean pool ---------------------------------------------------------------------


def test_a_watch_takes_the_connection_its_list_left_and_yields_whole_lines(server: _Server) -> None:
    client = _client(server)
    assert client.get("/a")["path"] == "/a"
    lines = list(client.stream("/watch"))
    assert [orjson.loads(x)["n"] for x in lines] == [1, 2]
    assert server.connections == 1  # no connection (no TLS handshake) of the watch's own


def test_a_watch_is_closed_not_kept_after_it_ends(server: _Server) -> None:
    client = _client(server)
    assert len(list(client.stream("/watch"))) == 2
    assert client._lean is not None
    assert client._lean._idle == []
    client.get("/a")
    assert server.connections == 2


def test_a_watch_error_status_raises_as_on_urllib3(server: _Server) -> None:
    client = _client(server)
    with pytest.raises(api_errors.ApiError) as err:
        list(client.stream("/forbidden-watch"))
    assert err.value.status == 403


@pytest.mark.parametrize("lean", [True, False], ids=["lean-pool", "urllib3-pool"])
def test_a_silent_watch_ends_at_its_idle_timeout(server: _Server, monkeypatch: pytest.MonkeyPatch, lean: bool) -> None:
    if not lean:
        monkeypatch.setattr(http_pool, "lean_pool", lambda *a, **kw: None)
    client = _client(server)
    got: list[bytes] = []
    lines = client.stream("/watch-hang", read_timeout=0.3)
    got.append(next(lines))
    with pytest.raises(api_errors.IdleTimeout, match=r"watch /watch-hang: nothing for 0\.3 s"):
        next(lines)
    server.closed.set()
    assert [orjson.loads(x)["n"] for x in got] == [1]


def test_a_watch_shut_down_from_another_thread_ends_at_once(server: _Server) -> None:
    client = _client(server)
    opened: list[Any] = []
    ended = threading.Event()
    outcome: list[BaseException | None] = []

    def read() -> None:
        try:
            for _ in client.stream("/watch-hang", read_timeout=30, on_open=opened.append):
                pass
            outcome.append(None)
        except api_errors.TransportError as e:
            outcome.append(e)
        ended.set()

    t = threading.Thread(target=read, daemon=True)
    t.start()
    _wait(lambda: bool(opened), "the watch opened")
    opened[0].shutdown()
    assert ended.wait(5), "the reader still blocks after shutdown()"
    server.closed.set()


@pytest.mark.parametrize("lean", [True, False], ids=["lean", "urllib3"])
def test_both_connection_paths_stream_the_same_lines_and_errors(server: _Server, lean: bool) -> None:
    client = _client(server) if lean else _client(server, socket_options=[])  # socket options: urllib3's
    assert (client._lean is not None) == lean
    assert [orjson.loads(x)["n"] for x in client.stream("/watch")] == [1, 2]
    with pytest.raises(api_errors.ApiError) as err:
        list(client.stream("/forbidden-watch"))
    assert err.value.status == 403
