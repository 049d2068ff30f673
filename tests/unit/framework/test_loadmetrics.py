"""loadmetrics: the sources by name, StaticSource, and MetricsServerSource against a loopback server
that speaks metrics.k8s.io/v1beta1 (NodeMetricsList), through the real KubeClient."""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import orjson
import pytest
from structlog.testing import capture_logs

from custom_scheduler import config
from custom_scheduler.errors import ConfigError
from custom_scheduler.framework import loadmetrics
from custom_scheduler.framework.loadmetrics import MetricsServerSource, NodeUsage, Sources, StaticSource
from custom_scheduler.kube.client import KubeClient
from custom_scheduler.plugins import load_aware
from custom_scheduler.plugins.builtin import full_registry


class FakeMetricsServer:
    """A loopback HTTP server answering ``GET /apis/metrics.k8s.io/v1beta1/nodes`` like metrics-server.

    ``usage`` maps node name → (cpu, memory) quantities; each answer is stamped ``now - lag`` with a
    ``window``. Set ``fail_status`` to answer with that HTTP status instead. ``requests`` counts LISTs.
    """

    def __init__(self, lag: float = 1.0, window: str = "10.5s") -> None:
        self.usage: dict[str, tuple[str, str]] = {}
        self.lag = lag
        self.window = window
        self.fail_status = 0
        self.body_override: bytes | None = None
        self.requests = 0
        self.paths: list[str] = []
        self._lock = threading.Lock()
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                outer._answer(self)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self._thread = threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)

    def node_metrics_list(self) -> dict[str, Any]:
        ts = datetime.fromtimestamp(time.time() - self.lag, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        with self._lock:
            usage = dict(self.usage)
        return {
            "kind": "NodeMetricsList",
            "apiVersion": "metrics.k8s.io/v1beta1",
            "metadata": {},
            "items": [
                {
                    "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name}},
                    "timestamp": ts,
                    "window": self.window,
                    "usage": {"cpu": cpu, "memory": memory},
                }
                for name, (cpu, memory) in sorted(usage.items())
            ],
        }

    def set(self, name: str, cpu: str, memory: str) -> None:
        with self._lock:
            self.usage[name] = (cpu, memory)

    def _answer(self, h: BaseHTTPRequestHandler) -> None:
        self.requests += 1
        self.paths.append(h.path)
        if h.path != loadmetrics.NODE_METRICS_PATH:
            status, body = 404, orjson.dumps({"kind": "Status", "reason": "NotFound", "message": "not found"})
        elif self.fail_status:
            status, body = self.fail_status, orjson.dumps({"kind": "Status", "reason": "ServiceUnavailable"})
        else:
            status, body = 200, self.body_override or orjson.dumps(self.node_metrics_list())
        h.send_response(status)
        h.send_header("Content-Type", "application/json")
        h.send_header("Content-Length", str(len(body)))
        h.end_headers()
        h.wfile.write(body)

    def client(self) -> KubeClient:
        from kubernetes.client import Configuration

        cfg = Configuration()
        cfg.host = self.url
        return KubeClient(cfg, qps=0, burst=1)

    def __enter__(self) -> FakeMetricsServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def server() -> Iterator[FakeMetricsServer]:
    with FakeMetricsServer() as s:
        yield s


def wait_until(pred: Any, timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not pred():
        if time.monotonic() > deadline:
            raise AssertionError("condition not met in time")
        time.sleep(0.01)


# --- MetricsServerSource -------------------------------------------------------------------------


def test_refresh_lists_node_metrics(server: FakeMetricsServer) -> None:
    server.set("a", "250m", "1Gi")
    server.set("b", "1500000n", "2048Ki")
    src = MetricsServerSource(server.client(), name=f"t-{uuid.uuid4().hex}")
    assert src.get("a") is None
    before = time.time()
    assert src.refresh() is True
    a, b = src.get("a"), src.get("b")
    assert a is not None
    assert b is not None
    assert (a.milli_cpu, a.memory, a.window) == (250, 2**30, 10.5)
    assert (b.milli_cpu, b.memory) == (2, 2048 * 1024)  # 1.5m rounds up to 2m, as Quantity.MilliValue
    assert before - 3 <= a.timestamp <= before  # server time, one second in the past (whole seconds)
    assert src.get("c") is None
    assert src.nodes().keys() == {"a", "b"}
    assert server.paths == ["/apis/metrics.k8s.io/v1beta1/nodes"]
    assert src.last_refresh is not None
    assert src.refreshes == 1


def test_background_thread_lists_once_per_interval_never_per_read(server: FakeMetricsServer) -> None:
    server.set("a", "1", "1Gi")
    src = MetricsServerSource(server.client(), interval=0.2, name=f"t-{uuid.uuid4().hex}")
    src.start()
    try:
        wait_until(lambda: src.get("a") is not None)
        for _ in range(10_000):
            src.get("a")
        assert server.requests <= 2
        server.set("a", "3", "1Gi")
        wait_until(lambda: (u := src.get("a")) is not None and u.milli_cpu == 3000)
        time.sleep(0.5)
        assert 3 <= server.requests <= 6
    finally:
        src.stop()
    n = server.requests
    time.sleep(0.3)
    assert server.requests == n  # stopped


def test_failed_refresh_keeps_old_samples_and_logs_once(server: FakeMetricsServer) -> None:
    server.set("a", "1", "1Gi")
    src = MetricsServerSource(server.client(), name=f"t-{uuid.uuid4().hex}")
    assert src.refresh()
    server.fail_status = 503
    with capture_logs() as logs:
        assert src.refresh() is False
        assert src.refresh() is False
    assert [e["event"] for e in logs] == ["node_metrics_refresh_failed"]
    assert "503" in logs[0]["error"]
    assert logs[0]["kept"] == 1
    assert src.get("a") is not None
    assert src.failures == 2
    server.fail_status = 0
    with capture_logs() as logs:
        assert src.refresh()
    assert [e["event"] for e in logs] == ["node_metrics_refresh_recovered"]


def test_unreachable_server_and_garbage_never_raise(server: FakeMetricsServer) -> None:
    src = MetricsServerSource(server.client(), path="/apis/metrics.k8s.io/v1beta1/nope", name="x")
    with capture_logs():
        assert src.refresh() is False  # 404: metrics-server not installed
    server.body_override = b'{"items": "nope"}'
    src = MetricsServerSource(server.client(), name="x")
    with capture_logs():
        assert src.refresh() is False
    from kubernetes.client import Configuration

    cfg = Configuration()
    cfg.host = "http://127.0.0.1:1"
    with capture_logs():
        assert MetricsServerSource(KubeClient(cfg, qps=0), name="x").refresh() is False


def test_listeners_run_after_each_refresh_and_their_errors_are_contained(server: FakeMetricsServer) -> None:
    src = MetricsServerSource(server.client(), name=f"t-{uuid.uuid4().hex}")
    calls: list[int] = []
    src.add_listener(lambda: calls.append(1))
    src.add_listener(lambda: 1 / 0)
    with capture_logs() as logs:
        assert src.refresh()
        assert src.refresh()
    assert calls == [1, 1]
    assert [e["event"] for e in logs] == ["node_metrics_listener_failed"] * 2


def test_start_is_idempotent_and_stop_joins(server: FakeMetricsServer) -> None:
    src = MetricsServerSource(server.client(), interval=10, name=f"t-{uuid.uuid4().hex}")
    thread = src.start().start()._thread  # idempotent: one thread
    assert thread is not None
    assert thread.is_alive()
    src.stop()
    src.stop()
    assert not thread.is_alive()


def test_interval_must_be_positive() -> None:
    with pytest.raises(ValueError, match="interval must be > 0"):
        MetricsServerSource(object(), interval=0)  # type: ignore[arg-type]


# --- parsing -------------------------------------------------------------------------------------


def test_parse_node_metrics_list_skips_bad_items() -> None:
    doc = {
        "items": [
            {
                "metadata": {"name": "ok"},
                "timestamp": "2024-01-02T03:04:05Z",
                "window": "30s",
                "usage": {"cpu": "1", "memory": "1Mi"},
            },
            {"metadata": {"name": "no-usage"}},
            {"metadata": {"name": "bad-cpu"}, "usage": {"cpu": "lots", "memory": "1"}},
            {"metadata": {"name": "no-ts"}, "usage": {"cpu": "2", "memory": "2"}},
            "garbage",
        ]
    }
    with capture_logs() as logs:
        got = loadmetrics.parse_node_metrics_list(doc, fetched_at=42.0)
    assert got == {
        "ok": NodeUsage("ok", 1000, 2**20, 1704164645.0, 30.0),
        "no-ts": NodeUsage("no-ts", 2000, 2, 42.0, 0.0),
    }
    assert len(logs) == 3
    with pytest.raises(ValueError, match="not a NodeMetricsList"):
        loadmetrics.parse_node_metrics_list([], fetched_at=0)


# --- static source and registry ------------------------------------------------------------------


def test_static_source() -> None:
    src = StaticSource([NodeUsage("x", 1, 2, 3.0)], clock=lambda: 99.0)
    assert src.get("x") == NodeUsage("x", 1, 2, 3.0)
    assert src.set("y", cpu="1500m", memory="1Gi") == NodeUsage("y", 1500, 2**30, 99.0)
    assert src.set("z", cpu=2, memory=100, timestamp=5.0, window=10.0) == NodeUsage("z", 2000, 100, 5.0, 10.0)
    src.remove("x")
    src.remove("x")
    assert src.get("x") is None
    assert isinstance(src, loadmetrics.MetricsSource)


def test_sources() -> None:
    name = "n"
    sources, elsewhere = Sources(), Sources()
    a, b = StaticSource(), StaticSource()
    assert sources.get(name) is None
    sources.install(a, name)
    sources.install(b, name)
    assert sources.get(name) is b
    assert elsewhere.get(name) is None  # no process-wide state
    sources.uninstall(name, a)  # not the installed one: no-op
    assert sources.get(name) is b
    sources.uninstall(name)
    assert sources.get(name) is None
    sources.install(a)
    assert sources.get() is a


# --- for_config ----------------------------------------------------------------------------------

WITH_NODE_LOAD = """
apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
profiles:
- schedulerName: a
  plugins:
    multiPoint:
      enabled: [{name: NodeLoad, weight: 5}]
  pluginConfig:
  - name: NodeLoad
    args: {refreshInterval: 20s, metricsSource: %s}
- schedulerName: b
  plugins:
    multiPoint:
      enabled: [{name: NodeLoad}]
  pluginConfig:
  - name: NodeLoad
    args: {refreshInterval: 10s, metricsSource: %s}
"""

WITHOUT = """
apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
profiles:
- schedulerName: a
"""


def test_metrics_source_for_builds_and_installs_a_source_when_node_load_is_enabled() -> None:
    name = f"t-{uuid.uuid4().hex}"
    sources = Sources()
    cfg = config.load_config(WITH_NODE_LOAD % (name, name), full_registry())
    src = load_aware.metrics_source_for(cfg, object(), sources)  # type: ignore[arg-type]
    assert isinstance(src, MetricsServerSource)
    assert src.interval == 10.0
    assert src.name == name
    assert sources.get(name) is src
    # Already installed under that name: left alone.
    assert load_aware.metrics_source_for(cfg, object(), sources) is None  # type: ignore[arg-type]


def test_metrics_source_for_without_node_load_is_none() -> None:
    cfg = config.load_config(WITHOUT, full_registry())
    assert load_aware.metrics_source_for(cfg, object(), Sources()) is None  # type: ignore[arg-type]
    assert load_aware.source_params(cfg) is None


def test_source_params_change_with_node_load_args() -> None:
    """What a reload compares to decide whether NodeLoad's source must be rebuilt."""
    a = load_aware.source_params(config.load_config(WITH_NODE_LOAD % ("x", "x"), full_registry()))
    b = load_aware.source_params(config.load_config(WITH_NODE_LOAD % ("x", "y"), full_registry()))
    faster = WITH_NODE_LOAD.replace("refreshInterval: 10s", "refreshInterval: 5s") % ("x", "x")
    c = load_aware.source_params(config.load_config(faster, full_registry()))
    assert a == load_aware.SourceParams("x", 10.0, "")
    assert b == load_aware.SourceParams("y", 10.0, "")
    assert c == load_aware.SourceParams("x", 5.0, "")


def test_metrics_url_reads_node_metrics_directly_from_that_url(server: FakeMetricsServer) -> None:
    """``metricsURL`` bypasses the API server: the source LISTs ``<url>/apis/metrics.k8s.io/...``."""
    name = f"t-{uuid.uuid4().hex}"
    server.set("n1", "500m", "1Gi")
    text = (WITH_NODE_LOAD % (name, name)).replace(
        f"metricsSource: {name}}}", f"metricsSource: {name}, metricsURL: '{server.url}'}}"
    )
    cfg = config.load_config(text, full_registry())
    src = load_aware.metrics_source_for(cfg, object(), Sources())  # type: ignore[arg-type]
    assert isinstance(src, MetricsServerSource)
    try:
        assert isinstance(src.client, loadmetrics.URLGetter)
        assert src.refresh()
        usage = src.get("n1")
        assert usage is not None
        assert usage.milli_cpu == 500
    finally:
        src.stop()


def test_metrics_url_must_be_http() -> None:
    text = (WITH_NODE_LOAD % ("x", "x")).replace("metricsSource: x}", "metricsSource: x, metricsURL: 'ftp://h'}")
    with pytest.raises(ConfigError, match=r"metricsURL"):
        config.load_config(text, full_registry())
