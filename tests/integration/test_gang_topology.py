"""Gangs on a 3-level topology end to end on the real kube-apiserver 1.37 (issue #28 items 1, 2, 5).

Nodes carry zone ⊃ block ⊃ rack labels (GangScheduling's ``topologyLevels``); PodGroups ask for a
required and a preferred level by annotation. Proven here: the tightest domain that holds a gang
(one rack, else one block), a required level that cannot be met (pending, with the reason), a late
member joining its bound siblings' domain, job-level preemption inside one rack (whole gangs or
an elastic gang's extras, never part of a core), and an elastic gang that starts with minCount
and gets its extras once room frees in its rack.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from custom_scheduler.api import podgroup as gang
from custom_scheduler.devenv import cluster
from tests.builders import PodBuilder, make_crd_pod_group, make_node, make_pod, make_pod_group
from tests.integration.conftest import GANG_CONFIG
from tests.integration.env import Env

ZONE, BLOCK, RACK = "topology.kubernetes.io/zone", "example.com/block", "example.com/rack"


def config(job_level: bool = False) -> str:
    return GANG_CONFIG + (
        "  pluginConfig:\n  - name: GangScheduling\n"
        f"    args: {{topologyLevels: [{ZONE}, {BLOCK}, {RACK}, kubernetes.io/hostname], "
        f"jobLevelPreemption: {str(job_level).lower()}}}\n"
    )


def racks(env: Env, layout: dict[str, tuple[str, int]], cpu: str = "2") -> dict[str, str]:
    """Create ``count`` nodes per rack (``rack: (block, count)``); return node name -> rack."""
    out = {}
    for rack, (block, count) in layout.items():
        for i in range(count):
            b = make_node(f"{rack}n{i}").capacity(cpu=cpu, memory="32Gi", pods="110")
            out[env.node(b.label(ZONE, "z1").label(BLOCK, block).label(RACK, rack))] = rack
    return out


#: z1 ⊃ {b1 ⊃ {r1, r2}, b2 ⊃ {r3}}, two 2-CPU nodes a rack.
THREE_RACKS = {"r1": ("b1", 2), "r2": ("b1", 2), "r3": ("b2", 2)}
BLOCK_OF = {"r1": "b1", "r2": "b1", "r3": "b2"}


def podgroup(env: Env, api: str, name: str, min_count: int, **kw: Any) -> None:
    """A PodGroup of ``api`` with the topology annotations ``required``/``preferred`` and, native
    only, ``spec`` fields."""
    b = (
        make_crd_pod_group(name, env.namespace, min_member=min_count)
        if api == "crd"
        else make_pod_group(name, env.namespace, min_count=min_count)
    )
    annotations = {}
    if kw.get("required"):
        annotations[gang.ANN_TOPOLOGY_REQUIRED] = kw["required"]
    if kw.get("preferred"):
        annotations[gang.ANN_TOPOLOGY_PREFERRED] = kw["preferred"]
    b.set("metadata.annotations", annotations)
    for key, value in (kw.get("spec") or {}).items():
        b.set(f"spec.{key}", value)
    version = gang.CRD_GROUP_VERSION if api == "crd" else gang.NATIVE_GROUP_VERSION
    env.kube.post(f"/apis/{version}/namespaces/{env.namespace}/podgroups", b.obj())


def member(api: str, name: str, group: str, cpu: str = "1") -> PodBuilder:
    b = make_pod(name).req(cpu=cpu)
    return b.pod_group_label(group) if api == "crd" else b.scheduling_group(group)


def live(env: Env, prefix: str) -> dict[str, str]:
    """Pod name -> node ("" unbound) for the live pods whose name starts with ``prefix``."""
    return {
        name: p["spec"].get("nodeName") or ""
        for name, p in env.pods().items()
        if name.startswith(prefix) and not p["metadata"].get("deletionTimestamp")
    }


def all_bound(env: Env, prefix: str, n: int) -> dict[str, str] | None:
    got = live(env, prefix)
    return got if len(got) == n and all(got.values()) else None


def group_events(env: Env, group: str, reason: str) -> list[str]:
    return [
        str(e.get("note") or "")
        for e in env.events(reason, about=group)
        if (e.get("regarding") or {}).get("kind") == "PodGroup"
    ]


@pytest.mark.parametrize(
    ("api", "size", "within"),
    [
        pytest.param("native", 4, "rack", id="native-fits-one-rack"),
        pytest.param("native", 6, "block", id="native-needs-two-racks-of-a-block"),
        pytest.param("crd", 6, "block", id="crd-needs-two-racks-of-a-block"),
    ],
)
def test_a_gang_lands_in_the_tightest_domain(
    env: Env, crd: Callable[[], None], api: str, size: int, within: str
) -> None:
    """A gang of ``size`` x 1 CPU, required block, preferred rack: 4 fit one rack (so it lands in
    one), 6 fit no rack but block b1's two racks. The PodGroup's Scheduled event says where."""
    if api == "crd":
        crd()
    where = racks(env, THREE_RACKS)
    env.start_scheduler(config())
    podgroup(env, api, "g", size, required=BLOCK, preferred=RACK)
    for i in range(size):
        env.create_pod(member(api, f"g-{i}", "g").obj())
    placed = cluster.wait_for(lambda: all_bound(env, "g-", size), timeout=60, what=f"{size} members bound")
    used = {where[n] for n in placed.values()}
    if within == "rack":
        assert len(used) == 1, used
    else:
        assert {BLOCK_OF[r] for r in used} == {"b1"}
        assert used == {"r1", "r2"}
    notes = cluster.wait_for(lambda: group_events(env, "g", "Scheduled"), timeout=30, what="the group's event")
    assert any("placed in example.com/" in n for n in notes), notes


def test_a_required_level_that_cannot_be_met_leaves_the_gang_pending(env: Env) -> None:
    racks(env, THREE_RACKS)
    app = env.start_scheduler(config())
    podgroup(env, "native", "big", 6, required=RACK)
    for i in range(6):
        env.create_pod(member("native", f"big-{i}", "big").obj())
    notes = env.wait_failed_scheduling("big-0")
    assert f"pod group {env.namespace}/big is unschedulable: it fits in no single topology domain" in notes[-1]
    assert RACK in notes[-1]
    assert not any(live(env, "big-").values())
    assert app.cache.counts().get("assumed", 0) == 0


def test_a_late_member_joins_the_domain_of_its_bound_siblings(env: Env) -> None:
    """Two 2-CPU members fill rack r1 (block b1). A resident leaves 1 CPU free on an r3 node,
    where a lone 1-CPU pod would pack best; the late 1-CPU member must stay in its siblings'
    block instead, so it lands in r2."""
    where = racks(env, THREE_RACKS)
    r3_node = next(n for n, r in where.items() if r == "r3")
    env.create_pod(make_pod("resident").req(cpu="1").node(r3_node).obj())
    env.start_scheduler(config())
    podgroup(env, "native", "g", 2, required=BLOCK, preferred=RACK)
    for i in range(2):
        env.create_pod(member("native", f"g-{i}", "g", cpu="2").obj())
    first = cluster.wait_for(lambda: all_bound(env, "g-", 2), timeout=60, what="the gang bound")
    (rack,) = {where[n] for n in first.values()}
    env.create_pod(member("native", "g-late", "g").obj())
    late = env.wait_bound("g-late")["g-late"]
    assert BLOCK_OF[where[late]] == BLOCK_OF[rack]
    assert where[late] != "r3"


def low_gang(env: Env, name: str, min_count: int, priority: str, nodes: list[str]) -> None:
    """A native gang of 1-CPU members at ``priority``, bound by hand, member i to ``nodes[i]``."""
    podgroup(env, "native", name, min_count, spec={"priorityClassName": priority})
    for i, node in enumerate(nodes):
        obj = member("native", f"{name}-{i}", name).node(node).obj()
        obj["spec"]["priorityClassName"] = priority
        env.create_pod(obj)


def high_gang(env: Env, priority: str) -> None:
    """Gang ``h``: two 1-CPU members at ``priority``, one rack required."""
    podgroup(env, "native", "h", 2, required=RACK, spec={"priorityClassName": priority})
    for i in range(2):
        obj = member("native", f"h-{i}", "h").obj()
        obj["spec"]["priorityClassName"] = priority
        env.create_pod(obj)


@pytest.mark.parametrize(
    ("low2_min", "victims_of", "count"),
    [
        pytest.param(2, "b-", 2, id="an-elastic-gang-loses-its-extras"),
        pytest.param(4, "a-", 4, id="a-whole-gang-goes-never-part-of-it"),
    ],
)
def test_a_high_priority_gang_preempts_whole_gangs_inside_one_rack(
    env: Env, priority_class: Callable[..., str], low2_min: int, victims_of: str, count: int
) -> None:
    """Racks r1 and r2 full: low gang a (4 x 1 CPU, minCount 4) on r1, low gang b (4 x 1 CPU,
    minCount ``low2_min``) on r2. A high gang of 2 x 1 CPU requires one rack. Job-level
    preemption picks victims inside one rack with the least disruption: b's two extras when it
    has them; else a whole gang (both cost 4 pods; r1 wins by name). The survivors keep quorum."""
    low, high = priority_class(10), priority_class(1000)
    where = racks(env, {"r1": ("b1", 2), "r2": ("b1", 2)})
    by_rack = {r: sorted(n for n, x in where.items() if x == r) for r in ("r1", "r2")}
    for g, rack, min_count in (("a", "r1", 4), ("b", "r2", low2_min)):
        low_gang(env, g, min_count, low, [by_rack[rack][i // 2] for i in range(4)])
    env.start_scheduler(config(job_level=True))
    high_gang(env, high)

    def high_bound() -> dict[str, str] | None:  # kwok finishes the victims' graceful deletes
        return all_bound(env, "h-", 2)

    placed = cluster.wait_for(high_bound, timeout=60, what="the high gang bound")
    survivors = {g: len(live(env, f"{g}-")) for g in ("a", "b")}
    other = "b" if victims_of == "a-" else "a"
    assert survivors[other] == 4, survivors
    assert survivors[victims_of[0]] == 4 - count, survivors
    victim_rack = "r1" if victims_of == "a-" else "r2"
    assert {where[n] for n in placed.values()} == {victim_rack}


def test_a_gang_that_preempted_is_retried_when_its_victims_are_gone_though_other_racks_reject_it_for_good(
    env: Env, priority_class: Callable[..., str]
) -> None:
    """Racks r1 and r2 full of low gangs, and a rack a0 whose only node is full and tainted. The
    group cycle tries domains from the least free up and skips those too small for the gang
    without a dry run: a0 comes first and rejects the members for good (the taint). Skipping r1
    and r2 on that alone left the members without the plugin that rejected them for room, so the
    victims' deletion never requeued the high gang (found by the demo). Small domains are now
    dry-run until one rejects for room: the high gang preempts one low gang and runs."""
    low, high = priority_class(10), priority_class(1000)
    where = {}
    for rack, cpu in (("a0", "1"), ("r1", "4"), ("r2", "4")):
        b = make_node(f"{rack}n0").capacity(cpu=cpu, memory="32Gi", pods="110")
        b = b.label(ZONE, "z1").label(BLOCK, "b1").label(RACK, rack)
        where[env.node(b.taint("example.com/reserved") if rack == "a0" else b)] = rack
    node_of = {r: n for n, r in where.items()}
    env.create_pod(make_pod("filler").req(cpu="1").node(node_of["a0"]).obj())
    for g, rack in (("a", "r1"), ("b", "r2")):
        low_gang(env, g, 4, low, [node_of[rack]] * 4)
    env.start_scheduler(config(job_level=True))
    high_gang(env, high)
    placed = cluster.wait_for(lambda: all_bound(env, "h-", 2), timeout=30, what="the high gang bound")
    (rack,) = {where[n] for n in placed.values()}
    assert rack in ("r1", "r2")
    victim, other = ("a", "b") if rack == "r1" else ("b", "a")
    assert (len(live(env, f"{victim}-")), len(live(env, f"{other}-"))) == (0, 4)


def test_an_elastic_gang_starts_with_min_count_and_gets_its_extras_when_room_frees(env: Env) -> None:
    """minCount 2 of 4 members of 2 CPUs, a rack required. Rack r1 has four 2-CPU nodes, two of
    them taken by residents; r2 one free node. The gang starts with 2 in r1; the extras wait
    (r2's free node is outside the gang's rack); once the residents go, they join in r1."""
    where = racks(env, {"r1": ("b1", 4), "r2": ("b1", 1)})
    r1 = sorted(n for n, r in where.items() if r == "r1")
    for i in range(2):
        env.create_pod(make_pod(f"resident-{i}").req(cpu="2").node(r1[i]).obj())
    env.start_scheduler(config())
    podgroup(env, "native", "e", 2, required=RACK)
    for i in range(4):
        env.create_pod(member("native", f"e-{i}", "e", cpu="2").obj())

    def started() -> dict[str, str] | None:
        got = live(env, "e-")
        placed = {p: n for p, n in got.items() if n}
        waiting = [p for p, n in got.items() if not n]
        return placed if len(placed) == 2 and all(env.failed_scheduling(p) for p in waiting) else None

    placed = cluster.wait_for(started, timeout=60, what="2 members bound, 2 refused")
    assert {where[n] for n in placed.values()} == {"r1"}
    for i in range(2):
        env.delete_pod_now(f"resident-{i}")
    everyone = cluster.wait_for(lambda: all_bound(env, "e-", 4), timeout=60, what="the extras bound")
    assert {where[n] for n in everyone.values()} == {"r1"}
