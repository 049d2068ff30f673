"""The serving certificate: the self-signed pair, loading ``--tls-cert-file``/``--tls-private-key-file``,
rotation picked up on new connections (and a half-done rotation survived), and the CLI's checks."""

from __future__ import annotations

import ipaddress
import os
import socket
import ssl
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import serialization
from structlog.testing import capture_logs

from custom_scheduler.server.delegated_auth import DelegatingAuth
from custom_scheduler.server.health import HealthServer
from custom_scheduler.server.metrics import Metrics
from custom_scheduler.server.serving import ServingCerts, default_hosts, generate_self_signed
from tests.secure import FakeReviewApi
from tests.secure import get as https_get

ROOT = Path(__file__).resolve().parents[2]


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def _pair(name: str) -> tuple[bytes, bytes, bytes]:
    """A fresh CA-signed pair for 127.0.0.1 whose CN starts with ``name``."""
    return generate_self_signed([name, "127.0.0.1"])


def _write(path: Path, data: bytes) -> None:
    """Replace ``path`` as a rotation would (new inode, so the change is seen even within one mtime tick)."""
    tmp = path.with_suffix(".new")
    tmp.write_bytes(data)
    os.replace(tmp, path)


def _served_cn(port: int) -> str:
    """The CN of the certificate the server presents to a new connection."""
    ctx = ssl.create_default_context()
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    with socket.create_connection(("127.0.0.1", port), timeout=5) as raw, ctx.wrap_socket(raw) as tls:
        der = tls.getpeercert(binary_form=True)
    assert der is not None
    cn = x509.load_der_x509_certificate(der).subject.get_attributes_for_oid(x509.oid.NameOID.COMMON_NAME)
    return str(cn[0].value).split("@", 1)[0]


@pytest.fixture
def files(tmp_path: Path) -> tuple[Path, Path]:
    cert, key = tmp_path / "tls.crt", tmp_path / "tls.key"
    chain, k, _ = _pair("first")
    _write(cert, chain)
    _write(key, k)
    return cert, key


@pytest.fixture
def served(files: tuple[Path, Path]) -> Iterator[tuple[HealthServer, ServingCerts, Clock]]:
    clock = Clock()
    certs = ServingCerts.from_files(str(files[0]), str(files[1]), clock=clock)
    api = FakeReviewApi({}, set())
    srv = HealthServer(
        "127.0.0.1:0", lambda: True, Metrics(process_collectors=False), auth=DelegatingAuth(api), certs=certs
    )
    srv.start()
    yield srv, certs, clock
    srv.stop()


def test_self_signed_pair_is_a_ca_and_a_serving_leaf_for_the_hosts() -> None:
    chain, _, ca_pem = generate_self_signed(["localhost", "127.0.0.1", "::1"])
    leaf, ca = x509.load_pem_x509_certificates(chain)
    assert ca.public_bytes(serialization.Encoding.PEM) == ca_pem
    assert ca.extensions.get_extension_for_class(x509.BasicConstraints).value.ca
    assert not leaf.extensions.get_extension_for_class(x509.BasicConstraints).value.ca
    assert leaf.issuer == ca.subject
    san = leaf.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert san.get_values_for_type(x509.DNSName) == ["localhost"]
    assert san.get_values_for_type(x509.IPAddress) == [ipaddress.ip_address("127.0.0.1"), ipaddress.ip_address("::1")]
    assert leaf.subject.rfc4514_string().startswith("CN=localhost@")


@pytest.mark.parametrize(
    ("bind", "extra"),
    [
        pytest.param("0.0.0.0", None, id="any-v4"),
        pytest.param("::", None, id="any-v6"),
        pytest.param("10.1.2.3", "10.1.2.3", id="specific"),
    ],
)
def test_default_hosts(bind: str, extra: str | None) -> None:
    hosts = default_hosts(bind)
    assert hosts[:3] == ["localhost", "127.0.0.1", "::1"]
    assert (extra in hosts) if extra else (bind not in hosts)


def test_self_signed_leaves_no_files_behind(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The pair is written only to be loaded: the key does not stay in $TMPDIR."""
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", None)
    certs = ServingCerts.self_signed(["127.0.0.1"])
    assert certs.files is None
    assert certs.ca_pem.startswith(b"-----BEGIN CERTIFICATE-----")
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    ("rotate", "expected_cn", "event"),
    [
        pytest.param(("cert", "key"), "second", "serving_certificate_reloaded", id="both-files"),
        pytest.param(("cert",), "first", "serving_certificate_reload_failed", id="cert-only-keeps-old-pair"),
        pytest.param(("key",), "first", "serving_certificate_reload_failed", id="key-only-keeps-old-pair"),
        pytest.param(("delete",), "first", None, id="files-gone-keeps-old-pair"),
        pytest.param(("garbage",), "first", "serving_certificate_reload_failed", id="not-pem-keeps-old-pair"),
    ],
)
def test_rotation_is_served_to_new_connections(
    served: tuple[HealthServer, ServingCerts, Clock],
    files: tuple[Path, Path],
    tmp_path: Path,
    rotate: tuple[str, ...],
    expected_cn: str,
    event: str | None,
) -> None:
    srv, _, clock = served
    assert _served_cn(srv.port) == "first"
    chain, key, _ = _pair("second")
    for what in rotate:
        if what == "cert":
            _write(files[0], chain)
        elif what == "key":
            _write(files[1], key)
        elif what == "delete":
            files[0].unlink()
        else:
            _write(files[0], b"not a certificate")
    clock.now += 1.0
    with capture_logs() as logs:
        assert _served_cn(srv.port) == expected_cn
        assert _served_cn(srv.port) == expected_cn
    events = [e["event"] for e in logs if e["event"].startswith("serving_certificate")]
    assert events == ([event] if event else [])  # once, not per connection


def test_a_half_done_rotation_completes_when_the_key_arrives(
    served: tuple[HealthServer, ServingCerts, Clock], files: tuple[Path, Path], tmp_path: Path
) -> None:
    srv, _, clock = served
    chain, key, ca = _pair("second")
    _write(files[0], chain)
    clock.now += 1.0
    assert _served_cn(srv.port) == "first"
    _write(files[1], key)
    clock.now += 1.0
    assert _served_cn(srv.port) == "second"
    assert https_get(f"{srv.url}/healthz", ca_pem=ca)[:2] == (200, b"ok")  # verifies with the new CA


def test_files_are_checked_at_most_once_per_interval(
    served: tuple[HealthServer, ServingCerts, Clock], files: tuple[Path, Path], tmp_path: Path
) -> None:
    """Within the interval a connection gets the context in hand without a stat."""
    srv, certs, clock = served
    chain, key, _ = _pair("second")
    _write(files[0], chain)
    _write(files[1], key)
    clock.now += 0.5
    assert _served_cn(srv.port) == "first"
    clock.now += 0.5
    assert _served_cn(srv.port) == "second"
    assert certs.context() is certs.context()


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "custom_scheduler", *args],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=60,
        check=False,
    )


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        pytest.param(["--tls-cert-file=CERT"], "go together", id="cert-without-key"),
        pytest.param(["--tls-private-key-file=KEY"], "go together", id="key-without-cert"),
        pytest.param(["--tls-cert-file=MISSING", "--tls-private-key-file=KEY"], "no such file", id="missing-file"),
        pytest.param(["--tls-cert-file=CERT", "--tls-private-key-file=OTHER"], "cannot load the pair", id="mismatch"),
    ],
)
def test_run_refuses_bad_tls_flags_with_exit_2(
    files: tuple[Path, Path], tmp_path: Path, flags: list[str], message: str
) -> None:
    """A bad pair is a usage error at start-up, before anything connects to the cluster."""
    other = tmp_path / "other.key"
    other.write_bytes(generate_self_signed(["x"])[1])
    cfg = tmp_path / "config.yaml"
    cfg.write_text("apiVersion: kubescheduler.config.k8s.io/v1\nkind: KubeSchedulerConfiguration\n")
    subst = {"CERT": str(files[0]), "KEY": str(files[1]), "OTHER": str(other), "MISSING": str(tmp_path / "nope")}
    argv = [f.split("=", 1)[0] + "=" + subst[f.split("=", 1)[1]] for f in flags]
    proc = _run("run", f"--config={cfg}", "--kubeconfig=/nonexistent", *argv)
    assert proc.returncode == 2, proc.stderr
    assert message in proc.stderr


def test_the_daemons_self_signed_pair_is_made_for_the_first_connection() -> None:
    """A health server without a certificate makes its self-signed pair when the first
    connection asks for it, not at start: 30-40 ms of the daemon's start-up before its first bind."""
    with capture_logs() as logs:
        srv = HealthServer(
            "127.0.0.1:0",
            lambda: True,
            Metrics(process_collectors=False),
            auth=DelegatingAuth(FakeReviewApi({}, set())),
        ).start()
        try:
            assert srv.certs is not None
            assert "serving_certificate_self_signed" not in [e["event"] for e in logs]
            assert https_get(f"{srv.url}/healthz", ca_pem=srv.certs.ca_pem)[:2] == (200, b"ok")  # verified
            assert https_get(f"{srv.url}/livez")[:2] == (200, b"ok")
        finally:
            srv.stop()
    assert [e["event"] for e in logs].count("serving_certificate_self_signed") == 1


def test_a_pair_made_on_first_use_imports_no_cryptography_before_it() -> None:
    child = (
        "import sys\n"
        "from custom_scheduler.server import daemon, health\n"
        "from custom_scheduler.server.serving import ServingCerts\n"
        "ServingCerts.self_signed_on_first_use()\n"
        "print('cryptography' in sys.modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", child], capture_output=True, text=True, timeout=60, check=True)
    assert out.stdout.strip() == "False"


def test_a_pair_made_on_first_use_fails_at_once_without_a_writable_tmpdir(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "missing"))
    with pytest.raises(OSError, match="missing"):
        ServingCerts.self_signed_on_first_use(["127.0.0.1"])
