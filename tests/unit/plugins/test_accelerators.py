"""AcceleratorIsolation: isolation (hard and soft), GPU product/memory annotations, packing score, args,
and the same for DRA devices (ResourceSlices, DeviceClasses, claims from a DRAStore)."""

from __future__ import annotations

import uuid
from typing import Any

import pytest

from custom_scheduler.api import dra
from custom_scheduler.api.model import Node, Pod, pod_from_json
from custom_scheduler.errors import ConfigError
from custom_scheduler.framework import dra_store as fdra
from custom_scheduler.framework.types import SKIP, SUCCESS, Code, CycleState, Status
from custom_scheduler.plugins import accelerators as acc
from custom_scheduler.plugins import dra_accelerators
from custom_scheduler.plugins.accelerators import AcceleratorIsolationArgs, LabelMatch
from tests.builders import (
    ClaimBuilder,
    NodeBuilder,
    PodBuilder,
    device_class_obj,
    make_node,
    make_pod,
    resource_slice_obj,
)
from tests.unit.plugins.support import fake_handle, node_info, scores

GPU = "nvidia.com/gpu"
RESERVED = Status.unresolvable(acc.ERR_REASON_RESERVED)


def pod(builder: PodBuilder | None = None, **annotations: str) -> Pod:
    """Build with annotations (keys given with ``_`` for ``-`` after the prefix)."""
    o = (builder or make_pod()).obj()
    o["metadata"]["uid"] = str(uuid.uuid4())
    o["metadata"]["annotations"] = dict(annotations)
    return pod_from_json(o)


def gpu_pod(n: str = "1", cpu: str = "1", memory: str = "2Gi", **annotations: str) -> Pod:
    return pod(make_pod().req_named({GPU: n, "cpu": cpu, "memory": memory}), **annotations)


def plain_pod(cpu: str = "1", memory: str = "2Gi", **annotations: str) -> Pod:
    return pod(make_pod().req(cpu=cpu, memory=memory), **annotations)


def gpu_node(name: str = "gpu", gpus: str = "4", **labels: str) -> NodeBuilder:
    b = make_node(name).capacity_named({"cpu": "32", "memory": "128Gi", "pods": "110", GPU: gpus})
    for k, v in labels.items():
        b.label(k, v)
    return b


def cpu_node(name: str = "cpu") -> NodeBuilder:
    return make_node(name).capacity(cpu="16", memory="64Gi", pods="110")


A100 = {"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-40GB", "nvidia.com/gpu.memory": "40960"}
T4 = {"nvidia.com/gpu.product": "Tesla-T4", "nvidia.com/gpu.memory": "15360"}


def a100_node(name: str = "a100") -> NodeBuilder:
    b = gpu_node(name)
    b.labels(**A100)
    return b


def t4_node(name: str = "t4") -> NodeBuilder:
    b = gpu_node(name)
    b.labels(**T4)
    return b


def run_filter(args: AcceleratorIsolationArgs | None, p: Pod, n: Node) -> Status:
    pl = acc.AcceleratorIsolation(args, fake_handle())
    state = CycleState()
    ni = node_info(n)
    pre = pl.pre_filter(state, p, [ni])
    if pre.is_skip:
        return SUCCESS
    if not pre.is_success:
        return pre
    return pl.filter(state, p, ni)


SCORE_MODE = AcceleratorIsolationArgs(mode=acc.MODE_SCORE)
LABELLED = AcceleratorIsolationArgs(node_labels=(LabelMatch("accelerator"), LabelMatch("tpu", "v4")))
AMD = AcceleratorIsolationArgs(resources=("amd.com/gpu",))
PRODUCT = acc.ANNOTATION_PRODUCT
MEMORY = acc.ANNOTATION_MIN_MEMORY


def annotated(**annotations: str) -> dict[str, str]:
    return {PRODUCT if k == "product" else MEMORY: v for k, v in annotations.items()}


@pytest.mark.parametrize(
    ("args", "pod_", "node", "want"),
    [
        pytest.param(None, plain_pod(), gpu_node().build(), RESERVED, id="ordinary-pod-rejected-by-gpu-node"),
        pytest.param(None, plain_pod(), cpu_node().build(), SUCCESS, id="ordinary-pod-on-cpu-node"),
        pytest.param(None, gpu_pod(), gpu_node().build(), SUCCESS, id="gpu-pod-on-gpu-node"),
        pytest.param(None, gpu_pod(), cpu_node().build(), SUCCESS, id="gpu-pod-on-cpu-node-is-fits-business"),
        pytest.param(None, pod(make_pod()), gpu_node().build(), RESERVED, id="pod-requesting-nothing-rejected"),
        pytest.param(None, plain_pod(), gpu_node(gpus="0").build(), SUCCESS, id="zero-gpus-is-not-a-gpu-node"),
        pytest.param(
            None,
            pod(make_pod().req_named({"example.com/foo": "1"})),
            gpu_node().build(),
            RESERVED,
            id="other-extended-resource-is-not-an-accelerator",
        ),
        pytest.param(
            LABELLED, plain_pod(), cpu_node().label("accelerator", "any").build(), RESERVED, id="label-key-marks"
        ),
        pytest.param(LABELLED, plain_pod(), cpu_node().label("tpu", "v4").build(), RESERVED, id="label-value-marks"),
        pytest.param(LABELLED, plain_pod(), cpu_node().label("tpu", "v3").build(), SUCCESS, id="label-value-differs"),
        pytest.param(AMD, plain_pod(), gpu_node().build(), SUCCESS, id="unconfigured-resource-does-not-mark"),
        pytest.param(
            AMD,
            plain_pod(),
            cpu_node().capacity_named({"amd.com/gpu": "2"}).build(),
            RESERVED,
            id="configured-resource-marks",
        ),
        pytest.param(
            AMD,
            gpu_pod(),
            cpu_node().capacity_named({"amd.com/gpu": "2"}).build(),
            RESERVED,
            id="requesting-an-unconfigured-resource-is-ordinary",
        ),
        pytest.param(SCORE_MODE, plain_pod(), gpu_node().build(), SUCCESS, id="score-mode-does-not-filter"),
        # GPU product and memory annotations.
        pytest.param(None, gpu_pod(**annotated(product="A100")), a100_node().build(), SUCCESS, id="product-token"),
        pytest.param(
            None, gpu_pod(**annotated(product="a100-sxm4")), a100_node().build(), SUCCESS, id="product-case-run"
        ),
        pytest.param(
            None,
            gpu_pod(**annotated(product="NVIDIA-A100-SXM4-40GB")),
            a100_node().build(),
            SUCCESS,
            id="product-exact",
        ),
        pytest.param(
            None,
            gpu_pod(**annotated(product="A10")),
            a100_node().build(),
            Status.unresolvable('node(s) didn\'t match the requested GPU product "A10"'),
            id="product-prefix-is-not-a-match",
        ),
        pytest.param(
            None,
            gpu_pod(**annotated(product="A100")),
            t4_node().build(),
            Status.unresolvable('node(s) didn\'t match the requested GPU product "A100"'),
            id="product-mismatch",
        ),
        pytest.param(
            None, gpu_pod(**annotated(product="A100, T4")), t4_node().build(), SUCCESS, id="product-any-of-list"
        ),
        pytest.param(
            None,
            gpu_pod(**annotated(product="A100")),
            gpu_node().build(),
            Status.unresolvable('node(s) didn\'t match the requested GPU product "A100"'),
            id="product-label-missing",
        ),
        pytest.param(None, gpu_pod(**annotated(memory="40000")), a100_node().build(), SUCCESS, id="memory-enough"),
        pytest.param(None, gpu_pod(**annotated(memory="40Gi")), a100_node().build(), SUCCESS, id="memory-quantity"),
        pytest.param(
            None,
            gpu_pod(**annotated(memory="40000")),
            t4_node().build(),
            Status.unresolvable("node(s) had less than 40000 MiB of GPU memory"),
            id="memory-too-little",
        ),
        pytest.param(
            None,
            gpu_pod(**annotated(memory="48G")),
            a100_node().build(),
            Status.unresolvable("node(s) had less than 45777 MiB of GPU memory"),
            id="memory-decimal-quantity-rounds-up",
        ),
        pytest.param(
            None,
            gpu_pod(**annotated(memory="1")),
            gpu_node(**{"nvidia.com/gpu.memory": "lots"}).build(),
            Status.unresolvable("node(s) had less than 1 MiB of GPU memory"),
            id="memory-label-not-a-number",
        ),
        pytest.param(
            None,
            gpu_pod(**annotated(product="A100", memory="80000")),
            t4_node().build(),
            Status.unresolvable(
                'node(s) didn\'t match the requested GPU product "A100"',
                "node(s) had less than 80000 MiB of GPU memory",
            ),
            id="every-hardware-reason",
        ),
        pytest.param(
            None,
            gpu_pod(**annotated(memory="lots")),
            a100_node().build(),
            Status.unresolvable(
                f'invalid annotation {MEMORY}="lots": must be MiB as an integer ("40000") or a quantity ("40Gi")'
            ),
            id="memory-annotation-invalid",
        ),
        pytest.param(
            None,
            gpu_pod(**annotated(product=" , ")),
            a100_node().build(),
            Status.unresolvable(f'invalid annotation {PRODUCT}=" , ": no product named'),
            id="product-annotation-empty",
        ),
        pytest.param(
            SCORE_MODE,
            plain_pod(**annotated(product="A100")),
            cpu_node().build(),
            Status.unresolvable('node(s) didn\'t match the requested GPU product "A100"'),
            id="annotations-apply-to-ordinary-pods-too",
        ),
    ],
)
def test_filter(args: AcceleratorIsolationArgs | None, pod_: Pod, node: Node, want: Status) -> None:
    assert run_filter(args, pod_, node) == want


def test_pre_filter_skips_when_nothing_to_check() -> None:
    pl = acc.AcceleratorIsolation(None, fake_handle())
    assert pl.pre_filter(CycleState(), gpu_pod(), []) == SKIP
    assert pl.pre_filter(CycleState(), plain_pod(), []) == SUCCESS
    soft = acc.AcceleratorIsolation(SCORE_MODE, fake_handle())
    assert soft.pre_filter(CycleState(), plain_pod(), []) == SKIP


def test_filter_without_pre_filter_computes_state() -> None:
    pl = acc.AcceleratorIsolation(None, fake_handle())
    assert pl.filter(CycleState(), plain_pod(), node_info(gpu_node().build())) == RESERVED
    bad = gpu_pod(**annotated(memory="x"))
    assert pl.filter(CycleState(), bad, node_info(a100_node().build())).code is Code.UNSCHEDULABLE_AND_UNRESOLVABLE
    assert pl.filter(CycleState(), plain_pod(), node_info(None)).code is Code.ERROR


# --- score ---------------------------------------------------------------------------------------


def gpus_used(name: str, used: int, gpus: str = "4") -> Any:
    n = gpu_node(name, gpus).build()
    return node_info(n, *(gpu_pod(cpu="0", memory="0") for _ in range(used)))


PACK_ONLY = AcceleratorIsolationArgs(packing_weight=1, balance_weight=0)


@pytest.mark.parametrize(
    ("args", "pod_", "infos", "want"),
    [
        # Most-allocated with the pod placed: (used + 1) / 4.
        pytest.param(
            PACK_ONLY,
            gpu_pod(),
            [gpus_used("empty", 0), gpus_used("one", 1), gpus_used("three", 3)],
            [25, 50, 100],
            id="packing-prefers-partly-used",
        ),
        pytest.param(
            PACK_ONLY,
            gpu_pod(n="2"),
            [gpus_used("four", 0, "4"), gpus_used("eight", 0, "8")],
            [50, 25],
            id="packing-prefers-the-best-fit",
        ),
        pytest.param(
            PACK_ONLY,
            gpu_pod(n="2"),
            [gpus_used("over", 3, "4")],
            [100],
            id="packing-caps-at-capacity",
        ),
        # Balanced cpu/memory only: 32 cpu/128Gi node; pod 8 cpu + 8Gi → 25% vs 6.25%: 100-50*0.1875 = 90.
        pytest.param(
            AcceleratorIsolationArgs(packing_weight=0, balance_weight=1),
            gpu_pod(cpu="8", memory="8Gi"),
            [gpus_used("n", 0)],
            [90],
            id="balance-only",
        ),
        # Default 3:1 blend: (3 * 50 + 1 * 90) // 4 = 60.
        pytest.param(
            None,
            gpu_pod(cpu="8", memory="8Gi"),
            [gpus_used("n", 1)],
            [60],
            id="default-blend",
        ),
        pytest.param(
            SCORE_MODE,
            plain_pod(),
            [node_info(gpu_node().build()), node_info(cpu_node().build())],
            [0, 100],
            id="score-mode-penalises-gpu-nodes-for-ordinary-pods",
        ),
    ],
)
def test_score(args: AcceleratorIsolationArgs | None, pod_: Pod, infos: Any, want: list[int]) -> None:
    assert scores(acc.AcceleratorIsolation(args, fake_handle(infos)), pod_, infos) == want


def test_pre_score_skips_ordinary_pods_in_filter_mode() -> None:
    pl = acc.AcceleratorIsolation(None, fake_handle())
    assert pl.pre_score(CycleState(), plain_pod(), []) == SKIP
    assert pl.pre_score(CycleState(), gpu_pod(), []) == SUCCESS


def test_score_without_pre_score_and_without_node() -> None:
    pl = acc.AcceleratorIsolation(PACK_ONLY, fake_handle())
    assert pl.score(CycleState(), gpu_pod(), gpus_used("n", 1)) == 50
    assert pl.score(CycleState(), gpu_pod(), node_info(None)) == 0


def test_packing_beats_spreading_for_a_second_gpu_pod() -> None:
    """Two identical 4-GPU nodes, one already running a 1-GPU pod: the second goes next to it."""
    infos = [gpus_used("busy", 1), gpus_used("idle", 0)]
    got = scores(acc.AcceleratorIsolation(None, fake_handle(infos)), gpu_pod(), infos)
    assert got[0] > got[1]


# --- helpers -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("wanted", "label", "want"),
    [
        ("A100", "NVIDIA-A100-SXM4-40GB", True),
        ("a100", "NVIDIA-A100-SXM4-40GB", True),
        ("A100-40GB", "NVIDIA-A100-SXM4-40GB", False),
        ("SXM4-40GB", "NVIDIA-A100-SXM4-40GB", True),
        ("A10", "NVIDIA-A100-SXM4-40GB", False),
        ("A10", "NVIDIA-A10", True),
        ("T4", "Tesla-T4", True),
        ("H100 80GB", "NVIDIA-H100-80GB-HBM3", True),
        ("A100", "", False),
        ("", "NVIDIA-A100", False),
    ],
)
def test_product_matches(wanted: str, label: str, want: bool) -> None:
    assert acc.product_matches(wanted, label) is want


def test_is_accelerator_node() -> None:
    assert acc.is_accelerator_node(gpu_node().build(), [GPU])
    assert not acc.is_accelerator_node(cpu_node().build(), [GPU])
    assert acc.is_accelerator_node(cpu_node().label("x", "1").build(), [GPU], [LabelMatch("x")])


# --- args ----------------------------------------------------------------------------------------


def test_args_defaults() -> None:
    assert acc.parse_args(None, "args") == AcceleratorIsolationArgs()
    assert acc.parse_args({}, "args") == AcceleratorIsolationArgs()
    assert AcceleratorIsolationArgs().resources == (GPU,)


def test_args_full() -> None:
    got = acc.parse_args(
        {
            "kind": "AcceleratorIsolationArgs",
            "resources": ["nvidia.com/gpu", "amd.com/gpu"],
            "nodeLabels": ["nvidia.com/gpu.present=true", "accelerator"],
            "mode": "Score",
            "packingWeight": 5,
            "balanceWeight": 0,
            "productLabel": "example.com/product",
            "memoryLabel": "example.com/memory",
        },
        "args",
    )
    assert got == AcceleratorIsolationArgs(
        ("nvidia.com/gpu", "amd.com/gpu"),
        (LabelMatch("nvidia.com/gpu.present", "true"), LabelMatch("accelerator")),
        "Score",
        5,
        0,
        "example.com/product",
        "example.com/memory",
    )
    assert acc.parse_args(got.to_config(), "args") == got


def test_args_errors_all_reported_with_paths() -> None:
    with pytest.raises(ConfigError) as exc:
        acc.parse_args(
            {
                "resources": ["gpu", "nvidia.com/gpu", "nvidia.com/gpu"],
                "nodeLabels": ["bad key=v", "ok=bad value"],
                "mode": "Hard",
                "packingWeight": 0,
                "balanceWeight": 101,
                "extra": 1,
            },
            "p.args",
        )
    paths = {e.path for e in exc.value.errors}
    assert paths == {
        "p.args.resources[0]",
        "p.args.resources[2]",
        "p.args.nodeLabels[0]",
        "p.args.nodeLabels[1]",
        "p.args.mode",
        "p.args.balanceWeight",
        "p.args.extra",
    }
    messages = {str(e) for e in exc.value.errors}
    assert 'p.args.mode: Unsupported value: "Hard": supported values: "Filter", "Score"' in messages
    assert 'p.args.resources[2]: Duplicate value: "nvidia.com/gpu"' in messages


def test_args_weights_not_both_zero_and_resources_not_empty() -> None:
    with pytest.raises(ConfigError) as exc:
        acc.parse_args({"packingWeight": 0, "balanceWeight": 0, "resources": []}, "a")
    assert [str(e) for e in exc.value.errors] == [
        "a.resources: must name at least one accelerator resource",
        "a.packingWeight: packingWeight and balanceWeight must not both be 0",
    ]


def test_parse_min_memory() -> None:
    assert acc.parse_min_memory_mib("40000") == 40000
    assert acc.parse_min_memory_mib("40Gi") == 40960
    assert acc.parse_min_memory_mib(" 1Mi ") == 1
    with pytest.raises(ValueError, match="must not be negative"):
        acc.parse_min_memory_mib("-1Gi")
    with pytest.raises(ValueError, match="invalid quantity"):
        acc.parse_min_memory_mib("forty")


# --- DRA devices (resource.k8s.io/v1) --------------------------------------------------------------

DRV = "gpu.example.com"


def gpu_slice(node: str, n: int = 4, driver: str = DRV) -> dict[str, Any]:
    return resource_slice_obj(node, {f"gpu-{i}": {"index": i} for i in range(n)}, driver=driver)


def dra_store(*claims: ClaimBuilder, pending: tuple[str, ...] = ()) -> fdra.DRAStore:
    """Nodes ``dra1``/``dra2`` with 4 GPUs each, ``nic`` with 2 NICs; an allNodes GPU pool; classes
    ``gpu`` (selects the GPU driver), ``nic``, ``gpu.example.com`` (named after the driver, no
    selector), ``any`` (no selector). ``pending``: devices of ``dra1`` a binding pod holds."""
    s = fdra.DRAStore()
    slices = [gpu_slice("dra1"), gpu_slice("dra2"), gpu_slice("nic", 2, "nic.example.com")]
    slices.append(resource_slice_obj("", {"remote-0": {}}, all_nodes=True, pool="remote"))
    s.load(fdra.SLICE, (dra.resource_slice_from_json(x) for x in slices))
    classes = [
        device_class_obj("gpu", f'device.driver == "{DRV}"'),
        device_class_obj("nic", "device.driver == 'nic.example.com'"),
        device_class_obj(DRV),
        device_class_obj("any"),
    ]
    s.load(fdra.CLASS, (dra.device_class_from_json(x) for x in classes))
    s.load(fdra.CLAIM, (dra.resource_claim_from_json(c.obj()) for c in claims))
    if pending:
        claim = dra.resource_claim_from_json(ClaimBuilder("inflight").request().obj())
        results = tuple(dra.DeviceResult("gpu", DRV, "dra1", d) for d in pending)
        assert s.signal_pending(claim, dra.Allocation(results))
    return s


def claim_pod(*claims: str) -> Pod:
    o = make_pod().req(cpu="1", memory="1Gi").obj()
    o["metadata"]["uid"] = str(uuid.uuid4())
    o["spec"]["resourceClaims"] = [{"name": f"c{i}", "resourceClaimName": c} for i, c in enumerate(claims)]
    return pod_from_json(o)


def dra_plugin(store: fdra.DRAStore, args: AcceleratorIsolationArgs | None = None) -> acc.AcceleratorIsolation:
    return acc.AcceleratorIsolation(args, fake_handle(dra=store))


ONE_GPU = ClaimBuilder("one").request()
TWO_GPUS = ClaimBuilder("two").request(count=2)
ALL_GPUS = ClaimBuilder("all").request(mode="All")
NIC = ClaimBuilder("nicc").request("nic", "nic")
BY_NAME = ClaimBuilder("byname").request("gpu", DRV)
UNSELECTIVE = ClaimBuilder("anyc").request("dev", "any")
ALLOCATED = ClaimBuilder("done").request().allocated("remote", "remote-0").reserved_for("someone")
FALLBACK = ClaimBuilder("fb").first_available("gpu", ("nic", "nic", ()), ("gpu", "gpu", ()))
CLAIMS = (ONE_GPU, TWO_GPUS, ALL_GPUS, NIC, BY_NAME, UNSELECTIVE, ALLOCATED, FALLBACK)


@pytest.mark.parametrize(
    ("args", "claims", "want"),
    [
        pytest.param(None, (), None, id="no-claims"),
        pytest.param(None, ("one",), 1, id="class-selects-the-driver"),
        pytest.param(None, ("two",), 2, id="count"),
        pytest.param(None, ("one", "two"), 3, id="two-claims"),
        pytest.param(None, ("all",), dra_accelerators.DRA_ALL, id="allocation-mode-all"),
        pytest.param(None, ("nicc",), None, id="other-driver"),
        pytest.param(None, ("byname",), 1, id="class-named-after-the-driver"),
        pytest.param(None, ("anyc",), None, id="class-without-driver-selector"),
        pytest.param(AcceleratorIsolationArgs(dra_device_classes=("any",)), ("anyc",), 1, id="listed-class"),
        pytest.param(None, ("done",), 0, id="allocated-an-accelerator"),
        pytest.param(None, ("fb",), 1, id="first-accelerator-alternative"),
        pytest.param(None, ("missing",), None, id="claim-not-in-store"),
        pytest.param(AcceleratorIsolationArgs(dra_drivers=()), ("one",), None, id="dra-ignored"),
        pytest.param(AcceleratorIsolationArgs(dra_drivers=("nic.example.com",)), ("nicc",), 1, id="exact-driver"),
    ],
)
def test_dra_accelerator_pods(args: AcceleratorIsolationArgs | None, claims: tuple[str, ...], want: int | None) -> None:
    pl = dra_plugin(dra_store(*CLAIMS), args)
    assert pl.dra.pod_request(claim_pod(*claims), pl.handle.dra) == want


@pytest.mark.parametrize(
    ("args", "node", "want"),
    [
        pytest.param(None, "dra1", True, id="node-with-gpu-slice"),
        pytest.param(None, "nic", False, id="node-with-other-devices"),
        pytest.param(None, "cpu", False, id="all-nodes-pool-does-not-mark-nodes"),
        pytest.param(AcceleratorIsolationArgs(dra_drivers=()), "dra1", False, id="dra-ignored"),
        pytest.param(AcceleratorIsolationArgs(dra_drivers=("nic.*",)), "nic", True, id="prefix"),
    ],
)
def test_dra_accelerator_nodes(args: AcceleratorIsolationArgs | None, node: str, want: bool) -> None:
    assert dra_plugin(dra_store(), args).is_accelerator_node(cpu_node(node).build()) is want


@pytest.mark.parametrize(
    ("claims", "node", "want"),
    [
        pytest.param((), "dra1", RESERVED, id="ordinary-pod-kept-off-dra-gpu-node"),
        pytest.param((), "nic", SUCCESS, id="ordinary-pod-on-nic-node"),
        pytest.param(("nicc",), "dra1", RESERVED, id="nic-pod-kept-off-dra-gpu-node"),
        pytest.param(("one",), "dra1", SUCCESS, id="gpu-claim-pod-on-dra-gpu-node"),
        pytest.param(("one",), "cpu", SUCCESS, id="gpu-claim-pod-elsewhere-is-dynamic-resources-business"),
    ],
)
def test_dra_filter(claims: tuple[str, ...], node: str, want: Status) -> None:
    pl = dra_plugin(dra_store(*CLAIMS))
    state, p, ni = CycleState(), claim_pod(*claims), node_info(cpu_node(node).build())
    pre = pl.pre_filter(state, p, [ni])
    got = SUCCESS if pre.is_skip else pre if not pre.is_success else pl.filter(state, p, ni)
    assert got == want


def test_dra_filter_in_score_mode_penalises_instead() -> None:
    pl = dra_plugin(dra_store(), SCORE_MODE)
    infos = [node_info(cpu_node("dra1").build()), node_info(cpu_node("cpu").build())]
    assert pl.filter(CycleState(), claim_pod(), infos[0]) == SUCCESS
    assert scores(pl, claim_pod(), infos) == [0, 100]


def used(node: str, *devices: str) -> ClaimBuilder:
    return ClaimBuilder(f"used-{node}-{'-'.join(devices)}").request().allocated(node, *devices).reserved_for("x")


@pytest.mark.parametrize(
    ("claims", "pending", "pod_claims", "want"),
    [
        # (used + requested) / 4 on dra1, dra2; cpu has no devices: no DRA entry, packing 0.
        pytest.param((), (), ("one",), [25, 25, 0], id="both-empty"),
        pytest.param((used("dra1", "gpu-0"),), (), ("one",), [50, 25, 0], id="partly-used-wins"),
        pytest.param((used("dra2", "gpu-0", "gpu-1"),), (), ("one",), [25, 75, 0], id="fuller-wins"),
        pytest.param((), ("gpu-0", "gpu-1"), ("one",), [75, 25, 0], id="pending-allocations-count"),
        pytest.param((used("dra1", "gpu-0"),), (), ("two",), [75, 50, 0], id="count-two"),
        pytest.param((used("dra1", "gpu-0", "gpu-1", "gpu-2"),), (), ("two",), [100, 50, 0], id="capped"),
        pytest.param((), (), ("all",), [100, 100, 0], id="all-fills-any-node"),
    ],
)
def test_dra_packing_score(
    claims: tuple[ClaimBuilder, ...], pending: tuple[str, ...], pod_claims: tuple[str, ...], want: list[int]
) -> None:
    pl = dra_plugin(dra_store(*CLAIMS, *claims, pending=pending), PACK_ONLY)
    infos = [node_info(cpu_node(n).build()) for n in ("dra1", "dra2", "cpu")]
    assert scores(pl, claim_pod(*pod_claims), infos) == want


def test_dra_packing_without_pre_score_and_with_extended_resources() -> None:
    """Score alone reads the store itself; a pod with both a GPU count and a DRA claim averages
    the two: 8-GPU node, none used, 1 requested → 12; DRA 1 of 4 used + 1 → 50; (12 + 50) // 2."""
    pl = dra_plugin(dra_store(*CLAIMS, used("dra1", "gpu-0")), PACK_ONLY)
    assert pl.score(CycleState(), claim_pod("one"), node_info(cpu_node("dra1").build())) == 50
    o = make_pod().req_named({GPU: "1"}).obj()
    o["metadata"]["uid"] = "u"
    o["spec"]["resourceClaims"] = [{"name": "c", "resourceClaimName": "one"}]
    both = pod_from_json(o)
    ni = node_info(gpu_node("dra1", "8").build())
    assert scores(pl, both, [ni]) == [(12 + 50) // 2]


@pytest.mark.parametrize(
    ("expr", "want"),
    [
        (f'device.driver == "{DRV}"', True),
        (f"'{DRV}' == device.driver", True),
        (f'device.driver == "{DRV}" && device.attributes["{DRV}"].model == "a100"', True),
        ('device.driver == "gpu.nvidia.com"', True),
        ('device.driver == "nic.example.com"', False),
        (f'device.attributes["{DRV}"].model == "a100"', False),
    ],
)
def test_dra_device_class_rule(expr: str, want: bool) -> None:
    cls = dra.device_class_from_json(device_class_obj("some-class", expr))
    assert dra_accelerators.DRAAccelerators(acc.DEFAULT_DRA_DRIVERS).device_class(cls) is want


def test_dra_args() -> None:
    assert AcceleratorIsolationArgs().dra_drivers == ("gpu.*",)
    got = acc.parse_args({"draDrivers": ["gpu.nvidia.com", "tpu.*"], "draDeviceClasses": ["accel"]}, "a")
    assert (got.dra_drivers, got.dra_device_classes) == (("gpu.nvidia.com", "tpu.*"), ("accel",))
    assert acc.parse_args(got.to_config(), "a") == got
    assert acc.parse_args({"draDrivers": []}, "a").dra_drivers == ()
    with pytest.raises(ConfigError) as exc:
        acc.parse_args({"draDrivers": ["g*u", "*"], "draDeviceClasses": [""]}, "a")
    assert {e.path for e in exc.value.errors} == {"a.draDrivers[0]", "a.draDrivers[1]", "a.draDeviceClasses[0]"}
