"""The demo's DRA scenario: its objects are what the driver stand-in and the API expect, and the
report's wording and checks follow the allocations it is given."""

from __future__ import annotations

from typing import Any

import pytest

from custom_scheduler.devenv import demo_dra as dd
from custom_scheduler.devenv import dra_driver as drv


def _res(pool: str, device: str, **extra: Any) -> dict[str, Any]:
    return {"driver": drv.DRIVER, "pool": pool, "device": device, "request": "gpu", **extra}


@pytest.mark.parametrize(
    ("result", "want"),
    [
        pytest.param(_res("dra-1", "gpu-0"), "dra-1/gpu-0 (whole GPU)", id="whole"),
        pytest.param(_res("dra-1", "gpu-1"), "dra-1/gpu-1 (the TAINTED GPU)", id="tainted"),
        pytest.param(
            _res("dra-2", "gpu-2-mig-3g-20gb-1"), "dra-2/gpu-2-mig-3g-20gb-1 (partition 3g.20gb of gpu-2)", id="mig"
        ),
        pytest.param(
            _res("dra-1", "gpu-3", consumedCapacity={"memory": "8Gi", "compute": "10"}),
            "dra-1/gpu-3 (share of a shared GPU: compute 10, memory 8Gi)",
            id="share",
        ),
        pytest.param({}, "?/? (whole GPU)", id="empty-result-never-crashes"),
    ],
)
def test_describe(result: dict[str, Any], want: str) -> None:
    assert dd.describe(result) == want


PACKED_ON_1 = {"dra-whole": "dra-1", "dra-mig": "dra-1", "dra-share": "dra-1", "dra-whole-2": "dra-2"}


@pytest.mark.parametrize(
    ("placed", "allocated", "want"),
    [
        pytest.param(
            PACKED_ON_1,
            {"dra-whole": [_res("dra-1", "gpu-0")], "dra-whole-2": [_res("dra-2", "gpu-0")], "dra-ordinary": []},
            [
                "packed: dra-whole, dra-mig, dra-share all on dra-1; the other DRA node stays whole",
                "dra-whole-2 -> dra-2: dra-1's free whole GPU is the tainted gpu-1, not tolerated",
                "tainted dra-1/gpu-1, dra-2/gpu-1: allocated to none of the 2 claims' devices",
            ],
            id="packed-and-untainted",
        ),
        pytest.param(
            {**PACKED_ON_1, "dra-mig": "dra-2"},
            {"dra-whole-2": [_res("dra-1", "gpu-1")]},
            [
                "NOT packed: dra-whole -> dra-1, dra-mig -> dra-2, dra-share -> dra-1",
                "TAINTED device allocated: dra-1/gpu-1",
            ],
            id="split-and-tainted",
        ),
        pytest.param(
            {},
            {},
            [
                "NOT packed: dra-whole -> -, dra-mig -> -, dra-share -> -",
                "tainted dra-1/gpu-1, dra-2/gpu-1: allocated to none of the 0 claims' devices",
            ],
            id="nothing-placed",
        ),
    ],
)
def test_notes_check_packing_and_taints(
    placed: dict[str, str], allocated: dict[str, list[dict[str, Any]]], want: list[str]
) -> None:
    per_pod, lines = dd.notes(placed, allocated)
    assert lines == want
    assert set(per_pod) == {p for p, r in allocated.items() if r}


def test_objects_fit_the_driver_and_each_other() -> None:
    nodes = {n["metadata"]["name"] for n in dd.nodes()}
    assert nodes == set(dd.NODES)
    classes = {c["metadata"]["name"] for c in drv.device_classes()}
    templates = {t["metadata"]["name"]: t for t in dd.templates("demo")}
    assert set(templates) == set(dd.PACKED.values()) | set(dd.SECOND.values())
    for t in templates.values():
        [req] = t["spec"]["spec"]["devices"]["requests"]
        assert req["exactly"]["deviceClassName"] in classes
    # the devices the report's wording and the test rely on: gpu-1 tainted, gpu-2 partitioned
    devices = {d["name"]: d for d in drv.devices("dra-1", dd.NODES["dra-1"])}
    assert devices[dd.TAINTED]["taints"][0]["key"] == drv.UNHEALTHY
    assert any(name.startswith("gpu-2-mig-3g-20gb-") for name in devices)
    assert devices["gpu-3"]["allowMultipleAllocations"] is True
    pods = dd.first_wave("demo") + dd.second_wave("demo")
    claimed = {
        p["metadata"]["name"]: p["spec"]["resourceClaims"][0]["resourceClaimTemplateName"]
        for p in pods
        if p["spec"].get("resourceClaims")
    }
    assert claimed == {**dd.PACKED, **dd.SECOND}
