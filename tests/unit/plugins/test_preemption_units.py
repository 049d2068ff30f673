"""Workload-aware preemption (1.37): victims as units by their PodGroup's ``disruptionMode``.

A pod of a native PodGroup with ``disruptionMode: all`` is evicted with every scheduled pod of its
group or not at all; ``single`` (or unset) lets pods go one at a time; a pod of a group has its
group's priority as a victim (``spec.priority``, 0 when unset). The scenarios are upstream's
(``framework/preemption/types_test.go``, ``default_preemption_test.go``), run through the plugin's
PostFilter on the default profile.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, cast

import pytest

from custom_scheduler.api.model import Pod, pod_from_json
from custom_scheduler.config import load_config
from custom_scheduler.core.algorithm import Algorithm
from custom_scheduler.core.cache import Cache
from custom_scheduler.framework.gang_store import GangStore
from custom_scheduler.framework.handle import SnapshotHandle
from custom_scheduler.framework.interface import PostFilterResult
from custom_scheduler.framework.profiles import build_frameworks
from custom_scheduler.framework.types import CycleState, FitError
from custom_scheduler.plugins.builtin import full_registry
from custom_scheduler.plugins.preemption.units import RANK_POD, RANK_POD_GROUP, Victim, VictimIndex
from tests.builders import PodGroupBuilder, make_node, make_pod, make_pod_group

CONFIG = "apiVersion: kubescheduler.config.k8s.io/v1\nkind: KubeSchedulerConfiguration\n"


def running(name: str, node: str, priority: int, group: str = "", cpu: str = "1", minute: int = 0) -> Pod:
    b = make_pod(name).node(node).priority(priority).req(cpu=cpu).start_time(f"2024-01-01T00:{minute:02d}:00Z")
    if group:
        b = b.scheduling_group(group)
    obj = b.obj()
    obj["metadata"]["uid"] = f"uid-{name}"
    return pod_from_json(obj)


def group(name: str, mode: str | None, priority: int | None = None) -> PodGroupBuilder:
    b = make_pod_group(name, min_count=1)
    if mode is not None:
        b.set("spec.disruptionMode", {mode: {}})
    if priority is not None:
        b.set("spec.priority", priority)
    return b


def preempt(nodes: Sequence[str], pods: Sequence[Pod], groups: Sequence[PodGroupBuilder], pod: Pod) -> PostFilterResult:
    """Schedule ``pod`` (it must not fit) on 2-CPU nodes and run the default PostFilter."""
    cache = Cache()
    for n in nodes:
        cache.add_node(make_node(n).capacity(cpu="2", memory="8Gi", pods="110").build())
    store = GangStore()
    for g in groups:
        store.put(g.build())
    for p in pods:
        cache.add_pod(p)
        store.member_added(p)
    snap = cache.snapshot()
    cfg = load_config(CONFIG, full_registry())
    fwk = build_frameworks(cfg.profiles, full_registry(), snap, client=None, gangs=store)["custom-scheduler"]
    cast(SnapshotHandle, fwk.handle).pdb_lister = list
    state = CycleState(rng=random.Random(0))
    with pytest.raises(FitError) as e:
        Algorithm(random.Random(0)).schedule(fwk, state, pod, snap, {})
    return fwk.run_post_filter(state, pod, e.value.statuses)


@dataclass(frozen=True)
class Case:
    groups: tuple[PodGroupBuilder, ...]
    pods: tuple[Pod, ...]
    preemptor: Pod
    victims: tuple[str, ...]
    """The evicted pods, sorted; empty when preemption finds no victims."""
    message: str = ""


CASES = [
    pytest.param(
        Case(
            (group("g", "single"),),
            (running("a", "n1", 0, "g"), running("b", "n1", 0, "g")),
            make_pod("p").priority(100).req(cpu="1").build(),
            ("b",),
        ),
        id="single-mode-group-loses-one-pod",
    ),
    pytest.param(
        Case(
            (group("g", None),),
            (running("a", "n1", 0, "g"), running("b", "n1", 0, "g")),
            make_pod("p").priority(100).req(cpu="1").build(),
            ("b",),
        ),
        id="unset-mode-is-single",
    ),
    pytest.param(
        Case(
            (group("g", "all"),),
            (running("a", "n1", 0, "g"), running("b", "n1", 0, "g"), running("c", "n2", 0, "g", cpu="2")),
            make_pod("p").priority(100).req(cpu="1").build(),
            ("a", "b", "c"),
        ),
        id="all-mode-group-goes-whole-across-nodes",
    ),
    pytest.param(
        Case(
            (group("g", "all"),),
            (running("a", "n1", 0, "g"), running("b", "n1", 0, "g"), running("loose", "n2", 0, cpu="2")),
            make_pod("p").priority(100).req(cpu="1").build(),
            ("loose",),
        ),
        id="one-loose-pod-beats-a-whole-group",
    ),
    pytest.param(
        Case(
            (group("g", "single", priority=1000),),
            (running("a", "n1", 0, "g"), running("b", "n1", 0, "g")),
            make_pod("p").priority(100).req(cpu="1").build(),
            (),
            "No preemption victims found for incoming pod",
        ),
        id="group-priority-not-pod-priority",
    ),
    pytest.param(
        Case(
            (group("g", "all", priority=1000),),
            (running("a", "n1", 0, "g"), running("b", "n1", 0, "g")),
            make_pod("p").priority(100).req(cpu="1").build(),
            (),
            "No preemption victims found for incoming pod",
        ),
        id="all-mode-group-of-higher-priority-is-safe",
    ),
    pytest.param(
        Case(
            (group("g", "single", priority=10), group("h", "single", priority=100)),
            (running("a", "n1", 0, "g"), running("b", "n1", 0, "g")),
            make_pod("p").priority(0).req(cpu="1").scheduling_group("h").build(),
            ("b",),
        ),
        id="a-preemptor-of-a-group-preempts-with-its-group-priority",
    ),
    pytest.param(
        Case(
            (group("h", "single", priority=100),),
            (running("mate", "n1", 0, "h", cpu="2"),),
            make_pod("p").priority(1000).req(cpu="1").scheduling_group("h").build(),
            (),
            "No preemption victims found for incoming pod",
        ),
        id="never-its-own-groups-pods",
    ),
]


@pytest.mark.parametrize("case", CASES)
def test_victims_by_disruption_mode(case: Case) -> None:
    nodes = sorted({p.node_name for p in case.pods})
    result = preempt(nodes, case.pods, case.groups, case.preemptor)
    assert tuple(sorted(p.name for p in result.victims)) == case.victims
    if case.message:
        assert case.message in result.message
    else:
        assert result.status.is_success


def test_victim_order_follows_more_important_victim() -> None:
    """Upstream's ``MoreImportantVictim``: priority, then a pod of a group before a plain pod,
    then more pods, then the earlier start."""
    index = VictimIndex(lambda _: None, (), now=0.0)
    plain = Victim(((("n", running("x", "n", 5)),)), 5, RANK_POD, 10.0)
    member = Victim(((("n", running("y", "n", 5)),)), 5, RANK_POD_GROUP, 20.0)
    big = Victim(tuple(("n", running(f"z{i}", "n", 5)) for i in range(2)), 5, RANK_POD_GROUP, 30.0)
    higher = Victim(((("n", running("h", "n", 6)),)), 6, RANK_POD, 40.0)
    ordered = sorted([plain, member, big, higher], key=Victim.importance)
    assert [v.pods[0].name for v in ordered] == ["h", "z0", "y", "x"]
    assert index.priority(running("x", "n", 5)) == 5


def test_a_group_unknown_to_the_store_leaves_the_pod_its_own_priority() -> None:
    store: dict[str, Any] = {}
    index = VictimIndex(lambda p: store.get(p.name), (), now=0.0)
    assert index.priority(running("a", "n", 7, "missing")) == 7
