"""The health server over real HTTP on a loopback port: probes, readiness gating, /metrics."""

from __future__ import annotations

import socket
import threading
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator

import pytest

from custom_scheduler.health import HealthServer, parse_address
from custom_scheduler.metrics import Metrics


def _get(url: str, *, method: str = "GET", headers: dict[str, str] | None = None) -> tuple[int, bytes, str]:
    req = urllib.request.Request(url, method=method, headers=headers or {})
    try:
        with urllib.request.urlopen(req, timeout=5) as resp:
            return resp.status, resp.read(), resp.headers.get("Content-Type", "")
    except urllib.error.HTTPError as e:
        with e:
            return e.code, e.read(), e.headers.get("Content-Type", "")


class Flags:
    def __init__(self) -> None:
        self.ready = False
        self.healthy = True


@pytest.fixture
def flags() -> Flags:
    return Flags()


@pytest.fixture
def metrics() -> Metrics:
    return Metrics(process_collectors=False)


@pytest.fixture
def server(flags: Flags, metrics: Metrics) -> Iterator[HealthServer]:
    srv = HealthServer("127.0.0.1:0", lambda: flags.ready, metrics, healthy=lambda: flags.healthy).start()
    yield srv
    srv.stop()


def test_port_zero_binds_a_free_port(server: HealthServer) -> None:
    assert server.port > 0
    assert server.url == f"http://127.0.0.1:{server.port}"


def test_readyz_is_503_until_caches_sync_then_200(server: HealthServer, flags: Flags) -> None:
    status, body, _ = _get(f"{server.url}/readyz")
    assert status == 503
    assert b"not ready" in body
    flags.ready = True
    assert _get(f"{server.url}/readyz")[:2] == (200, b"ok")


@pytest.mark.parametrize("path", ["/healthz", "/livez", "/healthz/", "/livez?verbose"])
def test_liveness_endpoints_follow_healthy(server: HealthServer, flags: Flags, path: str) -> None:
    """/healthz and /livez are 200 while healthy (ready or not), 500 once the loop is wedged."""
    assert _get(f"{server.url}{path}")[:2] == (200, b"ok")
    flags.healthy = False
    assert _get(f"{server.url}{path}")[0] == 500


def test_metrics_serves_the_registry(server: HealthServer, metrics: Metrics) -> None:
    """/metrics shows the Observer's updates in Prometheus' text format."""
    metrics.observer().attempt("custom-scheduler", "scheduled", 0.01)
    metrics.observer().pending({"active": 4})
    status, body, content_type = _get(f"{server.url}/metrics")
    assert status == 200
    assert content_type.startswith("text/plain; version=0.0.4")
    text = body.decode()
    assert 'scheduler_schedule_attempts_total{profile="custom-scheduler",result="scheduled"} 1.0' in text
    assert 'scheduler_pending_pods{queue="active"} 4.0' in text
    assert "scheduler_scheduling_attempt_duration_seconds_bucket" in text
    assert "custom_scheduler_leader" in text


def test_metrics_negotiates_openmetrics(server: HealthServer) -> None:
    status, body, content_type = _get(
        f"{server.url}/metrics", headers={"Accept": "application/openmetrics-text; version=1.0.0"}
    )
    assert status == 200
    assert content_type.startswith("application/openmetrics-text")
    assert body.rstrip().endswith(b"# EOF")


def test_unknown_path_is_404(server: HealthServer) -> None:
    assert _get(f"{server.url}/configz")[0] == 404


def test_head_has_status_but_no_body(server: HealthServer, flags: Flags) -> None:
    flags.ready = True
    status, body, _ = _get(f"{server.url}/readyz", method="HEAD")
    assert (status, body) == (200, b"")


def test_a_failing_check_reads_as_not_ready_instead_of_crashing(metrics: Metrics) -> None:
    def broken() -> bool:
        raise RuntimeError("boom")

    srv = HealthServer("127.0.0.1:0", broken, metrics, healthy=broken).start()
    try:
        assert _get(f"{srv.url}/readyz")[0] == 503
        assert _get(f"{srv.url}/healthz")[0] == 500
        assert _get(f"{srv.url}/metrics")[0] == 200
    finally:
        srv.stop()


def test_concurrent_scrapes_are_served(server: HealthServer, flags: Flags) -> None:
    """ThreadingHTTPServer: probes and scrapes in parallel all get answers."""
    flags.ready = True
    results: list[int] = []
    lock = threading.Lock()

    def hit(path: str) -> Callable[[], None]:
        def run() -> None:
            status = _get(f"{server.url}{path}")[0]
            with lock:
                results.append(status)

        return run

    threads = [threading.Thread(target=hit(p)) for p in ("/readyz", "/healthz", "/metrics") * 5]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    assert results == [200] * 15


def test_stop_frees_the_port(flags: Flags, metrics: Metrics) -> None:
    srv = HealthServer("127.0.0.1:0", lambda: True, metrics).start()
    port = srv.port
    srv.stop()
    srv.stop()  # idempotent
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind(("127.0.0.1", port))


def test_address_in_use_raises(server: HealthServer, metrics: Metrics) -> None:
    with pytest.raises(OSError, match="in use"):
        HealthServer(f"127.0.0.1:{server.port}", lambda: True, metrics).start()


@pytest.mark.parametrize(
    ("address", "expected"),
    [
        pytest.param("0.0.0.0:10259", ("0.0.0.0", 10259), id="ipv4-any"),
        pytest.param(":10259", ("", 10259), id="empty-host"),
        pytest.param("[::]:10259", ("::", 10259), id="ipv6"),
        pytest.param("127.0.0.1:0", ("127.0.0.1", 0), id="port-zero"),
    ],
)
def test_parse_address(address: str, expected: tuple[str, int]) -> None:
    assert parse_address(address) == expected


@pytest.mark.parametrize("address", ["10259", "host:", "host:http"])
def test_parse_address_rejects_garbage(address: str) -> None:
    with pytest.raises(ValueError, match="host:port"):
        parse_address(address)
