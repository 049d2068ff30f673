"""The demo's ML-training scenarios: the second profile is configured as docs/scenarios.md says, the
objects keep each scenario on its own nodes, and the report's lines follow the results they are
given (a wrong outcome is said, never dressed as the right one)."""

from __future__ import annotations

from typing import Any

import pytest

from custom_scheduler import config
from custom_scheduler.devenv import demo
from custom_scheduler.devenv import demo_training as dt
from custom_scheduler.devenv.demo_topology import RACK
from custom_scheduler.plugins.builtin import full_registry

GPU = dt.GPU


def test_the_training_profile_is_configured_as_documented() -> None:
    cfg = config.load_config(demo.DEMO_CONFIG % {"metrics_url": "http://127.0.0.1:1"}, full_registry())
    profiles = {p.scheduler_name: p for p in cfg.profiles}
    assert set(profiles) == set(demo.PROFILES)
    args = profiles[dt.PROFILE].plugin_args["GangScheduling"].to_config()
    assert args["jobLevelPreemption"] is True
    assert args["reservation"]["threshold"] == "1s"
    assert args["topologyLevels"][-1] == RACK
    # the first profile keeps the default threshold: the [gangs] scenario's waiting gang never reserves
    first = profiles["custom-scheduler"].plugin_args["GangScheduling"].to_config()
    assert first["reservation"]["threshold"] == "30s"
    assert first["jobLevelPreemption"] is False


def _all_pods() -> list[dict[str, Any]]:
    return dt.first_wave(demo._pod) + dt.second_wave(demo._pod)


def test_each_scenario_stays_on_its_nodes() -> None:
    nodes = {n["metadata"]["name"]: n for n in dt.nodes(demo._node)}
    assert set(nodes) == set(dt.NODES)
    assert all(n["spec"]["taints"] == [dt.TAINT] for n in nodes.values())
    for pod in _all_pods():
        spec, scenario = pod["spec"], pod["metadata"]["labels"]["demo/scenario"]
        assert spec["schedulerName"] == dt.PROFILE
        assert dt.TOLERATION in spec["tolerations"]
        allowed = (
            {spec["nodeName"]}
            if "nodeName" in spec
            else {n for n, obj in nodes.items() if spec["nodeSelector"].items() <= obj["metadata"]["labels"].items()}
        )
        assert allowed, pod["metadata"]["name"]
        assert {dt.NODES[n][0] for n in allowed} == {scenario}, pod["metadata"]["name"]


def test_gangs_and_their_members_match() -> None:
    groups = {g["metadata"]["name"]: g["spec"] for g in dt.pod_groups("demo")}
    assert set(groups) == set(dt.GANGS)
    members: dict[str, int] = {}
    for pod in _all_pods():
        group = (pod["spec"].get("schedulingGroup") or {}).get("podGroupName")
        if group:
            members[group] = members.get(group, 0) + 1
    assert members == {g: size for g, (size, _, _) in dt.GANGS.items()}
    assert groups["elastic-job"]["schedulingPolicy"]["gang"]["minCount"] == 2  # below its 4 members
    assert groups["high-job"]["schedulingConstraints"] == {"topology": [{"key": RACK}]}
    assert set(dt.BOUND_LATER) <= {p["metadata"]["name"] for p in dt.first_wave(demo._pod)}
    assert set(dt.KEPT_OFF) <= {p["metadata"]["name"] for p in dt.second_wave(demo._pod)}


def _result(**where: str) -> dict[str, str]:
    base = {f"low-{g}-{i}": f"jl-{n}" for g, n in (("a", 1), ("b", 2)) for i in range(4)}
    return {**base, **where}


@pytest.mark.parametrize(
    ("result", "want"),
    [
        pytest.param(
            _result(**{f"low-a-{i}": "preempted" for i in range(4)}),
            ["victims: all 4 pods of gang low-a (minCount 4) for high-job's 2 CPUs; low-b untouched"],
            id="a-whole-gang",
        ),
        pytest.param(
            _result(**{"low-b-0": "preempted", "low-b-3": "preempted"}),
            ["victims: only 2 of the 4 pods (PART) of gang low-b (minCount 4) for high-job's 2 CPUs; low-a untouched"],
            id="part-of-a-gang-is-said",
        ),
        pytest.param(
            _result(**{"low-a-0": "preempted", "low-b-0": "preempted"}),
            ["NOT one gang's victims: {'low-a': ['low-a-0'], 'low-b': ['low-b-0']}"],
            id="two-gangs",
        ),
        pytest.param(_result(), ["NOT one gang's victims: no victims"], id="none"),
    ],
)
def test_preemption_lines(result: dict[str, str], want: list[str]) -> None:
    assert dt.preemption_lines(result) == want


@pytest.mark.parametrize(
    ("where", "want"),
    [
        pytest.param(
            ["el-1", "el-1", "el-2", "el-2"],
            "elastic-job-0, elastic-job-1 at once on el-1 (minCount 2); elastic-job-2, elastic-job-3 on el-2 once "
            "the resident left it: all in rack el-r1, none on el-3 (rack el-r2), free all along",
            id="in-its-rack",
        ),
        pytest.param(
            ["el-1", "el-1", "el-3", "pending: ..."],
            "NOT in one rack: elastic-job-0 -> el-1, elastic-job-1 -> el-1, elastic-job-2 -> el-3, "
            "elastic-job-3 -> pending: ...",
            id="an-extra-escaped",
        ),
    ],
)
def test_elastic_lines(where: list[str], want: str) -> None:
    assert dt.elastic_lines({f"elastic-job-{i}": n for i, n in enumerate(where)}) == [want]


BEFORE = {"frag-1-a": "defrag-1", "frag-2-b": "defrag-2", "frag-3-c": "defrag-3", "frag-3-d": "defrag-3"}


def _plan(**over: Any) -> dict[str, Any]:
    moves = [
        {"unit": "demo/frag-1-a", "priority": 0, "pods": [{"pod": "demo/frag-1-a", "node": "defrag-1"}]},
        {"unit": "demo/frag-2-b", "priority": 0, "pods": [{"pod": "demo/frag-2-b", "node": "defrag-2"}]},
    ]
    plan = {
        "shape": "pod demo/defrag-job-0 (gang defrag-job, 2 pending)",
        "feasible": True,
        "verified": True,
        "targets": {"defrag-1": 1, "defrag-2": 1},
        "freedNodes": ["defrag-1", "defrag-2"],
        "moves": moves,
        "execution": {"evicted": ["demo/frag-1-a", "demo/frag-2-b"], "skipped": [], "stopped": ""},
    }
    return {**plan, **over}


@pytest.mark.parametrize(
    ("plan", "want"),
    [
        pytest.param(_plan(), [], id="valid"),
        pytest.param(_plan(verified=False), ["not feasible and verified"], id="unverified"),
        pytest.param(
            _plan(moves=[{"unit": "u", "priority": 0, "pods": [{"pod": "demo/frag-3-c", "node": "defrag-1"}]}]),
            [
                "demo/frag-3-c is not a fragment pod on defrag-1",
                "execution {'evicted': ['demo/frag-1-a', 'demo/frag-2-b'], 'skipped': [], 'stopped': ''} "
                "did not evict exactly ['demo/frag-3-c']",
            ],
            id="a-move-off-the-wrong-node",
        ),
        pytest.param(
            _plan(targets={"defrag-1": 1, "defrag-3": 1}),
            ["targets {'defrag-1': 1, 'defrag-3': 1} are not the freed nodes ['defrag-1', 'defrag-2']"],
            id="a-target-not-freed",
        ),
        pytest.param(
            _plan(execution={"evicted": ["demo/frag-1-a"], "skipped": [], "stopped": "refused"}),
            [
                "execution {'evicted': ['demo/frag-1-a'], 'skipped': [], 'stopped': 'refused'} "
                "did not evict exactly ['demo/frag-1-a', 'demo/frag-2-b']"
            ],
            id="execution-stopped",
        ),
        pytest.param(
            _plan(moves=[], targets={}, freedNodes=[], execution={"evicted": [], "stopped": ""}),
            ["no moves (the shape should not fit before them)"],
            id="no-moves",
        ),
    ],
)
def test_check_plan(plan: dict[str, Any], want: list[str]) -> None:
    assert dt.check_plan(plan, BEFORE) == want


def test_defrag_lines_name_the_moves_and_where_the_moved_pods_went() -> None:
    run = dt.DefragRun(_plan(), BEFORE)
    now = {"frag-3-c": "defrag-3", "frag-3-d": "defrag-3", "frag-1-x": "defrag-3", "frag-2-y": ""}
    assert dt.defrag_lines(run, now) == [
        "custom-scheduler defrag --pod demo/defrag-job-0 --execute: "
        "shape pod demo/defrag-job-0 (gang defrag-job, 2 pending)",
        "plan: move demo/frag-1-a (defrag-1), demo/frag-2-b (defrag-2); frees defrag-1, defrag-2; "
        "verified by the offline framework",
        "executed: 2 eviction(s)",
        "re-created by their ReplicaSets: frag-1-x -> defrag-3, frag-2-y -> pending",
    ]
    assert dt.defrag_lines(dt.DefragRun(), {}) == ["NO PLAN: defrag did not run"]


def test_reservation_lines_quote_the_event_and_the_annotation() -> None:
    events = [
        {"reason": "Reserved", "regarding": {"kind": "PodGroup", "name": "res-job"}, "note": "reserved gpu=4"},
        {"reason": "Reserved", "regarding": {"kind": "PodGroup", "name": "other"}, "note": "not ours"},
        {"reason": "Scheduled", "regarding": {"kind": "PodGroup", "name": "res-job"}, "note": "not a reservation"},
    ]
    lines = dt.reservation_lines('{"version":1}', events)
    assert lines[1:] == [
        "Reserved event on PodGroup res-job: reserved gpu=4",
        'PodGroup res-job annotation custom-scheduler.io/reservation: {"version":1}',
    ]
    assert dt.reservation_lines(None, [])[-1].endswith("custom-scheduler.io/reservation: (none)")
