"""Plugin registry: name → factory and args parser; out-of-tree plugins via entry points.

Why a parser per plugin: the config is validated before anything starts, and each plugin knows its
own ``pluginConfig`` args. ``parse_args(raw, path)`` turns the raw mapping (or None when the config
gives no args, which means "all defaults") into the plugin's frozen Args object, raising
:class:`custom_scheduler.errors.ConfigError` with field paths below ``path``.

Out-of-tree plugins register through the ``custom_scheduler.plugins`` entry-point group; each entry
point names a :class:`PluginSpec` (or a zero-argument callable returning one).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from importlib import metadata
from typing import Any

from custom_scheduler.errors import ConfigError
from custom_scheduler.framework.interface import PluginFactory

ENTRY_POINT_GROUP = "custom_scheduler.plugins"

ArgsParser = Callable[[Mapping[str, Any] | None, str], Any]


def no_args(raw: Mapping[str, Any] | None, path: str) -> None:
    """The parser for plugins that take no args: any non-empty args are an error."""
    if raw:
        raise ConfigError(f"plugin takes no args, got {sorted(raw)}", path)


@dataclass(frozen=True, slots=True)
class PluginSpec:
    name: str
    factory: PluginFactory
    parse_args: ArgsParser = no_args
    pod_annotations: frozenset[str] = frozenset()
    """The pod annotations the plugin reads (a scenario plugin's knobs): a pod of a profile without
    the plugin that sets one gets an event saying it is ignored."""

    @property
    def extension_points(self) -> frozenset[str]:
        """The extension points this plugin implements (see :func:`extension_points`): what makes a
        spec a :class:`custom_scheduler.config.schema.PluginInfo`, so a :class:`Registry` is the
        name → capabilities map the config is loaded against."""
        return extension_points(self)


class Registry(dict[str, PluginSpec]):
    """Plugin name → spec. Duplicate names are refused."""

    def register(self, spec: PluginSpec) -> None:
        if spec.name in self:
            raise ValueError(f"plugin {spec.name!r} is already registered")
        self[spec.name] = spec

    def merged(self, other: Mapping[str, PluginSpec]) -> Registry:
        out = Registry(self)
        for spec in other.values():
            out.register(spec)
        return out


def load_entry_points(group: str = ENTRY_POINT_GROUP) -> Registry:
    """Collect out-of-tree plugins from installed distributions."""
    reg = Registry()
    for ep in metadata.entry_points(group=group):
        obj = ep.load()
        spec = obj if isinstance(obj, PluginSpec) else obj()
        if not isinstance(spec, PluginSpec):
            raise TypeError(f"entry point {ep.name!r} in {group} did not give a PluginSpec")
        reg.register(spec)
    return reg


#: Extension point name (as in the config's ``plugins`` section) → the method that implements it.
EXTENSION_POINT_METHODS: dict[str, str] = {
    "preEnqueue": "pre_enqueue",
    "queueSort": "less",
    "preFilter": "pre_filter",
    "filter": "filter",
    "postFilter": "post_filter",
    "preScore": "pre_score",
    "score": "score",
    "reserve": "reserve",
    "permit": "permit",
    "preBind": "pre_bind",
    "bind": "bind",
    "postBind": "post_bind",
}


def extension_points(spec: PluginSpec) -> frozenset[str]:
    """The extension points a plugin implements, read off its factory (normally the plugin class).

    Used to expand ``multiPoint`` and to reject a plugin enabled at a point it does not implement.
    """
    cls = spec.factory
    return frozenset(p for p, m in EXTENSION_POINT_METHODS.items() if callable(getattr(cls, m, None)))
