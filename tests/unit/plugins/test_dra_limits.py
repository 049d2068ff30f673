"""The allocator's limits, as upstream's structured allocator applies them: at most 32 results in one
claim's allocation (``resourceapi.AllocationResultsMaxSize``), checked before any search with
upstream's error and again while choosing ``firstAvailable`` alternatives; and CEL selectors that
fail (compile error, runtime error, cost over ``resourceapi.CELSelectorExpressionMaxCost``) as one
table, each an error that names the claim (or class) and the selector."""

from __future__ import annotations

from typing import Any

import pytest

from custom_scheduler.api import dra
from custom_scheduler.api.model import pod_from_json
from custom_scheduler.framework import dra_store as fdra
from custom_scheduler.framework.handle import SnapshotHandle
from custom_scheduler.framework.types import Code, CycleState, NodeInfo, Snapshot
from custom_scheduler.plugins import dra_allocator, dra_cel_cost
from custom_scheduler.plugins import dynamic_resources as plugin
from tests.builders import ClaimBuilder, device_class_obj, make_node, make_pod, resource_slice_obj

D = "gpu.example.com"

LIMIT = dra_allocator.ALLOCATION_RESULTS_MAX
OVER = "adding 33 devices exceeds the claim limit of 32, with 0 already accounted for"


def _store(n_devices: int, *claims: ClaimBuilder) -> fdra.DRAStore:
    s = fdra.DRAStore()
    s.load(
        fdra.SLICE, [dra.resource_slice_from_json(resource_slice_obj("n1", {f"gpu-{i}": {} for i in range(n_devices)}))]
    )
    s.load(fdra.CLASS, [dra.device_class_from_json(device_class_obj("gpu", f'device.driver == "{D}"'))])
    s.load(fdra.CLAIM, (dra.resource_claim_from_json(c.obj()) for c in claims))
    return s


def allocate(store: fdra.DRAStore, names: list[str], cels: dra_allocator.CELCache | None = None) -> Any:
    claims = [store.get_claim("default", n) for n in names]
    return dra_allocator.allocate(
        claims,  # type: ignore[arg-type]
        store.candidates("n1", {}),
        store.allocated_devices(),
        store.device_class,
        cels or dra_allocator.CELCache(),
        "n1",
    )


def picked(allocs: list[dra.Allocation] | None) -> list[list[str]] | None:
    return None if allocs is None else [[r.device for r in a.results] for a in allocs]


@pytest.mark.parametrize(
    ("build", "devices", "want"),
    [
        pytest.param(
            lambda: ClaimBuilder("c").request(count=LIMIT),
            40,
            LIMIT,
            id="exactly-32-fits",
        ),
        pytest.param(
            lambda: ClaimBuilder("c").request(count=LIMIT + 1),
            40,
            f"claim default/c, request gpu: {OVER}",
            id="exactly-33",
        ),
        pytest.param(
            lambda: ClaimBuilder("c").request("a", count=20).request("b", count=13),
            40,
            "claim default/c, request b: adding 13 devices exceeds the claim limit of 32, "
            "with 20 already accounted for",
            id="two-requests-add-up-past-32",
        ),
        pytest.param(
            lambda: ClaimBuilder("c").request(mode="All"),
            LIMIT + 1,
            f"claim default/c, request gpu: {OVER}",
            id="all-of-33-devices",
        ),
        pytest.param(
            lambda: ClaimBuilder("c").request(mode="All"),
            LIMIT,
            LIMIT,
            id="all-of-32-devices",
        ),
        pytest.param(
            lambda: ClaimBuilder("c").request(count=LIMIT + 1),
            0,
            f"claim default/c, request gpu: {OVER}",
            id="a-node-without-devices-says-the-same",
        ),
    ],
)
def test_claim_limit(build: Any, devices: int, want: int | str) -> None:
    store = _store(devices, build())
    if isinstance(want, str):
        with pytest.raises(dra_allocator.AllocationError) as e:
            allocate(store, ["c"])
        assert str(e.value) == want
    else:
        got = picked(allocate(store, ["c"]))
        assert got is not None
        assert len(got[0]) == want


def test_first_available_skips_an_alternative_that_would_pass_the_limit() -> None:
    """The fewest devices any subrequest takes count against the limit up front (30 here); while
    searching, the 3-device alternative does not fit after 30 devices, the 2-device one does."""
    c = ClaimBuilder("c").request("a", count=30)
    c._obj["spec"]["devices"]["requests"].append(
        {
            "name": "b",
            "firstAvailable": [
                {"name": "three", "deviceClassName": "gpu", "count": 3},
                {"name": "two", "deviceClassName": "gpu", "count": 2},
            ],
        }
    )
    store = _store(40, c)
    allocs = allocate(store, ["c"])
    assert allocs is not None
    results = allocs[0].results
    assert len(results) == LIMIT
    assert {r.request for r in results} == {"a", "b/two"}


def test_the_limit_is_per_claim() -> None:
    """Two claims of one pod may hold 32 devices each."""
    store = _store(64, ClaimBuilder("c1").request(count=LIMIT), ClaimBuilder("c2").request(count=LIMIT))
    got = picked(allocate(store, ["c1", "c2"]))
    assert got is not None
    assert [len(g) for g in got] == [LIMIT, LIMIT]
    assert not set(got[0]) & set(got[1])


def test_claim_model_round_trips_a_count() -> None:
    c = dra.resource_claim_from_json(ClaimBuilder("c").request(count=LIMIT + 1).obj())
    assert c.requests[0].alternatives[0].count == LIMIT + 1


# --- CEL: compile error, runtime error, cost over the limit -------------------------------------------

MODEL_AND_MEMORY = (
    f'device.attributes["{D}"].model == "a100" && device.capacity["{D}"].memory.compareTo(quantity("40Gi")) >= 0'
)
_HUNDRED = "[" + ",".join(str(i) for i in range(100)) + "]"
#: 100 × 100 × 100 iterations: about 9 million units, nine times the limit.
TOO_COSTLY = f"{_HUNDRED}.all(a, {_HUNDRED}.all(b, {_HUNDRED}.all(c, a + b + c >= 0)))"


@pytest.mark.parametrize(
    ("expr", "phase", "want"),
    [
        pytest.param(
            "device.attributes[", "pre_filter", "claim default/a: selector #0: CEL compile error: ", id="compile"
        ),
        pytest.param(
            f'device.attributes["{D}"].nope == 1',
            "filter",
            f"claim default/a: selector #0 on device {D}/n1/gpu-0: CEL runtime error: ",
            id="runtime",
        ),
        pytest.param(
            TOO_COSTLY,
            "pre_filter",
            "claim default/a: selector #0: CEL cost error: estimated cost 9040402 exceeds the cost limit 1000000",
            id="cost",
        ),
    ],
)
def test_a_failing_selector_is_an_error_naming_the_claim_and_the_selector(expr: str, phase: str, want: str) -> None:
    """Each kind of failure ends the attempt with an Error (FailedScheduling with this message);
    a compile or cost error is found once in PreFilter, a runtime error on the first device."""
    store = _store(2, ClaimBuilder("a").request("gpu", "gpu", expr))
    infos = [NodeInfo(make_node("n1").build())]
    snap = Snapshot(node_infos={ni.name: ni for ni in infos}, node_list=infos)
    pl = plugin.DynamicResources(None, SnapshotHandle(snap, profile_name="p", dra=store))
    pod = pod_from_json(
        {
            **make_pod("p").obj(),
            "spec": {**make_pod("p").obj()["spec"], "resourceClaims": [{"name": "c", "resourceClaimName": "a"}]},
        }
    )
    state = CycleState()
    st = pl.pre_filter(state, pod, infos)
    if phase == "filter":
        assert st.is_success
        st = pl.filter(state, pod, infos[0])
    assert st.code is Code.ERROR
    assert st.message.startswith(want), st.message


def test_a_class_selector_over_the_cost_limit_names_the_class() -> None:
    cels = dra_allocator.CELCache()
    store = _store(1, ClaimBuilder("a").request())
    store.put(fdra.CLASS, dra.device_class_from_json(device_class_obj("gpu", TOO_COSTLY)))
    with pytest.raises(dra_allocator.AllocationError) as e:
        allocate(store, ["a"], cels)
    assert str(e.value).startswith("class gpu: selector #0: CEL cost error: estimated cost")


@pytest.mark.parametrize(
    ("expr", "at_most"),
    [
        (f'device.driver == "{D}"', 10),
        (MODEL_AND_MEMORY, 40),
        (f'device.attributes["{D}"].exists(k, k.startsWith("a"))', 32 * 10),
        (f"{_HUNDRED}.all(a, {_HUNDRED}.all(b, a + b >= 0))", dra_cel_cost.MAX_COST),
    ],
)
def test_ordinary_selectors_stay_far_below_the_limit(expr: str, at_most: int) -> None:
    assert dra_cel_cost.estimate(expr) <= at_most
    assert dra_cel_cost.over_limit(expr) == ""


def test_nesting_multiplies_and_a_literal_range_counts_its_elements() -> None:
    one = dra_cel_cost.estimate("[1, 2, 3].all(x, x > 0)")
    # The literal ("[" and three numbers), the macro's step, 3 × (body "x > 0" + the loop step).
    assert one == 4 + 1 + 3 * (3 + 1)
    assert dra_cel_cost.estimate("[1, 2, 3].all(x, [1, 2, 3].all(y, x > y))") > 3 * one
