"""The client reports every request to its RequestObserver (client-go's rest_client_* hooks): the
status of every answer (``<error>`` when none came), the latency of non-streaming requests, the
rate limiter's wait of limited ones; clones report to the same observer."""

from __future__ import annotations

import http.server
import threading
from collections.abc import Iterator

import pytest
from kubernetes.client import Configuration

from custom_scheduler.devenv.controlplane import free_port
from custom_scheduler.kube import api_errors
from custom_scheduler.kube import client as kc


class _Handler(http.server.BaseHTTPRequestHandler):
    def _answer(self) -> None:
        status = 404 if "missing" in self.path else 201 if self.command == "POST" else 200
        body = b"{}"
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    do_GET = do_POST = _answer

    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture
def base() -> Iterator[str]:
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    t = threading.Thread(target=srv.serve_forever, daemon=True)
    t.start()
    yield f"http://127.0.0.1:{srv.server_address[1]}"
    srv.shutdown()
    srv.server_close()


class Seen(kc.RequestObserver):
    def __init__(self) -> None:
        self.results: list[tuple[str, str, str]] = []
        self.latencies: list[str] = []
        self.throttles: list[str] = []

    def result(self, verb: str, base: str, code: str) -> None:
        self.results.append((verb, base, code))

    def latency(self, verb: str, base: str, seconds: float) -> None:
        assert seconds >= 0
        self.latencies.append(verb)

    def throttled(self, verb: str, base: str, seconds: float) -> None:
        self.throttles.append(verb)


def _client(host: str, seen: Seen) -> kc.KubeClient:
    cfg = Configuration()
    cfg.host = host
    return kc.KubeClient(cfg, qps=100, burst=10, observer=seen)


def test_every_request_is_reported(base: str) -> None:
    seen = Seen()
    c = _client(base, seen)
    c.get("/api/v1/nodes")
    c.post("/api/v1/namespaces/d/pods/p/binding", {"kind": "Binding"})
    with pytest.raises(api_errors.NotFound):
        c.get("/api/v1/missing")
    list(c.clone(qps=0).stream("/api/v1/pods", {"watch": "true"}))
    assert seen.results == [("GET", base, "200"), ("POST", base, "201"), ("GET", base, "404"), ("GET", base, "200")]
    assert seen.latencies == ["GET", "POST", "GET"]  # no latency for a watch, as client-go
    assert seen.throttles == ["POST"]  # only writes pass the token bucket


def test_no_answer_is_reported_as_error() -> None:
    seen = Seen()
    c = _client(f"http://127.0.0.1:{free_port()}", seen)
    with pytest.raises(api_errors.TransportError):
        c.get("/api/v1/nodes")
    assert [code for _, _, code in seen.results] == ["<error>"]
    assert seen.latencies == ["GET"]
