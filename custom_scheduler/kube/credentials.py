"""Cluster credentials from a kubeconfig file or the Pod's service account, without the
``kubernetes`` package.

Why: importing ``kubernetes.config`` pulls in the generated client, pydantic, oauthlib, requests
and google-auth: 150-200 ms of a daemon start-up that is about one second, for reading a few YAML
fields. The plain cases (a server, its CA, a bearer token or token file, a client certificate)
are read here, as client-go reads them; anything else — an ``exec`` credential plugin, an
``auth-provider``, a ``proxy-url``, basic auth — returns None and the caller uses the
``kubernetes`` package's loader, which implements those.

:class:`Credentials` carries the attribute names of ``kubernetes.client.Configuration`` that
:class:`~custom_scheduler.kube.client.KubeClient` and :mod:`.http_pool` read, so either works there.
"""

from __future__ import annotations

import atexit
import base64
import os
import shutil
import tempfile
import threading
from dataclasses import dataclass, field
from typing import Any

import yaml

from custom_scheduler.errors import ConfigError

#: Where a Pod's service account credentials are mounted (client-go's rest.InClusterConfig).
SERVICE_ACCOUNT_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"

#: User fields only the ``kubernetes`` package's loader implements here.
_DEFERRED_USER_FIELDS = ("exec", "auth-provider", "username", "password")


@dataclass
class Credentials:
    """What a client needs to reach one API server: its URL, TLS settings and a bearer token.

    ``token_file`` is re-read on each :meth:`auth_settings` call (the client calls it at most every
    few seconds), so a rotated service-account token is picked up as client-go picks it up; while
    it cannot be read, the last token read (or ``token``) is used."""

    host: str
    ssl_ca_cert: str | None = None
    ca_cert_data: str | None = None
    cert_file: str | None = None
    key_file: str | None = None
    verify_ssl: bool = True
    tls_server_name: str | None = None
    token: str = ""
    token_file: str | None = None
    # Set by the client per connection pool; the rest are fixed as the kubernetes Configuration's
    # defaults, which this loader never changes (a proxy goes to that loader).
    connection_pool_maxsize: int | None = None
    assert_hostname: None = None
    retries: None = None
    socket_options: None = None
    proxy: None = None
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)

    def bearer(self) -> str:
        """The current token (the file's when one is named and readable)."""
        if self.token_file:
            try:
                with open(self.token_file, encoding="utf-8") as f:
                    read = f.read().strip()
            except OSError:
                read = ""
            if read:
                with self._lock:
                    self.token = read
        return self.token

    def auth_settings(self) -> dict[str, Any]:
        """The shape of ``kubernetes.client.Configuration.auth_settings()`` that the client reads."""
        token = self.bearer()
        if not token:
            return {}
        return {"BearerToken": {"in": "header", "key": "authorization", "value": f"Bearer {token}"}}


def in_cluster(environ: dict[str, str] | None = None, sa_dir: str = SERVICE_ACCOUNT_DIR) -> Credentials:
    """The Pod's service account: ``KUBERNETES_SERVICE_HOST``/``_PORT``, its CA and token file."""
    env = os.environ if environ is None else environ
    host, port = env.get("KUBERNETES_SERVICE_HOST", ""), env.get("KUBERNETES_SERVICE_PORT", "")
    if not host or not port:
        raise ConfigError("in-cluster credentials: KUBERNETES_SERVICE_HOST and KUBERNETES_SERVICE_PORT must be set")
    token_file, ca_file = os.path.join(sa_dir, "token"), os.path.join(sa_dir, "ca.crt")
    for need in (token_file, ca_file):
        if not os.path.isfile(need):
            raise ConfigError(f"in-cluster credentials: {need} does not exist")
    creds = Credentials(host=f"https://{_join_host_port(host, port)}", ssl_ca_cert=ca_file, token_file=token_file)
    if not creds.bearer():
        raise ConfigError(f"in-cluster credentials: {token_file} is empty")
    return creds


def _join_host_port(host: str, port: str) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def from_kubeconfig(path: str, context: str | None = None) -> Credentials | None:
    """The credentials of ``context`` (default: ``current-context``) in the kubeconfig at
    ``path``; None when its user or cluster needs the ``kubernetes`` package's loader.

    Relative file names are read from the kubeconfig's directory, as kubectl reads them."""
    try:
        with open(path, encoding="utf-8") as f:
            doc = yaml.safe_load(f)
    except OSError as e:
        raise ConfigError(f"kubeconfig {path}: {e.strerror or e}") from None
    except yaml.YAMLError as e:
        raise ConfigError(f"kubeconfig {path}: not valid YAML: {e}") from None
    if not isinstance(doc, dict):
        raise ConfigError(f"kubeconfig {path}: not a kubeconfig (expected a mapping)")
    name = context or doc.get("current-context") or ""
    if not name:
        raise ConfigError(f"kubeconfig {path}: no current-context and no context given")
    ctx = _named(doc, "contexts", "context", name, path)
    cluster = _named(doc, "clusters", "cluster", str(ctx.get("cluster") or ""), path)
    user = _named(doc, "users", "user", str(ctx.get("user") or ""), path) if ctx.get("user") else {}
    if any(k in user for k in _DEFERRED_USER_FIELDS) or "proxy-url" in cluster:
        return None
    server = str(cluster.get("server") or "").rstrip("/")
    if not server:
        raise ConfigError(f"kubeconfig {path}: cluster {ctx.get('cluster')!r} has no server")
    base = os.path.dirname(os.path.abspath(path))
    creds = Credentials(host=server, verify_ssl=not cluster.get("insecure-skip-tls-verify", False))
    if cluster.get("tls-server-name"):
        creds.tls_server_name = str(cluster["tls-server-name"])
    if server.startswith("https"):
        if cluster.get("certificate-authority-data"):
            creds.ca_cert_data = _decoded(cluster["certificate-authority-data"], "certificate-authority-data", path)
        elif cluster.get("certificate-authority"):
            creds.ssl_ca_cert = _existing(base, cluster["certificate-authority"], path)
        creds.cert_file = _file_or_data(user, "client-certificate", base, path)
        creds.key_file = _file_or_data(user, "client-key", base, path)
    creds.token = str(user.get("token") or "")
    if user.get("tokenFile"):
        creds.token_file = _existing(base, user["tokenFile"], path)
        creds.bearer()
    return creds


def _named(doc: dict[str, Any], section: str, key: str, name: str, path: str) -> dict[str, Any]:
    for entry in doc.get(section) or []:
        if isinstance(entry, dict) and entry.get("name") == name:
            value = entry.get(key) or {}
            if not isinstance(value, dict):
                raise ConfigError(f"kubeconfig {path}: {section} entry {name!r} is not a mapping")
            return value
    raise ConfigError(f"kubeconfig {path}: no {key} named {name!r} in {section}")


def _existing(base: str, name: Any, path: str) -> str:
    full = os.path.normpath(os.path.join(base, str(name)))
    if not os.path.isfile(full):
        raise ConfigError(f"kubeconfig {path}: file does not exist: {full}")
    return full


def _decoded(value: Any, what: str, path: str) -> str:
    try:
        return base64.b64decode(str(value), validate=False).decode("utf-8")
    except (ValueError, UnicodeDecodeError):
        raise ConfigError(f"kubeconfig {path}: {what} is not base64 of a PEM text") from None


def _file_or_data(user: dict[str, Any], key: str, base: str, path: str) -> str | None:
    """A file holding ``user[key + '-data']`` (TLS libraries read certificates from files), else the
    file ``user[key]`` names."""
    if user.get(f"{key}-data"):
        return _private_file(_decoded(user[f"{key}-data"], f"{key}-data", path))
    if user.get(key):
        return _existing(base, user[key], path)
    return None


_private_dir: list[str] = []
_private_lock = threading.Lock()


def _private_file(text: str) -> str:
    """Write ``text`` to a file only this user can read, in a directory removed at exit."""
    with _private_lock:
        if not _private_dir:
            _private_dir.append(tempfile.mkdtemp(prefix="custom-scheduler-creds-"))
            atexit.register(shutil.rmtree, _private_dir[0], True)
        fd, name = tempfile.mkstemp(dir=_private_dir[0])
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        f.write(text)
    return name
