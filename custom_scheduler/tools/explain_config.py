"""Which configuration ``explain`` decides with: the running daemon's, whenever it can be read.

Explaining with another profile than the daemon's gives confident wrong answers (a pod placed by
AcceleratorIsolation "differs from the binding"), so a live explain looks, in order, at:

1. ``--config FILE``: the operator said so;
2. the running daemon's ``/configz`` (its effective configuration, reloads included): at
   ``--configz URL``, else at the daemon's pod, the Lease holder first (``<pod name>_<uuid>`` is
   its holderIdentity: the pod's hostname is its name), else a ready pod of the Deployment
   (``app.kubernetes.io/name=custom-scheduler``), reached at its pod IP or through the API
   server's pod proxy (see :func:`configz_of_pod` for why the proxy rarely gets an answer);
3. the deployed ConfigMap (``--config-map``), which the daemon mounts, up to the kubelet's delay;
4. the default profile.

The first line of the report says which was used. A /configz that cannot be read (no daemon, no
RBAC for ``pods/proxy`` or ``nonResourceURLs: [/configz]``, a network failure) is one line on
stderr and the next source, never a traceback: explain still answers.

A daemon reached through ``kubectl port-forward`` (or running on one's own machine) is given as
``--configz https://127.0.0.1:10259/configz``. Requests to the daemon carry the kubeconfig's
bearer token or client certificate and do not verify the daemon's certificate (self-signed by
default), as ``curl -k`` would not: only point ``--configz`` at a daemon you trust with them.
"""

from __future__ import annotations

import ssl
import sys
import urllib.error
import urllib.request
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import orjson

from custom_scheduler.tools.plumbing import ToolError, deployed_scheduler_config, load_scheduler_config

#: Where the manifests and the chart run the daemon, and the Lease its leader election holds.
DAEMON_NAMESPACE = "kube-system"
DAEMON_LEASE = "custom-scheduler"
DAEMON_SELECTOR = "app.kubernetes.io/name=custom-scheduler"
#: kube-scheduler's secure port, which the manifests keep.
DEFAULT_PORT = 10259


@dataclass(frozen=True, slots=True)
class ConfigSource:
    """The configuration chosen and how the report names where it came from."""

    config: Any  # SchedulerConfig
    description: str


# -- finding the daemon (pure) --------------------------------------------------------------------------


def _ready(pod: Mapping[str, Any]) -> bool:
    status = pod.get("status") or {}
    if status.get("phase") != "Running" or (pod.get("metadata") or {}).get("deletionTimestamp"):
        return False
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in status.get("conditions") or ())


def daemon_pod(lease: Mapping[str, Any] | None, pods: Sequence[Mapping[str, Any]]) -> tuple[Mapping[str, Any], str]:
    """The pod whose /configz tells what the scheduling daemon runs, and why that one: the Lease
    holder (only the leader schedules), else the first ready pod by name (without leader
    election every replica schedules with the same config). ToolError when there is none."""
    holder = str(((lease or {}).get("spec") or {}).get("holderIdentity") or "")
    running = sorted((p for p in pods if _ready(p)), key=lambda p: str(p["metadata"]["name"]))
    if holder:
        host = holder.rsplit("_", 1)[0]
        for p in running:
            if p["metadata"]["name"] == host:
                return p, "the leader"
    if running:
        return running[0], "a ready replica" + (f" (Lease holder {holder!r} is not among them)" if holder else "")
    raise ToolError(f"no ready daemon pod ({DAEMON_SELECTOR} in {DAEMON_NAMESPACE})")


def https_port(pod: Mapping[str, Any]) -> int:
    """The daemon's secure port from the pod spec: a container port named ``https*`` (the
    manifests name it ``https-metrics``), else 10259."""
    for c in (pod.get("spec") or {}).get("containers") or ():
        for port in c.get("ports") or ():
            if str(port.get("name") or "").startswith("https") and port.get("containerPort"):
                return int(port["containerPort"])
    return DEFAULT_PORT


def proxy_path(namespace: str, name: str, port: int) -> str:
    """The API server's pod-proxy path to ``/configz`` over HTTPS on ``port``."""
    return f"/api/v1/namespaces/{namespace}/pods/https:{name}:{port}/proxy/configz"


def componentconfig(body: Any, where: str) -> dict[str, Any]:
    """The ``componentconfig`` object of a /configz answer (``{"componentconfig": {...}}``)."""
    doc = orjson.loads(body) if isinstance(body, (bytes, str)) else body
    cc = doc.get("componentconfig") if isinstance(doc, Mapping) else None
    if not isinstance(cc, dict):
        raise ToolError(f"{where} answered without a componentconfig object")
    return cc


# -- reading it ---------------------------------------------------------------------------------------


def discover(client: Any) -> tuple[Mapping[str, Any], str]:
    """The daemon's pod (the Lease holder, else a ready replica) and why that one."""
    from custom_scheduler.kube import api_errors

    try:
        lease = client.get(f"/apis/coordination.k8s.io/v1/namespaces/{DAEMON_NAMESPACE}/leases/{DAEMON_LEASE}")
    except api_errors.ApiError:
        lease = None  # no leader election, or no RBAC on Leases: any ready replica will do
    pods = client.get(f"/api/v1/namespaces/{DAEMON_NAMESPACE}/pods", {"labelSelector": DAEMON_SELECTOR})
    return daemon_pod(lease, pods.get("items") or [])


def configz_of_pod(client: Any, pod: Mapping[str, Any], kubeconfig: str) -> tuple[dict[str, Any], str]:
    """The componentconfig of the daemon's ``pod`` and the way it was reached: its pod IP
    directly when this machine reaches the pod network (a node, a pod), with the kubeconfig's
    credentials; else the API server's pod proxy. The proxy authenticates the caller and then
    drops the credentials (upstream's authentication filter deletes the Authorization header),
    so a daemon that serves /configz only to authenticated callers, as ours does, answers it 401:
    the error then says how to get through (a port-forward and ``--configz``)."""
    from custom_scheduler.kube import api_errors

    name, port = pod["metadata"]["name"], https_port(pod)
    ip = str((pod.get("status") or {}).get("podIP") or "")
    tried = ""
    if ip:
        host = f"[{ip}]" if ":" in ip else ip
        try:
            return configz_direct(f"https://{host}:{port}/configz", kubeconfig, timeout=3), f"pod IP {ip}"
        except (ToolError, OSError) as e:
            tried = f"pod IP {ip}: {_one_line(e)}; "
    try:
        raw = client.request_raw("GET", proxy_path(DAEMON_NAMESPACE, name, port))
    except api_errors.ApiError as e:
        hint = " (the API server's proxy forwards no credentials)" if e.status == 401 else ""
        raise ToolError(
            f"{tried}pod proxy: {_one_line(e)}{hint}; port-forward to pod {name} and pass "
            f"--configz https://127.0.0.1:{port}/configz"
        ) from None
    return componentconfig(raw, f"pod {name}"), "the API server's pod proxy"


def configz_direct(url: str, kubeconfig: str, *, timeout: float = 10) -> dict[str, Any]:
    """GET ``url`` with the kubeconfig's credentials (bearer token or client certificate)."""
    from custom_scheduler.kube.client import load_configuration

    cfg = load_configuration(kubeconfig)
    ctx = ssl.create_default_context()
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE  # the daemon's certificate is self-signed unless configured
    if getattr(cfg, "cert_file", None) and getattr(cfg, "key_file", None):
        ctx.load_cert_chain(cfg.cert_file, cfg.key_file)
    headers = {"Accept": "application/json"}
    token = (cfg.auth_settings().get("BearerToken") or {}).get("value")
    if token:
        headers["Authorization"] = str(token)
    req = urllib.request.Request(url, headers=headers)
    try:
        with urllib.request.urlopen(req, timeout=timeout, context=ctx if url.startswith("https:") else None) as resp:
            return componentconfig(resp.read(), url)
    except urllib.error.HTTPError as e:
        with e:
            raise ToolError(f"{url}: HTTP {e.code} {e.read()[:200].decode(errors='replace')}") from None


def _parse(cc: Mapping[str, Any], where: str, registry: Any) -> Any:
    from custom_scheduler import config
    from custom_scheduler.errors import ConfigError

    try:
        return config.load_config(orjson.dumps(cc).decode(), registry)
    except ConfigError as e:
        raise ToolError(f"{where} holds a configuration this version cannot load: {e.errors[0]}") from None


def running_config(client: Any, registry: Any, *, url: str | None, kubeconfig: str) -> ConfigSource:
    """The daemon's configuration from its /configz (``url``, else found through the API server).
    Raises ToolError, KubeError or OSError when it cannot be read."""
    if url:
        return ConfigSource(_parse(configz_direct(url, kubeconfig), url, registry), f"/configz at {url}")
    pod, why = discover(client)
    cc, how = configz_of_pod(client, pod, kubeconfig)
    where = f"/configz of {DAEMON_NAMESPACE}/{pod['metadata']['name']} ({why}, via {how})"
    return ConfigSource(_parse(cc, where, registry), where)


def choose_config(
    registry: Any,
    *,
    path: str | None,
    client: Any = None,
    configz: str | None = None,
    config_map: str = "",
    kubeconfig: str = "",
) -> ConfigSource:
    """The configuration of a live (``client``) or offline explain, in the order of this module's
    docstring. Only a bad ``--config`` file or an invalid ConfigMap raises."""
    if path is not None:
        return ConfigSource(load_scheduler_config(path, registry), f"--config {path}")
    if client is None:
        return ConfigSource(load_scheduler_config(None, registry), "the default profile (offline, no --config)")
    from custom_scheduler.kube import api_errors

    try:
        return running_config(client, registry, url=configz, kubeconfig=kubeconfig)
    except (ToolError, api_errors.KubeError, OSError, ValueError) as e:
        print(f"custom-scheduler explain: note: the daemon's /configz was not read ({_one_line(e)})", file=sys.stderr)
    if config_map and (deployed := deployed_scheduler_config(client, config_map, registry)) is not None:
        return ConfigSource(deployed, f"ConfigMap {config_map}")
    return ConfigSource(
        load_scheduler_config(None, registry),
        "the default profile (no /configz, no ConfigMap" + (f" {config_map})" if config_map else ")"),
    )


def _one_line(e: BaseException) -> str:
    text = " ".join(str(e).split())
    return text[:300] or type(e).__name__
