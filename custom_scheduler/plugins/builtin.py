"""The registry the daemon uses: every in-tree plugin, and out-of-tree entry points."""

from __future__ import annotations

from custom_scheduler.framework.registry import Registry, load_entry_points


def full_registry(*, out_of_tree: bool = True) -> Registry:
    """:func:`custom_scheduler.plugins.in_tree_registry`, plus the ``custom_scheduler.plugins`` entry
    points unless ``out_of_tree`` is false (an entry point reusing an in-tree name is refused)."""
    from custom_scheduler.plugins import in_tree_registry

    reg = in_tree_registry()
    if out_of_tree:
        reg = reg.merged(load_entry_points())
    return reg
