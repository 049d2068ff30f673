"""Go-compatible arithmetic, normalisation, name validation and the in-tree registry."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from custom_scheduler.errors import ConfigError
from custom_scheduler.framework import registry
from custom_scheduler.framework.types import NodeScore
from custom_scheduler.plugins import args_reader, helpers, in_tree_registry, resource_allocation
from tests.unit.plugins.support import fake_handle


@pytest.mark.parametrize(
    ("a", "b", "want"),
    [
        pytest.param(7, 2, 3, id="positive"),
        pytest.param(-7, 2, -3, id="negative-numerator-truncates-toward-zero"),
        pytest.param(7, -2, -3, id="negative-denominator"),
        pytest.param(-7, -2, 3, id="both-negative"),
        pytest.param(0, -5, 0, id="zero"),
    ],
)
def test_go_div(a: int, b: int, want: int) -> None:
    assert helpers.go_div(a, b) == want


@pytest.mark.parametrize(
    ("num", "den", "want"),
    [
        pytest.param(75, 2, 38, id="half-rounds-up"),
        pytest.param(5, 2, 3, id="half-away-from-zero-not-to-even"),
        pytest.param(31, 8, 4, id="above-half"),
        pytest.param(25, 8, 3, id="below-half"),
        pytest.param(-5, 2, -3, id="negative-half-away-from-zero"),
    ],
)
def test_go_round_ratio(num: int, den: int, want: int) -> None:
    assert helpers.go_round_ratio(num, den) == want


# kube-scheduler's TestBrokenLinearFunction table.
SHAPE_1 = [(10, 1), (90, 9)]
SHAPE_2 = [(0, 2), (40, 10), (100, 0)]
SHAPE_3 = [(0, 2), (40, 2), (100, 2)]


@pytest.mark.parametrize(
    ("shape", "p", "want"),
    [
        *(
            pytest.param(SHAPE_1, p, w, id=f"rising-{p}")
            for p, w in [
                (-10, 1),
                (0, 1),
                (9, 1),
                (10, 1),
                (15, 1),
                (19, 1),
                (20, 2),
                (89, 8),
                (90, 9),
                (99, 9),
                (100, 9),
                (110, 9),
            ]
        ),
        *(
            pytest.param(SHAPE_2, p, w, id=f"peak-{p}")
            for p, w in [(-10, 2), (0, 2), (20, 6), (30, 8), (40, 10), (70, 5), (100, 0), (110, 0)]
        ),
        *(pytest.param(SHAPE_3, p, 2, id=f"flat-{p}") for p in (-10, 0, 20, 30, 40, 70, 100, 110)),
        pytest.param(SHAPE_2, 50, 9, id="negative-slope-truncates"),
    ],
)
def test_broken_linear(shape: list[tuple[int, int]], p: int, want: int) -> None:
    assert helpers.broken_linear(shape, p) == want


@pytest.mark.parametrize(
    ("raw", "reverse", "want"),
    [
        pytest.param([0, 0, 0], False, [0, 0, 0], id="all-zero-stays-zero"),
        pytest.param([0, 0, 0], True, [100, 100, 100], id="all-zero-reversed-is-max"),
        pytest.param([1, 2, 3], False, [33, 66, 100], id="scaled-to-max"),
        pytest.param([1, 2, 3], True, [67, 34, 0], id="reversed"),
        pytest.param([], False, [], id="empty"),
    ],
)
def test_default_normalize_score(raw: list[int], reverse: bool, want: list[int]) -> None:
    scores = [NodeScore(f"n{i}", s) for i, s in enumerate(raw)]
    helpers.default_normalize_score(scores, reverse=reverse)
    assert [s.score for s in scores] == want
    assert helpers.default_normalize_list(raw, reverse=reverse) == want


@given(st.lists(st.integers(min_value=-1000, max_value=10**6), max_size=40), st.booleans())
def test_default_normalize_list_matches_the_node_score_path(raw: list[int], reverse: bool) -> None:
    scores = [NodeScore(f"n{i}", s) for i, s in enumerate(raw)]
    helpers.default_normalize_score(scores, reverse=reverse)
    assert helpers.default_normalize_list(raw, reverse=reverse) == [s.score for s in scores]


@pytest.mark.parametrize(
    ("name", "want"),
    [
        pytest.param("example.com/foo", [], id="prefixed"),
        pytest.param("foo", [], id="plain"),
        pytest.param("Foo.bar_baz-1", [], id="mixed-characters"),
        pytest.param("/foo", ["prefix part must be non-empty"], id="empty-prefix"),
        pytest.param(
            "Example.com/foo",
            ["prefix part " + args_reader.dns1123_subdomain_errors("Example.com")[0]],
            id="uppercase-prefix",
        ),
        pytest.param("-foo", ["name part " + args_reader._QUALIFIED_NAME_MSG], id="leading-dash"),
    ],
)
def test_qualified_name_errors(name: str, want: list[str]) -> None:
    assert args_reader.qualified_name_errors(name) == want


@pytest.mark.parametrize(
    ("value", "valid"),
    [
        pytest.param("", True, id="empty"),
        pytest.param("v1.2_3-a", True, id="typical"),
        pytest.param("a" * 63, True, id="max-length"),
        pytest.param("a" * 64, False, id="too-long"),
        pytest.param("b c", False, id="space"),
        pytest.param("-a", False, id="leading-dash"),
    ],
)
def test_label_value_errors(value: str, valid: bool) -> None:
    assert (args_reader.label_value_errors(value) == []) is valid


@pytest.mark.parametrize(
    ("name", "extended", "scalar"),
    [
        pytest.param("cpu", False, False, id="cpu"),
        pytest.param("example.com/foo", True, True, id="extended"),
        pytest.param("nvidia.com/gpu", True, True, id="gpu"),
        pytest.param("kubernetes.io/something", False, True, id="prefixed-native"),
        pytest.param("hugepages-2Mi", False, True, id="hugepages"),
        pytest.param("attachable-volumes-aws-ebs", False, True, id="attachable-volumes"),
        pytest.param("requests.example.com/foo", False, False, id="quota-requests-prefix"),
    ],
)
def test_resource_name_kinds(name: str, extended: bool, scalar: bool) -> None:
    assert resource_allocation.is_extended_resource_name(name) is extended
    assert resource_allocation.is_scalar_resource_name(name) is scalar


EXPECTED_POINTS = {
    "PrioritySort": {"queueSort"},
    "NodeName": {"filter"},
    "NodeUnschedulable": {"filter"},
    "TaintToleration": {"filter", "preScore", "score"},
    "NodeAffinity": {"preFilter", "filter", "preScore", "score"},
    "NodePorts": {"preFilter", "filter"},
    "NodeResourcesFit": {"preFilter", "filter", "preScore", "score"},
    "NodeResourcesBalancedAllocation": {"preScore", "score"},
    "ImageLocality": {"score"},
}


def test_in_tree_registry() -> None:
    reg = in_tree_registry()
    assert EXPECTED_POINTS.keys() <= reg.keys()
    for name, points in EXPECTED_POINTS.items():
        spec = reg[name]
        assert spec.name == name == spec.factory.name  # type: ignore[attr-defined]
        assert registry.extension_points(spec) == points
        # Every plugin builds with default args.
        plugin = spec.factory(spec.parse_args(None, f"args.{name}"), fake_handle())
        assert plugin.name == name


def test_in_tree_registry_is_every_in_tree_plugin() -> None:
    """One registry: every plugin module's SPEC is in it, and the daemon's registry adds nothing
    but out-of-tree entry points; every default-profile plugin is one of them."""
    import importlib
    import pkgutil

    import custom_scheduler.plugins as pkg
    from custom_scheduler.config.defaults import DEFAULT_MULTI_POINT
    from custom_scheduler.plugins.builtin import full_registry

    specs = {}
    for info in pkgutil.walk_packages(pkg.__path__, pkg.__name__ + "."):
        spec = getattr(importlib.import_module(info.name), "SPEC", None)
        if isinstance(spec, registry.PluginSpec):
            specs[spec.name] = spec
    reg = in_tree_registry()
    assert dict(reg) == specs
    assert dict(full_registry(out_of_tree=False)) == dict(reg)
    assert {name for name, _ in DEFAULT_MULTI_POINT} <= reg.keys()


def test_plugins_without_args_reject_args() -> None:
    with pytest.raises(ConfigError):
        in_tree_registry()["NodeName"].parse_args({"x": 1}, "args")
