"""The pure topology-domain logic of gangs (issue #28 item 1): which levels are tried, in which
order, which domains survive pinning by placed members, and which dry run wins."""

from __future__ import annotations

from collections.abc import Mapping

import pytest

from custom_scheduler.api.resources import Resources
from custom_scheduler.framework import gang_topology as topo
from custom_scheduler.framework.gang_topology import Domain, DomainTrial, TopologyRequest

ZONE, BLOCK, RACK, HOST = (
    "topology.kubernetes.io/zone",
    "example.com/block",
    "example.com/rack",
    "kubernetes.io/hostname",
)
LEVELS = (ZONE, BLOCK, RACK, HOST)


def node(name: str, zone: str, block: str, rack: str) -> tuple[str, Mapping[str, str]]:
    return name, {ZONE: zone, BLOCK: block, RACK: rack, HOST: name}


#: z1 ⊃ {b1 ⊃ {r1: n1 n2, r2: n3 n4}, b2 ⊃ {r3: n5 n6}}; z2 ⊃ {b3 ⊃ {r4: n7 n8}}; n9 has no labels.
NODES = [
    node("n1", "z1", "b1", "r1"),
    node("n2", "z1", "b1", "r1"),
    node("n3", "z1", "b1", "r2"),
    node("n4", "z1", "b1", "r2"),
    node("n5", "z1", "b2", "r3"),
    node("n6", "z1", "b2", "r3"),
    node("n7", "z2", "b3", "r4"),
    node("n8", "z2", "b3", "r4"),
    ("n9", {}),
]


@pytest.mark.parametrize(
    ("required", "preferred", "want", "anywhere"),
    [
        pytest.param(None, None, (), False, id="no-request"),
        pytest.param(BLOCK, None, (HOST, RACK, BLOCK), False, id="required-from-tightest"),
        pytest.param(BLOCK, RACK, (RACK, BLOCK), False, id="required-from-preferred"),
        pytest.param(RACK, BLOCK, (RACK,), False, id="preferred-wider-than-required-is-clamped"),
        pytest.param(ZONE, ZONE, (ZONE,), False, id="same-level"),
        pytest.param(None, RACK, (RACK, BLOCK, ZONE), True, id="preferred-climbs-then-anywhere"),
        pytest.param("example.com/pod", None, ("example.com/pod",), False, id="required-outside-hierarchy"),
        pytest.param(None, "example.com/pod", ("example.com/pod",), True, id="preferred-outside-hierarchy"),
        pytest.param(BLOCK, "example.com/pod", (HOST, RACK, BLOCK), False, id="preferred-outside-ignored"),
    ],
)
def test_levels_to_try(required: str | None, preferred: str | None, want: tuple[str, ...], anywhere: bool) -> None:
    assert topo.levels_to_try(TopologyRequest(LEVELS, required, preferred)) == (want, anywhere)


def names(p: topo.Plan) -> list[tuple[str, list[str]]]:
    return [(t.level, [d.value for d in t.domains]) for t in p.tiers]


@pytest.mark.parametrize(
    ("req", "pinned", "want"),
    [
        pytest.param(
            TopologyRequest(LEVELS, BLOCK, RACK),
            (),
            [(RACK, ["r1", "r2", "r3", "r4"]), (BLOCK, ["b1", "b2", "b3"])],
            id="all-domains-sorted",
        ),
        pytest.param(
            TopologyRequest(LEVELS, BLOCK, RACK),
            ("n3",),
            [(RACK, ["r2"]), (BLOCK, ["b1"])],
            id="late-member-pinned-to-its-siblings-domains",
        ),
        pytest.param(
            TopologyRequest(LEVELS, ZONE, RACK),
            ("n1", "n4"),
            [(RACK, []), (BLOCK, ["b1"]), (ZONE, ["z1"])],
            id="siblings-in-two-racks-share-a-block",
        ),
        pytest.param(
            TopologyRequest(LEVELS, None, BLOCK),
            ("n1", "n7"),
            [(BLOCK, []), (ZONE, []), ("", [""])],
            id="preferred-only-falls-back-to-anywhere",
        ),
    ],
)
def test_plan(req: TopologyRequest, pinned: tuple[str, ...], want: list[tuple[str, list[str]]]) -> None:
    p = topo.plan(req, NODES, pinned)
    assert p.constrained
    assert not p.empty
    assert names(p) == want


def test_plan_nodes_without_the_label_are_in_no_domain() -> None:
    rack = topo.plan(TopologyRequest(LEVELS, RACK), NODES).tiers[-1]
    assert all("n9" not in d.nodes for d in rack.domains)
    assert rack.domains[0] == Domain(RACK, "r1", frozenset({"n1", "n2"}))


@pytest.mark.parametrize(
    ("req", "pinned", "note"),
    [
        pytest.param(TopologyRequest(LEVELS, BLOCK), ("n1", "n5"), "share no example.com/block domain", id="split"),
        pytest.param(TopologyRequest(LEVELS, "example.com/pod"), (), "no node has the label", id="unlabelled"),
    ],
)
def test_plan_with_no_domain_says_why(req: TopologyRequest, pinned: tuple[str, ...], note: str) -> None:
    p = topo.plan(req, NODES, pinned)
    assert p.empty
    assert note in p.note


def test_no_request_is_unconstrained() -> None:
    assert topo.plan(TopologyRequest(LEVELS), NODES) is topo.UNCONSTRAINED


def trial(tier: int, value: str, placed: int, all_fit: bool, leftover: float) -> DomainTrial:
    return DomainTrial(tier, Domain(RACK, value, frozenset()), placed, all_fit, leftover)


@pytest.mark.parametrize(
    ("trials", "want"),
    [
        pytest.param([], None, id="none"),
        pytest.param([trial(0, "r2", 4, True, 5.0), trial(0, "r1", 4, True, 2.0)], "r1", id="least-leftover"),
        pytest.param([trial(0, "r2", 4, True, 2.0), trial(0, "r1", 4, True, 2.0)], "r1", id="tie-by-value"),
        pytest.param([trial(1, "b1", 4, True, 0.0), trial(0, "r1", 4, True, 9.0)], "r1", id="tightest-level"),
        pytest.param([trial(0, "r1", 2, False, 0.0), trial(1, "b1", 4, True, 9.0)], "b1", id="all-fit-beats-part"),
        pytest.param([trial(0, "r1", 2, False, 0.0), trial(1, "b1", 3, False, 9.0)], "b1", id="elastic-most-placed"),
        pytest.param([trial(1, "b1", 2, False, 0.0), trial(0, "r1", 2, False, 9.0)], "r1", id="elastic-then-tight"),
    ],
)
def test_choose(trials: list[DomainTrial], want: str | None) -> None:
    got = topo.choose(trials)
    assert (got.domain.value if got is not None else None) == want


def test_explain_names_the_domain() -> None:
    msg = topo.explain(trial(0, "r1", 3, True, 1.0), 4)
    assert msg == f"placed in {RACK}=r1 (every member fits; 4 domain(s) tried, tightest level first)"
    assert "2 member(s) fit" in topo.explain(trial(0, "r1", 2, False, 1.0), 4)


# -- the resource pre-check: which domains need no dry run ------------------------------------------
GPU = "nvidia.com/gpu"


def res(cpu: int = 0, mem: int = 0, gpus: int | None = None) -> Resources:
    return Resources(milli_cpu=cpu, memory=mem, scalar={} if gpus is None else {GPU: gpus})


@pytest.mark.parametrize(
    ("requests", "backed", "want"),
    [
        pytest.param([res(1000)], set(), ("cpu", "ephemeral-storage", "memory"), id="cpu-only"),
        pytest.param(
            [res(1000, gpus=1), res(1000)],
            set(),
            (*sorted(("cpu", "ephemeral-storage", "memory")), GPU),
            id="gpus-counted",
        ),
        pytest.param([res(1000, gpus=1)], {GPU}, ("cpu", "ephemeral-storage", "memory"), id="dra-backed-left-out"),
        pytest.param([res(1000, gpus=0)], set(), ("cpu", "ephemeral-storage", "memory"), id="zero-request-left-out"),
    ],
)
def test_checked_resources(requests: list[Resources], backed: set[str], want: tuple[str, ...]) -> None:
    assert topo.checked_resources(requests, backed.__contains__) == want


def test_quorum_needs_adds_the_smallest_requests_of_each_resource() -> None:
    reqs = [res(4000, gpus=1), res(1000, gpus=8), res(2000, gpus=2)]
    assert topo.quorum_needs(reqs, 2, ("cpu", GPU)) == {"cpu": 3000, GPU: 3}
    assert topo.quorum_needs(reqs, 0, ("cpu", GPU)) == {"cpu": 0, GPU: 0}


@pytest.mark.parametrize(
    ("nodes", "need", "small"),
    [
        # A rack with CPU to spare but 3 free GPUs cannot hold a gang needing 4: no dry run.
        pytest.param([(res(64000, gpus=8), res(1000, gpus=5))], {"cpu": 4000, GPU: 4}, True, id="gpus-short"),
        pytest.param(
            [(res(64000, gpus=8), res(1000, gpus=4))],
            {"cpu": 4000, GPU: 4},
            False,
            id="gpus-enough",
        ),
        # Over-committed nodes count as nothing free, never negative.
        pytest.param(
            [(res(4000, gpus=1), res(8000, gpus=2)), (res(4000, gpus=2), res(0))],
            {"cpu": 4000, GPU: 2},
            False,
            id="overcommitted-counts-zero",
        ),
        pytest.param([(res(64000), res(0))], {"cpu": 4000, GPU: 1}, True, id="no-gpus-published"),
    ],
)
def test_domain_free_and_too_small(nodes: list[tuple[Resources, Resources]], need: dict[str, int], small: bool) -> None:
    assert topo.too_small(topo.domain_free(nodes, tuple(need)), need) is small


@pytest.mark.parametrize(
    ("keys", "want"),
    [
        pytest.param(("cpu", "ephemeral-storage", "memory"), "cpu", id="cpu"),
        pytest.param(("cpu", "ephemeral-storage", "memory", GPU), GPU, id="accelerators"),
    ],
)
def test_packing_resource(keys: tuple[str, ...], want: str) -> None:
    assert topo.packing_resource(keys) == want
