"""The health server over real HTTPS on a loopback port: probes, readiness gating, /metrics behind
delegated authentication and authorization (a fake review API here; the real one in
tests/integration/test_secure_serving.py), plain HTTP refused."""

from __future__ import annotations

import socket
import ssl
import threading
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator

import pytest

from custom_scheduler.server.delegated_auth import DelegatingAuth
from custom_scheduler.server.health import HealthServer, parse_address
from custom_scheduler.server.metrics import Metrics
from custom_scheduler.server.serving import ServingCerts
from tests.secure import FakeReviewApi
from tests.secure import get as _https_get

#: An identity the fake API server authorizes for GET /metrics, one it knows but does not, one in
#: system:masters (allowed without a SubjectAccessReview).
READER, NOBODY, MASTER = "reader-token", "nobody-token", "master-token"


def _api() -> FakeReviewApi:
    return FakeReviewApi(
        {READER: ("prometheus", ()), NOBODY: ("nobody", ()), MASTER: ("admin", ("system:masters",))},
        {("prometheus", "/metrics", "get")},
    )


def _get(
    url: str, *, method: str = "GET", headers: dict[str, str] | None = None, token: str | None = READER
) -> tuple[int, bytes, str]:
    return _https_get(url, method=method, headers=headers, token=token)


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


@pytest.fixture(scope="module")
def certs() -> ServingCerts:
    return ServingCerts.self_signed(["localhost", "127.0.0.1"])


@pytest.fixture
def api() -> FakeReviewApi:
    return _api()


@pytest.fixture
def server(flags: Flags, metrics: Metrics, certs: ServingCerts, api: FakeReviewApi) -> Iterator[HealthServer]:
    srv = HealthServer(
        "127.0.0.1:0",
        lambda: flags.ready,
        metrics,
        healthy=lambda: flags.healthy,
        auth=DelegatingAuth(api),
        certs=certs,
    ).start()
    yield srv
    srv.stop()


def _server(metrics: Metrics, ready: Callable[[], bool], healthy: Callable[[], bool] = lambda: True) -> HealthServer:
    return HealthServer("127.0.0.1:0", ready, metrics, healthy, auth=DelegatingAuth(_api()))


def test_port_zero_binds_a_free_port(server: HealthServer) -> None:
    assert server.port > 0
    assert server.url == f"https://127.0.0.1:{server.port}"


def test_the_self_signed_certificate_verifies_for_loopback(server: HealthServer, certs: ServingCerts) -> None:
    """A client that trusts the generated CA verifies the chain and the 127.0.0.1 SAN."""
    assert _https_get(f"{server.url}/healthz", ca_pem=certs.ca_pem)[:2] == (200, b"ok")
    with pytest.raises(urllib.error.URLError, match="CERTIFICATE_VERIFY_FAILED"):
        urllib.request.urlopen(f"{server.url}/healthz", timeout=5, context=ssl.create_default_context())


@pytest.mark.parametrize(
    ("path", "token", "status"),
    [
        pytest.param("/metrics", None, 401, id="metrics-anonymous"),
        pytest.param("/metrics", "not-a-token", 401, id="metrics-bad-token"),
        pytest.param("/metrics", NOBODY, 403, id="metrics-not-authorized"),
        pytest.param("/metrics", READER, 200, id="metrics-authorized"),
        pytest.param("/metrics/", READER, 200, id="metrics-trailing-slash"),
        pytest.param("/metrics", MASTER, 200, id="metrics-system-masters"),
        pytest.param("/configz", None, 401, id="unknown-path-anonymous"),
        pytest.param("/configz", NOBODY, 403, id="unknown-path-not-authorized"),
        pytest.param("/debug/pprof/", MASTER, 404, id="unknown-path-authorized"),
        pytest.param("/healthz", None, 200, id="healthz-anonymous"),
        pytest.param("/livez", None, 200, id="livez-anonymous"),
        pytest.param("/readyz", None, 200, id="readyz-anonymous"),
        pytest.param("/healthz", "not-a-token", 200, id="healthz-ignores-credentials"),
    ],
)
def test_who_may_see_what(server: HealthServer, flags: Flags, path: str, token: str | None, status: int) -> None:
    """Probes are open; everything else, unknown paths included, needs an authorized token."""
    flags.ready = True
    got, body, content_type = _get(f"{server.url}{path}", token=token)
    assert got == status, body
    if status in (401, 403):
        assert content_type == "application/json"
        assert b"scheduler_" not in body
        assert (b'"reason":"Unauthorized"' if status == 401 else b'cannot get path \\"') in body


@pytest.mark.parametrize(
    ("verbs", "status"),
    [pytest.param({"get"}, 403, id="get-only"), pytest.param({"get", "head"}, 200, id="head-granted")],
)
def test_head_is_authorized_as_its_own_verb(
    server: HealthServer, api: FakeReviewApi, verbs: set[str], status: int
) -> None:
    """RequestInfo's verb is the lower-cased method: HEAD /metrics needs ``head``, not ``get``."""
    api.allowed = {("prometheus", "/metrics", v) for v in verbs}
    assert _get(f"{server.url}/metrics", method="HEAD")[:2] == (status, b"")


def test_plain_http_gets_400_and_no_metrics(server: HealthServer) -> None:
    """The port speaks TLS only; a plain request gets Go's answer, for any path."""
    plain = server.url.replace("https://", "http://")
    for path in ("/metrics", "/healthz"):
        status, body, _ = _https_get(f"{plain}{path}", token=READER)
        assert status == 400
        assert body == b"Client sent an HTTP request to an HTTPS server.\n"


def test_a_stalled_connection_does_not_block_others(server: HealthServer) -> None:
    """Handshakes run on the connection's thread: a client that connects and sends nothing
    (or half a ClientHello) leaves the accept loop free."""
    with (
        socket.create_connection(("127.0.0.1", server.port)) as silent,
        socket.create_connection(("127.0.0.1", server.port)) as half,
    ):
        half.sendall(b"\x16\x03\x01")
        assert _get(f"{server.url}/healthz", token=None)[0] == 200
        assert silent.fileno() >= 0


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
    assert _get(f"{server.url}/configz", token=MASTER)[0] == 404


def test_head_has_status_but_no_body(server: HealthServer, flags: Flags) -> None:
    flags.ready = True
    status, body, _ = _get(f"{server.url}/readyz", method="HEAD")
    assert (status, body) == (200, b"")


def test_a_failing_check_reads_as_not_ready_instead_of_crashing(metrics: Metrics) -> None:
    def broken() -> bool:
        raise RuntimeError("boom")

    srv = _server(metrics, broken, healthy=broken).start()
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
    srv = _server(metrics, lambda: True).start()
    port = srv.port
    srv.stop()
    srv.stop()  # idempotent
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind(("127.0.0.1", port))


def test_address_in_use_raises(server: HealthServer, metrics: Metrics) -> None:
    with pytest.raises(OSError, match="in use"):
        HealthServer(f"127.0.0.1:{server.port}", lambda: True, metrics, auth=DelegatingAuth(_api())).start()


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
