"""DynamicResources' per-pod allocator (``dra_allocator.Prepared``) gives the answers the per-node
computation gives: the direct pick for one ``exactly`` request equals the backtracking search's,
selector matches kept on a node's devices are the ones computed afresh and errors are never kept,
a node without devices answers from the claims alone, and the allocation results Filter defers
are written out, equal to the eager ones, only for the nodes that need them (from builders, no
API server)."""

from __future__ import annotations

from typing import Any

import pytest

from custom_scheduler.api import dra
from custom_scheduler.api.dra_pools import NodeDevices
from custom_scheduler.api.model import Pod, pod_from_json
from custom_scheduler.framework import dra_store as fdra
from custom_scheduler.framework.handle import SnapshotHandle
from custom_scheduler.framework.types import Code, CycleState, NodeInfo, Snapshot
from custom_scheduler.plugins import dra_allocator, dra_search
from custom_scheduler.plugins import dynamic_resources as plugin
from tests.builders import ClaimBuilder, make_node, make_pod, resource_slice_obj
from tests.unit.plugins.test_dra_hot_path import D, store_of


def gpus(node: str, n: int = 6) -> dict[str, Any]:
    return resource_slice_obj(node, {f"gpu-{i}": {"model": "a100", "index": i} for i in range(n)})


def claims_of(store: fdra.DRAStore, *names: str) -> list[dra.ResourceClaim]:
    got = [store.get_claim("default", n) for n in names]
    assert all(c is not None for c in got)
    return got  # type: ignore[return-value]


def ids(chosen: list[list[dra_search.Pick]] | None) -> list[list[str]] | None:
    return None if chosen is None else [[p.cand.id[2] for p in picks] for picks in chosen]


# -- the direct pick ------------------------------------------------------------------------------


@pytest.mark.parametrize("held", [(), (0,), (1, 3), (0, 1, 2), (0, 1, 2, 3, 4), tuple(range(6))])
@pytest.mark.parametrize(
    "claim",
    [
        pytest.param(ClaimBuilder("a").request(), id="one"),
        pytest.param(ClaimBuilder("a").request(count=3), id="three"),
        pytest.param(ClaimBuilder("a").request(count=6), id="six"),
        pytest.param(ClaimBuilder("a").request("gpu", "gpu", f'device.attributes["{D}"].index % 2 == 1'), id="odd"),
    ],
)
def test_direct_pick_equals_the_search(claim: ClaimBuilder, held: tuple[int, ...]) -> None:
    """Devices ``held`` by other claims; the direct pick is the search's pick, or nothing when
    the search finds nothing."""
    others = [ClaimBuilder(f"h{i}").request().allocated("n1", f"gpu-{i}") for i in held]
    store = store_of([gpus("n1")], [*others, claim])
    claims = claims_of(store, "a")
    prepared = dra_allocator.Prepared(claims, store.device_class)
    assert prepared.single is not None
    cands, in_use, cels = store.candidates("n1", {}), store.allocated_devices(), dra_allocator.CELCache()
    direct = prepared._take_direct(cands, in_use, cels, None)
    assert direct is not None, "plain devices, no capacity request: the direct way applies"
    options = prepared._options(cands, in_use, cels, None)
    searched = dra_search.Search(claims, options, in_use, {}, None).run()
    assert ([[c.id[2] for c in direct]] if direct else None) == ids(searched)
    got = prepared.choose(cands, in_use, cels, "n1")
    assert ids(None if got is None else got.all_picks()) == ids(searched)


def test_the_direct_way_is_only_for_one_plain_exact_request() -> None:
    store = store_of(
        [gpus("n1")],
        [
            ClaimBuilder("all").request(mode="All"),
            ClaimBuilder("two").request("x").request("y"),
            ClaimBuilder("match").request("x").request("y").match_attribute(f"{D}/model"),
            ClaimBuilder("b").request(),
        ],
    )
    for name in ("all", "two", "match"):
        assert dra_allocator.Prepared(claims_of(store, name), store.device_class).single is None, name
    assert dra_allocator.Prepared(claims_of(store, "b", "b"), store.device_class).single is None, "two claims"


# -- selector matches kept on the node's devices --------------------------------------------------


def test_matches_are_kept_per_selector_pair_until_the_slices_change() -> None:
    odd = f'device.attributes["{D}"].index % 2 == 1'
    store = store_of(
        [gpus("n1")],
        [ClaimBuilder("a").request(), ClaimBuilder("b").request(), ClaimBuilder("c").request("gpu", "gpu", odd)],
    )
    cels = dra_allocator.CELCache()
    cands = store.candidates("n1", {})
    assert isinstance(cands, NodeDevices)
    for name in ("a", "b", "c"):
        dra_allocator.Prepared(claims_of(store, name), store.device_class).choose(
            cands, store.allocated_devices(), cels, "n1"
        )
    memo = cands.matched
    class_sel = (f'device.driver == "{D}"',)
    assert set(memo) == {(class_sel, ()), (class_sel, (odd,))}, "claims a and b share one entry"
    matched, plain = memo[(class_sel, (odd,))]
    assert [c.device.name for c in matched] == ["gpu-1", "gpu-3", "gpu-5"]
    assert plain
    store.put(fdra.SLICE, dra.resource_slice_from_json(gpus("n1", n=2)))
    fresh = store.candidates("n1", {})
    assert isinstance(fresh, NodeDevices)
    assert fresh is not cands
    assert fresh.matched == {}


def test_a_selector_error_is_never_kept_and_names_each_claim() -> None:
    bad = f'device.attributes["{D}"].nope == 1'
    store = store_of(
        [gpus("n1")], [ClaimBuilder("a").request("gpu", "gpu", bad), ClaimBuilder("b").request("gpu", "gpu", bad)]
    )
    cands, cels = store.candidates("n1", {}), dra_allocator.CELCache()
    for name in ("a", "b", "a"):
        prepared = dra_allocator.Prepared(claims_of(store, name), store.device_class)
        with pytest.raises(dra_allocator.AllocationError, match=f"^claim default/{name}: selector #0 on device"):
            prepared.choose(cands, store.allocated_devices(), cels, "n1")
    assert isinstance(cands, NodeDevices)
    assert cands.matched == {}


# -- nodes without devices ------------------------------------------------------------------------


def test_a_node_without_devices_repeats_the_claims_answer() -> None:
    store = store_of([], [ClaimBuilder("a").request(), ClaimBuilder("x").request("gpu", "nope")])
    cels = dra_allocator.CELCache()
    fits = dra_allocator.Prepared(claims_of(store, "a"), store.device_class)
    missing = dra_allocator.Prepared(claims_of(store, "x"), store.device_class)
    for node in ("n1", "n2"):
        assert fits.choose((), store.allocated_devices(), cels, node) is None
        with pytest.raises(dra_allocator.AllocationError, match="could not retrieve device class nope"):
            missing.choose((), store.allocated_devices(), cels, node)


def test_an_unsupported_constraint_is_an_error_on_every_node() -> None:
    claim = ClaimBuilder("a").request().obj()
    claim["spec"]["devices"]["constraints"] = [{"requests": ["gpu"]}]
    store = store_of([gpus("n1")], [])
    store.put(fdra.CLAIM, dra.resource_claim_from_json(claim))
    prepared = dra_allocator.Prepared(claims_of(store, "a"), store.device_class)
    for node in ("n1", "n2"):
        with pytest.raises(dra_allocator.AllocationError, match="empty constraint"):
            prepared.choose(store.candidates(node, {}), store.allocated_devices(), dra_allocator.CELCache(), node)


# -- deferred allocation results ------------------------------------------------------------------


def framework_of(store: fdra.DRAStore, names: tuple[str, ...]) -> tuple[plugin.DynamicResources, list[NodeInfo]]:
    infos = [NodeInfo(make_node(n).build()) for n in names]
    snap = Snapshot(node_infos={ni.name: ni for ni in infos}, node_list=infos)
    return plugin.DynamicResources(None, SnapshotHandle(snap, profile_name="custom-scheduler", dra=store)), infos


def pod_with(claim: str) -> Pod:
    obj = make_pod("p").uid("uid-p").obj()
    obj["spec"]["resourceClaims"] = [{"name": "c0", "resourceClaimName": claim}]
    return pod_from_json(obj)


def test_filter_writes_out_allocations_only_for_the_nodes_that_need_them() -> None:
    store = store_of([gpus("n1"), gpus("n3"), gpus("n4")], [ClaimBuilder("a").request(count=2)])
    pl, infos = framework_of(store, ("n1", "n2", "n3", "n4"))
    state, pod = CycleState(), pod_with("a")
    assert pl.pre_filter(state, pod, infos).is_success
    verdicts = {ni.name: pl.filter(state, pod, ni) for ni in infos}
    assert verdicts["n2"].message == plugin.REASON_CANNOT_ALLOCATE
    assert all(verdicts[n].is_success for n in ("n1", "n3", "n4"))
    s = state.read(plugin.STATE_KEY)
    assert set(s.chosen) == {"n1", "n3", "n4"}
    assert s.by_node == {}
    assert pl.reserve(state, pod, "n3").is_success
    assert set(s.by_node) == {"n3"}, "only the node the pod goes to"
    eager = dra_allocator.allocate(
        claims_of(store, "a"),
        store.candidates("n3", {}),
        frozenset(),
        store.device_class,
        dra_allocator.CELCache(),
        "n3",
    )
    assert eager is not None
    got = s.allocations("n3")
    assert got is not None
    assert (
        [r.id for r in got[0].results] == [r.id for r in eager[0].results] == [(D, "n3", "gpu-0"), (D, "n3", "gpu-1")]
    )
    assert got[0].node_selector_raw == eager[0].node_selector_raw
    assert got[0].node_selector_raw is not None
    assert store.pending_allocation("uid-claim-a") is not None
    assert s.allocations("n2") is None


def test_a_node_selector_that_cannot_be_built_is_still_filters_error() -> None:
    """A slice for a rack (not one node) whose node selector has two terms: the allocation's node
    selector cannot be written, which upstream reports in Filter; the deferred results keep it so."""
    two_terms = {
        "nodeSelectorTerms": [
            {"matchExpressions": [{"key": "rack", "operator": "In", "values": ["r1"]}]},
            {"matchExpressions": [{"key": "rack", "operator": "In", "values": ["r2"]}]},
        ]
    }
    store = store_of(
        [resource_slice_obj("", {"g": {}}, node_selector=two_terms, pool="rack")], [ClaimBuilder("a").request()]
    )
    node = NodeInfo(make_node("n1").label("rack", "r1").build())
    pl, _ = framework_of(store, ())
    state, pod = CycleState(), pod_with("a")
    assert pl.pre_filter(state, pod, [node]).is_success
    got = pl.filter(state, pod, node)
    assert got.code is Code.ERROR
    assert "unsupported ResourceSlice.NodeSelector with 2 terms" in got.message


def test_no_claims_fit_anywhere() -> None:
    """Nothing to allocate is an empty allocation, not "does not fit" (as the search answers)."""
    store = store_of([gpus("n1")], [])
    for node in ("n1", "n2"):
        got = dra_allocator.allocate(
            [], store.candidates(node, {}), frozenset(), store.device_class, dra_allocator.CELCache(), node
        )
        assert got == []
