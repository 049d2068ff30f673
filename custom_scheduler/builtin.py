"""The registry the daemon uses: in-tree plugins, DefaultBinder, and out-of-tree entry points."""

from __future__ import annotations

from custom_scheduler.framework.registry import Registry, load_entry_points


def full_registry(*, out_of_tree: bool = True) -> Registry:
    from custom_scheduler.plugins import default_binder, in_tree_registry

    reg = in_tree_registry()
    if default_binder.NAME not in reg:
        reg.register(default_binder.SPEC)
    try:
        from custom_scheduler.plugins import default_preemption, inter_pod_affinity, pod_topology_spread

        for mod in (pod_topology_spread, inter_pod_affinity, default_preemption):
            spec = getattr(mod, "SPEC", None)
            if spec is not None and spec.name not in reg:
                reg.register(spec)
    except ImportError:  # pragma: no cover - all ship with the package
        pass
    # The scenario plugins (GPU isolation, dedicated pools, load-aware): not kube-scheduler defaults,
    # registered so configs can enable them (docs/scenarios.md).
    from custom_scheduler.plugins import accelerators, load_aware, node_pools

    for spec in (accelerators.SPEC, node_pools.SPEC, load_aware.SPEC):
        if spec.name not in reg:
            reg.register(spec)
    if out_of_tree:
        reg = reg.merged(load_entry_points())
    return reg
