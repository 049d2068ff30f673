"""Default values and the default profile's plugins.

The default profile is kube-scheduler's (v1.28+) default ``multiPoint`` list restricted to plugins
this scheduler has: volume plugins (VolumeBinding, VolumeZone, NodeVolumeLimits, …) are not part of
it, and neither is SchedulingGates (we have no PreEnqueue point). The order is upstream's, because
multiPoint order becomes the per-extension-point order.

:func:`default_profile_plugins` keeps only names present in the registry it is given. That makes
the defaults grow as plugins land (a registry without ``ImageLocality`` simply has no ImageLocality
scoring by default) and lets tests use a small fake registry. It also means the effective default
profile depends on the registry, which is why ``check-config`` prints the effective config.

Scalar defaults (parallelism 16, backoff 1s/10s, leases 15s/10s/2s, qps 50, …) live on the
dataclasses in :mod:`custom_scheduler.config.types`, so each default sits next to its docstring.
"""

from __future__ import annotations

from collections.abc import Mapping

from custom_scheduler.config import types
from custom_scheduler.framework.registry import PluginSpec

__all__ = [
    "DEFAULT_MULTI_POINT",
    "UPSTREAM_PLUGIN_NAMES",
    "default_profile_plugins",
    "default_weight",
]

#: kube-scheduler's default multiPoint list (name, score weight or None), minus the plugins this
#: scheduler does not implement. Order matters: it is the order at every extension point.
DEFAULT_MULTI_POINT: tuple[tuple[str, int | None], ...] = (
    ("PrioritySort", None),
    ("NodeUnschedulable", None),
    ("NodeName", None),
    ("TaintToleration", 3),
    ("NodeAffinity", 2),
    ("NodePorts", None),
    ("NodeResourcesFit", 1),
    ("PodTopologySpread", 2),
    ("InterPodAffinity", 2),
    ("DefaultPreemption", None),
    ("NodeResourcesBalancedAllocation", 1),
    ("ImageLocality", 1),
    ("DefaultBinder", None),
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
    }
)

_DEFAULT_WEIGHTS: dict[str, int] = {name: w for name, w in DEFAULT_MULTI_POINT if w is not None}


def default_profile_plugins(registry: Mapping[str, PluginSpec]) -> tuple[types.PluginRef, ...]:
    """The default profile's multiPoint list, limited to plugins in ``registry``.

    Weights are the upstream default score weights (1 for plugins that do not score; the weight
    only matters at the score point).
    """
    return tuple(
        types.PluginRef(name, weight if weight is not None else 1)
        for name, weight in DEFAULT_MULTI_POINT
        if name in registry
    )


def default_weight(name: str) -> int | None:
    """The default-profile score weight of ``name``, or None if it is not a default score plugin."""
    return _DEFAULT_WEIGHTS.get(name)
