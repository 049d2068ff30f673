"""PodTopologySpread's batch scoring (all nodes in one call, ints without NodeScore objects) gives
what Score per node and upstream's NormalizeScore loop give, on random clusters: nodes missing the
zone or hostname label (ignored when a constraint requires every key), pods in two namespaces,
explicit or system-default constraints."""

from __future__ import annotations

from typing import Any

import hypothesis.strategies as st
from hypothesis import given, settings

from custom_scheduler.api.labels import compile_selector
from custom_scheduler.framework.types import MAX_NODE_SCORE, CycleState, NodeInfo, NodeScore
from custom_scheduler.plugins import pod_topology_spread as pts
from custom_scheduler.plugins import spread_scoring
from tests.builders import make_node, make_pod
from tests.unit.plugins.test_pod_topology_spread import cluster, plugin

ZONE = "topology.kubernetes.io/zone"
HOST = "kubernetes.io/hostname"

NODES = st.lists(st.tuples(st.sampled_from(["z1", "z2", "z3", None]), st.booleans()), min_size=1, max_size=9)
PODS = st.lists(st.tuples(st.integers(0, 8), st.sampled_from(["web", "db"]), st.booleans()), max_size=30)
CONSTRAINTS = st.sampled_from(["system", "zone", "host", "both"])


def _upstream_normalize(names: list[str], raw: list[int], ignored: frozenset[str]) -> list[int]:
    """pkg/scheduler/framework/plugins/podtopologyspread/scoring.go NormalizeScore, literally."""
    min_score, max_score = 2**63 - 1, 0
    for name, s in zip(names, raw, strict=True):
        if name in ignored:
            continue
        min_score, max_score = min(min_score, s), max(max_score, s)
    out = []
    for name, s in zip(names, raw, strict=True):
        if name in ignored:
            out.append(0)
        elif max_score == 0:
            out.append(MAX_NODE_SCORE)
        else:
            out.append(MAX_NODE_SCORE * (max_score + min_score - s) // max_score)
    return out


def _infos(nodes: list[tuple[str | None, bool]], pods: list[tuple[int, str, bool]]) -> list[NodeInfo]:
    built = []
    for i, (zone, hostname) in enumerate(nodes):
        b = make_node(f"n{i}").capacity(cpu="64", memory="64Gi", pods="500")
        if zone is not None:
            b.label(ZONE, zone)
        if not hostname:
            b.without_label(HOST)
        built.append(b.build())
    existing = [
        make_pod(f"p{j}", namespace="default" if same_ns else "other")
        .label("app", app)
        .node(f"n{i % len(nodes)}")
        .build()
        for j, (i, app, same_ns) in enumerate(pods)
    ]
    return cluster(built, existing)


@settings(max_examples=200, deadline=None)
@given(NODES, PODS, CONSTRAINTS, st.integers(1, 3), st.data())
def test_batch_scores_equal_per_node_scores(
    nodes: list[tuple[str | None, bool]], pods: list[tuple[int, str, bool]], kind: str, skew: int, data: Any
) -> None:
    infos = _infos(nodes, pods)
    b = make_pod("incoming").label("app", "web")
    sel = {"matchLabels": {"app": "web"}}
    if kind in ("zone", "both"):
        b.spread(skew, ZONE, "ScheduleAnyway", sel)
    if kind in ("host", "both"):
        b.spread(skew, HOST, "ScheduleAnyway", sel)
    pod = b.build()
    feasible = [ni for ni in infos if data.draw(st.booleans())] or infos
    if kind == "system":  # the default constraints (hostname, zone), selector from a "Service"
        pl = plugin(infos, pts.PodTopologySpreadArgs(defaulting_type="System"), compile_selector(sel))
    else:
        pl = plugin(infos, None, None)
    state = CycleState()
    if not pl.pre_score(state, pod, feasible).is_success:
        return  # SKIP: no Score at all (no soft constraints)
    raw = [pl.score(state, pod, ni) for ni in feasible]
    assert pl.score_batch(state, pod, feasible) == raw
    ignored = state.read(pts._SCORE_KEY).ignored
    want = _upstream_normalize([ni.name for ni in feasible], raw, ignored)
    assert pl.normalize_batch(state, pod, raw) == want
    ns = [NodeScore(ni.name, r) for ni, r in zip(feasible, raw, strict=True)]
    assert pl.normalize_score(state, pod, ns).is_success
    assert [s.score for s in ns] == want


def test_scores_round_halves_away_from_zero_as_go() -> None:
    """Go's math.Round, not Python's round (halves to even): 0.5 -> 1, 2.5 -> 3."""
    nodes = [NodeInfo(make_node(f"n{i}").label(ZONE, f"z{i}").build()) for i in range(6)]
    counts = {"z0": 0, "z1": 1, "z2": 3, "z3": 5, "z4": 6}  # z5: no count
    term: spread_scoring.Term = (ZONE, 0, counts, 0.5, None)
    assert spread_scoring.node_scores([term], (), nodes) == [0, 1, 2, 3, 3, 0]
