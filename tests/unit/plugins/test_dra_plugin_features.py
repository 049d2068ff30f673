"""Pure parts of DynamicResources' 1.37 features: ``devices.config``, binding-condition checks,
the Kubernetes CEL functions, and the framework joining PostFilter reasons as upstream."""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any, ClassVar

import pytest

from custom_scheduler.api import dra
from custom_scheduler.api.model import Pod
from custom_scheduler.framework.interface import PostFilterResult
from custom_scheduler.framework.types import Code, CycleState, Status
from custom_scheduler.plugins import dra_binding, dra_cel, dra_config
from tests.builders import make_pod

CLASS_CFG = {"opaque": {"driver": "d", "parameters": {"x": 1}}}


def _classes(name: str) -> dra.DeviceClass | None:
    return {
        "gpu": dra.DeviceClass("gpu", config=(CLASS_CFG,)),
        "nic": dra.DeviceClass("nic", config=()),
    }.get(name)


def _claim(requests: list[dict[str, Any]], config: list[dict[str, Any]] | None = None) -> dra.ResourceClaim:
    devices: dict[str, Any] = {"requests": requests}
    if config is not None:
        devices["config"] = config
    return dra.resource_claim_from_json({"metadata": {"namespace": "ns", "name": "c"}, "spec": {"devices": devices}})


def _alloc(*requests: str) -> dra.Allocation:
    return dra.Allocation(tuple(dra.DeviceResult(r, "d", "p", f"dev-{i}") for i, r in enumerate(requests)))


CLAIM_CFG = {"opaque": {"driver": "d", "parameters": {"y": 2}}}


@pytest.mark.parametrize(
    ("requests", "config", "results", "want"),
    [
        # One request of a class with config: the class's entry applies to all, its list dropped.
        ([{"name": "a", "exactly": {"deviceClassName": "gpu"}}], None, ["a"], [{"source": "FromClass", **CLASS_CFG}]),
        # Two requests, one of the configured class: the class entry names that request only.
        (
            [
                {"name": "a", "exactly": {"deviceClassName": "gpu"}},
                {"name": "b", "exactly": {"deviceClassName": "nic"}},
            ],
            [{"requests": ["b"], **CLAIM_CFG}, CLAIM_CFG],
            ["a", "b"],
            [
                {"source": "FromClass", "requests": ["a"], **CLASS_CFG},
                {"source": "FromClaim", "requests": ["b"], **CLAIM_CFG},
                {"source": "FromClaim", **CLAIM_CFG},
            ],
        ),
        # firstAvailable: the chosen subrequest's class and name; claim config naming it is kept.
        (
            [
                {
                    "name": "r",
                    "firstAvailable": [
                        {"name": "big", "deviceClassName": "nic"},
                        {"name": "small", "deviceClassName": "gpu"},
                    ],
                },
                {"name": "z", "exactly": {"deviceClassName": "nic"}},
            ],
            [{"requests": ["r/small"], **CLAIM_CFG}, {"requests": ["r/big"], **CLAIM_CFG}],
            ["r/small", "z"],
            [
                {"source": "FromClass", "requests": ["r/small"], **CLASS_CFG},
                {"source": "FromClaim", "requests": ["r/small"], **CLAIM_CFG},
            ],
        ),
        # Nothing configured anywhere: no config.
        ([{"name": "a", "exactly": {"deviceClassName": "nic"}}], None, ["a"], []),
    ],
)
def test_allocation_config(
    requests: list[dict[str, Any]], config: list[dict[str, Any]] | None, results: list[str], want: list[dict[str, Any]]
) -> None:
    claim = _claim(requests, config)
    alloc = dra_config.with_config(claim, _alloc(*results), _classes)
    assert list(alloc.config) == want
    assert alloc.to_json()["devices"].get("config", []) == want


def _bc_claim(conditions: list[dict[str, Any]] | None, stamp: str = "") -> dra.ResourceClaim:
    result = {
        "request": "r",
        "driver": "d",
        "pool": "p",
        "device": "x",
        "bindingConditions": ["Attached"],
        "bindingFailureConditions": ["Failed"],
    }
    status: dict[str, Any] = {"allocation": {"devices": {"results": [result]}}}
    if stamp:
        status["allocation"]["allocationTimestamp"] = stamp
    if conditions is not None:
        status["devices"] = [{"driver": "d", "pool": "p", "device": "x", "conditions": conditions}]
    return dra.resource_claim_from_json({"metadata": {"namespace": "ns", "name": "c"}, "status": status})


def _cond(kind: str, status: str) -> dict[str, Any]:
    return {"type": kind, "status": status, "reason": "R", "message": "M"}


OLD = "2000-01-01T00:00:00Z"


@pytest.mark.parametrize(
    ("claim", "ready", "error", "unavailable"),
    [
        (_bc_claim(None), False, "", False),
        (_bc_claim([_cond("Attached", "False")]), False, "", False),
        (_bc_claim([_cond("Attached", "True")]), True, "", False),
        (_bc_claim([_cond("Attached", "True"), _cond("Failed", "True")]), False, "failed", True),
        (_bc_claim([_cond("Attached", "False")], stamp=OLD), False, "timeout", True),
        (_bc_claim([_cond("Attached", "True")], stamp=OLD), True, "", False),
    ],
)
def test_binding_conditions(claim: dra.ResourceClaim, ready: bool, error: str, unavailable: bool) -> None:
    assert dra_binding.unavailable(claim, 600.0) is unavailable
    if error == "failed":
        with pytest.raises(dra_binding.BindingFailed, match=r'^device binding failed: claim=c, reason=R, message="M"$'):
            dra_binding.pods_ready([claim], 600.0)
        return
    if error == "timeout":
        with pytest.raises(dra_binding.BindingFailed, match=r"^device binding timeout: claim=c$"):
            dra_binding.pods_ready([claim], 600.0)
        return
    assert dra_binding.pods_ready([claim], 600.0) is ready


def test_waiter_resolves_on_a_claim_event_and_at_its_deadline() -> None:
    from custom_scheduler.framework import dra_store as fdra

    store = fdra.DRAStore()
    now = [0.0]
    waiter = dra_binding.BindingWaiter(store, clock=lambda: now[0])
    store.put(fdra.CLAIM, _bc_claim([_cond("Attached", "False")], stamp=dra_binding.now_rfc3339()))
    ok = waiter.wait([store.get_claim("ns", "c")], 30.0)  # type: ignore[list-item]
    late = waiter.wait([store.get_claim("ns", "c")], 5.0)  # type: ignore[list-item]
    waiter.check()
    assert not ok.done()
    now[0] = 6.0
    waiter.check()
    assert late.result(0).message == "device binding timeout: context deadline exceeded"
    store.put(fdra.CLAIM, _bc_claim([_cond("Attached", "True")], stamp=dra_binding.now_rfc3339()))
    deadline = time.monotonic() + 5
    while not ok.done() and time.monotonic() < deadline:
        waiter.check()
    assert ok.result(0).is_success
    assert waiter.pending() == 0


def _device(**attrs: Any) -> dra.Device:
    slice_ = dra.resource_slice_from_json(
        {"metadata": {"name": "s"}, "spec": {"driver": "d", "nodeName": "n", "pool": {"name": "p"}, "devices": [attrs]}}
    )
    return slice_.devices[0]


DEV = _device(name="x", attributes={"v": {"version": "1.10.0"}}, capacity={"mem": {"value": "80Gi"}})


@pytest.mark.parametrize(
    ("expr", "want"),
    [
        ('device.capacity["d"].mem.compareTo(quantity("40Gi")) > 0', True),
        ('device.capacity["d"].mem.isLessThan(quantity("40Gi"))', False),
        ('device.attributes["d"].v.isGreaterThan(semver("1.9.0"))', True),
        ('semver("1.10.0-rc.1").isLessThan(semver("1.10.0"))', True),
        ('device.attributes["d"].v.major() == 1 && device.attributes["d"].v.minor() == 10', True),
        ('"A,B".lowerAscii().split(",").size() == 2', True),
        ('isQuantity("1Gi") && !isQuantity("x y")', True),
        ('device.driver == "d"', True),
    ],
)
def test_cel_kubernetes_functions(expr: str, want: bool) -> None:
    assert dra_cel.CELCache().matches(expr, DEV) is want


def test_cel_runtime_error_is_an_error_not_false() -> None:
    with pytest.raises(dra_cel.CELError, match=r"^runtime error: "):
        dra_cel.CELCache().matches('quantity("not a quantity") > 0', DEV)


class _Plugin:
    name: ClassVar[str] = "P"

    def __init__(self, result: PostFilterResult) -> None:
        self._result = result

    def post_filter(self, state: CycleState, pod: Pod, statuses: Mapping[str, Status]) -> PostFilterResult:
        return self._result


def _unsched(msg: str = "") -> PostFilterResult:
    st = Status.unschedulable(msg) if msg else Status.unschedulable()
    return PostFilterResult(st, message=st.message)


PREEMPT = "preemption: 0/2 nodes are available: 2 Preemption is not helpful for scheduling."


@pytest.mark.parametrize(
    ("results", "code", "message"),
    [
        (
            [_unsched("deallocation of ResourceClaim completed"), _unsched(PREEMPT)],
            Code.UNSCHEDULABLE,
            f"deallocation of ResourceClaim completed, {PREEMPT}",
        ),
        ([_unsched(), _unsched(PREEMPT)], Code.UNSCHEDULABLE, PREEMPT),
        (
            [PostFilterResult(Status.as_error("not found"), message="not found"), _unsched(PREEMPT)],
            Code.ERROR,
            "not found",
        ),
        (
            [PostFilterResult(Status.unresolvable("stop")), _unsched(PREEMPT)],
            Code.UNSCHEDULABLE_AND_UNRESOLVABLE,
            "stop",
        ),
    ],
)
def test_post_filter_reasons_join_as_upstream(results: list[PostFilterResult], code: Code, message: str) -> None:
    from custom_scheduler.framework.runtime import Framework

    fwk = Framework.__new__(Framework)
    fwk.post_filter = [_Plugin(r) for r in results]
    got = fwk._run_post_filter(CycleState(), make_pod("p").build(), {})
    assert got.status.code is code
    assert got.message == message
    assert got.status.plugin == "P"
