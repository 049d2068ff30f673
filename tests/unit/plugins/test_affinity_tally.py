"""InterPodAffinity's sums over all nodes, kept across cycles and updated per pod
(pod_tally.PodTally), equal a plain pass over the snapshot whatever happens to the cluster
between two pods: pods added, removed or replaced under the same uid, nodes added or relabelled."""

from __future__ import annotations

import dataclasses
from typing import Any

import hypothesis.strategies as st
from hypothesis import given, settings

from custom_scheduler.core.cache import Cache
from custom_scheduler.framework.handle import SnapshotHandle
from custom_scheduler.framework.types import CycleState, Snapshot
from custom_scheduler.plugins import inter_pod_affinity as ipa
from tests.builders import make_node, make_pod

HOST = "kubernetes.io/hostname"
ZONE = "zone"


def _term(app: str, key: str) -> dict[str, Any]:
    return {"labelSelector": {"matchLabels": {"app": app}}, "topologyKey": key}


def _existing(name: str, kind: int) -> Any:
    b = make_pod(name)
    if kind == 0:
        b.label("app", "cache").pod_affinity("podAntiAffinity", _term("cache", HOST))
    elif kind == 1:
        b.label("app", "web").pod_affinity("podAffinity", _term("db", ZONE), weight=7)
    elif kind == 2:
        b.label("app", "db").pod_affinity("podAffinity", _term("web", ZONE))
    elif kind == 3:
        b.label("app", "web").pod_affinity("podAntiAffinity", _term("web", ZONE), weight=3)
    else:
        b.label("app", "db")
    return b


INCOMING = [
    make_pod("cache").label("app", "cache").pod_affinity("podAntiAffinity", _term("cache", HOST)).build(),
    make_pod("web").label("app", "web").pod_affinity("podAffinity", _term("db", ZONE)).build(),
    make_pod("pref").label("app", "web").pod_affinity("podAntiAffinity", _term("web", ZONE), weight=5).build(),
    make_pod("plain").label("app", "db").build(),
]
OPS = st.one_of(
    st.tuples(st.just("add"), st.integers(0, 5), st.integers(0, 4)),
    st.tuples(st.just("remove"), st.integers(0, 40)),
    st.tuples(st.just("relabel"), st.integers(0, 5), st.sampled_from(["z1", "z2", None])),
    st.tuples(st.just("node"), st.integers(6, 7)),
    st.tuples(st.just("update"), st.integers(0, 40), st.integers(0, 4)),  # same uid, another Pod
)


def _node(i: int, zone: str | None) -> Any:
    b = make_node(f"n{i}").capacity(cpu="64", memory="64Gi", pods="500")
    if zone is not None:
        b.label(ZONE, zone)
    return b.build()


def _states(plugin: ipa.InterPodAffinity, pod: Any, snap: Snapshot) -> tuple[Any, ...]:
    state = CycleState()
    plugin.pre_filter(state, pod, snap.node_list)
    f = state.read(ipa._FILTER_KEY)
    plugin.pre_score(state, pod, snap.node_list)
    s = state.get(ipa._SCORE_KEY)
    pairs = {(HOST, ni.name) for ni in snap.node_list} | {(ZONE, z) for z in ("z1", "z2")}
    return (
        {p: f.existing_anti.get(p) for p in pairs},
        {p: f.affinity.get(p) for p in pairs},
        {p: f.anti.get(p) for p in pairs},
        (f.existing_anti.nonzero, f.affinity.nonzero, f.anti.nonzero),
        {k: dict(v) for k, v in s.topology_score.items()} if s is not None else None,
    )


@settings(max_examples=120, deadline=None)
@given(st.lists(OPS, max_size=20))
def test_kept_sums_equal_a_plain_pass(ops: list[tuple[Any, ...]]) -> None:
    cache = Cache()
    for i in range(6):
        cache.add_node(_node(i, ["z1", "z2"][i % 2]))
    snap = Snapshot()
    cache.update_snapshot(snap)
    kept = ipa.InterPodAffinity(None, SnapshotHandle(snap, profile_name="t"))
    pods: list[Any] = []
    for step, op in enumerate([("none",), *ops]):
        if op[0] == "add":
            pod = _existing(f"e{step}", op[2]).node(f"n{op[1]}").build()
            cache.add_pod(pod)
            pods.append(pod)
        elif op[0] == "remove" and pods:
            cache.remove_pod(pods.pop(op[1] % len(pods)))
        elif op[0] == "update" and pods:
            i = op[1] % len(pods)
            old = pods[i]
            pods[i] = dataclasses.replace(_existing(old.name, op[2]).node(old.node_name).build(), uid=old.uid)
            cache.update_pod(pods[i])
        elif op[0] == "relabel":
            cache.update_node(_node(op[1], op[2]))
        elif op[0] == "node":
            cache.add_node(_node(op[1], "z1"))
        cache.update_snapshot(snap)
        assert snap.arrays is not None
        plain_snap = Snapshot(
            node_infos=snap.node_infos,
            node_list=snap.node_list,
            positions=snap.positions,
            affinity_nodes=snap.affinity_nodes,
            anti_affinity_nodes=snap.anti_affinity_nodes,
        )  # no columns: the plugin sums directly
        plain = ipa.InterPodAffinity(None, SnapshotHandle(plain_snap, profile_name="t"))
        for incoming in INCOMING:
            assert _states(kept, incoming, snap) == _states(plain, incoming, plain_snap), (incoming.name, op)


def _ns_term(app: str, key: str, team: str) -> dict[str, Any]:
    return {**_term(app, key), "namespaceSelector": {"matchLabels": {"team": team}}}


NS_INCOMING = [
    make_pod("pref-ns").label("app", "web").pod_affinity("podAffinity", _ns_term("db", ZONE, "a"), weight=4).build(),
    make_pod("anti-ns").label("app", "web").pod_affinity("podAntiAffinity", _ns_term("web", ZONE, "b")).build(),
    make_pod("req-ns").label("app", "web").pod_affinity("podAffinity", _ns_term("db", ZONE, "a")).build(),
]
NS_OPS = st.one_of(
    st.tuples(st.just("add"), st.integers(0, 5), st.integers(0, 4), st.sampled_from(["default", "other"])),
    st.tuples(st.just("remove"), st.integers(0, 40)),
    st.tuples(st.just("team"), st.sampled_from(["default", "other"]), st.sampled_from(["a", "b", None])),
)


@settings(max_examples=120, deadline=None)
@given(st.lists(NS_OPS, max_size=20))
def test_kept_sums_over_namespace_selectors_follow_namespace_labels(ops: list[tuple[Any, ...]]) -> None:
    """Terms with a namespaceSelector read other namespaces' labels: their kept sums are keyed by
    the namespace labels' version, so relabelling a namespace (no node changes) is seen at once."""
    cache = Cache()
    for i in range(6):
        cache.add_node(_node(i, ["z1", "z2"][i % 2]))
    snap = Snapshot()
    cache.update_snapshot(snap)
    teams: dict[str, dict[str, str]] = {"default": {"team": "a"}, "other": {"team": "b"}}
    version = [1]
    kept = ipa.InterPodAffinity(
        None,
        SnapshotHandle(snap, profile_name="t", namespace_labels=teams.get, namespace_version=lambda: version[0]),
    )
    pods: list[Any] = []
    for step, op in enumerate([("none",), *ops]):
        if op[0] == "add":
            b = make_pod(f"e{step}", namespace=op[3]).label("app", ["db", "web"][op[2] % 2])
            pod = b.node(f"n{op[1]}").build()
            cache.add_pod(pod)
            pods.append(pod)
        elif op[0] == "remove" and pods:
            cache.remove_pod(pods.pop(op[1] % len(pods)))
        elif op[0] == "team":
            teams[op[1]] = {"team": op[2]} if op[2] else {}
            version[0] += 1
        cache.update_snapshot(snap)
        plain_snap = Snapshot(
            node_infos=snap.node_infos,
            node_list=snap.node_list,
            positions=snap.positions,
            affinity_nodes=snap.affinity_nodes,
            anti_affinity_nodes=snap.anti_affinity_nodes,
        )
        plain = ipa.InterPodAffinity(None, SnapshotHandle(plain_snap, profile_name="t", namespace_labels=teams.get))
        for incoming in NS_INCOMING:
            assert _states(kept, incoming, snap) == _states(plain, incoming, plain_snap), (incoming.name, op)
