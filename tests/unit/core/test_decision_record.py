"""The decision record's pure parts: entries made from decisions, the ring's encoding and bounds,
a shadow decision compared with the real binding, and the agreement per profile."""

from __future__ import annotations

import pytest

from custom_scheduler.core import decision_record as dr
from custom_scheduler.core import decision_store as ds
from custom_scheduler.core.algorithm import ScheduleResult
from custom_scheduler.core.decision import Decision
from custom_scheduler.framework.interface import PostFilterResult
from custom_scheduler.framework.scoring import ScoredNode
from custom_scheduler.framework.types import Status
from tests.builders import make_pod


def scored(name: str, **weighted: int) -> ScoredNode:
    return ScoredNode(name, sum(weighted.values()), weighted=dict(weighted))


def bound_decision(node: str, *scores: ScoredNode, statuses: dict[str, Status] | None = None) -> Decision:
    res = ScheduleResult(node, evaluated=len(scores) + len(statuses or {}), feasible=len(scores), scores=list(scores))
    res.statuses = statuses or {}
    return Decision("ns/p", "scheduled", node, uid="u1", schedule=res)


def test_a_scheduled_decision_keeps_the_node_its_top_plugins_and_the_runner_up() -> None:
    d = bound_decision(
        "n1",
        scored("n1", Fit=90, Balanced=80, Spread=10, Affinity=5),
        scored("n2", Fit=50, Balanced=60),
        scored("n3", Fit=10),
    )
    [e] = dr.decision_entries(d, t=12.3456, profile="prof")
    assert e == {
        "t": 12.346,
        "k": "ns/p",
        "u": "u1",
        "p": "prof",
        "e": "scheduled",
        "n": "n1",
        "f": 3,
        "v": 3,
        "s": 185,
        "top": [["Fit", 90], ["Balanced", 80], ["Spread", 10]],
        "ru": {"n": "n2", "s": 110, "top": [["Balanced", 60], ["Fit", 50]]},
    }


def test_without_score_detail_only_the_node_and_counts_are_kept() -> None:
    d = Decision("ns/p", "scheduled", "n1", uid="u1", schedule=ScheduleResult("n1", 10, 4, []))
    [e] = dr.decision_entries(d, t=1, profile="p")
    assert (e["n"], e["f"], e["v"]) == ("n1", 4, 10)
    assert "top" not in e
    assert "ru" not in e


def test_an_unschedulable_decision_counts_reasons_per_plugin_and_records_its_victims() -> None:
    victim = make_pod("low", "ns").uid("v1").build()
    statuses = {
        "n1": Status.unschedulable("Insufficient cpu").with_plugin("NodeResourcesFit"),
        "n2": Status.unschedulable("Insufficient cpu").with_plugin("NodeResourcesFit"),
        "n3": Status.unresolvable("node(s) had untolerated taint(s)").with_plugin("TaintToleration"),
    }
    post = PostFilterResult(Status(), nominated_node_name="n2", victims=(victim,))
    d = Decision(
        "ns/p", "unschedulable", message="0/3 nodes are available", post_filter=post, uid="u1", statuses=statuses
    )
    e, preempted = dr.decision_entries(d, t=5, profile="prof")
    assert e["why"] == {
        "NodeResourcesFit": {"Insufficient cpu": 2},
        "TaintToleration": {"node(s) had untolerated taint(s)": 1},
    }
    assert (e["nom"], e["victims"]) == ("n2", ["ns/low"])
    assert preempted == {
        "t": 5,
        "k": "ns/low",
        "u": "v1",
        "p": victim.scheduler_name,
        "e": "preempted",
        "by": "ns/p",
        "n": "n2",
    }


@pytest.mark.parametrize(
    ("decision", "expected"),
    [
        (Decision("ns/p", "skipped", uid="u"), []),
        (Decision("ns/p", "error", message="x" * 5000, uid="u"), ["error"]),
        (Decision("ns/p", "waiting", "n1", uid="u"), ["waiting"]),
    ],
    ids=["skipped says nothing", "error message cut", "waiting on Permit"],
)
def test_which_decisions_make_entries(decision: Decision, expected: list[str]) -> None:
    got = dr.decision_entries(decision, t=0, profile="p")
    assert [e["e"] for e in got] == expected
    assert all(len(e.get("m", "")) <= dr.MAX_MESSAGE for e in got)


def test_compare_agree_disagree_by_scores_unschedulable_and_missed() -> None:
    d = bound_decision("n1", scored("n1", Fit=90, Balanced=50), scored("n2", Fit=40, Balanced=60))
    assert dr.compare(dr.shadow_view(d), "n1").result == dr.AGREE
    out = dr.compare(dr.shadow_view(d), "n2")
    assert (out.result, out.shadow_node, out.real_node) == (dr.DISAGREE, "n1", "n2")
    assert out.plugins == [["Fit", 90, 40], ["Balanced", 50, 60]]
    assert out.reason == "shadow scored n1 140 vs n2 100: Fit 90 vs 40, Balanced 50 vs 60"
    unsched = Decision("ns/p", "unschedulable", message="0/2 nodes are available", uid="u1")
    assert (dr.compare(dr.shadow_view(unsched), "n2").result, dr.compare(dr.shadow_view(unsched), "n2").reason) == (
        dr.SHADOW_UNSCHEDULABLE,
        "0/2 nodes are available",
    )
    assert dr.compare(None, "n2").result == dr.MISSED


def test_a_disagreement_on_a_node_the_shadow_rejected_or_never_scored_says_so() -> None:
    taint = Status.unresolvable("node(s) had untolerated taint(s)").with_plugin("TaintToleration")
    d = bound_decision("n1", scored("n1", Fit=90), statuses={"n3": taint})
    assert (
        dr.compare(dr.shadow_view(d), "n3").reason
        == "n3 is infeasible for the shadow: TaintToleration: node(s) had untolerated taint(s)"
    )
    assert "not among the 1 feasible nodes" in dr.compare(dr.shadow_view(d), "n9").reason


def test_agreement_counts_each_pod_once_per_profile_and_lists_the_others() -> None:
    def shadow(uid: str, res: str, profile: str = "a") -> dr.Entry:
        return dr.ShadowOutcome(res, "n1", "n2", "why").entry(t=1, key=f"ns/{uid}", uid=uid, profile=profile)

    entries = [
        shadow("1", dr.AGREE),
        shadow("2", dr.DISAGREE),
        shadow("2", dr.DISAGREE),  # compared again after a restart: counts once
        shadow("3", dr.SHADOW_UNSCHEDULABLE),
        shadow("4", dr.MISSED),
        shadow("5", dr.AGREE, profile="b"),
        {"e": "bound", "k": "ns/6", "u": "6"},
    ]
    got = dr.agreement(entries)
    assert sorted(got) == ["a", "b"]
    a = got["a"]
    assert (a.counts[dr.AGREE], a.counts[dr.DISAGREE], a.counts[dr.SHADOW_UNSCHEDULABLE], a.counts[dr.MISSED]) == (
        1,
        1,
        1,
        1,
    )
    assert a.compared == 3
    assert a.agreement == pytest.approx(1 / 3)
    assert [e["u"] for e in a.disagreements] == ["2", "3"]
    assert got["b"].agreement == 1.0


def test_batches_round_trip_and_corrupt_data_is_skipped() -> None:
    entries = [{"k": f"ns/p{i}", "e": "bound", "n": "n1"} for i in range(50)]
    assert ds.decode(ds.encode(entries)) == entries
    assert ds.decode(b"not gzip") == []
    import gzip

    assert ds.decode(gzip.compress(b'{"k":"a"}\nnot json\n[1]\n{"k":"b"}')) == [{"k": "a"}, {"k": "b"}]


def test_chunks_respect_the_entry_and_byte_bounds() -> None:
    import random

    rng = random.Random(1)
    entries = [{"k": f"ns/p{i}", "m": "".join(rng.choice("abcdef") for _ in range(200))} for i in range(400)]
    got = ds.chunks(entries, max_entries=150, max_bytes=8192)
    assert all(n <= 150 and len(blob) <= 8192 for blob, n in got)
    assert [e for blob, _ in got for e in ds.decode(blob)] == entries  # nothing lost, order kept
    assert ds.chunks([{"m": "".join(rng.choice("abcdef") for _ in range(40000))}], 10, 4096) == []  # too big alone


@pytest.mark.parametrize(
    ("text", "shadow", "expected"),
    [
        (None, False, ("kube-system", "custom-scheduler-decisions")),
        ("", False, ("kube-system", "custom-scheduler-decisions")),
        (None, True, ("kube-system", "custom-scheduler-shadow-decisions")),
        ("ops/my-ring", False, ("ops", "my-ring")),
        ("off", False, None),
    ],
)
def test_parse_ring_ref(text: str | None, shadow: bool, expected: tuple[str, str] | None) -> None:
    cfg = ds.parse_ring_ref(text, shadow=shadow)
    assert (None if cfg is None else (cfg.namespace, cfg.name)) == expected


@pytest.mark.parametrize("text", ["no-slash", "/name", "ns/", "NS/name", "ns/Bad_Name"])
def test_parse_ring_ref_refuses_bad_references_with_a_message(text: str) -> None:
    with pytest.raises(ValueError, match="decision record"):
        ds.parse_ring_ref(text)


def test_a_shadow_keeps_plugin_detail_for_its_best_nodes_and_totals_for_all() -> None:
    nodes = [scored(f"n{i:02d}", Fit=100 - i) for i in range(dr.DETAIL_NODES + 8)]
    view = dr.shadow_view(bound_decision("n00", *nodes))
    assert len(view.totals) == len(nodes)
    assert sorted(view.weighted) == [f"n{i:02d}" for i in range(dr.DETAIL_NODES)]
    last = f"n{len(nodes) - 1:02d}"
    out = dr.compare(view, last)
    assert out.reason == f"shadow scored n00 100 vs {last} 61 ({last} not among its 32 best: no per-plugin detail kept)"
