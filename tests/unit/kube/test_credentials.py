"""Plain kubeconfigs and in-cluster credentials are read without the ``kubernetes`` package, to the
same settings its loader gives; what only that loader implements is left to it."""

from __future__ import annotations

import base64
import os
import stat
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest
from kubernetes import config as k8s_config
from kubernetes.client import Configuration

from custom_scheduler.errors import ConfigError
from custom_scheduler.kube import credentials, http_pool
from custom_scheduler.kube.client import KubeClient, load_configuration
from custom_scheduler.server.health import HealthServer
from tests.secure import tls_health_server

PEM_CA = "-----BEGIN CERTIFICATE-----\nQ0E=\n-----END CERTIFICATE-----\n"
PEM_CERT = "-----BEGIN CERTIFICATE-----\nY2VydA==\n-----END CERTIFICATE-----\n"
PEM_KEY = "-----BEGIN PRIVATE KEY-----\na2V5\n-----END PRIVATE KEY-----\n"


def _b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


def _kubeconfig(
    tmp_path: Path, cluster: dict[str, Any], user: dict[str, Any], *, context: str = "ctx", current: str = "ctx"
) -> Path:
    doc = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "c", "cluster": cluster}],
        "users": [{"name": "u", "user": user}],
        "contexts": [{"name": context, "context": {"cluster": "c", "user": "u"}}],
        "current-context": current,
    }
    path = tmp_path / "conf" / "kubeconfig"
    path.parent.mkdir(exist_ok=True)
    path.write_bytes(orjson.dumps(doc))
    return path


@pytest.fixture
def files(tmp_path: Path) -> Path:
    """A kubeconfig directory holding a CA, a client certificate and key, and a token file."""
    d = tmp_path / "conf"
    d.mkdir()
    (d / "ca.crt").write_text(PEM_CA)
    (d / "client.crt").write_text(PEM_CERT)
    (d / "client.key").write_text(PEM_KEY)
    (d / "token").write_text("from-file\n")
    return d


def _settings(cfg: Any) -> dict[str, Any]:
    """What a client takes from either loader's result: the CA and client files as their text."""

    def text(p: str | None) -> str | None:
        return Path(p).read_text() if p else None

    ca = text(cfg.ssl_ca_cert) or getattr(cfg, "ca_cert_data", None)
    token = (cfg.auth_settings().get("BearerToken") or {}).get("value")
    return {
        "host": cfg.host,
        "ca": ca,
        "cert": text(cfg.cert_file),
        "key": text(cfg.key_file),
        "verify_ssl": cfg.verify_ssl,
        "tls_server_name": cfg.tls_server_name or None,
        "authorization": token,
    }


def _upstream(path: Path) -> Configuration:
    cfg = Configuration()
    k8s_config.load_kube_config(config_file=str(path), client_configuration=cfg, persist_config=False)  # type: ignore[no-untyped-call]
    return cfg


@pytest.mark.parametrize(
    ("cluster", "user"),
    [
        pytest.param(
            {"server": "https://api.example:6443/", "certificate-authority": "ca.crt"},
            {"token": "t"},
            id="ca-file-token",
        ),
        pytest.param(
            {"server": "https://api.example", "certificate-authority-data": _b64(PEM_CA)}, {"token": "t"}, id="ca-data"
        ),
        pytest.param(
            {"server": "https://10.0.0.1:6443", "certificate-authority": "ca.crt"},
            {"client-certificate": "client.crt", "client-key": "client.key"},
            id="client-cert-files",
        ),
        pytest.param(
            {"server": "https://10.0.0.1:6443", "certificate-authority-data": _b64(PEM_CA)},
            {"client-certificate-data": _b64(PEM_CERT), "client-key-data": _b64(PEM_KEY)},
            id="client-cert-data",
        ),
        pytest.param(
            {"server": "https://api.example", "insecure-skip-tls-verify": True}, {"token": "t"}, id="insecure"
        ),
        pytest.param(
            {"server": "https://10.0.0.1", "certificate-authority": "ca.crt", "tls-server-name": "kubernetes"},
            {"token": "t"},
            id="tls-server-name",
        ),
        pytest.param({"server": "http://127.0.0.1:8080"}, {}, id="plain-http-no-user"),
        pytest.param(
            {"server": "https://api.example", "certificate-authority": "ca.crt"},
            {"tokenFile": "token"},
            id="token-file",
        ),
    ],
)
def test_plain_kubeconfigs_give_what_the_kubernetes_loader_gives(
    files: Path, tmp_path: Path, cluster: dict[str, Any], user: dict[str, Any]
) -> None:
    path = _kubeconfig(tmp_path, cluster, user)
    ours = credentials.from_kubeconfig(str(path))
    assert isinstance(ours, credentials.Credentials)
    theirs = _settings(_upstream(path))
    # The kubernetes loader keeps a token file's trailing newline; client-go trims it (as we do).
    if theirs["authorization"]:
        theirs["authorization"] = theirs["authorization"].strip()
    assert _settings(ours) == theirs
    assert isinstance(load_configuration(str(path)), credentials.Credentials)


def test_data_written_for_tls_is_private(files: Path, tmp_path: Path) -> None:
    user = {"client-certificate-data": _b64(PEM_CERT), "client-key-data": _b64(PEM_KEY)}
    ours = credentials.from_kubeconfig(str(_kubeconfig(tmp_path, {"server": "https://a"}, user)))
    assert ours is not None
    assert ours.key_file is not None
    assert stat.S_IMODE(os.stat(ours.key_file).st_mode) == 0o600
    assert stat.S_IMODE(os.stat(os.path.dirname(ours.key_file)).st_mode) == 0o700


@pytest.mark.parametrize(
    ("cluster", "user"),
    [
        pytest.param({"server": "https://a"}, {"exec": {"command": "get-token", "apiVersion": "v1"}}, id="exec"),
        pytest.param({"server": "https://a"}, {"auth-provider": {"name": "oidc"}}, id="auth-provider"),
        pytest.param({"server": "https://a"}, {"username": "u", "password": "p"}, id="basic"),
        pytest.param({"server": "https://a", "proxy-url": "http://proxy:3128"}, {"token": "t"}, id="proxy"),
    ],
)
def test_what_only_the_kubernetes_loader_implements_is_left_to_it(
    tmp_path: Path, cluster: dict[str, Any], user: dict[str, Any]
) -> None:
    assert credentials.from_kubeconfig(str(_kubeconfig(tmp_path, cluster, user))) is None


def test_a_proxy_kubeconfig_still_loads_through_the_kubernetes_package(tmp_path: Path) -> None:
    path = _kubeconfig(tmp_path, {"server": "https://a", "proxy-url": "http://proxy:3128"}, {"token": "t"})
    cfg = load_configuration(str(path))
    assert isinstance(cfg, Configuration)
    assert cfg.proxy == "http://proxy:3128"
    client = KubeClient(cfg, qps=0, burst=1)
    assert client._lean is None
    assert type(client._pool).__name__ == "ProxyManager"


@pytest.mark.parametrize(
    ("write", "message"),
    [
        pytest.param(None, "No such file", id="missing"),
        pytest.param(":\n  - [", "not valid YAML", id="bad-yaml"),
        pytest.param("[1, 2]", "expected a mapping", id="not-a-mapping"),
        pytest.param("{clusters: []}", "no current-context", id="no-context"),
        pytest.param("{current-context: x, contexts: []}", "no context named 'x'", id="unknown-context"),
        pytest.param(
            "{current-context: x, contexts: [{name: x, context: {cluster: c}}], clusters: [{name: c, cluster: {}}]}",
            "has no server",
            id="no-server",
        ),
        pytest.param(
            "{current-context: x, contexts: [{name: x, context: {cluster: c}}],"
            " clusters: [{name: c, cluster: {server: 'https://a', certificate-authority: nope.crt}}]}",
            "file does not exist",
            id="missing-ca",
        ),
    ],
)
def test_a_bad_kubeconfig_says_what_is_wrong(tmp_path: Path, write: str | None, message: str) -> None:
    path = tmp_path / "kubeconfig"
    if write is not None:
        path.write_text(write)
    with pytest.raises(ConfigError, match=message) as err:
        credentials.from_kubeconfig(str(path))
    assert str(path) in str(err.value)


def test_a_named_context_is_used_instead_of_the_current_one(tmp_path: Path) -> None:
    path = _kubeconfig(tmp_path, {"server": "http://a"}, {"token": "t"}, context="other", current="missing")
    ours = credentials.from_kubeconfig(str(path), context="other")
    assert ours is not None
    assert ours.host == "http://a"


def test_a_token_file_is_re_read_and_its_last_token_kept_while_unreadable(files: Path, tmp_path: Path) -> None:
    """As client-go's cachingTokenSource: a rotated file's token wins over ``token``."""
    path = _kubeconfig(tmp_path, {"server": "http://a"}, {"token": "static", "tokenFile": "token"})
    ours = credentials.from_kubeconfig(str(path))
    assert ours is not None
    assert ours.bearer() == "from-file"
    (files / "token").write_text("rotated")
    assert ours.auth_settings()["BearerToken"]["value"] == "Bearer rotated"
    (files / "token").unlink()
    assert ours.bearer() == "rotated"


@pytest.fixture
def service_account(tmp_path: Path) -> Path:
    d = tmp_path / "sa"
    d.mkdir()
    (d / "token").write_text("sa-token\n")
    (d / "ca.crt").write_text(PEM_CA)
    return d


@pytest.mark.parametrize(
    ("host", "url"),
    [
        pytest.param("10.96.0.1", "https://10.96.0.1:443", id="ipv4"),
        pytest.param("fd00::1", "https://[fd00::1]:443", id="ipv6"),
    ],
)
def test_in_cluster_credentials(service_account: Path, host: str, url: str) -> None:
    env = {"KUBERNETES_SERVICE_HOST": host, "KUBERNETES_SERVICE_PORT": "443"}
    creds = credentials.in_cluster(env, str(service_account))
    assert (creds.host, creds.ssl_ca_cert) == (url, str(service_account / "ca.crt"))
    assert creds.auth_settings()["BearerToken"]["value"] == "Bearer sa-token"


@pytest.mark.parametrize(
    ("env", "remove", "message"),
    [
        pytest.param({}, None, "must be set", id="no-env"),
        pytest.param(
            {"KUBERNETES_SERVICE_HOST": "h", "KUBERNETES_SERVICE_PORT": "1"}, "token", "does not exist", id="no-token"
        ),
        pytest.param(
            {"KUBERNETES_SERVICE_HOST": "h", "KUBERNETES_SERVICE_PORT": "1"}, "ca.crt", "does not exist", id="no-ca"
        ),
    ],
)
def test_in_cluster_without_its_parts_says_which(
    service_account: Path, env: dict[str, str], remove: str | None, message: str
) -> None:
    if remove:
        (service_account / remove).unlink()
    with pytest.raises(ConfigError, match=message):
        credentials.in_cluster(env, str(service_account))


# -- TLS end to end: the health server's HTTPS port, reached through a kubeconfig file ----------


@pytest.fixture
def tls_server() -> Iterator[HealthServer]:
    srv = tls_health_server(["127.0.0.1", "apiserver.example"])
    yield srv
    srv.stop()


@pytest.mark.parametrize("lean", [True, False], ids=["lean-pool", "urllib3-pool"])
@pytest.mark.parametrize(
    ("extra", "ok"),
    [
        pytest.param({}, True, id="its-ca"),
        pytest.param({"tls-server-name": "apiserver.example"}, True, id="server-name-in-cert"),
        pytest.param({"tls-server-name": "other.example"}, False, id="server-name-not-in-cert"),
    ],
)
def test_a_kubeconfig_ca_is_trusted_on_both_connection_paths(
    tls_server: HealthServer,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    extra: dict[str, str],
    ok: bool,
    lean: bool,
) -> None:
    """The lean pool serves plain configurations; urllib3's the others (a proxy, socket options)."""
    assert tls_server.certs is not None
    if not lean:
        monkeypatch.setattr(http_pool, "lean_pool", lambda *a, **kw: None)
    cluster = {"server": tls_server.url, "certificate-authority-data": _b64(tls_server.certs.ca_pem.decode()), **extra}
    client = KubeClient.from_kubeconfig(str(_kubeconfig(tmp_path, cluster, {"token": "t"})), qps=0, burst=1)
    assert (client._lean is not None, client._pool is None) == (lean, lean)
    if ok:
        assert client.request_raw("GET", "/healthz") == b"ok"
        assert b"".join(client.stream("/healthz")) == b"ok"
    else:
        with pytest.raises(Exception, match="CERTIFICATE_VERIFY_FAILED"):
            client.request_raw("GET", "/healthz")
        with pytest.raises(Exception, match="CERTIFICATE_VERIFY_FAILED"):
            list(client.stream("/healthz"))


def test_a_plain_kubeconfig_imports_neither_urllib3_nor_the_kubernetes_package(
    tls_server: HealthServer, tmp_path: Path
) -> None:
    """Start-up: importing them costs the daemon 15-30 ms and 150-200 ms; a plain kubeconfig
    (the daemon's, in-cluster or a file) needs neither, for requests or watches."""
    assert tls_server.certs is not None
    cluster = {"server": tls_server.url, "certificate-authority-data": _b64(tls_server.certs.ca_pem.decode())}
    path = _kubeconfig(tmp_path, cluster, {"token": "t"})
    child = (
        "import sys\n"
        "from custom_scheduler.kube.client import KubeClient\n"
        f"c = KubeClient.from_kubeconfig({str(path)!r}, qps=0, burst=1)\n"
        "assert c.request_raw('GET', '/healthz') == b'ok'\n"
        "assert b''.join(c.stream('/healthz')) == b'ok'\n"
        "print(sorted(m for m in ('urllib3', 'kubernetes') if m in sys.modules))\n"
    )
    out = subprocess.run([sys.executable, "-c", child], capture_output=True, text=True, timeout=60, check=True)
    assert out.stdout.strip() == "[]"
