"""A watch that sends nothing for its idle read timeout (a quiet resource: the API server sends
bookmarks only for resources it has seen an event of) is re-opened at once from the same
resourceVersion, as after a server-side timeout: no warning, no backoff."""

from __future__ import annotations

import http.server
import threading
from collections.abc import Iterator
from typing import Any
from urllib.parse import parse_qs, urlsplit

import orjson
import pytest
from kubernetes.client import Configuration
from structlog.testing import capture_logs

from custom_scheduler.devenv import cluster
from custom_scheduler.kube.client import KubeClient
from custom_scheduler.kube.watch import Reflector


class _Server(http.server.ThreadingHTTPServer):
    watches: list[dict[str, list[str]]]
    release: threading.Event


class _Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _Server

    def do_GET(self) -> None:
        query = parse_qs(urlsplit(self.path).query)
        if "watch" not in query:
            body = orjson.dumps({"items": [], "metadata": {"resourceVersion": "5"}})
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
            return
        self.server.watches.append(query)
        self.send_response(200)
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        self.wfile.flush()
        if len(self.server.watches) > 1:  # the re-opened watch: one event
            line = b'{"type":"ADDED","object":{"metadata":{"name":"a","resourceVersion":"6"}}}\n'
            self.wfile.write(b"%x\r\n%s\r\n" % (len(line), line))
            self.wfile.flush()
        self.server.release.wait(10)  # then silent, the connection left open
        self.close_connection = True

    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture
def server() -> Iterator[_Server]:
    srv = _Server(("127.0.0.1", 0), _Handler)
    srv.watches, srv.release = [], threading.Event()
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    yield srv
    srv.release.set()
    srv.shutdown()
    srv.server_close()


class _Sink:
    def __init__(self) -> None:
        self.events: list[tuple[str, str]] = []

    def replace(self, items: list[dict[str, Any]], resource_version: str) -> None:
        pass

    def on_event(self, kind: str, obj: dict[str, Any]) -> None:
        self.events.append((kind, obj["metadata"]["name"]))


def test_an_idle_watch_is_reopened_at_once_from_its_resource_version(server: _Server) -> None:
    cfg = Configuration()
    cfg.host = f"http://127.0.0.1:{server.server_address[1]}"
    handler, restarts = _Sink(), list[str]()
    with capture_logs() as logs:
        r = Reflector(KubeClient(cfg, qps=0), "/things", handler, name="things", read_timeout=0.3)
        r._on_restart = restarts.append
        r.start()
        try:
            cluster.wait_for(lambda: handler.events, timeout=10, what="the event on the re-opened watch")
        finally:
            r.stop()
            server.release.set()
            r.join(5)
    assert handler.events == [("ADDED", "a")]
    assert restarts[:1] == ["idle"]
    assert [w["resourceVersion"] for w in server.watches[:2]] == [["5"], ["5"]]
    assert [e for e in logs if e["log_level"] in ("warning", "error")] == []
    assert any(e["event"] == "watch_idle_reopened" for e in logs)
