"""Score weights as kube-scheduler 1.37.2 takes them, case by case against its own answers (each
case was run through ``kube-scheduler --write-config-to``; the weights themselves follow its
``getValidScoreWeights`` and ``cmd/kube-scheduler/app/server_test.go``): any int32, 0 or unset
meaning 1 at the entry that counts (the ``score.enabled`` one before the ``multiPoint`` one),
the int64 overflow guard with its wrap-around, and the decoder's messages for what is not an
int32. Then the arithmetic: the largest weights never wrap the totals, whatever integer type a
batch scorer hands back."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, ClassVar

import numpy as np
import pytest

from custom_scheduler.api.model import Pod
from custom_scheduler.config import load_config
from custom_scheduler.config.merging import INT32_MAX, INT32_MIN, total_score_overflows
from custom_scheduler.config.schema import PluginRef
from custom_scheduler.errors import ConfigError
from custom_scheduler.framework.handle import SnapshotHandle
from custom_scheduler.framework.registry import PluginSpec, Registry
from custom_scheduler.framework.runtime import Framework
from custom_scheduler.framework.types import CycleState, NodeInfo, Snapshot
from custom_scheduler.plugins import priority_sort
from custom_scheduler.plugins.builtin import full_registry
from tests.builders import make_node, make_pod

HEADER = "apiVersion: kubescheduler.config.k8s.io/v1\nkind: KubeSchedulerConfiguration\n"
OVERFLOW = "score plugins: total score of Score plugins could overflow"


def weights(plugins: str) -> dict[str, int]:
    cfg = load_config(f"{HEADER}profiles:\n- schedulerName: x\n  plugins:\n{plugins}", full_registry())
    return cfg.profiles[0].score_weights()


def score(*entries: str) -> str:
    return "    score:\n      enabled:\n" + "".join(f"      - {e}\n" for e in entries)


def multi_point(*entries: str, disable_all: bool = False) -> str:
    out = "    multiPoint:\n      enabled:\n" + "".join(f"      - {e}\n" for e in entries)
    return out + ("      disabled: [{name: '*'}]\n" if disable_all else "")


@pytest.mark.parametrize(
    ("plugins", "want"),
    [
        pytest.param("", {"TaintToleration": 3, "NodeAffinity": 2, "DynamicResources": 2}, id="defaults"),
        pytest.param(score("{name: TaintToleration}"), {"TaintToleration": 1}, id="score-unset-is-1"),
        pytest.param(score("{name: TaintToleration, weight: 0}"), {"TaintToleration": 1}, id="score-zero-is-1"),
        pytest.param(score("{name: TaintToleration, weight: 250}"), {"TaintToleration": 250}, id="above-100"),
        pytest.param(
            score(f"{{name: TaintToleration, weight: {INT32_MAX}}}", f"{{name: NodeAffinity, weight: {INT32_MAX}}}"),
            {"TaintToleration": INT32_MAX, "NodeAffinity": INT32_MAX},
            id="int32-max-twice",
        ),
        pytest.param(
            score("{name: TaintToleration, weight: 5}", "{name: NodeAffinity, weight: -1}"),
            {"TaintToleration": 5, "NodeAffinity": -1},
            id="negative-while-the-total-stays-positive",
        ),
        pytest.param(multi_point("{name: TaintToleration, weight: 6}"), {"TaintToleration": 6}, id="multipoint"),
        pytest.param(
            multi_point("{name: TaintToleration}"), {"TaintToleration": 1}, id="multipoint-entry-replaces-default"
        ),
        pytest.param(
            # kube-scheduler's server_test "component configuration v1": defaults re-listed without weights.
            multi_point(
                "{name: PrioritySort}",
                "{name: DefaultBinder}",
                "{name: InterPodAffinity}",
                "{name: TaintToleration}",
                "{name: DynamicResources}",
                disable_all=True,
            ),
            {"InterPodAffinity": 1, "TaintToleration": 1, "DynamicResources": 1},
            id="upstream-server-test",
        ),
        pytest.param(
            multi_point("{name: TaintToleration, weight: 6}") + score("{name: TaintToleration}"),
            {"TaintToleration": 1},
            id="score-entry-counts-before-multipoint",
        ),
    ],
)
def test_accepted_weights(plugins: str, want: dict[str, int]) -> None:
    got = weights(plugins)
    assert {name: got[name] for name in want} == want


@pytest.mark.parametrize(
    ("plugins", "path", "message"),
    [
        pytest.param(
            score("{name: TaintToleration, weight: -1}", "{name: NodeAffinity, weight: 5}"),
            "profiles[0].plugins",
            OVERFLOW,
            id="positive-after-negative-total",
        ),
        pytest.param(
            score("{name: TaintToleration, weight: -100}", "{name: NodeAffinity, weight: -100}"),
            "profiles[0].plugins",
            OVERFLOW,
            id="two-negatives",
        ),
        pytest.param(
            multi_point("{name: TaintToleration, weight: -1}"),
            "profiles[0].plugins",
            OVERFLOW,
            id="multipoint-negative",
        ),
        pytest.param(
            score(f"{{name: TaintToleration, weight: {INT32_MAX + 1}}}"),
            "profiles[0].plugins.score.enabled[0].weight",
            "json: cannot unmarshal number 2147483648 into Go struct field Plugin.profiles.plugins.score.enabled.weight"
            " of type int32",
            id="above-int32",
        ),
        pytest.param(
            score(f"{{name: TaintToleration, weight: {INT32_MIN - 1}}}"),
            "profiles[0].plugins.score.enabled[0].weight",
            "json: cannot unmarshal number -2147483649 into Go struct field"
            " Plugin.profiles.plugins.score.enabled.weight of type int32",
            id="below-int32",
        ),
        pytest.param(
            score('{name: TaintToleration, weight: "3"}'),
            "profiles[0].plugins.score.enabled[0].weight",
            "json: cannot unmarshal string into Go struct field Plugin.profiles.plugins.score.enabled.weight"
            " of type int32",
            id="string",
        ),
        pytest.param(
            multi_point("{name: TaintToleration, weight: true}"),
            "profiles[0].plugins.multiPoint.enabled[0].weight",
            "json: cannot unmarshal bool into Go struct field Plugin.profiles.plugins.multiPoint.enabled.weight"
            " of type int32",
            id="bool",
        ),
        pytest.param(
            "    score:\n      disabled: [{name: TaintToleration, weight: 1.5}]\n",
            "profiles[0].plugins.score.disabled[0].weight",
            "json: cannot unmarshal number 1.5 into Go struct field Plugin.profiles.plugins.score.disabled.weight"
            " of type int32",
            id="disabled-entry-weight-is-decoded-too",
        ),
    ],
)
def test_refused_weights(plugins: str, path: str, message: str) -> None:
    with pytest.raises(ConfigError) as info:
        weights(plugins)
    assert [(e.path, e.message) for e in info.value.errors] == [(path, message)]


@pytest.mark.parametrize(
    ("weights_in_order", "overflows"),
    [
        pytest.param([3, 2, 1], False, id="defaults"),
        pytest.param([INT32_MAX] * 1000, False, id="int32-max-many-times"),
        pytest.param([(2**63 - 1) // 100], False, id="exactly-fits"),
        pytest.param([(2**63 - 1) // 100, 1], True, id="one-more"),
        pytest.param([1, -1, 1], False, id="total-back-to-zero"),
        pytest.param([-1], False, id="negative-last"),
        pytest.param([-1, -1], True, id="after-a-negative-total-the-subtraction-wraps"),
    ],
)
def test_overflow_guard_in_go_arithmetic(weights_in_order: list[int], overflows: bool) -> None:
    assert total_score_overflows(weights_in_order) is overflows


# --- the arithmetic ------------------------------------------------------------------------------


class _Fixed:
    """A batch scorer answering fixed normalised scores in a given integer dtype."""

    name: ClassVar[str] = ""
    scores: ClassVar[list[int]] = []
    dtype: ClassVar[Any] = np.int64

    def __init__(self, args: Any, handle: Any) -> None:
        pass

    def score(self, state: CycleState, pod: Pod, node_info: NodeInfo) -> int:
        raise AssertionError("the batch path is used")

    def score_batch(self, state: CycleState, pod: Pod, nodes: Sequence[NodeInfo]) -> Any:
        return np.asarray(self.scores[: len(nodes)], dtype=self.dtype)


def _scorer(name: str, scores: list[int], dtype: Any) -> type[_Fixed]:
    return type(name, (_Fixed,), {"name": name, "scores": scores, "dtype": dtype})


@pytest.mark.parametrize("dtype", [np.int32, np.int64, np.int16], ids=lambda d: d.__name__)
def test_largest_weights_never_wrap_the_totals(dtype: Any) -> None:
    """Two plugins at INT32_MAX and a third at INT32_MIN over three nodes: the daemon's int64
    totals equal the exact (Python int) totals of the detailed path, whatever dtype the scorers
    return."""
    reg = Registry()
    reg.register(priority_sort.SPEC)
    table = {"A": [100, 0, 50], "B": [100, 100, 1], "C": [0, 100, 7]}
    weight = {"A": INT32_MAX, "B": INT32_MAX, "C": INT32_MIN}
    for name, scores in table.items():
        reg.register(PluginSpec(name, _scorer(name, scores, dtype)))
    plugins = {"queueSort": [PluginRef(priority_sort.NAME)], "score": [PluginRef(n, weight[n]) for n in table]}
    nodes = [NodeInfo(make_node(f"n{i}").build()) for i in range(3)]
    handle = SnapshotHandle(Snapshot(node_infos={n.name: n for n in nodes}, node_list=nodes), profile_name="p")
    fwk = Framework("p", plugins, {}, reg, handle=handle)
    pod, state = make_pod().build(), CycleState()
    exact = [sum(table[n][i] * weight[n] for n in table) for i in range(3)]
    assert exact[0] == 200 * INT32_MAX > INT32_MAX * 2**6, "the totals need more than 32 bits"
    assert fwk.run_score_totals(state, pod, nodes).tolist() == exact
    assert [s.total for s in fwk.run_score(state, pod, nodes)] == exact
