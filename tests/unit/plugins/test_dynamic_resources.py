"""DynamicResources and the DRA allocator, from builders: pure allocation, the store's
allocated-devices cache, the plugin's extension points and its PreBind writes (fake client)."""

from __future__ import annotations

from typing import Any

import pytest

from custom_scheduler.api import dra
from custom_scheduler.api.model import Pod, pod_from_json
from custom_scheduler.framework import cluster_events as ce
from custom_scheduler.framework import dra_store as fdra
from custom_scheduler.framework.handle import SnapshotHandle
from custom_scheduler.framework.requeue import RequeueRules
from custom_scheduler.framework.types import Code, CycleState, NodeInfo, Snapshot
from custom_scheduler.kube import api_errors as kerr
from custom_scheduler.plugins import dra_allocator, dra_hints
from custom_scheduler.plugins import dynamic_resources as plugin
from tests.builders import ClaimBuilder, device_class_obj, make_node, make_pod, resource_slice_obj

D = "gpu.example.com"
CLASS = device_class_obj("gpu", f'device.driver == "{D}"')


def store_of(
    slices: list[dict[str, Any]], claims: list[ClaimBuilder], classes: tuple[dict[str, Any], ...] = (CLASS,)
) -> fdra.DRAStore:
    s = fdra.DRAStore()
    s.load(fdra.SLICE, (dra.resource_slice_from_json(x) for x in slices))
    s.load(fdra.CLASS, (dra.device_class_from_json(x) for x in classes))
    s.load(fdra.CLAIM, (dra.resource_claim_from_json(c.obj()) for c in claims))
    return s


def gpu_pod(*claims: str, uid: str = "uid-p") -> Pod:
    obj = make_pod("p").uid(uid).obj()
    obj["spec"]["resourceClaims"] = [{"name": f"c{i}", "resourceClaimName": c} for i, c in enumerate(claims)]
    return pod_from_json(obj)


def two_gpus(node: str, **attrs: Any) -> dict[str, Any]:
    return resource_slice_obj(node, {"gpu-0": {"model": "a100", **attrs}, "gpu-1": {"model": "h100", **attrs}})


def allocate(store: fdra.DRAStore, names: list[str], node: str = "n1", labels: dict[str, str] | None = None) -> Any:
    claims = [store.get_claim("default", n) for n in names]
    cands = dra.candidates_for_node(store.slices_for(node), node, labels or {})
    cels = dra_allocator.CELCache()
    return dra_allocator.allocate(claims, cands, store.allocated_devices(), store.device_class, cels, node)  # type: ignore[arg-type]


def devices(allocs: list[dra.Allocation] | None) -> list[list[str]]:
    assert allocs is not None
    return [[f"{r.request}={r.device}" for r in a.results] for a in allocs]


# --- the allocator --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("claims", "want"),
    [
        pytest.param([ClaimBuilder("a").request()], [["gpu=gpu-0"]], id="one"),
        pytest.param([ClaimBuilder("a").request(count=2)], [["gpu=gpu-0", "gpu=gpu-1"]], id="count"),
        pytest.param([ClaimBuilder("a").request(count=3)], None, id="count-too-big"),
        pytest.param([ClaimBuilder("a").request(mode="All")], [["gpu=gpu-0", "gpu=gpu-1"]], id="all"),
        pytest.param(
            [ClaimBuilder("a").request(), ClaimBuilder("b").request()], [["gpu=gpu-0"], ["gpu=gpu-1"]], id="distinct"
        ),
        pytest.param(
            [ClaimBuilder("a").request("gpu", "gpu", f'device.attributes["{D}"].model == "h100"')],
            [["gpu=gpu-1"]],
            id="cel-selector",
        ),
        pytest.param(
            [ClaimBuilder("a").request("gpu", "gpu", f'device.attributes["{D}"].model == "b200"')], None, id="no-model"
        ),
        pytest.param(
            [ClaimBuilder("a").request("x").request("y").match_attribute(f"{D}/model")], None, id="match-fails"
        ),
        pytest.param(
            [
                ClaimBuilder("a").first_available(
                    "gpu", ("big", "gpu", (f'device.attributes["{D}"].model == "b200"',)), ("small", "gpu", ())
                )
            ],
            [["gpu/small=gpu-0"]],
            id="first-available-falls-back",
        ),
        pytest.param(
            [ClaimBuilder("a").request("gpu", "gpu", '"x" in device.attributes["other.example.com"]')],
            None,
            id="unknown-domain-is-empty-map",
        ),
    ],
)
def test_allocate(claims: list[ClaimBuilder], want: list[list[str]] | None) -> None:
    store = store_of([two_gpus("n1")], claims)
    got = allocate(store, [c.obj()["metadata"]["name"] for c in claims])
    assert (devices(got) if got is not None else None) == want


def test_match_attribute_keeps_two_devices_on_one_value() -> None:
    slc = resource_slice_obj("n1", {"g0": {"numa": 0}, "g1": {"numa": 1}, "g2": {"numa": 1}})
    store = store_of([slc], [ClaimBuilder("a").request(count=2).match_attribute(f"{D}/numa")])
    assert devices(allocate(store, ["a"])) == [["gpu=g1", "gpu=g2"]]


def test_in_use_devices_are_never_handed_out_again() -> None:
    store = store_of(
        [two_gpus("n1")], [ClaimBuilder("old").request().allocated("n1", "gpu-0"), ClaimBuilder("a").request()]
    )
    assert devices(allocate(store, ["a"])) == [["gpu=gpu-1"]]
    store.put(fdra.CLAIM, dra.resource_claim_from_json(ClaimBuilder("b").request(mode="All").obj()))
    assert allocate(store, ["b"]) is None, "All cannot have a device that is in use"


@pytest.mark.parametrize(
    ("expr", "want"),
    [
        ("device.attributes[", "claim default/a: selector #0: CEL compile error:"),
        (f'device.attributes["{D}"].nope == 1', "selector #0 on device gpu.example.com/n1/gpu-0: CEL runtime error"),
        ("1", "CEL runtime error: expression must evaluate to bool"),
    ],
)
def test_cel_errors_name_the_claim_and_the_error(expr: str, want: str) -> None:
    store = store_of([two_gpus("n1")], [ClaimBuilder("a").request("gpu", "gpu", expr)])
    with pytest.raises(dra_allocator.AllocationError, match=None) as e:
        allocate(store, ["a"])
    assert want in str(e.value)


def test_slices_reach_their_node_all_nodes_or_a_selector() -> None:
    sel = {"nodeSelectorTerms": [{"matchExpressions": [{"key": "rack", "operator": "In", "values": ["r1"]}]}]}
    slices = [
        resource_slice_obj("n1", {"local": {}}),
        resource_slice_obj("", {"everywhere": {}}, all_nodes=True, pool="net"),
        resource_slice_obj("", {"rack1": {}}, node_selector=sel, pool="rack"),
    ]
    store = store_of(slices, [])

    def names(node: str, labels: dict[str, str]) -> list[str]:
        return sorted(c.device.name for c in dra.candidates_for_node(store.slices_for(node), node, labels))

    assert names("n1", {"rack": "r1"}) == ["everywhere", "local", "rack1"]
    assert names("n2", {"rack": "r2"}) == ["everywhere"]


# --- the store ------------------------------------------------------------------------------------


def test_pending_then_assumed_then_api_hold_the_devices_exactly_once() -> None:
    store = store_of([two_gpus("n1")], [ClaimBuilder("a").request()])
    claim = store.get_claim("default", "a")
    assert claim is not None
    [alloc] = allocate(store, ["a"])
    assert store.signal_pending(claim, alloc)
    assert not store.signal_pending(claim, alloc), "one pending allocation per claim"
    assert store.allocated_devices() == {(D, "n1", "gpu-0")}
    written = ClaimBuilder("a").request().allocated("n1", "gpu-0").obj()
    written["metadata"]["resourceVersion"] = "2"
    store.assume_claim(dra.resource_claim_from_json(written))
    store.remove_pending(claim.uid)
    assert store.allocated_devices() == {(D, "n1", "gpu-0")}
    assert store.assumed() == (["default/a"], [])
    store.put(fdra.CLAIM, dra.resource_claim_from_json(written))  # the watch brings it back
    assert store.assumed() == ([], [])
    assert store.allocated_devices() == {(D, "n1", "gpu-0")}
    store.delete(fdra.CLAIM, store.get_claim("default", "a"))
    assert store.allocated_devices() == frozenset()


# --- the plugin -----------------------------------------------------------------------------------


class FakeClient:
    def __init__(self, store: fdra.DRAStore, conflicts: int = 0) -> None:
        self.store = store
        self.puts: list[tuple[str, dict[str, Any]]] = []
        self.conflicts = conflicts
        self.rv = 10

    def put(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        if self.conflicts:
            self.conflicts -= 1
            raise kerr.Conflict(409, "Conflict", "the object has been modified")
        self.rv += 1
        out = {**body, "metadata": {**body["metadata"], "resourceVersion": str(self.rv)}}
        self.puts.append((path, out))
        return out

    def get(self, path: str) -> dict[str, Any]:
        name = path.rsplit("/", 1)[1]
        c = self.store.get_claim("default", name)
        assert c is not None
        return c.raw


def framework_of(store: fdra.DRAStore, client: Any = None) -> tuple[plugin.DynamicResources, list[NodeInfo]]:
    infos = [NodeInfo(make_node(n).build()) for n in ("n1", "n2")]
    snap = Snapshot(node_infos={ni.name: ni for ni in infos}, node_list=infos)
    handle = SnapshotHandle(snap, profile_name="custom-scheduler", client=client, dra=store)
    return plugin.DynamicResources(None, handle), infos


def test_pod_without_claims_is_skipped() -> None:
    pl, infos = framework_of(store_of([], []))
    pod = pod_from_json(make_pod("plain").obj())
    assert pl.pre_enqueue(pod).is_success
    assert pl.pre_filter(CycleState(), pod, infos).code is Code.SKIP


@pytest.mark.parametrize(
    ("pod", "want"),
    [
        pytest.param(gpu_pod("missing"), 'resourceclaim.resource.k8s.io "missing" not found', id="missing"),
        pytest.param(
            pod_from_json(
                {
                    **make_pod("p").obj(),
                    "spec": {
                        **make_pod("p").obj()["spec"],
                        "resourceClaims": [{"name": "gpu", "resourceClaimTemplateName": "t"}],
                    },
                }
            ),
            'pod "default/p": ResourceClaim not created yet',
            id="template-not-created",
        ),
    ],
)
def test_pre_enqueue_gates_until_the_claims_exist(pod: Pod, want: str) -> None:
    pl, _ = framework_of(store_of([], []))
    st = pl.pre_enqueue(pod)
    assert not st.is_success
    assert st.message == want


def test_filter_reserve_prebind_write_allocation_and_reservation() -> None:
    store = store_of([two_gpus("n1")], [ClaimBuilder("a").request()])
    client = FakeClient(store, conflicts=1)
    pl, infos = framework_of(store, client)
    pod = gpu_pod("a")
    state = CycleState()
    assert pl.pre_filter(state, pod, infos).is_success
    assert pl.filter(state, pod, infos[0]).is_success
    st = pl.filter(state, pod, infos[1])
    assert st.code is Code.UNSCHEDULABLE_AND_UNRESOLVABLE
    assert st.message == plugin.REASON_CANNOT_ALLOCATE
    assert pl.reserve(state, pod, "n1").is_success
    # A second pod in the same burst sees the claim in flight, and the device taken.
    other = store_of([two_gpus("n1")], [])
    assert other.allocated_devices() == frozenset()
    assert store.allocated_devices() == {(D, "n1", "gpu-0")}
    assert pl.pre_bind(state, pod, "n1").is_success
    paths = [p for p, _ in client.puts]
    assert paths[0].endswith("/resourceclaims/a")
    assert paths[-1].endswith("/resourceclaims/a/status")
    body = client.puts[-1][1]
    assert body["metadata"]["finalizers"] == [dra.FINALIZER]
    assert body["status"]["allocation"]["devices"]["results"] == [
        {"request": "gpu", "driver": D, "pool": "n1", "device": "gpu-0"}
    ]
    assert body["status"]["reservedFor"] == [{"resource": "pods", "name": "p", "uid": "uid-p"}]
    assert store.assumed()[1] == [], "pending dropped once written"


def test_shared_allocated_claim_is_reused_and_only_reserved() -> None:
    store = store_of([two_gpus("n1")], [ClaimBuilder("s").request().allocated("n1", "gpu-0").reserved_for("uid-x")])
    client = FakeClient(store)
    pl, infos = framework_of(store, client)
    pod = gpu_pod("s")
    state = CycleState()
    assert pl.pre_filter(state, pod, infos).is_success
    assert pl.filter(state, pod, infos[0]).is_success
    assert pl.filter(state, pod, infos[1]).message == plugin.REASON_NOT_AVAILABLE
    assert pl.reserve(state, pod, "n1").is_success
    assert pl.pre_bind(state, pod, "n1").is_success
    [(path, body)] = client.puts
    assert path.endswith("/status")
    assert [r["uid"] for r in body["status"]["reservedFor"]] == ["uid-x", "uid-p"]


def test_compile_error_is_a_clear_error_at_pre_filter() -> None:
    store = store_of([two_gpus("n1")], [ClaimBuilder("a").request("gpu", "gpu", "device.attributes[")])
    pl, infos = framework_of(store)
    st = pl.pre_filter(CycleState(), gpu_pod("a"), infos)
    assert st.code is Code.ERROR
    assert st.message.startswith("claim default/a: selector #0: CEL compile error:")


def test_unreserve_drops_the_pending_allocation() -> None:
    store = store_of([two_gpus("n1")], [ClaimBuilder("a").request()])
    pl, infos = framework_of(store)
    pod, state = gpu_pod("a"), CycleState()
    pl.pre_filter(state, pod, infos)
    pl.filter(state, pod, infos[0])
    pl.reserve(state, pod, "n1")
    assert store.allocated_devices()
    pl.unreserve(state, pod, "n1")
    assert store.allocated_devices() == frozenset()
    assert store.assumed() == ([], [])


def test_claim_events_requeue_the_pods_that_use_them() -> None:
    claim = dra.resource_claim_from_json(ClaimBuilder("a").request().owner("uid-q").obj())
    add = ce.store_event(fdra.CLAIM, None, claim)
    assert add is not None
    assert add.label == "resource.k8s.io/ResourceClaimAdd"

    def helped(pod: Pod, old: Any, new: Any) -> bool:
        event = ce.store_event(fdra.CLAIM, old, new)
        assert event is not None
        return RULES.worth_requeuing(pod, {plugin.NAME}, event, old, new)

    assert helped(gpu_pod("a"), None, claim)
    owned = pod_from_json(
        {
            **make_pod("q").uid("uid-q").obj(),
            "spec": {
                **make_pod("q").obj()["spec"],
                "resourceClaims": [{"name": "g", "resourceClaimTemplateName": "t"}],
            },
        }
    )
    assert helped(owned, None, claim), "the template's claim, before the pod's status names it"
    assert not helped(gpu_pod("b"), None, claim)
    assert helped(gpu_pod("b"), claim, None), "a deleted claim frees its devices for anyone"
    slice_add = ce.store_event(fdra.SLICE, None, object())
    assert slice_add is not None
    assert RULES.worth_requeuing(gpu_pod("b"), {plugin.NAME}, slice_add, None, object())
    slice_delete = ce.store_event(fdra.SLICE, object(), None)
    assert slice_delete is not None
    assert not RULES.worth_requeuing(gpu_pod("b"), {plugin.NAME}, slice_delete, object(), None)


RULES = RequeueRules({plugin.NAME: tuple(dra_hints.registrations())})


def test_generated_claim_in_pod_status_releases_a_gated_pod() -> None:
    """The controller's status update (upstream's UpdatePodGeneratedResourceClaim) changes the
    pod's spec signature, so the queue runs PreEnqueue again for the gated pod."""
    from custom_scheduler.core.queue import may_have_become_schedulable

    obj = make_pod("p").uid("uid-p").obj()
    obj["spec"]["resourceClaims"] = [{"name": "gpu", "resourceClaimTemplateName": "t"}]
    before = pod_from_json(obj)
    obj["status"] = {"resourceClaimStatuses": [{"name": "gpu", "resourceClaimName": "p-gpu-x"}]}
    after = pod_from_json(obj)
    assert [(rc.claim, rc.resolved) for rc in before.resource_claims] == [("", False)]
    assert [(rc.claim, rc.resolved) for rc in after.resource_claims] == [("p-gpu-x", True)]
    assert may_have_become_schedulable(before, after)
    store = store_of([], [ClaimBuilder("p-gpu-x").request().owner("uid-p")])
    pl, _ = framework_of(store)
    assert not pl.pre_enqueue(before).is_success
    assert pl.pre_enqueue(after).is_success
    assert pl.pre_enqueue(pod_from_json({**obj, "metadata": {**obj["metadata"], "uid": "uid-other"}})).message == (
        "ResourceClaim default/p-gpu-x was not created for Pod default/p (Pod is not owner)"
    )
