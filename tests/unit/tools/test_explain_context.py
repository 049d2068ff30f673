"""explain in context, offline: NAME of a pods file after the pods before it (``explain --pods``,
``simulate --explain``), a pending gang member as its group cycle decides, and the text sections
explain adds (config source, details, what would make it fit)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from custom_scheduler import config
from custom_scheduler.framework.registry import Registry
from custom_scheduler.tools import main, snapshot
from custom_scheduler.tools.explain import explain_pod, format_explanation
from custom_scheduler.tools.explain_context import explain_after, explain_member, pick
from custom_scheduler.tools.plumbing import ToolError
from custom_scheduler.tools.simulate import simulate
from tests.builders import make_node, make_pod, make_pod_group

GANG_CONFIG_TEXT = snapshot.DEFAULT_CONFIG_TEXT + (
    "profiles:\n- schedulerName: custom-scheduler\n  plugins: {multiPoint: {enabled: [{name: GangScheduling}]}}\n"
)


@pytest.fixture(scope="module")
def gang_config(registry: Registry) -> config.SchedulerConfig:
    return config.load_config(GANG_CONFIG_TEXT, registry)


def _state(*nodes: Any, pods: tuple[Any, ...] = (), groups: tuple[Any, ...] = ()) -> snapshot.ClusterState:
    return snapshot.ClusterState(
        nodes=[n.obj() for n in nodes],
        pods=[p.obj() for p in pods],
        pod_groups=[g.obj() for g in groups],
        source="test",
    )


TWO_NODES = (
    make_node("big").capacity(cpu="4", memory="8Gi", pods="10"),
    make_node("small").capacity(cpu="2", memory="8Gi", pods="10"),
)


def test_pods_before_name_take_their_room_first(default_config: config.SchedulerConfig, registry: Registry) -> None:
    """Alone, "last" (3 CPUs) fits on big; after "first" (2 CPUs, placed on big by LeastAllocated)
    it fits nowhere, short by 1 CPU on big: what the daemon would find."""
    docs = [make_pod("first").req(cpu="2").obj(), make_pod("last").req(cpu="3").obj()]
    state = _state(*TWO_NODES)
    alone = explain_pod(state, docs[1], default_config, registry, seed=1)
    assert alone.node == "big"
    ex = explain_after(state, docs, "last", default_config, registry, seed=1)
    assert not ex.schedulable
    assert ex.message.startswith("0/2 nodes are available: 2 Insufficient cpu. preemption: ")
    assert ex.notes[0].startswith("The 1 pod(s) before it in the file were placed first")
    by = {v.name: v for v in ex.verdicts}
    assert by["big"].detail == ["cpu: requests 3, free 2 of 4"]
    assert [f.node for f in ex.fixes] == ["big", "small"]
    assert ex.fixes[0].changes == ("free 1 cpu (cpu: requests 3, free 2 of 4)",)
    # And what simulate says for the whole file agrees.
    assert simulate(state, docs, default_config, registry, seed=1).placement_map() == {"default/first": "big"}
    # The first pod of the file is explained against the cluster alone.
    assert explain_after(state, docs, "default/first", default_config, registry, seed=1).node == "big"


@pytest.mark.parametrize(
    ("name", "error"),
    [
        ("absent", "no pod 'absent' in the pods file (3 pods)"),
        ("web", "pod name 'web' is ambiguous in the pods file (a/web, b/web): give namespace/name"),
    ],
)
def test_pick_refuses_unknown_and_ambiguous_names(name: str, error: str) -> None:
    docs = [make_pod("web", "a").obj(), make_pod("web", "b").obj(), make_pod("db", "a").obj()]
    with pytest.raises(ToolError, match="^" + error.replace("(", r"\(").replace(")", r"\)") + "$"):
        pick(docs, name)
    assert pick(docs, "b/web") == 1
    assert pick(docs, "db") == 2


def test_gang_member_that_cannot_reach_min_count_is_unschedulable_with_the_groups_message(
    gang_config: config.SchedulerConfig, registry: Registry
) -> None:
    """minCount 3, three pending members of 2 CPUs on 4 CPUs: alone each fits; the group cycle
    places two and fails the gang. The result is the group's message, as the daemon writes it."""
    members = tuple(make_pod(f"m{i}").req(cpu="2").scheduling_group("g") for i in range(3))
    state = _state(
        make_node("n1").capacity(cpu="4", memory="8Gi", pods="10"),
        pods=members,
        groups=(make_pod_group("g", min_count=3),),
    )
    lone = explain_pod(state, members[0].obj(), gang_config, registry, seed=1)
    assert lone.node == "n1"  # what explain said before: contradicting the daemon
    ex = explain_member(state, members[0].obj(), gang_config, registry, seed=1)
    assert not ex.schedulable
    group_sim = simulate(
        _state(make_node("n1").capacity(cpu="4", memory="8Gi", pods="10"), groups=(make_pod_group("g", min_count=3),)),
        [m.obj() for m in members],
        gang_config,
        registry,
        seed=1,
    )
    [daemon_message] = {o.message for o in group_sim.outcomes}
    assert daemon_message.startswith("pod group default/g is unschedulable: minCount (3) cannot be satisfied")
    assert ex.message == daemon_message
    assert sorted(r for _, r, _ in ex.group) == ["unschedulable"] * 3
    assert any(n.startswith("Alone the pod would go to n1") for n in ex.notes)
    # What would make the gang fit: two members fit, the third is short by 2 CPUs.
    assert [f.text() for f in ex.fixes] == ["n1: free 2 cpu (cpu: requests 2, free 0 of 4)"]
    assert "2 of its 3 pending member(s) fit; default/m2 is the first that does not" in ex.notes[-1]
    text = format_explanation(ex, "table")
    assert "Result: unschedulable" in text
    assert "Result: n1" not in text


def test_gang_member_whose_group_fits_lists_every_member(
    gang_config: config.SchedulerConfig, registry: Registry
) -> None:
    members = tuple(make_pod(f"m{i}").req(cpu="1").scheduling_group("g") for i in range(2))
    state = _state(*TWO_NODES, pods=members, groups=(make_pod_group("g", min_count=2),))
    ex = explain_member(state, members[1].obj(), gang_config, registry, seed=1)
    assert ex.schedulable
    assert sorted(p for p, _, _ in ex.group) == ["default/m0", "default/m1"]
    assert all(r == "scheduled" and n in ("big", "small") for _, r, n in ex.group)
    assert ex.node == {p: n for p, _, n in ex.group}["default/m1"]
    d = ex.to_dict()
    assert [g["result"] for g in d["groupCycle"]] == ["scheduled", "scheduled"]
    assert "Group cycle (all queued members together):" in format_explanation(ex, "table")


def test_cli_explain_pods_file_and_simulate_explain(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cluster = tmp_path / "cluster.yaml"
    cluster.write_text(yaml.safe_dump({"nodes": [n.obj() for n in TWO_NODES]}))
    pods = tmp_path / "pods.yaml"
    pods.write_text(yaml.safe_dump_all([make_pod("first").req(cpu="2").obj(), make_pod("last").req(cpu="3").obj()]))
    outs = []
    for argv in (
        ["explain", "--cluster", str(cluster), "--pods", str(pods), "last", "--seed", "1"],
        ["simulate", "--cluster", str(cluster), "--pods", str(pods), "--explain", "last", "--seed", "1"],
    ):
        capsys.readouterr()
        assert main(argv) == 0
        outs.append(capsys.readouterr().out)
    for text in outs:
        assert text.splitlines()[0] == "Config: the default profile (offline, no --config)"
        assert "Result: unschedulable" in text
        assert "  big: cpu: requests 3, free 2 of 4" in text
        assert "  big: free 1 cpu (cpu: requests 3, free 2 of 4)" in text
    capsys.readouterr()
    assert main(["explain", "--cluster", str(cluster), "--pods", str(pods), "last", "-o", "json"]) == 0
    d: dict[str, Any] = json.loads(capsys.readouterr().out)
    assert d["configSource"] == "the default profile (offline, no --config)"
    assert d["wouldFit"][0] == {"node": "big", "changes": ["free 1 cpu (cpu: requests 3, free 2 of 4)"], "unknown": []}
    # A multi-pod file given as POD names the way out instead of failing bare.
    assert main(["explain", "--cluster", str(cluster), str(pods)]) == 2
    assert "name the one to explain: `explain --pods" in capsys.readouterr().err


def test_what_would_fit_names_the_shortfall_and_the_victims_preemption_picks(
    default_config: config.SchedulerConfig, registry: Registry
) -> None:
    """A 1-CPU pod of priority 100 on a full 2-CPU node: short by 1 CPU, and DefaultPreemption
    (run dry: nothing is evicted) would take the low-priority pod."""
    state = _state(
        make_node("n").capacity(cpu="2", memory="4Gi", pods="10"),
        pods=(make_pod("low").uid("u1").node("n").req(cpu="2"),),
    )
    ex = explain_pod(state, make_pod("high").req(cpu="1").priority(100).obj(), default_config, registry)
    text = format_explanation(ex, "table")
    assert "  n: free 1 cpu (cpu: requests 1, free 0 of 2)" in text
    assert "  or preemption: evict default/low on n (what DefaultPreemption picks)" in text
    assert ex.to_dict()["wouldFit"] == [
        {"node": "n", "changes": ["free 1 cpu (cpu: requests 1, free 0 of 2)"], "unknown": []}
    ]
    assert len(state.assigned_pods()) == 1
