"""Out-of-tree plugins come in through the ``custom_scheduler.plugins`` entry-point group."""

from __future__ import annotations

from importlib import metadata
from typing import Any, ClassVar

import pytest

from custom_scheduler.framework import registry
from custom_scheduler.framework.registry import PluginSpec, Registry, extension_points, load_entry_points


class _Custom:
    name: ClassVar[str] = "Custom"

    def __init__(self, args: Any, handle: Any) -> None: ...

    def filter(self, *a: Any) -> Any: ...

    def score(self, *a: Any) -> int:
        return 0


SPEC = PluginSpec("Custom", _Custom)


class _EP:
    name = "custom"

    def load(self) -> Any:
        return SPEC


def test_entry_point_plugins_are_loaded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(metadata, "entry_points", lambda group: [_EP()] if group == registry.ENTRY_POINT_GROUP else [])
    reg = load_entry_points()
    assert reg["Custom"] is SPEC
    assert extension_points(SPEC) == {"filter", "score"}


def test_duplicate_names_are_refused() -> None:
    reg = Registry()
    reg.register(SPEC)
    with pytest.raises(ValueError, match="already registered"):
        reg.register(SPEC)
