"""Extended resources backed by DRA, from builders: the special claim's requests and mappings (the
cases of upstream's ``extendeddynamicresources_test.go`` this port must agree with), the class
mapping, NodeResourcesFit leaving a DRA-backed resource to DynamicResources, and the plugin's
PreFilter → Filter → Reserve → PreBind / Unreserve / PostFilter for such a pod (fake client)."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from custom_scheduler.api import dra, dra_extended
from custom_scheduler.api.model import Pod, node_from_json, pod_from_json
from custom_scheduler.framework import dra_store as fdra
from custom_scheduler.framework.arrays import NodeArrays
from custom_scheduler.framework.handle import SnapshotHandle
from custom_scheduler.framework.types import Code, CycleState, NodeInfo, Snapshot
from custom_scheduler.plugins import dra_extended_claim, node_resources_fit
from custom_scheduler.plugins import dynamic_resources as plugin
from tests.builders import ClaimBuilder, device_class_obj, make_node, make_pod, resource_slice_obj

D = "gpu.example.com"
GPU = "example.com/gpu"


def backing_class(name: str = "gpu", extended: str = GPU, created: str = "2026-01-01T00:00:00Z") -> dict[str, Any]:
    obj = device_class_obj(name, f'device.driver == "{D}"')
    obj["spec"]["extendedResourceName"] = extended
    obj["metadata"]["creationTimestamp"] = created
    return obj


def gpus(node: str, n: int) -> dict[str, Any]:
    return resource_slice_obj(node, {f"gpu-{i}": {"index": i} for i in range(n)})


def store_of(slices: list[dict[str, Any]], classes: list[dict[str, Any]], claims: list[dict[str, Any]] = ()) -> Any:  # type: ignore[assignment]
    s = fdra.DRAStore()
    s.load(fdra.SLICE, (dra.resource_slice_from_json(x) for x in slices))
    s.load(fdra.CLASS, (dra.device_class_from_json(x) for x in classes))
    s.load(fdra.CLAIM, (dra.resource_claim_from_json(x) for x in claims))
    return s


def ext_pod(name: str = "p", gpus: int = 2, uid: str = "", init: int = 0) -> Pod:
    obj = make_pod(name).uid(uid or f"uid-{name}").req(cpu="100m").obj()
    c = obj["spec"]["containers"][0]
    c["resources"]["requests"][GPU] = str(gpus)
    c["resources"]["limits"] = {GPU: str(gpus)}
    if init:
        obj["spec"]["initContainers"] = [
            {
                "name": "init",
                "image": "busybox",
                "resources": {"requests": {GPU: str(init)}, "limits": {GPU: str(init)}},
            }
        ]
    return pod_from_json(obj)


# --- requests and mappings ------------------------------------------------------------------------


def containers(*specs: tuple[str, dict[str, str], str]) -> tuple[dra_extended.ContainerRequests, ...]:
    """(kind: "init"/"sidecar"/"app", requests, name) -> what the pod projection keeps."""
    inits = [
        {"name": n, "resources": {"requests": r}, **({"restartPolicy": "Always"} if k == "sidecar" else {})}
        for k, r, n in specs
        if k != "app"
    ]
    apps = [{"name": n, "resources": {"requests": r}} for k, r, n in specs if k == "app"]
    return dra_extended.container_requests({"initContainers": inits, "containers": apps})


@pytest.mark.parametrize(
    ("specs", "want_requests", "want_mappings"),
    [
        pytest.param(
            [("app", {GPU: "2"}, "c")],
            [("container-0-request-0", 2)],
            [("c", "container-0-request-0")],
            id="one-container",
        ),
        pytest.param(
            [("app", {"cpu": "1", GPU: "2", "memory": "1Gi"}, "c")],
            [("container-0-request-1", 2)],
            [("c", "container-0-request-1")],
            id="request-index-is-the-sorted-key-index",
        ),
        pytest.param(
            [("app", {GPU: "1"}, "a"), ("app", {GPU: "2"}, "b")],
            [("container-0-request-0", 1), ("container-1-request-0", 2)],
            [("a", "container-0-request-0"), ("b", "container-1-request-0")],
            id="two-containers-two-requests",
        ),
        pytest.param(
            [("init", {GPU: "1"}, "i"), ("app", {GPU: "2"}, "c")],
            [("container-1-request-0", 2)],
            [("c", "container-1-request-0"), ("i", "container-1-request-0")],
            id="init-reuses-a-later-container",
        ),
        pytest.param(
            [("init", {GPU: "3"}, "i"), ("app", {GPU: "2"}, "c")],
            [("container-0-request-0", 1), ("container-1-request-0", 2)],
            [("c", "container-1-request-0"), ("i", "container-1-request-0"), ("i", "container-0-request-0")],
            id="init-needs-more-than-it-can-reuse",
        ),
        pytest.param(
            [("init", {GPU: "1"}, "i0"), ("init", {GPU: "3"}, "i1")],
            [("container-1-request-0", 3)],
            [("i0", "container-1-request-0"), ("i1", "container-1-request-0")],
            id="two-inits-share-the-largest",
        ),
        pytest.param(
            [("sidecar", {GPU: "1"}, "s"), ("app", {GPU: "1"}, "c")],
            [("container-0-request-0", 1), ("container-1-request-0", 1)],
            [("s", "container-0-request-0"), ("c", "container-1-request-0")],
            id="a-sidecar-is-long-lived",
        ),
    ],
)
def test_requests_and_mappings(
    specs: list[tuple[str, dict[str, str], str]],
    want_requests: list[tuple[str, int]],
    want_mappings: list[tuple[str, str]],
) -> None:
    reqs, maps = dra_extended.requests_and_mappings(containers(*specs), [GPU], lambda _: "gpu")
    assert [(r.name, r.count) for r in reqs] == want_requests
    assert [(m.container, m.request) for m in maps] == want_mappings
    assert all(r.device_class == "gpu" and m.resource == GPU for r in reqs for m in maps)


def test_class_mapping_newest_wins_then_smallest_name_and_implicit_names() -> None:
    classes = [
        dra.device_class_from_json(backing_class("old", created="2026-01-01T00:00:00Z")),
        dra.device_class_from_json(backing_class("new-b", created="2026-02-01T00:00:00Z")),
        dra.device_class_from_json(backing_class("new-a", created="2026-02-01T00:00:00Z")),
        dra.device_class_from_json(device_class_obj("plain")),
    ]
    m = dra_extended.class_mapping(classes)
    assert m[GPU].name == "new-a"
    assert m[dra_extended.DEVICE_CLASS_PREFIX + "old"].name == "old"
    assert m[dra_extended.DEVICE_CLASS_PREFIX + "plain"].name == "plain"


@pytest.mark.parametrize(
    ("name", "want"),
    [
        (GPU, True),
        ("deviceclass.resource.kubernetes.io/gpu", True),
        ("cpu", False),
        ("kubernetes.io/batch", False),
        ("hugepages-2Mi", False),
        ("requests.example.com/gpu", False),
    ],
)
def test_is_extended_resource_name(name: str, want: bool) -> None:
    assert dra_extended.is_extended_resource_name(name) is want


# --- NodeResourcesFit -------------------------------------------------------------------------------


def fit_of(store: fdra.DRAStore) -> node_resources_fit.NodeResourcesFit:
    snap = Snapshot(node_infos={}, node_list=[])
    return node_resources_fit.NodeResourcesFit(None, SnapshotHandle(snap, profile_name="p", dra=store))


@pytest.mark.parametrize(
    ("classes", "node_gpus", "want"),
    [
        pytest.param([backing_class()], None, [], id="backed-node-without-it"),
        pytest.param([], None, [f"Insufficient {GPU}"], id="not-backed"),
        pytest.param([backing_class()], "1", [f"Insufficient {GPU}"], id="node-offers-it-itself-too-few"),
        pytest.param([backing_class()], "4", [], id="node-offers-it-itself"),
        pytest.param([backing_class()], "0", [], id="zero-allocatable-is-delegated"),
    ],
)
def test_fit_leaves_a_dra_backed_resource_to_dynamic_resources(
    classes: list[dict[str, Any]], node_gpus: str | None, want: list[str]
) -> None:
    pl = fit_of(store_of([], classes))
    b = make_node("n1").capacity(cpu="4", memory="8Gi", pods="10")
    node = b.obj()
    if node_gpus is not None:
        for k in ("capacity", "allocatable"):
            node["status"][k][GPU] = node_gpus
    ni = NodeInfo(node_from_json(node))
    state = CycleState()
    pod = ext_pod()
    assert pl.pre_filter(state, pod, [ni]).is_success
    st = pl.filter(state, pod, ni)
    assert (list(st.reasons) if not st.is_success else []) == want
    # The daemon's column path agrees, with a second node that offers nothing at all.
    bare = NodeInfo(node_from_json(make_node("n2").capacity(cpu="4", memory="8Gi", pods="10").obj()))
    cols = NodeArrays()
    cols.rebuild([ni, bare])
    mask = node_resources_fit.fits_mask(state.read(node_resources_fit.PRE_FILTER_KEY), cols)
    assert [bool(x) for x in mask] == [not want, pl.filter(state, pod, bare).is_success]


# --- the plugin -------------------------------------------------------------------------------------


class FakeClient:
    """Creates, updates, patches and deletes claims as an API server would (names, versions)."""

    def __init__(self) -> None:
        self.objects: dict[str, dict[str, Any]] = {}
        self.patches: list[tuple[str, dict[str, Any]]] = []
        self.deleted: list[str] = []
        self.rv = 10

    def _stamp(self, body: dict[str, Any]) -> dict[str, Any]:
        self.rv += 1
        return {**body, "metadata": {**body["metadata"], "resourceVersion": str(self.rv)}}

    def post(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        meta = {**body["metadata"], "name": body["metadata"]["generateName"] + "x1y2z", "uid": "uid-created"}
        out = self._stamp({**body, "metadata": meta})
        self.objects[f"{path}/{meta['name']}"] = out
        return out

    def put(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        out = self._stamp(body)
        self.objects[path.removesuffix("/status")] = out
        return out

    def get(self, path: str) -> dict[str, Any]:
        return self.objects[path]

    def patch(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        self.patches.append((path, body))
        return body

    def delete(self, path: str) -> None:
        self.deleted.append(path)
        self.objects.pop(path, None)


def framework_of(store: fdra.DRAStore, client: Any, node_gpus: str | None = None) -> Any:
    nodes = []
    for n in ("n1", "n2"):
        obj = make_node(n).capacity(cpu="4", memory="8Gi", pods="10").obj()
        if node_gpus is not None and n == "n2":
            for k in ("capacity", "allocatable"):
                obj["status"][k][GPU] = node_gpus
        nodes.append(NodeInfo(node_from_json(obj)))
    snap = Snapshot(node_infos={ni.name: ni for ni in nodes}, node_list=nodes)
    handle = SnapshotHandle(snap, profile_name="p", client=client, dra=store)
    return plugin.DynamicResources(None, handle), nodes


def test_a_pod_asking_for_gpus_gets_a_claim_created_allocated_and_mapped() -> None:
    store = store_of([gpus("n1", 3)], [backing_class()])
    client = FakeClient()
    pl, (n1, n2) = framework_of(store, client)
    pod = ext_pod(gpus=2)
    state = CycleState()
    assert pl.pre_filter(state, pod, [n1, n2]).is_success
    assert pl.filter(state, pod, n1).is_success
    assert pl.filter(state, pod, n2).message == plugin.REASON_CANNOT_ALLOCATE
    assert pl.reserve(state, pod, "n1").is_success
    assert len(store.allocated_devices()) == 2, "pending from Reserve on"
    assert pl.pre_bind(state, pod, "n1").is_success

    created = client.objects[f"{dra.API}/namespaces/default/resourceclaims/p-extended-resources-x1y2z"]
    meta = created["metadata"]
    assert meta["annotations"] == {dra_extended.CLAIM_ANNOTATION: "true"}
    assert meta["ownerReferences"] == [
        {"apiVersion": "v1", "kind": "Pod", "name": "p", "uid": "uid-p", "controller": True}
    ]
    assert meta["finalizers"] == [dra.FINALIZER]
    assert created["spec"]["devices"]["requests"] == [
        {
            "name": "container-0-request-1",
            "exactly": {"deviceClassName": "gpu", "allocationMode": "ExactCount", "count": 2},
        }
    ]
    results = created["status"]["allocation"]["devices"]["results"]
    assert [r["device"] for r in results] == ["gpu-0", "gpu-1"]
    assert created["status"]["reservedFor"] == [{"resource": "pods", "name": "p", "uid": "uid-p"}]
    path, body = client.patches[0]
    assert path == "/api/v1/namespaces/default/pods/p/status"
    assert body["status"]["extendedResourceClaimStatus"] == {
        "requestMappings": [{"containerName": "c0", "resourceName": GPU, "requestName": "container-0-request-1"}],
        "resourceClaimName": "p-extended-resources-x1y2z",
    }
    assert store.assumed() == (["default/p-extended-resources-x1y2z"], []), "assumed, nothing pending"

    # A second pod wanting two of the three finds one left.
    other, s2 = ext_pod("q", gpus=2), CycleState()
    assert pl.pre_filter(s2, other, [n1, n2]).is_success
    assert pl.filter(s2, other, n1).message == plugin.REASON_CANNOT_ALLOCATE
    one, s3 = ext_pod("r", gpus=1), CycleState()
    assert pl.pre_filter(s3, one, [n1, n2]).is_success
    assert pl.filter(s3, one, n1).is_success
    got = s3.read(plugin.STATE_KEY).allocations("n1")
    assert got is not None
    assert [r.device for r in got[0].results] == ["gpu-2"]


def test_a_node_offering_the_resource_itself_needs_no_claim() -> None:
    store = store_of([gpus("n1", 3)], [backing_class()])
    client = FakeClient()
    pl, (_, n2) = framework_of(store, client, node_gpus="4")
    pod, state = ext_pod(gpus=2), CycleState()
    assert pl.pre_filter(state, pod, [n2]).is_success
    assert pl.filter(state, pod, n2).is_success
    assert pl.reserve(state, pod, "n2").is_success
    assert pl.pre_bind(state, pod, "n2").is_success
    assert client.objects == {}
    assert client.patches == []
    assert store.allocated_devices() == frozenset()


def test_unreserve_after_prebind_deletes_the_created_claim() -> None:
    store = store_of([gpus("n1", 2)], [backing_class()])
    client = FakeClient()
    pl, (n1, _) = framework_of(store, client)
    pod, state = ext_pod(gpus=1), CycleState()
    assert pl.pre_filter(state, pod, [n1]).is_success
    assert pl.filter(state, pod, n1).is_success
    assert pl.reserve(state, pod, "n1").is_success
    assert pl.pre_bind(state, pod, "n1").is_success
    pl.unreserve(state, pod, "n1")
    path = f"{dra.API}/namespaces/default/resourceclaims/p-extended-resources-x1y2z"
    assert client.deleted == [path]
    assert store.allocated_devices() == frozenset()
    assert store.assumed() == ([], [])


def test_a_claim_left_from_an_earlier_attempt_is_rejected_then_deleted() -> None:
    pod = ext_pod(gpus=1)
    special = dra_extended_claim.special_claim(pod)
    left = dict(special.raw)
    left["metadata"] = {**left["metadata"], "name": "p-extended-resources-old", "uid": "uid-old"}
    left["spec"] = ClaimBuilder("x").request().obj()["spec"]
    store = store_of([gpus("n1", 2)], [backing_class()], [left])
    client = FakeClient()
    client.objects[f"{dra.API}/namespaces/default/resourceclaims/p-extended-resources-old"] = left
    pl, (n1, _) = framework_of(store, client)
    state = CycleState()
    assert pl.pre_filter(state, pod, [n1]).is_success
    st = pl.filter(state, pod, n1)
    assert st.code is Code.UNSCHEDULABLE
    assert st.message == dra_extended_claim.REASON_EXISTING
    got = pl.post_filter(state, pod, {})
    assert got.status.message == dra_extended_claim.DELETED
    assert client.deleted == [f"{dra.API}/namespaces/default/resourceclaims/p-extended-resources-old"]


def test_a_pod_without_backed_resources_is_skipped() -> None:
    pl, (n1, _) = framework_of(store_of([gpus("n1", 2)], []), FakeClient())
    assert pl.pre_filter(CycleState(), ext_pod(), [n1]).code is Code.SKIP


def test_an_unbacked_resource_missing_from_the_node_cannot_fit() -> None:
    """A second extended resource no class backs and the node lacks: upstream's ``cannot fit
    resource`` (NodeResourcesFit says Insufficient too)."""
    store = store_of([gpus("n1", 2)], [backing_class()])
    pl, (n1, _) = framework_of(store, FakeClient())
    pod = ext_pod(gpus=1)
    pod = dataclasses.replace(
        pod, requests=dataclasses.replace(pod.requests, scalar={**pod.requests.scalar, "x.io/y": 1})
    )
    state = CycleState()
    assert pl.pre_filter(state, pod, [n1]).is_success
    assert pl.filter(state, pod, n1).message == dra_extended_claim.REASON_CANNOT_FIT
