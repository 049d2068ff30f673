"""The random DRA clusters and pods of :mod:`tests.integration.test_dra_conformance` (hypothesis).

The devices are the ones :mod:`custom_scheduler.devenv.dra_driver` publishes (whole GPUs, tainted
GPUs, MIG-style partitions over shared counters, shared GPUs with consumable capacity, some nodes
with none); the pod to place asks for them through ResourceClaims and ResourceClaimTemplates whose
requests mix what ``resource.k8s.io/v1`` offers. :func:`cases` is the entry point; what each
feature draws is in :data:`FEATURES`. Names are relative to the example (``n3``, ``e5``): the test
prefixes them when it creates the objects, and the pool of a node's slices is the node's name.

Which features are drawn is a switch, so that a feature our allocator lacks can be left out while
the rest are checked, and one can be hunted alone: ``CS_DRA_FEATURES=counters,held`` draws only
those (beside the base: whole GPUs, ``exactly`` requests of one or two devices, a model selector,
several DeviceClasses with selectors, nodes without slices, claims and templates);
``CS_DRA_FEATURES=-shared`` all but one. Unset: all of them except :data:`NOT_YET` (features we
have not built; empty now). A feature left out is never drawn, never weakened: an example either
has it whole or not at all.
"""

from __future__ import annotations

import os
import uuid
from dataclasses import dataclass, field
from typing import Any

import hypothesis.strategies as st

from custom_scheduler.devenv import dra_driver as drv
from tests.builders import make_node, make_pod

JSON = dict[str, Any]

PROFILE = "kube-dra-conformance"
HOST = "kubernetes.io/hostname"
D = drv.DRIVER
ATTR = f'device.attributes["{D}"]'
CAP = f'device.capacity["{D}"]'

#: The features the generator can draw, and what each adds to an example.
FEATURES: dict[str, str] = {
    "taints": "tainted GPUs (gpu.example.com/unhealthy:NoSchedule) and requests tolerating them",
    "counters": "partitionable GPUs (sharedCounters) and requests for MIG partitions by profile",
    "shared": "shared GPUs (allowMultipleAllocations) and requests with capacity.requests",
    "first-available": "requests as firstAvailable lists of subrequests",
    "all-mode": "exactly requests with allocationMode: All",
    "constraints": "matchAttribute / distinctAttribute constraints over a claim's requests",
    "cel-quantity": "selectors comparing capacities with quantity(), and the class doing so",
    "cel-semver": "selectors comparing the driver version with semver()",
    "held": "bound pods holding devices: whole GPUs, partitions (their counters), shares of GPUs",
    "extended-resource": "the pod asks for example.com/gpu, an extended resource a DeviceClass backs",
}

#: Features drawn only when asked for by name: not built yet, they fail by design. None left:
#: extended resources backed by DRA (issue #26 item 3) are built (NodeResourcesFit leaves
#: ``example.com/gpu`` to DynamicResources on nodes that do not offer it, fit.go
#: ``shouldDelegateResourceToDRA``, and DynamicResources allocates it through the pod's claim).
NOT_YET: frozenset[str] = frozenset()

#: (model, memory of its whole and shared GPUs).
MODELS = (("a100-40gb", "40Gi"), ("h100-80gb", "80Gi"))
DRIVER_VERSIONS = ("535.161.7", "550.54.15")


def enabled_features(env: str | None = None) -> frozenset[str]:
    """The features to draw: ``CS_DRA_FEATURES`` (``a,b`` only those, ``-a,-b`` all but those)."""
    text = os.environ.get("CS_DRA_FEATURES", "") if env is None else env
    items = [x.strip() for x in text.split(",") if x.strip()]
    unknown = {x.lstrip("-") for x in items} - FEATURES.keys()
    if unknown:
        raise ValueError(f"unknown DRA features {sorted(unknown)} (known: {', '.join(FEATURES)})")
    if not items:
        return frozenset(FEATURES) - NOT_YET
    if all(x.startswith("-") for x in items):
        return frozenset(FEATURES) - NOT_YET - {x[1:] for x in items}
    return frozenset(x for x in items if not x.startswith("-"))


@dataclass(slots=True)
class Held:
    """A device a bound pod holds through its claim (allocated and reserved for it)."""

    device: str
    device_class: str
    consumed: dict[str, str] | None = None  # a share of a shared GPU: its consumed capacity
    share_id: str = ""


@dataclass(slots=True)
class Existing:
    pod: JSON
    node: int
    held: Held | None = None


@dataclass(slots=True)
class Case:
    """Nodes (names relative to the example) and their GPUs, bound pods, the pod to place and its
    claims and templates, and the features the example actually uses."""

    nodes: list[JSON]
    resources: dict[int, drv.NodeResources]
    existing: list[Existing] = field(default_factory=list)
    pod: JSON = field(default_factory=dict)
    claims: list[JSON] = field(default_factory=list)
    templates: list[JSON] = field(default_factory=list)
    used: set[str] = field(default_factory=set)
    names: list[str] = field(default_factory=list)


# -- the cluster ------------------------------------------------------------------------------------


def _node(draw: st.DrawFn, i: int) -> JSON:
    cpu, mem = draw(st.sampled_from((("4", "16Gi"), ("8", "32Gi"), ("16", "64Gi"))))
    return make_node(f"n{i}").capacity(cpu=cpu, memory=mem, pods="30").obj()


def _resources(draw: st.DrawFn, on: frozenset[str]) -> drv.NodeResources:
    """A node's GPUs; about one node in four has none (no slices at all)."""
    if draw(st.integers(0, 3)) == 0:
        return drv.NodeResources()
    model, memory = draw(st.sampled_from(MODELS))
    return drv.NodeResources(
        gpus=draw(st.sampled_from((0, 1, 2, 2, 3, 4))),
        tainted=draw(st.integers(0, 1)) if "taints" in on else 0,
        partitionable=draw(st.integers(0, 2)) if "counters" in on else 0,
        shared=draw(st.integers(0, 1)) if "shared" in on else 0,
        model=model,
        memory=memory,
        driver_version=draw(st.sampled_from(DRIVER_VERSIONS)),
        pcie_roots=draw(st.integers(1, 2)),
    )


@dataclass(slots=True)
class _Free:
    """What of a node is still free for bound pods to hold: whole GPUs, each partitionable GPU's
    counters and unused partitions, each shared GPU's memory (Gi) and compute (percent)."""

    whole: list[int]
    counters: dict[int, list[int]]  # index -> [compute slices, memory Gi]
    partitions: set[str]
    shared: dict[int, list[int]]  # index -> [memory Gi, compute]


def _free(res: drv.NodeResources) -> _Free:
    kinds = res.kinds()
    mig = [i for i, k in enumerate(kinds) if k == "mig"]
    vgpu = [i for i, k in enumerate(kinds) if k == "vgpu"]
    names = {d["name"] for i in mig for d in drv.partitions("", i, res)}
    mem = int(res.memory.removesuffix("Gi"))
    return _Free(
        [i for i, k in enumerate(kinds) if k == "gpu"],
        {i: [drv.COMPUTE_SLICES, 40] for i in mig},
        names,
        {i: [mem, 100] for i in vgpu},
    )


def _hold_partition(draw: st.DrawFn, free: _Free) -> Held | None:
    """A partition whose counters fit what the GPU has left (a held one never overcommits)."""
    options = [
        drv.partition_name(i, profile, k)
        for i, (compute, mem) in free.counters.items()
        for profile, c, m, most in drv.MIG_PROFILES
        if c <= compute and m <= mem
        for k in range(most)
        if drv.partition_name(i, profile, k) in free.partitions
    ]
    if not options:
        return None
    name = draw(st.sampled_from(options))
    index = int(name.split("-")[1])
    profile = next(p for p in drv.MIG_PROFILES if f"-mig-{p[0].replace('.', '-')}-" in name)
    free.counters[index][0] -= profile[1]
    free.counters[index][1] -= profile[2]
    free.partitions.discard(name)
    return Held(name, drv.MIG_CLASS)


def _hold_share(draw: st.DrawFn, free: _Free) -> Held | None:
    """A share of a shared GPU, with the capacity its request policies would give it."""
    options = [i for i, (mem, compute) in free.shared.items() if mem >= 1 and compute >= 10]
    if not options:
        return None
    i = draw(st.sampled_from(options))
    mem = draw(st.sampled_from([g for g in (1, 2, 4, 8, 16) if g <= free.shared[i][0]]))
    compute = draw(st.sampled_from([int(v) for v in drv.SHARED_COMPUTE_VALUES if int(v) <= free.shared[i][1]]))
    free.shared[i][0] -= mem
    free.shared[i][1] -= compute
    consumed = {"memory": f"{mem}Gi", "compute": str(compute)}
    return Held(f"gpu-{i}", drv.SHARED_CLASS, consumed, str(uuid.UUID(int=draw(st.integers(1, 2**64)))))


def _hold(draw: st.DrawFn, free: _Free) -> Held | None:
    kind = draw(st.sampled_from(("gpu", "mig", "vgpu")))
    if kind == "mig":
        return _hold_partition(draw, free)
    if kind == "vgpu":
        return _hold_share(draw, free)
    if not free.whole:
        return None
    i = draw(st.sampled_from(free.whole))
    free.whole.remove(i)
    return Held(f"gpu-{i}", drv.GPU_CLASS)


def _existing(draw: st.DrawFn, case: Case, on: frozenset[str]) -> None:
    """Bound pods; with ``held`` about half of those on a node with GPUs hold one device."""
    free = {i: _free(res) for i, res in case.resources.items()}
    for k in range(draw(st.integers(0, 6))):
        node = draw(st.integers(0, len(case.nodes) - 1))
        pod = make_pod(f"e{k}").scheduler("nobody").req(cpu="100m", memory="128Mi").obj()
        held = _hold(draw, free[node]) if node in free and "held" in on and draw(st.booleans()) else None
        if held is not None:
            case.used.add("held")
        case.existing.append(Existing(pod, node, held))


# -- the pod's claims -------------------------------------------------------------------------------


def _selectors(draw: st.DrawFn, kind: str, on: frozenset[str], used: set[str]) -> list[JSON]:
    """CEL selectors of a request: a MIG profile (always, for partitions), now and then a model,
    a memory capacity bound (quantity) or a driver version bound (semver)."""
    exprs: list[str] = []
    if kind == "mig":
        profile = draw(st.sampled_from([p[0] for p in drv.MIG_PROFILES]))
        exprs.append(f'{ATTR}.profile == "{profile}"')
    if kind != "mig" and draw(st.integers(0, 3)) == 0:
        exprs.append(f'{ATTR}.model == "{draw(st.sampled_from([m for m, _ in MODELS]))}"')
    if "cel-quantity" in on and draw(st.integers(0, 3)) == 0:
        bounds = ((">=", "10Gi"), ("<=", "10Gi")) if kind == "mig" else ((">=", "48Gi"), ("<", "48Gi"), (">=", "8Gi"))
        op, amount = draw(st.sampled_from(bounds))
        exprs.append(f'{CAP}.memory.compareTo(quantity("{amount}")) {op} 0')
        used.add("cel-quantity")
    if "cel-semver" in on and draw(st.integers(0, 3)) == 0:
        fn = draw(st.sampled_from(("isGreaterThan", "isLessThan")))
        exprs.append(f'{ATTR}.driverVersion.{fn}(semver("540.0.0"))')
        used.add("cel-semver")
    return [{"cel": {"expression": e}} for e in exprs]


CLASSES = {"gpu": drv.GPU_CLASS, "large": drv.LARGE_CLASS, "mig": drv.MIG_CLASS, "vgpu": drv.SHARED_CLASS}


def _kinds(on: frozenset[str]) -> list[str]:
    kinds = ["gpu", "gpu"]
    kinds += ["large"] if "cel-quantity" in on else []
    kinds += ["mig", "mig"] if "counters" in on else []
    kinds += ["vgpu", "vgpu"] if "shared" in on else []
    return kinds


def _exact(draw: st.DrawFn, on: frozenset[str], used: set[str]) -> JSON:
    """One ``exactly`` request (or subrequest body): a class, a count or All, selectors,
    tolerations, capacity requests."""
    kind = draw(st.sampled_from(_kinds(on)))
    if kind == "large":
        used.add("cel-quantity")
    if kind == "mig":
        used.add("counters")
    req: JSON = {"deviceClassName": CLASSES[kind]}
    if "all-mode" in on and draw(st.integers(0, 7)) == 0:
        req["allocationMode"] = "All"
        used.add("all-mode")
    else:
        req["count"] = draw(st.sampled_from((1, 1, 1, 2)))
    if sel := _selectors(draw, kind, on, used):
        req["selectors"] = sel
    if "taints" in on and kind in ("gpu", "large") and draw(st.integers(0, 2)) == 0:
        req["tolerations"] = [
            draw(
                st.sampled_from(
                    ({"key": drv.UNHEALTHY, "operator": "Exists", "effect": "NoSchedule"}, {"operator": "Exists"})
                )
            )
        ]
        used.add("taints")
    if kind == "vgpu":
        used.add("shared")
        caps: JSON = {}
        if draw(st.booleans()):
            caps["memory"] = draw(st.sampled_from(("2Gi", "3Gi", "6Gi", "20Gi", "36Gi", "2Gi", "3500Mi", "100Gi")))
        if draw(st.booleans()):
            caps["compute"] = draw(st.sampled_from(("10", "20", "50", "100")))
        if caps:
            req["capacity"] = {"requests": caps}
    return req


def _request(draw: st.DrawFn, name: str, on: frozenset[str], used: set[str]) -> JSON:
    if "first-available" in on and draw(st.integers(0, 3)) == 0:
        used.add("first-available")
        subs = [{"name": f"s{k}", **_exact(draw, on, used)} for k in range(draw(st.integers(2, 3)))]
        return {"name": name, "firstAvailable": subs}
    return {"name": name, "exactly": _exact(draw, on, used)}


#: Attributes constraints align on: every kind has model, PCIe root, driver version and UUID (a
#: partition has its GPU's); only partitions have parentIndex.
MATCH_ATTRIBUTES = (f"{D}/model", drv.PCIE_ROOT, f"{D}/driverVersion", f"{D}/parentIndex")
DISTINCT_ATTRIBUTES = (f"{D}/uuid", drv.PCIE_ROOT)


def _constraints(draw: st.DrawFn, names: list[str]) -> list[JSON]:
    out: list[JSON] = []
    for _ in range(draw(st.integers(1, 2))):
        if draw(st.booleans()):
            c: JSON = {"matchAttribute": draw(st.sampled_from(MATCH_ATTRIBUTES))}
        else:
            c = {"distinctAttribute": draw(st.sampled_from(DISTINCT_ATTRIBUTES))}
        if draw(st.booleans()):
            c["requests"] = list(names)
        out.append(c)
    return out


def claim_spec(draw: st.DrawFn, on: frozenset[str], used: set[str]) -> JSON:
    """A claim's spec: one or two requests, and with two now and then constraints over them."""
    names = [f"r{k}" for k in range(draw(st.integers(1, 2)))]
    devices: JSON = {"requests": [_request(draw, n, on, used) for n in names]}
    if "constraints" in on and len(names) > 1 and draw(st.booleans()):
        devices["constraints"] = _constraints(draw, names)
        used.add("constraints")
    return {"devices": devices}


def _subject(draw: st.DrawFn, case: Case, on: frozenset[str]) -> None:
    """The pod to place: one or two claims, each a ResourceClaim or a template, all used by its
    container."""
    b = make_pod("subject").scheduler(PROFILE).req(cpu="100m", memory="128Mi")
    claims = (1, 1, 2)
    if "extended-resource" in on and draw(st.integers(0, 3)) == 0:
        gpus = str(draw(st.sampled_from((1, 1, 2))))
        b.spec["containers"][0]["resources"]["requests"][drv.EXTENDED_RESOURCE] = gpus
        b.spec["containers"][0]["resources"]["limits"] = {drv.EXTENDED_RESOURCE: gpus}
        case.used.add("extended-resource")
        claims = (0, 0, 1)
    for k in range(draw(st.sampled_from(claims))):
        name = f"claim{k}"
        spec = claim_spec(draw, on, case.used)
        if draw(st.booleans()):
            case.claims.append({"metadata": {"name": name}, "spec": spec})
            ref = {"name": name, "resourceClaimName": name}
        else:
            case.templates.append({"metadata": {"name": name}, "spec": {"spec": spec}})
            ref = {"name": name, "resourceClaimTemplateName": name}
        b.spec.setdefault("resourceClaims", []).append(ref)
        b.spec["containers"][0].setdefault("resources", {}).setdefault("claims", []).append({"name": name})
    case.pod = b.obj()


def _present(case: Case) -> None:
    """The cluster-side features the example holds (a tainted device matters even when no
    request tolerates it: the allocator must skip it)."""
    for res in case.resources.values():
        if res.tainted:
            case.used.add("taints")
        if res.partitionable:
            case.used.add("counters")
        if res.shared:
            case.used.add("shared")


def cases(features: frozenset[str] | None = None) -> st.SearchStrategy[Case]:
    on = enabled_features() if features is None else features

    @st.composite
    def draw_case(draw: st.DrawFn) -> Case:
        n = draw(st.integers(3, 7))
        case = Case([_node(draw, i) for i in range(n)], {})
        for i in range(n):
            res = _resources(draw, on)
            if res.total:
                case.resources[i] = res
        _existing(draw, case, on)
        _subject(draw, case, on)
        _present(case)
        return case

    return draw_case()


# -- the API objects --------------------------------------------------------------------------------


def held_claim(name: str, pool: str, held: Held, pod: JSON) -> tuple[JSON, JSON]:
    """The ResourceClaim of a bound pod's device and the status that allocates it on the node
    ``pool`` to the pod, as DynamicResources' PreBind writes it (a share with its ``shareID`` and
    ``consumedCapacity``)."""
    exactly: JSON = {"deviceClassName": held.device_class, "count": 1}
    result: JSON = {"request": "dev", "driver": D, "pool": pool, "device": held.device}
    if held.consumed is not None:
        exactly["capacity"] = {"requests": dict(held.consumed)}
        result["shareID"] = held.share_id
        result["consumedCapacity"] = dict(held.consumed)
    claim = {"metadata": {"name": name}, "spec": {"devices": {"requests": [{"name": "dev", "exactly": exactly}]}}}
    sel = {
        "nodeSelector": {
            "nodeSelectorTerms": [{"matchFields": [{"key": "metadata.name", "operator": "In", "values": [pool]}]}]
        }
    }
    meta = pod["metadata"]
    status = {
        "allocation": {"devices": {"results": [result]}, **sel},
        "reservedFor": [{"resource": "pods", "name": meta["name"], "uid": meta["uid"]}],
    }
    return claim, status


def with_claim(pod: JSON, claim: str) -> JSON:
    """``pod`` using ResourceClaim ``claim``."""
    out = {**pod, "spec": {**pod["spec"]}}
    out["spec"]["resourceClaims"] = [{"name": "held", "resourceClaimName": claim}]
    containers = [dict(c) for c in out["spec"]["containers"]]
    containers[0]["resources"] = {**containers[0].get("resources", {}), "claims": [{"name": "held"}]}
    out["spec"]["containers"] = containers
    return out


def allocation_line(held: Held, pool: str, claim: str) -> str:
    """What kube-scheduler logs once the held device counts as in use (``allocateddevices.go``,
    verbosity 6): a share is logged with its share ID after the device."""
    device = f"{D}/{pool}/{held.device}"
    if held.consumed is not None:
        return f'{device}/{held.share_id}" claim="{claim}"'
    return f'"Observed device allocation" device="{device}" claim="{claim}"'
