"""The random clusters and pods of :mod:`tests.integration.test_conformance` (hypothesis strategies).

Kept apart from the test so that the test module holds what is compared and how both schedulers
run, and this one what they are given; :func:`scenarios` is the entry point. What is drawn, and
the upstream quirks the drawing steers around, is described in the test module's docstring.

Everything here is plain API JSON, built with :mod:`tests.builders`; names are relative to the
example (``n3``, ``e5``), the test prefixes them when it creates the objects.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import Any

import hypothesis.strategies as st

from custom_scheduler.api.resources import compute_requests
from tests.builders import PodBuilder, make_node, make_pod

PROFILE = "kube-conformance"
ZONE = "topology.kubernetes.io/zone"
HOST = "kubernetes.io/hostname"
APPS = ("web", "db", "cache")

#: The DRA driver of the generated ResourceSlices and the one DeviceClass (created once per module,
#: before kube-scheduler starts, so its initial LIST holds it) that selects its devices.
DRIVER = "conformance.example.com"
DEVICE_CLASS = "cf-device"
MODELS = ("a", "b")

#: (key, value, effect); one key may carry two effects, never the same effect twice.
TAINTS = (
    ("dedicated", "batch", "NoSchedule"),
    ("dedicated", "batch", "PreferNoSchedule"),
    ("spot", "true", "PreferNoSchedule"),
    ("gpu", "", "NoSchedule"),
    ("maintenance", "", "PreferNoSchedule"),
)

_DIGEST = "sha256:" + "ab" * 32
#: The names a node reports for one image (``status.images[].names``), as kubelets do: fully
#: qualified, short, by digest, and one without a tag (which upstream does not normalise).
NODE_IMAGES = (
    ("docker.io/library/nginx:1.25", "nginx:1.25"),
    ("busybox",),
    ("busybox:latest",),
    ("registry.k8s.io/pause:3.9",),
    ("example.com/ml/trainer:v2",),
    (f"redis@{_DIGEST}", "redis:7"),
)
POD_IMAGES = (
    "nginx:1.25",
    "docker.io/library/nginx:1.25",
    "busybox",
    "busybox:latest",
    "registry.k8s.io/pause:3.9",
    "example.com/ml/trainer:v2",
    "example.com/ml/trainer",
    f"redis@{_DIGEST}",
    "redis:7",
)

CPUS = (None, "50m", "100m", "250m", "500m", "1", "1500m", "2", "4")
MEMS = (None, "64Mi", "128Mi", "512Mi", "1Gi", "2Gi", "4Gi", "8Gi")


@dataclass(slots=True)
class Existing:
    """A pod bound to node ``node`` (an index), with what a kubelet would have reported for it
    (``status``: an in-place resize, or None) and the device it holds on that node (a DRA claim
    allocated to it, or None)."""

    pod: dict[str, Any]
    node: int
    status: dict[str, Any] | None = None
    device: str | None = None


@dataclass(slots=True)
class Scenario:
    """Nodes (names relative to the example), their devices, pods bound to node indexes, the pod
    to place and the ResourceClaims / ResourceClaimTemplates it uses."""

    nodes: list[dict[str, Any]]  # Node objects (``status.images`` set: NodeBuilder.image has one name)
    devices: dict[int, list[str]]  # node index -> the models of its devices (``dev-0``, ``dev-1``, ...)
    existing: list[Existing]
    pod: dict[str, Any]
    claims: list[dict[str, Any]] = field(default_factory=list)  # ResourceClaim specs, named
    templates: list[dict[str, Any]] = field(default_factory=list)  # ResourceClaimTemplate specs, named
    names: list[str] = field(default_factory=list)


def _selector(draw: st.DrawFn) -> dict[str, Any]:
    apps = draw(st.lists(st.sampled_from(APPS), min_size=1, max_size=2, unique=True))
    return {"matchExpressions": [{"key": "app", "operator": "In", "values": sorted(apps)}]}


def _pod_term(draw: st.DrawFn) -> dict[str, Any]:
    return {"topologyKey": draw(st.sampled_from((ZONE, HOST))), "labelSelector": _selector(draw)}


def _pod_affinity(draw: st.DrawFn, b: PodBuilder, max_terms: int) -> None:
    """Random required and preferred pod affinity / anti-affinity terms on ``b``."""
    for _ in range(draw(st.integers(0, max_terms))):
        kind = draw(st.sampled_from(("podAffinity", "podAntiAffinity")))
        weight = draw(st.sampled_from((0, 0, 1, 10, 50, 100)))
        b.pod_affinity(kind, _pod_term(draw), weight=weight)


def _requests(draw: st.DrawFn) -> dict[str, str]:
    req: dict[str, str] = {}
    cpu = draw(st.sampled_from(CPUS))
    mem = draw(st.sampled_from(MEMS))
    if cpu:
        req["cpu"] = cpu
    if mem:
        req["memory"] = mem
    return req


def _containers(draw: st.DrawFn, b: PodBuilder, *, images: bool) -> None:
    """One or two containers with random requests, and up to two init containers, each a sidecar
    (``restartPolicy: Always``) or a regular one, in random order (a regular init container
    counts with the sidecars started before it)."""
    for c in range(draw(st.integers(1, 2))):
        b.req(container=c, **_requests(draw))
        if images:
            b.image(draw(st.sampled_from(POD_IMAGES)), container=c)
    for _ in range(draw(st.sampled_from((1, 0, 2, 0)))):
        b.init_req(_requests(draw) or {"cpu": "10m"}, sidecar=draw(st.booleans()))
        if images:
            b.spec["initContainers"][-1]["image"] = draw(st.sampled_from(POD_IMAGES))


def _pod_level(draw: st.DrawFn, b: PodBuilder) -> None:
    """Now and then, pod-level requests (``spec.resources``, PodLevelResources is beta and on in
    1.37) for cpu, memory or both: the containers' aggregate plus a margin, as the API server
    refuses less (``validatePodResourceConsistency``)."""
    if draw(st.integers(0, 3)):
        return
    aggregate, _, _ = compute_requests(b.spec)
    requests: dict[str, str] = {}
    if draw(st.booleans()):
        requests["cpu"] = f"{aggregate.milli_cpu + draw(st.sampled_from((0, 100, 500, 2000)))}m"
    if draw(st.booleans()) or not requests:
        requests["memory"] = str(aggregate.memory + draw(st.sampled_from((0, 64, 512, 4096))) * 2**20)
    b.spec["resources"] = {"requests": requests}


@st.composite
def _node(draw: st.DrawFn, i: int, image_sizes: list[int]) -> dict[str, Any]:
    b = make_node(f"n{i}").capacity(
        cpu=f"{draw(st.integers(1, 32)) * 500}m",
        memory=f"{draw(st.integers(1, 64)) * 512}Mi",
        pods=str(draw(st.integers(2, 30))),
    )
    zone = draw(st.sampled_from(("a", "b", "c", "a", "b", None)))
    if zone:
        b.label(ZONE, zone)
    disk = draw(st.sampled_from(("ssd", "hdd", None)))
    if disk:
        b.label("disktype", disk)
    for t in sorted(draw(st.sets(st.integers(0, len(TAINTS) - 1), max_size=2))):
        b.taint(*TAINTS[t])
    if draw(st.integers(0, 19)) == 0:
        b.unschedulable()
    obj = b.obj()
    for img in sorted(draw(st.sets(st.integers(0, len(NODE_IMAGES) - 1), max_size=3))):
        obj["status"].setdefault("images", []).append({"names": list(NODE_IMAGES[img]), "sizeBytes": image_sizes[img]})
    return obj


def _container_status(draw: st.DrawFn, c: dict[str, Any]) -> dict[str, Any] | None:
    """What a kubelet reports for container ``c`` after an in-place resize: the size it admitted
    (``allocatedResources``) and the one the runtime applied (``resources.requests``), each above,
    below or equal to the spec's; sometimes nothing (not started yet) or only the allocation."""
    form = draw(st.sampled_from(("none", "settled", "pending", "allocated-only")))
    if form == "none":
        return None
    allocated = _requests(draw)
    status: dict[str, Any] = {
        "name": c["name"],
        "image": c["image"],
        "imageID": "",
        "ready": True,
        "restartCount": 0,
        "started": True,
        "state": {"running": {"startedAt": "2026-01-01T00:00:00Z"}},
    }
    if allocated:
        status["allocatedResources"] = allocated
    if form == "settled":
        status["resources"] = {"requests": dict(allocated)}
    elif form == "pending":
        status["resources"] = {"requests": _requests(draw)}
    return status


def _resized_status(draw: st.DrawFn, spec: dict[str, Any]) -> dict[str, Any] | None:
    """A running pod's status as a kubelet reports it once it resized the pod in place, or None
    (never started, never resized): container and init container statuses, for a pod with
    pod-level resources now and then the pod-level allocation and actuation too (beta and on:
    InPlacePodLevelResourcesVerticalScaling), and rarely a resize the node found infeasible."""
    if draw(st.integers(0, 2)):
        return None
    status: dict[str, Any] = {"phase": "Running"}
    for key, kind in (("containerStatuses", "containers"), ("initContainerStatuses", "initContainers")):
        reported = [s for c in spec.get(kind) or () if (s := _container_status(draw, c)) is not None]
        if reported:
            status[key] = reported
    if spec.get("resources") and draw(st.booleans()):
        status["allocatedResources"] = _requests(draw) or {"cpu": "100m"}
        status["resources"] = {"requests": _requests(draw) or {"memory": "128Mi"}}
    if draw(st.integers(0, 5)) == 0:
        status["conditions"] = [
            {"type": "PodResizePending", "status": "True", "reason": "Infeasible", "message": "Node didn't have enough"}
        ]
    return status


@st.composite
def _existing(draw: st.DrawFn, i: int, n_nodes: int) -> Existing:
    b = make_pod(f"e{i}").scheduler("nobody").label("app", draw(st.sampled_from(APPS)))
    b.label("tier", draw(st.sampled_from(("front", "back"))))  # for the subject's matchLabelKeys
    _containers(draw, b, images=False)
    _pod_level(draw, b)
    if draw(st.booleans()):
        _pod_affinity(draw, b, 2)
    if draw(st.integers(0, 5)) == 0:
        b.host_port(draw(st.sampled_from((8080, 9090))))
    obj = b.obj()
    return Existing(obj, draw(st.integers(0, n_nodes - 1)), _resized_status(draw, obj["spec"]))


def _toleration(draw: st.DrawFn, b: PodBuilder) -> None:
    key, value, effect = draw(st.sampled_from(TAINTS))
    form = draw(st.sampled_from(("exact", "key-exists", "any-effect", "all")))
    if form == "exact" and value:
        b.toleration(key, value, effect)
    elif form == "exact":
        b.toleration(key, effect=effect, operator="Exists")  # a taint without a value: Exists is exact
    elif form == "key-exists":
        b.toleration(key, effect=effect, operator="Exists")
    elif form == "any-effect":
        b.toleration(key, operator="Exists")
    elif draw(st.integers(0, 3)) == 0:
        b.toleration(operator="Exists")  # tolerates every taint


def _node_affinity(draw: st.DrawFn, b: PodBuilder) -> None:
    if draw(st.integers(0, 5)) == 0:
        b.node_selector(disktype="ssd")
    if draw(st.integers(0, 2)) == 0:
        zones = draw(st.lists(st.sampled_from(("a", "b", "c")), min_size=1, max_size=2, unique=True))
        expr = draw(
            st.sampled_from(
                (
                    {"key": ZONE, "operator": "In", "values": sorted(zones)},
                    {"key": ZONE, "operator": "NotIn", "values": sorted(zones)},
                    {"key": ZONE, "operator": "Exists"},
                    {"key": "disktype", "operator": "DoesNotExist"},
                )
            )
        )
        b.required_node_affinity({"matchExpressions": [expr]})
    for _ in range(draw(st.integers(0, 2))):
        key, values = draw(st.sampled_from(((ZONE, ["a"]), (ZONE, ["b", "c"]), ("disktype", ["ssd"]))))
        b.preferred_node_affinity(
            draw(st.integers(1, 100)), {"matchExpressions": [{"key": key, "operator": "In", "values": values}]}
        )


def _spread(draw: st.DrawFn, b: PodBuilder) -> None:
    keys = draw(st.lists(st.sampled_from((ZONE, HOST)), max_size=2, unique=True))
    for key in keys:
        when = draw(st.sampled_from(("DoNotSchedule", "ScheduleAnyway", "ScheduleAnyway")))
        extra: dict[str, Any] = {}
        if when == "DoNotSchedule" and draw(st.integers(0, 3)) == 0:
            extra["minDomains"] = draw(st.integers(1, 4))
        if draw(st.integers(0, 3)) == 0:
            extra["nodeAffinityPolicy"] = draw(st.sampled_from(("Honor", "Ignore")))
        if draw(st.integers(0, 3)) == 0:
            extra["nodeTaintsPolicy"] = draw(st.sampled_from(("Honor", "Ignore")))
        if draw(st.integers(0, 3)) == 0:
            extra["matchLabelKeys"] = ["tier"]
        b.spread(draw(st.integers(1, 3)), key, when, selector=_selector(draw), **extra)


def _claim_spec(draw: st.DrawFn) -> dict[str, Any]:
    """One ``exactly`` request of the DeviceClass: one or two devices, now and then of one model."""
    exactly: dict[str, Any] = {"deviceClassName": DEVICE_CLASS, "count": draw(st.sampled_from((1, 1, 2)))}
    if draw(st.integers(0, 3)) == 0:
        model = draw(st.sampled_from(MODELS))
        exactly["selectors"] = [{"cel": {"expression": f'device.attributes["{DRIVER}"].model == "{model}"'}}]
    return {"devices": {"requests": [{"name": "dev", "exactly": exactly}]}}


def _resource_claims(draw: st.DrawFn, b: PodBuilder, sc: Scenario) -> None:
    """Now and then one or two resource claims on the subject, each a ResourceClaim created
    beforehand or a ResourceClaimTemplate (the resourceclaim controller creates the pod's claim),
    used by its first container."""
    if draw(st.integers(0, 3)) != 1:
        return
    for k in range(draw(st.integers(1, 2))):
        name = f"claim{k}"
        spec = _claim_spec(draw)
        if draw(st.booleans()):
            sc.claims.append({"metadata": {"name": name}, "spec": spec})
            ref = {"name": name, "resourceClaimName": name}
        else:
            sc.templates.append({"metadata": {"name": name}, "spec": {"spec": spec}})
            ref = {"name": name, "resourceClaimTemplateName": name}
        b.spec.setdefault("resourceClaims", []).append(ref)
        b.spec["containers"][0].setdefault("resources", {}).setdefault("claims", []).append({"name": name})


def _test_pod(draw: st.DrawFn, sc: Scenario) -> dict[str, Any]:
    b = make_pod("subject").scheduler(PROFILE).label("app", draw(st.sampled_from((*APPS, "other"))))
    b.label("tier", draw(st.sampled_from(("front", "back"))))
    _containers(draw, b, images=True)
    _pod_level(draw, b)
    if draw(st.integers(0, 4)) == 0:
        b.host_port(8080, container=0)
    for _ in range(draw(st.integers(0, 3))):
        _toleration(draw, b)
    _node_affinity(draw, b)
    _spread(draw, b)
    _pod_affinity(draw, b, 3)
    _resource_claims(draw, b, sc)
    return b.obj()


def _devices(draw: st.DrawFn, n: int) -> dict[int, list[str]]:
    """The devices of each node that publishes a ResourceSlice (about half of them): one to four,
    each of a model."""
    out: dict[int, list[str]] = {}
    for i in range(n):
        if draw(st.booleans()):
            out[i] = draw(st.lists(st.sampled_from(MODELS), min_size=1, max_size=4))
    return out


def _hold_devices(draw: st.DrawFn, sc: Scenario) -> None:
    """Now and then a bound pod holds one of its node's devices (a claim allocated to it), so the
    subject finds some devices in use."""
    free = {i: list(range(len(models))) for i, models in sc.devices.items()}
    for e in sc.existing:
        if free.get(e.node) and draw(st.integers(0, 2)) == 0:
            k = draw(st.sampled_from(free[e.node]))
            free[e.node].remove(k)
            e.device = f"dev-{k}"


@st.composite
def scenarios(draw: st.DrawFn) -> Scenario:
    n = draw(st.integers(5, 12))
    # One size per image on every node, as in a real cluster: see the ImageLocality quirk.
    sizes = [draw(st.integers(1, 2000)) * 1_000_000 for _ in NODE_IMAGES]
    nodes = [draw(_node(i, sizes)) for i in range(n)]
    sc = Scenario(nodes, _devices(draw, n), [], {})
    sc.existing = [draw(_existing(i, n)) for i in range(draw(st.integers(0, 16)))]
    _hold_devices(draw, sc)
    sc.pod = _test_pod(draw, sc)
    return sc


def resource_slice(node: str, models: list[str]) -> dict[str, Any]:
    """The ResourceSlice a driver on ``node`` publishes for its devices ``dev-0``, ``dev-1``, ..."""
    devices = [{"name": f"dev-{k}", "attributes": {"model": {"string": m}}} for k, m in enumerate(models)]
    spec = {
        "driver": DRIVER,
        "nodeName": node,
        "pool": {"name": node, "generation": 1, "resourceSliceCount": 1},
        "devices": devices,
    }
    return {"metadata": {"name": f"{node}-devices"}, "spec": spec}


def device_class() -> dict[str, Any]:
    sel = [{"cel": {"expression": f'device.driver == "{DRIVER}"'}}]
    return {"metadata": {"name": DEVICE_CLASS}, "spec": {"selectors": sel}}


def held_claim(name: str, node: str, device: str, pod: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """A ResourceClaim for one device of the class and the status that allocates ``device`` on
    ``node`` to the bound ``pod`` (as DynamicResources' PreBind writes it)."""
    claim = {"metadata": {"name": name}, "spec": _fixed_claim_spec()}
    sel = {"nodeSelectorTerms": [{"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node]}]}]}
    result = {"request": "dev", "driver": DRIVER, "pool": node, "device": device}
    meta = pod["metadata"]
    status = {
        "allocation": {"devices": {"results": [result]}, "nodeSelector": sel},
        "reservedFor": [{"resource": "pods", "name": meta["name"], "uid": meta["uid"]}],
    }
    return claim, status


def _fixed_claim_spec() -> dict[str, Any]:
    return {"devices": {"requests": [{"name": "dev", "exactly": {"deviceClassName": DEVICE_CLASS, "count": 1}}]}}


def with_claim(pod: dict[str, Any], claim: str) -> dict[str, Any]:
    """``pod`` using ResourceClaim ``claim`` (a copy)."""
    out = copy.deepcopy(pod)
    out["spec"]["resourceClaims"] = [{"name": "held", "resourceClaimName": claim}]
    out["spec"]["containers"][0].setdefault("resources", {})["claims"] = [{"name": "held"}]
    return out
