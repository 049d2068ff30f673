"""The order a node's DRA devices are offered in (``GatherPools``): pools by driver and name, but a
pool with a device carrying binding conditions after every other (upstream 1.37's allocator), so the
first-fit search prefers devices usable at once."""

from __future__ import annotations

from typing import Any

import pytest

from custom_scheduler.api import dra
from custom_scheduler.api.dra_pools import node_devices
from tests.builders import resource_slice_obj


def slice_of(pool: str, *devices: str, waiting: bool = False) -> dra.ResourceSlice:
    obj: dict[str, Any] = resource_slice_obj("n1", {d: {} for d in devices}, pool=pool)
    if waiting:
        for d in obj["spec"]["devices"]:
            d["bindingConditions"] = ["Attached"]
            d["bindingFailureConditions"] = ["Failed"]
    return dra.resource_slice_from_json(obj)


@pytest.mark.parametrize(
    ("slices", "want"),
    [
        pytest.param([slice_of("a", "a0"), slice_of("b", "b0")], ["a0", "b0"], id="by-pool-name"),
        pytest.param(
            [slice_of("a", "a0", "a1", waiting=True), slice_of("b", "b0"), slice_of("c", "c0")],
            ["b0", "c0", "a0", "a1"],
            id="binding-conditions-last",
        ),
        pytest.param(
            [slice_of("b", "b0", waiting=True), slice_of("a", "a0", waiting=True)],
            ["a0", "b0"],
            id="among-themselves-by-pool-name",
        ),
    ],
)
def test_pools_with_binding_conditions_come_last(slices: list[dra.ResourceSlice], want: list[str]) -> None:
    by_pool = {(s.driver, s.pool): [s] for s in slices}
    got = node_devices(slices, lambda driver, pool: by_pool[(driver, pool)], "n1", {})
    assert [c.id[2] for c in got] == want
