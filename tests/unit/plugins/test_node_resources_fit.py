"""NodeResourcesFit: kube-scheduler's fit tables (v1.28 semantics), the three scoring strategies,
args parsing with field paths, and score-range properties."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from custom_scheduler.api.model import Node, Pod
from custom_scheduler.api.resources import Resources
from custom_scheduler.errors import ConfigError
from custom_scheduler.framework.types import SUCCESS, CycleState, NodeInfo, StateNotFoundError, Status
from custom_scheduler.plugins import node_resources_fit as fit
from custom_scheduler.plugins.helpers import UtilizationShapePoint
from custom_scheduler.plugins.resource_allocation import ResourceSpec
from tests.builders import make_node
from tests.unit.plugins.support import bare, containers, fake_handle, node_info

EXT_A = "example.com/aaa"
EXT_B = "example.com/bbb"
K8S_IO_A = "kubernetes.io/something"
K8S_IO_B = "subdomain.kubernetes.io/something"
HUGEPAGES_A = "hugepages-2Mi"


def res(cpu: int = 0, mem: int = 0, eph: int = 0) -> dict[str, str]:
    """A container's requests in kube-scheduler test units (milli-CPU, bytes); zero means omitted."""
    out: dict[str, str] = {}
    if cpu:
        out["cpu"] = f"{cpu}m"
    if mem:
        out["memory"] = str(mem)
    if eph:
        out["ephemeral-storage"] = str(eph)
    return out


def pod(*reqs: dict[str, str], init: tuple[dict[str, str], ...] = (), overhead: dict[str, str] | None = None) -> Pod:
    b = containers(*reqs)
    for r in init:
        b.init_req(r)
    if overhead:
        b.overhead(**overhead)
    return b.build()


def fit_node(cpu: int = 10, mem: int = 20, pods: int = 32, ext_a: int = 5, eph: int = 20, hugepages: int = 5) -> Node:
    return (
        make_node("node")
        .capacity_named(
            {
                "cpu": f"{cpu}m",
                "memory": str(mem),
                "pods": str(pods),
                EXT_A: str(ext_a),
                "ephemeral-storage": str(eph),
                HUGEPAGES_A: str(hugepages),
            }
        )
        .build()
    )


def insufficient(*resources: str) -> Status:
    return Status.unschedulable(*(f"Insufficient {r}" for r in resources))


def unresolvable(*resources: str) -> Status:
    """The pod asks for more of some resource than the node can allocate at all: evicting pods
    cannot help, so UnschedulableAndUnresolvable (v1.34+ ``InsufficientResource.Unresolvable``)."""
    return Status.unresolvable(*(f"Insufficient {r}" for r in resources))


def ext(name: str, qty: int, cpu: int = 0, mem: int = 0) -> dict[str, str]:
    r = res(cpu, mem)
    r[name] = str(qty)
    return r


FIT_CASES = [
    pytest.param(pod(), [res(10, 20)], None, SUCCESS, id="no-resources-requested-always-fits"),
    pytest.param(pod(res(1, 1)), [res(10, 20)], None, insufficient("cpu", "memory"), id="too-many-resources-fails"),
    pytest.param(
        pod(res(1, 1), init=(res(3, 1),)), [res(8, 19)], None, insufficient("cpu"), id="init-container-cpu-fails"
    ),
    pytest.param(
        pod(res(1, 1), init=(res(3, 1), res(2, 1))),
        [res(8, 19)],
        None,
        insufficient("cpu"),
        id="highest-init-container-cpu-fails",
    ),
    pytest.param(
        pod(res(1, 1), init=(res(1, 3),)), [res(9, 19)], None, insufficient("memory"), id="init-container-memory-fails"
    ),
    pytest.param(
        pod(res(1, 1), init=(res(1, 3), res(1, 2))),
        [res(9, 19)],
        None,
        insufficient("memory"),
        id="highest-init-container-memory-fails",
    ),
    pytest.param(pod(res(1, 1), init=(res(1, 1),)), [res(9, 19)], None, SUCCESS, id="init-container-max-not-sum"),
    pytest.param(
        pod(res(1, 1), init=(res(1, 1), res(1, 1))), [res(9, 19)], None, SUCCESS, id="multiple-init-containers-max"
    ),
    pytest.param(pod(res(1, 1)), [res(5, 5)], None, SUCCESS, id="both-resources-fit"),
    pytest.param(pod(res(2, 1)), [res(9, 5)], None, insufficient("cpu"), id="only-memory-fits"),
    pytest.param(pod(res(1, 2)), [res(5, 19)], None, insufficient("memory"), id="only-cpu-fits"),
    pytest.param(pod(res(5, 1)), [res(5, 19)], None, SUCCESS, id="equal-edge-case"),
    pytest.param(pod(res(4, 1), init=(res(5, 1),)), [res(5, 19)], None, SUCCESS, id="equal-edge-case-init-container"),
    pytest.param(pod(ext(EXT_A, 1)), [{}], None, SUCCESS, id="extended-resource-fits"),
    pytest.param(pod({}, init=(ext(EXT_A, 1),)), [{}], None, SUCCESS, id="extended-resource-fits-init-container"),
    pytest.param(
        pod(ext(EXT_A, 10, 1, 1)), [ext(EXT_A, 0)], None, unresolvable(EXT_A), id="extended-resource-capacity-enforced"
    ),
    pytest.param(
        pod({}, init=(ext(EXT_A, 10, 1, 1),)),
        [ext(EXT_A, 0)],
        None,
        unresolvable(EXT_A),
        id="extended-resource-capacity-enforced-init-container",
    ),
    pytest.param(
        pod(ext(EXT_A, 1, 1, 1)),
        [ext(EXT_A, 5)],
        None,
        insufficient(EXT_A),
        id="extended-resource-allocatable-enforced",
    ),
    pytest.param(
        pod(ext(EXT_A, 3, 1, 1), ext(EXT_A, 3, 1, 1)),
        [ext(EXT_A, 2)],
        None,
        unresolvable(EXT_A),
        id="extended-resource-enforced-for-multiple-containers",
    ),
    pytest.param(
        pod({}, init=(ext(EXT_A, 3, 1, 1), ext(EXT_A, 3, 1, 1))),
        [ext(EXT_A, 2)],
        None,
        SUCCESS,
        id="extended-resource-admits-multiple-init-containers",
    ),
    pytest.param(
        pod({}, init=(ext(EXT_A, 6, 1, 1), ext(EXT_A, 3, 1, 1))),
        [ext(EXT_A, 2)],
        None,
        unresolvable(EXT_A),
        id="extended-resource-enforced-for-multiple-init-containers",
    ),
    pytest.param(pod(ext(EXT_B, 1, 1, 1)), [{}], None, unresolvable(EXT_B), id="unknown-extended-resource-enforced"),
    pytest.param(
        pod({}, init=(ext(EXT_B, 1, 1, 1),)),
        [{}],
        None,
        unresolvable(EXT_B),
        id="unknown-extended-resource-enforced-init-container",
    ),
    pytest.param(
        pod(ext(K8S_IO_A, 10, 1, 1)), [{}], None, unresolvable(K8S_IO_A), id="kubernetes-io-resource-enforced"
    ),
    pytest.param(
        pod({}, init=(ext(K8S_IO_B, 10, 1, 1),)),
        [{}],
        None,
        unresolvable(K8S_IO_B),
        id="kubernetes-io-resource-enforced-init-container",
    ),
    pytest.param(
        pod(ext(HUGEPAGES_A, 10, 1, 1)), [ext(HUGEPAGES_A, 0)], None, unresolvable(HUGEPAGES_A), id="hugepages-enforced"
    ),
    pytest.param(
        pod({}, init=(ext(HUGEPAGES_A, 10, 1, 1),)),
        [ext(HUGEPAGES_A, 0)],
        None,
        unresolvable(HUGEPAGES_A),
        id="hugepages-enforced-init-container",
    ),
    pytest.param(
        pod(ext(HUGEPAGES_A, 3, 1, 1), ext(HUGEPAGES_A, 3, 1, 1)),
        [ext(HUGEPAGES_A, 2)],
        None,
        unresolvable(HUGEPAGES_A),
        id="hugepages-enforced-for-multiple-containers",
    ),
    pytest.param(
        pod(ext(EXT_B, 1, 1, 1)),
        [{}],
        {"ignoredResources": [EXT_B]},
        SUCCESS,
        id="ignored-extended-resource-skipped",
    ),
    pytest.param(
        pod(res(1, 1), overhead={"cpu": "3m", "memory": "13"}),
        [res(5, 5)],
        None,
        SUCCESS,
        id="requests-plus-overhead-fit",
    ),
    pytest.param(
        pod(res(1, 1), overhead={"cpu": "1m", "memory": "15"}),
        [res(5, 5)],
        None,
        insufficient("memory"),
        id="requests-plus-overhead-memory-does-not-fit",
    ),
    pytest.param(
        pod({EXT_B: "1", K8S_IO_A: "1", "cpu": "1m", "memory": "1"}),
        [{}],
        {"ignoredResourceGroups": ["example.com"]},
        unresolvable(K8S_IO_A),
        id="ignored-resource-group-skipped",
    ),
    pytest.param(
        pod({K8S_IO_A: "1", "cpu": "1m", "memory": "1"}),
        [{}],
        {"ignoredResources": [K8S_IO_A], "ignoredResourceGroups": ["kubernetes.io"]},
        unresolvable(K8S_IO_A),
        id="native-prefixed-resources-are-never-ignored",
    ),
    pytest.param(
        pod(res(0, 1)), [res(20, 5)], None, SUCCESS, id="v1.28-over-committed-cpu-ignored-without-cpu-request"
    ),
    pytest.param(pod(res(1, 1)), [res(5, 5), res(5, 5)], None, insufficient("cpu"), id="node-requests-summed"),
    pytest.param(
        pod(res(1, 1, eph=1)), [res(1, 1, eph=20)], None, insufficient("ephemeral-storage"), id="ephemeral-storage"
    ),
    pytest.param(
        pod({EXT_B: "1", "cpu": "100", "memory": "1"}),
        [{}],
        None,
        unresolvable("cpu", EXT_B),
        id="all-reasons-accumulated",
    ),
]


@pytest.mark.parametrize(("p", "existing", "raw_args", "want"), FIT_CASES)
def test_filter(p: Pod, existing: list[dict[str, str]], raw_args: dict[str, Any] | None, want: Status) -> None:
    ni = node_info(fit_node(), *(containers(r).build() for r in existing))
    pl = fit.NodeResourcesFit(fit.parse_args(raw_args, "args"), fake_handle())
    state = CycleState()
    assert pl.pre_filter(state, p, [ni]) == SUCCESS
    assert pl.filter(state, p, ni) == want
    if raw_args is None:
        assert fit.fits(p, ni) == list(want.reasons)


@pytest.mark.parametrize(
    ("p", "existing", "want"),
    [
        # The node (10 cpu, 20 memory) is full: evicting its pods would make room.
        pytest.param(pod(res(2, 2)), [res(9, 19)], insufficient("cpu", "memory"), id="full-node-is-resolvable"),
        # 30 memory is more than the node has at all: evicting cannot help, whatever else fails too.
        pytest.param(pod(res(2, 30)), [res(9, 0)], unresolvable("cpu", "memory"), id="bigger-than-the-node"),
        pytest.param(pod(res(11, 0)), [], unresolvable("cpu"), id="bigger-than-an-empty-node"),
    ],
)
def test_filter_unresolvable_only_when_the_node_is_too_small(
    p: Pod, existing: list[dict[str, str]], want: Status
) -> None:
    """Preemption skips UnschedulableAndUnresolvable nodes, so this decides where it looks (the
    conformance test found preemption's node counts differing from kube-scheduler's)."""
    ni = node_info(fit_node(), *(containers(r).build() for r in existing))
    pl = fit.NodeResourcesFit(None, fake_handle())
    state = CycleState()
    assert pl.pre_filter(state, p, [ni]) == SUCCESS
    got = pl.filter(state, p, ni)
    assert got == want
    assert got.code is want.code


@pytest.mark.parametrize(
    ("p", "existing", "want"),
    [
        pytest.param(pod(), [res(10, 20)], Status.unschedulable("Too many pods"), id="no-space-for-additional-pod"),
        pytest.param(pod(res(1, 1)), [res(5, 5)], Status.unschedulable("Too many pods"), id="both-fit-but-no-pod-slot"),
        pytest.param(pod(res(5, 1)), [res(5, 19)], Status.unschedulable("Too many pods"), id="equal-edge-no-pod-slot"),
        pytest.param(
            pod(res(5, 1), init=(res(5, 1),)),
            [res(5, 19)],
            Status.unschedulable("Too many pods"),
            id="equal-edge-init-container-no-pod-slot",
        ),
        pytest.param(
            pod(res(6, 1)),
            [res(5, 19)],
            Status.unschedulable("Too many pods", "Insufficient cpu"),
            id="pod-count-and-cpu-both-reported",
        ),
    ],
)
def test_filter_pod_count(p: Pod, existing: list[dict[str, str]], want: Status) -> None:
    node = fit_node(pods=1, ext_a=0, eph=0, hugepages=0)
    ni = node_info(node, *(containers(r).build() for r in existing))
    pl = fit.NodeResourcesFit(None, fake_handle())
    state = CycleState()
    pl.pre_filter(state, p, [ni])
    assert pl.filter(state, p, ni) == want


@pytest.mark.parametrize(
    ("p", "existing", "want"),
    [
        pytest.param(pod(res(1, 1)), [res(10, 10)], insufficient("cpu"), id="due-to-container-scratch-disk"),
        pytest.param(pod(res(1, 1)), [res(2, 10)], SUCCESS, id="pod-fits"),
        pytest.param(pod(res(eph=25)), [res(2, 2)], unresolvable("ephemeral-storage"), id="ephemeral-exceeds"),
        pytest.param(pod(res(eph=10)), [res(2, 2)], SUCCESS, id="ephemeral-fits"),
        pytest.param(
            pod(res(eph=10), init=(res(eph=25),)), [res(2, 2)], unresolvable("ephemeral-storage"), id="init-ephemeral"
        ),
    ],
)
def test_filter_storage(p: Pod, existing: list[dict[str, str]], want: Status) -> None:
    ni = node_info(fit_node(), *(containers(r).build() for r in existing))
    pl = fit.NodeResourcesFit(None, fake_handle())
    state = CycleState()
    pl.pre_filter(state, p, [ni])
    assert pl.filter(state, p, ni) == want


def test_filter_without_pre_filter_raises() -> None:
    pl = fit.NodeResourcesFit(None, fake_handle())
    with pytest.raises(StateNotFoundError, match="PreFilterNodeResourcesFit"):
        pl.filter(CycleState(), pod(), node_info(fit_node()))


def test_sidecar_requests_are_counted() -> None:
    """v1.28 sidecars: restartable init containers run alongside the regular containers."""
    b = containers(res(5, 1))
    b.init_req(res(3, 1), sidecar=True)
    p = b.build()
    ni = node_info(fit_node())
    pl = fit.NodeResourcesFit(None, fake_handle())
    state = CycleState()
    pl.pre_filter(state, p, [ni])
    assert pl.filter(state, p, ni) == SUCCESS  # 5m + 3m = 8m ≤ 10m
    ni.add_pod(containers(res(3, 1)).build())
    assert pl.filter(state, p, ni) == insufficient("cpu")


# --- scoring ---------------------------------------------------------------------------------------

NO_RESOURCES: tuple[dict[str, str], ...] = ()
CPU_ONLY = (res(1000, 0) | {"memory": "0"}, res(2000, 0) | {"memory": "0"})
CPU_AND_MEMORY = (res(1000, 2000), res(2000, 3000))
BIG_CPU_AND_MEMORY = (res(2000, 4000), res(3000, 5000))


def score_node(cpu: int, mem: int, scalar: dict[str, int] | None = None) -> Node:
    """A node with ``cpu`` milli-CPU, ``mem`` bytes and the given extended resources."""
    cap = {"cpu": f"{cpu}m", "memory": str(mem), "pods": "110"}
    cap.update({k: str(v) for k, v in (scalar or {}).items()})
    return make_node(f"n-{cpu}-{mem}").capacity_named(cap).build()


def strategy_args(
    stype: str, resources: list[dict[str, Any]] | None = None, shape: Any = None
) -> fit.NodeResourcesFitArgs:
    raw: dict[str, Any] = {"type": stype}
    if resources is not None:
        raw["resources"] = resources
    if shape is not None:
        raw["requestedToCapacityRatio"] = {"shape": [{"utilization": u, "score": s} for u, s in shape]}
    return fit.parse_args({"scoringStrategy": raw}, "args")


def run_scores(
    args: fit.NodeResourcesFitArgs | None,
    p: tuple[dict[str, str], ...],
    nodes: list[tuple[Node, list[tuple[dict[str, str], ...]]]],
) -> list[int]:
    infos = [node_info(n, *(containers(*c).build() for c in existing)) for n, existing in nodes]
    pl = fit.NodeResourcesFit(args, fake_handle(infos))
    state = CycleState()
    the_pod = containers(*p).build()
    assert pl.pre_score(state, the_pod, infos) == SUCCESS
    return [pl.score(state, the_pod, ni) for ni in infos]


LEAST = [
    pytest.param(
        None,
        NO_RESOURCES,
        [(score_node(4000, 10000), []), (score_node(4000, 10000), [])],
        [100, 100],
        id="nothing-scheduled-nothing-requested",
    ),
    # cpu (4000−3000)·100/4000 = 25, memory (10000−5000)·100/10000 = 50 → 37; 6000 cpu → 50.
    pytest.param(
        None,
        CPU_AND_MEMORY,
        [(score_node(4000, 10000), []), (score_node(6000, 10000), [])],
        [37, 50],
        id="resources-requested-differently-sized-machines",
    ),
    pytest.param(
        None,
        NO_RESOURCES,
        [(score_node(4000, 10000), [NO_RESOURCES, NO_RESOURCES]), (score_node(4000, 10000), [NO_RESOURCES])],
        [100, 100],
        id="no-resources-requested-pods-scheduled",
    ),
    # cpu 6000/10000 → 40, memory 0 (explicit 0, no default) → 100 → 70; memory 5000/20000 → 75 → 57.
    pytest.param(
        None,
        NO_RESOURCES,
        [(score_node(10000, 20000), [CPU_ONLY, CPU_ONLY]), (score_node(10000, 20000), [CPU_ONLY, CPU_AND_MEMORY])],
        [70, 57],
        id="no-resources-requested-pods-scheduled-with-resources",
    ),
    pytest.param(
        None,
        CPU_AND_MEMORY,
        [(score_node(10000, 20000), [CPU_ONLY]), (score_node(10000, 20000), [CPU_AND_MEMORY])],
        [57, 45],
        id="resources-requested-pods-scheduled-with-resources",
    ),
    pytest.param(
        None,
        CPU_AND_MEMORY,
        [(score_node(10000, 20000), [CPU_ONLY]), (score_node(10000, 50000), [CPU_AND_MEMORY])],
        [57, 60],
        id="differently-sized-machines-with-pods",
    ),
    pytest.param(
        None,
        CPU_ONLY,
        [(score_node(4000, 10000), [CPU_ONLY]), (score_node(4000, 10000), [CPU_AND_MEMORY])],
        [50, 25],
        id="requested-exceeds-capacity-scores-zero",
    ),
    pytest.param(
        None,
        NO_RESOURCES,
        [(score_node(0, 0), [CPU_ONLY]), (score_node(0, 0), [CPU_AND_MEMORY])],
        [0, 0],
        id="zero-node-resources",
    ),
    # (25·1 + 50·2)/3 = 41.
    pytest.param(
        strategy_args("LeastAllocated", [{"name": "memory", "weight": 2}, {"name": "cpu", "weight": 1}]),
        CPU_AND_MEMORY,
        [(score_node(4000, 10000), []), (score_node(6000, 10000), [])],
        [41, 50],
        id="different-weights",
    ),
    # A pod without requests counts as 100m/200Mi: cpu (4000−1100)·100/4000 = 72, memory likewise 72.
    pytest.param(
        None,
        ({},),
        [(score_node(4000, 8192 * 1024 * 1024), [({"cpu": "1", "memory": "2Gi"},)])],
        [72],
        id="non-zero-defaults-worked-example",
    ),
    # An extended resource the pod does not request is left out of the weighted mean.
    pytest.param(
        strategy_args("LeastAllocated", [{"name": "cpu"}, {"name": "memory"}, {"name": "nvidia.com/gpu", "weight": 5}]),
        CPU_AND_MEMORY,
        [(score_node(4000, 10000, {"nvidia.com/gpu": 4}), [])],
        [37],
        id="unrequested-extended-resource-excluded",
    ),
    # Requested: gpu (4−1)·100/4 = 75 with weight 2 → (25 + 50 + 150)/4 = 56.
    pytest.param(
        strategy_args("LeastAllocated", [{"name": "cpu"}, {"name": "memory"}, {"name": "nvidia.com/gpu", "weight": 2}]),
        (res(1000, 2000) | {"nvidia.com/gpu": "1"}, res(2000, 3000)),
        [(score_node(4000, 10000, {"nvidia.com/gpu": 4}), [])],
        [56],
        id="requested-extended-resource-scored",
    ),
    # A resource the node lacks (allocatable 0) is left out too.
    pytest.param(
        strategy_args("LeastAllocated", [{"name": "cpu"}, {"name": "memory"}, {"name": "nvidia.com/gpu"}]),
        (res(1000, 2000) | {"nvidia.com/gpu": "1"}, res(2000, 3000)),
        [(score_node(4000, 10000), [])],
        [37],
        id="resource-missing-on-node-excluded",
    ),
]


@pytest.mark.parametrize(("args", "p", "nodes", "want"), LEAST)
def test_least_allocated(args: Any, p: Any, nodes: Any, want: list[int]) -> None:
    assert run_scores(args, p, nodes) == want


MOST = [
    pytest.param(
        NO_RESOURCES,
        [(score_node(4000, 10000), []), (score_node(4000, 10000), [])],
        [0, 0],
        None,
        id="nothing-scheduled-nothing-requested",
    ),
    pytest.param(
        CPU_AND_MEMORY,
        [(score_node(4000, 10000), []), (score_node(6000, 10000), [])],
        [62, 50],
        None,
        id="resources-requested-differently-sized-machines",
    ),
    pytest.param(
        NO_RESOURCES,
        [(score_node(10000, 20000), [CPU_ONLY, CPU_ONLY]), (score_node(10000, 20000), [CPU_ONLY, CPU_AND_MEMORY])],
        [30, 42],
        None,
        id="no-resources-requested-pods-scheduled-with-resources",
    ),
    pytest.param(
        CPU_AND_MEMORY,
        [(score_node(10000, 20000), [CPU_ONLY]), (score_node(10000, 20000), [CPU_AND_MEMORY])],
        [42, 55],
        None,
        id="resources-requested-pods-scheduled-with-resources",
    ),
    # v1.22+: a request above capacity is capped at capacity (100), not scored 0: (100 + 90)/2, (50 + 100)/2.
    pytest.param(
        BIG_CPU_AND_MEMORY,
        [(score_node(4000, 10000), []), (score_node(10000, 8000), [])],
        [95, 75],
        None,
        id="requested-more-than-node-capped",
    ),
    pytest.param(
        CPU_AND_MEMORY,
        [(score_node(4000, 10000), []), (score_node(6000, 10000), [])],
        [58, 50],
        [{"name": "memory", "weight": 2}, {"name": "cpu", "weight": 1}],
        id="different-weights",
    ),
]


@pytest.mark.parametrize(("p", "nodes", "want", "resources"), MOST)
def test_most_allocated(p: Any, nodes: Any, want: list[int], resources: Any) -> None:
    assert run_scores(strategy_args("MostAllocated", resources), p, nodes) == want


LEAST_SHAPE = [(0, 10), (100, 0)]
BIN_PACK_SHAPE = [(0, 0), (100, 1)]
FOO = "intel.com/foo"
BAR = "intel.com/bar"
FOO_POD_2 = ({FOO: "2"},)
FOO_POD_4 = ({FOO: "4"},)
FOO_BAR_2_2 = ({FOO: "2", BAR: "2"},)
FOO_BAR_4_2 = ({FOO: "4", BAR: "2"},)

RTCR = [
    pytest.param(
        LEAST_SHAPE,
        None,
        (res(0, 0) | {"cpu": "0", "memory": "0"},),
        [(score_node(4000, 10000), []), (score_node(4000, 10000), [])],
        [100, 100],
        id="least-shape-nothing-requested",
    ),
    # cpu u=75 → 25, memory u=50 → 50, round(37.5) = 38 (half away from zero).
    pytest.param(
        LEAST_SHAPE,
        None,
        (res(3000, 5000),),
        [(score_node(4000, 10000), []), (score_node(6000, 10000), [])],
        [38, 50],
        id="least-shape-differently-sized-machines",
    ),
    pytest.param(
        LEAST_SHAPE,
        None,
        (res(0, 0) | {"cpu": "0", "memory": "0"},),
        [(score_node(4000, 10000), [(res(3000, 5000),)]), (score_node(6000, 10000), [(res(3000, 5000),)])],
        [38, 50],
        id="least-shape-pods-scheduled-with-resources",
    ),
    pytest.param(
        BIN_PACK_SHAPE,
        [{"name": FOO}],
        NO_RESOURCES,
        [(score_node(4000, 10000, {"intel.com/foo": 8}), []), (score_node(4000, 10000, {"intel.com/foo": 4}), [])],
        [0, 0],
        id="single-extended-nothing-requested",
    ),
    # foo u=2/8=25 → 2 (2.5 truncated); u=2/4=50 → 5.
    pytest.param(
        BIN_PACK_SHAPE,
        [{"name": FOO}],
        FOO_POD_2,
        [(score_node(4000, 10000, {"intel.com/foo": 8}), []), (score_node(4000, 10000, {"intel.com/foo": 4}), [])],
        [2, 5],
        id="single-extended-requested",
    ),
    pytest.param(
        BIN_PACK_SHAPE,
        [{"name": FOO}],
        FOO_POD_2,
        [
            (score_node(4000, 10000, {"intel.com/foo": 8}), []),
            (score_node(4000, 10000, {"intel.com/foo": 4}), [FOO_POD_2]),
        ],
        [2, 10],
        id="single-extended-existing-pod",
    ),
    pytest.param(
        BIN_PACK_SHAPE,
        [{"name": FOO}],
        FOO_POD_4,
        [
            (score_node(4000, 10000, {"intel.com/foo": 8}), []),
            (score_node(4000, 10000, {"intel.com/foo": 4}), [FOO_POD_2]),
        ],
        [5, 10],
        id="single-extended-over-capacity-is-full",
    ),
    pytest.param(
        BIN_PACK_SHAPE,
        [{"name": FOO, "weight": 3}, {"name": BAR, "weight": 5}],
        NO_RESOURCES,
        [
            (score_node(4000, 10000, {"intel.com/foo": 8, "intel.com/bar": 4}), []),
            (score_node(4000, 10000, {"intel.com/foo": 4, "intel.com/bar": 8}), []),
        ],
        [0, 0],
        id="multiple-extended-nothing-requested",
    ),
    # (2·3 + 5·5)/8 = 3.875 → 4; (5·3 + 2·5)/8 = 3.125 → 3.
    pytest.param(
        BIN_PACK_SHAPE,
        [{"name": FOO, "weight": 3}, {"name": BAR, "weight": 5}],
        FOO_BAR_2_2,
        [
            (score_node(4000, 10000, {"intel.com/foo": 8, "intel.com/bar": 4}), []),
            (score_node(4000, 10000, {"intel.com/foo": 4, "intel.com/bar": 8}), []),
        ],
        [4, 3],
        id="multiple-extended-requested",
    ),
    pytest.param(
        BIN_PACK_SHAPE,
        [{"name": FOO, "weight": 3}, {"name": BAR, "weight": 5}],
        FOO_BAR_2_2,
        [
            (score_node(4000, 10000, {"intel.com/foo": 8, "intel.com/bar": 4}), []),
            (score_node(4000, 10000, {"intel.com/foo": 4, "intel.com/bar": 8}), [FOO_BAR_2_2]),
        ],
        [4, 7],
        id="multiple-extended-existing-pod",
    ),
    pytest.param(
        BIN_PACK_SHAPE,
        [{"name": FOO, "weight": 3}, {"name": BAR, "weight": 5}],
        FOO_BAR_4_2,
        [
            (score_node(4000, 10000, {"intel.com/foo": 8, "intel.com/bar": 4}), []),
            (score_node(4000, 10000, {"intel.com/foo": 4, "intel.com/bar": 8}), []),
        ],
        [5, 5],
        id="multiple-extended-more-resources",
    ),
    # Decreasing segment, negative slope: u=50 on {0→10, 40→10, 100→0} gives 100 + (−100·10)/60 = 84 (Go truncates).
    pytest.param(
        [(0, 10), (40, 10), (100, 0)],
        [{"name": "cpu"}],
        (res(2000, 0),),
        [(score_node(4000, 10000), [])],
        [84],
        id="negative-slope-truncates-toward-zero",
    ),
    # Only resources scoring above 0 count: cpu u=100 → 0 is dropped, memory u=0 → 100 alone.
    pytest.param(
        LEAST_SHAPE,
        None,
        (res(4000, 0) | {"memory": "0"},),
        [(score_node(4000, 10000), [])],
        [100],
        id="zero-scoring-resources-excluded-quirk",
    ),
]


@pytest.mark.parametrize(("shape", "resources", "p", "nodes", "want"), RTCR)
def test_requested_to_capacity_ratio(shape: Any, resources: Any, p: Any, nodes: Any, want: list[int]) -> None:
    assert run_scores(strategy_args("RequestedToCapacityRatio", resources, shape), p, nodes) == want


def test_score_without_pre_score_computes_requests() -> None:
    node = score_node(4000, 10000)
    ni = node_info(node)
    pl = fit.NodeResourcesFit(None, fake_handle([ni]))
    assert pl.score(CycleState(), containers(*CPU_AND_MEMORY).build(), ni) == 37


@pytest.mark.parametrize(
    ("requests", "pod_level", "want"),
    [
        # Containers 3000m/5000 of 4000m/10000: (25 + 50) / 2; the pod-level 1000m/1000 would give 82.
        pytest.param(CPU_AND_MEMORY, res(1000, 1000), 37, id="pod-level ignored: the containers count"),
        # 1000m + 100m: 72; 2000 + 200Mi of memory: 0; the pod-level 3000m/5000 would give 37.
        pytest.param((res(1000, 2000), {}), res(3000, 5000), 36, id="a container without requests counts 100m/200Mi"),
        pytest.param(CPU_AND_MEMORY, None, 37, id="no pod-level resources"),
    ],
)
def test_score_ignores_pod_level_resources_as_upstream(
    requests: tuple[dict[str, str], ...], pod_level: dict[str, str] | None, want: int
) -> None:
    """kube-scheduler 1.37.2 builds Fit's scorer without pod-level resources (its Filter and
    BalancedAllocation use them): the score counts the containers, with 100m/200Mi for a container
    that requests nothing. Using ``spec.resources`` here differed by up to 50 points per node."""
    b = containers(*requests)
    if pod_level is not None:
        b.spec["resources"] = {"requests": pod_level}
    pod = b.build()
    ni = node_info(score_node(4000, 10000))
    pl = fit.NodeResourcesFit(None, fake_handle([ni]))
    state = CycleState()
    pl.pre_score(state, pod, [ni])
    assert pl.score(state, pod, ni) == want
    if pod_level is not None:  # the Filter still counts the pod-level requests
        assert (pod.requests.milli_cpu, pod.requests.memory) == (int(pod_level["cpu"][:-1]), int(pod_level["memory"]))


# --- args ------------------------------------------------------------------------------------------


def test_parse_args_defaults() -> None:
    want = fit.NodeResourcesFitArgs(
        (), (), fit.ScoringStrategy("LeastAllocated", (ResourceSpec("cpu", 1), ResourceSpec("memory", 1)), None)
    )
    assert fit.parse_args(None, "args") == want
    assert fit.parse_args({}, "args") == want
    assert fit.parse_args({"apiVersion": "kubescheduler.config.k8s.io/v1", "kind": "NodeResourcesFitArgs"}, "a") == want


def test_parse_args_full() -> None:
    got = fit.parse_args(
        {
            "ignoredResources": ["example.com/foo"],
            "ignoredResourceGroups": ["example.org"],
            "scoringStrategy": {
                "type": "RequestedToCapacityRatio",
                "resources": [{"name": "cpu", "weight": 0}, {"name": "nvidia.com/gpu", "weight": 100}],
                "requestedToCapacityRatio": {
                    "shape": [{"utilization": 0, "score": 0}, {"utilization": 100, "score": 10}]
                },
            },
        },
        "args",
    )
    assert got == fit.NodeResourcesFitArgs(
        ("example.com/foo",),
        ("example.org",),
        fit.ScoringStrategy(
            "RequestedToCapacityRatio",
            (ResourceSpec("cpu", 1), ResourceSpec("nvidia.com/gpu", 100)),
            fit.RequestedToCapacityRatioParam((UtilizationShapePoint(0, 0), UtilizationShapePoint(100, 10))),
        ),
    )


def test_parse_args_empty_resources_default() -> None:
    got = fit.parse_args({"scoringStrategy": {"type": "MostAllocated", "resources": []}}, "args")
    assert got.scoring_strategy.resources == (ResourceSpec("cpu", 1), ResourceSpec("memory", 1))


P = "profiles[0].pluginConfig[0].args"
STRATEGY_TYPES = '"LeastAllocated", "MostAllocated", "RequestedToCapacityRatio"'
QUALIFIED_NAME_MSG = (
    "must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character"
)


@pytest.mark.parametrize(
    ("raw", "want"),
    [
        pytest.param(
            {
                "scoringStrategy": {
                    "type": "LeastAllocated",
                    "resources": [{"name": "cpu", "weight": 1}, {"name": "memory", "weight": -1}],
                }
            },
            [(f"{P}.scoringStrategy.resources[1].weight", "resource weight of memory not in valid range (0, 100]")],
            id="negative-weight",
        ),
        pytest.param(
            {"scoringStrategy": {"type": "MostAllocated", "resources": [{"name": "memory", "weight": 120}]}},
            [(f"{P}.scoringStrategy.resources[0].weight", "resource weight of memory not in valid range (0, 100]")],
            id="weight-above-100",
        ),
        pytest.param(
            {"scoringStrategy": {"type": "Invalid"}},
            [
                (
                    f"{P}.scoringStrategy.type",
                    f'Unsupported value: "Invalid": supported values: {STRATEGY_TYPES}',
                )
            ],
            id="unsupported-type",
        ),
        pytest.param(
            {"scoringStrategy": {"resources": [{"name": "cpu"}]}},
            [
                (
                    f"{P}.scoringStrategy.type",
                    f'Unsupported value: "": supported values: {STRATEGY_TYPES}',
                )
            ],
            id="type-required-when-strategy-given",
        ),
        pytest.param(
            {"scoringStrategy": {"type": "RequestedToCapacityRatio"}},
            [
                (
                    f"{P}.scoringStrategy.requestedToCapacityRatio",
                    "must be specified when type is RequestedToCapacityRatio",
                )
            ],
            id="rtcr-params-required",
        ),
        pytest.param(
            {
                "scoringStrategy": {
                    "type": "LeastAllocated",
                    "requestedToCapacityRatio": {"shape": [{"utilization": 0, "score": 0}]},
                }
            },
            [
                (
                    f"{P}.scoringStrategy.requestedToCapacityRatio",
                    "must be nil when type is not RequestedToCapacityRatio",
                )
            ],
            id="rtcr-params-forbidden-for-other-types",
        ),
        pytest.param(
            {"scoringStrategy": {"type": "RequestedToCapacityRatio", "requestedToCapacityRatio": {"shape": []}}},
            [(f"{P}.scoringStrategy.requestedToCapacityRatio.shape", "at least one point must be specified")],
            id="shape-needs-a-point",
        ),
        pytest.param(
            {
                "scoringStrategy": {
                    "type": "RequestedToCapacityRatio",
                    "requestedToCapacityRatio": {
                        "shape": [
                            {"utilization": 50, "score": 1},
                            {"utilization": 50, "score": 2},
                            {"utilization": 10, "score": 3},
                        ]
                    },
                }
            },
            [
                (
                    f"{P}.scoringStrategy.requestedToCapacityRatio.shape[1].utilization",
                    "values must be sorted in increasing order",
                )
            ],
            id="shape-not-strictly-increasing",
        ),
        pytest.param(
            {
                "scoringStrategy": {
                    "type": "RequestedToCapacityRatio",
                    "requestedToCapacityRatio": {
                        "shape": [{"utilization": -10, "score": 11}, {"utilization": 110, "score": -1}]
                    },
                }
            },
            [
                (f"{P}.scoringStrategy.requestedToCapacityRatio.shape[0].utilization", "not in valid range [0, 100]"),
                (f"{P}.scoringStrategy.requestedToCapacityRatio.shape[0].score", "not in valid range [0, 10]"),
                (f"{P}.scoringStrategy.requestedToCapacityRatio.shape[1].utilization", "not in valid range [0, 100]"),
                (f"{P}.scoringStrategy.requestedToCapacityRatio.shape[1].score", "not in valid range [0, 10]"),
            ],
            id="shape-out-of-range",
        ),
        pytest.param(
            {"ignoredResources": ["example.com/" + "a" * 64]},
            [(f"{P}.ignoredResources[0]", "name part must be no more than 63 characters")],
            id="ignored-resource-too-long",
        ),
        pytest.param(
            {"ignoredResources": ["example.com/"]},
            [
                (f"{P}.ignoredResources[0]", "name part must be non-empty"),
                (f"{P}.ignoredResources[0]", f"name part {QUALIFIED_NAME_MSG}"),
            ],
            id="ignored-resource-empty-name",
        ),
        pytest.param(
            {"ignoredResourceGroups": ["example.com/aa"]},
            [(f"{P}.ignoredResourceGroups[0]", "resource group name can't contain '/'")],
            id="ignored-group-with-slash",
        ),
        pytest.param(
            {"ignoredResourceGroups": ["a" * 64]},
            [(f"{P}.ignoredResourceGroups[0]", "name part must be no more than 63 characters")],
            id="ignored-group-too-long",
        ),
        pytest.param(
            {"scoringStrategy": {"type": "LeastAllocated", "resources": [{"name": "cpu", "weight": "heavy"}]}},
            [(f"{P}.scoringStrategy.resources[0].weight", "must be an integer, got str")],
            id="weight-not-an-integer",
        ),
        pytest.param(
            {"scoringStrategy": {"type": "LeastAllocated", "resource": []}},
            [
                (
                    f"{P}.scoringStrategy.resource",
                    "unknown field (known fields: type, resources, requestedToCapacityRatio)",
                )
            ],
            id="unknown-field",
        ),
        pytest.param(
            {"kind": "NodeAffinityArgs"},
            [(f"{P}.kind", "must be 'NodeResourcesFitArgs', got 'NodeAffinityArgs'")],
            id="wrong-kind",
        ),
        pytest.param(
            {
                "ignoredResourceGroups": ["example.com/aa"],
                "scoringStrategy": {"type": "X", "resources": [{"name": "cpu", "weight": 101}]},
            },
            [
                (f"{P}.ignoredResourceGroups[0]", "resource group name can't contain '/'"),
                (
                    f"{P}.scoringStrategy.type",
                    f'Unsupported value: "X": supported values: {STRATEGY_TYPES}',
                ),
                (f"{P}.scoringStrategy.resources[0].weight", "resource weight of cpu not in valid range (0, 100]"),
            ],
            id="all-errors-reported-at-once",
        ),
    ],
)
def test_parse_args_errors(raw: dict[str, Any], want: list[tuple[str, str]]) -> None:
    with pytest.raises(ConfigError) as exc:
        fit.parse_args(raw, P)
    assert [(e.path, e.message) for e in exc.value.errors] == want


def test_parse_args_too_many_slashes() -> None:
    with pytest.raises(ConfigError, match="a qualified name must consist of alphanumeric characters"):
        fit.parse_args({"ignoredResources": ["example.com/aaa/bbb"]}, "args")


# --- properties ------------------------------------------------------------------------------------

quantities = st.integers(min_value=0, max_value=10**12)
shapes = st.lists(
    st.tuples(st.integers(min_value=0, max_value=100), st.integers(min_value=0, max_value=10)),
    min_size=1,
    max_size=5,
    unique_by=lambda p: p[0],
).map(sorted)


@st.composite
def strategies(draw: st.DrawFn) -> fit.NodeResourcesFitArgs:
    stype = draw(st.sampled_from(fit.SCORING_STRATEGY_TYPES))
    names = draw(
        st.lists(
            st.sampled_from(["cpu", "memory", "ephemeral-storage", "example.com/gpu"]),
            min_size=1,
            max_size=4,
            unique=True,
        )
    )
    resources = [{"name": n, "weight": draw(st.integers(min_value=1, max_value=100))} for n in names]
    shape = draw(shapes) if stype == fit.REQUESTED_TO_CAPACITY_RATIO else None
    return strategy_args(stype, resources, shape)


@settings(max_examples=300, deadline=None)
@given(
    args=strategies(),
    alloc=st.tuples(quantities, quantities, quantities, quantities),
    used=st.tuples(quantities, quantities, quantities, quantities),
    req=st.tuples(quantities, quantities, quantities, quantities),
)
def test_scores_stay_in_range(
    args: fit.NodeResourcesFitArgs, alloc: tuple[int, ...], used: tuple[int, ...], req: tuple[int, ...]
) -> None:
    def resources(v: tuple[int, ...]) -> Resources:
        return Resources(v[0], v[1], v[2], 110, {"example.com/gpu": v[3]} if v[3] else {})

    node = make_node("n").build()
    node.allocatable = resources(alloc)
    ni = NodeInfo(node)
    ni.requested = resources(used)
    ni.non_zero_milli_cpu, ni.non_zero_memory = used[0], used[1]
    p = bare().build()
    p.requests = resources(req)
    p.non_zero_milli_cpu, p.non_zero_memory = req[0], req[1]
    pl = fit.NodeResourcesFit(args, fake_handle([ni]))
    state = CycleState()
    pl.pre_score(state, p, [ni])
    assert 0 <= pl.score(state, p, ni) <= 100
