"""TaintToleration: kube-scheduler's filter and score tables, plus normalisation properties."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from custom_scheduler.framework.types import SUCCESS, Code, CycleState, NodeScore, Status
from custom_scheduler.plugins import taint_toleration
from tests.builders import NodeBuilder, PodBuilder, make_node
from tests.unit.plugins.support import bare, fake_handle, node_info, scores


def pod_tolerating(*tolerations: tuple[str, str, str, str]) -> PodBuilder:
    """Tolerations as (key, operator, value, effect)."""
    b = bare()
    for key, op, value, effect in tolerations:
        b.toleration(key, value, effect, op)
    return b


def node_tainted(name: str, *taints: tuple[str, str, str]) -> NodeBuilder:
    """Taints as (key, value, effect)."""
    b = make_node(name)
    for key, value, effect in taints:
        b.taint(key, value, effect)
    return b


def untolerated(key: str, value: str) -> Status:
    """The rejection for an untolerated ``key=value`` taint: since v1.35 the reason does not name it
    (taints may be sensitive), so ``key`` and ``value`` only document the case."""
    del key, value
    return Status.unresolvable("node(s) had untolerated taint(s)")


@pytest.mark.parametrize(
    ("pod", "node", "want"),
    [
        pytest.param(
            pod_tolerating(),
            node_tainted("a", ("dedicated", "user1", "NoSchedule")),
            untolerated("dedicated", "user1"),
            id="no-tolerations-cannot-land-on-tainted-node",
        ),
        pytest.param(
            pod_tolerating(("dedicated", "Equal", "user1", "NoSchedule")),
            node_tainted("a", ("dedicated", "user1", "NoSchedule")),
            SUCCESS,
            id="matching-toleration",
        ),
        pytest.param(
            pod_tolerating(("dedicated", "Equal", "user2", "NoSchedule")),
            node_tainted("a", ("dedicated", "user1", "NoSchedule")),
            untolerated("dedicated", "user1"),
            id="value-mismatch",
        ),
        pytest.param(
            pod_tolerating(("foo", "Exists", "", "NoSchedule")),
            node_tainted("a", ("foo", "bar", "NoSchedule")),
            SUCCESS,
            id="exists-operator-tolerates-any-value",
        ),
        pytest.param(
            pod_tolerating(("dedicated", "Equal", "user2", "NoSchedule"), ("foo", "Exists", "", "NoSchedule")),
            node_tainted("a", ("dedicated", "user2", "NoSchedule"), ("foo", "bar", "NoSchedule")),
            SUCCESS,
            id="multiple-taints-all-tolerated",
        ),
        pytest.param(
            pod_tolerating(("foo", "Equal", "bar", "PreferNoSchedule")),
            node_tainted("a", ("foo", "bar", "NoSchedule")),
            untolerated("foo", "bar"),
            id="effect-mismatch",
        ),
        pytest.param(
            pod_tolerating(("foo", "Equal", "bar", "")),
            node_tainted("a", ("foo", "bar", "NoSchedule")),
            SUCCESS,
            id="empty-effect-tolerates-every-effect",
        ),
        pytest.param(
            pod_tolerating(("dedicated", "Equal", "user2", "NoSchedule")),
            node_tainted("a", ("dedicated", "user1", "PreferNoSchedule")),
            SUCCESS,
            id="prefer-no-schedule-taint-never-filters",
        ),
        pytest.param(
            pod_tolerating(),
            node_tainted("a", ("dedicated", "user1", "PreferNoSchedule")),
            SUCCESS,
            id="no-toleration-prefer-no-schedule-only",
        ),
        pytest.param(
            pod_tolerating(),
            node_tainted("a", ("node.kubernetes.io/not-ready", "", "NoExecute")),
            untolerated("node.kubernetes.io/not-ready", ""),
            id="no-execute-filters",
        ),
        pytest.param(
            pod_tolerating(("a", "Exists", "", "")),
            node_tainted("a", ("a", "1", "NoSchedule"), ("b", "2", "NoExecute"), ("c", "3", "NoSchedule")),
            untolerated("b", "2"),
            id="one-untolerated-taint-among-tolerated-ones",
        ),
        pytest.param(
            pod_tolerating(("", "Exists", "", "")),
            node_tainted("a", ("a", "1", "NoSchedule"), ("b", "2", "NoExecute")),
            SUCCESS,
            id="empty-key-exists-tolerates-everything",
        ),
    ],
)
def test_filter(pod: PodBuilder, node: NodeBuilder, want: Status) -> None:
    pl = taint_toleration.TaintToleration(None, fake_handle())
    assert pl.filter(CycleState(), pod.build(), node_info(node.build())) == want


def test_filter_without_node_is_an_error() -> None:
    pl = taint_toleration.TaintToleration(None, fake_handle())
    assert pl.filter(CycleState(), bare().build(), node_info(None)).code is Code.ERROR


PREFER = "PreferNoSchedule"


@pytest.mark.parametrize(
    ("pod", "nodes", "want"),
    [
        pytest.param(
            pod_tolerating(("foo", "Equal", "bar", PREFER)),
            [node_tainted("A", ("foo", "bar", PREFER)), node_tainted("B", ("foo", "blah", PREFER))],
            [100, 0],
            id="tolerated-taint-scores-higher",
        ),
        pytest.param(
            pod_tolerating(("cpu-type", "Equal", "arm64", PREFER), ("disk-type", "Equal", "ssd", PREFER)),
            [
                node_tainted("A"),
                node_tainted("B", ("cpu-type", "arm64", PREFER)),
                node_tainted("C", ("cpu-type", "arm64", PREFER), ("disk-type", "ssd", PREFER)),
            ],
            [100, 100, 100],
            id="number-of-tolerated-taints-does-not-matter",
        ),
        pytest.param(
            pod_tolerating(("foo", "Equal", "bar", PREFER)),
            [
                node_tainted("A"),
                node_tainted("B", ("cpu-type", "arm64", PREFER)),
                node_tainted("C", ("cpu-type", "arm64", PREFER), ("disk-type", "ssd", PREFER)),
            ],
            [100, 50, 0],
            id="more-intolerable-taints-lower-score",
        ),
        pytest.param(
            pod_tolerating(("cpu-type", "Equal", "arm64", "NoSchedule"), ("disk-type", "Equal", "ssd", "NoSchedule")),
            [
                node_tainted("A"),
                node_tainted("B", ("cpu-type", "arm64", "NoSchedule")),
                node_tainted("C", ("cpu-type", "arm64", PREFER), ("disk-type", "ssd", PREFER)),
            ],
            [100, 100, 0],
            id="only-prefer-no-schedule-taints-and-tolerations-count",
        ),
        pytest.param(
            pod_tolerating(),
            [node_tainted("A"), node_tainted("B", ("cpu-type", "arm64", PREFER))],
            [100, 0],
            id="default-prefers-untainted-node",
        ),
        pytest.param(
            pod_tolerating(("cpu-type", "Exists", "", "")),
            [node_tainted("A", ("cpu-type", "arm64", PREFER)), node_tainted("B", ("x", "y", PREFER))],
            [100, 0],
            id="empty-effect-toleration-counts-for-scoring",
        ),
        pytest.param(
            pod_tolerating(),
            [
                node_tainted("A", ("a", "", PREFER)),
                node_tainted("B", ("a", "", PREFER), ("b", "", PREFER), ("c", "", PREFER)),
                node_tainted("C", ("a", "", PREFER), ("b", "", PREFER)),
            ],
            [67, 0, 34],
            id="reverse-normalisation-truncates-like-go",
        ),
    ],
)
def test_score(pod: PodBuilder, nodes: list[NodeBuilder], want: list[int]) -> None:
    infos = [node_info(n.build()) for n in nodes]
    pl = taint_toleration.TaintToleration(None, fake_handle(infos))
    assert scores(pl, pod.build(), infos) == want


def test_raw_score_counts_intolerable_soft_taints() -> None:
    pl = taint_toleration.TaintToleration(None, fake_handle())
    state = CycleState()
    pod = pod_tolerating(("a", "Exists", "", PREFER)).build()
    assert pl.pre_score(state, pod, []) == SUCCESS
    ni = node_info(
        node_tainted("n", ("a", "", PREFER), ("b", "", PREFER), ("c", "", PREFER), ("d", "", "NoSchedule")).build()
    )
    assert pl.score(state, pod, ni) == 2


@given(st.lists(st.integers(min_value=0, max_value=10_000), min_size=1, max_size=50))
def test_normalized_scores_in_range_and_order_reversed(raw: list[int]) -> None:
    pl = taint_toleration.TaintToleration(None, fake_handle())
    result = [NodeScore(f"n{i}", s) for i, s in enumerate(raw)]
    assert pl.normalize_score(CycleState(), bare().build(), result) == SUCCESS
    out = [s.score for s in result]
    assert all(0 <= s <= 100 for s in out)
    for i in range(len(raw)):
        for j in range(len(raw)):
            if raw[i] <= raw[j]:
                assert out[i] >= out[j]
    if raw and min(raw) == 0:
        assert max(out) == 100
