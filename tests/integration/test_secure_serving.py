"""Secure serving on the real API server: the daemon, running as its ServiceAccount with the
manifests' RBAC, serves HTTPS only; ``/metrics`` goes to callers the API server authenticates
(TokenReview) and authorizes (SubjectAccessReview); the probes need no credentials.

Identities: nobody's bearer token at all (401), a token the API server does not know (401), the
static token user ``nobody`` (authenticated, no RBAC: 403), a real ServiceAccount token
(TokenRequest) bound to ``custom-scheduler-metrics-reader`` the way a Prometheus is (200), and the
admin in ``system:masters`` (200 without a SubjectAccessReview, as upstream).

The last test runs ``custom-scheduler run`` as a process with ``--tls-cert-file``/
``--tls-private-key-file`` and a kubeconfig that skips TLS verification: the certificate verifies,
a rotated pair is served without a restart, and the log has one ``insecure_skip_tls_verify`` event
and no urllib3 ``InsecureRequestWarning``.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import orjson
import pytest

from custom_scheduler import config
from custom_scheduler.devenv import cluster
from custom_scheduler.devenv.controlplane import ADMIN_TOKEN_USER, ControlPlane, free_port
from custom_scheduler.kube.client import KubeClient
from custom_scheduler.plugins.builtin import full_registry
from custom_scheduler.server.app import App
from custom_scheduler.server.daemon import serve
from custom_scheduler.server.metrics import Metrics
from custom_scheduler.server.serving import generate_self_signed
from tests import kubectl as k
from tests.secure import get

CONFIG = """
apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
leaderElection: {leaderElect: false}
profiles:
- schedulerName: secure-serving-test
"""


@dataclass
class Daemon:
    app: App
    thread: threading.Thread
    result: list[int]

    @property
    def url(self) -> str:
        return f"https://127.0.0.1:{self.app.health_port}"


@pytest.fixture
def daemon(control_plane: ControlPlane) -> Iterator[Daemon]:
    """``daemon.serve`` as the scheduler's ServiceAccount (so the reviews use the manifests' RBAC)."""
    k.apply_rbac(control_plane)
    sa = KubeClient.from_kubeconfig(str(control_plane.kubeconfig(k.SCHEDULER_USER)), qps=0, burst=1)
    cfg = config.load_config(CONFIG, full_registry())
    metrics = Metrics(process_collectors=False)
    app = App(cfg, full_registry(), sa, metrics=metrics)
    result: list[int] = []
    t = threading.Thread(
        target=lambda: result.append(serve(app, metrics, health_address="127.0.0.1:0", sync_timeout=60)), daemon=True
    )
    t.start()
    d = Daemon(app, t, result)
    cluster.wait_for(lambda: app.health_port, timeout=10, what="health server")
    cluster.wait_for(lambda: get(f"{d.url}/readyz")[0] == 200, timeout=60, what="ready")
    yield d
    app.stop_event.set()
    t.join(30)
    assert result == [0]


def test_metrics_need_a_token_the_api_server_authorizes(
    control_plane: ControlPlane, daemon: Daemon, metrics_reader_token: str
) -> None:
    """401 without a token or with an unknown one, 403 for an identity without the RBAC, 200 with
    the metrics for the bound ServiceAccount and for system:masters."""
    url = f"{daemon.url}/metrics"
    cases: list[tuple[str, str | None, int]] = [
        ("anonymous", None, 401),
        ("unknown token", "not-a-token-" + uuid.uuid4().hex, 401),
        ("authenticated, no RBAC", control_plane.tokens["nobody"], 403),
        ("bound ServiceAccount", metrics_reader_token, 200),
        ("system:masters", control_plane.tokens[ADMIN_TOKEN_USER], 200),
    ]
    for who, token, status in cases:
        got, body, content_type = get(url, token=token)
        assert got == status, (who, body[:300])
        if status == 200:
            assert content_type.startswith("text/plain; version=0.0.4"), who
            assert b"scheduler_schedule_attempts_total" in body, who
            assert b"custom_scheduler_leader" in body, who
        else:
            assert b"scheduler_" not in body, who
            doc = orjson.loads(body)
            assert doc["code"] == status, who
    forbidden = orjson.loads(get(url, token=control_plane.tokens["nobody"])[1])
    assert forbidden["message"].startswith('forbidden: User "nobody" cannot get path "/metrics"')


def test_probes_answer_over_https_without_credentials(daemon: Daemon) -> None:
    for path in ("/healthz", "/livez", "/readyz"):
        assert get(f"{daemon.url}{path}")[:2] == (200, b"ok"), path


def test_plain_http_serves_no_metrics(control_plane: ControlPlane, daemon: Daemon) -> None:
    """There is no plain-HTTP port: plain requests to the HTTPS port get a 400, even with a token."""
    plain = daemon.url.replace("https://", "http://")
    for path in ("/metrics", "/healthz"):
        status, body, _ = get(f"{plain}{path}", token=control_plane.tokens[ADMIN_TOKEN_USER])
        assert status == 400, path
        assert b"scheduler_" not in body
        assert b"HTTP request to an HTTPS server" in body


# -- the command line: --tls-cert-file, rotation, an insecure kubeconfig ---------------------------


def _insecure_kubeconfig(control_plane: ControlPlane, path: Path) -> Path:
    """The ServiceAccount's token, with ``insecure-skip-tls-verify`` instead of the CA."""
    doc = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "c", "cluster": {"server": control_plane.host, "insecure-skip-tls-verify": True}}],
        "users": [{"name": "u", "user": {"token": control_plane.tokens[k.SCHEDULER_USER]}}],
        "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}],
        "current-context": "c",
    }
    path.write_bytes(orjson.dumps(doc))
    return path


def _write_pair(cert: Path, key: Path, name: str) -> bytes:
    chain, key_pem, ca = generate_self_signed([name, "127.0.0.1"])
    for path, data in ((key, key_pem), (cert, chain)):
        tmp = path.with_suffix(".tmp")
        tmp.write_bytes(data)
        os.replace(tmp, path)
    return ca


@pytest.fixture
def run_daemon(tmp_path: Path) -> Iterator[Callable[..., subprocess.Popen[bytes]]]:
    procs: list[subprocess.Popen[bytes]] = []

    def start(*args: str) -> subprocess.Popen[bytes]:
        env = {**os.environ, "LOG_FORMAT": "json", "LOG_LEVEL": "info"}
        stderr = (tmp_path / "daemon.log").open("wb")
        p = subprocess.Popen([sys.executable, "-m", "custom_scheduler", "run", *args], env=env, stderr=stderr)
        procs.append(p)
        return p

    yield start
    for p in procs:
        if p.poll() is None:
            p.send_signal(signal.SIGTERM)
            try:
                p.wait(30)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait(10)


def test_cli_serves_a_given_certificate_reloads_it_and_warns_once_about_insecure_tls(
    control_plane: ControlPlane, tmp_path: Path, run_daemon: Callable[..., subprocess.Popen[bytes]]
) -> None:
    k.apply_rbac(control_plane)
    cert, key = tmp_path / "tls.crt", tmp_path / "tls.key"
    first_ca = _write_pair(cert, key, "first")
    port = free_port()
    cfg = tmp_path / "config.yaml"
    cfg.write_text(CONFIG + f"healthzBindAddress: 127.0.0.1:{port}\n")
    kubeconfig = _insecure_kubeconfig(control_plane, tmp_path / "insecure-kubeconfig.json")
    proc = run_daemon(
        f"--config={cfg}", f"--kubeconfig={kubeconfig}", f"--tls-cert-file={cert}", f"--tls-private-key-file={key}"
    )
    url = f"https://127.0.0.1:{port}"

    def verified(ca: bytes) -> bool:
        try:
            return get(f"{url}/readyz", ca_pem=ca)[0] == 200
        except OSError:  # not listening yet, or (after rotation) the old certificate
            return False

    cluster.wait_for(lambda: verified(first_ca), timeout=30, what="ready, verified with the given CA")
    admin = control_plane.tokens[ADMIN_TOKEN_USER]
    for _ in range(3):  # each scrape is API traffic of its own: TokenReview through the insecure client
        assert get(f"{url}/metrics", token=admin, ca_pem=first_ca)[0] == 200
    assert get(f"{url}/metrics", token="nope-" + uuid.uuid4().hex, ca_pem=first_ca)[0] == 401

    second_ca = _write_pair(cert, key, "second")
    cluster.wait_for(lambda: verified(second_ca), timeout=10, what="the rotated certificate, without a restart")
    assert not verified(first_ca)
    assert proc.poll() is None

    proc.send_signal(signal.SIGTERM)
    assert proc.wait(30) == 0
    log = (tmp_path / "daemon.log").read_bytes()
    events = [orjson.loads(line) for line in log.splitlines() if line.startswith(b"{")]
    names = [e["event"] for e in events]
    assert names.count("insecure_skip_tls_verify") == 1, names
    assert b"InsecureRequestWarning" not in log
    assert "serving_certificate_loaded" in names
    assert "serving_certificate_reloaded" in names


def test_cli_ends_on_two_sigterms_back_to_back(
    control_plane: ControlPlane, tmp_path: Path, run_daemon: Callable[..., subprocess.Popen[bytes]]
) -> None:
    """Two SIGTERMs back to back, as ``timeout(1)`` sends one to the process and one to its group:
    the daemon hung for ever on that (its handler waited for a lock its own thread held). Now it
    ends: 0 when the second came after the graceful stop or merged with the first, 1 when it cut
    the stop short, as kube-scheduler's second signal does (tests/unit/server/test_signals.py
    checks each case)."""
    k.apply_rbac(control_plane)
    port = free_port()
    cfg = tmp_path / "config.yaml"
    cfg.write_text(CONFIG + f"healthzBindAddress: 127.0.0.1:{port}\n")
    kubeconfig = _insecure_kubeconfig(control_plane, tmp_path / "insecure-kubeconfig.json")
    proc = run_daemon(f"--config={cfg}", f"--kubeconfig={kubeconfig}")

    def ready() -> bool:
        try:
            return get(f"https://127.0.0.1:{port}/readyz")[0] == 200
        except OSError:
            return False

    cluster.wait_for(ready, timeout=30, what="the daemon ready")
    proc.send_signal(signal.SIGTERM)
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(15) in (0, 1)
    log = (tmp_path / "daemon.log").read_bytes()
    names = [orjson.loads(line)["event"] for line in log.splitlines() if line[:1] == b"{"]
    assert "signal_received" in names
