"""Opportunistic batching in the real cycle (the offline simulation runs the daemon's Scheduler):
equal pods reuse the ranking and place as well as a full search, pods that cannot be signed never
do, and the gate turns it off."""

from __future__ import annotations

from collections import Counter

import pytest

from custom_scheduler import config
from custom_scheduler.api.model import Pod, pod_from_json
from custom_scheduler.config.gates import FeatureGates, parse
from custom_scheduler.errors import ConfigError
from custom_scheduler.plugins.builtin import full_registry
from custom_scheduler.tools import snapshot
from custom_scheduler.tools.simulate import Simulation
from custom_scheduler.tools.snapshot import DEFAULT_CONFIG_TEXT
from tests.builders import SCHEDULER_NAME, make_node, make_pod

#: PodTopologySpread without system-default constraints: plain pods are signable (with the
#: defaults no pod is, as upstream).
PROFILE = DEFAULT_CONFIG_TEXT + f"profiles:\n- schedulerName: {SCHEDULER_NAME}\n"
LIST_DEFAULTING = (
    PROFILE
    + """  pluginConfig:
  - name: PodTopologySpread
    args: {defaultingType: List}
"""
)


def run(config_text: str, pods: list[dict[str, object]], *, batching: bool = True) -> Simulation:
    reg = full_registry()
    cfg = config.load_config(config_text, reg)
    state = snapshot.ClusterState(
        nodes=[make_node(f"n{i}").capacity(cpu="8", memory="16Gi", pods="110").obj() for i in range(8)],
        source="test",
    )
    sim = Simulation(state, cfg, reg, seed=7)
    sim.scheduler.cycle.batching = batching
    sim.feed(sim_pods(pods), None)
    sim.run_until_idle()
    return sim


def sim_pods(pods: list[dict[str, object]]) -> list[Pod]:
    return [pod_from_json(p) for p in pods]


def spread(sim: Simulation) -> Counter[str]:
    return Counter(o.node for o in sim.outcomes.values() if o.node)


def plain(n: int) -> list[dict[str, object]]:
    return [make_pod(f"p{i}").uid(f"uid-p{i}").req(cpu="500m", memory="512Mi").obj() for i in range(n)]


def test_equal_pods_reuse_the_ranking_and_spread_as_a_full_search_does() -> None:
    batched = run(LIST_DEFAULTING, plain(40))
    full = run(LIST_DEFAULTING, plain(40), batching=False)
    state = next(iter(batched.scheduler.cycle.batches.values()))
    assert state.attempts["hint_used"] > 20, state.attempts
    assert spread(batched) == spread(full) == Counter({f"n{i}": 5 for i in range(8)})
    assert full.scheduler.cycle.batches == {}


def test_with_the_default_profile_no_pod_is_signable() -> None:
    sim = run(PROFILE, plain(16))
    state = next(iter(sim.scheduler.cycle.batches.values()))
    assert state.attempts["hint_used"] == 0
    assert state.flushes["pod_not_batchable"] == 16
    assert sum(spread(sim).values()) == 16


def test_pods_with_pod_affinity_are_never_batched() -> None:
    term = {"labelSelector": {"matchLabels": {"app": "x"}}, "topologyKey": "kubernetes.io/hostname"}
    pods = [
        make_pod(f"a{i}").uid(f"uid-a{i}").label("app", "x").pod_affinity("podAntiAffinity", term).obj()
        for i in range(8)
    ]
    sim = run(LIST_DEFAULTING, pods)
    state = next(iter(sim.scheduler.cycle.batches.values()))
    assert state.attempts["hint_used"] == 0
    assert sorted(spread(sim).values()) == [1] * 8  # anti-affinity still holds


@pytest.mark.parametrize(
    ("flag", "want"),
    [
        ("", FeatureGates()),
        ("OpportunisticBatching=false", FeatureGates(opportunistic_batching=False)),
        (
            "SchedulerPopFromBackoffQ=false, OpportunisticBatching=true",
            FeatureGates(scheduler_pop_from_backoff_q=False),
        ),
    ],
)
def test_feature_gates_flag(flag: str, want: FeatureGates) -> None:
    assert parse(flag) == want


@pytest.mark.parametrize("flag", ["Nope=true", "OpportunisticBatching=maybe", "OpportunisticBatching"])
def test_bad_feature_gates_are_refused_with_the_known_names(flag: str) -> None:
    with pytest.raises(ConfigError) as e:
        parse(flag)
    assert "--feature-gates" in str(e.value)
