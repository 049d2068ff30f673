"""HTTP scheduler extenders (upstream's ``HTTPExtender`` in ``pkg/scheduler/extender.go``) and the
steps of a scheduling cycle that run them (``findNodesThatPassExtenders``, the extender half of
``prioritizeNodes``, ``extendersBinding`` and preemption's ``callExtenders``).

:class:`HTTPExtender` is one configured extender: each verb POSTs JSON to ``urlPrefix/verb`` with
the configured timeout and TLS, and returns a value, an :class:`ExtenderError` naming the extender
in place of one when the call or the answer failed (the wire format and its checks are in
:mod:`~custom_scheduler.framework.extender_wire`). :class:`Extenders` is the configured list, in
upstream's order (ignorable extenders last), with the cycle's rules: a pod goes only to extenders
interested in it (no ``managedResources``, or the pod requests one); a non-ignorable extender's
filter error fails the attempt, an ignorable one's is skipped; prioritize errors are always
skipped; the first interested binder binds.

Plugins reach the extenders through their Handle (:class:`HasExtenders`, ``handle.extenders``).
"""

from __future__ import annotations

import http.client
import os
import socket
import ssl
import tempfile
import threading
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Protocol, runtime_checkable

import structlog

from custom_scheduler.api.model import Pod
from custom_scheduler.config.schema import Extender, ExtenderTLS
from custom_scheduler.framework import extender_wire as wire
from custom_scheduler.framework.extender_wire import EXTENDER_NAME, ExtenderError, FilterAnswer, MetaVictims
from custom_scheduler.framework.types import MAX_NODE_SCORE, NodeInfo, Status
from custom_scheduler.kube.client import pod_path

__all__ = ["EXTENDER_NAME", "NO_EXTENDERS", "ExtenderError", "Extenders", "HTTPExtender", "HasExtenders", "Victims"]

log = structlog.get_logger("custom_scheduler.extender")

JSON = dict[str, Any]
#: One node's preemption victims as the extenders see them: the pods and the PDB violations.
Victims = tuple[Sequence[Pod], int]


# --- transport -----------------------------------------------------------------------------------


def _pem_file(data: bytes, tmp: list[str]) -> str:
    fd, path = tempfile.mkstemp(suffix=".pem")
    with os.fdopen(fd, "wb") as f:
        f.write(data)
    tmp.append(path)
    return path


def ssl_context(cfg: Extender) -> ssl.SSLContext:
    """client-go's ``TLSConfigFor`` for an extender: the CA (data over file), a client certificate,
    and ``insecure`` — also implied by ``enableHTTPS`` without a CA, as ``makeTransport`` does."""
    tls = cfg.tls_config or ExtenderTLS()
    ca_data = tls.ca_data.decode() if tls.ca_data else None
    has_ca = bool(ca_data or tls.ca_file)
    ctx = ssl.create_default_context(cafile=None if ca_data else (tls.ca_file or None), cadata=ca_data)
    if tls.insecure or (cfg.enable_https and not has_ca):
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
    if tls.cert_data or tls.cert_file:
        tmp: list[str] = []
        try:
            cert = _pem_file(tls.cert_data, tmp) if tls.cert_data else tls.cert_file
            key = _pem_file(tls.key_data, tmp) if tls.key_data else (tls.key_file or None)
            ctx.load_cert_chain(cert, key)
        finally:
            for path in tmp:
                os.unlink(path)
    return ctx


class _HTTPSHandler(urllib.request.HTTPSHandler):
    """HTTPS with ``tlsConfig.serverName`` as the SNI and the name the certificate must carry."""

    def __init__(self, context: ssl.SSLContext, server_name: str) -> None:
        super().__init__(context=context)
        self._ctx = context
        self._server_name = server_name

    def https_open(self, req: urllib.request.Request) -> http.client.HTTPResponse:
        ctx, name = self._ctx, self._server_name

        class Conn(http.client.HTTPSConnection):
            def connect(self) -> None:
                http.client.HTTPConnection.connect(self)
                self.sock = ctx.wrap_socket(self.sock, server_hostname=name)

        return self.do_open(Conn, req)


def _opener(cfg: Extender) -> urllib.request.OpenerDirector:
    ctx = ssl_context(cfg)
    server_name = cfg.tls_config.server_name if cfg.tls_config else ""
    https = _HTTPSHandler(ctx, server_name) if server_name else urllib.request.HTTPSHandler(context=ctx)
    # No proxies from the environment: an extender is reached directly (loopback, a Service).
    return urllib.request.build_opener(urllib.request.ProxyHandler({}), https)


def _transport_error(url: str, e: BaseException) -> str:
    """Go's ``*url.Error`` text for a failed POST: ``Post "URL": <cause>``."""
    reason = e.reason if isinstance(e, urllib.error.URLError) else e
    if isinstance(reason, TimeoutError | socket.timeout):
        cause = "context deadline exceeded (Client.Timeout exceeded while awaiting headers)"
    elif isinstance(reason, ConnectionRefusedError):
        host = urllib.parse.urlsplit(url).netloc
        cause = f"dial tcp {host}: connect: connection refused"
    else:
        cause = str(reason)
    return f'Post "{url}": {cause}'


# --- one extender --------------------------------------------------------------------------------


class HTTPExtender:
    """One configured extender; its name is its ``urlPrefix``, as upstream's."""

    def __init__(self, cfg: Extender, *, pod_json: Callable[[Pod], JSON] = wire.pod_to_json) -> None:
        self.cfg = cfg
        self.name = cfg.url_prefix
        self.managed = frozenset(r.name for r in cfg.managed_resources)
        self._pod_json = pod_json
        self._opener = _opener(cfg)

    @property
    def ignorable(self) -> bool:
        return self.cfg.ignorable

    def is_interested(self, pod: Pod) -> bool:
        """Whether ``pod`` goes to this extender: it manages no resources, or the pod requests one."""
        return not self.managed or not self.managed.isdisjoint(pod.requests.scalar)

    def send(self, verb: str, args: object) -> bytes:
        """POST ``args`` to ``urlPrefix/verb``; the body of a 200 answer. Raises ExtenderError."""
        url = self.cfg.url_prefix.rstrip("/") + "/" + verb
        req = urllib.request.Request(
            url, data=wire.encode(args), headers={"Content-Type": "application/json"}, method="POST"
        )
        try:
            with self._opener.open(req, timeout=self.cfg.http_timeout) as resp:
                status, body = int(resp.status), bytes(resp.read())
        except urllib.error.HTTPError as e:
            status, body = e.code, b""
        except (OSError, http.client.HTTPException) as e:
            raise ExtenderError(_transport_error(url, e)) from None
        if status != 200:
            raise ExtenderError(f"failed {verb} with extender at URL {url}, code {status}")
        return body

    def _args(self, pod: Pod, nodes: Sequence[NodeInfo]) -> JSON:
        if self.cfg.node_cache_capable:
            return wire.filter_args(self._pod_json(pod), None, [ni.name for ni in nodes])
        return wire.filter_args(self._pod_json(pod), [wire.node_to_json(ni.node) for ni in nodes if ni.node], None)

    def filter(self, pod: Pod, nodes: Sequence[NodeInfo]) -> FilterAnswer | ExtenderError:
        verb = self.cfg.filter_verb
        try:
            body = self.send(verb, self._args(pod, nodes))
            return wire.parse_filter(body, self.name, verb, [ni.name for ni in nodes], self.cfg.node_cache_capable)
        except ExtenderError as e:
            return e

    def prioritize(self, pod: Pod, nodes: Sequence[NodeInfo]) -> list[tuple[str, int]] | ExtenderError:
        verb = self.cfg.prioritize_verb
        try:
            return wire.parse_priorities(self.send(verb, self._args(pod, nodes)), self.name, verb)
        except ExtenderError as e:
            return e

    def bind(self, pod: Pod, node: str) -> ExtenderError | None:
        verb = self.cfg.bind_verb
        try:
            wire.parse_binding(self.send(verb, wire.binding_args(pod, node)), self.name, verb)
        except ExtenderError as e:
            return e
        return None

    def process_preemption(self, pod: Pod, victims: Mapping[str, Victims]) -> dict[str, MetaVictims] | ExtenderError:
        verb = self.cfg.preempt_verb
        full = not self.cfg.node_cache_capable
        sent = {
            node: ([self._pod_json(p) for p in pods] if full else [], [p.uid for p in pods], pdb)
            for node, (pods, pdb) in victims.items()
        }
        try:
            args = wire.preemption_args(self._pod_json(pod), sent, self.cfg.node_cache_capable)
            return wire.parse_preemption(self.send(verb, args), self.name, verb)
        except ExtenderError as e:
            return e


# --- the configured list -------------------------------------------------------------------------


class Extenders:
    """The configured extenders, non-ignorable first (upstream's ``buildExtenders`` order)."""

    def __init__(self, extenders: Sequence[HTTPExtender] = ()) -> None:
        self.all: tuple[HTTPExtender, ...] = tuple(
            sorted(extenders, key=lambda e: e.ignorable)  # stable: configured order otherwise
        )
        self.has_filters = any(e.cfg.filter_verb for e in self.all)
        self.has_prioritizers = any(e.cfg.prioritize_verb for e in self.all)
        #: Resources NodeResourcesFit leaves to the extenders (``ignoredByScheduler``).
        self.ignored_resources = frozenset(
            r.name for e in self.all for r in e.cfg.managed_resources if r.ignored_by_scheduler
        )
        self._pool: ThreadPoolExecutor | None = None

    @classmethod
    def build(cls, configs: Sequence[Extender], *, pod_json: Callable[[Pod], JSON] | None = None) -> Extenders:
        kw = {} if pod_json is None else {"pod_json": pod_json}
        return cls([HTTPExtender(c, **kw) for c in configs])

    def __bool__(self) -> bool:
        return bool(self.all)

    def __iter__(self) -> Iterator[HTTPExtender]:
        return iter(self.all)

    def filter(self, pod: Pod, feasible: Sequence[NodeInfo], statuses: dict[str, Status]) -> list[NodeInfo]:
        """``findNodesThatPassExtenders``: each interested filter extender in turn narrows
        ``feasible``; the reasons of the nodes it rejects go to ``statuses``. Raises
        ExtenderError for a non-ignorable extender's error."""
        nodes = list(feasible)
        for ext in self.all:
            if not nodes:
                break
            if not ext.cfg.filter_verb or not ext.is_interested(pod):
                continue
            got = ext.filter(pod, nodes)
            if isinstance(got, ExtenderError):
                if ext.ignorable:
                    log.info("extender_skipped", extender=ext.name, pod=pod.key, error=str(got))
                    continue
                raise got
            for name, msg in got.failed.items():
                if name not in got.failed_unresolvable:
                    statuses[name] = Status.unschedulable(msg).with_plugin(EXTENDER_NAME)
            for name, msg in got.failed_unresolvable.items():
                statuses[name] = Status.unresolvable(msg).with_plugin(EXTENDER_NAME)
            by_name = {ni.name: ni for ni in nodes}
            nodes = [by_name[n] for n in got.nodes]
        return nodes

    def prioritize(self, pod: Pod, nodes: Sequence[NodeInfo]) -> dict[str, dict[str, tuple[int, int]]]:
        """The extender half of ``prioritizeNodes``: node → extender → (its score, the score added
        to the node's total: score x weight x MaxNodeScore/MaxExtenderPriority). The calls run
        concurrently; a failed one gives no scores (logged), whether ignorable or not."""
        exts = [e for e in self.all if e.cfg.prioritize_verb and e.is_interested(pod)]
        if not exts:
            return {}
        if len(exts) == 1:
            answers = [exts[0].prioritize(pod, nodes)]
        else:
            if self._pool is None:
                self._pool = ThreadPoolExecutor(max_workers=len(self.all), thread_name_prefix="extender")
            answers = list(self._pool.map(lambda e: e.prioritize(pod, nodes), exts))
        out: dict[str, dict[str, tuple[int, int]]] = {}
        scale = MAX_NODE_SCORE // wire.MAX_EXTENDER_PRIORITY
        for ext, got in zip(exts, answers, strict=True):
            if isinstance(got, ExtenderError):
                log.info("extender_prioritize_failed", extender=ext.name, pod=pod.key, error=str(got))
                continue
            for host, score in got:
                raw, final = out.setdefault(host, {}).get(ext.name, (0, 0))
                out[host][ext.name] = (raw + score, final + score * ext.cfg.weight * scale)
        return out

    def bind(self, pod: Pod, node: str) -> tuple[bool, ExtenderError | None]:
        """``extendersBinding``: (whether an extender took the binding, its error). The first
        interested binder decides, unless it is ignorable and failed."""
        for ext in self.all:
            if not ext.cfg.bind_verb or not ext.is_interested(pod):
                continue
            err = ext.bind(pod, node)
            if err is not None and ext.ignorable:
                log.info("extender_bind_skipped", extender=ext.name, pod=pod.key, error=str(err))
                continue
            return True, err
        return False, None

    def process_preemption(
        self, pod: Pod, victims: Mapping[str, Victims], get_node: Callable[[str], NodeInfo | None]
    ) -> dict[str, Victims]:
        """Preemption's ``callExtenders``: every interested extender with a preemptVerb may narrow
        the candidates (nodes → victims). Raises ExtenderError for a non-ignorable extender's
        error or an answer naming pods or nodes the scheduler does not have."""
        current = dict(victims)
        for ext in self.all:
            if not ext.cfg.preempt_verb or not ext.is_interested(pod):
                continue
            try:
                got = _victims(ext, ext.process_preemption(pod, current), get_node)
            except ExtenderError as e:
                if ext.ignorable:
                    log.info("extender_skipped", extender=ext.name, pod=pod.key, error=str(e))
                    continue
                raise
            current = got
            if not current:
                break
        return current


def _victims(
    ext: HTTPExtender, got: dict[str, MetaVictims] | ExtenderError, get_node: Callable[[str], NodeInfo | None]
) -> dict[str, Victims]:
    """An extender's MetaVictims back to pods on the scheduler's nodes (``convertToVictims``),
    with ``callExtenders``' check that every node keeps at least one victim (an ignorable
    extender's empty nodes are dropped instead)."""
    if isinstance(got, ExtenderError):
        raise got
    out: dict[str, Victims] = {}
    for node, meta in got.items():
        ni = get_node(node)
        if ni is None:
            raise ExtenderError(f'nodeinfo not found for node name "{node}"')
        pods = []
        for uid in meta.uids:
            pod = ni.pods.get(uid)
            if pod is None:
                raise ExtenderError(
                    f"extender: {ext.name} claims to preempt pod (UID: {uid}) on node: {node}, "
                    "but the pod is not found on that node"
                )
            pods.append(pod)
        if not pods:
            if ext.ignorable:
                continue
            raise ExtenderError(f'expected at least one victim pod on node "{node}"')
        out[node] = (pods, meta.num_pdb_violations)
    return out


#: No extenders configured.
NO_EXTENDERS = Extenders()


def api_pod_json(get: Callable[[str], Any], *, size: int = 256) -> Callable[[Pod], JSON]:
    """The pod as the API server has it (``GET`` through ``get``), as upstream sends its informer's
    copy, remembered per (uid, resourceVersion) so one attempt's calls read it once; the
    projection's rebuild (:func:`~custom_scheduler.framework.extender_wire.pod_to_json`) when
    the read fails or finds another version."""
    cache: dict[tuple[str, str], JSON] = {}
    lock = threading.Lock()

    def pod_json(pod: Pod) -> JSON:
        key = (pod.uid, pod.resource_version)
        with lock:
            hit = cache.get(key)
        if hit is not None:
            return hit
        try:
            doc = get(pod_path(pod.namespace, pod.name))
        except Exception as e:  # any failure: the rebuild still lets the extender answer
            log.info("extender_pod_read_failed", pod=pod.key, error=f"{type(e).__name__}: {e}"[:200])
            doc = None
        meta = doc.get("metadata") if isinstance(doc, dict) else None
        if not isinstance(meta, dict) or meta.get("uid") != pod.uid:
            return wire.pod_to_json(pod)
        fetched: JSON = doc
        with lock:
            if len(cache) >= size:
                cache.pop(next(iter(cache)))
            cache[key] = fetched
        return fetched

    return pod_json


@runtime_checkable
class HasExtenders(Protocol):
    """A Handle that lends the configured extenders (upstream's ``Handle.Extenders()``)."""

    @property
    def extenders(self) -> Extenders: ...


def extenders_of(handle: object) -> Extenders:
    """The extenders a Handle lends; none for a handle that lends none (test fakes).

    An attribute read, not ``isinstance(handle, HasExtenders)``: a runtime-checkable protocol
    check costs several microseconds, and this runs a few times per scheduling cycle."""
    got = getattr(handle, "extenders", None)
    return got if isinstance(got, Extenders) else NO_EXTENDERS
