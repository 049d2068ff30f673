"""The page's per-pod diagnosis changes no decision, covers gangs, and the static HTML report
shows attempts and scales to the screen."""

from __future__ import annotations

import re
from typing import Any

import pytest

from custom_scheduler import config
from custom_scheduler.framework.registry import Registry
from custom_scheduler.tools import report, snapshot
from custom_scheduler.tools.simulate import simulate
from tests.builders import make_node, make_pod, make_pod_group
from tests.unit.tools.test_simulate_gangs import GANG_CONFIG_TEXT


@pytest.mark.parametrize("seed", [1, 11, 12345])
def test_diagnosing_changes_no_placement(
    example_cluster: snapshot.ClusterState,
    example_pods: list[dict[str, Any]],
    default_config: config.SchedulerConfig,
    registry: Registry,
    seed: int,
) -> None:
    """The shipped example (30 pods, 8 nodes, ties broken by the seed, a preemption): the run the
    page makes (``diagnose=True``) gives the CLI's document exactly, and a diagnosis per pod."""
    plain = simulate(example_cluster, example_pods, default_config, registry, seed=seed)
    state = snapshot.load_cluster(str(snapshot_path(example_cluster)))
    diagnosed = simulate(state, example_pods, default_config, registry, seed=seed, diagnose=True)
    assert diagnosed.to_dict() == plain.to_dict()
    assert plain.diagnoses == {}
    attempted = [o.pod for o in diagnosed.outcomes if o.attempts]
    assert sorted(diagnosed.diagnoses) == sorted(attempted)
    for o in diagnosed.placements:
        verdicts = {n.node: n for n in diagnosed.diagnoses[o.pod].nodes}
        assert verdicts[o.node].verdict == "feasible"
        if o.score is not None:
            assert verdicts[o.node].total == o.score


def snapshot_path(state: snapshot.ClusterState) -> str:
    """The file a loaded snapshot came from (``snapshot PATH``), to load a second, fresh copy."""
    return re.sub(r"^snapshot ", "", state.source)


def test_gang_members_are_diagnosed(registry: Registry) -> None:
    """The group cycle's attempts are recorded too: a gang of three 1-CPU members on a 2-CPU node
    fails whole, and each member's table names the node and why."""
    cfg = config.load_config(GANG_CONFIG_TEXT, registry)
    state = snapshot.ClusterState(
        nodes=[make_node("n1").capacity(cpu="2", memory="8Gi", pods="20").obj()],
        pod_groups=[make_pod_group("g", min_count=3).obj()],
        source="test",
    )
    pods = [make_pod(f"m{i}").req(cpu="1").scheduling_group("g").obj() for i in range(3)]
    plain = simulate(state, pods, cfg, registry, seed=2)
    res = simulate(state, pods, cfg, registry, seed=2, diagnose=True)
    assert res.to_dict() == plain.to_dict()
    assert {o.result for o in res.outcomes} == {"unschedulable"}
    assert set(res.diagnoses) == {"default/m0", "default/m1", "default/m2"}
    last = res.diagnoses["default/m2"].nodes
    assert [(n.node, n.verdict) for n in last] == [("n1", "rejected")]
    assert last[0].reasons == ["Insufficient cpu"]


def test_the_static_report_shows_attempts_and_scales(
    default_config: config.SchedulerConfig, registry: Registry
) -> None:
    state = snapshot.ClusterState(nodes=[make_node("n1").capacity(cpu="1", memory="1Gi", pods="10").obj()])
    res = simulate(state, [make_pod("big").req(cpu="2").obj()], default_config, registry, seed=1)
    page = report.simulation_html(res.to_dict())
    assert '<meta name="viewport" content="width=device-width, initial-scale=1">' in page
    assert "svg{max-width:100%;height:auto}" in page
    assert "<h2>Unschedulable pods</h2><table><tr><th>Pod</th><th>Reason</th><th>Attempts</th></tr>" in page
    assert re.search(
        r'<tr><td>default/big</td><td>0/1 nodes are available: [^<]*</td><td class="num">1</td></tr>', page
    )
