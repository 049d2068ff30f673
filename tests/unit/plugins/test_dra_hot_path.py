"""The DRA Filter hot path's shortcuts give the answers the plain computation gives: selector
outcomes memoised per device, a node's candidate devices kept until its slices change, the direct
pick for one claim with one request, and nodes without devices (from builders, no API server)."""

from __future__ import annotations

from typing import Any

import pytest

from custom_scheduler.api import dra
from custom_scheduler.framework import dra_store as fdra
from custom_scheduler.plugins import dra_allocator
from tests.builders import ClaimBuilder, device_class_obj, resource_slice_obj

D = "gpu.example.com"
CLASS = device_class_obj("gpu", f'device.driver == "{D}"')


def store_of(slices: list[dict[str, Any]], claims: list[ClaimBuilder]) -> fdra.DRAStore:
    s = fdra.DRAStore()
    s.load(fdra.SLICE, (dra.resource_slice_from_json(x) for x in slices))
    s.load(fdra.CLASS, [dra.device_class_from_json(CLASS)])
    s.load(fdra.CLAIM, (dra.resource_claim_from_json(c.obj()) for c in claims))
    return s


def four_gpus(node: str, model: str = "a100") -> dict[str, Any]:
    return resource_slice_obj(node, {f"gpu-{i}": {"model": model, "index": i} for i in range(4)})


def run(store: fdra.DRAStore, names: list[str], node: str = "n1") -> list[list[str]] | None:
    claims = [store.get_claim("default", n) for n in names]
    got = dra_allocator.allocate(
        claims,  # type: ignore[arg-type]
        store.candidates(node, {}),
        store.allocated_devices(),
        store.device_class,
        dra_allocator.CELCache(),
        node,
    )
    return None if got is None else [[f"{r.request}={r.device}" for r in a.results] for a in got]


@pytest.mark.parametrize(
    ("claims", "want"),
    [
        pytest.param([ClaimBuilder("a").request()], [["gpu=gpu-1"]], id="first-free"),
        pytest.param([ClaimBuilder("a").request(count=2)], [["gpu=gpu-1", "gpu=gpu-3"]], id="count-skips-in-use"),
        pytest.param([ClaimBuilder("a").request(count=3)], None, id="count-beyond-free"),
        pytest.param([ClaimBuilder("a").request(mode="All")], None, id="all-with-one-in-use"),
        pytest.param(
            [ClaimBuilder("a").request("gpu", "gpu", f'device.attributes["{D}"].index > 1')],
            [["gpu=gpu-3"]],
            id="selector-and-in-use",
        ),
        pytest.param(
            [ClaimBuilder("a").request(), ClaimBuilder("b").request()],
            [["gpu=gpu-1"], ["gpu=gpu-3"]],
            id="two-claims-take-the-search",
        ),
    ],
)
def test_one_request_pick_matches_the_search(claims: list[ClaimBuilder], want: list[list[str]] | None) -> None:
    """gpu-0 and gpu-2 are held by other claims; the remaining devices go in slice order."""
    held = [
        ClaimBuilder("h0").request().allocated("n1", "gpu-0"),
        ClaimBuilder("h2").request().allocated("n1", "gpu-2"),
    ]
    store = store_of([four_gpus("n1")], held + claims)
    assert run(store, [c.obj()["metadata"]["name"] for c in claims]) == want


def test_selector_outcomes_are_memoised_per_device_and_errors_raise_every_time() -> None:
    cels = dra_allocator.CELCache()
    device = dra.resource_slice_from_json(four_gpus("n1")).devices[0]
    ok, bad = f'device.attributes["{D}"].model == "a100"', f'device.attributes["{D}"].nope == 1'
    assert cels.matches(ok, device) is True
    assert device.cel_results[ok] is True
    for _ in range(2):
        with pytest.raises(dra_allocator.CELError, match="runtime error"):
            cels.matches(bad, device)
    assert isinstance(device.cel_results[bad], str)
    # A slice update projects new devices: the outcome follows the new attributes.
    updated = dra.resource_slice_from_json(four_gpus("n1", model="h100")).devices[0]
    assert cels.matches(ok, updated) is False


def test_memo_is_bounded() -> None:
    cels = dra_allocator.CELCache()
    device = dra.resource_slice_from_json(four_gpus("n1")).devices[0]
    for i in range(dra_allocator.DEVICE_MEMO_MAX + 5):
        assert cels.matches(f'device.attributes["{D}"].index == {i}', device) is (i == 0)
    assert len(device.cel_results) <= dra_allocator.DEVICE_MEMO_MAX


def test_node_candidates_are_kept_until_the_nodes_slices_change() -> None:
    store = store_of([four_gpus("n1"), four_gpus("n2")], [])
    first = store.candidates("n1", {})
    assert store.candidates("n1", {}) is first
    assert [c.device.name for c in first] == ["gpu-0", "gpu-1", "gpu-2", "gpu-3"]
    assert store.candidates("n3", {}) == ()

    bigger = resource_slice_obj("n1", {"gpu-9": {"model": "b200"}})
    store.put(fdra.SLICE, dra.resource_slice_from_json(bigger))  # same slice name: replaces it
    assert [c.device.name for c in store.candidates("n1", {})] == ["gpu-9"]
    n2 = store.candidates("n2", {})
    store.delete(fdra.SLICE, dra.resource_slice_from_json(bigger))
    assert store.candidates("n1", {}) == ()
    assert store.candidates("n2", {}) is n2, "another node's slices did not change"


def test_shared_slices_still_depend_on_the_nodes_labels() -> None:
    sel = {"nodeSelectorTerms": [{"matchExpressions": [{"key": "rack", "operator": "In", "values": ["r1"]}]}]}
    store = store_of([four_gpus("n1"), resource_slice_obj("", {"rack1": {}}, node_selector=sel, pool="rack")], [])
    assert len(store.candidates("n1", {"rack": "r1"})) == 5
    assert len(store.candidates("n1", {"rack": "r2"})) == 4
    assert [c.device.name for c in store.candidates("n9", {"rack": "r1"})] == ["rack1"]


def test_node_without_devices_fits_nothing_but_a_missing_class_is_still_an_error() -> None:
    store = store_of([], [ClaimBuilder("a").request(), ClaimBuilder("x").request("gpu", "nope")])
    assert run(store, ["a"]) is None
    with pytest.raises(dra_allocator.AllocationError, match="could not retrieve device class nope"):
        run(store, ["x"])
    empty = store_of([], [ClaimBuilder("none")])
    assert run(empty, ["none"]) == [[]], "a claim without requests fits anywhere"
