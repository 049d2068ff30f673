"""The in-tree plugins: kube-scheduler's default plugins, reimplemented with the same semantics.

One module per plugin, each exporting ``NAME``, its ``ERR_REASON_*`` constants, the plugin class, its
Args type and ``parse_args`` when it takes args, pure helpers, and ``SPEC`` (a
:class:`~custom_scheduler.framework.registry.PluginSpec`). :data:`IN_TREE_SPECS` is the one list of
them, and :func:`in_tree_registry` the one registry of every in-tree plugin (kube-scheduler's and the
scenario plugins); out-of-tree plugins come from entry points and are merged on top by
:func:`custom_scheduler.plugins.builtin.full_registry`.

Plugins are mutually independent except for two deliberate shared modules: :mod:`.resource_allocation`
(the resource-vector scoring NodeResourcesFit and BalancedAllocation both use, as upstream) and
:mod:`.helpers` (Go-compatible integer arithmetic and score normalisation). Other plugins may import
pure helpers such as :func:`.node_affinity.required_node_affinity_matches`.
"""

from __future__ import annotations

from custom_scheduler.framework.registry import PluginSpec, Registry
from custom_scheduler.plugins import (
    accelerators,
    default_binder,
    default_preemption,
    dynamic_resources,
    gang_scheduling,
    image_locality,
    inter_pod_affinity,
    load_aware,
    node_affinity,
    node_declared_features,
    node_name,
    node_pools,
    node_ports,
    node_resources_balanced_allocation,
    node_resources_fit,
    node_unschedulable,
    node_volume_limits,
    pod_topology_spread,
    priority_sort,
    scheduling_gates,
    taint_toleration,
    volume_binding,
    volume_restrictions,
    volume_zone,
)

#: Every in-tree plugin spec, in registration order (the order ``full_registry`` has always had):
#: kube-scheduler's plugins, then the scenario plugins (GPU isolation, dedicated pools, load-aware;
#: not kube-scheduler defaults, registered so configs can enable them, see docs/scenarios.md). The
#: order at each extension point comes from the config (``DEFAULT_MULTI_POINT``), not from here.
IN_TREE_SPECS: list[PluginSpec] = [
    scheduling_gates.SPEC,
    priority_sort.SPEC,
    node_unschedulable.SPEC,
    node_name.SPEC,
    taint_toleration.SPEC,
    node_affinity.SPEC,
    node_ports.SPEC,
    node_resources_fit.SPEC,
    volume_restrictions.SPEC,
    node_volume_limits.SPEC,
    volume_binding.SPEC,
    volume_zone.SPEC,
    dynamic_resources.SPEC,
    node_resources_balanced_allocation.SPEC,
    image_locality.SPEC,
    default_binder.SPEC,
    pod_topology_spread.SPEC,
    inter_pod_affinity.SPEC,
    default_preemption.SPEC,
    accelerators.SPEC,
    node_pools.SPEC,
    load_aware.SPEC,
    gang_scheduling.SPEC,
    node_declared_features.SPEC,
]


def in_tree_registry() -> Registry:
    """A fresh registry holding every in-tree plugin."""
    reg = Registry()
    for spec in IN_TREE_SPECS:
        reg.register(spec)
    return reg
