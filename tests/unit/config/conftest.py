"""Fixtures for config tests: the fake registry and a loader bound to it."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from custom_scheduler.config import SchedulerConfig, load_config
from custom_scheduler.framework.registry import Registry
from tests.unit.config import fakes

HEADER = "apiVersion: kubescheduler.config.k8s.io/v1\nkind: KubeSchedulerConfiguration\n"


@pytest.fixture
def registry() -> Registry:
    return fakes.registry()


@pytest.fixture
def load(registry: Registry) -> Callable[[str], SchedulerConfig]:
    """Load YAML text that follows the apiVersion/kind header."""

    def _load(body: str) -> SchedulerConfig:
        return load_config(HEADER + body, registry)

    return _load
