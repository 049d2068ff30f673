"""PodTopologySpread's PreFilter counts, kept across cycles (the tally), always equal a full
recount over the snapshot, whatever happens to the cluster between two pods."""

from __future__ import annotations

from typing import Any

import hypothesis.strategies as st
from hypothesis import given, settings

from custom_scheduler.core.cache import Cache
from custom_scheduler.framework.handle import SnapshotHandle
from custom_scheduler.framework.types import CycleState, Snapshot
from custom_scheduler.plugins import pod_topology_spread as pts
from custom_scheduler.plugins import spread_tally
from tests.builders import make_node, make_pod

ZONES = ["z1", "z2", "z3"]
OPS = st.one_of(
    st.tuples(st.just("add_pod"), st.integers(0, 7), st.sampled_from(["web", "db"]), st.sampled_from(["a", "b"])),
    st.tuples(st.just("remove_pod"), st.integers(0, 50)),
    st.tuples(st.just("relabel"), st.integers(0, 7), st.sampled_from([*ZONES, None])),
    st.tuples(st.just("taint"), st.integers(0, 7), st.booleans()),
    st.tuples(st.just("add_node"), st.integers(8, 10), st.sampled_from(ZONES)),
    st.tuples(st.just("remove_node"), st.integers(0, 10)),
)


def _node(i: int, zone: str | None, tainted: bool = False) -> Any:
    b = make_node(f"n{i}").capacity(cpu="64", memory="64Gi", pods="500")
    if zone is not None:
        b.label("topology.kubernetes.io/zone", zone)
    if tainted:
        b.taint("dedicated", "infra")
    return b.build()


@settings(max_examples=150, deadline=None)
@given(st.lists(OPS, max_size=25), st.booleans(), st.booleans())
def test_tally_equals_a_full_recount(ops: list[tuple[Any, ...]], honor_taints: bool, with_selector: bool) -> None:
    cache = Cache()
    zone_of: dict[int, str | None] = {}
    for i in range(8):
        zone_of[i] = ZONES[i % 3]
        cache.add_node(_node(i, zone_of[i]))
    snap = Snapshot()
    cache.update_snapshot(snap)  # the primary snapshot: updated row by row from the dirty set
    extra: dict[str, Any] = {"nodeTaintsPolicy": "Honor"} if honor_taints else {}
    b = make_pod("incoming").label("app", "web")
    if with_selector:
        b.node_selector(**{"topology.kubernetes.io/zone": "z1"})
    incoming = b.spread(1, "topology.kubernetes.io/zone", selector={"matchLabels": {"app": "web"}}, **extra).build()
    plugin = pts.PodTopologySpread(None, SnapshotHandle(snap, profile_name="t"))
    constraints = plugin._constraints(incoming, pts.DO_NOT_SCHEDULE)
    pods: list[Any] = []
    for step, op in enumerate([("noop",), *ops]):
        _apply(cache, op, step, zone_of, pods)
        cache.update_snapshot(snap)
        assert snap.arrays is not None  # so the plugin keeps its counts across cycles
        got = plugin._count(incoming, constraints)
        assert got == spread_tally.count_matching_pods(incoming, constraints, snap.node_list), op


def _apply(cache: Cache, op: tuple[Any, ...], step: int, zone_of: dict[int, str | None], pods: list[Any]) -> None:
    if op[0] == "add_pod":
        p = make_pod(f"p{step}", namespace="default" if op[3] == "a" else "other").label("app", op[2])
        pod = p.node(f"n{op[1]}").build()
        cache.add_pod(pod)
        pods.append(pod)
    elif op[0] == "remove_pod" and pods:
        cache.remove_pod(pods.pop(op[1] % len(pods)))
    elif op[0] == "relabel" and op[1] in zone_of:
        zone_of[op[1]] = op[2]
        cache.update_node(_node(op[1], op[2]))
    elif op[0] == "taint" and op[1] in zone_of:
        cache.update_node(_node(op[1], zone_of[op[1]], tainted=op[2]))
    elif op[0] == "add_node":
        zone_of[op[1]] = op[2]
        cache.add_node(_node(op[1], op[2]))
    elif op[0] == "remove_node" and op[1] in zone_of:
        del zone_of[op[1]]
        cache.remove_node(f"n{op[1]}")


def _scores(plugin: pts.PodTopologySpread, pod: Any, nodes: Any) -> tuple[Any, dict[str, int]]:
    state = CycleState()
    status = plugin.pre_score(state, pod, nodes)
    if not status.is_success:
        return status.code, {}
    return status.code, {ni.name: plugin.score(state, pod, ni) for ni in nodes}


@settings(max_examples=150, deadline=None)
@given(st.lists(OPS, max_size=25), st.booleans(), st.booleans())
def test_kept_scoring_counts_equal_a_fresh_plugin(
    ops: list[tuple[Any, ...]], honor_taints: bool, zone_too: bool
) -> None:
    """PreScore's per-domain sums (kept by the tally) and Score's per-node hostname counts (kept
    by MatchCounts while a node's generation stays) give the scores a fresh plugin gives, after
    any change to pods, labels, taints or nodes; the feasible nodes are a changing subset."""
    cache = Cache()
    zone_of: dict[int, str | None] = {}
    for i in range(8):
        zone_of[i] = ZONES[i % 3]
        cache.add_node(_node(i, zone_of[i]))
    snap = Snapshot()
    cache.update_snapshot(snap)
    extra: dict[str, Any] = {"nodeTaintsPolicy": "Honor"} if honor_taints else {}
    sel = {"matchLabels": {"app": "web"}}
    b = make_pod("incoming").label("app", "web").spread(2, "kubernetes.io/hostname", "ScheduleAnyway", sel, **extra)
    if zone_too:
        b.spread(1, "topology.kubernetes.io/zone", "ScheduleAnyway", sel, **extra)
    incoming = b.build()
    kept = pts.PodTopologySpread(None, SnapshotHandle(snap, profile_name="t"))
    pods: list[Any] = []
    for step, op in enumerate([("noop",), *ops]):
        _apply(cache, op, step, zone_of, pods)
        cache.update_snapshot(snap)
        feasible = [ni for i, ni in enumerate(snap.node_list) if (i + step) % 3]
        fresh = pts.PodTopologySpread(None, SnapshotHandle(snap, profile_name="t"))
        assert _scores(kept, incoming, feasible) == _scores(fresh, incoming, feasible), op
