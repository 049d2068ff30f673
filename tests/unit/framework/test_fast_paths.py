"""The Framework's declared fast paths: chosen once when it is built, used only where their
contract holds, and handed the snapshot's columns by the framework.

The plugins here record which of their methods ran; that is what these tests are about (the
results of the fast paths are compared with the per-node methods in tests/unit/plugins and
tests/unit/core/test_vectorised_filters.py).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, ClassVar

import numpy as np
import numpy.typing as npt
import pytest

from custom_scheduler.api.model import Pod
from custom_scheduler.config import load_config
from custom_scheduler.core.cache import Cache
from custom_scheduler.framework import arrays
from custom_scheduler.framework.profiles import build_frameworks
from custom_scheduler.framework.registry import PluginSpec, Registry
from custom_scheduler.framework.runtime import Framework
from custom_scheduler.framework.types import SUCCESS, CycleState, NodeInfo, NodeScore, Snapshot, Status
from custom_scheduler.plugins.builtin import full_registry
from tests.builders import make_node, make_pod

DEFAULT = "apiVersion: kubescheduler.config.k8s.io/v1\nkind: KubeSchedulerConfiguration\n"
REJECTED = "b"


class _PerNode:
    """A Filter and Score plugin with no fast path: rejects node ``b``, scores 10 everywhere."""

    name: ClassVar[str] = "PerNode"

    def __init__(self, args: Any, handle: Any) -> None:
        self.calls: list[str] = []

    def filter(self, state: CycleState, pod: Pod, node_info: NodeInfo) -> Status:
        self.calls.append("filter")
        return Status.unschedulable("rejected") if node_info.name == REJECTED else SUCCESS

    def score(self, state: CycleState, pod: Pod, node_info: NodeInfo) -> int:
        self.calls.append("score")
        return 10


class _Fast(_PerNode):
    """The same verdicts and scores, with every fast path declared."""

    name: ClassVar[str] = "Fast"

    def __init__(self, args: Any, handle: Any) -> None:
        super().__init__(args, handle)
        self.batch_nodes: list[Sequence[NodeInfo]] = []

    def filter_mask(self, state: CycleState, pod: Pod, snap: Snapshot) -> arrays.Mask | bool | None:
        self.calls.append("filter_mask")
        return np.array([ni.name != REJECTED for ni in snap.node_list], dtype=np.bool_)

    def score_batch(self, state: CycleState, pod: Pod, nodes: Sequence[NodeInfo]) -> npt.NDArray[np.int64]:
        self.calls.append("score_batch")
        self.batch_nodes.append(nodes)
        return np.full(len(nodes), 10, dtype=np.int64)

    def normalize_score(self, state: CycleState, pod: Pod, scores: list[NodeScore]) -> Status:
        self.calls.append("normalize_score")
        for s in scores:
            s.score *= 2
        return SUCCESS

    def normalize_batch(self, state: CycleState, pod: Pod, raw: list[int]) -> list[int]:
        self.calls.append(f"normalize_batch:{type(raw).__name__}")
        return [r * 2 for r in raw]


def _setup(plugin: str) -> tuple[Framework, Snapshot, Any]:
    """A framework whose only Filter and Score plugin is ``plugin``, over nodes a, b, c."""
    reg = Registry(full_registry())
    reg.register(PluginSpec("PerNode", _PerNode))
    reg.register(PluginSpec("Fast", _Fast))
    cache = Cache()
    for name in ("a", "b", "c"):
        cache.add_node(make_node(name).build())
    snap = cache.snapshot()
    cfg = load_config(
        DEFAULT + "profiles:\n- schedulerName: custom-scheduler\n  plugins:\n"
        f"    filter: {{disabled: [{{name: '*'}}], enabled: [{{name: {plugin}}}]}}\n"
        f"    score: {{disabled: [{{name: '*'}}], enabled: [{{name: {plugin}, weight: 1}}]}}\n",
        reg,
    )
    fwk = build_frameworks(cfg.profiles, reg, snap, client=None)["custom-scheduler"]
    return fwk, snap, fwk.plugin(plugin)


@pytest.mark.parametrize(
    ("plugin", "with_snapshot", "need_statuses", "want_calls"),
    [
        pytest.param("Fast", True, False, ["filter_mask"], id="daemon path: the mask alone"),
        pytest.param("Fast", True, True, ["filter"] * 3, id="statuses wanted: per node, for the reasons"),
        pytest.param("Fast", False, False, ["filter"] * 3, id="no snapshot said: per node"),
        pytest.param("PerNode", True, False, ["filter"] * 3, id="nothing declared: per node"),
    ],
)
def test_filter_masks_replace_the_per_node_filter_only_on_the_snapshot_path(
    plugin: str, with_snapshot: bool, need_statuses: bool, want_calls: list[str]
) -> None:
    fwk, snap, p = _setup(plugin)
    state = CycleState()
    pod = make_pod("x").build()
    feasible, _, processed = fwk.filter_many(
        state,
        pod,
        snap.node_list,
        start=0,
        want=3,
        snap=snap if with_snapshot else None,
        need_statuses=need_statuses,
    )
    assert sorted(ni.name for ni in feasible) == ["a", "c"]
    assert processed == 3
    assert p.calls == want_calls


def test_fast_paths_are_chosen_when_the_framework_is_built() -> None:
    """A method attached after construction is not looked up at run time."""
    fwk, snap, p = _setup("PerNode")
    p.filter_mask = lambda state, pod, snap: True
    fwk.filter_many(
        CycleState(), make_pod("x").build(), snap.node_list, start=0, want=3, snap=snap, need_statuses=False
    )
    assert p.calls == ["filter"] * 3


def test_a_snapshot_given_with_other_nodes_is_refused() -> None:
    fwk, snap, _ = _setup("Fast")
    with pytest.raises(ValueError, match="2 nodes given with a snapshot of 3"):
        fwk.filter_many(
            CycleState(), make_pod("x").build(), snap.node_list[:2], start=0, want=3, snap=snap, need_statuses=False
        )


@pytest.mark.parametrize(
    ("nodes_of", "want_rows"),
    [
        pytest.param(lambda snap: [snap.node_list[2], snap.node_list[0]], [2, 0], id="snapshot nodes: looked up"),
        pytest.param(lambda snap: [snap.node_list[1].clone()], None, id="a modified copy has no row"),
    ],
)
def test_batch_scorers_get_the_rows_of_snapshot_nodes(nodes_of: Any, want_rows: list[int] | None) -> None:
    fwk, snap, p = _setup("Fast")
    nodes = nodes_of(snap)
    scored = fwk.run_score(CycleState(), make_pod("x").build(), nodes)
    assert [s.total for s in scored] == [20] * len(nodes)
    (got,) = p.batch_nodes
    assert list(got) == nodes
    if want_rows is None:
        assert not isinstance(got, arrays.NodeRows)
    else:
        assert isinstance(got, arrays.NodeRows)
        assert got.cols is snap.arrays
        assert got.rows.tolist() == want_rows


def test_the_vectorised_filter_hands_its_rows_to_the_scorers_and_normalize_gets_ints() -> None:
    fwk, snap, p = _setup("Fast")
    state = CycleState()
    pod = make_pod("x").build()
    feasible, _, _ = fwk.filter_many(state, pod, snap.node_list, start=2, want=3, snap=snap, need_statuses=False)
    scored = fwk.run_score(state, pod, feasible)
    assert [(s.name, s.raw["Fast"], s.normalized["Fast"]) for s in scored] == [("c", 10, 20), ("a", 10, 20)]
    assert p.batch_nodes == [feasible]
    assert p.batch_nodes[0] is feasible  # already rows: not looked up again
    assert p.calls == ["filter_mask", "score_batch", "normalize_batch:list"]
