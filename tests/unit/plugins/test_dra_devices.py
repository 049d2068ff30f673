"""The structured allocator's 1.37 device features, from builders: taints and DeviceTaintRules,
admin access, partitionable devices (counters, pools, per-device node selection) and consumable
capacity, plus the store's accounting of each (what Reserve re-checks)."""

from __future__ import annotations

import copy
from collections.abc import Sequence
from decimal import Decimal
from typing import Any

import pytest

from custom_scheduler.api import dra, dra_devices
from custom_scheduler.framework import cluster_events as ce
from custom_scheduler.framework import dra_store as fdra
from custom_scheduler.plugins import dra_allocator
from tests.builders import ClaimBuilder, device_class_obj, resource_slice_obj

D = "gpu.example.com"
CLASS = device_class_obj("gpu", f'device.driver == "{D}"')


# -- builders on top of tests.builders ----------------------------------------------------------------


def gpus(node: str = "n1", n: int = 2, **extra: dict[str, Any]) -> dict[str, Any]:
    """A slice of ``n`` GPUs (``gpu-i`` with attribute ``index``); ``extra[gpu-i]`` merges into a device."""
    obj = resource_slice_obj(node, {f"gpu-{i}": {"index": i} for i in range(n)})
    for d in obj["spec"]["devices"]:
        d.update(copy.deepcopy(extra.get(d["name"].replace("-", "_"), {})))
    return obj


def partitions(node: str = "n1", memory: str = "40Gi", *parts: tuple[str, str]) -> list[dict[str, Any]]:
    """A pool of two slices: the counter set ``gpu-0`` (``memory``) and the partitions consuming it."""
    counters = resource_slice_obj(node, {})
    counters["metadata"]["name"] = f"{node}-counters"
    del counters["spec"]["devices"]
    counters["spec"]["sharedCounters"] = [{"name": "gpu-0", "counters": {"memory": {"value": memory}}}]
    devs = resource_slice_obj(node, {name: {} for name, _ in parts})
    for d, (_, mem) in zip(devs["spec"]["devices"], parts, strict=True):
        d["consumesCounters"] = [{"counterSet": "gpu-0", "counters": {"memory": {"value": mem}}}]
    for s in (counters, devs):
        s["spec"]["pool"]["resourceSliceCount"] = 2
    return [counters, devs]


def shareable(node: str = "n1", memory: str = "40Gi", policy: dict[str, Any] | None = None) -> dict[str, Any]:
    cap: dict[str, Any] = {"value": memory}
    if policy is not None:
        cap["requestPolicy"] = policy
    return gpus(node, 1, gpu_0={"allowMultipleAllocations": True, "capacity": {"memory": cap}})


def claim(name: str, **exactly: Any) -> ClaimBuilder:
    """A claim with one request ``gpu`` whose ``exactly`` gets ``exactly`` merged in."""
    b = ClaimBuilder(name).request()
    b._obj["spec"]["devices"]["requests"][0]["exactly"].update(exactly)
    return b


def store_of(
    slices: list[dict[str, Any]], claims: Sequence[ClaimBuilder] = (), rules: Sequence[dict[str, Any]] = ()
) -> fdra.DRAStore:
    s = fdra.DRAStore()
    s.load(fdra.SLICE, (dra.resource_slice_from_json(x) for x in slices))
    s.load(fdra.CLASS, [dra.device_class_from_json(CLASS)])
    s.load(fdra.CLAIM, (dra.resource_claim_from_json(c.obj()) for c in claims))
    s.load(fdra.TAINT_RULE, (dra_devices.device_taint_rule_from_json(r) for r in rules))
    return s


def allocate(store: fdra.DRAStore, names: list[str], node: str = "n1", labels: dict[str, str] | None = None) -> Any:
    claims = [store.get_claim("default", n) for n in names]
    cands = store.candidates(node, labels or {})
    return dra_allocator.allocate(
        claims,  # type: ignore[arg-type]
        cands,
        store.allocated_devices(),
        store.device_class,
        dra_allocator.CELCache(),
        node,
    )


def picked(allocs: list[dra.Allocation] | None) -> list[list[str]] | None:
    return None if allocs is None else [[r.device for r in a.results] for a in allocs]


def allocated(name: str, device: str, **result: Any) -> ClaimBuilder:
    """An already allocated claim (another pod's) holding ``device`` (``result`` adds to the result)."""
    b = claim(name)
    r = {"request": "gpu", "driver": D, "pool": "n1", "device": device, **result}
    b._obj["status"] = {"allocation": {"devices": {"results": [r]}}}
    return b


NO_SCHEDULE = {"key": "broken", "value": "yes", "effect": "NoSchedule"}


def rule(name: str, taint: dict[str, Any], **selector: str) -> dict[str, Any]:
    return {"metadata": {"name": name}, "spec": {"deviceSelector": selector, "taint": taint}}


# -- taints ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("slices", "claims", "rules", "want"),
    [
        pytest.param([gpus(gpu_0={"taints": [NO_SCHEDULE]})], [claim("c")], [], [["gpu-1"]], id="tainted-skipped"),
        pytest.param(
            [gpus(gpu_0={"taints": [{**NO_SCHEDULE, "effect": "NoExecute"}]}, gpu_1={"taints": [NO_SCHEDULE]})],
            [claim("c")],
            [],
            None,
            id="all-tainted-none",
        ),
        pytest.param(
            [gpus(gpu_0={"taints": [NO_SCHEDULE]})],
            [claim("c", tolerations=[{"key": "broken", "operator": "Exists"}])],
            [],
            [["gpu-0"]],
            id="tolerated-exists",
        ),
        pytest.param(
            [gpus(gpu_0={"taints": [NO_SCHEDULE]})],
            [claim("c", tolerations=[{"key": "broken", "value": "no"}])],
            [],
            [["gpu-1"]],
            id="equal-other-value",
        ),
        pytest.param(
            [gpus(gpu_0={"taints": [{"key": "k", "effect": "None"}]})],
            [claim("c")],
            [],
            [["gpu-0"]],
            id="effect-none-ignored",
        ),
        pytest.param(
            [gpus()], [claim("c")], [rule("r", NO_SCHEDULE, device="gpu-0")], [["gpu-1"]], id="rule-taints-one"
        ),
        pytest.param(
            [gpus()], [claim("c")], [rule("r", NO_SCHEDULE, driver="other")], [["gpu-0"]], id="rule-other-driver"
        ),
        pytest.param([gpus()], [claim("c")], [rule("r", NO_SCHEDULE)], None, id="rule-empty-selector-all"),
        pytest.param(
            [gpus()],
            [claim("c")],
            [{"metadata": {"name": "r"}, "spec": {"taint": NO_SCHEDULE}}],
            [["gpu-0"]],
            id="rule-without-selector-nothing",
        ),
        pytest.param(
            [gpus(gpu_1={"taints": [NO_SCHEDULE]})],
            [claim("c", allocationMode="All")],
            [],
            None,
            id="all-mode-tainted",
        ),
    ],
)
def test_taints(
    slices: list[dict[str, Any]], claims: list[ClaimBuilder], rules: list[dict[str, Any]], want: Any
) -> None:
    store = store_of(slices, claims, rules)
    assert picked(allocate(store, [c._obj["metadata"]["name"] for c in claims])) == want


def test_tolerations_are_copied_into_the_result() -> None:
    tol = [{"key": "broken", "operator": "Exists", "effect": "NoSchedule"}]
    store = store_of([gpus(gpu_0={"taints": [NO_SCHEDULE]})], [claim("c", tolerations=tol)])
    (alloc,) = allocate(store, ["c"])
    assert alloc.to_json()["devices"]["results"][0]["tolerations"] == tol


def test_taint_rule_update_and_delete_reach_cached_candidates() -> None:
    store = store_of([gpus(n=1)], [claim("c")])
    assert picked(allocate(store, ["c"])) == [["gpu-0"]]
    r = dra_devices.device_taint_rule_from_json(rule("r", NO_SCHEDULE, device="gpu-0"))
    store.put(fdra.TAINT_RULE, r)
    assert allocate(store, ["c"]) is None
    store.delete(fdra.TAINT_RULE, r)
    assert picked(allocate(store, ["c"])) == [["gpu-0"]]


# -- admin access -------------------------------------------------------------------------------------


def test_admin_access_takes_a_device_in_use_without_consuming_it() -> None:
    store = store_of([gpus(n=1)], [allocated("other", device="gpu-0"), claim("admin", adminAccess=True), claim("user")])
    (alloc,) = allocate(store, ["admin"])
    assert alloc.to_json()["devices"]["results"][0] == {
        "request": "gpu",
        "driver": D,
        "pool": "n1",
        "device": "gpu-0",
        "adminAccess": True,
    }
    assert alloc.devices == frozenset()  # holds nothing: the store keeps the device free for others
    assert allocate(store, ["user"]) is None  # gpu-0 is still the other claim's


def test_admin_access_result_in_the_store_leaves_the_device_free() -> None:
    store = store_of([gpus(n=1)], [allocated("admin", device="gpu-0", adminAccess=True), claim("user")])
    assert store.allocated_devices() == frozenset()
    assert picked(allocate(store, ["user"])) == [["gpu-0"]]


def test_admin_access_never_twice_in_one_claim() -> None:
    b = claim("admin", adminAccess=True)
    b._obj["spec"]["devices"]["requests"].append(
        {"name": "gpu2", "exactly": {"deviceClassName": "gpu", "adminAccess": True}}
    )
    store = store_of([gpus(n=1)], [b])
    assert allocate(store, ["admin"]) is None


# -- partitionable devices ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("memory", "count", "taken", "want"),
    [
        pytest.param("40Gi", 2, [], [["half-0", "half-1"]], id="two-halves-fit"),
        pytest.param("40Gi", 1, [], [["full"]], id="first-fits"),
        pytest.param("30Gi", 2, [], None, id="counters-exceeded"),
        pytest.param("40Gi", 1, ["half-0"], [["half-1"]], id="allocated-half-consumes"),
        pytest.param("40Gi", 1, ["full"], None, id="allocated-full-consumes-all"),
    ],
)
def test_counters(memory: str, count: int, taken: list[str], want: Any) -> None:
    slices = partitions("n1", memory, ("full", "40Gi"), ("half-0", "20Gi"), ("half-1", "20Gi"))
    if count == 2:  # only the halves
        slices[1]["spec"]["devices"] = slices[1]["spec"]["devices"][1:]
    claims = [claim("c", count=count), *(allocated(f"o{i}", device=d) for i, d in enumerate(taken))]
    assert picked(allocate(store_of(slices, claims), ["c"])) == want


def test_two_claims_of_one_pod_share_the_counters() -> None:
    slices = partitions("n1", "40Gi", ("a", "30Gi"), ("b", "30Gi"))
    assert allocate(store_of(slices, [claim("c1"), claim("c2")]), ["c1", "c2"]) is None


@pytest.mark.parametrize(
    ("mutate", "error"),
    [
        pytest.param(
            lambda s: s[1]["spec"]["devices"][0]["consumesCounters"][0].update(counterSet="nope"),
            "invalid",
            id="missing-set",
        ),
        pytest.param(
            lambda s: s[1]["spec"]["devices"][0]["consumesCounters"][0]["counters"].update(other={"value": "1"}),
            "invalid",
            id="missing-counter",
        ),
        pytest.param(lambda s: s.pop(0), "incomplete", id="incomplete-pool"),
    ],
)
def test_bad_pools_hand_out_nothing(mutate: Any, error: str) -> None:
    slices = partitions("n1", "40Gi", ("a", "10Gi"))
    mutate(slices)
    plain = resource_slice_obj("n1", {"gpu-0": {}}, pool="other")
    plain["spec"]["nodeName"] = "n1"
    store = store_of([*slices, plain], [claim("c", count=2), claim("all", allocationMode="All")])
    assert picked(allocate(store, ["c"]) if error == "incomplete" else None) is None
    if error == "invalid":
        with pytest.raises(dra_allocator.NodeUnschedulable, match=r"^invalid resource pools were encountered$"):
            allocate(store, ["c"])
    else:
        with pytest.raises(
            dra_allocator.AllocationError, match=r"resource pool gpu\.example\.com/n1 is currently being updated"
        ):
            allocate(store, ["all"])


def test_per_device_node_selection() -> None:
    s = resource_slice_obj("pool", {"local": {}, "zonal": {}, "far": {}})
    del s["spec"]["nodeName"]
    s["spec"]["perDeviceNodeSelection"] = True
    zone = {"nodeSelectorTerms": [{"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}]}]}
    s["spec"]["devices"][0]["nodeName"] = "n1"
    s["spec"]["devices"][1]["nodeSelector"] = zone
    s["spec"]["devices"][2]["nodeName"] = "n2"
    store = store_of(
        [s], [claim("c", count=2), claim("one", selectors=[{"cel": {"expression": 'device.driver != ""'}}])]
    )
    (alloc,) = allocate(store, ["c"], labels={"zone": "a"})
    assert [r.device for r in alloc.results] == ["local", "zonal"]
    assert alloc.node_selector_raw == {
        "nodeSelectorTerms": [{"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n1"]}]}]
    }
    assert allocate(store, ["c"], labels={"zone": "b"}) is None  # only "local" reaches n1 then
    (zonal,) = allocate(store, ["one"], node="n3", labels={"zone": "a"})
    assert zonal.node_selector_raw == zone


# -- consumable capacity --------------------------------------------------------------------------------


def test_shareable_device_serves_claims_until_its_capacity_is_used() -> None:
    store = store_of(
        [shareable(memory="40Gi")], [claim(f"c{i}", capacity={"requests": {"memory": "10Gi"}}) for i in range(5)]
    )
    for i in range(4):
        (alloc,) = allocate(store, [f"c{i}"])
        (r,) = alloc.results
        assert (r.device, dict(r.consumed)) == ("gpu-0", {"memory": "10Gi"})
        assert r.share_id
        assert alloc.devices == frozenset()
        assert alloc.shares == (r,)
        assert store.signal_pending(store.get_claim("default", f"c{i}"), alloc)  # type: ignore[arg-type]
    assert store.allocated_state().shared == {(D, "n1", "gpu-0"): {"memory": Decimal(40 * 2**30)}}
    assert allocate(store, ["c4"]) is None
    store.remove_pending("uid-claim-c0")
    assert picked(allocate(store, ["c4"])) == [["gpu-0"]]


def test_two_claims_of_one_pod_share_a_device_and_get_distinct_share_ids() -> None:
    caps = {"requests": {"memory": "20Gi"}}
    store = store_of([shareable()], [claim("a", capacity=caps), claim("b", capacity=caps), claim("c", capacity=caps)])
    a, b = allocate(store, ["a", "b"])
    assert a.results[0].share_id != b.results[0].share_id
    assert allocate(store, ["a", "b", "c"]) is None


@pytest.mark.parametrize(
    ("policy", "asked", "want"),
    [
        pytest.param(None, None, "40Gi", id="no-request-takes-all"),
        pytest.param({"default": "8Gi", "validRange": {"min": "4Gi", "step": "4Gi"}}, None, "8Gi", id="default"),
        pytest.param(
            {"default": "8Gi", "validRange": {"min": "4Gi", "step": "4Gi"}}, "5Gi", "8Gi", id="step-rounds-up"
        ),
        pytest.param({"default": "8Gi", "validRange": {"min": "4Gi", "step": "4Gi"}}, "1Gi", "4Gi", id="below-min"),
        pytest.param({"default": "8Gi", "validRange": {"min": "4Gi", "max": "16Gi"}}, "20Gi", None, id="above-max"),
        pytest.param({"default": "8Gi", "validValues": ["8Gi", "16Gi"]}, "9Gi", "16Gi", id="valid-values-round"),
        pytest.param({"default": "8Gi", "validValues": ["8Gi", "16Gi"]}, "17Gi", None, id="valid-values-too-big"),
        pytest.param(None, "50Gi", None, id="over-capacity"),
    ],
)
def test_request_policy(policy: dict[str, Any] | None, asked: str | None, want: str | None) -> None:
    caps = {} if asked is None else {"capacity": {"requests": {"memory": asked}}}
    store = store_of([shareable(policy=policy)], [claim("c", **caps)])
    got = allocate(store, ["c"])
    assert (None if got is None else dict(got[0].results[0].consumed)["memory"]) == want


def test_capacity_request_on_an_exclusive_device_filters_it() -> None:
    slice_ = gpus(gpu_0={"capacity": {"memory": {"value": "10Gi"}}}, gpu_1={"capacity": {"memory": {"value": "80Gi"}}})
    store = store_of([slice_], [claim("c", capacity={"requests": {"memory": "40Gi"}})])
    (alloc,) = allocate(store, ["c"])
    assert [r.to_json() for r in alloc.results] == [{"request": "gpu", "driver": D, "pool": "n1", "device": "gpu-1"}]


def test_distinct_attribute() -> None:
    s = gpus(n=3)
    s["spec"]["devices"][1]["attributes"]["index"] = {"int": 0}
    b = claim("c", count=2)
    b._obj["spec"]["devices"]["constraints"] = [{"distinctAttribute": f"{D}/index"}]
    assert picked(allocate(store_of([s], [b]), ["c"])) == [["gpu-0", "gpu-2"]]


def test_empty_constraint_is_an_error() -> None:
    b = claim("c")
    b._obj["spec"]["devices"]["constraints"] = [{"requests": ["gpu"]}]
    with pytest.raises(dra_allocator.AllocationError, match=r"constraint #0: empty constraint"):
        allocate(store_of([gpus()], [b]), ["c"])


# -- the store's re-check at Reserve ---------------------------------------------------------------------


def test_reserve_refuses_counters_another_pod_took_meanwhile() -> None:
    store = store_of(partitions("n1", "40Gi", ("a", "30Gi"), ("b", "30Gi")), [claim("c1"), claim("c2")])
    (a1,) = allocate(store, ["c1"])
    (a2,) = allocate(store, ["c2"])  # both filtered against the same state, as two racing cycles
    assert (picked([a1]), picked([a2])) == ([["a"]], [["a"]])
    other = dra.Allocation((dra.DeviceResult("gpu", D, "n1", "b"),))
    assert store.signal_pending(store.get_claim("default", "c1"), a1)  # type: ignore[arg-type]
    assert not store.signal_pending(store.get_claim("default", "c2"), other)  # type: ignore[arg-type]
    store.remove_pending("uid-claim-c1")
    assert store.signal_pending(store.get_claim("default", "c2"), other)  # type: ignore[arg-type]


def test_reserve_refuses_a_share_past_capacity() -> None:
    caps = {"requests": {"memory": "30Gi"}}
    store = store_of([shareable()], [claim("c1", capacity=caps), claim("c2", capacity=caps)])
    (a1,) = allocate(store, ["c1"])
    (a2,) = allocate(store, ["c2"])
    assert store.signal_pending(store.get_claim("default", "c1"), a1)  # type: ignore[arg-type]
    assert not store.signal_pending(store.get_claim("default", "c2"), a2)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("value", "fmt", "want"),
    [
        (Decimal(8 * 2**30), "BinarySI", "8Gi"),
        (Decimal(1500), "BinarySI", "1500"),
        (Decimal(2000), "DecimalSI", "2k"),
        (Decimal("0.5"), "DecimalSI", "500m"),
        (Decimal(3000), "DecimalExponent", "3e3"),
        (Decimal(0), "DecimalSI", "0"),
    ],
)
def test_format_quantity(value: Decimal, fmt: str, want: str) -> None:
    assert dra_devices.format_quantity(value, fmt) == want


@pytest.mark.parametrize(("old", "new"), [(None, "r"), ("r", "r"), ("r", None)])
def test_every_taint_rule_change_requeues_as_a_slice_update(old: str | None, new: str | None) -> None:
    r = dra_devices.device_taint_rule_from_json(rule("r", NO_SCHEDULE))
    got = ce.store_event(fdra.TAINT_RULE, r if old else None, r if new else None)
    assert got == ce.ClusterEvent(ce.Resource.RESOURCE_SLICE, ce.Action.UPDATE)
