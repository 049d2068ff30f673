"""The only module that knows how requests reach the API server.

Why not the generated API classes: on the hot paths (LIST, WATCH, bind, events) they cost a
millisecond per object to build models, and ``create_namespaced_pod_binding`` raises *after* a
successful bind (../shared/docs/python-client.md §4). The ``kubernetes`` package is imported only
for credentials we do not read ourselves (exec plugins, auth providers, proxies; :mod:`.credentials`
reads plain kubeconfigs and in-cluster ones), and we send raw JSON: single requests on
``http.client`` keep-alive connections (:mod:`.http_pool`, a third of urllib3's CPU per request),
watches too. urllib3 is imported and its pool built only for a configuration the lean pool does not
serve (a proxy, socket options, ``assert_hostname``): importing it costs 15-30 ms of start-up, most
of it compiling its URL regular expressions.

- :class:`KubeClient.request` returns parsed JSON (or raw bytes) for 2xx and raises
  :mod:`custom_scheduler.kube.api_errors` for everything else.
- Writes pass a client-side token bucket (``clientConnection.qps`` / ``burst``), like client-go.
- :meth:`KubeClient.stream` yields the lines of a chunked response (a watch) with an idle read
  timeout, so a silent half-open connection is noticed.
- Separate clients (one for watches, one for writes) keep long streams from starving binds; see
  :meth:`KubeClient.clone`.
- A kubeconfig with ``insecure-skip-tls-verify: true`` is reported once, as the structured event
  ``insecure_skip_tls_verify``; urllib3's ``InsecureRequestWarning``, which it would otherwise print
  for every request (thousands a minute under load), is silenced (that category only).
"""

from __future__ import annotations

import functools
import http.client
import os
import ssl
import threading
import time
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any
from urllib.parse import quote, urlencode

import orjson
import structlog

from custom_scheduler.kube import api_errors, http_headers, http_pool

if TYPE_CHECKING:
    import urllib3

log = structlog.get_logger("custom_scheduler.kube.client")

http_headers.install()  # every response's headers, without the email package (see there)

JSON_CT = "application/json"
MERGE_PATCH_CT = "application/merge-patch+json"
STRATEGIC_PATCH_CT = "application/strategic-merge-patch+json"


class TokenBucket:
    """client-go's flowcontrol token bucket: ``qps`` tokens per second, at most ``burst`` saved."""

    def __init__(self, qps: float, burst: int, clock: Any = time.monotonic) -> None:
        self.qps = float(qps)
        self.burst = max(1, int(burst))
        self._tokens = float(self.burst)
        self._clock = clock
        self._last = clock()
        self._lock = threading.Lock()

    def acquire(self) -> float:
        """Take one token, sleeping until one is available; returns the seconds waited."""
        if self.qps <= 0:
            return 0.0
        with self._lock:
            now = self._clock()
            self._tokens = min(self.burst, self._tokens + (now - self._last) * self.qps)
            self._last = now
            self._tokens -= 1
            wait = -self._tokens / self.qps if self._tokens < 0 else 0.0
        if wait > 0:
            time.sleep(wait)
        return wait


class RequestObserver:
    """What a :class:`KubeClient` reports about its requests, for client-go's ``rest_client_*``
    metrics; this base does nothing. The daemon passes one that records into its registry (this
    layer knows no metrics library). ``base`` is the client's API server URL.

    Called from whatever thread sent the request, so an implementation must be thread-safe."""

    def result(self, verb: str, base: str, code: str) -> None:
        """A request got an answer with status ``code`` (``"<error>"`` when none came): every
        request, watches included, as client-go counts them."""

    def latency(self, verb: str, base: str, seconds: float) -> None:
        """A non-streaming request took ``seconds``, client-side rate limiting included."""

    def throttled(self, verb: str, base: str, seconds: float) -> None:
        """A request waited ``seconds`` for the client-side rate limiter."""


NO_OBSERVER = RequestObserver()

#: The code label of a request that got no HTTP answer (client-go's sanitize).
NO_RESPONSE = "<error>"


def load_configuration(kubeconfig: str = "", context: str | None = None, *, plain_only: bool = False) -> Any:
    """The credentials of a kubeconfig file, or in-cluster ones: a :class:`.credentials.Credentials`
    for the plain cases, else a ``kubernetes.client.Configuration`` (exec plugins, auth providers,
    proxies: see :mod:`.credentials`), or None there when ``plain_only`` (nothing run, nothing
    imported: an exec plugin can take seconds).

    Empty ``kubeconfig``: in-cluster when ``KUBERNETES_SERVICE_HOST`` is set, else ``$KUBECONFIG``
    or ``~/.kube/config`` (never silently the other way round).
    """
    from custom_scheduler.kube import credentials

    if not kubeconfig and os.environ.get("KUBERNETES_SERVICE_HOST"):
        return credentials.in_cluster()
    path = kubeconfig or os.environ.get("KUBECONFIG", "").split(os.pathsep)[0] or os.path.expanduser("~/.kube/config")
    plain = credentials.from_kubeconfig(path, context)
    if plain is not None or plain_only:
        return plain
    from kubernetes import client as k8s_client
    from kubernetes import config as k8s_config

    cfg = k8s_client.Configuration()
    k8s_config.load_kube_config(  # type: ignore[no-untyped-call]
        config_file=path, context=context, client_configuration=cfg, persist_config=False
    )
    return cfg


def pool_manager(configuration: Any, context: ssl.SSLContext | None = None) -> urllib3.PoolManager:
    """The urllib3 pool that ``kubernetes.client.rest.RESTClientObject`` would build for
    ``configuration`` (its TLS settings and pool size); with a proxy, that class builds it (it
    knows ``no_proxy`` and SOCKS), so the ``kubernetes`` package is imported only then.

    ``context``: the client's TLS context (:func:`.http_pool.tls_context`), which every watch
    connection then shares; without one, urllib3 builds a context and re-reads the CA and client
    certificate files for each new connection (1-2 ms of CPU each, some twenty at start-up)."""
    import urllib3

    if getattr(configuration, "proxy", None):
        from kubernetes.client import rest

        manager: urllib3.PoolManager = rest.RESTClientObject(configuration).pool_manager
        return manager
    args: dict[str, Any] = {"cert_reqs": ssl.CERT_REQUIRED if configuration.verify_ssl else ssl.CERT_NONE}
    if context is not None and configuration.assert_hostname is None:
        args["ssl_context"] = context
    else:
        args.update(
            ca_certs=configuration.ssl_ca_cert,
            cert_file=configuration.cert_file,
            key_file=configuration.key_file,
            ca_cert_data=getattr(configuration, "ca_cert_data", None),
        )
    optional = {
        "assert_hostname": configuration.assert_hostname,
        "retries": configuration.retries,
        "server_hostname": configuration.tls_server_name or None,
        "socket_options": configuration.socket_options,
        "maxsize": configuration.connection_pool_maxsize,
    }
    args.update({k: v for k, v in optional.items() if v is not None})
    return urllib3.PoolManager(**args)


#: Seconds between re-reads of the bearer token (see :meth:`KubeClient._authorization`).
AUTH_REFRESH = 10.0

_insecure_hosts: set[str] = set()
_insecure_lock = threading.Lock()


def note_insecure(configuration: Any) -> bool:
    """Warn once per API server when ``configuration`` skips TLS verification; True if it does.

    The warning is a log event, not a Python warning, so it reaches the JSON log like every other
    event; urllib3's per-request ``InsecureRequestWarning`` says nothing more and is ignored from
    then on. Clones and the watch client share the host, so a daemon logs this exactly once.
    """
    if getattr(configuration, "verify_ssl", True):
        return False
    host = str(configuration.host).rstrip("/")
    with _insecure_lock:
        first = host not in _insecure_hosts
        _insecure_hosts.add(host)
    if first:
        import urllib3  # here only: an insecure configuration is a development one

        urllib3.disable_warnings(urllib3.exceptions.InsecureRequestWarning)
        log.warning(
            "insecure_skip_tls_verify",
            host=host,
            message="the kubeconfig skips TLS verification of the API server; anyone on the path can impersonate it",
        )
    return True


class KubeClient:
    """Raw-JSON access to one API server."""

    def __init__(
        self,
        configuration: Any,
        *,
        qps: float = 50.0,
        burst: int = 100,
        pool_maxsize: int = 32,
        user_agent: str = "custom-scheduler",
        observer: RequestObserver = NO_OBSERVER,
    ) -> None:
        configuration.connection_pool_maxsize = pool_maxsize
        note_insecure(configuration)
        self._cfg = configuration
        tls = http_pool.tls_context(configuration) if str(configuration.host).startswith("https:") else None
        #: Every request goes here when the configuration allows (see kube.http_pool) ...
        self._lean = http_pool.lean_pool(configuration, pool_maxsize, tls)
        #: ... else to urllib3's pool.
        self._pool: urllib3.PoolManager | None = pool_manager(configuration, tls) if self._lean is None else None
        self.host = str(configuration.host).rstrip("/")
        self.limiter = TokenBucket(qps, burst)
        self.user_agent = user_agent
        self.qps, self.burst = qps, burst
        self._auth: tuple[float, str] = (-1e18, "")
        #: Told about every request (``rest_client_*``); clones inherit it.
        self.observer = observer

    @classmethod
    def from_kubeconfig(cls, kubeconfig: str = "", **kw: Any) -> KubeClient:
        return cls(load_configuration(kubeconfig), **kw)

    def clone(self, **kw: Any) -> KubeClient:
        """A client with the same credentials and its own connection pool."""
        args: dict[str, Any] = {
            "qps": self.qps,
            "burst": self.burst,
            "user_agent": self.user_agent,
            "observer": self.observer,
        }
        args.update(kw)
        return KubeClient(self._cfg, **args)

    # -- plumbing ---------------------------------------------------------------------------------
    def _headers(self, content_type: str | None) -> dict[str, str]:
        h = {"Accept": JSON_CT, "User-Agent": self.user_agent}
        if content_type:
            h["Content-Type"] = content_type
        token = self._authorization()
        if token:
            h["Authorization"] = token
        return h

    def _authorization(self) -> str:
        """The bearer header, re-read from the client configuration at most every
        :data:`AUTH_REFRESH` seconds: ``auth_settings()`` runs the token refresh hook (a projected
        service-account token file, an exec plugin) and costs tens of microseconds per request,
        while those tokens live for minutes to hours."""
        now = time.monotonic()
        at, value = self._auth
        if now - at < AUTH_REFRESH:
            return value
        auth = self._cfg.auth_settings().get("BearerToken")
        # Surrounding whitespace trimmed, as client-go trims a token file (a Secret's token often
        # ends in a newline, which no HTTP header may carry).
        value = str(auth["value"]).strip() if auth and auth.get("value") else ""
        self._auth = (now, value)
        return value

    def url(self, path: str, query: Mapping[str, Any] | None = None) -> str:
        return f"{self.host}{request_target(path, query)}"

    def request_raw(
        self,
        method: str,
        path: str,
        *,
        query: Mapping[str, Any] | None = None,
        body: Any = None,
        content_type: str | None = None,
        timeout: tuple[float, float] = (5.0, 30.0),
        rate_limited: bool | None = None,
    ) -> bytes:
        """Send one request; return the body of a 2xx answer, raise otherwise."""
        start = time.perf_counter()
        try:
            if rate_limited if rate_limited is not None else method != "GET":
                self.observer.throttled(method, self.host, self.limiter.acquire())
            data = None
            if body is not None:
                data = body if isinstance(body, bytes) else orjson.dumps(body)
                content_type = content_type or JSON_CT
            if self._lean is not None:
                status, body_out, headers = self._send_lean(method, path, query, data, content_type, timeout)
            else:
                resp = self._send(method, path, query, data, content_type, timeout, preload=True)
                status, body_out, headers = resp.status, resp.data, resp.headers
        finally:
            self.observer.latency(method, self.host, time.perf_counter() - start)
        if 200 <= status < 300:
            return bytes(body_out)
        self._failed(status)
        raise api_errors.ApiError.from_response(status, body_out, headers)

    def _send_lean(
        self,
        method: str,
        path: str,
        query: Mapping[str, Any] | None,
        data: bytes | None,
        content_type: str | None,
        timeout: tuple[float, float],
    ) -> tuple[int, bytes, Any]:
        """:meth:`_send` on the lean pool: the same errors, the same observer reports."""
        assert self._lean is not None
        try:
            answer = self._lean.request(method, request_target(path, query), data, self._headers(content_type), timeout)
        except (OSError, http.client.HTTPException) as e:
            self.observer.result(method, self.host, NO_RESPONSE)
            raise api_errors.TransportError(f"{method} {path}: {type(e).__name__}: {e}") from e
        self.observer.result(method, self.host, str(answer.status))
        return answer.status, answer.data, answer.headers

    def _send(
        self,
        method: str,
        path: str,
        query: Mapping[str, Any] | None,
        data: bytes | None,
        content_type: str | None,
        timeout: tuple[float, float],
        *,
        preload: bool,
    ) -> urllib3.BaseHTTPResponse:
        """One request on urllib3's pool, no retries; a connection-level failure raises
        TransportError. Its status (or that none came) is reported to the :attr:`observer`."""
        import urllib3

        assert self._pool is not None  # built whenever there is no lean pool
        try:
            resp = self._pool.request(
                method,
                self.url(path, query),
                body=data,
                headers=self._headers(content_type),
                timeout=urllib3.Timeout(connect=timeout[0], read=timeout[1]),
                retries=False,
                preload_content=preload,
            )
        except urllib3.exceptions.HTTPError as e:
            self.observer.result(method, self.host, NO_RESPONSE)
            raise api_errors.TransportError(f"{method} {path}: {type(e).__name__}: {e}") from e
        except OSError as e:
            self.observer.result(method, self.host, NO_RESPONSE)
            raise api_errors.TransportError(f"{method} {path}: {e}") from e
        self.observer.result(method, self.host, str(resp.status))
        return resp

    def _failed(self, status: int) -> None:
        if status == 401:
            self._auth = (-1e18, "")  # a rotated token: read it again on the next request

    def request(self, method: str, path: str, **kw: Any) -> Any:
        """:meth:`request_raw`, with the answer parsed as JSON."""
        raw = self.request_raw(method, path, **kw)
        return orjson.loads(raw) if raw else None

    def get(self, path: str, query: Mapping[str, Any] | None = None, **kw: Any) -> Any:
        return self.request("GET", path, query=query, **kw)

    def post(self, path: str, body: Any, **kw: Any) -> Any:
        return self.request("POST", path, body=body, **kw)

    def put(self, path: str, body: Any, **kw: Any) -> Any:
        return self.request("PUT", path, body=body, **kw)

    def patch(self, path: str, body: Any, content_type: str = MERGE_PATCH_CT, **kw: Any) -> Any:
        return self.request("PATCH", path, body=body, content_type=content_type, **kw)

    def delete(self, path: str, body: Any = None, **kw: Any) -> Any:
        return self.request("DELETE", path, body=body, **kw)

    def stream(
        self,
        path: str,
        query: Mapping[str, Any] | None = None,
        *,
        connect_timeout: float = 5.0,
        read_timeout: float = 90.0,
        on_open: Any = None,
    ) -> Iterator[bytes]:
        """Yield the lines of a streamed GET (a watch). The read timeout is an *idle* timeout.

        ``on_open`` receives the open response (it has ``shutdown()``) once headers arrive, so the
        owner can end the stream from another thread. On the lean pool when the configuration
        allows (a watch then takes the connection its LIST left: no TLS handshake of its own),
        else on urllib3's.
        """
        timeout = (connect_timeout, read_timeout)
        broken: tuple[type[BaseException], ...] = (http.client.HTTPException, OSError, ValueError, AttributeError)
        idle: tuple[type[BaseException], ...] = (TimeoutError,)
        if self._lean is not None:
            lean = self._open_lean_stream(path, query, timeout)
            error_body, chunks, release = lean.read_all, lean.chunks, lean.close
            resp: Any = lean
        else:
            import urllib3.exceptions

            broken += (urllib3.exceptions.HTTPError,)
            idle += (urllib3.exceptions.ReadTimeoutError,)
            pooled = self._send("GET", path, query, None, None, timeout, preload=False)
            error_body, release = pooled.read, pooled.release_conn
            chunks = functools.partial(pooled.stream, 65536, decode_content=True)
            resp = pooled
        try:
            if not 200 <= resp.status < 300:
                self._failed(resp.status)
                raise api_errors.ApiError.from_response(resp.status, error_body(), resp.headers)
            if on_open is not None:
                on_open(resp)
            try:
                yield from _lines(chunks())
            except idle as e:
                raise api_errors.IdleTimeout(f"watch {path}: nothing for {read_timeout:g} s") from e
            except broken as e:
                raise api_errors.TransportError(f"watch {path}: {type(e).__name__}: {e}") from e
        finally:
            release()

    def _open_lean_stream(
        self, path: str, query: Mapping[str, Any] | None, timeout: tuple[float, float]
    ) -> http_pool.Stream:
        """:meth:`_send_lean` for a stream: the same errors, the same observer reports."""
        assert self._lean is not None
        try:
            resp = self._lean.stream("GET", request_target(path, query), self._headers(None), timeout)
        except (OSError, http.client.HTTPException) as e:
            self.observer.result("GET", self.host, NO_RESPONSE)
            raise api_errors.TransportError(f"GET {path}: {type(e).__name__}: {e}") from e
        self.observer.result("GET", self.host, str(resp.status))
        return resp

    def close(self) -> None:
        if self._pool is not None:
            self._pool.clear()
        if self._lean is not None:
            self._lean.close()


def _lines(chunks: Iterator[bytes]) -> Iterator[bytes]:
    """The non-blank lines of a body that arrives in ``chunks`` (a watch: one JSON event a line)."""
    buf = b""
    for chunk in chunks:
        buf += chunk
        while True:
            nl = buf.find(b"\n")
            if nl < 0:
                break
            line, buf = buf[:nl], buf[nl + 1 :]
            if line.strip():
                yield line
    if buf.strip():
        yield buf


# -- paths -----------------------------------------------------------------------------------------


def request_target(path: str, query: Mapping[str, Any] | None = None) -> str:
    """``path?query``, leaving out parameters that are None or empty (as client-go does)."""
    q = {k: v for k, v in (query or {}).items() if v is not None and v != ""}
    return path + (f"?{urlencode(q)}" if q else "")


def pod_path(namespace: str, name: str = "", sub: str = "") -> str:
    p = f"/api/v1/namespaces/{quote(namespace)}/pods"
    if name:
        p += f"/{quote(name)}"
    if sub:
        p += f"/{sub}"
    return p


def node_path(name: str = "", sub: str = "") -> str:
    p = "/api/v1/nodes"
    if name:
        p += f"/{quote(name)}"
    if sub:
        p += f"/{sub}"
    return p
