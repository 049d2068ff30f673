"""The recorder without an API server: inputs become entries in arrival order, "bound by whom",
the shadow's comparison and its metric, and the in-memory bound."""

from __future__ import annotations

import prometheus_client as prom

from custom_scheduler.api.model import Pod
from custom_scheduler.core import decision_record as dr
from custom_scheduler.core.algorithm import ScheduleResult
from custom_scheduler.core.decision import Decision
from custom_scheduler.framework.scoring import ScoredNode
from custom_scheduler.server import decision_log
from custom_scheduler.server.decision_log import DecisionLog
from tests.builders import make_pod

PROFILE = "custom-scheduler"


def pod(name: str, node: str = "") -> Pod:
    b = make_pod(name, "ns").uid(f"uid-{name}").scheduler(PROFILE)
    return (b.node(node) if node else b).build()


def recorder(*, shadow: bool, registry: prom.CollectorRegistry | None = None) -> DecisionLog:
    log = DecisionLog(
        None,
        shadow=shadow,
        profiles=lambda: {PROFILE},
        profile_of=lambda uid: PROFILE,
        registry=registry,
        clock=lambda: 100.0,
    )
    log.active = True  # as run() sets it on the replica that schedules
    return log


def scheduled(name: str, node: str, scores: dict[str, int]) -> Decision:
    res = ScheduleResult(node, 2, 2, [ScoredNode(n, s, weighted={"Fit": s}) for n, s in scores.items()])
    return Decision(f"ns/{name}", "scheduled", node, uid=f"uid-{name}", schedule=res)


def test_the_daemon_records_its_decision_and_who_bound_the_pod() -> None:
    log = recorder(shadow=False)
    log.on_decision(scheduled("a", "n1", {"n1": 80, "n2": 20}))
    log.on_decision(Decision("ns/skip", "skipped", uid="uid-skip"))
    log.pod_updated(pod("a"), pod("a", "n1"))
    log.pod_updated(pod("b"), pod("b", "n2"))  # ours by profile, bound by someone else
    log.pod_updated(pod("a", "n1"), pod("a", "n1"))  # not a binding
    got = log.drain()
    assert [(e["e"], e["k"], e.get("n"), e.get("by")) for e in got] == [
        ("scheduled", "ns/a", "n1", None),
        ("bound", "ns/a", "n1", PROFILE),
        ("bound", "ns/b", "n2", "another binder"),
    ]
    assert log.drain() == []  # drained once


def test_a_pod_listed_already_bound_counts_only_when_we_decided_it() -> None:
    log = recorder(shadow=False)
    log.pod_added(pod("old", "n1"))
    log.on_decision(scheduled("new", "n1", {"n1": 1}))
    log.drain()
    log.pod_added(pod("new", "n1"))  # a relist after our decision
    assert [e["k"] for e in log.drain()] == ["ns/new"]


def test_the_shadow_compares_with_the_real_binding_and_counts_it() -> None:
    registry = prom.CollectorRegistry()
    log = recorder(shadow=True, registry=registry)
    log.init_metric()
    log.on_decision(scheduled("same", "n1", {"n1": 80, "n2": 20}))
    log.on_decision(scheduled("other", "n1", {"n1": 80, "n2": 20}))
    log.on_decision(Decision("ns/big", "unschedulable", message="0/2 nodes are available", uid="uid-big"))
    for name, node in (("same", "n1"), ("other", "n2"), ("big", "n2"), ("early", "n1")):
        log.pod_updated(pod(name), pod(name, node))
    shadows = [e for e in log.drain() if e["e"] == "shadow"]
    assert [(e["k"], e["res"]) for e in shadows] == [
        ("ns/same", dr.AGREE),
        ("ns/other", dr.DISAGREE),
        ("ns/big", dr.SHADOW_UNSCHEDULABLE),
        ("ns/early", dr.MISSED),
    ]
    assert shadows[1]["why"] == "shadow scored n1 80 vs n2 20: Fit 80 vs 20"

    def count(result: str) -> float | None:
        return registry.get_sample_value(
            "custom_scheduler_shadow_decisions_total", {"profile": PROFILE, "result": result}
        )

    assert [count(r) for r in dr.SHADOW_RESULTS] == [1.0, 1.0, 1.0, 1.0]


def test_memory_and_buffer_stay_bounded() -> None:
    log = recorder(shadow=True)
    log.capacity = 5
    for i in range(decision_log.SHADOW_MEMORY + 10):
        log.on_decision(scheduled(f"p{i}", "n1", {"n1": 1}))
    log.drain()
    assert len(log._decided) == decision_log.SHADOW_MEMORY
    assert len(log._buffer) == 5
    assert log.dropped == decision_log.SHADOW_MEMORY + 5


def test_a_standby_queues_nothing_for_the_recorder_it_does_not_run() -> None:
    log = DecisionLog(None, shadow=False, profiles=lambda: {PROFILE}, profile_of=lambda uid: PROFILE)
    log.pod_updated(pod("a"), pod("a", "n1"))  # the leader's binding, seen by a standby's informer
    assert log.drain() == []
