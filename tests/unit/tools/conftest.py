"""Shared inputs for the tools' unit tests: the shipped example and the loaded default config."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from custom_scheduler import config
from custom_scheduler.framework.registry import Registry
from custom_scheduler.plugins.builtin import full_registry
from custom_scheduler.tools import snapshot

REPO = Path(__file__).resolve().parents[3]
EXAMPLE_CLUSTER = REPO / "examples" / "snapshot" / "cluster.yaml"
EXAMPLE_PODS = REPO / "examples" / "snapshot" / "pods.yaml"


@pytest.fixture(scope="session")
def registry() -> Registry:
    return full_registry()


@pytest.fixture(scope="session")
def default_config(registry: Registry) -> config.SchedulerConfig:
    return config.load_config(snapshot.DEFAULT_CONFIG_TEXT, registry)


@pytest.fixture
def example_cluster() -> snapshot.ClusterState:
    return snapshot.load_cluster(str(EXAMPLE_CLUSTER))


@pytest.fixture
def example_pods() -> list[dict[str, Any]]:
    return snapshot.load_pods(str(EXAMPLE_PODS))
