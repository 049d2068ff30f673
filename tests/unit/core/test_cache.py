"""The cache's pod state machine and its invariant: requested == Σ pods on the node."""

from __future__ import annotations

from typing import Any

import hypothesis.strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from custom_scheduler.api.model import Pod
from custom_scheduler.core.cache import Cache
from tests.builders import make_node, make_pod


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def _pod(name: str, cpu: str = "100m", node: str = "") -> Pod:
    b = make_pod(name).req(cpu=cpu, memory="64Mi")
    if node:
        b.node(node)
    return b.build()


def test_assume_counts_immediately_and_forget_releases() -> None:
    c = Cache()
    c.add_node(make_node("n1").build())
    p = _pod("a", "500m")
    c.assume(p, "n1")
    assert c.snapshot().get("n1").requested.milli_cpu == 500  # type: ignore[union-attr]
    c.forget(p.uid)
    assert c.snapshot().get("n1").requested.milli_cpu == 0  # type: ignore[union-attr]
    assert c.check_invariants() == []


def test_informer_add_confirms_assumed_pod_even_on_another_node() -> None:
    c = Cache()
    c.add_node(make_node("n1").build())
    c.add_node(make_node("n2").build())
    p = _pod("a", "500m")
    c.assume(p, "n1")
    bound = Pod(**{**{f: getattr(p, f) for f in p.__slots__}, "node_name": "n2"})
    c.add_pod(bound)
    snap = c.snapshot()
    assert snap.get("n1").requested.milli_cpu == 0  # type: ignore[union-attr]
    assert snap.get("n2").requested.milli_cpu == 500  # type: ignore[union-attr]
    assert not c.is_assumed(p.uid)
    assert c.check_invariants() == []


def test_assumed_pod_expires_after_ttl_only_once_binding_finished() -> None:
    clock = FakeClock()
    c = Cache(ttl=30, clock=clock)
    c.add_node(make_node("n1").build())
    p = _pod("a")
    c.assume(p, "n1")
    clock.now = 100
    assert c.cleanup_expired() == []  # binding not finished: never expires
    c.finish_binding(p.uid)
    clock.now = 129
    assert c.cleanup_expired() == []
    clock.now = 131
    assert [x.uid for x in c.cleanup_expired()] == [p.uid]
    assert c.snapshot().get("n1").requested.milli_cpu == 0  # type: ignore[union-attr]


def test_pod_before_its_node_is_kept_and_counted() -> None:
    c = Cache()
    c.add_pod(_pod("early", "1", node="late"))
    assert c.snapshot().get("late") is None  # no Node object yet: not schedulable
    c.add_node(make_node("late").build())
    assert c.snapshot().get("late").requested.milli_cpu == 1000  # type: ignore[union-attr]


def test_snapshot_is_incremental_and_isolated() -> None:
    c = Cache()
    for i in range(3):
        c.add_node(make_node(f"n{i}").build())
    snap = c.snapshot()
    before = {n: id(ni) for n, ni in snap.node_infos.items()}
    c.add_pod(_pod("x", node="n1"))
    c.update_snapshot(snap)
    assert id(snap.node_infos["n0"]) == before["n0"]  # unchanged nodes are not copied
    assert id(snap.node_infos["n1"]) != before["n1"]
    assert [ni.name for ni in snap.node_list].count("n1") == 1
    assert snap.get("n1") is snap.node_list[[ni.name for ni in snap.node_list].index("n1")]
    c.remove_node("n2")
    c.update_snapshot(snap)
    assert sorted(snap.node_infos) == ["n0", "n1"]
    assert sorted(ni.name for ni in snap.node_list) == ["n0", "n1"]


def test_node_list_interleaves_zones() -> None:
    c = Cache()
    for zone, names in (("a", ["a1", "a2", "a3"]), ("b", ["b1", "b2"])):
        for n in names:
            c.add_node(make_node(n).label("topology.kubernetes.io/zone", zone).build())
    assert [ni.name for ni in c.snapshot().node_list] == ["a1", "b1", "a2", "b2", "a3"]


def test_image_states_count_nodes_with_the_image() -> None:
    c = Cache()
    c.add_node(make_node("n1").image("nginx:1", 100).build())
    c.add_node(make_node("n2").image("nginx:1", 100).build())
    snap = c.snapshot()
    assert snap.get("n1").image_states["nginx:1"].num_nodes == 2  # type: ignore[union-attr]
    c.remove_node("n2")
    assert c.snapshot().get("n1").image_states["nginx:1"].num_nodes == 1  # type: ignore[union-attr]


class CacheMachine(RuleBasedStateMachine):
    """Random assume/forget/confirm/delete sequences never break the invariant."""

    def __init__(self) -> None:
        super().__init__()
        self.cache = Cache()
        for n in ("n0", "n1", "n2"):
            self.cache.add_node(make_node(n).build())
        self.assumed: dict[str, Pod] = {}
        self.bound: dict[str, Pod] = {}
        self.i = 0
        self.primary = self.cache.snapshot()  # the incrementally updated (dirty-set) snapshot

    @rule(node=st.sampled_from(["n0", "n1", "n2"]), cpu=st.sampled_from(["100m", "250m", "1"]))
    def assume(self, node: str, cpu: str) -> None:
        self.i += 1
        p = _pod(f"p{self.i}", cpu)
        self.assumed[p.uid] = self.cache.assume(p, node)

    @precondition(lambda self: self.assumed)
    @rule(data=st.data())
    def forget(self, data: st.DataObject) -> None:
        uid = data.draw(st.sampled_from(sorted(self.assumed)))
        self.cache.forget(uid)
        del self.assumed[uid]

    @precondition(lambda self: self.assumed)
    @rule(data=st.data(), node=st.sampled_from(["n0", "n1", "n2"]))
    def confirm(self, data: st.DataObject, node: str) -> None:
        uid = data.draw(st.sampled_from(sorted(self.assumed)))
        p = self.assumed.pop(uid)
        confirmed = Pod(**{**{f: getattr(p, f) for f in p.__slots__}, "node_name": node})
        self.cache.add_pod(confirmed)
        self.bound[uid] = confirmed

    @precondition(lambda self: self.bound)
    @rule(data=st.data())
    def delete(self, data: st.DataObject) -> None:
        uid = data.draw(st.sampled_from(sorted(self.bound)))
        self.cache.remove_pod(self.bound.pop(uid))

    @rule(name=st.sampled_from(["n0", "n1", "n2", "n3"]), cpu=st.sampled_from(["2", "4"]))
    def add_or_update_node(self, name: str, cpu: str) -> None:
        self.cache.add_node(make_node(name).capacity(cpu=cpu, memory="8Gi", pods="110").build())

    @rule(name=st.sampled_from(["n0", "n1", "n2", "n3"]))
    def remove_node(self, name: str) -> None:
        self.cache.remove_node(name)

    @invariant()
    def primary_snapshot_matches_a_fresh_one(self) -> None:
        self.cache.update_snapshot(self.primary)
        fresh = self.cache.snapshot()

        def view(s: Any) -> list[tuple[str, int, int, int]]:
            return [(ni.name, ni.requested.milli_cpu, len(ni.pods), ni.allocatable.milli_cpu) for ni in s.node_list]

        assert view(self.primary) == view(fresh)
        assert self.primary.positions == {ni.name: i for i, ni in enumerate(self.primary.node_list)}
        assert all(self.primary.node_infos[ni.name] is ni for ni in self.primary.node_list)

    @invariant()
    def consistent(self) -> None:
        assert self.cache.check_invariants() == []
        snap = self.cache.snapshot()
        total = sum(ni.requested.milli_cpu for ni in snap.node_list)
        present = set(snap.node_infos)  # pods of a removed node stay accounted, but off the snapshot
        expected = sum(
            p.requests.milli_cpu for p in [*self.assumed.values(), *self.bound.values()] if p.node_name in present
        )
        assert total == expected


TestCacheMachine = CacheMachine.TestCase


def test_snapshot_tracks_nodes_with_affinity_pods_incrementally() -> None:
    """InterPodAffinity visits only these nodes for pods without affinity: the sets must follow
    every add and delete, in the incrementally updated snapshot as in a fresh one."""
    c = Cache()
    for n in ("n0", "n1", "n2"):
        c.add_node(make_node(n).build())
    snap = c.snapshot()
    term = {"labelSelector": {"matchLabels": {"app": "db"}}, "topologyKey": "kubernetes.io/hostname"}
    anti = make_pod("anti").node("n1").pod_affinity("podAntiAffinity", term).build()
    pref = make_pod("pref").node("n2").pod_affinity("podAffinity", term, weight=10).build()
    c.add_pod(anti)
    c.add_pod(pref)
    c.update_snapshot(snap)
    assert snap.anti_affinity_nodes == {"n1"}
    assert snap.affinity_nodes == {"n1", "n2"}
    c.remove_pod(anti)
    c.update_snapshot(snap)
    fresh = c.snapshot()
    assert snap.anti_affinity_nodes == fresh.anti_affinity_nodes == set()
    assert snap.affinity_nodes == fresh.affinity_nodes == {"n2"}


def test_inter_pod_affinity_fast_path_equals_full_scan() -> None:
    """The existing pods' anti-affinity still rejects a pod without affinity of its own when only
    the tracked nodes are visited."""
    from custom_scheduler.framework.handle import SnapshotHandle
    from custom_scheduler.framework.types import CycleState
    from custom_scheduler.plugins import inter_pod_affinity as ipa

    c = Cache()
    for n in ("n0", "n1"):
        c.add_node(make_node(n).build())
    term = {"labelSelector": {"matchLabels": {"app": "web"}}, "topologyKey": "kubernetes.io/hostname"}
    c.add_pod(make_pod("guard").node("n1").pod_affinity("podAntiAffinity", term).build())
    snap = c.snapshot()
    plugin = ipa.InterPodAffinity(None, SnapshotHandle(snap, profile_name="t"))
    pod = make_pod("web").label("app", "web").build()
    state = CycleState()
    assert plugin.pre_filter(state, pod, snap.node_list).is_success
    verdicts = {ni.name: plugin.filter(state, pod, ni).reasons for ni in snap.node_list}
    assert verdicts == {"n0": (), "n1": (ipa.ERR_REASON_EXISTING_ANTI_AFFINITY_RULES_NOT_MATCH,)}
