"""Gangs on a 3-level topology through the real group cycle (``simulate``): tightest domain first,
climbing, required levels, late members pinned to their siblings, elastic gangs, and job-level
preemption inside one domain (issue #28 items 1, 2, 5)."""

from __future__ import annotations

import pytest

from custom_scheduler import config
from custom_scheduler.api import podgroup as gang
from custom_scheduler.framework.registry import Registry
from custom_scheduler.plugins.builtin import full_registry
from custom_scheduler.tools import snapshot
from custom_scheduler.tools.simulate import simulate
from custom_scheduler.tools.simulation_result import SimulationResult
from tests.builders import PodBuilder, PodGroupBuilder, make_crd_pod_group, make_node, make_pod, make_pod_group

ZONE, BLOCK, RACK = "topology.kubernetes.io/zone", "example.com/block", "example.com/rack"
#: z1 ⊃ {b1 ⊃ {r1: n1 n2, r2: n3 n4}, b2 ⊃ {r3: n5 n6}}, 2 CPUs a node.
LAYOUT = {"n1": "b1/r1", "n2": "b1/r1", "n3": "b1/r2", "n4": "b1/r2", "n5": "b2/r3", "n6": "b2/r3"}
RACKS = {"r1": {"n1", "n2"}, "r2": {"n3", "n4"}, "r3": {"n5", "n6"}}
BLOCKS = {"b1": {"n1", "n2", "n3", "n4"}, "b2": {"n5", "n6"}}


def gang_config(job_level: bool = False) -> str:
    return snapshot.DEFAULT_CONFIG_TEXT + (
        "profiles:\n- schedulerName: custom-scheduler\n"
        "  plugins: {multiPoint: {enabled: [{name: GangScheduling}]}}\n"
        "  pluginConfig:\n  - name: GangScheduling\n"
        f"    args: {{topologyLevels: [{ZONE}, {BLOCK}, {RACK}, kubernetes.io/hostname], "
        f"jobLevelPreemption: {str(job_level).lower()}}}\n"
    )


@pytest.fixture(scope="module")
def registry() -> Registry:
    return full_registry()


@pytest.fixture(scope="module")
def cfg(registry: Registry) -> config.SchedulerConfig:
    return config.load_config(gang_config(), registry)


def nodes() -> list[dict[str, object]]:
    out = []
    for name, where in LAYOUT.items():
        block, rack = where.split("/")
        b = make_node(name).capacity(cpu="2", memory="8Gi", pods="20").labels(kubernetes_io_hostname=name)
        out.append(b.label(ZONE, "z1").label(BLOCK, block).label(RACK, rack).obj())
    return out


def group(api: str, name: str, min_count: int, required: str | None, preferred: str | None) -> PodGroupBuilder:
    g = make_crd_pod_group(name, min_member=min_count) if api == "crd" else make_pod_group(name, min_count=min_count)
    annotations = {}
    if required:
        annotations[gang.ANN_TOPOLOGY_REQUIRED] = required
    if preferred:
        annotations[gang.KUEUE_TOPOLOGY_PREFERRED] = preferred  # Kueue's spelling is read too
    return g.set("metadata.annotations", annotations)


def member(api: str, name: str, group_name: str, cpu: str = "1") -> PodBuilder:
    b = make_pod(name).req(cpu=cpu)
    return b.pod_group_label(group_name) if api == "crd" else b.scheduling_group(group_name)


def run(
    groups: list[PodGroupBuilder], pods: list[PodBuilder], cfg: config.SchedulerConfig, registry: Registry, **kw: object
) -> SimulationResult:
    bound = kw.get("bound", [])
    assert isinstance(bound, list)
    state = snapshot.ClusterState(
        nodes=nodes(), pods=[p.obj() for p in bound], pod_groups=[g.obj() for g in groups], source="test"
    )
    return simulate(state, [p.obj() for p in pods], cfg, registry, seed=3)


APIS = [pytest.param("native", id="native"), pytest.param("crd", id="crd")]


@pytest.mark.parametrize("api", APIS)
@pytest.mark.parametrize(
    ("size", "required", "preferred", "within"),
    [
        pytest.param(4, BLOCK, RACK, RACKS, id="fits-one-rack"),
        pytest.param(6, BLOCK, RACK, {"b1": BLOCKS["b1"]}, id="needs-two-racks-of-a-block"),
        pytest.param(4, BLOCK, None, RACKS, id="required-only-still-packs-tightest"),
        pytest.param(6, None, RACK, {"b1": BLOCKS["b1"]}, id="preferred-only-climbs"),
    ],
)
def test_gang_lands_in_the_tightest_domain(
    api: str,
    size: int,
    required: str | None,
    preferred: str | None,
    within: dict[str, set[str]],
    cfg: config.SchedulerConfig,
    registry: Registry,
) -> None:
    res = run(
        [group(api, "g", size, required, preferred)], [member(api, f"m{i}", "g") for i in range(size)], cfg, registry
    )
    placed = set(res.placement_map().values())
    assert len(res.placement_map()) == size
    assert any(placed <= nodes for nodes in within.values()), placed


@pytest.mark.parametrize("api", APIS)
def test_a_required_level_that_cannot_be_met_leaves_the_gang_pending(
    api: str, cfg: config.SchedulerConfig, registry: Registry
) -> None:
    res = run([group(api, "g", 6, RACK, None)], [member(api, f"m{i}", "g") for i in range(6)], cfg, registry)
    assert res.placement_map() == {}
    messages = {o.message for o in res.outcomes}
    assert len(messages) == 1
    (msg,) = messages
    assert msg.startswith("pod group default/g is unschedulable: it fits in no single topology domain")
    assert RACK in msg


def test_a_late_member_joins_the_domain_of_its_bound_siblings(cfg: config.SchedulerConfig, registry: Registry) -> None:
    """Two members already run on r3 (block b2): the third must join b2 — r3 has 2 CPUs left —
    though rack r1 is empty; when b2 is full it stays pending rather than leave the block."""
    g = group("native", "g", 2, BLOCK, RACK)
    bound = [member("native", f"b{i}", "g").node(f"n{5 + i}") for i in range(2)]
    res = run([g], [member("native", "late", "g")], cfg, registry, bound=bound)
    assert res.placement_map()["default/late"] in RACKS["r3"]
    full = [*bound, *(member("native", f"f{i}", "g").node(f"n{5 + i}") for i in range(2))]
    res = run([g], [member("native", "late", "g")], cfg, registry, bound=full)
    assert res.placement_map() == {}
    assert "it fits in no single topology domain" in res.outcomes[0].message


@pytest.mark.parametrize("api", APIS)
def test_an_elastic_gang_starts_with_min_count(api: str, cfg: config.SchedulerConfig, registry: Registry) -> None:
    """minCount 2 of 4, 2-CPU members, a rack required: every rack holds only 2 of them, so the
    gang starts with 2 in one rack and the extras wait (each on its own) without blocking it."""
    pods = [member(api, f"m{i}", "g", cpu="2") for i in range(4)]
    res = run([group(api, "g", 2, RACK, None)], pods, cfg, registry)
    placement = res.placement_map()
    assert len(placement) == 2
    assert any(set(placement.values()) == nodes for nodes in RACKS.values())
    rest = [o for o in res.outcomes if o.pod not in placement]
    assert len(rest) == 2
    assert all(o.result == "unschedulable" for o in rest)


@pytest.mark.parametrize(
    ("job_level", "low2_min", "victims_of", "count", "rack"),
    [
        pytest.param(True, 2, "b", 2, "r2", id="extras-of-an-elastic-gang-first"),
        pytest.param(True, 4, "a", 4, "r1", id="a-whole-gang-never-part-of-it"),
        pytest.param(False, 4, "a", 2, "r1", id="off-upstream-partial-preemption"),
    ],
)
def test_job_level_preemption_in_one_domain(
    job_level: bool, low2_min: int, victims_of: str, count: int, rack: str, registry: Registry
) -> None:
    """Every node is full. Low-priority gangs fill rack r1 (low1: minCount 4, 4 pods) and r2
    (low2: 4 pods, minCount ``low2_min``); r3 runs plain pods of priority 50. A high-priority gang
    of 2 x 1 CPU requires one rack. Victims are chosen inside one rack, the least disruptive: with
    job-level preemption no gang loses part of its core — low2's two extras when it has them,
    else a whole gang (4 pods; r1 and r2 tie, r1 by name); without it, upstream's partial
    preemption takes 2 pods of the first rack. The survivors are the rest."""
    cfg = config.load_config(gang_config(job_level=job_level), registry)
    low1 = group("native", "low1", 4, None, None).set("spec.priority", 1)
    low2 = group("native", "low2", low2_min, None, None).set("spec.priority", 1)
    high = group("native", "high", 2, RACK, None).set("spec.priority", 100)
    bound = [member("native", f"a{i}", "low1").priority(1).node(f"n{1 + i // 2}") for i in range(4)]
    bound += [member("native", f"b{i}", "low2").priority(1).node(f"n{3 + i // 2}") for i in range(4)]
    bound += [make_pod(f"c{i}").req(cpu="1").priority(50).node(f"n{5 + i // 2}") for i in range(4)]
    pods = [member("native", f"h{i}", "high").priority(100) for i in range(2)]
    res = run([low1, low2, high], pods, cfg, registry, bound=bound)
    victims = sorted(p.pod for p in res.preempted)
    assert len(victims) == count, victims
    assert all(v.startswith(f"default/{victims_of}") for v in victims), victims
    survivors = 4 - count  # of the gang the victims came from
    min_count = 4 if victims_of == "a" else low2_min
    if job_level:  # a gang keeps its quorum or goes whole
        assert survivors == 0 or survivors >= min_count
    else:  # upstream's partial preemption breaks the gang's quorum
        assert 0 < survivors < min_count
    placement = res.placement_map()
    assert set(placement) == {"default/h0", "default/h1"}
    assert set(placement.values()) <= RACKS[rack]
