"""Job-level preemption's units (issue #28 items 2, 5): PostFilter's victims widened so no gang
loses part of its core — an elastic gang gives its extras first, one more and it goes whole —
and GangScheduling's ``job_victims`` with its switch and PDB count."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, cast

import pytest

from custom_scheduler.api.model import Pod, pdb_from_json
from custom_scheduler.api.podgroup import PodGroup
from custom_scheduler.framework.gang_store import GangStore
from custom_scheduler.framework.interface import Handle
from custom_scheduler.plugins import gang_scheduling as gs
from custom_scheduler.plugins.preemption.units import widen_to_gangs
from tests.builders import make_crd_pod_group, make_pod, make_pod_group


def gang_pods(group: str, n: int, *, crd: bool = False, priority: int = 1) -> list[Pod]:
    out = []
    for i in range(n):
        b = make_pod(f"{group}{i}", "ns").uid(f"{group}{i}").priority(priority).node(f"n{i}").label("app", group)
        out.append((b.pod_group_label(group) if crd else b.scheduling_group(group)).build())
    return out


GROUPS = {
    "core": make_pod_group("core", "ns", min_count=4).set("spec.priority", 1).build(),
    "elastic": make_pod_group("elastic", "ns", min_count=2).set("spec.priority", 1).build(),
    "all": make_pod_group("all", "ns", min_count=2).set("spec.disruptionMode", {"all": {}}).build(),
    "crd": make_crd_pod_group("crd", "ns", min_member=3).build(),
    "basic": make_pod_group("basic", "ns").basic().build(),
}
PODS = {
    "core": gang_pods("core", 4),
    "elastic": gang_pods("elastic", 4),
    "all": gang_pods("all", 2),
    "crd": gang_pods("crd", 3, crd=True),
    "basic": gang_pods("basic", 3),
}
LONE = make_pod("lone", "ns").uid("lone").priority(1).node("n0").build()


def lookup(p: Pod) -> PodGroup | None:
    return GROUPS.get(p.pod_group)


def bound(g: PodGroup) -> Sequence[Pod]:
    return PODS[g.name]


def names(pods: Sequence[Pod] | None) -> list[str] | None:
    return None if pods is None else sorted(p.name for p in pods)


@pytest.mark.parametrize(
    ("victims", "want"),
    [
        pytest.param([LONE], ["lone"], id="a-lone-pod-is-a-unit-of-one"),
        pytest.param(PODS["elastic"][:2], ["elastic0", "elastic1"], id="elastic-extras-only"),
        pytest.param(PODS["elastic"][:3], [f"elastic{i}" for i in range(4)], id="elastic-into-its-core-goes-whole"),
        pytest.param(PODS["core"][:1], [f"core{i}" for i in range(4)], id="one-core-pod-takes-the-gang"),
        pytest.param(PODS["crd"][2:], ["crd0", "crd1", "crd2"], id="crd-gang-too"),
        pytest.param(PODS["all"][:1], ["all0"], id="disruption-all-is-postfilters-unit-already"),
        pytest.param(PODS["basic"][:1], ["basic0"], id="basic-group-holds-nothing"),
        pytest.param([LONE, *PODS["elastic"][:1]], ["elastic0", "lone"], id="mixed"),
    ],
)
def test_widen_to_gangs(victims: list[Pod], want: list[str]) -> None:
    assert names(widen_to_gangs(victims, 100, lookup, bound, lambda p: p.priority)) == want


def test_a_gang_with_a_member_not_below_the_preemptor_cannot_be_taken() -> None:
    prio = {"core3": 100}
    got = widen_to_gangs(PODS["core"][:1], 100, lookup, bound, lambda p: prio.get(p.name, p.priority))
    assert got is None


class _Handle:
    def __init__(self, store: GangStore, pdbs: list[Any]) -> None:
        self.gangs = store
        self._pdbs = pdbs

    def pdbs(self) -> list[Any]:
        return self._pdbs


#: A PDB over gang "core" that allows one disruption.
PDB = pdb_from_json(
    {
        "metadata": {"name": "core", "namespace": "ns"},
        "spec": {"selector": {"matchLabels": {"app": "core"}}},
        "status": {"disruptionsAllowed": 1},
    }
)


@pytest.mark.parametrize(
    ("job_level", "pdbs", "want", "violations"),
    [
        pytest.param(False, [], ["core0"], 0, id="off-postfilters-victims"),
        pytest.param(True, [], [f"core{i}" for i in range(4)], 0, id="on-the-whole-gang"),
        pytest.param(False, [PDB], ["core0"], 0, id="off-within-the-budget"),
        pytest.param(True, [PDB], [f"core{i}" for i in range(4)], 3, id="on-pdb-violations-counted"),
    ],
)
def test_job_victims_follows_its_switch_and_counts_pdbs(
    job_level: bool, pdbs: list[Any], want: list[str], violations: int
) -> None:
    store = GangStore()
    store.put(GROUPS["core"])
    for p in PODS["core"]:
        store.member_added(p)
    handle = cast(Handle, _Handle(store, pdbs))
    plugin = gs.GangScheduling(gs.GangSchedulingArgs(job_level_preemption=job_level), handle)
    preemptor = make_pod("h", "ns").priority(100).build()
    got = plugin.job_victims("native:ns/core", preemptor, PODS["core"][:1])
    assert got is not None
    assert names(got.pods) == want
    assert got.pdb_violations == violations
