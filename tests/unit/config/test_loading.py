"""Valid configs: defaults filled, values decoded, the example file, and render round-trips."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
import yaml

from custom_scheduler.config import (
    ClientConnectionConfig,
    LeaderElectionConfig,
    SchedulerConfig,
    from_dict,
    load_config,
    load_config_file,
    render_effective,
)
from custom_scheduler.config.render import args_to_dict, camel_case, to_dict
from custom_scheduler.framework.registry import Registry

from . import fakes
from .conftest import HEADER

Load = Callable[[str], SchedulerConfig]

EXAMPLE = Path(__file__).resolve().parents[3] / "config.example.yaml"


def test_defaults(load: Load) -> None:
    cfg = load("")
    assert cfg.parallelism == 16
    assert cfg.percentage_of_nodes_to_score == 0
    assert cfg.pod_initial_backoff_seconds == 1
    assert cfg.pod_max_backoff_seconds == 10
    assert cfg.leader_election == LeaderElectionConfig(
        leader_elect=True,
        lease_duration=15.0,
        renew_deadline=10.0,
        retry_period=2.0,
        resource_lock="leases",
        resource_name="custom-scheduler",
        resource_namespace="kube-system",
    )
    assert cfg.client_connection == ClientConnectionConfig(kubeconfig="", qps=50.0, burst=100)
    assert cfg.healthz_bind_address == "0.0.0.0:10259"
    assert cfg.enable_profiling is True
    assert cfg.enable_contention_profiling is True
    assert cfg.delay_cache_until_active is False
    assert [p.scheduler_name for p in cfg.profiles] == ["custom-scheduler"]
    assert cfg.profiles[0].percentage_of_nodes_to_score is None


@pytest.mark.parametrize(
    "body",
    [
        pytest.param("profiles: []\n", id="empty-list"),
        pytest.param("profiles:\n", id="null"),
        pytest.param("profiles: [{}]\n", id="one-empty-profile"),
    ],
)
def test_default_profile_when_none_given(load: Load, body: str) -> None:
    cfg = load(body)
    assert cfg.profiles == load("").profiles


def test_explicit_values(load: Load) -> None:
    cfg = load(
        """
parallelism: 4
percentageOfNodesToScore: 30
podInitialBackoffSeconds: 2
podMaxBackoffSeconds: 60
healthzBindAddress: "[::]:8080"
enableProfiling: false
delayCacheUntilActive: true
extenders: []
leaderElection:
  leaderElect: false
  leaseDuration: 1m30s
  renewDeadline: 1m
  retryPeriod: 500ms
  resourceName: other
  resourceNamespace: sched
clientConnection:
  kubeconfig: /etc/kube/config
  qps: 12.5
  burst: 20
  contentType: application/json
  acceptContentTypes: application/json
profiles:
- schedulerName: a
  percentageOfNodesToScore: 50
- schedulerName: b
"""
    )
    assert (cfg.parallelism, cfg.percentage_of_nodes_to_score) == (4, 30)
    assert (cfg.pod_initial_backoff_seconds, cfg.pod_max_backoff_seconds) == (2, 60)
    assert cfg.healthz_bind_address == "[::]:8080"
    assert cfg.enable_profiling is False
    assert cfg.enable_contention_profiling is False  # follows enableProfiling when unset
    assert cfg.delay_cache_until_active is True
    le = cfg.leader_election
    assert (le.leader_elect, le.lease_duration, le.renew_deadline, le.retry_period) == (False, 90.0, 60.0, 0.5)
    assert (le.resource_name, le.resource_namespace, le.resource_lock) == ("other", "sched", "leases")
    cc = cfg.client_connection
    assert (cc.kubeconfig, cc.qps, cc.burst, cc.content_type) == ("/etc/kube/config", 12.5, 20, "application/json")
    assert [p.scheduler_name for p in cfg.profiles] == ["a", "b"]
    assert [p.percentage_of_nodes_to_score for p in cfg.profiles] == [50, None]
    assert cfg.profile("b") is cfg.profiles[1]
    assert cfg.profile("c") is None


@pytest.mark.parametrize(
    ("body", "field", "value"),
    [
        pytest.param("clientConnection: {qps: 0}\n", "qps", 50.0, id="qps-0-means-default"),
        pytest.param("clientConnection: {burst: 0}\n", "burst", 100, id="burst-0-means-default"),
        pytest.param("clientConnection: {qps: null}\n", "qps", 50.0, id="null-means-unset"),
        pytest.param("clientConnection: {qps: 7}\n", "qps", 7.0, id="int-qps"),
    ],
)
def test_client_connection_defaulting(load: Load, body: str, field: str, value: object) -> None:
    assert getattr(load(body).client_connection, field) == value


def test_null_percentage_means_adaptive(load: Load) -> None:
    assert load("percentageOfNodesToScore: null\n").percentage_of_nodes_to_score == 0


def test_yaml_booleans(load: Load) -> None:
    """YAML 1.1 spellings decode as booleans, as with kube's YAML decoder."""
    assert load("leaderElection: {leaderElect: no}\n").leader_election.leader_elect is False


def test_load_from_path_and_str_path(registry: Registry, tmp_path: Path) -> None:
    f = tmp_path / "c.yaml"
    f.write_text(HEADER + "parallelism: 3\n")
    assert load_config(f, registry).parallelism == 3
    assert load_config_file(str(f), registry).parallelism == 3
    assert load_config(str(f), registry).parallelism == 3  # a one-line str naming a file


def test_one_line_yaml_is_text(registry: Registry) -> None:
    text = "{apiVersion: kubescheduler.config.k8s.io/v1, kind: KubeSchedulerConfiguration, parallelism: 2}"
    assert load_config(text, registry).parallelism == 2


def test_from_dict(registry: Registry) -> None:
    raw = {"apiVersion": "kubescheduler.config.k8s.io/v1", "kind": "KubeSchedulerConfiguration"}
    assert from_dict(raw, registry) == load_config(HEADER, registry)


def test_yaml_merge_keys_are_not_duplicates(load: Load) -> None:
    cfg = load(
        "clientConnection: &cc {qps: 10, burst: 20}\n"
        "leaderElection: {leaderElect: false}\n"
        "profiles:\n- schedulerName: a\n  percentageOfNodesToScore: 10\n"
        "- <<: {schedulerName: x, percentageOfNodesToScore: 20}\n  schedulerName: b\n"
    )
    assert [p.scheduler_name for p in cfg.profiles] == ["a", "b"]
    assert cfg.profiles[1].percentage_of_nodes_to_score == 20


# --- the example file ----------------------------------------------------------------------------


def test_example_loads(registry: Registry) -> None:
    cfg = load_config_file(EXAMPLE, registry)
    main, binpack = cfg.profiles
    assert main.scheduler_name == "custom-scheduler"
    assert main.score_weights()["NodeResourcesFit"] == 2
    assert main.score_weights()["TaintToleration"] == 3
    assert main.plugin_args["NodeResourcesFit"].scoring_strategy.type == "MostAllocated"
    assert main.plugin_args["NodeAffinity"].added_affinity is not None
    assert binpack.scheduler_name == "custom-scheduler-binpack"
    assert binpack.score_weights() == {"NodeResourcesFit": 5}
    assert binpack.percentage_of_nodes_to_score == 100
    assert binpack.enabled("filter") == main.enabled("filter")
    assert binpack.plugin_args["NodeResourcesFit"].scoring_strategy.type == "MostAllocated"


def test_example_shows_every_top_level_field() -> None:
    raw = yaml.safe_load(EXAMPLE.read_text())
    rendered_keys = set(yaml.safe_load(render_effective(load_config_file(EXAMPLE, fakes.registry()))))
    assert rendered_keys <= set(raw)


# --- rendering -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "body",
    [
        pytest.param("", id="defaults"),
        pytest.param(
            "profiles:\n- plugins:\n    multiPoint: {enabled: [{name: Gatekeeper}, {name: CustomScore, weight: 4}]}\n"
            "    filter: {disabled: [{name: NodeName}]}\n",
            id="multipoint-and-opaque-args",
        ),
        pytest.param(
            "leaderElection: {leaseDuration: 1m30s, renewDeadline: 1m, retryPeriod: 1500ms}\n", id="durations"
        ),
        pytest.param(
            "profiles:\n- plugins:\n"
            "    preEnqueue: {enabled: [{name: QuotaGate}], disabled: [{name: SchedulingGates}]}\n",
            id="pre-enqueue",
        ),
    ],
)
def test_render_round_trips(load: Load, registry: Registry, body: str) -> None:
    cfg = load(body)
    assert load_config(render_effective(cfg), registry) == cfg


def test_example_round_trips(registry: Registry) -> None:
    cfg = load_config_file(EXAMPLE, registry)
    text = render_effective(cfg)
    assert load_config(text, registry) == cfg
    assert render_effective(load_config(text, registry)) == text


def test_rendered_shape(load: Load) -> None:
    out = yaml.safe_load(render_effective(load("")))
    assert out["apiVersion"] == "kubescheduler.config.k8s.io/v1"
    assert out["kind"] == "KubeSchedulerConfiguration"
    assert out["leaderElection"]["leaseDuration"] == "15s"
    assert out["leaderElection"]["retryPeriod"] == "2s"
    assert out["clientConnection"]["qps"] == 50.0
    [profile] = out["profiles"]
    assert profile["schedulerName"] == "custom-scheduler"
    assert "percentageOfNodesToScore" not in profile
    assert profile["plugins"]["score"]["enabled"][0] == {"name": "TaintToleration", "weight": 3}
    assert profile["plugins"]["filter"]["enabled"][0] == {"name": "NodeName"}
    assert profile["plugins"]["filter"]["disabled"] == [{"name": "*"}]
    assert profile["plugins"]["preEnqueue"] == {
        "enabled": [{"name": "SchedulingGates"}, {"name": "GangScheduling"}],
        "disabled": [{"name": "*"}],
    }
    assert list(profile["plugins"])[:2] == ["preEnqueue", "queueSort"]
    fit = next(c for c in profile["pluginConfig"] if c["name"] == "NodeResourcesFit")
    assert fit["args"] == {
        "ignoredResources": [],
        "scoringStrategy": {
            "type": "LeastAllocated",
            "resources": [{"name": "cpu", "weight": 1}, {"name": "memory", "weight": 1}],
        },
    }
    assert {c["name"] for c in profile["pluginConfig"]} == {
        "NodeResourcesFit",
        "NodeAffinity",
        "InterPodAffinity",
        "GangScheduling",
    }


def test_to_dict_matches_render(load: Load) -> None:
    cfg = load("")
    assert yaml.safe_load(render_effective(cfg)) == to_dict(cfg)


def test_args_to_dict() -> None:
    assert args_to_dict(None) is None
    assert args_to_dict(fakes.Opaque()) is None
    assert args_to_dict(fakes.NodeAffinityArgs()) == {}  # None fields are left out
    assert args_to_dict(fakes.NodeAffinityArgs({"snake_key": 1})) == {"addedAffinity": {"snake_key": 1}}

    class WithHook:
        def to_config(self) -> dict[str, object]:
            return {"custom": (1, 2)}

    assert args_to_dict(WithHook()) == {"custom": [1, 2]}


@pytest.mark.parametrize(
    ("snake", "camel"),
    [("scoring_strategy", "scoringStrategy"), ("requested_to_capacity_ratio", "requestedToCapacityRatio"), ("x", "x")],
)
def test_camel_case(snake: str, camel: str) -> None:
    assert camel_case(snake) == camel
