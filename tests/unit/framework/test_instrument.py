"""What the framework records for metrics (framework/instrument.py), on the default profile over
a real cache snapshot: every cycle's extension points with upstream's status labels, plugin
durations only in a sampled cycle (batch calls once per plugin, per-node Filter calls summed per
plugin and status), and plugin evaluations as upstream's instrumented plugins count them."""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Iterable

import pytest

from custom_scheduler.api.model import Pod
from custom_scheduler.config import load_config
from custom_scheduler.core.algorithm import Algorithm
from custom_scheduler.core.cache import Cache
from custom_scheduler.framework import instrument as ins
from custom_scheduler.framework import masked_filter
from custom_scheduler.framework.profiles import build_frameworks
from custom_scheduler.framework.runtime import Framework
from custom_scheduler.framework.types import Code, CycleState, FitError, NodeInfo, Snapshot, Status
from custom_scheduler.plugins.builtin import full_registry
from tests.builders import NodeBuilder, make_node, make_pod

DEFAULT = "apiVersion: kubescheduler.config.k8s.io/v1\nkind: KubeSchedulerConfiguration\n"
PROFILE = "custom-scheduler"


class Recorded(ins.Recorder):
    def __init__(self) -> None:
        self.points: list[tuple[str, str]] = []
        self.plugins: list[tuple[str, str, str]] = []
        self.evaluated: Counter[tuple[str, str]] = Counter()
        self.waits: list[str] = []

    def extension_point(self, point: str, code: Code, profile: str, seconds: float) -> None:
        assert profile == PROFILE
        assert seconds >= 0
        self.points.append((point, ins.CODE_LABELS[code]))

    def plugin_duration(self, plugin: str, point: str, code: Code, seconds: float) -> None:
        assert seconds >= 0
        self.plugins.append((plugin, point, ins.CODE_LABELS[code]))

    def evaluations(self, point: str, profile: str, counts: Iterable[tuple[str, int]]) -> None:
        for plugin, n in counts:
            self.evaluated[(plugin, point)] += n

    def permit_wait(self, code: Code, seconds: float) -> None:
        self.waits.append(ins.CODE_LABELS[code])


def _setup(*nodes: NodeBuilder) -> tuple[Framework, Snapshot, Recorded]:
    cache = Cache()
    for n in nodes:
        cache.add_node(n.build())
    snap = cache.snapshot()
    rec = Recorded()
    cfg = load_config(DEFAULT, full_registry())
    fwk = build_frameworks(cfg.profiles, full_registry(), snap, client=None, recorder=rec)[PROFILE]
    return fwk, snap, rec


def _nodes(n: int, cpu: str = "4") -> list[NodeBuilder]:
    return [make_node(f"n{i}").capacity(cpu=cpu, memory="8Gi", pods="110") for i in range(n)]


@pytest.mark.parametrize("sampled", [False, True], ids=["not-sampled", "sampled"])
def test_every_cycle_times_its_extension_points_and_only_a_sampled_one_its_plugins(sampled: bool) -> None:
    fwk, snap, rec = _setup(*_nodes(3))
    state = CycleState()
    state.record_plugin_metrics = sampled
    Algorithm(random.Random(1)).schedule(fwk, state, make_pod("p").req(cpu="1").build(), snap)
    assert rec.points == [
        ("PreFilter", "Success"),
        ("Filter", "Success"),
        ("PreScore", "Success"),
        ("Score", "Success"),
    ]
    points = {point for _, point, _ in rec.plugins}
    if not sampled:
        assert rec.plugins == []
        return
    assert points == {"PreFilter", "Filter", "PreScore", "Score", "ScoreExtensionNormalize"}
    # Per-node Filter calls are summed: one sample per plugin and status, not one per node.
    filter_samples = Counter((plugin, status) for plugin, point, status in rec.plugins if point == "Filter")
    assert filter_samples
    assert set(filter_samples.values()) == {1}
    assert ("NodeResourcesFit", "Filter", "Success") in rec.plugins


def test_a_sampled_cycle_keeps_the_masked_pass_fast_paths(monkeypatch: pytest.MonkeyPatch) -> None:
    """A sampled cycle wraps each filter in a timer; the wrapper forwards NodeResourcesFit's column
    statuses (timed as one call) and the node-only filters' declaration, so a pod that fits none
    of many nodes still gets its reasons without a per-node Filter call."""
    n = masked_filter.GIVEN_FROM_ROWS
    fwk, snap, rec = _setup(*_nodes(n, cpu="1"))
    fit = next(p for p in fwk.filter if p.name == "NodeResourcesFit")
    calls: list[str] = []
    per_node = fit.filter

    def counted(state: CycleState, pod: Pod, ni: NodeInfo) -> Status:
        calls.append(ni.name)
        return per_node(state, pod, ni)

    monkeypatch.setattr(fit, "filter", counted)
    state = CycleState()
    state.record_plugin_metrics = True
    with pytest.raises(FitError) as err:
        Algorithm(random.Random(1)).schedule(fwk, state, make_pod("big").req(cpu="2").build(), snap)
    assert calls == []
    assert err.value.histogram() == [f"{n} Insufficient cpu"]
    assert ("NodeResourcesFit", "Filter", "Unschedulable") in rec.plugins
    wrapped = {p.name: p for p in ins.FilterTimer().wrap(fwk.filter)}
    assert getattr(wrapped["TaintToleration"], "filter_reads_node_only", False) is True
    assert getattr(wrapped["NodeResourcesFit"], "filter_reads_node_only", False) is False


def test_evaluations_count_as_upstream_instrumented_plugins() -> None:
    """PreFilter/PreScore once per pod unless the plugin answered Skip, Filter and Score once per
    node asked: a node rejected by a plugin is not asked by the plugins after it."""
    fwk, snap, rec = _setup(*_nodes(3), *_nodes(0), make_node("small").capacity(cpu="1", memory="8Gi", pods="110"))
    pod = make_pod("p").req(cpu="2").build()
    state = CycleState()
    Algorithm(random.Random(1)).schedule(fwk, state, pod, snap)
    filters = [p.name for p in fwk.filter if p.name not in state.skip_filter]
    fit = filters.index("NodeResourcesFit")
    for i, name in enumerate(filters):
        assert rec.evaluated[(name, "Filter")] == (4 if i <= fit else 3), name
    for p in fwk.pre_filter:
        assert rec.evaluated[(p.name, "PreFilter")] == (0 if p.name in state.skip_filter else 1), p.name
    scorers = [p.name for p, _ in fwk.score if p.name not in state.skip_score]
    assert scorers
    for name in scorers:
        assert rec.evaluated[(name, "Score")] == 3, name


def test_a_failed_cycle_reports_its_codes() -> None:
    """PreFilter's UnschedulableAndUnresolvable and PostFilter's Unschedulable are upstream's labels."""
    fwk, snap, rec = _setup(*_nodes(2, cpu="1"))
    pod = make_pod("big").req(cpu="4").node_selector(missing="label").build()
    state = CycleState()
    with pytest.raises(FitError):
        Algorithm().schedule(fwk, state, pod, snap)
    assert ("Filter", "Success") in rec.points
    fwk.run_post_filter(state, pod, {})
    assert rec.points[-1] == ("PostFilter", "Unschedulable")


@pytest.mark.parametrize(
    ("rejected_by", "processed", "want"),
    [
        pytest.param([], 5, [5, 5, 5], id="nothing rejected: every plugin asked about every node"),
        pytest.param(["A", "A"], 5, [5, 3, 3], id="rejected by the first: the others not asked"),
        pytest.param(["B"], 5, [5, 5, 4], id="rejected by the second"),
        pytest.param(["C", "A"], 2, [2, 1, 1], id="each rejection counts up to its plugin"),
        pytest.param([""], 3, [3, 3, 3], id="a reason of no filter (PreFilter's) asks nobody less"),
    ],
)
def test_filter_evaluations(rejected_by: list[str], processed: int, want: list[int]) -> None:
    statuses = [Status.unschedulable("no").with_plugin(p) if p else Status.unschedulable("no") for p in rejected_by]
    assert ins.filter_evaluations(["A", "B", "C"], statuses, processed) == list(zip("ABC", want, strict=True))


def test_binding_points_and_the_permit_wait_are_recorded() -> None:
    fwk, _, rec = _setup(*_nodes(1))
    pod = make_pod("p").build()
    state = CycleState()
    assert fwk.run_reserve(state, pod, "n0").is_success
    assert fwk.run_permit(state, pod, "n0").is_success
    fwk.run_unreserve(state, pod, "n0")
    assert fwk.run_pre_bind(state, pod, "n0").is_success
    fwk.run_post_bind(state, pod, "n0")
    assert [p for p, _ in rec.points] == ["Reserve", "Permit", "Unreserve", "PreBind", "PostBind"]
    assert {s for _, s in rec.points} == {"Success"}
    waiting = fwk.waiting.add(pod, "n0", {"Gate": 10.0})
    fut = fwk.wait_on_permit(pod)
    assert fut is not None
    waiting.reject("Gate", "no")
    fut.result(timeout=5)
    assert rec.waits == ["Unschedulable"]
