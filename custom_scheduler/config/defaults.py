"""Default values and the default profile's plugins.

The default profile is kube-scheduler's (v1.28+) default ``multiPoint`` list restricted to plugins
this scheduler has: the volume plugins (VolumeRestrictions, NodeVolumeLimits, VolumeBinding,
VolumeZone), DynamicResources and NodeDeclaredFeatures are in it. It starts, as upstream's does,
with SchedulingGates; the default PreEnqueue plugins are SchedulingGates and DynamicResources
(claims must exist). The order is upstream's, because multiPoint order becomes the
per-extension-point order.

Every plugin named here must be registered: a registry that lacks one makes loading a profile
that does not disable it (in ``multiPoint``) an error, and :func:`default_profile_plugins` raise,
rather than silently running a smaller default profile than the one written here.

Scalar defaults (parallelism 16, backoff 1s/10s, leases 15s/10s/2s, qps 50, …) live on the
dataclasses in :mod:`custom_scheduler.config.schema`, so each default sits next to its docstring.
"""

from __future__ import annotations

from collections.abc import Mapping

from custom_scheduler.config import schema
from custom_scheduler.errors import ConfigError

__all__ = [
    "DEFAULT_MULTI_POINT",
    "UPSTREAM_PLUGIN_NAMES",
    "default_profile_plugins",
]

#: kube-scheduler's default multiPoint list (name, score weight or None), minus the plugins this
#: scheduler does not implement. Order matters: it is the order at every extension point.
DEFAULT_MULTI_POINT: tuple[tuple[str, int | None], ...] = (
    ("SchedulingGates", None),
    ("PrioritySort", None),
    ("NodeName", None),
    ("NodeUnschedulable", None),
    ("TaintToleration", 3),
    ("NodeAffinity", 2),
    ("NodePorts", None),
    ("NodeResourcesFit", 1),
    ("VolumeRestrictions", None),
    ("NodeVolumeLimits", None),
    ("VolumeBinding", None),
    ("VolumeZone", None),
    ("PodTopologySpread", 2),
    ("InterPodAffinity", 2),
    # Upstream inserts it right before DefaultPreemption when DRA is enabled (the default since 1.34).
    ("DynamicResources", 2),
    ("DefaultPreemption", None),
    ("NodeResourcesBalancedAllocation", 1),
    ("ImageLocality", 1),
    ("DefaultBinder", None),
    # Appended after the list by upstream (applyFeatureGates) while its gate is on: GA and locked
    # on since 1.37.
    ("NodeDeclaredFeatures", None),
    # Appended by upstream with the GenericWorkload gate, the gate that makes a cluster serve
    # PodGroups; here always, acting only on pods whose PodGroup API the cluster serves.
    ("GangScheduling", None),
)

#: Every in-tree plugin name kube-scheduler's v1 config knows (defaults and non-defaults). Naming
#: one of these in a ``disabled`` list is accepted even when we do not have it, so a config written
#: for kube-scheduler (``disabled: [{name: VolumeBinding}]``) loads unchanged; enabling one we do
#: not have is still an error.
UPSTREAM_PLUGIN_NAMES: frozenset[str] = frozenset(
    {
        "SchedulingGates",
        "PrioritySort",
        "NodeUnschedulable",
        "NodeName",
        "TaintToleration",
        "NodeAffinity",
        "NodePorts",
        "NodeResourcesFit",
        "VolumeRestrictions",
        "EBSLimits",
        "GCEPDLimits",
        "NodeVolumeLimits",
        "AzureDiskLimits",
        "CinderLimits",
        "VolumeBinding",
        "VolumeZone",
        "PodTopologySpread",
        "InterPodAffinity",
        "DefaultPreemption",
        "NodeResourcesBalancedAllocation",
        "ImageLocality",
        "DefaultBinder",
        "DynamicResources",
        "NodeDeclaredFeatures",
        "GangScheduling",
    }
)


def default_profile_plugins(registry: Mapping[str, object]) -> tuple[schema.PluginRef, ...]:
    """The default profile's multiPoint list.

    Weights are the upstream default score weights (1 for plugins that do not score; the weight
    only matters at the score point).

    Raises:
        ConfigError: a default plugin is not in ``registry``.
    """
    missing = [name for name, _ in DEFAULT_MULTI_POINT if name not in registry]
    if missing:
        raise ConfigError(f"default plugins not registered: {', '.join(missing)}", "plugins.multiPoint")
    return tuple(schema.PluginRef(name, weight if weight is not None else 1) for name, weight in DEFAULT_MULTI_POINT)
