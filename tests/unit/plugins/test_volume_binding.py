"""VolumeBinding: kube-scheduler's PreFilter/Filter/Score/Reserve/PreBind semantics, on a VolumeStore."""

from __future__ import annotations

from typing import Any

import pytest

from custom_scheduler.api import storage
from custom_scheduler.api.model import Node, Pod
from custom_scheduler.errors import ConfigError
from custom_scheduler.framework import volumes as fv
from custom_scheduler.framework.types import SKIP, SUCCESS, Code, CycleState, Status
from custom_scheduler.plugins import volume_binding as vb
from tests.builders import PVBuilder, PVCBuilder, make_node, make_pod, make_pv, make_pvc, storage_class_obj
from tests.unit.plugins.support import node_info
from tests.unit.plugins.volume_support import FakeClient, capacity_obj, csidriver_obj, handle_of, store_of

NODE_A = make_node("a").label("topology.kubernetes.io/zone", "z1").build()
NODE_B = make_node("b").label("topology.kubernetes.io/zone", "z2").build()
LOCAL = storage_class_obj("local")  # WaitForFirstConsumer, no provisioner
DYNAMIC = storage_class_obj("dyn", "example.com/csi")
IMMEDIATE = storage_class_obj("fast", "example.com/csi", wffc=False)

UNRESOLVABLE = Code.UNSCHEDULABLE_AND_UNRESOLVABLE


def plugin(store: fv.VolumeStore, client: Any = None, **args: Any) -> vb.VolumeBinding:
    return vb.VolumeBinding(vb.parse_args(args or None, "args"), handle_of(store, client=client))


def pod_with(*claims: str) -> Pod:
    b = make_pod("p")
    for c in claims:
        b.pvc(c)
    return b.build()


def run_filter(store: fv.VolumeStore, pod: Pod, node: Node) -> tuple[Status, CycleState]:
    pl = plugin(store)
    state = CycleState()
    st = pl.pre_filter(state, pod, [])
    if not st.is_success:
        return st, state
    return pl.filter(state, pod, node_info(node)), state


# -- PreFilter ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("pvcs", "classes", "pod", "want"),
    [
        pytest.param([], [], make_pod("p").build(), SKIP, id="no-volumes"),
        pytest.param(
            [],
            [],
            make_pod("p").volume({"name": "cfg", "configMap": {"name": "x"}}).build(),
            SKIP,
            id="only-configmap",
        ),
        pytest.param(
            [], [], pod_with("c"), Status.unresolvable('persistentvolumeclaim "c" not found'), id="missing-claim"
        ),
        pytest.param(
            [make_pvc("c").volume_name("gone").phase("Lost")],
            [],
            pod_with("c"),
            Status.unresolvable('persistentvolumeclaim "c" bound to non-existent persistentvolume "gone"'),
            id="lost-claim",
        ),
        pytest.param(
            [make_pvc("c").terminating()],
            [],
            pod_with("c"),
            Status.unresolvable('persistentvolumeclaim "c" is being deleted'),
            id="terminating-claim",
        ),
        pytest.param(
            [make_pvc("c").storage_class("fast")],
            [IMMEDIATE],
            pod_with("c"),
            Status.unresolvable(vb.ERR_REASON_UNBOUND_IMMEDIATE),
            id="unbound-immediate",
        ),
        pytest.param(
            [make_pvc("c").storage_class("local").volume_name("pv1")],
            [LOCAL],
            pod_with("c"),
            Status.unresolvable(vb.ERR_REASON_UNBOUND_IMMEDIATE),
            id="prebound-not-yet-bound",
        ),
        pytest.param(
            [make_pvc("c")], [], pod_with("c"), Status.unresolvable(vb.ERR_REASON_UNBOUND_IMMEDIATE), id="no-class"
        ),
        pytest.param([make_pvc("c").storage_class("local")], [LOCAL], pod_with("c"), SUCCESS, id="unbound-wffc"),
        pytest.param([make_pvc("c").bound_to("pv1")], [], pod_with("c"), SUCCESS, id="bound"),
        pytest.param(
            [],
            [],
            make_pod("p").ephemeral_volume("scratch").build(),
            Status.unresolvable(
                'waiting for ephemeral volume controller to create the persistentvolumeclaim "p-scratch"'
            ),
            id="ephemeral-not-created-yet",
        ),
        pytest.param(
            [make_pvc("p-scratch").storage_class("local").owned_by("someone-else")],
            [LOCAL],
            make_pod("p").ephemeral_volume("scratch").build(),
            Status.unresolvable("PVC default/p-scratch was not created for pod default/p (pod is not owner)"),
            id="ephemeral-not-owned",
        ),
    ],
)
def test_pre_filter(pvcs: list[PVCBuilder], classes: list[dict[str, Any]], pod: Pod, want: Status) -> None:
    assert plugin(store_of(pvcs=pvcs, classes=classes)).pre_filter(CycleState(), pod, []) == want


def test_pre_filter_of_an_owned_ephemeral_claim_succeeds() -> None:
    pod = make_pod("p").uid("pod-uid").ephemeral_volume("scratch").build()
    store = store_of(pvcs=[make_pvc("p-scratch").storage_class("local").owned_by("pod-uid")], classes=[LOCAL])
    assert plugin(store).pre_filter(CycleState(), pod, []) == SUCCESS


# -- Filter ---------------------------------------------------------------------------------------


def pv_on(name: str, node: str, size: str = "1Gi", cls: str = "local") -> PVBuilder:
    return make_pv(name).storage_class(cls).size(size).on_node(node)


@pytest.mark.parametrize(
    ("pvs", "pvcs", "classes", "caps", "node", "want"),
    [
        pytest.param(
            [pv_on("pv1", "a").claim_ref("default", "c").phase("Bound")],
            [make_pvc("c").storage_class("local").bound_to("pv1")],
            [LOCAL],
            [],
            NODE_A,
            SUCCESS,
            id="bound-pv-on-this-node",
        ),
        pytest.param(
            [pv_on("pv1", "a").claim_ref("default", "c").phase("Bound")],
            [make_pvc("c").storage_class("local").bound_to("pv1")],
            [LOCAL],
            [],
            NODE_B,
            Status.unresolvable(vb.ERR_REASON_NODE_CONFLICT),
            id="bound-pv-on-another-node",
        ),
        pytest.param(
            [],
            [make_pvc("c").bound_to("gone")],
            [],
            [],
            NODE_A,
            Status.unresolvable(vb.ERR_REASON_PV_NOT_EXIST),
            id="bound-pv-missing",
        ),
        pytest.param(
            [pv_on("pv1", "a")],
            [make_pvc("c").storage_class("local")],
            [LOCAL],
            [],
            NODE_A,
            SUCCESS,
            id="static-pv-reaches-node",
        ),
        pytest.param(
            [pv_on("pv1", "a")],
            [make_pvc("c").storage_class("local")],
            [LOCAL],
            [],
            NODE_B,
            Status.unresolvable(vb.ERR_REASON_BIND_CONFLICT),
            id="static-pv-elsewhere-no-provisioner",
        ),
        pytest.param(
            [pv_on("pv1", "a", size="1Gi")],
            [make_pvc("c").storage_class("local").size("2Gi")],
            [LOCAL],
            [],
            NODE_A,
            Status.unresolvable(vb.ERR_REASON_BIND_CONFLICT),
            id="static-pv-too-small",
        ),
        pytest.param(
            [pv_on("pv1", "a").access("ReadOnlyMany")],
            [make_pvc("c").storage_class("local")],
            [LOCAL],
            [],
            NODE_A,
            Status.unresolvable(vb.ERR_REASON_BIND_CONFLICT),
            id="static-pv-wrong-access-mode",
        ),
        pytest.param(
            [pv_on("pv1", "a").claim_ref("other", "claim")],
            [make_pvc("c").storage_class("local")],
            [LOCAL],
            [],
            NODE_A,
            Status.unresolvable(vb.ERR_REASON_BIND_CONFLICT),
            id="static-pv-taken",
        ),
        pytest.param(
            [],
            [make_pvc("c").storage_class("local").selected_node("b")],
            [LOCAL],
            [],
            NODE_A,
            Status.unresolvable(vb.ERR_REASON_BIND_CONFLICT),
            id="selected-node-elsewhere",
        ),
        pytest.param(
            [], [make_pvc("c").storage_class("dyn")], [DYNAMIC], [], NODE_B, SUCCESS, id="dynamic-provisioning"
        ),
        pytest.param(
            [],
            [make_pvc("c").storage_class("dyn")],
            [storage_class_obj("dyn", "example.com/csi", allowed_zones=("z1",))],
            [],
            NODE_B,
            Status.unresolvable(vb.ERR_REASON_BIND_CONFLICT),
            id="allowed-topologies-exclude-node",
        ),
        pytest.param(
            [],
            [make_pvc("c").storage_class("dyn").size("10Gi")],
            [DYNAMIC],
            [capacity_obj("cap-z2", "dyn", "5Gi", "z2"), capacity_obj("cap-z1", "dyn", "50Gi", "z1")],
            NODE_B,
            Status.unresolvable(vb.ERR_REASON_NOT_ENOUGH_SPACE),
            id="capacity-too-small-in-node-zone",
        ),
        pytest.param(
            [],
            [make_pvc("c").storage_class("dyn").size("10Gi")],
            [DYNAMIC],
            [capacity_obj("cap-z1", "dyn", "50Gi", "z1", max_size="8Gi")],
            NODE_A,
            Status.unresolvable(vb.ERR_REASON_NOT_ENOUGH_SPACE),
            id="maximum-volume-size-wins",
        ),
        pytest.param(
            [],
            [make_pvc("c").storage_class("dyn").size("10Gi")],
            [DYNAMIC],
            [capacity_obj("cap-z1", "dyn", "50Gi", "z1")],
            NODE_A,
            SUCCESS,
            id="capacity-enough",
        ),
    ],
)
def test_filter(
    pvs: list[PVBuilder],
    pvcs: list[PVCBuilder],
    classes: list[dict[str, Any]],
    caps: list[dict[str, Any]],
    node: Node,
    want: Status,
) -> None:
    drivers = [csidriver_obj("example.com/csi", capacity=True)] if caps else []
    store = store_of(pvs=pvs, pvcs=pvcs, classes=classes, capacities=caps, drivers=drivers)
    st, _ = run_filter(store, pod_with("c"), node)
    assert st == want


def test_filter_takes_the_smallest_fitting_pv_and_one_pv_per_claim() -> None:
    store = store_of(
        pvs=[pv_on("big", "a", "10Gi"), pv_on("small", "a", "2Gi"), pv_on("tiny", "a", "1Gi")],
        pvcs=[make_pvc("c1").storage_class("local").size("2Gi"), make_pvc("c2").storage_class("local").size("1Gi")],
        classes=[LOCAL],
    )
    st, state = run_filter(store, pod_with("c1", "c2"), NODE_A)
    assert st == SUCCESS
    chosen = {b.pvc.name: b.pv.name for b in state.read(vb.STATE_KEY).by_node["a"].static}
    assert chosen == {"c2": "tiny", "c1": "small"}


def test_a_claim_whose_class_is_gone_counts_as_immediate() -> None:
    store = store_of(pvs=[], pvcs=[make_pvc("c").storage_class("local")], classes=[LOCAL])
    store.delete(fv.STORAGE_CLASS, storage.storage_class_from_json(LOCAL))
    pl = plugin(store)
    state = CycleState()
    # Without its class the claim counts as Immediate: PreFilter already refuses it.
    assert pl.pre_filter(state, pod_with("c"), []) == Status.unresolvable(vb.ERR_REASON_UNBOUND_IMMEDIATE)


# -- Score ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("request_", "capacity", "want"),
    [
        pytest.param("50Gi", "100Gi", 50, id="half-full"),
        pytest.param("100Gi", "100Gi", 0, id="full"),
        pytest.param("10Gi", "100Gi", 90, id="mostly-empty"),
        pytest.param("1Gi", "3Gi", 67, id="rounded-down-utilisation"),
    ],
)
def test_score_static_binding_by_default_shape(request_: str, capacity: str, want: int) -> None:
    pv = make_pv("pv").storage_class("local").size(capacity).build()
    pvc = make_pvc("c").storage_class("local").size(request_).build()
    assert vb.score_volumes(vb.PodVolumes(static=[vb.Binding(pv, pvc)]), vb.DEFAULT_SHAPE) == want


def test_score_averages_classes_and_uses_the_configured_shape() -> None:
    shape = vb.parse_args({"shape": [{"utilization": 0, "score": 0}, {"utilization": 100, "score": 10}]}, "a").shape
    a = vb.Binding(make_pv("a").storage_class("x").size("10Gi").build(), make_pvc("ca").size("5Gi").build())
    b = vb.Binding(make_pv("b").storage_class("y").size("10Gi").build(), make_pvc("cb").size("10Gi").build())
    assert vb.score_volumes(vb.PodVolumes(static=[a, b]), shape) == 75  # (50 + 100) / 2


def test_score_prefers_the_emptier_node_through_filter_state() -> None:
    store = store_of(
        pvs=[pv_on("small", "a", "2Gi"), pv_on("big", "b", "20Gi")],
        pvcs=[make_pvc("c").storage_class("local").size("2Gi")],
        classes=[LOCAL],
    )
    pl = plugin(store)
    state = CycleState()
    pod = pod_with("c")
    assert pl.pre_filter(state, pod, []) == SUCCESS
    for n in (NODE_A, NODE_B):
        assert pl.filter(state, pod, node_info(n)) == SUCCESS
    assert pl.pre_score(state, pod, []) == SUCCESS
    assert (pl.score(state, pod, node_info(NODE_A)), pl.score(state, pod, node_info(NODE_B))) == (0, 90)


def test_pre_score_skips_pods_without_volume_work() -> None:
    pl = plugin(store_of())
    state = CycleState()
    assert pl.pre_filter(state, make_pod("p").build(), []) == SKIP
    assert pl.pre_score(state, make_pod("p").build(), []) == SKIP


# -- args -----------------------------------------------------------------------------------------


def test_args_defaults() -> None:
    assert vb.parse_args(None, "a") == vb.VolumeBindingArgs(600, vb.DEFAULT_SHAPE)
    assert vb.parse_args({"bindTimeoutSeconds": 5}, "a").bind_timeout_seconds == 5


@pytest.mark.parametrize(
    ("raw", "path", "message"),
    [
        ({"bindTimeoutSeconds": -1}, "a.bindTimeoutSeconds", "should not be a negative value"),
        ({"shape": []}, "a.shape", "at least one point must be specified"),
        (
            {"shape": [{"utilization": 50, "score": 1}, {"utilization": 10, "score": 2}]},
            "a.shape[1].utilization",
            "sorted in increasing order",
        ),
        ({"shape": [{"utilization": 0, "score": 11}]}, "a.shape[0].score", "not in valid range [0, 10]"),
        ({"bogus": 1}, "a.bogus", "unknown field"),
    ],
)
def test_args_errors(raw: dict[str, Any], path: str, message: str) -> None:
    with pytest.raises(ConfigError) as exc:
        vb.parse_args(raw, "a")
    assert any(e.path == path and message in e.message for e in exc.value.errors), exc.value.errors


# -- Reserve / Unreserve: the assume cache --------------------------------------------------------


def schedule(pl: vb.VolumeBinding, pod: Pod, node: Node) -> tuple[Status, CycleState]:
    state = CycleState()
    st = pl.pre_filter(state, pod, [])
    if st.is_success:
        st = pl.filter(state, pod, node_info(node))
    if st.is_success:
        st = pl.reserve(state, pod, node.name)
    return st, state


def test_a_burst_never_gives_one_pv_to_two_pods() -> None:
    store = store_of(
        pvs=[pv_on("pv1", "a")],
        pvcs=[make_pvc("c1").storage_class("local"), make_pvc("c2").storage_class("local")],
        classes=[LOCAL],
    )
    pl = plugin(store)
    st1, state1 = schedule(pl, pod_with("c1"), NODE_A)
    assert st1 == SUCCESS
    assert store.get_pv("pv1").claim_ref.name == "c1"  # type: ignore[union-attr]
    st2, _ = schedule(pl, pod_with("c2"), NODE_A)
    assert st2 == Status.unresolvable(vb.ERR_REASON_BIND_CONFLICT)
    # Unreserve gives the PV back.
    pl.unreserve(state1, pod_with("c1"), "a")
    assert store.assumed() == ([], [])
    assert schedule(pl, pod_with("c2"), NODE_A)[0] == SUCCESS


def test_reserve_of_a_claim_to_provision_assumes_the_selected_node() -> None:
    store = store_of(pvcs=[make_pvc("c").storage_class("dyn")], classes=[DYNAMIC])
    pl = plugin(store)
    st, _ = schedule(pl, pod_with("c"), NODE_B)
    assert st == SUCCESS
    assert store.get_pvc("default", "c").selected_node == "b"  # type: ignore[union-attr]
    assert store.get_pvc_api("default", "c").selected_node is None  # type: ignore[union-attr]
    # Another pod using the same claim is now tied to node b.
    assert run_filter(store, pod_with("c"), NODE_A)[0] == Status.unresolvable(vb.ERR_REASON_BIND_CONFLICT)


def test_the_informer_replaces_an_assumption_with_the_newer_object() -> None:
    store = store_of(pvs=[pv_on("pv1", "a")], pvcs=[make_pvc("c").storage_class("local")], classes=[LOCAL])
    assert schedule(plugin(store), pod_with("c"), NODE_A)[0] == SUCCESS
    store.put(fv.PV, pv_on("pv1", "a").rv("2").build())  # someone else's update, without our claimRef
    assert store.assumed() == ([], [])
    assert store.get_pv("pv1").claim_ref is None  # type: ignore[union-attr]


def test_reserve_of_fully_bound_claims_does_nothing() -> None:
    store = store_of(
        pvs=[pv_on("pv1", "a").claim_ref("default", "c").phase("Bound")],
        pvcs=[make_pvc("c").storage_class("local").bound_to("pv1")],
        classes=[LOCAL],
    )
    pl = plugin(store, client=FakeClient())
    st, state = schedule(pl, pod_with("c"), NODE_A)
    assert st == SUCCESS
    assert pl.pre_bind(state, pod_with("c"), "a") == SUCCESS
    assert pl.pre_bind_pending(state, pod_with("c"), "a") is None


# -- PreBind --------------------------------------------------------------------------------------


def bound_by_controller(store: fv.VolumeStore, pv_name: str, claim: str, node: str = "a") -> None:
    """What the PV controller does after our update: the PVC bound, bind-completed."""
    pvc = store.get_pvc_api("default", claim)
    assert pvc is not None
    raw = {**pvc.raw, "spec": {**pvc.raw["spec"], "volumeName": pv_name}}
    raw["metadata"] = {
        **raw["metadata"],
        "resourceVersion": str(int(pvc.resource_version) + 1000),
        "annotations": {**raw["metadata"].get("annotations", {}), storage.ANN_BIND_COMPLETED: "yes"},
    }
    store.put(fv.PVC, storage.pvc_from_json(raw))


def pre_bind(store: fv.VolumeStore, pod: Pod, node: Node, client: FakeClient, **args: Any) -> tuple[Any, Any]:
    pl = plugin(store, client=client, **args)
    st, state = schedule(pl, pod, node)
    assert st == SUCCESS
    assert pl.pre_bind(state, pod, node.name) == SUCCESS
    fut = pl.pre_bind_pending(state, pod, node.name)
    assert fut is not None
    return pl, fut


def test_pre_bind_writes_the_pv_then_waits_for_the_pv_controller() -> None:
    client = FakeClient()
    store = store_of(
        pvs=[pv_on("pv1", "a")], pvcs=[make_pvc("c").storage_class("local")], classes=[LOCAL], nodes=[NODE_A]
    )
    _, fut = pre_bind(store, pod_with("c"), NODE_A, client)
    ((path, body),) = client.puts
    assert path == "/api/v1/persistentvolumes/pv1"
    assert body["spec"]["claimRef"]["name"] == "c"
    assert body["metadata"]["annotations"][storage.ANN_BOUND_BY_CONTROLLER] == "yes"
    store.check_waits()
    assert not fut.done()  # the watch has not brought our update back yet
    store.put(fv.PV, storage.pv_from_json(body))
    store.check_waits()
    assert not fut.done()  # the claim is not bound yet
    bound_by_controller(store, "pv1", "c")
    store.check_waits()
    assert fut.result(timeout=0) == SUCCESS
    assert store.pending_waits() == 0


def test_pre_bind_of_a_claim_to_provision_fails_when_the_provisioner_gives_up() -> None:
    client = FakeClient()
    store = store_of(pvcs=[make_pvc("c").storage_class("dyn")], classes=[DYNAMIC], nodes=[NODE_A])
    _, fut = pre_bind(store, pod_with("c"), NODE_A, client)
    ((path, body),) = client.puts
    assert path == "/api/v1/namespaces/default/persistentvolumeclaims/c"
    assert body["metadata"]["annotations"][storage.ANN_SELECTED_NODE] == "a"
    store.put(fv.PVC, storage.pvc_from_json(body))
    store.check_waits()
    assert not fut.done()
    # The provisioner removes the annotation to hand the claim back to the scheduler.
    gave_up = {**body, "metadata": {**body["metadata"], "resourceVersion": "999", "annotations": {}}}
    store.put(fv.PVC, storage.pvc_from_json(gave_up))
    store.check_waits()
    assert fut.result(timeout=0) == Status.as_error('provisioning failed for PVC "c"')


def test_pre_bind_times_out() -> None:
    now = [0.0]
    client = FakeClient()
    store = store_of(
        pvs=[pv_on("pv1", "a")], pvcs=[make_pvc("c").storage_class("local")], classes=[LOCAL], nodes=[NODE_A]
    )
    store._clock = lambda: now[0]
    _, fut = pre_bind(store, pod_with("c"), NODE_A, client, bindTimeoutSeconds=5)
    now[0] = 4.9
    store.check_waits()
    assert not fut.done()
    now[0] = 5.0
    store.check_waits()
    assert fut.result(timeout=0) == Status.as_error("binding volumes: context deadline exceeded")


def test_pre_bind_fails_when_the_claim_ref_is_reset_or_the_pod_is_gone() -> None:
    client = FakeClient()
    store = store_of(
        pvs=[pv_on("pv1", "a")], pvcs=[make_pvc("c").storage_class("local")], classes=[LOCAL], nodes=[NODE_A]
    )
    _, fut = pre_bind(store, pod_with("c"), NODE_A, client)
    reset = client.puts[0][1]
    reset = {**reset, "spec": {k: v for k, v in reset["spec"].items() if k != "claimRef"}}
    store.put(fv.PV, storage.pv_from_json(reset))
    store.check_waits()
    assert fut.result(timeout=0) == Status.as_error('ClaimRef got reset for pv "pv1"')

    store2 = store_of(
        pvs=[pv_on("pv1", "a")], pvcs=[make_pvc("c").storage_class("local")], classes=[LOCAL], nodes=[NODE_A]
    )
    store2.pod_exists = lambda uid: False
    _, fut2 = pre_bind(store2, pod_with("c"), NODE_A, FakeClient())
    store2.check_waits()
    assert fut2.result(timeout=0).message.startswith("pod does not exist any more")


def test_pre_bind_api_error_reverts_the_assumption() -> None:
    store = store_of(pvs=[pv_on("pv1", "a")], pvcs=[make_pvc("c").storage_class("local")], classes=[LOCAL])
    pl = plugin(store, client=FakeClient(fail=RuntimeError("409 Conflict")))
    pod = pod_with("c")
    st, state = schedule(pl, pod, NODE_A)
    assert st == SUCCESS
    assert store.assumed() == (["pv1"], [])
    assert pl.pre_bind(state, pod, "a") == Status.as_error("binding volumes: 409 Conflict")
    assert store.assumed() == ([], [])


def test_waiter_thread_resolves_on_events() -> None:
    """The real waiter thread (no explicit check_waits): an event completes the Future."""
    client = FakeClient()
    store = store_of(
        pvs=[pv_on("pv1", "a")], pvcs=[make_pvc("c").storage_class("local")], classes=[LOCAL], nodes=[NODE_A]
    )
    _, fut = pre_bind(store, pod_with("c"), NODE_A, client)
    try:
        store.put(fv.PV, storage.pv_from_json(client.puts[0][1]))
        bound_by_controller(store, "pv1", "c")
        assert fut.result(timeout=5) == SUCCESS
    finally:
        store.close()
