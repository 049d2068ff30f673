"""Every YAML snippet of docs/scenarios.md parses as what it claims to be.

A user copies these into a config or a manifest, so a snippet that our loader rejects (a renamed
field, a duration out of range, an args placeholder) is a bug in the docs. Each ```yaml block is
judged by its shape:

- a scheduler config, whole (``kind: KubeSchedulerConfiguration``), from ``profiles:``, or a
  profile's ``plugins:`` / ``pluginConfig:`` alone (wrapped in one profile): loaded with the real
  plugin registry, as ``check-config`` does;
- a PodGroup (either API): parsed by the informer's parser (a GroupError is a failure);
- anything else (a pod's ``affinity`` or ``metadata``, a PriorityClass): YAML that parses.

The counts are asserted too, so a change that stops a block from being recognised (and so from
being checked) fails here rather than passing silently.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from custom_scheduler.api.podgroup import GroupError, parse_crd, parse_native
from custom_scheduler.config import from_dict
from custom_scheduler.plugins.builtin import full_registry

DOC = Path(__file__).resolve().parents[3] / "docs" / "scenarios.md"
HEADER = {"apiVersion": "kubescheduler.config.k8s.io/v1", "kind": "KubeSchedulerConfiguration"}
_BLOCK = re.compile(r"^```yaml\n(.*?)^```", re.MULTILINE | re.DOTALL)


def _blocks() -> list[tuple[int, str]]:
    text = DOC.read_text()
    return [(text.count("\n", 0, m.start()) + 1, m.group(1)) for m in _BLOCK.finditer(text)]


def _kind(doc: Any) -> str:
    if not isinstance(doc, dict):
        return "other"
    if doc.get("kind") == "KubeSchedulerConfiguration" or "profiles" in doc:
        return "config"
    if doc.keys() <= {"plugins", "pluginConfig", "schedulerName"} and doc.keys() & {"plugins", "pluginConfig"}:
        return "profile"
    if doc.get("kind") == "PodGroup":
        return "podgroup"
    return "other"


def _check(doc: Any) -> str:
    """Judge one YAML document; returns its kind. Raises (ConfigError, AssertionError) on a bad one."""
    kind = _kind(doc)
    if kind == "config":
        from_dict({**HEADER, **doc}, full_registry())
    elif kind == "profile":
        from_dict({**HEADER, "profiles": [{"schedulerName": "custom-scheduler", **doc}]}, full_registry())
    elif kind == "podgroup":
        parse = parse_native if doc["apiVersion"].startswith("scheduling.k8s.io/") else parse_crd
        meta = {"namespace": "default", **doc["metadata"]}
        got = parse({**doc, "metadata": meta})
        assert not isinstance(got, GroupError), got
    return kind


BLOCKS = _blocks()


@pytest.mark.parametrize(("line", "text"), BLOCKS, ids=[f"line-{line}" for line, _ in BLOCKS])
def test_snippet_parses_as_what_it_is(line: int, text: str) -> None:
    for doc in yaml.safe_load_all(text):
        if doc is not None:
            _check(doc)


def test_the_config_and_podgroup_snippets_are_all_recognised() -> None:
    """Every capability section's config and PodGroups are checked, not skipped as "other"."""
    kinds = [_kind(doc) for _, text in BLOCKS for doc in yaml.safe_load_all(text) if doc is not None]
    assert kinds.count("config") >= 5, kinds  # the intro, topology, preemption, reservation, defrag
    assert kinds.count("profile") >= 1, kinds  # NodePools' pluginConfig
    assert kinds.count("podgroup") >= 6, kinds  # gangs (2), topology (2), preemption, elastic


@pytest.mark.parametrize(
    ("doc", "error"),
    [
        ({"pluginConfig": [{"name": "GangScheduling", "args": {"topologyLevels": ["bad key!"]}}]}, "topologyLevels"),
        ({"pluginConfig": [{"name": "GangScheduling", "args": {"reservation": {"threshold": "0s"}}}]}, "threshold"),
        ({"pluginConfig": [{"name": "AcceleratorIsolation", "args": {"...": None}}]}, "..."),
    ],
)
def test_a_wrong_snippet_would_fail(doc: dict[str, Any], error: str) -> None:
    """The check is not vacuous: snippets with the mistakes docs make are rejected, naming the field."""
    with pytest.raises(Exception, match=re.escape(error)):
        _check(doc)
