"""The bearer token is read through the client configuration's refresh hook, but not per request."""

from __future__ import annotations

import http.server
import threading
import time
from collections.abc import Iterator

import pytest
from kubernetes.client import Configuration

from custom_scheduler.kube import api_errors
from custom_scheduler.kube import client as kc


class _Server(http.server.ThreadingHTTPServer):
    status = 200
    seen: list[str]


class _Handler(http.server.BaseHTTPRequestHandler):
    server: _Server

    def do_GET(self) -> None:
        self.server.seen.append(self.headers.get("Authorization", ""))
        body = b"{}" if self.server.status == 200 else b'{"kind":"Status","reason":"Unauthorized"}'
        self.send_response(self.server.status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture
def server() -> Iterator[_Server]:
    srv = _Server(("127.0.0.1", 0), _Handler)
    srv.seen = []
    t = threading.Thread(target=srv.serve_forever, daemon=True)
    t.start()
    yield srv
    srv.shutdown()
    srv.server_close()


def _client(server: _Server, tokens: list[str]) -> kc.KubeClient:
    cfg = Configuration()
    cfg.host = f"http://127.0.0.1:{server.server_address[1]}"
    cfg.api_key_prefix = {"BearerToken": "Bearer"}
    cfg.api_key = {"BearerToken": tokens[0]}
    calls = iter(tokens)

    def refresh(c: Configuration) -> None:  # what in-cluster and exec credentials install
        c.api_key = {"BearerToken": next(calls, tokens[-1])}

    cfg.refresh_api_key_hook = refresh  # type: ignore[assignment]  # the client's stubs type the hook as None
    return kc.KubeClient(cfg, qps=0, burst=1)


def test_token_is_cached_between_requests(server: _Server) -> None:
    client = _client(server, ["one", "two", "three"])
    client.get("/a")
    client.get("/b")
    assert server.seen == ["Bearer one", "Bearer one"]


def test_token_is_read_again_after_the_refresh_interval(server: _Server, monkeypatch: pytest.MonkeyPatch) -> None:
    client = _client(server, ["one", "two"])
    now = [1000.0]
    monkeypatch.setattr(time, "monotonic", lambda: now[0])  # the client reads time.monotonic
    client.get("/a")
    now[0] += kc.AUTH_REFRESH + 1
    client.get("/b")
    assert server.seen == ["Bearer one", "Bearer two"]


def test_a_401_makes_the_next_request_read_the_token_again(server: _Server) -> None:
    client = _client(server, ["old", "new"])
    server.status = 401
    with pytest.raises(api_errors.ApiError) as e:
        client.get("/a")
    assert e.value.status == 401
    server.status = 200
    client.get("/b")
    assert server.seen == ["Bearer old", "Bearer new"]


def test_a_token_ending_in_a_newline_is_trimmed(server: _Server) -> None:
    """A token file written with a trailing newline (client-go trims it) still authenticates."""
    client = _client(server, ["tok\n"])
    client.get("/a")
    assert server.seen == ["Bearer tok"]
