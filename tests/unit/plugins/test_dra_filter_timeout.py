"""DynamicResourcesArgs and ``filterTimeout``: upstream's defaults, validation messages (checked
against kube-scheduler 1.37.2's own output) and rendering; and a claim set whose allocation search
explodes (GPUs that must share a NUMA node with a NIC whose attribute is in another domain, so
the ``matchAttribute`` constraint fails only at the last request, after every GPU combination):
the allocator stops at its deadline, Filter answers upstream's ERROR within about the timeout and
the nodes after it at once, and ``filterTimeout: 0s`` lets the search run to its answer."""

from __future__ import annotations

import time
from typing import Any

import pytest

from custom_scheduler.api import dra
from custom_scheduler.api.model import Pod, pod_from_json
from custom_scheduler.config import load_config, render_effective
from custom_scheduler.errors import ConfigError
from custom_scheduler.framework import dra_store as fdra
from custom_scheduler.framework.handle import SnapshotHandle
from custom_scheduler.framework.types import Code, CycleState, NodeInfo, Snapshot, Status
from custom_scheduler.plugins import dra_allocator
from custom_scheduler.plugins import dynamic_resources as plugin
from custom_scheduler.plugins.builtin import full_registry
from tests.builders import ClaimBuilder, device_class_obj, make_node, make_pod, resource_slice_obj

GPU, NIC = "gpu.example.com", "nic.example.com"
ARGS_PATH = "profiles[0].pluginConfig[0].args"


# --- args ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("raw", "want"),
    [
        pytest.param(None, (10.0, 600.0), id="defaults"),
        pytest.param({}, (10.0, 600.0), id="empty"),
        pytest.param({"filterTimeout": "0s"}, (0.0, 600.0), id="zero-disables"),
        pytest.param({"filterTimeout": "250ms", "bindingTimeout": "1s"}, (0.25, 1.0), id="set"),
        pytest.param({"filterTimeout": None, "bindingTimeout": "1m30s"}, (10.0, 90.0), id="null-is-default"),
        pytest.param(
            {"kind": "DynamicResourcesArgs", "apiVersion": "kubescheduler.config.k8s.io/v1", "filterTimeout": "1h"},
            (3600.0, 600.0),
            id="type-meta",
        ),
    ],
)
def test_args_defaults(raw: dict[str, Any] | None, want: tuple[float, float]) -> None:
    args = plugin.parse_args(raw, ARGS_PATH)
    assert (args.filter_timeout, args.binding_timeout) == want


@pytest.mark.parametrize(
    ("raw", "errors"),
    [
        pytest.param(
            {"filterTimeout": "-1s", "bindingTimeout": "500ms"},
            [
                f'{ARGS_PATH}.filterTimeout: Invalid value: "-1s": must be zero or positive',
                f'{ARGS_PATH}.bindingTimeout: Invalid value: "500ms": must be at least 1 second',
            ],
            id="both-out-of-range",
        ),
        pytest.param(
            {"bindingTimeout": "0s"},
            [f'{ARGS_PATH}.bindingTimeout: Invalid value: "0s": must be at least 1 second'],
            id="binding-zero",
        ),
        pytest.param(
            {"filterTimeout": 5},
            [
                f"{ARGS_PATH}.filterTimeout: json: cannot unmarshal number into Go struct field "
                "DynamicResourcesArgs.filterTimeout of type string"
            ],
            id="number",
        ),
        pytest.param(
            {"filterTimeout": "abc"}, [f'{ARGS_PATH}.filterTimeout: time: invalid duration "abc"'], id="not-a-duration"
        ),
    ],
)
def test_args_validation_is_upstreams(raw: dict[str, Any], errors: list[str]) -> None:
    with pytest.raises(ConfigError) as info:
        plugin.parse_args(raw, ARGS_PATH)
    assert [str(e) for e in info.value.errors] == errors


def test_args_unknown_field_and_wrong_kind_are_errors() -> None:
    with pytest.raises(ConfigError) as info:
        plugin.parse_args({"kind": "VolumeBindingArgs", "foo": 1}, ARGS_PATH)
    assert {e.path for e in info.value.errors} == {f"{ARGS_PATH}.kind", f"{ARGS_PATH}.foo"}


def test_args_load_render_and_reach_the_plugin() -> None:
    """Through a whole config: defaults rendered as upstream writes them, a set value kept, and
    the plugin built from the profile holds them (bindingTimeout included, for when binding
    conditions land)."""
    header = "apiVersion: kubescheduler.config.k8s.io/v1\nkind: KubeSchedulerConfiguration\n"
    default = load_config(header, full_registry())
    assert default.profiles[0].plugin_args["DynamicResources"] == plugin.DynamicResourcesArgs(10.0, 600.0)
    assert "filterTimeout: 10s\n      bindingTimeout: 10m0s" in render_effective(default)
    body = (
        "profiles:\n- pluginConfig:\n  - {name: DynamicResources, args: {filterTimeout: 150ms, bindingTimeout: 2m}}\n"
    )
    cfg = load_config(header + body, full_registry())
    args = cfg.profiles[0].plugin_args["DynamicResources"]
    assert args == plugin.DynamicResourcesArgs(0.15, 120.0)
    assert load_config(render_effective(cfg), full_registry()) == cfg
    handle = SnapshotHandle(Snapshot(node_infos={}, node_list=[]), profile_name="p")
    pl = plugin.DynamicResources(args, handle)
    assert (pl.args.filter_timeout, pl.args.binding_timeout) == (0.15, 120.0)
    raw: Any = {"filterTimeout": "1s"}  # what a factory called without parse_args would pass
    with pytest.raises(TypeError, match="want DynamicResourcesArgs"):
        plugin.DynamicResources(raw, handle)


# --- the search and its deadline ---------------------------------------------------------------


def exploding(gpus: int, gpu_requests: int, nodes: tuple[str, ...] = ("n1",)) -> fdra.DRAStore:
    """Each node: ``gpus`` GPUs alternating between two NUMA nodes and 4 NICs; claim ``boom``:
    ``gpu_requests`` GPUs and a NIC, all on one ``gpu.example.com/numa``, which no NIC has (its
    attribute is ``nic.example.com/numa``). The search tries every same-NUMA GPU combination
    before the NIC fails it: about gpus x (gpus/2)^(gpu_requests-1) picks."""
    slices = []
    for n in nodes:
        slices.append(resource_slice_obj(n, {f"gpu-{i}": {"numa": i % 2} for i in range(gpus)}))
        slices.append(
            resource_slice_obj(n, {f"nic-{i}": {"numa": i % 2} for i in range(4)}, driver=NIC, pool=f"{n}-nic")
        )
    claim = ClaimBuilder("boom")
    for r in range(gpu_requests):
        claim.request(f"gpu{r}", "gpu")
    claim.request("nic", "nic").match_attribute(f"{GPU}/numa")
    store = fdra.DRAStore()
    store.load(fdra.SLICE, (dra.resource_slice_from_json(x) for x in slices))
    classes = (
        device_class_obj("gpu", f'device.driver == "{GPU}"'),
        device_class_obj("nic", f'device.driver == "{NIC}"'),
    )
    store.load(fdra.CLASS, (dra.device_class_from_json(x) for x in classes))
    store.load(fdra.CLAIM, [dra.resource_claim_from_json(claim.obj())])
    return store


def search(store: fdra.DRAStore, deadline: float | None) -> list[dra.Allocation] | None:
    claim = store.get_claim("default", "boom")
    assert claim is not None
    cands = store.candidates("n1", {})
    cels = dra_allocator.CELCache()
    return dra_allocator.allocate([claim], cands, frozenset(), store.device_class, cels, "n1", deadline=deadline)


def test_search_without_deadline_runs_to_its_answer_and_with_one_stops_there() -> None:
    """24 GPUs, 4 requests: ~0.3 s of search that ends in "does not fit"; a 20 ms deadline stops
    it with AllocationTimeout instead of a (wrong) "does not fit"."""
    store = exploding(24, 4)
    assert search(store, None) is None
    start = time.monotonic()
    with pytest.raises(dra_allocator.AllocationTimeout):
        search(store, start + 0.02)
    assert time.monotonic() - start < 0.02 + 0.25


def boom_pod() -> Pod:
    obj = make_pod("p").uid("uid-p").obj()
    obj["spec"]["resourceClaims"] = [{"name": "c0", "resourceClaimName": "boom"}]
    return pod_from_json(obj)


def plugin_on(
    store: fdra.DRAStore, args: plugin.DynamicResourcesArgs, *nodes: str
) -> tuple[plugin.DynamicResources, list[NodeInfo]]:
    infos = [NodeInfo(make_node(n).build()) for n in nodes]
    snap = Snapshot(node_infos={ni.name: ni for ni in infos}, node_list=infos)
    return plugin.DynamicResources(args, SnapshotHandle(snap, profile_name="p", dra=store)), infos


def test_filter_times_out_with_upstreams_error_and_the_next_node_answers_at_once() -> None:
    """64 GPUs, 5 requests would search for hours; with filterTimeout 100ms Filter returns
    upstream's ERROR for the node within about that, and the second node of the same cycle is
    not searched again (upstream cancels the other filters on an ERROR)."""
    store = exploding(64, 5, nodes=("n1", "n2"))
    pl, infos = plugin_on(store, plugin.DynamicResourcesArgs(filter_timeout=0.1), "n1", "n2")
    pod, state = boom_pod(), CycleState()
    assert pl.pre_filter(state, pod, infos).is_success
    start = time.monotonic()
    st = pl.filter(state, pod, infos[0])
    took = time.monotonic() - start
    assert (st.code, st.message) == (Code.ERROR, "node n1: timed out trying to allocate devices")
    assert 0.1 <= took < 0.1 + 0.4, took
    start = time.monotonic()
    nxt = pl.filter(state, pod, infos[1])
    assert nxt == Status.unresolvable("asked by caller to stop allocating devices: some other Filter operation failed")
    # The framework re-runs every node's filters for their reasons when none fit: n1 again gives
    # the same ERROR, at once.
    assert pl.filter(state, pod, infos[0]) == st
    assert time.monotonic() - start < 0.05
    # A new cycle searches again (and times out again): the flag is per cycle.
    state2 = CycleState()
    pl.pre_filter(state2, pod, infos)
    assert pl.filter(state2, pod, infos[1]).message == "node n2: timed out trying to allocate devices"


def test_filter_timeout_zero_is_no_bound() -> None:
    """The ~0.3 s search of 24 GPUs x 4 requests, under ``filterTimeout: 0s``: Filter waits for
    the search's own answer, "cannot allocate all claims"."""
    store = exploding(24, 4)
    pl, infos = plugin_on(store, plugin.DynamicResourcesArgs(filter_timeout=0.0), "n1")
    pod, state = boom_pod(), CycleState()
    assert pl.pre_filter(state, pod, infos).is_success
    st = pl.filter(state, pod, infos[0])
    assert (st.code, st.message) == (Code.UNSCHEDULABLE_AND_UNRESOLVABLE, plugin.REASON_CANNOT_ALLOCATE)
