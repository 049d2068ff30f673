"""A kubeconfig that skips TLS verification: one structured warning, not one urllib3 warning per request.

The "API server" is the health server's HTTPS port with its self-signed certificate (``GET
/healthz`` answers ``ok``), reached through the real kubeconfig loader and urllib3 pool. pytest runs
with ``filterwarnings = error``, so an ``InsecureRequestWarning`` would fail the test outright.
"""

from __future__ import annotations

import base64
import warnings
from collections.abc import Iterator
from pathlib import Path

import orjson
import pytest
import urllib3.exceptions
from structlog.testing import capture_logs

from custom_scheduler.kube.client import KubeClient
from custom_scheduler.server.health import HealthServer
from tests.secure import tls_health_server


@pytest.fixture
def server() -> Iterator[HealthServer]:
    srv = tls_health_server(["127.0.0.1"])
    yield srv
    srv.stop()


def _kubeconfig(path: Path, server: HealthServer, *, insecure: bool) -> str:
    assert server.certs is not None
    cluster: dict[str, object] = {"server": server.url}
    if insecure:
        cluster["insecure-skip-tls-verify"] = True
    else:
        cluster["certificate-authority-data"] = base64.b64encode(server.certs.ca_pem).decode()
    doc = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "c", "cluster": cluster}],
        "users": [{"name": "u", "user": {"token": "t"}}],
        "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}],
        "current-context": "c",
    }
    path.write_bytes(orjson.dumps(doc))
    return str(path)


@pytest.mark.parametrize(
    ("insecure", "events"), [pytest.param(True, 1, id="insecure"), pytest.param(False, 0, id="verified")]
)
def test_one_structured_warning_and_no_per_request_warnings(
    server: HealthServer, tmp_path: Path, insecure: bool, events: int
) -> None:
    with capture_logs() as logs:
        client = KubeClient.from_kubeconfig(_kubeconfig(tmp_path / "kc.json", server, insecure=insecure), qps=0)
        clones = [client.clone(), client.clone(qps=0, pool_maxsize=2)]
        for c in (client, *clones):
            for _ in range(5):
                assert c.request_raw("GET", "/healthz") == b"ok"
    warned = [e for e in logs if e["event"] == "insecure_skip_tls_verify"]
    assert len(warned) == events
    if insecure:
        assert warned[0]["log_level"] == "warning"
        assert warned[0]["host"] == server.url


def test_only_insecure_request_warnings_are_silenced(server: HealthServer, tmp_path: Path) -> None:
    KubeClient.from_kubeconfig(_kubeconfig(tmp_path / "kc.json", server, insecure=True))
    with warnings.catch_warnings(record=True) as caught:
        warnings.warn("per request", urllib3.exceptions.InsecureRequestWarning, stacklevel=1)
        assert caught == []
    with pytest.warns(urllib3.exceptions.SystemTimeWarning):
        warnings.warn("clock", urllib3.exceptions.SystemTimeWarning, stacklevel=1)
