"""``why`` and ``shadow-report`` as text and data, from entries (no cluster): every kind of entry
says what it recorded, and "nothing recorded" says so."""

from __future__ import annotations

from custom_scheduler.core import decision_record as dr
from custom_scheduler.core.decision_store import RingConfig
from custom_scheduler.tools.shadow_report import shadow_report, shadow_text
from custom_scheduler.tools.why import detail_lines, why_report, why_text

CFG = RingConfig(namespace="kube-system", name="decisions")
T0 = 1764770000.0  # 2025-12-03T13:53:20Z

ENTRIES: list[dr.Entry] = [
    {
        "t": T0,
        "k": "ns/web",
        "u": "u1",
        "p": "custom-scheduler",
        "e": "unschedulable",
        "m": "0/3 nodes are available: 3 Insufficient cpu. preemption: ...",
        "why": {"NodeResourcesFit": {"Insufficient cpu": 3}},
        "nom": "n2",
        "victims": ["ns/low"],
    },
    {"t": T0, "k": "ns/low", "u": "u9", "p": "custom-scheduler", "e": "preempted", "by": "ns/web", "n": "n2"},
    {
        "t": T0 + 5,
        "k": "ns/web",
        "u": "u1",
        "p": "custom-scheduler",
        "e": "scheduled",
        "n": "n2",
        "f": 2,
        "v": 3,
        "s": 170,
        "top": [["NodeResourcesFit", 90], ["NodeResourcesBalancedAllocation", 80]],
        "ru": {"n": "n1", "s": 120, "top": [["NodeResourcesFit", 60]]},
    },
    {"t": T0 + 6, "k": "ns/web", "u": "u1", "p": "custom-scheduler", "e": "bound", "n": "n2", "by": "custom-scheduler"},
]


def test_why_lists_a_pods_attempts_in_order_with_their_detail() -> None:
    rep = why_report("ns/web", ENTRIES, CFG, "the pod does not exist (deleted)")
    assert rep["found"]
    assert [e["e"] for e in rep["decisions"]] == ["unschedulable", "scheduled", "bound"]
    text = why_text(rep)
    assert text.splitlines()[0] == "ns/web: 3 recorded, from kube-system/decisions"
    for line in (
        "NodeResourcesFit: Insufficient cpu (3 nodes)",
        "preemption: nominated n2, preempting ns/low",
        "node n2 (score 170: NodeResourcesFit 90, NodeResourcesBalancedAllocation 80)",
        "2 feasible of 3 evaluated",
        "runner-up n1 (score 120: NodeResourcesFit 60)",
        "bound to n2 by custom-scheduler",
        "2025-12-03T13:53:20Z",
        "Now: the pod does not exist (deleted).",
    ):
        assert line in text


def test_why_says_who_preempted_a_victim() -> None:
    assert detail_lines(ENTRIES[1]) == ["preempted on n2 by ns/web"]


def test_why_says_clearly_when_nothing_is_recorded() -> None:
    text = why_text(why_report("ns/other", ENTRIES, CFG, None))
    assert text.startswith("No decision recorded for ns/other in kube-system/decisions (it holds 4 entries since ")
    assert "not scheduled by custom-scheduler" in text
    empty = why_text(why_report("ns/other", [], CFG, "pending (not bound)"))
    assert "holds" not in empty
    assert empty.endswith("Now: pending (not bound).\n")


def test_shadow_report_counts_per_profile_and_lists_the_pods_placed_otherwise() -> None:
    def shadow(n: int, res: str, profile: str = "a") -> dr.Entry:
        out = dr.ShadowOutcome(res, "n1", "n2", f"reason {n}")
        return out.entry(t=T0 + n, key=f"ns/p{n}", uid=f"u{n}", profile=profile)

    entries = [shadow(1, dr.AGREE), shadow(2, dr.DISAGREE), shadow(3, dr.AGREE), shadow(4, dr.AGREE, "b")]
    rep = shadow_report(entries, CFG)
    assert [(p["profile"], p["compared"], p["agree"], p["disagree"], p["agreement"]) for p in rep["profiles"]] == [
        ("a", 3, 2, 1, 0.6667),
        ("b", 1, 1, 0, 1.0),
    ]
    text = shadow_text(rep)
    assert "66.7%" in text
    assert "ns/p2" in text
    assert "reason 2" in text
    assert [p["profile"] for p in shadow_report(entries, CFG, profile="b")["profiles"]] == ["b"]
    assert shadow_text(shadow_report([], CFG)).startswith("No shadow comparisons in kube-system/decisions")


def test_why_says_when_scores_were_not_recorded() -> None:
    plain = {"e": "scheduled", "n": "n2", "f": 3, "v": 3}
    assert detail_lines(plain) == [
        "node n2",
        "3 feasible of 3 evaluated",
        "scores and runner-up not recorded (the daemon runs with --decision-record-scores off)",
    ]
    assert detail_lines({**plain, "f": 1}) == ["node n2", "1 feasible of 3 evaluated"]  # nothing was scored
