"""The scheduler's configuration as frozen dataclasses: what every other package reads.

These are the *effective* values: defaults filled, durations in float seconds, and each profile's
plugins already merged with the default profile into one ordered list per extension point, so a
consumer never re-implements kube-scheduler's ``enabled``/``disabled``/``multiPoint`` rules. Field
names are the snake_case forms of ``KubeSchedulerConfiguration``'s camelCase YAML keys
(``percentageOfNodesToScore`` → ``percentage_of_nodes_to_score``).

Only :mod:`custom_scheduler.config.loading` constructs these from YAML, and only after validation,
so holding a :class:`SchedulerConfig` means holding a valid one.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Protocol

__all__ = [
    "API_VERSION",
    "DEFAULT_EXTENDER_TIMEOUT",
    "DEFAULT_SCHEDULER_NAME",
    "EXTENSION_POINTS",
    "KIND",
    "ClientConnectionConfig",
    "Extender",
    "ExtenderTLS",
    "LeaderElectionConfig",
    "ManagedResource",
    "PluginCatalog",
    "PluginInfo",
    "PluginRef",
    "Profile",
    "SchedulerConfig",
]

#: The only ``apiVersion`` accepted (kube-scheduler's GA config API, v1.25+).
API_VERSION = "kubescheduler.config.k8s.io/v1"
#: The only ``kind`` accepted.
KIND = "KubeSchedulerConfiguration"
#: The name a lone profile without ``schedulerName`` gets. kube-scheduler's is ``default-scheduler``;
#: ours differs so that running both never makes them fight over the same pods.
DEFAULT_SCHEDULER_NAME = "custom-scheduler"
#: Extension points in the order the framework runs them (and the order the config lists them).
#: The same names as ``framework.registry.EXTENSION_POINT_METHODS`` (a test keeps them equal);
#: spelled out so this module, which the framework itself reads, imports nothing of it.
EXTENSION_POINTS: tuple[str, ...] = (
    "preEnqueue",
    "queueSort",
    "preFilter",
    "filter",
    "postFilter",
    "preScore",
    "score",
    "reserve",
    "permit",
    "preBind",
    "bind",
    "postBind",
)


class PluginInfo(Protocol):
    """What loading a config needs to know of one plugin, and no more: its name, the extension
    points it implements (to expand ``multiPoint`` and reject a plugin enabled at a point it lacks)
    and its ``pluginConfig`` args parser. The runtime's
    :class:`~custom_scheduler.framework.registry.PluginSpec` is one, so config knows nothing of the
    framework."""

    @property
    def name(self) -> str: ...

    @property
    def extension_points(self) -> frozenset[str]: ...

    @property
    def parse_args(self) -> Callable[[Mapping[str, Any] | None, str], Any]: ...


#: Plugin name → :class:`PluginInfo`: the capabilities map a config is loaded against (a
#: :class:`~custom_scheduler.framework.registry.Registry` is one).
PluginCatalog = Mapping[str, PluginInfo]


def _frozen_map(m: Mapping[str, Any]) -> Mapping[str, Any]:
    return MappingProxyType(dict(m))


@dataclass(frozen=True, slots=True)
class PluginRef:
    """One plugin enabled at one extension point."""

    name: str
    """The plugin's registry name (``NodeResourcesFit``)."""
    weight: int = 1
    """Score weight (an int32, as kube-scheduler's), applied to the plugin's normalised 0-100
    score. Only the ``score`` point uses it; at every other point it is 1. The ``score.enabled``
    entry's weight when there is one, else the multiPoint entry's (the default list's weights for
    default plugins); unset or 0 means 1. See :mod:`custom_scheduler.config.merging`."""


@dataclass(frozen=True, slots=True)
class Profile:
    """One scheduling profile: a ``schedulerName`` and the plugins that schedule its pods."""

    scheduler_name: str
    """Pods whose ``spec.schedulerName`` equals this are scheduled with this profile. Defaults to
    ``custom-scheduler`` only when the config has a single profile without a name."""
    plugins: Mapping[str, tuple[PluginRef, ...]]
    """Effective, ordered plugins per extension point (every key of :data:`EXTENSION_POINTS` is
    present, possibly with an empty tuple), after merging the configuration with the default
    profile. The framework runs them in this order."""
    plugin_args: Mapping[str, Any] = field(default_factory=dict)
    """Plugin name → its parsed Args object (whatever ``PluginSpec.parse_args`` returned; None for
    plugins without args). Present for every plugin enabled anywhere in the profile, defaulted when
    the config gave no ``pluginConfig`` for it, and for any other plugin given a ``pluginConfig``."""
    percentage_of_nodes_to_score: int | None = None
    """Per-profile override of :attr:`SchedulerConfig.percentage_of_nodes_to_score`; None means
    "use the global value"."""

    def __post_init__(self) -> None:
        plugins = {p: tuple(self.plugins.get(p, ())) for p in EXTENSION_POINTS}
        object.__setattr__(self, "plugins", _frozen_map(plugins))
        object.__setattr__(self, "plugin_args", _frozen_map(self.plugin_args))

    def enabled(self, point: str) -> tuple[PluginRef, ...]:
        """The plugins enabled at ``point`` (a key of :data:`EXTENSION_POINTS`), in order."""
        return self.plugins[point]

    def plugin_names(self) -> tuple[str, ...]:
        """Every plugin enabled at any point, each once, in first-appearance order."""
        return tuple(dict.fromkeys(ref.name for refs in self.plugins.values() for ref in refs))

    def score_weights(self) -> dict[str, int]:
        """Score plugin name → weight."""
        return {ref.name: ref.weight for ref in self.plugins["score"]}


@dataclass(frozen=True, slots=True)
class LeaderElectionConfig:
    """``leaderElection``: component-base's leader election settings, with Lease locks only."""

    leader_elect: bool = True
    """Whether to run leader election at all; off means this replica always schedules (only safe
    with a single replica)."""
    lease_duration: float = 15.0
    """Seconds a non-leader waits after the last observed renewal before trying to take over
    (``leaseDuration``, a Go duration in YAML). Must exceed :attr:`renew_deadline`."""
    renew_deadline: float = 10.0
    """Seconds the leader keeps retrying a failed renewal before giving up leadership and exiting
    (``renewDeadline``). Must exceed 1.2 x :attr:`retry_period`."""
    retry_period: float = 2.0
    """Seconds between acquire/renew attempts (``retryPeriod``)."""
    resource_lock: str = "leases"
    """Lock kind; only ``leases`` (coordination.k8s.io/v1) is implemented."""
    resource_name: str = "custom-scheduler"
    """Lease name. kube-scheduler uses ``kube-scheduler``; ours differs so the two never share one
    lock (a shared lock would let only one of them run)."""
    resource_namespace: str = "kube-system"
    """Namespace of the Lease."""


@dataclass(frozen=True, slots=True)
class ClientConnectionConfig:
    """``clientConnection``: how to reach the API server."""

    kubeconfig: str = ""
    """Path to a kubeconfig file; empty means in-cluster service-account credentials."""
    qps: float = 50.0
    """Client-side request rate limit (requests per second). 0 or unset means 50, kube-scheduler's
    own default (not client-go's 5)."""
    burst: int = 100
    """Short bursts allowed above :attr:`qps`. 0 or unset means 100."""
    content_type: str = "application/vnd.kubernetes.protobuf"
    """Accepted for compatibility and ignored: this scheduler always speaks JSON."""
    accept_content_types: str = ""
    """Accepted for compatibility and ignored, like :attr:`content_type`."""


#: Seconds an extender call may take when ``httpTimeout`` is unset or zero (upstream's
#: ``DefaultExtenderTimeout`` in ``pkg/scheduler/extender.go``).
DEFAULT_EXTENDER_TIMEOUT = 5.0


@dataclass(frozen=True, slots=True)
class ExtenderTLS:
    """``extenders[].tlsConfig``: client-go's TLS settings for one extender. The ``*_data`` fields
    are PEM bytes (base64 in YAML, as ``[]byte`` is in JSON) and win over the ``*_file`` ones."""

    insecure: bool = False
    server_name: str = ""
    cert_file: str = ""
    key_file: str = ""
    ca_file: str = ""
    cert_data: bytes = b""
    key_data: bytes = b""
    ca_data: bytes = b""


@dataclass(frozen=True, slots=True)
class ManagedResource:
    """``extenders[].managedResources[]``: an extended resource an extender manages."""

    name: str
    ignored_by_scheduler: bool = False
    """NodeResourcesFit does not check this resource (the extender does)."""


@dataclass(frozen=True, slots=True)
class Extender:
    """``extenders[]``: an HTTP scheduler extender. An empty verb means the extender does not offer
    that call. Shared by every profile, as upstream's are."""

    url_prefix: str
    filter_verb: str = ""
    preempt_verb: str = ""
    prioritize_verb: str = ""
    weight: int = 0
    """Multiplies the extender's 0-10 priorities (scaled to 0-100); must be > 0 with a prioritizeVerb."""
    bind_verb: str = ""
    enable_https: bool = False
    tls_config: ExtenderTLS | None = None
    http_timeout: float = DEFAULT_EXTENDER_TIMEOUT
    """Seconds per call; an unset or zero ``httpTimeout`` is :data:`DEFAULT_EXTENDER_TIMEOUT`."""
    node_cache_capable: bool = False
    """Send node names only (the extender caches nodes), not the full NodeList."""
    managed_resources: tuple[ManagedResource, ...] = ()
    """When not empty, only pods requesting one of these resources are sent to the extender."""
    ignorable: bool = False
    """An error or an unreachable extender does not fail the pod's scheduling."""


@dataclass(frozen=True, slots=True)
class SchedulerConfig:
    """The whole configuration (a ``KubeSchedulerConfiguration`` document), defaults filled."""

    profiles: tuple[Profile, ...]
    """Scheduling profiles, one per ``schedulerName``; at least one. All share the queue, hence
    the same queueSort plugin."""
    parallelism: int = 16
    """Workers for filter/score/preemption in kube-scheduler. Must be > 0."""
    percentage_of_nodes_to_score: int = 0
    """Percentage of feasible nodes to find before scoring (0-100). 0 (also what an unset or null
    value becomes) means adaptive: 50% minus 1% per 125 nodes, at least 5%; clusters under 100
    nodes are always searched fully."""
    pod_initial_backoff_seconds: int = 1
    """Backoff after a pod's first failed attempt, doubled per attempt. Must be > 0."""
    pod_max_backoff_seconds: int = 10
    """Backoff cap. Must be ≥ :attr:`pod_initial_backoff_seconds`."""
    leader_election: LeaderElectionConfig = field(default_factory=LeaderElectionConfig)
    """Leader election settings."""
    client_connection: ClientConnectionConfig = field(default_factory=ClientConnectionConfig)
    """API server connection settings."""
    healthz_bind_address: str = "0.0.0.0:10259"
    """``host:port`` serving ``/healthz``, ``/readyz`` and ``/metrics`` (our extension: v1
    kube-scheduler takes this from ``--bind-address``/``--secure-port`` instead). Port 10259 is
    kube-scheduler's secure port, so probes copied from its manifests keep working."""
    enable_profiling: bool = True
    """Accepted for compatibility (kube-scheduler's ``/debug/pprof``); no effect here."""
    enable_contention_profiling: bool = True
    """Accepted for compatibility; no effect here."""
    delay_cache_until_active: bool = False
    """When true, a non-leader does not start its informers until it becomes leader (less memory
    on standbys, slower failover). When false, standbys keep warm caches."""
    extenders: tuple[Extender, ...] = ()
    """HTTP scheduler extenders, in configured order (every profile uses them)."""

    def profile(self, scheduler_name: str) -> Profile | None:
        """The profile for ``scheduler_name``, or None."""
        return next((p for p in self.profiles if p.scheduler_name == scheduler_name), None)
