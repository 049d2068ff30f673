"""The certificate the HTTPS health/metrics port presents: self-signed, or from files that are
re-read when they change.

kube-scheduler serves only HTTPS on its secure port (10259). With no ``--tls-cert-file`` it makes a
self-signed pair at start-up (``MaybeDefaultWithSelfSignedCerts``: a CA ``localhost-ca@<time>`` and a
serving certificate for ``localhost`` and ``127.0.0.1``), which is enough for probes (kubelet does
not verify probe certificates) and for Prometheus with ``insecure_skip_verify``. With a real pair
(a cert-manager Secret, say) it watches the files and serves the new pair on new connections, so a
rotation needs no restart. This module does both:

- :meth:`ServingCerts.self_signed`: an ECDSA P-256 CA and leaf made in memory (``cryptography``).
  Python's ``ssl`` loads certificates only from files, so the pair is written to a fresh 0700
  directory under ``$TMPDIR`` (an ``emptyDir`` in the Deployment: the root filesystem is read-only),
  loaded, and deleted at once: the private key does not outlive start-up on disk. The daemon makes
  it when the first connection arrives (:meth:`ServingCerts.self_signed_on_first_use`), not before
  its first bind: importing ``cryptography`` and signing cost 30-40 ms of start-up, and the first
  probe comes seconds later. Whether ``$TMPDIR`` is writable is checked at start all the same.
- :meth:`ServingCerts.from_files`: loads ``--tls-cert-file``/``--tls-private-key-file`` now (a bad
  pair fails start-up), then :meth:`ServingCerts.context` re-stats both files at most every
  :data:`CHECK_INTERVAL` seconds when a connection arrives and swaps in a new ``SSLContext`` once
  they changed and load as a matching pair. A half-written rotation (new certificate, old key) is
  logged once and retried when the files change again; the old pair keeps serving meanwhile.

TLS 1.2 is the minimum, as kube-scheduler's default.
"""

from __future__ import annotations

import datetime as dt
import ipaddress
import os
import shutil
import socket
import ssl
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import structlog

if TYPE_CHECKING:
    from cryptography import x509
    from cryptography.hazmat.primitives.asymmetric import ec

log = structlog.get_logger("custom_scheduler.server.serving")

#: Seconds between checks of the certificate files for a rotation (only when a connection arrives).
CHECK_INTERVAL = 1.0
#: Validity of the self-signed pair; upstream uses one year, and a replica never lives that long.
SELF_SIGNED_DAYS = 365

_Signature = tuple[tuple[int, int, int], tuple[int, int, int]]


def _context(cert_file: str, key_file: str) -> ssl.SSLContext:
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    ctx.set_alpn_protocols(["http/1.1"])  # Go clients offer h2 first; say which one we speak
    ctx.load_cert_chain(cert_file, key_file)  # raises ssl.SSLError if the key does not match
    return ctx


def _describe(cert_pem: bytes) -> dict[str, str]:
    """Subject and expiry of the first certificate in ``cert_pem``, for the log."""
    from cryptography import x509

    try:
        cert = x509.load_pem_x509_certificate(cert_pem)
    except ValueError:
        return {}
    return {"subject": cert.subject.rfc4514_string(), "not_after": cert.not_valid_after_utc.isoformat()}


def default_hosts(bind_host: str = "") -> list[str]:
    """Names the self-signed certificate is valid for: upstream's ``localhost`` and ``127.0.0.1``,
    plus ``::1``, this host's name (the pod name in a pod) and the bind address when it is one."""
    hosts = ["localhost", "127.0.0.1", "::1", socket.gethostname()]
    if bind_host and bind_host not in ("0.0.0.0", "::"):
        hosts.append(bind_host)
    return list(dict.fromkeys(h for h in hosts if h))


def generate_self_signed(hosts: Sequence[str], *, now: dt.datetime | None = None) -> tuple[bytes, bytes, bytes]:
    """A CA and a serving certificate it signs, as upstream's ``GenerateSelfSignedCertKey``.

    Returns ``(chain_pem, key_pem, ca_pem)``: the leaf followed by the CA, the leaf's key, and the
    CA alone (a client that wants to verify can trust it).
    """
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    now = now or dt.datetime.now(dt.UTC)
    primary = hosts[0] if hosts else "localhost"
    stamp = int(now.timestamp())
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, f"{primary}-ca@{stamp}")])
    ca = _certificate(ca_name, ca_name, ca_key.public_key(), now, ca=True).sign(ca_key, hashes.SHA256())
    sans: list[x509.GeneralName] = []
    for h in hosts:
        try:
            sans.append(x509.IPAddress(ipaddress.ip_address(h)))
        except ValueError:
            sans.append(x509.DNSName(h))
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, f"{primary}@{stamp}")])
    leaf = (
        _certificate(name, ca_name, key.public_key(), now, ca=False)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(x509.SubjectAlternativeName(sans), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    pem = serialization.Encoding.PEM
    ca_pem = ca.public_bytes(pem)
    key_pem = key.private_bytes(pem, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    return leaf.public_bytes(pem) + ca_pem, key_pem, ca_pem


def _certificate(
    subject: x509.Name, issuer: x509.Name, public_key: ec.EllipticCurvePublicKey, now: dt.datetime, *, ca: bool
) -> x509.CertificateBuilder:
    """What the CA and the leaf share: valid from an hour ago for ``SELF_SIGNED_DAYS``, basic
    constraints and key usage (a CA signs certificates, a leaf only signs its handshakes)."""
    from cryptography import x509

    return (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(issuer)
        .public_key(public_key)
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(hours=1))
        .not_valid_after(now + dt.timedelta(days=SELF_SIGNED_DAYS))
        .add_extension(x509.BasicConstraints(ca=ca, path_length=0 if ca else None), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=ca,
                crl_sign=False,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
    )


class ServingCerts:
    """The current server-side ``SSLContext``; use :meth:`self_signed` or :meth:`from_files`."""

    def __init__(
        self,
        ctx: ssl.SSLContext | Callable[[], tuple[ssl.SSLContext, bytes]],
        *,
        files: tuple[str, str] | None = None,
        ca_pem: bytes = b"",
        check_interval: float = CHECK_INTERVAL,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._ctx: ssl.SSLContext | None = ctx if isinstance(ctx, ssl.SSLContext) else None
        #: Makes (context, CA) on first use (:meth:`self_signed_on_first_use`).
        self._make = None if isinstance(ctx, ssl.SSLContext) else ctx
        self.files = files
        """``(cert_file, key_file)`` watched for rotation; None for a self-signed pair."""
        self._ca_pem = ca_pem
        self.check_interval = check_interval
        self._clock = clock
        self._checked = clock()
        self._signature = self._stat() if files else None
        self._failed: _Signature | None = None
        self._lock = threading.Lock()

    @property
    def ca_pem(self) -> bytes:
        """The self-signed CA (empty for files): what a verifying client would trust."""
        if self._make is not None:
            self.context()
        return self._ca_pem

    @classmethod
    def self_signed(cls, hosts: Sequence[str] = ()) -> ServingCerts:
        """A fresh pair for ``hosts`` (default :func:`default_hosts`); raises ``OSError`` when no
        temporary directory is writable."""
        ctx, ca = _self_signed_context(hosts)
        return cls(ctx, ca_pem=ca)

    @classmethod
    def self_signed_on_first_use(cls, hosts: Sequence[str] = ()) -> ServingCerts:
        """:meth:`self_signed`, made when the first connection asks for it. Raises ``OSError``
        now when no temporary directory is writable, as :meth:`self_signed` would."""
        shutil.rmtree(tempfile.mkdtemp(prefix="custom-scheduler-serving-"), ignore_errors=True)
        hosts = list(hosts)
        return cls(lambda: _self_signed_context(hosts))

    @classmethod
    def from_files(
        cls,
        cert_file: str,
        key_file: str,
        *,
        check_interval: float = CHECK_INTERVAL,
        clock: Callable[[], float] = time.monotonic,
    ) -> ServingCerts:
        """Load ``cert_file``/``key_file`` now; raises ``ValueError`` naming the problem (missing
        file, not PEM, key does not match), so a bad flag fails start-up instead of the first scrape."""
        try:
            ctx = _context(cert_file, key_file)
        except FileNotFoundError as e:
            raise ValueError(f"cannot read {e.filename}: no such file") from None
        except (ssl.SSLError, OSError) as e:
            raise ValueError(f"cannot load the pair {cert_file} / {key_file}: {e}") from None
        log.info("serving_certificate_loaded", cert_file=cert_file, **_describe(Path(cert_file).read_bytes()))
        return cls(ctx, files=(cert_file, key_file), check_interval=check_interval, clock=clock)

    def _stat(self) -> _Signature | None:
        assert self.files is not None
        try:
            a, b = (os.stat(f) for f in self.files)  # follows symlinks: a Secret volume swaps ..data
        except OSError:
            return None
        return (a.st_ino, a.st_size, a.st_mtime_ns), (b.st_ino, b.st_size, b.st_mtime_ns)

    def context(self) -> ssl.SSLContext:
        """The context for a new connection, reloaded first if the files changed (or made, the
        first time, for a pair made on first use)."""
        ctx = self._ctx
        if ctx is not None and (self.files is None or self._clock() - self._checked < self.check_interval):
            return ctx
        with self._lock:
            if self._make is not None:
                self._ctx, self._ca_pem = self._make()
                self._make = None
            elif self.files is not None and self._clock() - self._checked >= self.check_interval:
                self._checked = self._clock()
                self._maybe_reload()
            assert self._ctx is not None
            return self._ctx

    def _maybe_reload(self) -> None:
        assert self.files is not None
        sig = self._stat()
        if sig is None or sig in (self._signature, self._failed):
            return
        cert_file, key_file = self.files
        try:
            ctx = _context(cert_file, key_file)
        except (ssl.SSLError, OSError) as e:
            self._failed = sig  # log a broken rotation once; retry when the files change again
            log.warning("serving_certificate_reload_failed", cert_file=cert_file, key_file=key_file, error=str(e))
            return
        self._ctx, self._signature, self._failed = ctx, sig, None
        try:
            info = _describe(Path(cert_file).read_bytes())
        except OSError:
            info = {}
        log.info("serving_certificate_reloaded", cert_file=cert_file, **info)


def _self_signed_context(hosts: Sequence[str]) -> tuple[ssl.SSLContext, bytes]:
    """A fresh self-signed pair for ``hosts`` (default :func:`default_hosts`), loaded: the server
    context and the CA."""
    chain, key, ca = generate_self_signed(list(hosts) or default_hosts())
    tmp = tempfile.mkdtemp(prefix="custom-scheduler-serving-")  # mode 0700
    try:
        cert_file, key_file = os.path.join(tmp, "tls.crt"), os.path.join(tmp, "tls.key")
        with open(os.open(key_file, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600), "wb") as f:
            f.write(key)
        Path(cert_file).write_bytes(chain)
        ctx = _context(cert_file, key_file)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    log.info("serving_certificate_self_signed", hosts=list(hosts) or default_hosts(), **_describe(chain))
    return ctx, ca
