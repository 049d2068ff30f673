"""Per-row memos over snapshot columns: a failing row function leaves them consistent."""

from __future__ import annotations

import pytest

from custom_scheduler.core.cache import Cache
from custom_scheduler.framework import arrays
from custom_scheduler.framework.types import NodeInfo, Snapshot
from tests.builders import make_node, make_pod


def _pods(ni: NodeInfo) -> arrays.Entries:
    return ((ni.name, len(ni.pods)),) if ni.pods else ()


def _cluster() -> tuple[Cache, Snapshot]:
    cache = Cache()
    for i in range(3):
        cache.add_node(make_node(f"n{i}").build())
    snap = Snapshot()
    cache.update_snapshot(snap)
    return cache, snap


def test_tally_stays_exact_when_a_row_function_raises() -> None:
    cache, snap = _cluster()
    cache.add_pod(make_pod("a").node("n1").build())
    cache.update_snapshot(snap)
    tally = arrays.RowTally()
    assert tally.totals("k", snap.arrays, snap.node_list, _pods) == {"n1": 1}
    cache.add_pod(make_pod("b").node("n1").build())
    cache.update_snapshot(snap)

    def broken(ni: NodeInfo) -> arrays.Entries:
        raise RuntimeError("odd pod")

    with pytest.raises(RuntimeError):
        tally.totals("k", snap.arrays, snap.node_list, broken)
    assert tally.totals("k", snap.arrays, snap.node_list, _pods) == {"n1": 2}


def test_memo_stays_exact_when_a_row_function_raises() -> None:
    cache, snap = _cluster()
    memo = arrays.RowMemo()
    assert memo.values("k", snap.arrays, snap.node_list, lambda ni: bool(ni.pods)).tolist() == [False] * 3
    cache.add_pod(make_pod("a").node("n2").build())
    cache.update_snapshot(snap)

    def broken(ni: NodeInfo) -> bool:
        raise RuntimeError("odd node")

    with pytest.raises(RuntimeError):
        memo.values("k", snap.arrays, snap.node_list, broken)
    got = memo.values("k", snap.arrays, snap.node_list, lambda ni: bool(ni.pods))
    assert got.tolist() == [bool(ni.pods) for ni in snap.node_list]
    assert sum(got.tolist()) == 1
