"""Node usage for load-aware scheduling: a pluggable source, refreshed off the scheduling thread.

The NodeLoad plugin scores nodes from real usage, but a Score plugin must not do I/O: it reads a
:class:`MetricsSource`, an in-memory view that something else keeps fresh. Two sources ship:

- :class:`MetricsServerSource`: ``metrics.k8s.io/v1beta1`` NodeMetrics, what metrics-server serves.
  A background thread LISTs ``/apis/metrics.k8s.io/v1beta1/nodes`` once per refresh interval (never
  per pod) and swaps the parsed result in whole. A failed LIST is logged and the previous samples are
  kept; they age until the plugin treats them as stale.
- :class:`StaticSource`: samples set by hand, for tests, ``simulate`` and what-if runs.

Anything with a ``get(node_name) -> NodeUsage | None`` method is a source (e.g. one that reads
Prometheus).

**Sources, by name.** The plugin is built by the framework from config and cannot be handed
objects, so it looks its source up by name (``metricsSource`` in its args, default ``"default"``)
at scoring time, through its Handle, in the :class:`Sources` the composition root owns (one per
daemon, shared by its profiles; no process-wide state)::

    sources = loadmetrics.Sources()
    sources.install(source)                # what the daemon does at start-up
    handle.metrics_source("default")       # what NodeLoad reads; None -> neutral scores

:func:`custom_scheduler.plugins.load_aware.metrics_source_for` builds, installs and returns a
:class:`MetricsServerSource` when a profile enables NodeLoad and nothing is installed under its
name yet; the daemon calls ``start()`` on it when it starts and ``stop()`` when it stops. A source
installed before the daemon starts (a test's :class:`StaticSource`) is left in place.

Sample times (``NodeUsage.timestamp``) are the server's wall-clock times, in epoch seconds.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

import structlog

from custom_scheduler.api import quantity
from custom_scheduler.api.model import parse_time
from custom_scheduler.config import durations
from custom_scheduler.kube import api_errors as kerrors

log = structlog.get_logger("custom_scheduler.framework.loadmetrics")

DEFAULT_SOURCE = "default"
NODE_METRICS_PATH = "/apis/metrics.k8s.io/v1beta1/nodes"
DEFAULT_REFRESH_INTERVAL = 30.0

Clock = Callable[[], float]


@dataclass(frozen=True, slots=True)
class NodeUsage:
    """One node's measured usage."""

    name: str
    milli_cpu: int
    """CPU in use, milli-cores."""
    memory: int
    """Memory in use (working set), bytes."""
    timestamp: float
    """When the sample was taken (the end of its window), epoch seconds."""
    window: float = 0.0
    """The interval the sample averages over, seconds."""


@runtime_checkable
class MetricsSource(Protocol):
    """What NodeLoad reads. Must be cheap and never block: it is called for every scored node."""

    def get(self, node_name: str) -> NodeUsage | None:
        """The latest sample for ``node_name``; None when the source has none."""
        ...


# --- sources by name ------------------------------------------------------------------------------


class Sources:
    """Name → :class:`MetricsSource`: what NodeLoad's ``metricsSource`` names. Thread-safe.

    Owned by the composition root (the daemon's :class:`~custom_scheduler.server.app.App`) and lent to
    plugins through :meth:`custom_scheduler.framework.interface.Handle.metrics_source`.
    """

    def __init__(self) -> None:
        self._sources: dict[str, MetricsSource] = {}
        self._lock = threading.Lock()

    def install(self, source: MetricsSource, name: str = DEFAULT_SOURCE) -> None:
        """Make ``source`` the source called ``name`` (replacing any previous one)."""
        with self._lock:
            self._sources[name] = source

    def uninstall(self, name: str = DEFAULT_SOURCE, source: MetricsSource | None = None) -> None:
        """Remove the source called ``name`` (only if it is ``source``, when given)."""
        with self._lock:
            if source is None or self._sources.get(name) is source:
                self._sources.pop(name, None)

    def get(self, name: str = DEFAULT_SOURCE) -> MetricsSource | None:
        """The installed source called ``name``, or None."""
        return self._sources.get(name)


# --- static --------------------------------------------------------------------------------------


class StaticSource:
    """Samples set by hand (tests, simulate). Thread-safe."""

    def __init__(self, usages: Iterable[NodeUsage] = (), *, clock: Clock = time.time) -> None:
        self._clock = clock
        self._usages: dict[str, NodeUsage] = {u.name: u for u in usages}
        self._lock = threading.Lock()

    def set(
        self,
        name: str,
        *,
        cpu: str | int,
        memory: str | int,
        timestamp: float | None = None,
        window: float = 0.0,
    ) -> NodeUsage:
        """Record a sample; ``cpu``/``memory`` are quantities (``"1500m"``, ``"2Gi"``) or plain
        numbers (cores, bytes); ``timestamp`` defaults to now."""
        usage = NodeUsage(
            name,
            quantity.to_milli(cpu),
            quantity.to_int(memory),
            self._clock() if timestamp is None else timestamp,
            window,
        )
        with self._lock:
            self._usages[name] = usage
        return usage

    def remove(self, name: str) -> None:
        with self._lock:
            self._usages.pop(name, None)

    def get(self, node_name: str) -> NodeUsage | None:
        return self._usages.get(node_name)


# --- metrics-server ------------------------------------------------------------------------------


class Getter(Protocol):
    """Anything with ``get(path)`` returning parsed JSON (a KubeClient, a :class:`URLGetter`)."""

    def get(self, path: str, query: Mapping[str, Any] | None = None, **kw: Any) -> Any: ...


def parse_node_metrics_list(doc: Any, *, fetched_at: float) -> dict[str, NodeUsage]:
    """A ``NodeMetricsList`` (JSON) → node name → usage. Malformed items are skipped (and logged);
    an item without a parseable timestamp is stamped with ``fetched_at``.

    Raises:
        ValueError: ``doc`` is not a NodeMetricsList at all.
    """
    if not isinstance(doc, Mapping) or not isinstance(doc.get("items", []), list):
        raise ValueError("not a NodeMetricsList")
    out: dict[str, NodeUsage] = {}
    for item in doc.get("items") or ():
        try:
            name = str(item["metadata"]["name"])
            usage = item.get("usage") or {}
            cpu = quantity.to_milli(usage["cpu"])
            memory = quantity.to_int(usage["memory"])
            ts = parse_time(item.get("timestamp")) or fetched_at
            window = durations.parse_duration(item["window"]) if item.get("window") else 0.0
        except (KeyError, TypeError, AttributeError, ValueError) as e:
            log.warning("node_metrics_item_invalid", error=f"{type(e).__name__}: {e}"[:200])
            continue
        out[name] = NodeUsage(name, cpu, memory, ts, window)
    return out


class MetricsServerSource:
    """NodeMetrics from ``metrics.k8s.io/v1beta1``, one LIST per ``interval`` on a background thread.

    ``client`` is anything with ``get(path)`` returning parsed JSON (a
    :class:`~custom_scheduler.kube.client.KubeClient`). Listeners added with :meth:`add_listener` run
    on the refresh thread after each successful refresh (the daemon can requeue pods that a load
    threshold rejected); they must be quick, and their exceptions are logged and ignored.
    """

    def __init__(
        self,
        client: Getter,
        *,
        interval: float = DEFAULT_REFRESH_INTERVAL,
        path: str = NODE_METRICS_PATH,
        clock: Clock = time.time,
        name: str = DEFAULT_SOURCE,
    ) -> None:
        if interval <= 0:
            raise ValueError("interval must be > 0")
        self.client = client
        self.interval = interval
        self.path = path
        self.name = name
        self._clock = clock
        self._usages: dict[str, NodeUsage] = {}
        self._listeners: list[Callable[[], object]] = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.last_refresh: float | None = None
        """Local wall-clock time of the last successful refresh."""
        self.last_error: str = ""
        self.refreshes = 0
        self.failures = 0

    def get(self, node_name: str) -> NodeUsage | None:
        return self._usages.get(node_name)

    def nodes(self) -> dict[str, NodeUsage]:
        """A copy of every sample held."""
        return dict(self._usages)

    def add_listener(self, callback: Callable[[], object]) -> None:
        self._listeners.append(callback)

    def refresh(self) -> bool:
        """One LIST; on success swap the samples in and notify listeners. Never raises."""
        try:
            doc = self.client.get(self.path)
            usages = parse_node_metrics_list(doc, fetched_at=self._clock())
        except (kerrors.KubeError, ValueError, OSError) as e:
            self.failures += 1
            msg = f"{type(e).__name__}: {e}"[:300]
            if msg != self.last_error:  # one line per distinct failure, not one per interval
                log.warning("node_metrics_refresh_failed", path=self.path, error=msg, kept=len(self._usages))
            self.last_error = msg
            return False
        if self.last_error:
            log.info("node_metrics_refresh_recovered", nodes=len(usages))
        self.last_error = ""
        self._usages = usages
        self.last_refresh = self._clock()
        self.refreshes += 1
        for cb in list(self._listeners):
            try:
                cb()
            except Exception as e:  # a listener's bug must not stop the refresher
                log.warning("node_metrics_listener_failed", error=f"{type(e).__name__}: {e}"[:200])
        return True

    def _run(self) -> None:
        while not self._stop.is_set():
            self.refresh()
            self._stop.wait(self.interval)

    def start(self) -> MetricsServerSource:
        """Start the refresh thread (the first LIST happens immediately). Idempotent."""
        if self._thread is None or not self._thread.is_alive():
            self._stop.clear()
            self._thread = threading.Thread(target=self._run, name="node-metrics", daemon=True)
            self._thread.start()
            log.info("node_metrics_started", path=self.path, interval=self.interval)
        return self

    def stop(self, timeout: float = 5.0) -> None:
        """Stop the thread (the owner of the :class:`Sources` it is installed in uninstalls it)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)
            self._thread = None


class URLGetter:
    """``get(path)`` over plain HTTP(S) against a base URL: NodeLoad's ``metricsURL``."""

    def __init__(self, base_url: str, timeout: float = 5.0) -> None:
        self.base_url = base_url.rstrip("/")
        self.timeout = timeout

    def get(self, path: str, query: Mapping[str, Any] | None = None, **kw: Any) -> Any:
        import json
        import urllib.request

        with urllib.request.urlopen(self.base_url + path, timeout=self.timeout) as resp:
            return json.loads(resp.read())
