"""PrioritySort, NodeName and NodeUnschedulable: the small plugins, one table each."""

from __future__ import annotations

import pytest

from custom_scheduler.framework.types import SUCCESS, CycleState, Status
from custom_scheduler.plugins import node_name, node_unschedulable, priority_sort
from tests.builders import PodBuilder, make_node, make_pod
from tests.unit.plugins.support import bare, fake_handle, node_info


@pytest.mark.parametrize(
    ("a_priority", "a_ts", "b_priority", "b_ts", "want"),
    [
        pytest.param(10, 2.0, 5, 1.0, True, id="higher-priority-first-despite-later-timestamp"),
        pytest.param(5, 1.0, 10, 2.0, False, id="lower-priority-after"),
        pytest.param(7, 1.0, 7, 2.0, True, id="equal-priority-earlier-timestamp-first"),
        pytest.param(7, 2.0, 7, 1.0, False, id="equal-priority-later-timestamp-after"),
        pytest.param(7, 1.0, 7, 1.0, False, id="identical-is-not-less"),
        pytest.param(-1, 1.0, 0, 9.0, False, id="negative-priority-after-default"),
    ],
)
def test_priority_sort_less(a_priority: int, a_ts: float, b_priority: int, b_ts: float, want: bool) -> None:
    pl = priority_sort.PrioritySort(None, fake_handle())
    a = make_pod("a").priority(a_priority).build()
    b = make_pod("b").priority(b_priority).build()
    assert pl.less(a, a_ts, b, b_ts) is want


@pytest.mark.parametrize(
    ("pod_node", "node", "want"),
    [
        pytest.param("", "foo", SUCCESS, id="no-host-specified"),
        pytest.param("foo", "foo", SUCCESS, id="host-matches"),
        pytest.param("bar", "foo", Status.unresolvable(node_name.ERR_REASON), id="host-does-not-match"),
    ],
)
def test_node_name_filter(pod_node: str, node: str, want: Status) -> None:
    b = bare()
    if pod_node:
        b.node(pod_node)
    pl = node_name.NodeName(None, fake_handle())
    assert pl.filter(CycleState(), b.build(), node_info(make_node(node).build())) == want
    assert node_name.ERR_REASON == "node(s) didn't match the requested node name"


UNSCHEDULABLE = Status.unresolvable("node(s) were unschedulable")


@pytest.mark.parametrize(
    ("pod", "unschedulable", "want"),
    [
        pytest.param(bare(), True, UNSCHEDULABLE, id="cordoned-node-rejects-pod"),
        pytest.param(bare(), False, SUCCESS, id="normal-node-accepts-pod"),
        pytest.param(
            bare().toleration("node.kubernetes.io/unschedulable", effect="NoSchedule", operator="Equal"),
            True,
            SUCCESS,
            id="toleration-with-empty-value-tolerates-cordon",
        ),
        pytest.param(
            bare().toleration("node.kubernetes.io/unschedulable", operator="Exists"),
            True,
            SUCCESS,
            id="exists-toleration-any-effect-tolerates-cordon",
        ),
        pytest.param(bare().toleration(operator="Exists"), True, SUCCESS, id="tolerate-everything"),
        pytest.param(
            bare().toleration("node.kubernetes.io/unschedulable", effect="NoExecute", operator="Exists"),
            True,
            UNSCHEDULABLE,
            id="wrong-effect-does-not-tolerate",
        ),
    ],
)
def test_node_unschedulable_filter(pod: PodBuilder, unschedulable: bool, want: Status) -> None:
    pl = node_unschedulable.NodeUnschedulable(None, fake_handle())
    node = make_node("n1").unschedulable(unschedulable).build()
    assert pl.filter(CycleState(), pod.build(), node_info(node)) == want


def test_node_unschedulable_without_node_object() -> None:
    pl = node_unschedulable.NodeUnschedulable(None, fake_handle())
    got = pl.filter(CycleState(), bare().build(), node_info(None))
    assert got == Status.unresolvable("node(s) had unknown conditions")
