"""Invalid configs: each is refused with a ConfigError naming exactly the offending field paths."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from custom_scheduler.config import SchedulerConfig, load_config, load_config_file
from custom_scheduler.errors import ConfigError
from custom_scheduler.framework.registry import Registry

from .conftest import HEADER

Load = Callable[[str], SchedulerConfig]

TWO_PROFILES = """
profiles:
- schedulerName: a
- schedulerName: {second}
"""

# (body after the header, expected paths, a substring of the first error's message)
CASES = [
    pytest.param("parallelizm: 4\n", {"parallelizm"}, 'did you mean "parallelism"', id="unknown-top-level-field"),
    pytest.param("parallelism: 0\n", {"parallelism"}, "greater than 0", id="parallelism-zero"),
    pytest.param("parallelism: true\n", {"parallelism"}, "expected an integer", id="parallelism-bool"),
    pytest.param("parallelism: 1.5\n", {"parallelism"}, "expected an integer", id="parallelism-float"),
    pytest.param("clientConnection: {qps: fast}\n", {"clientConnection.qps"}, "expected a number", id="qps-string"),
    pytest.param("clientConnection: {qps: -1}\n", {"clientConnection.qps"}, "negative", id="qps-negative"),
    pytest.param("clientConnection: {burst: -1}\n", {"clientConnection.burst"}, "negative", id="burst-negative"),
    pytest.param("clientConnection: {qsp: 5}\n", {"clientConnection.qsp"}, 'did you mean "qps"', id="qps-typo"),
    pytest.param("clientConnection: 5\n", {"clientConnection"}, "expected a mapping", id="section-not-mapping"),
    pytest.param("percentageOfNodesToScore: 101\n", {"percentageOfNodesToScore"}, "0 and 100", id="pct-high"),
    pytest.param("percentageOfNodesToScore: -1\n", {"percentageOfNodesToScore"}, "0 and 100", id="pct-negative"),
    pytest.param(
        "profiles: [{percentageOfNodesToScore: 120}]\n",
        {"profiles[0].percentageOfNodesToScore"},
        "0 and 100",
        id="profile-pct",
    ),
    pytest.param("podInitialBackoffSeconds: 0\n", {"podInitialBackoffSeconds"}, "greater than 0", id="initial-0"),
    pytest.param(
        "podInitialBackoffSeconds: 5\npodMaxBackoffSeconds: 4\n",
        {"podMaxBackoffSeconds"},
        "greater than or equal",
        id="max-below-initial",
    ),
    pytest.param(
        "leaderElection: {leaseDuration: 10s, renewDeadline: 10s}\n",
        {"leaderElection.leaseDuration"},
        "greater than renewDeadline",
        id="lease-not-above-renew",
    ),
    pytest.param(
        "leaderElection: {renewDeadline: 2s, retryPeriod: 2s}\n",
        {"leaderElection.renewDeadline"},
        "1.2 x retryPeriod",
        id="renew-not-above-jittered-retry",
    ),
    pytest.param(
        "leaderElection: {retryPeriod: 0s}\n", {"leaderElection.retryPeriod"}, "greater than zero", id="retry-zero"
    ),
    pytest.param(
        "leaderElection: {leaseDuration: 15 seconds}\n",
        {"leaderElection.leaseDuration"},
        "invalid duration",
        id="duration-bad-string",
    ),
    pytest.param(
        "leaderElection: {leaseDuration: 15}\n",
        {"leaderElection.leaseDuration"},
        'duration string like "15s"',
        id="duration-number",
    ),
    pytest.param(
        "leaderElection: {leaderElect: yes please}\n",
        {"leaderElection.leaderElect"},
        "expected a boolean",
        id="leader-elect-string",
    ),
    pytest.param(
        "leaderElection: {resourceLock: endpoints}\n",
        {"leaderElection.resourceLock"},
        '"leases"',
        id="resource-lock",
    ),
    pytest.param("healthzBindAddress: nope\n", {"healthzBindAddress"}, "host:port", id="bind-address"),
    pytest.param("healthzBindAddress: ':99999'\n", {"healthzBindAddress"}, "host:port", id="bind-port-range"),
    pytest.param("metricsBindAddress: ':10251'\n", {"metricsBindAddress"}, "healthzBindAddress", id="metrics-hint"),
    pytest.param(
        "extenders: [{urlPrefix: 'http://x', prioritizeVerb: p}]\n",
        {"extenders[0].weight"},
        "must have a positive weight applied to it",
        id="extenders",
    ),
    pytest.param("extenders: {}\n", {"extenders"}, "expected a list", id="extenders-type"),
    pytest.param("parallelism: 4\nparallelism: 8\n", {"parallelism"}, "duplicate field", id="duplicate-key"),
    pytest.param(
        "clientConnection:\n  qps: 1\n  qps: 2\n", {"clientConnection.qps"}, "duplicate field", id="duplicate-nested"
    ),
    pytest.param("profiles: {}\n", {"profiles"}, "expected a list", id="profiles-not-list"),
    pytest.param("profiles: [{foo: 1}]\n", {"profiles[0].foo"}, 'unknown field "foo"', id="unknown-profile-field"),
    pytest.param(
        TWO_PROFILES.format(second="a"), {"profiles[1].schedulerName"}, "duplicate schedulerName", id="dup-names"
    ),
    pytest.param(
        "profiles: [{schedulerName: a}, {}]\n", {"profiles[1].schedulerName"}, "required", id="missing-name-multi"
    ),
    pytest.param("profiles: [{schedulerName: ''}]\n", {"profiles[0].schedulerName"}, "required", id="empty-name"),
    pytest.param(
        "profiles: [{schedulerName: a}, {schedulerName: 7}]\n",
        {"profiles[1].schedulerName"},
        "expected a string",
        id="name-type",
    ),
    pytest.param(
        "profiles: [{plugins: {scores: {}}}]\n", {"profiles[0].plugins.scores"}, 'did you mean "score"', id="bad-point"
    ),
    pytest.param(
        "profiles: [{plugins: {preEnqueue: {enabled: [{name: NodeName}]}}}]\n",
        {"profiles[0].plugins.preEnqueue.enabled[0].name"},
        'plugin "NodeName" does not implement the preEnqueue extension point (it implements: filter)',
        id="pre-enqueue-not-implemented",
    ),
    pytest.param(
        "profiles: [{plugins: {preEnqueue: {enabled: [{name: SchedulingGates}, {name: SchedulingGates}]}}}]\n",
        {"profiles[0].plugins.preEnqueue.enabled[1].name"},
        "enabled twice at preEnqueue",
        id="pre-enqueue-twice",
    ),
    pytest.param(
        "profiles: [{plugins: {preEnqueue: {enabled: [{name: SchedulingGate}]}}}]\n",
        {"profiles[0].plugins.preEnqueue.enabled[0].name"},
        'did you mean "SchedulingGates"',
        id="pre-enqueue-typo",
    ),
    pytest.param(
        "profiles: [{plugins: {preEnqueue: {enabled: SchedulingGates}}}]\n",
        {"profiles[0].plugins.preEnqueue.enabled"},
        "expected a list",
        id="pre-enqueue-not-list",
    ),
    pytest.param(
        "profiles: [{plugins: {score: {enabled: [{name: ImageLocality, wieght: 2}]}}}]\n",
        {"profiles[0].plugins.score.enabled[0].wieght"},
        'did you mean "weight"',
        id="entry-unknown-field",
    ),
    pytest.param(
        "profiles: [{plugins: {score: {enabled: [{name: ImageLocalty}]}}}]\n",
        {"profiles[0].plugins.score.enabled[0].name"},
        'unknown plugin "ImageLocalty" (did you mean "ImageLocality"?)',
        id="unknown-plugin",
    ),
    pytest.param(
        "profiles: [{plugins: {score: {enabled: [{weight: 2}]}}}]\n",
        {"profiles[0].plugins.score.enabled[0].name"},
        "required",
        id="entry-without-name",
    ),
    pytest.param(
        "profiles: [{plugins: {filter: {enabled: [NodeName]}}}]\n",
        {"profiles[0].plugins.filter.enabled[0]"},
        "expected a mapping",
        id="entry-not-mapping",
    ),
    pytest.param(
        "profiles: [{plugins: {filter: {enabled: [{name: '*'}]}}}]\n",
        {"profiles[0].plugins.filter.enabled[0].name"},
        "only valid in disabled",
        id="star-enabled",
    ),
    pytest.param(
        "profiles: [{plugins: {score: {disabled: [{name: ImageLocalty}]}}}]\n",
        {"profiles[0].plugins.score.disabled[0].name"},
        "unknown plugin",
        id="unknown-disabled",
    ),
    pytest.param(
        "profiles: [{plugins: {filter: {enabled: [{name: ImageLocality}]}}}]\n",
        {"profiles[0].plugins.filter.enabled[0].name"},
        "does not implement the filter extension point (it implements: score)",
        id="wrong-point",
    ),
    pytest.param(
        "profiles: [{plugins: {multiPoint: {enabled: [{name: Inert}]}}}]\n",
        {"profiles[0].plugins.multiPoint.enabled[0].name"},
        "implements no extension point",
        id="multipoint-no-points",
    ),
    pytest.param(
        "profiles: [{plugins: {score: {enabled: [{name: CustomScore}, {name: CustomScore, weight: 2}]}}}]\n",
        {"profiles[0].plugins.score.enabled[1].name"},
        "enabled twice at score (first at profiles[0].plugins.score.enabled[0])",
        id="duplicate-enabled",
    ),
    pytest.param(
        "profiles: [{plugins: {multiPoint: {enabled: [{name: CustomScore}, {name: CustomScore}]}}}]\n",
        {"profiles[0].plugins.multiPoint.enabled[1].name"},
        "enabled twice at multiPoint",
        id="duplicate-multipoint",
    ),
    # Weights: any int32 (upstream validates none); its framework's overflow guard, in int64
    # arithmetic, refuses a score plugin after a negative running total.
    pytest.param(
        "profiles: [{plugins: {score: {enabled: [{name: CustomScore, weight: -1}]}}}]\n",
        {"profiles[0].plugins"},
        "score plugins: total score of Score plugins could overflow",
        id="weight-negative-then-more-score-plugins",
    ),
    pytest.param(
        "profiles: [{plugins: {score: {enabled: [{name: ImageLocality}, {name: CustomScore, weight: 3000000000}]}}}]\n",
        {"profiles[0].plugins.score.enabled[1].weight"},
        "json: cannot unmarshal number 3000000000 into Go struct field Plugin.profiles.plugins.score.enabled.weight"
        " of type int32",
        id="weight-beyond-int32",
    ),
    pytest.param(
        "profiles: [{plugins: {multiPoint: {enabled: [{name: CustomScore, weight: 1.5}]}}}]\n",
        {"profiles[0].plugins.multiPoint.enabled[0].weight"},
        "json: cannot unmarshal number 1.5 into Go struct field Plugin.profiles.plugins.multiPoint.enabled.weight"
        " of type int32",
        id="multipoint-weight-not-integer",
    ),
    pytest.param(
        "profiles: [{plugins: {queueSort: {enabled: [{name: FifoSort}]}}}]\n",
        {"profiles[0].plugins.queueSort"},
        "exactly one queueSort plugin must be enabled, got 2 (PrioritySort, FifoSort)",
        id="two-queue-sorts",
    ),
    pytest.param(
        "profiles: [{plugins: {bind: {disabled: [{name: '*'}]}}}]\n",
        {"profiles[0].plugins.bind"},
        "at least one bind plugin",
        id="no-bind",
    ),
    pytest.param(
        "profiles:\n- schedulerName: a\n- schedulerName: b\n"
        "  plugins: {queueSort: {disabled: [{name: '*'}], enabled: [{name: FifoSort}]}}\n",
        {"profiles[1].plugins.queueSort"},
        "queueSort must be the same in all profiles: FifoSort here, PrioritySort in profiles[0]",
        id="queue-sort-differs",
    ),
    pytest.param(
        "profiles: [{pluginConfig: [{name: Nope, args: {}}]}]\n",
        {"profiles[0].pluginConfig[0].name"},
        'unknown plugin "Nope"',
        id="plugin-config-unknown",
    ),
    pytest.param(
        "profiles: [{pluginConfig: [{args: {}}]}]\n",
        {"profiles[0].pluginConfig[0].name"},
        "required",
        id="plugin-config-no-name",
    ),
    pytest.param(
        "profiles: [{pluginConfig: [{name: NodeAffinity}, {name: NodeAffinity}]}]\n",
        {"profiles[0].pluginConfig[1].name"},
        'duplicate pluginConfig for "NodeAffinity"',
        id="plugin-config-duplicate",
    ),
    pytest.param(
        "profiles: [{pluginConfig: [{name: NodeAffinity, args: [1]}]}]\n",
        {"profiles[0].pluginConfig[0].args"},
        "expected a mapping",
        id="plugin-config-args-type",
    ),
    pytest.param(
        "profiles: [{pluginConfig: [{name: NodeAffinity, arg: {}}]}]\n",
        {"profiles[0].pluginConfig[0].arg"},
        'did you mean "args"',
        id="plugin-config-unknown-field",
    ),
    pytest.param(
        "profiles: [{pluginConfig: [{name: NodeResourcesFit, args: {scoringStrategy: {type: Fullest}}}]}]\n",
        {"profiles[0].pluginConfig[0].args.scoringStrategy.type"},
        'unknown scoring strategy "Fullest"',
        id="plugin-args-error",
    ),
    pytest.param(
        "profiles: [{pluginConfig: [{name: NodeResourcesFit, args: {kind: NodeAffinityArgs}}]}]\n",
        {"profiles[0].pluginConfig[0].args.kind"},
        'expected "NodeResourcesFitArgs"',
        id="plugin-args-kind",
    ),
    pytest.param(
        "profiles: [{pluginConfig: [{name: NodeName, args: {x: 1}}]}]\n",
        {"profiles[0].pluginConfig[0].args"},
        "plugin takes no args",
        id="no-args-plugin",
    ),
    pytest.param(
        "profiles: [{pluginConfig: [{name: Buggy, args: {x: 1}}]}]\n",
        {"profiles[0].pluginConfig[0].args"},
        "invalid args for Buggy: TypeError: boom",
        id="parser-raises-type-error",
    ),
]


@pytest.mark.parametrize(("body", "paths", "message"), CASES)
def test_invalid(load: Load, body: str, paths: set[str], message: str) -> None:
    with pytest.raises(ConfigError) as info:
        load(body)
    assert {e.path for e in info.value.errors} == paths, info.value.errors
    assert message in info.value.errors[0].message


@pytest.mark.parametrize(
    ("text", "message"),
    [
        pytest.param("a: [\n", "invalid YAML", id="malformed-yaml"),
        pytest.param("", "got null", id="empty-document"),
        pytest.param("- a\n- b\n", "got a list", id="list-document"),
        pytest.param("just text", 'got a string ("just text"; to load a file, pass', id="scalar-document"),
        pytest.param("a: 1\n---\nb: 2\n", "invalid YAML", id="two-documents"),
        pytest.param("a: !!python/object:os.system {}\n", "invalid YAML", id="unsafe-tag"),
    ],
)
def test_not_a_config_document(registry: Registry, text: str, message: str) -> None:
    with pytest.raises(ConfigError) as info:
        load_config(text, registry)
    [error] = info.value.errors
    assert error.path == ""
    assert message in error.message


@pytest.mark.parametrize(
    ("head", "paths"),
    [
        pytest.param("apiVersion: kubescheduler.config.k8s.io/v1beta3\nkind: KubeSchedulerConfiguration\n",
                     {"apiVersion"}, id="old-api-version"),
        pytest.param("kind: KubeSchedulerConfiguration\n", {"apiVersion"}, id="missing-api-version"),
        pytest.param("apiVersion: kubescheduler.config.k8s.io/v1\n", {"kind"}, id="missing-kind"),
        pytest.param("apiVersion: v1\nkind: ConfigMap\n", {"apiVersion", "kind"}, id="wrong-both"),
    ],
)  # fmt: skip
def test_type_meta(registry: Registry, head: str, paths: set[str]) -> None:
    with pytest.raises(ConfigError) as info:
        load_config(head + "parallelism: 4\n", registry)
    assert {e.path for e in info.value.errors} == paths


def test_every_error_is_reported_at_once(load: Load) -> None:
    """One pass reports all problems, not the first one."""
    body = """
parallelism: -1
clientConnection: {qps: fast}
leaderElection: {leaseDuration: 5s}
extenders: [{}]
bogus: 1
profiles:
- schedulerName: a
  plugins:
    score:
      enabled:
      - {name: ImageLocality, weight: 2147483648}
      - {name: Missing}
  pluginConfig:
  - {name: NodeResourcesFit, args: {scoringStrategy: {type: X}}}
- schedulerName: a
"""
    with pytest.raises(ConfigError) as info:
        load(body)
    assert {e.path for e in info.value.errors} == {
        "parallelism",
        "clientConnection.qps",
        "leaderElection.leaseDuration",
        "extenders[0].urlPrefix",
        "bogus",
        "profiles[0].plugins.score.enabled[0].weight",
        "profiles[0].plugins.score.enabled[1].name",
        "profiles[0].pluginConfig[0].args.scoringStrategy.type",
        "profiles[1].schedulerName",
    }
    text = str(info.value)
    assert "parallelism: must be greater than 0, got -1" in text


def test_leader_election_durations_not_checked_when_disabled(load: Load) -> None:
    """Like component-base: the ordering rules apply only with leaderElect on."""
    cfg = load("leaderElection: {leaderElect: false, leaseDuration: 1s, renewDeadline: 5s}\n")
    assert cfg.leader_election.leader_elect is False


def test_missing_file(registry: Registry, tmp_path: Path) -> None:
    missing = tmp_path / "nope.yaml"
    with pytest.raises(ConfigError) as info:
        load_config_file(missing, registry)
    [error] = info.value.errors
    assert error.path == ""
    assert str(missing) in error.message
    assert "No such file" in error.message


@pytest.mark.parametrize("as_str", [False, True], ids=["path", "str"])
def test_missing_file_via_load_config(registry: Registry, tmp_path: Path, as_str: bool) -> None:
    """A path-like, or a one-line string ending in .yaml, is a file name, so "no such file"."""
    missing = tmp_path / "nope.yaml"
    with pytest.raises(ConfigError, match="cannot read config file"):
        load_config(str(missing) if as_str else missing, registry)


def test_directory_is_not_a_file(registry: Registry, tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot read config file"):
        load_config_file(tmp_path, registry)


def test_header_constant_is_valid(registry: Registry) -> None:
    assert load_config(HEADER, registry).parallelism == 16
