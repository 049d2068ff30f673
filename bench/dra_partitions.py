"""The ``dra-partitions`` workload's devices and claims, and the checks only it needs.

Every other node publishes, through the DRA driver stand-in (:mod:`custom_scheduler.devenv.dra_driver`),
two MIG-capable GPUs (partitions over shared counters: 7 compute slices, 40Gi each) and one shared
GPU (``allowMultipleAllocations``, 40Gi of memory and 100 % of compute as consumable capacity).
The pods claim, through ResourceClaimTemplates:

- ``mig-any``: a ``firstAvailable`` list, the biggest free partition first (3g.20gb, 2g.10gb, 1g.5gb);
- ``mig-1g``: one ``1g.5gb`` partition;
- ``vgpu``: a share of a shared GPU, 4Gi of memory and 10 % of compute (``capacity.requests``);

the rest ask for nothing else. The claims are capped so that every pod fits whatever the order:
a partitionable GPU holds at least two partitions of any profile (two 3g.20gb use its memory up),
a shared GPU ten shares; 90 % of that at most.

Checks beside :data:`bench.workloads.DRA_CHECKS`' (which skip devices that allow multiple
allocations): a counter set whose allocated partitions consume more than it holds
(``dra_counters_exceeded``), a shared device whose shares consume more than its capacity
(``dra_capacity_exceeded``).

Kept apart from :mod:`bench.workloads` (which imports it) so that the workload's shapes sit with the
checks that judge them.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterable, Sequence
from decimal import Decimal
from typing import Any

from custom_scheduler.api import quantity
from custom_scheduler.devenv import dra_driver as drv

JSON = dict[str, Any]

CHECKS = ("dra_counters_exceeded", "dra_capacity_exceeded")
#: Every other node's GPUs.
GPU_NODE = drv.NodeResources(partitionable=2, shared=1)
#: The pod classes and their shares of the pods (before the caps).
MIX = (("mig-any", 0.35), ("mig-1g", 0.20), ("vgpu", 0.30))
MIG_PER_GPU, SHARES_PER_GPU = 2, 10
SHARE = {"memory": "4Gi", "compute": "10"}


def node_resources(n_nodes: int) -> dict[int, drv.NodeResources]:
    """Node index -> its GPUs: every odd node (node 0 too when it is the only one)."""
    return {i: GPU_NODE for i in range(n_nodes) if i % 2 == 1 or n_nodes == 1}


def slices(node_names: Sequence[str], run_label: tuple[str, str]) -> list[JSON]:
    labels = dict([run_label])
    out: list[JSON] = []
    for i, res in node_resources(len(node_names)).items():
        out.extend(drv.node_slices(node_names[i], res, labels=labels))
    return out


def device_classes(run_id: str, run_label: tuple[str, str]) -> list[JSON]:
    return drv.device_classes(suffix=f"-{run_id}", labels=dict([run_label]))


def templates(run_id: str) -> list[JSON]:
    """The ResourceClaimTemplates, one per claiming pod class (the class name)."""
    mig, shared = f"{drv.MIG_CLASS}-{run_id}", f"{drv.SHARED_CLASS}-{run_id}"

    def profile(p: str) -> list[JSON]:
        return [{"cel": {"expression": f'device.attributes["{drv.DRIVER}"].profile == "{p}"'}}]

    requests = {
        "mig-any": {
            "name": "mig",
            "firstAvailable": [
                {"name": p.replace(".", "-"), "deviceClassName": mig, "selectors": profile(p)}
                for p in ("3g.20gb", "2g.10gb", "1g.5gb")
            ],
        },
        "mig-1g": {"name": "mig", "exactly": {"deviceClassName": mig, "selectors": profile("1g.5gb")}},
        "vgpu": {"name": "vgpu", "exactly": {"deviceClassName": shared, "capacity": {"requests": dict(SHARE)}}},
    }
    return [
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceClaimTemplate",
            "metadata": {"name": name},
            "spec": {"spec": {"devices": {"requests": [req]}}},
        }
        for name, req in requests.items()
    ]


def pod_classes(n_nodes: int, n_pods: int) -> list[str]:
    """How many pods of each class (then ``cpu`` for the rest), within what surely fits."""
    gpus = node_resources(n_nodes).values()
    mig_room = int(sum(r.partitionable for r in gpus) * MIG_PER_GPU * 0.9)
    share_room = int(sum(r.shared for r in gpus) * SHARES_PER_GPU * 0.9)
    want = {name: int(n_pods * frac) for name, frac in MIX}
    mig_any = min(want["mig-any"], mig_room)
    mig_1g = min(want["mig-1g"], mig_room - mig_any)
    vgpu = min(want["vgpu"], share_room)
    classes = ["mig-any"] * mig_any + ["mig-1g"] * mig_1g + ["vgpu"] * vgpu
    return classes + ["cpu"] * (n_pods - len(classes))


# -- checks -----------------------------------------------------------------------------------------

DeviceKey = tuple[str, str, str]


def _allocated(claims: Iterable[JSON]) -> list[JSON]:
    out: list[JSON] = []
    for c in claims:
        alloc = (c.get("status") or {}).get("allocation") or {}
        out.extend((alloc.get("devices") or {}).get("results") or ())
    return out


def shared_devices(slices: Iterable[JSON]) -> set[DeviceKey]:
    """The devices that allow multiple allocations (in several claims on purpose)."""
    return {
        (s["spec"]["driver"], s["spec"]["pool"]["name"], d["name"])
        for s in slices
        for d in s["spec"].get("devices") or ()
        if d.get("allowMultipleAllocations")
    }


def violations(claims: Sequence[JSON], slices: Sequence[JSON]) -> Counter[str]:
    """:data:`CHECKS` over the final claims."""
    counters: dict[tuple[str, str, str, str], Decimal] = {}  # (driver, pool, set, counter) -> value
    consumes: dict[DeviceKey, list[tuple[str, str, Decimal]]] = {}
    capacity: dict[tuple[str, str, str, str], Decimal] = {}  # (driver, pool, device, name) -> value
    for s in slices:
        driver, pool = s["spec"]["driver"], s["spec"]["pool"]["name"]
        for cs in s["spec"].get("sharedCounters") or ():
            for name, c in cs["counters"].items():
                counters[(driver, pool, cs["name"], name)] = quantity.parse(c["value"])
        for d in s["spec"].get("devices") or ():
            consumes[(driver, pool, d["name"])] = [
                (cc["counterSet"], name, quantity.parse(c["value"]))
                for cc in d.get("consumesCounters") or ()
                for name, c in cc["counters"].items()
            ]
            for name, cap in (d.get("capacity") or {}).items():
                capacity[(driver, pool, d["name"], name)] = quantity.parse(cap["value"])
    used_counters: dict[tuple[str, str, str, str], Decimal] = defaultdict(Decimal)
    used_capacity: dict[tuple[str, str, str, str], Decimal] = defaultdict(Decimal)
    for r in _allocated(claims):
        key = (r["driver"], r["pool"], r["device"])
        for counter_set, name, value in consumes.get(key, ()):
            used_counters[(r["driver"], r["pool"], counter_set, name)] += value
        for name, value in (r.get("consumedCapacity") or {}).items():
            used_capacity[(*key, name)] += quantity.parse(value)
    out: Counter[str] = Counter()
    out["dra_counters_exceeded"] = sum(1 for k, v in used_counters.items() if v > counters.get(k, Decimal(0)))
    out["dra_capacity_exceeded"] = sum(1 for k, v in used_capacity.items() if v > capacity.get(k, Decimal(0)))
    return out
