"""The in-tree plugins: kube-scheduler's default plugins, reimplemented with the same semantics.

One module per plugin, each exporting ``NAME``, its ``ERR_REASON_*`` constants, the plugin class, its
Args type and ``parse_args`` when it takes args, pure helpers, and ``SPEC`` (a
:class:`~custom_scheduler.framework.registry.PluginSpec`). :func:`in_tree_registry` collects the specs;
out-of-tree plugins come from entry points and are merged on top by the caller.

Plugins are mutually independent except for two deliberate shared modules: :mod:`.resource_allocation`
(the resource-vector scoring NodeResourcesFit and BalancedAllocation both use, as upstream) and
:mod:`.helpers` (Go-compatible integer arithmetic and score normalisation). Other plugins may import
pure helpers such as :func:`.node_affinity.required_node_affinity_matches`.
"""

from __future__ import annotations

from custom_scheduler.framework.registry import PluginSpec, Registry
from custom_scheduler.plugins import (
    image_locality,
    node_affinity,
    node_name,
    node_ports,
    node_resources_balanced_allocation,
    node_resources_fit,
    node_unschedulable,
    priority_sort,
    taint_toleration,
)

#: Every in-tree plugin spec, in kube-scheduler's default MultiPoint order.
IN_TREE_SPECS: list[PluginSpec] = [
    priority_sort.SPEC,
    node_unschedulable.SPEC,
    node_name.SPEC,
    taint_toleration.SPEC,
    node_affinity.SPEC,
    node_ports.SPEC,
    node_resources_fit.SPEC,
    node_resources_balanced_allocation.SPEC,
    image_locality.SPEC,
]


def in_tree_registry() -> Registry:
    """A fresh registry holding every in-tree plugin."""
    reg = Registry()
    for spec in IN_TREE_SPECS:
        reg.register(spec)
    return reg
