"""framework.gang: the GangStore's listers, member index and change notifications, and the status
writer's decisions (what it patches, fencing, offline), without an API server."""

from __future__ import annotations

from typing import Any

import pytest

from custom_scheduler.framework import gang_store as fgang
from custom_scheduler.framework.fence import Fence
from custom_scheduler.framework.gang_store import GangChange, GangStatusWriter, GangStore
from tests.builders import make_crd_pod_group, make_pod, make_pod_group


def _store(placed: set[str] | None = None) -> tuple[GangStore, list[GangChange]]:
    placed = placed if placed is not None else set()
    store = GangStore(is_placed=lambda uid: uid in placed)
    changes: list[GangChange] = []
    store.add_listener(changes.append)
    return store, changes


def test_groups_of_both_apis_with_the_same_name_stay_apart() -> None:
    store, _ = _store()
    native = make_pod_group("g", "ns", min_count=2).build()
    crd = make_crd_pod_group("g", "ns", min_member=5).build()
    store.put(native)
    store.put(crd)
    assert store.get("ns/g", "native") == native
    assert store.get("ns/g", "crd") == crd
    assert store.get("ns/g") == native  # native first
    assert store.group_for(make_pod("p", "ns").pod_group_label("g").build()) == crd
    assert store.group_for(make_pod("p", "ns").scheduling_group("g").build()) == native
    assert store.group_for(make_pod("p", "other").scheduling_group("g").build()) is None
    store.delete(native)
    assert store.get("ns/g") == crd


@pytest.mark.parametrize(
    ("old_min", "new_min", "event"),
    [
        pytest.param(None, 3, fgang.POD_GROUP_ADD, id="add"),
        pytest.param(3, 2, fgang.POD_GROUP_UPDATE, id="minCount-lowered"),
        pytest.param(3, 3, None, id="unchanged"),
        pytest.param(2, 3, None, id="minCount-raised"),
    ],
)
def test_group_changes_that_may_release_members(old_min: int | None, new_min: int, event: str | None) -> None:
    """Upstream's hints: every PodGroup add; an update only when a gang's minCount decreased."""
    store, changes = _store()
    if old_min is not None:
        store.put(make_pod_group("g", "ns", min_count=old_min).build())
        changes.clear()
    store.put(make_pod_group("g", "ns", min_count=new_min).build())
    assert changes == ([GangChange(event, "native", "ns/g")] if event else [])


def test_member_index_counts_live_members_and_notifies_at_quorum() -> None:
    store, changes = _store()
    g = make_pod_group("g", "ns", min_count=2).build()
    store.put(g)
    changes.clear()
    a = make_pod("a", "ns").scheduling_group("g").build()
    b = make_pod("b", "ns").scheduling_group("g").build()
    store.member_added(a)
    assert store.member_count(g) == 1
    assert changes == []  # one member cannot release a gang of two
    store.member_added(b)
    assert store.member_count(g) == 2
    assert changes == [GangChange(fgang.POD_GROUP_MEMBER_ADD, "native", "ns/g")]
    assert changes[0].matches(a)
    assert not changes[0].matches(make_pod("c", "ns").pod_group_label("g").build())
    store.member_updated(b, make_pod("b", "ns").scheduling_group("g").uid(b.uid).terminating().build())
    assert store.member_count(g) == 1  # terminating members do not count
    store.member_deleted(a)
    assert store.member_count(g) == 0
    store.member_added(make_pod("x", "ns").build())  # no group: ignored
    assert store.member_count(g) == 0


def test_label_change_moves_a_crd_member() -> None:
    store, _ = _store()
    g1 = make_crd_pod_group("g1", "ns").build()
    g2 = make_crd_pod_group("g2", "ns").build()
    store.load([g1, g2])
    old = make_pod("p", "ns").uid("u").pod_group_label("g1").build()
    store.member_added(old)
    store.member_updated(old, make_pod("p", "ns").uid("u").pod_group_label("g2").build())
    assert (store.member_count(g1), store.member_count(g2)) == (0, 1)


def test_placed_is_bound_or_assumed_per_the_cache() -> None:
    store, _ = _store(placed={"assumed"})
    g = make_pod_group("g", "ns", min_count=3).build()
    store.put(g)
    pods = [
        make_pod("a", "ns").scheduling_group("g").uid("assumed").build(),
        make_pod("b", "ns").scheduling_group("g").uid("bound").node("n1").build(),
        make_pod("c", "ns").scheduling_group("g").uid("queued").build(),
    ]
    for p in pods:
        store.member_added(p)
    assert store.placed(g) == frozenset({"assumed", "bound"})
    assert [p.uid for p in store.unplaced(g)] == ["queued"]


def test_a_failing_listener_does_not_stop_the_others() -> None:
    store, changes = _store()

    def boom(change: GangChange) -> None:
        raise RuntimeError("listener bug")

    store._listeners.insert(0, boom)
    store.put(make_pod_group("g", "ns", min_count=1).build())
    assert len(changes) == 1


# -- status writer decisions (the API round trip is in tests/integration/test_gang_store.py) ------


class _Client:
    def __init__(self) -> None:
        self.calls: list[tuple[str, dict[str, Any], str]] = []

    def patch(self, path: str, body: dict[str, Any], content_type: str = "merge", **kw: Any) -> dict[str, Any]:
        self.calls.append((path, body, content_type))
        return {}


class _Handle:
    def __init__(self, client: Any, fence: Fence) -> None:
        self.client = client
        self.fence = fence


def test_writer_patches_native_condition_strategically_and_crd_status_by_merge() -> None:
    store, _ = _store()
    native = make_pod_group("g", "ns", min_count=2).build()
    crd = make_crd_pod_group("c", "ns", min_member=2).build()
    store.load([native, crd])
    for name in ("a", "b"):
        store.member_added(make_pod(name, "ns").pod_group_label("c").node("n1").build())
    client = _Client()
    w = GangStatusWriter(_Handle(client, Fence()), store, now=lambda: "2025-01-01T00:00:00Z")
    r1 = w.write("native", "ns/g", "scheduled", "all 2 members placed")
    r2 = w.write("crd", "ns/c", "scheduled")
    assert (r1.result, r2.result) == ("written", "written")
    (p1, b1, ct1), (p2, b2, ct2) = client.calls
    assert p1 == "/apis/scheduling.k8s.io/v1beta1/namespaces/ns/podgroups/g/status"
    assert ct1 == "application/strategic-merge-patch+json"
    assert b1["status"]["conditions"][0]["reason"] == "Scheduled"
    assert p2 == "/apis/scheduling.x-k8s.io/v1alpha1/namespaces/ns/podgroups/c/status"
    assert ct2 == "merge"
    assert b2 == {"status": {"phase": "Scheduled", "scheduled": 2, "running": 0}}


def test_writer_is_fenced_offline_and_skips_unknown_groups() -> None:
    store, _ = _store()
    store.put(make_pod_group("g", "ns", min_count=2).build())
    fence = Fence()
    fence.revoke("lease lost")
    client = _Client()
    assert GangStatusWriter(_Handle(client, fence), store).write("native", "ns/g", "scheduled").result == "fenced"
    assert GangStatusWriter(_Handle(None, Fence()), store).write("native", "ns/g", "scheduled").result == "skipped"
    assert GangStatusWriter(_Handle(client, Fence()), store).write("native", "ns/x", "scheduled").result == "skipped"
    assert client.calls == []


def test_writer_worker_coalesces_and_flushes() -> None:
    store, _ = _store()
    g = make_crd_pod_group("c", "ns", min_member=2).build()
    store.put(g)
    client = _Client()
    w = GangStatusWriter(_Handle(client, Fence()), store)
    w.group_attempting(g)
    w.group_rejected(g, "0/2 nodes are available")
    assert w.flush(5.0)
    w.close()
    assert client.calls, "something was written"
    assert client.calls[-1][1]["status"]["phase"] == "Pending"  # rejected with nothing placed


def test_an_unknown_api_named_by_a_member_is_probed_and_held_until_the_answer() -> None:
    """The daemon's store starts knowing no API. A CRD member makes it probe the CRD at once and
    count the API as served meanwhile (no member of a real gang goes alone); "absent" releases
    the held members to go alone (one event for the whole API), "served" keeps them members."""
    probes: list[str] = []
    changes: list[GangChange] = []
    store = GangStore(served=())
    store.probe_with("crd", lambda: probes.append("crd"))
    store.add_listener(changes.append)
    assert not store.serves("crd")
    member = make_pod("m0", "ns").pod_group_label("g").build()
    store.member_added(member)
    store.member_added(make_pod("m1", "ns").pod_group_label("g").build())
    assert probes == ["crd"]  # once, while the answer is pending
    assert store.serves("crd")
    store.api_absent("crd")
    assert not store.serves("crd")
    assert [(c.event, c.api, c.key) for c in changes] == [(fgang.POD_GROUP_API_ABSENT, "crd", "")]
    assert changes[0].matches(member)
    assert not changes[0].matches(make_pod("x", "ns").build())
    store.api_absent("crd")  # a periodic probe with nothing held: no event
    assert len(changes) == 1
    store.member_added(make_pod("m2", "ns").pod_group_label("g").build())
    assert probes == ["crd", "crd"]  # a new member asks again (the CRD may be installed now)
    store.api_served("crd")
    assert store.serves("crd")
    assert not store.serves("native")
