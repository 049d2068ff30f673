"""Merge rules: a profile's ``plugins`` section against the default profile, per extension point."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from custom_scheduler.config import EXTENSION_POINTS, PluginRef, Profile, SchedulerConfig, load_config
from custom_scheduler.config.defaults import DEFAULT_MULTI_POINT, default_profile_plugins
from custom_scheduler.errors import ConfigError
from custom_scheduler.framework.registry import EXTENSION_POINT_METHODS, Registry

from . import fakes
from .conftest import HEADER

Load = Callable[[str], SchedulerConfig]

DEFAULT_FILTER = (  # v1.37's order: NodeName before NodeUnschedulable
    "NodeName",
    "NodeUnschedulable",
    "TaintToleration",
    "NodeAffinity",
    "NodePorts",
    "NodeResourcesFit",
    "VolumeRestrictions",
    "NodeVolumeLimits",
    "VolumeBinding",
    "VolumeZone",
    "PodTopologySpread",
    "InterPodAffinity",
    "DynamicResources",
    "NodeDeclaredFeatures",
)
DEFAULT_SCORE = (
    ("TaintToleration", 3),
    ("NodeAffinity", 2),
    ("NodeResourcesFit", 1),
    ("PodTopologySpread", 2),
    ("InterPodAffinity", 2),
    ("NodeResourcesBalancedAllocation", 1),
    ("ImageLocality", 1),
)


def names(profile: Profile, point: str) -> tuple[str, ...]:
    return tuple(r.name for r in profile.enabled(point))


def scores(profile: Profile) -> tuple[tuple[str, int], ...]:
    return tuple((r.name, r.weight) for r in profile.enabled("score"))


def plugins(load: Load, section: str) -> Profile:
    """The single profile of a config whose profile has ``plugins: <section>`` (YAML, indented 4)."""
    return load("profiles:\n- plugins:\n" + section).profiles[0]


def test_default_profile(load: Load) -> None:
    """kube-scheduler's v1.28+ default profile (the fake volume and DRA plugins have only their
    filter-side points, see fakes.PLUGINS)."""
    p = load("").profiles[0]
    assert p.scheduler_name == "custom-scheduler"
    assert names(p, "preEnqueue") == ("SchedulingGates", "GangScheduling")
    assert names(p, "queueSort") == ("PrioritySort",)
    assert names(p, "preFilter") == (
        "NodeAffinity",
        "NodePorts",
        "NodeResourcesFit",
        "VolumeRestrictions",
        "NodeVolumeLimits",
        "VolumeBinding",
        "VolumeZone",
        "PodTopologySpread",
        "InterPodAffinity",
        "DynamicResources",
        "NodeDeclaredFeatures",
    )
    assert names(p, "filter") == DEFAULT_FILTER
    assert names(p, "postFilter") == ("DefaultPreemption",)
    assert names(p, "preScore") == (
        "TaintToleration",
        "NodeAffinity",
        "NodeResourcesFit",
        "PodTopologySpread",
        "InterPodAffinity",
        "NodeResourcesBalancedAllocation",
    )
    assert scores(p) == DEFAULT_SCORE
    assert names(p, "bind") == ("DefaultBinder",)
    assert names(p, "reserve") == names(p, "preBind") == ("VolumeBinding", "DynamicResources")
    assert names(p, "permit") == ("GangScheduling",)
    assert p.enabled("postBind") == ()
    assert set(p.plugins) == set(EXTENSION_POINTS)


def test_a_default_plugin_missing_from_the_registry_is_an_error() -> None:
    """Not silently dropped: the effective default profile must not depend on what is registered."""
    reg = fakes.registry(without=("ImageLocality", "NodePorts"))
    with pytest.raises(ConfigError) as e:
        load_config(HEADER, reg)
    assert [(x.path, x.message) for x in e.value.errors] == [
        (
            "profiles[0].plugins.multiPoint",
            f'default plugin "{name}" is not registered (disable it in multiPoint to run without it)',
        )
        for name in ("NodePorts", "ImageLocality")
    ]
    with pytest.raises(ConfigError, match="default plugins not registered: NodePorts, ImageLocality"):
        default_profile_plugins(reg)
    # Disabling them (by name or with "*") is the way to run without them.
    body = "profiles:\n- plugins:\n    multiPoint:\n      disabled: [{name: ImageLocality}, {name: NodePorts}]\n"
    p = load_config(HEADER + body, reg).profiles[0]
    assert "ImageLocality" not in names(p, "score")
    assert "NodePorts" not in names(p, "filter")
    assert [r.name for r in default_profile_plugins(fakes.registry())] == [n for n, _ in DEFAULT_MULTI_POINT]


def test_default_profile_plugins_weights(registry: Registry) -> None:
    refs = {r.name: r.weight for r in default_profile_plugins(registry)}
    assert refs["TaintToleration"] == 3
    assert refs["NodeName"] == 1


@pytest.mark.parametrize(
    ("section", "point", "expected"),
    [
        pytest.param(
            "    score:\n      disabled: [{name: '*'}]\n      enabled: [{name: NodeResourcesFit, weight: 5}]\n",
            "score",
            (("NodeResourcesFit", 5),),
            id="disable-all-then-enable",
        ),
        pytest.param(
            "    score:\n      enabled: [{name: TaintToleration, weight: 7}]\n",
            "score",
            (("TaintToleration", 7), *DEFAULT_SCORE[1:]),
            id="reweight-in-place",
        ),
        pytest.param(
            "    score:\n      enabled: [{name: NodeAffinity, weight: 9}]\n",
            "score",
            (DEFAULT_SCORE[0], ("NodeAffinity", 9), *DEFAULT_SCORE[2:]),
            id="reweight-keeps-position",
        ),
        pytest.param(
            "    score:\n      enabled: [{name: CustomScore, weight: 4}]\n",
            "score",
            (*DEFAULT_SCORE, ("CustomScore", 4)),
            id="append",
        ),
        pytest.param(
            "    score:\n      enabled: [{name: CustomScore}]\n",
            "score",
            (*DEFAULT_SCORE, ("CustomScore", 1)),
            id="unset-weight-is-1",
        ),
        # Upstream's getValidScoreWeights: the score.enabled entry is the one that counts, and
        # unset or 0 is 1 there, never the multiPoint or default weight.
        pytest.param(
            "    score:\n      enabled: [{name: TaintToleration}]\n",
            "score",
            (("TaintToleration", 1), *DEFAULT_SCORE[1:]),
            id="unset-weight-is-1-not-the-default-weight",
        ),
        pytest.param(
            "    score:\n      enabled: [{name: TaintToleration, weight: 0}]\n",
            "score",
            (("TaintToleration", 1), *DEFAULT_SCORE[1:]),
            id="zero-weight-is-1",
        ),
        pytest.param(
            "    score:\n      disabled: [{name: ImageLocality}, {name: NodeAffinity}]\n",
            "score",
            tuple(s for s in DEFAULT_SCORE if s[0] not in {"ImageLocality", "NodeAffinity"}),
            id="disable-some",
        ),
        pytest.param(
            "    multiPoint:\n      enabled: [{name: CustomScore, weight: 5}]\n",
            "score",
            (*DEFAULT_SCORE, ("CustomScore", 5)),
            id="multipoint-appends-with-weight",
        ),
        pytest.param(
            "    multiPoint:\n      enabled: [{name: CustomScore, weight: 5}]\n"
            "    score:\n      enabled: [{name: CustomScore, weight: 9}]\n",
            "score",
            (*DEFAULT_SCORE, ("CustomScore", 9)),
            id="explicit-point-wins-over-multipoint",
        ),
        pytest.param(
            "    multiPoint:\n      enabled: [{name: CustomScore, weight: 4}]\n"
            "    score:\n      enabled: [{name: CustomScore}]\n",
            "score",
            (*DEFAULT_SCORE, ("CustomScore", 1)),
            id="unset-point-weight-is-1-not-the-multipoint-weight",
        ),
        pytest.param(
            "    multiPoint:\n      enabled: [{name: TaintToleration, weight: 6}]\n",
            "score",
            (("TaintToleration", 6), *DEFAULT_SCORE[1:]),
            id="multipoint-reweights-default-in-place",
        ),
        pytest.param(
            "    multiPoint:\n      disabled: [{name: ImageLocality}]\n",
            "score",
            DEFAULT_SCORE[:-1],
            id="multipoint-disable-default",
        ),
        pytest.param(
            "    multiPoint:\n      enabled: [{name: CustomScore}]\n"
            "    score:\n      disabled: [{name: '*'}]\n      enabled: [{name: ImageLocality}]\n",
            "score",
            (("ImageLocality", 1),),
            id="point-star-drops-multipoint-too",
        ),
        pytest.param(
            "    multiPoint:\n      enabled: [{name: CustomScore}]\n"
            "    score:\n      disabled: [{name: CustomScore}]\n",
            "score",
            DEFAULT_SCORE,
            id="point-disables-one-multipoint-plugin",
        ),
    ],
)
def test_score_merge(load: Load, section: str, point: str, expected: tuple[tuple[str, int], ...]) -> None:
    assert scores(plugins(load, section)) == expected


@pytest.mark.parametrize(
    ("section", "point", "expected"),
    [
        pytest.param(
            "    filter:\n      disabled: [{name: NodeAffinity}]\n",
            "filter",
            tuple(n for n in DEFAULT_FILTER if n != "NodeAffinity"),
            id="disable-at-one-point",
        ),
        pytest.param(
            "    filter:\n      disabled: [{name: NodeName}]\n      enabled: [{name: NodeName}]\n",
            "filter",
            (*(n for n in DEFAULT_FILTER if n != "NodeName"), "NodeName"),
            id="disable-and-enable-moves-to-end",
        ),
        pytest.param(
            "    filter:\n      enabled: [{name: NodeName}]\n",
            "filter",
            DEFAULT_FILTER,
            id="re-enable-default-is-no-op",
        ),
        pytest.param(
            "    filter:\n      disabled: [{name: '*'}]\n      enabled: [{name: NodePorts}, {name: NodeName}]\n",
            "filter",
            ("NodePorts", "NodeName"),
            id="star-then-explicit-order",
        ),
        pytest.param(
            "    multiPoint:\n      enabled: [{name: Gatekeeper}]\n",
            "reserve",
            ("VolumeBinding", "DynamicResources", "Gatekeeper"),
            id="multipoint-expands-reserve",
        ),
        pytest.param(
            "    multiPoint:\n      enabled: [{name: Gatekeeper}]\n",
            "permit",
            ("GangScheduling", "Gatekeeper"),
            id="multipoint-expands-permit",
        ),
        pytest.param(
            "    multiPoint:\n      disabled: [{name: '*'}]\n      enabled: [{name: FifoSort}, {name: OtherBinder}]\n",
            "filter",
            (),
            id="multipoint-star-removes-defaults",
        ),
        pytest.param(
            "    multiPoint:\n      disabled: [{name: '*'}]\n      enabled: [{name: FifoSort}, {name: OtherBinder}]\n",
            "queueSort",
            ("FifoSort",),
            id="multipoint-star-keeps-own",
        ),
        pytest.param(
            "    queueSort:\n      disabled: [{name: PrioritySort}]\n      enabled: [{name: FifoSort}]\n",
            "queueSort",
            ("FifoSort",),
            id="replace-queue-sort",
        ),
        pytest.param(
            "    bind:\n      enabled: [{name: OtherBinder}]\n",
            "bind",
            ("DefaultBinder", "OtherBinder"),
            id="append-binder",
        ),
        pytest.param(
            "    filter:\n      disabled: [{name: EBSLimits}, {name: GCEPDLimits}]\n",
            "filter",
            DEFAULT_FILTER,
            id="disabling-upstream-only-plugins-is-accepted",
        ),
        # preEnqueue: the same rules as every point; SchedulingGates and GangScheduling come from
        # the default multiPoint.
        pytest.param("", "preEnqueue", ("SchedulingGates", "GangScheduling"), id="pre-enqueue-default"),
        pytest.param(
            "    preEnqueue:\n      disabled: [{name: SchedulingGates}]\n",
            "preEnqueue",
            ("GangScheduling",),
            id="pre-enqueue-disable",
        ),
        pytest.param(
            "    preEnqueue:\n      disabled: [{name: '*'}]\n",
            "preEnqueue",
            (),
            id="pre-enqueue-disable-star",
        ),
        pytest.param(
            "    multiPoint:\n      disabled: [{name: SchedulingGates}, {name: GangScheduling}]\n",
            "preEnqueue",
            (),
            id="pre-enqueue-disable-via-multipoint",
        ),
        pytest.param(
            "    preEnqueue:\n      enabled: [{name: QuotaGate}]\n",
            "preEnqueue",
            ("SchedulingGates", "GangScheduling", "QuotaGate"),
            id="pre-enqueue-append",
        ),
        pytest.param(
            "    preEnqueue:\n      disabled: [{name: '*'}]\n"
            "      enabled: [{name: QuotaGate}, {name: SchedulingGates}]\n",
            "preEnqueue",
            ("QuotaGate", "SchedulingGates"),
            id="pre-enqueue-reorder",
        ),
        pytest.param(
            "    multiPoint:\n      enabled: [{name: QuotaGate}]\n",
            "preEnqueue",
            ("SchedulingGates", "GangScheduling", "QuotaGate"),
            id="multipoint-expands-pre-enqueue",
        ),
        pytest.param(
            "    multiPoint:\n      enabled: [{name: QuotaGate}]\n",
            "filter",
            DEFAULT_FILTER,
            id="pre-enqueue-plugin-only-at-pre-enqueue",
        ),
    ],
)
def test_point_merge(load: Load, section: str, point: str, expected: tuple[str, ...]) -> None:
    assert names(plugins(load, section), point) == expected


def test_non_score_points_have_weight_1(load: Load) -> None:
    p = plugins(load, "    multiPoint:\n      enabled: [{name: CustomScore, weight: 5}, {name: Gatekeeper}]\n")
    assert p.enabled("filter")[0] == PluginRef("NodeName", 1)
    assert p.enabled("reserve") == (
        PluginRef("VolumeBinding", 1),
        PluginRef("DynamicResources", 1),
        PluginRef("Gatekeeper", 1),
    )


def test_plugin_args_for_every_enabled_plugin(load: Load) -> None:
    """Enabled plugins without pluginConfig get their parser's defaults (parse_args(None, path))."""
    p = plugins(load, "    multiPoint:\n      enabled: [{name: Gatekeeper}]\n")
    assert set(p.plugin_args) == set(p.plugin_names())
    assert p.plugin_args["NodeResourcesFit"] == fakes.FitArgs()
    assert p.plugin_args["NodeAffinity"] == fakes.NodeAffinityArgs()
    assert p.plugin_args["Gatekeeper"] == fakes.Opaque()
    assert p.plugin_args["NodeName"] is None


def test_plugin_config_for_plugin_not_enabled_is_kept(load: Load) -> None:
    p = load(
        "profiles:\n- plugins: {score: {disabled: [{name: InterPodAffinity}]}}\n  pluginConfig: [{name: CustomScore}]\n"
    ).profiles[0]
    assert "CustomScore" in p.plugin_args
    assert "CustomScore" not in p.plugin_names()


def test_plugin_args_parsed(load: Load) -> None:
    p = load(
        "profiles:\n- pluginConfig:\n"
        "  - name: NodeResourcesFit\n"
        "    args:\n"
        "      apiVersion: kubescheduler.config.k8s.io/v1\n"
        "      kind: NodeResourcesFitArgs\n"
        "      scoringStrategy: {type: MostAllocated, resources: [{name: nvidia.com/gpu, weight: 3}]}\n"
    ).profiles[0]
    assert p.plugin_args["NodeResourcesFit"] == fakes.FitArgs(
        scoring_strategy=fakes.ScoringStrategy("MostAllocated", (fakes.ResourceSpec("nvidia.com/gpu", 3),))
    )


def test_profile_is_read_only(load: Load) -> None:
    p = load("").profiles[0]
    with pytest.raises(TypeError):
        p.plugins["score"] = ()  # type: ignore[index]
    with pytest.raises(TypeError):
        p.plugin_args["x"] = 1  # type: ignore[index]


def test_profile_helpers(load: Load) -> None:
    p = load("").profiles[0]
    assert p.score_weights() == dict(DEFAULT_SCORE)
    # First appearance in extension-point order, each name once.
    assert p.plugin_names()[:4] == ("SchedulingGates", "GangScheduling", "PrioritySort", "NodeAffinity")
    assert sorted(p.plugin_names()) == sorted(n for n, _ in DEFAULT_MULTI_POINT)


def test_extension_points_match_the_registry() -> None:
    assert tuple(EXTENSION_POINT_METHODS) == EXTENSION_POINTS
