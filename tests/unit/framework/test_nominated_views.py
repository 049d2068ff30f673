"""NominatedViews keeps a snapshot node with its nominated pods added while neither changes, and
builds it again when either does (a stale copy would filter against a node as it was)."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from custom_scheduler.api.model import Pod
from custom_scheduler.framework.nominated_views import NominatedViews
from custom_scheduler.framework.types import NodeInfo
from tests.builders import make_node, make_pod

A = make_pod("a").req(cpu="1").build()
B = make_pod("b").req(cpu="2").build()


def _node() -> NodeInfo:
    ni = NodeInfo(make_node("n").capacity(cpu="8", memory="8Gi", pods="10").build())
    ni.generation = 7
    return ni


def _same(ni: NodeInfo) -> tuple[NodeInfo, list[Pod]]:
    return ni, [A]


def _bumped(ni: NodeInfo) -> tuple[NodeInfo, list[Pod]]:
    ni.add_pod(make_pod("bound").req(cpu="3").build())
    ni.generation = 8
    return ni, [A]


def _other_pods(ni: NodeInfo) -> tuple[NodeInfo, list[Pod]]:
    return ni, [A, B]


def _other_object(ni: NodeInfo) -> tuple[NodeInfo, list[Pod]]:
    copy = ni.clone()  # a preemption dry run's copy: same name and generation
    copy.add_pod(make_pod("bound").req(cpu="3").build())
    return copy, [A]


@pytest.mark.parametrize(
    ("change", "reused", "want_milli_cpu"),
    [
        (_same, True, 1000),
        (_bumped, False, 4000),
        (_other_pods, False, 3000),
        (_other_object, False, 4000),
    ],
)
def test_the_copy_is_kept_only_while_node_and_pods_are_the_same(
    change: Callable[[NodeInfo], tuple[NodeInfo, list[Pod]]], reused: bool, want_milli_cpu: int
) -> None:
    views = NominatedViews()
    ni = _node()
    first = views.with_pods(ni, [A])
    assert first.requested.milli_cpu == 1000
    assert ni.requested.milli_cpu == 0  # the source is untouched
    node, pods = change(ni)
    again = views.with_pods(node, pods)
    assert (again is first) is reused
    assert again.requested.milli_cpu == want_milli_cpu


def test_retain_forgets_nodes_without_nominated_pods() -> None:
    views = NominatedViews()
    ni = _node()
    first = views.with_pods(ni, [A])
    views.retain({"n"})
    assert views.with_pods(ni, [A]) is first
    views.retain(set())
    assert views.with_pods(ni, [A]) is not first
