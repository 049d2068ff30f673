"""The planner of ``defrag`` (tools/defrag_plan.py), table-driven: small GPU clusters where the
least disruptive plan is worked out by hand, and each rule (priority, bare pods, DaemonSets,
terminating pods, PDBs, gangs whole, moved pods must have a home, one domain) shown to change it."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

import pytest

from custom_scheduler.api import labels
from custom_scheduler.api.model import Pod, PodDisruptionBudget
from custom_scheduler.api.resources import Resources
from custom_scheduler.framework.types import NodeInfo
from custom_scheduler.tools import defrag_plan as dp
from tests.builders import make_node, make_pod

GPU = "nvidia.com/gpu"
ZONE = "topology.kubernetes.io/zone"


@dataclass
class World:
    """Nodes of 8 GPUs: node -> (zone, GPU pods on it); pods named NODE-i, 1 GPU each unless said."""

    used: Mapping[str, int]
    zones: Mapping[str, str] = field(default_factory=dict)
    priority: Mapping[str, int] = field(default_factory=dict)  # pod name -> priority
    bare: frozenset[str] = frozenset()
    daemon: frozenset[str] = frozenset()
    deleting: frozenset[str] = frozenset()
    gangs: Mapping[str, str] = field(default_factory=dict)  # pod name -> gang
    labels: Mapping[str, str] = field(default_factory=dict)  # pod name -> app label
    gpus: int = 8

    def pods(self) -> list[Pod]:
        out = []
        for node, n in self.used.items():
            for i in range(n):
                name = f"{node}-{i}"
                b = make_pod(name).uid(name).req_named({GPU: "1"}).node(node).priority(self.priority.get(name, 0))
                if name in self.gangs:
                    b = b.scheduling_group(self.gangs[name])
                if name in self.labels:
                    b = b.label("app", self.labels[name])
                if name in self.deleting:
                    b = b.terminating()
                out.append(b.build())
        return out

    def nodes(self, pods: list[Pod]) -> list[NodeInfo]:
        infos = {}
        for node in self.used:
            b = make_node(node).capacity_named({"cpu": "64", "memory": "256Gi", "pods": "110", GPU: str(self.gpus)})
            if node in self.zones:
                b = b.label(ZONE, self.zones[node])
            infos[node] = NodeInfo(b.build())
        for p in pods:
            infos[p.node_name].add_pod(p)
        return list(infos.values())

    def facts(self, pods: list[Pod]) -> dict[str, dp.PodFacts]:
        return {p.uid: dp.PodFacts(controlled=p.name not in self.bare, daemon=p.name in self.daemon) for p in pods}


def _pdb(app: str, allowed: int) -> PodDisruptionBudget:
    return PodDisruptionBudget("default", f"pdb-{app}", labels.compile_selector({"matchLabels": {"app": app}}), allowed)


def _shape(count: int, gpus: int, priority: int | None = None) -> dp.Shape:
    return dp.Shape(count, Resources(scalar={GPU: gpus}), priority)


def _plan(w: World, shape: dp.Shape, pdbs: tuple[PodDisruptionBudget, ...] = (), domain: str = "") -> dp.Plan:
    pods = w.pods()
    units = dp.units_of(pods, w.facts(pods), shape)
    return dp.plan(w.nodes(pods), units, dp.Budgets(pdbs), shape, domain_label=domain)


FRAGMENTED = {"a": 7, "b": 6, "c": 2, "d": 3}  # 14 GPUs free, no node with 8

CASES = [
    # id, world, shape, pdbs, domain, expected targets, expected moved pods (sorted)
    ("fits already: no moves", World({"a": 0, "b": 8}), _shape(1, 8), (), "", {"a": 1}, []),
    ("fewest pods: node c (2 pods)", World(FRAGMENTED), _shape(1, 8), (), "", {"c": 1}, ["c-0", "c-1"]),
    (
        "higher priority than the shape stays: node d instead",
        World(FRAGMENTED, priority={"c-0": 100}),
        _shape(1, 8, priority=10),
        (),
        "",
        {"d": 1},
        ["d-0", "d-1", "d-2"],
    ),
    (
        "equal priority may move",
        World(FRAGMENTED, priority={"c-0": 10, "c-1": 10}),
        _shape(1, 8, priority=10),
        (),
        "",
        {"c": 1},
        ["c-0", "c-1"],
    ),
    (
        "a bare pod stays",
        World(FRAGMENTED, bare=frozenset({"c-1"})),
        _shape(1, 8),
        (),
        "",
        {"d": 1},
        ["d-0", "d-1", "d-2"],
    ),
    (
        "a DaemonSet pod stays",
        World(FRAGMENTED, daemon=frozenset({"c-0"})),
        _shape(1, 8),
        (),
        "",
        {"d": 1},
        ["d-0", "d-1", "d-2"],
    ),
    (
        "a terminating pod stays",
        World(FRAGMENTED, deleting=frozenset({"c-0"})),
        _shape(1, 8),
        (),
        "",
        {"d": 1},
        ["d-0", "d-1", "d-2"],
    ),
    (
        "a PDB allowing 1 of c's 2 pods: node d",
        World(FRAGMENTED, labels={"c-0": "web", "c-1": "web"}),
        _shape(1, 8),
        (_pdb("web", 1),),
        "",
        {"d": 1},
        ["d-0", "d-1", "d-2"],
    ),
    (
        "a PDB allowing 2: node c",
        World(FRAGMENTED, labels={"c-0": "web", "c-1": "web"}),
        _shape(1, 8),
        (_pdb("web", 2),),
        "",
        {"c": 1},
        ["c-0", "c-1"],
    ),
    (
        "a gang moves whole, its member on a counted: 4 pods > d's 3",
        World(FRAGMENTED, gangs={"c-0": "g", "c-1": "g", "a-0": "g", "a-1": "g"}),
        _shape(1, 8),
        (),
        "",
        {"d": 1},
        ["d-0", "d-1", "d-2"],
    ),
    (
        "two shape pods: the two cheapest nodes",
        World({**FRAGMENTED, "e": 4}),
        _shape(2, 8),
        (),
        "",
        {"c": 1, "d": 1},
        ["c-0", "c-1", "d-0", "d-1", "d-2"],
    ),
    (
        "half-node shape: evict only what is missing",
        World({"a": 5, "b": 6}),
        _shape(1, 4),
        (),
        "",
        {"a": 1},
        ["a-0"],
    ),
    (
        "one domain: z1 costs 2, though c (z2, empty) + a would cost 1",
        World({"a": 1, "b": 1, "c": 0, "d": 3}, zones={"a": "z1", "b": "z1", "c": "z2", "d": "z2"}),
        _shape(2, 8),
        (),
        ZONE,
        {"a": 1, "b": 1},
        ["a-0", "b-0"],
    ),
    (
        "no domain: c and a",
        World({"a": 1, "b": 1, "c": 0, "d": 3}, zones={"a": "z1", "b": "z1", "c": "z2", "d": "z2"}),
        _shape(2, 8),
        (),
        "",
        {"a": 1, "c": 1},
        ["a-0"],
    ),
]


@pytest.mark.parametrize(
    ("world", "shape", "pdbs", "domain", "targets", "moved"), [c[1:] for c in CASES], ids=[c[0] for c in CASES]
)
def test_least_disruptive_plan(
    world: World,
    shape: dp.Shape,
    pdbs: tuple[PodDisruptionBudget, ...],
    domain: str,
    targets: dict[str, int],
    moved: list[str],
) -> None:
    p = _plan(world, shape, pdbs, domain)
    assert p.feasible, p.reason
    assert p.targets == targets
    assert sorted(x.name for x in p.evicted_pods()) == moved


INFEASIBLE = [
    # id, world, shape, domain, reason fragment, held back
    ("more than the cluster has", World({"a": 0}), _shape(2, 8), "", "1 of 2 pod(s) fit on no node", {}),
    (
        "every pod is bare",
        World({"a": 1, "b": 1}, bare=frozenset({"a-0", "b-0"})),
        _shape(1, 8),
        "",
        "fit on no node",
        {dp.BARE: 2},
    ),
    ("the evicted pods would have no home", World({"a": 8, "b": 1}), _shape(1, 8), "", "fit on no node", {}),
    ("no node has the domain label", World({"a": 0}), _shape(1, 8), ZONE, "no node has the label", {}),
    (
        "every domain fails: both reasons",
        World({"a": 8, "b": 8}, zones={"a": "z1", "b": "z2"}, priority={"a-0": 5, "b-0": 5}),
        _shape(1, 8, priority=1),
        ZONE,
        "z1: 1 of 1 pod(s) fit on no node of domain z1",
        {dp.PRIORITY: 2},
    ),
]


@pytest.mark.parametrize(
    ("world", "shape", "domain", "reason", "held"), [c[1:] for c in INFEASIBLE], ids=[c[0] for c in INFEASIBLE]
)
def test_no_plan(world: World, shape: dp.Shape, domain: str, reason: str, held: dict[str, int]) -> None:
    p = _plan(world, shape, domain=domain)
    assert not p.feasible
    assert reason in p.reason
    assert p.held_back == held
    assert p.moves == []


def test_a_gang_unit_is_blocked_by_any_member_and_takes_its_highest_priority() -> None:
    w = World(
        {"a": 2, "b": 1}, gangs={"a-0": "g", "a-1": "g", "b-0": "g"}, priority={"b-0": 7}, bare=frozenset({"a-1"})
    )
    pods = w.pods()
    (unit,) = dp.units_of(pods, w.facts(pods), _shape(1, 8))
    assert (unit.key, unit.priority, unit.blocked) == ("gang default/g", 7, dp.BARE)
    assert unit.nodes == {"a", "b"}


def test_budgets_count_down_across_units() -> None:
    w = World({"a": 3}, labels={"a-0": "web", "a-1": "web", "a-2": "web"})
    pods = w.pods()
    budgets = dp.Budgets([_pdb("web", 2)])
    units = dp.units_of(pods, w.facts(pods), _shape(1, 1))
    assert [budgets.allows(u) for u in units] == [True, True, True]
    budgets.take(units[0])
    budgets.take(units[1])
    assert not budgets.allows(units[2])
