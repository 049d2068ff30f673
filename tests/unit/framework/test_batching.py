"""Opportunistic batching's bookkeeping (upstream's OpportunisticBatch, batch.go at v1.37.2): when
the previous pod's ranking is offered, and why it is dropped."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from custom_scheduler.framework import batching as b

SIG = (("schedulerName", "s"), ("resources", (100,)))
OTHER = (("schedulerName", "s"), ("resources", (200,)))


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def stored(
    clock: Clock, ranking: Sequence[tuple[str, int]] = (("b", 90), ("c", 80), ("d", 80))
) -> b.OpportunisticBatch:
    """A batch after pod 1 of cycle 1 went to node a, with the others ranked."""
    batch = b.OpportunisticBatch(clock=clock)
    batch.store(SIG, "", "a", ranking, 1)
    return batch


def rejected(name: str) -> bool | None:
    return False  # the last chosen node is full for the next pod


def no_rescore(names: Sequence[str]) -> dict[str, int] | None:
    raise AssertionError("rescoring only when the last chosen node still fits")


def test_the_best_remaining_node_is_the_hint_and_is_popped() -> None:
    clock = Clock()
    batch = stored(clock)
    assert batch.hint(SIG, False, 2, rejected, no_rescore) == "b"
    batch.store(SIG, "b", "b", [], 2)
    assert batch.attempts[b.HINT_USED] == 1
    # ties on the total go by name: c before d
    assert batch.hint(SIG, False, 3, rejected, no_rescore) == "c"


def test_the_last_chosen_node_that_still_fits_is_rescored_into_the_ranking() -> None:
    clock = Clock()
    batch = stored(clock)

    def rescore(names: Sequence[str]) -> dict[str, int]:
        assert sorted(names) == ["a", "b", "c", "d"]
        return {"a": 95, "b": 90, "c": 80, "d": 80}

    assert batch.hint(SIG, False, 2, lambda n: True, rescore) == "a"


@pytest.mark.parametrize(
    ("signature", "nominated", "cycle", "age", "reason"),
    [
        pytest.param(SIG, False, 3, 0.0, b.FLUSH_POD_SKIPPED, id="not-the-next-cycle"),
        pytest.param(SIG, True, 2, 0.0, b.FLUSH_POD_NOMINATED, id="nominated"),
        pytest.param(OTHER, False, 2, 0.0, b.FLUSH_POD_INCOMPATIBLE, id="another-signature"),
        pytest.param(None, False, 2, 0.0, b.FLUSH_POD_INCOMPATIBLE, id="not-signable"),
        pytest.param(SIG, False, 2, b.MAX_AGE + 0.01, b.FLUSH_EXPIRED, id="too-old"),
    ],
)
def test_no_hint_and_a_flush(
    signature: b.Signature | None, nominated: bool, cycle: int, age: float, reason: str
) -> None:
    clock = Clock()
    batch = stored(clock)
    clock.now += age
    assert batch.hint(signature, nominated, cycle, rejected, no_rescore) == ""
    assert batch.flushes == {reason: 1}
    assert batch.attempts[b.NO_HINT] == 1
    assert batch.hint(SIG, False, cycle + 1, rejected, no_rescore) == ""  # the ranking is gone


def test_a_failed_pod_ends_the_batch() -> None:
    batch = stored(Clock())
    batch.failed(2)
    assert batch.hint(SIG, False, 3, rejected, no_rescore) == ""
    assert batch.flushes == {b.FLUSH_POD_FAILED: 1}


def test_an_unused_hint_replaces_the_ranking_with_the_new_search() -> None:
    batch = stored(Clock())
    assert batch.hint(SIG, False, 2, rejected, no_rescore) == "b"
    batch.store(SIG, "b", "x", [("y", 10)], 2)  # the hint failed its filter: a full search chose x
    assert batch.attempts[b.HINT_NOT_USED] == 1
    assert batch.hint(SIG, False, 3, rejected, no_rescore) == "y"


def test_filter_errors_and_missing_nodes_flush() -> None:
    batch = stored(Clock())
    assert batch.hint(SIG, False, 2, lambda n: None, no_rescore) == ""
    assert batch.flushes == {b.FLUSH_FILTER_ERROR: 1}
    batch = stored(Clock())
    assert batch.hint(SIG, False, 2, lambda n: True, lambda names: {}) == ""
    assert batch.flushes == {b.FLUSH_NODE_MISSING: 1}


def test_an_unsignable_pod_or_an_empty_ranking_keeps_nothing() -> None:
    batch = b.OpportunisticBatch(clock=Clock())
    batch.store(None, "", "a", [("b", 1)], 1)
    batch.store(SIG, "", "a", [], 2)
    assert batch.flushes == {b.FLUSH_POD_NOT_BATCHABLE: 1, b.FLUSH_EMPTY_LIST: 1}
    assert batch.hint(SIG, False, 3, rejected, no_rescore) == ""


# -- the Signer: which plugins sign, in which order -------------------------------------------------
class FakeSigner:
    """A plugin's signing side: refuses pods named in ``refuses``; records each call."""

    def __init__(self, name: str, calls: list[str], *, refuses: str = "", may_refuse: bool = False) -> None:
        self.name, self._calls, self._refuses = name, calls, refuses
        self.may_refuse_signing = may_refuse

    def sign_pod(self, pod: object) -> list[tuple[str, object]] | None:
        self._calls.append(self.name)
        return None if getattr(pod, "name", "") == self._refuses else [(self.name, 1)]


class AllRefusing(FakeSigner):
    signs_no_pod = True


class NoSignPod:
    name = "OutOfTree"


class P:
    scheduler_name, name = "s", "p"


def test_a_plugin_that_may_refuse_is_asked_first_and_a_refusal_costs_no_other_fragments() -> None:
    calls: list[str] = []
    signer = b.Signer([FakeSigner("Fit", calls), FakeSigner("Spread", calls, refuses="p", may_refuse=True)])
    assert signer.enabled
    assert signer.sign(P()) is None
    assert calls == ["Spread"]


def test_the_signature_does_not_depend_on_the_order_plugins_sign_in() -> None:
    calls: list[str] = []
    a, c = FakeSigner("A", calls), FakeSigner("C", calls, may_refuse=True)
    assert b.Signer([a, c]).sign(P()) == b.Signer([c, a]).sign(P()) == (("A", 1), ("C", 1), ("schedulerName", "s"))


def test_a_plugin_that_refuses_every_pod_makes_signing_answer_at_once() -> None:
    calls: list[str] = []
    signer = b.Signer([FakeSigner("Fit", calls), AllRefusing("PodTopologySpread", calls)])
    assert signer.enabled
    assert signer.refuse_all == ["PodTopologySpread"]
    assert signer.sign(P()) is None
    assert calls == []


def test_a_plugin_without_sign_pod_turns_batching_off() -> None:
    calls: list[str] = []
    signer = b.Signer([FakeSigner("Fit", calls), NoSignPod()])
    assert not signer.enabled
    assert signer.unsigned == ["OutOfTree"]
    assert signer.sign(P()) is None
    assert calls == []
