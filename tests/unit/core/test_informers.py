"""Informer bookkeeping (a re-list after 410 Gone turns vanished objects into deletes) and the one
sink adapter: what an informer's events do to the stores and the scheduler it feeds."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from custom_scheduler.api.model import Pod, pod_from_json
from custom_scheduler.core.informers import (
    NULL_SINK,
    CallbackSink,
    Informer,
    Sink,
    dra_informers,
    fan_out,
    gang_informers,
    pod_informer,
    store_sink,
    volume_informers,
)
from custom_scheduler.framework.dra_store import DRAStore
from custom_scheduler.framework.gang_store import GangStore
from custom_scheduler.framework.volumes import VolumeStore
from tests.builders import device_class_obj, make_pod, make_pod_group, make_pv


class RecordingSink:
    def __init__(self) -> None:
        self.calls: list[tuple[str, str]] = []

    def on_add(self, obj: Pod) -> None:
        self.calls.append(("add", obj.name))

    def on_update(self, old: Pod, new: Pod) -> None:
        self.calls.append(("update", new.name))

    def on_delete(self, obj: Pod) -> None:
        self.calls.append(("delete", obj.name))


def _doc(name: str, rv: str) -> dict[str, Any]:
    o = make_pod(name).uid(f"uid-{name}").obj()
    o["metadata"]["resourceVersion"] = rv
    return o


def _informer(sink: Sink[Pod]) -> Informer[Pod]:
    return Informer(None, "/api/v1/pods", pod_from_json, lambda p: p.uid, sink, name="pods")  # type: ignore[arg-type]


def test_relist_emits_deletes_updates_and_adds() -> None:
    sink = RecordingSink()
    inf = _informer(sink)
    inf.replace([_doc("a", "1"), _doc("b", "1"), _doc("c", "1")], "10")
    sink.calls.clear()
    inf.replace([_doc("a", "1"), _doc("b", "7"), _doc("d", "8")], "20")
    assert sorted(sink.calls) == [("add", "d"), ("delete", "c"), ("update", "b")]
    assert sorted(p.name for p in inf.list()) == ["a", "b", "d"]


def test_watch_events_update_store() -> None:
    sink = RecordingSink()
    inf = _informer(sink)
    inf.on_event("ADDED", _doc("a", "1"))
    inf.on_event("MODIFIED", _doc("a", "2"))
    inf.on_event("DELETED", _doc("a", "3"))
    inf.on_event("DELETED", _doc("ghost", "4"))  # unknown delete still reaches the sink
    assert sink.calls == [("add", "a"), ("update", "a"), ("delete", "a"), ("delete", "ghost")]
    assert inf.list() == []


def test_every_store_change_moves_the_version() -> None:
    """Readers keep sums over namespace labels keyed by this version: each relist and each watch
    event must move it, or a relabelled namespace would go unseen."""
    inf = _informer(RecordingSink())
    seen = [inf.version]
    inf.replace([_doc("a", "1")], "10")
    seen.append(inf.version)
    for kind, rv in (("ADDED", "2"), ("MODIFIED", "3"), ("DELETED", "4")):
        inf.on_event(kind, _doc("b", rv))
        seen.append(inf.version)
    assert seen == sorted(set(seen)), seen


def test_malformed_object_is_skipped_not_fatal() -> None:
    sink = RecordingSink()
    inf = _informer(sink)
    bad = _doc("bad", "1")
    bad["spec"]["containers"][0]["resources"] = {"requests": {"cpu": "lots"}}
    inf.on_event("ADDED", bad)
    inf.replace([bad, _doc("ok", "1")], "5")
    assert sink.calls == [("add", "ok")]


# -- the sink adapter ----------------------------------------------------------------------------


def _at(doc: dict[str, Any], rv: str) -> dict[str, Any]:
    """``doc`` as the API server would send it at resourceVersion ``rv``."""
    return {**doc, "metadata": {**doc["metadata"], "resourceVersion": rv, "uid": f"uid-{doc['metadata']['name']}"}}


def _named(informers: list[Informer[Any]], name: str) -> Informer[Any]:
    return next(i for i in informers if i.name == name)


def _volumes() -> tuple[Informer[Any], Callable[[], str | None]]:
    store = VolumeStore()
    inf = _named(volume_informers(None, store, lambda r: {}), "persistentvolumes")  # type: ignore[arg-type]
    return inf, lambda: pv.resource_version if (pv := store.get_pv("pv-1")) else None


def _dra() -> tuple[Informer[Any], Callable[[], str | None]]:
    store = DRAStore()
    inf = _named(dra_informers(None, store, lambda r: {}), "deviceclasses")  # type: ignore[arg-type]
    return inf, lambda: c.resource_version if (c := store.device_class("gpu")) else None


def _gangs() -> tuple[Informer[Any], Callable[[], str | None]]:
    store = GangStore()
    inf = _named(gang_informers(None, store, lambda r: {}), "podgroups")  # type: ignore[arg-type]
    return inf, lambda: g.resource_version if (g := store.get("default/pg-1")) else None


@pytest.mark.parametrize(
    ("build", "doc"),
    [
        pytest.param(_volumes, make_pv("pv-1").obj(), id="volume-store"),
        pytest.param(_dra, device_class_obj("gpu"), id="dra-store"),
        pytest.param(_gangs, make_pod_group("pg-1").obj(), id="gang-store"),
    ],
)
def test_store_informers_keep_the_latest_version_in_their_store(
    build: Callable[[], tuple[Informer[Any], Callable[[], str | None]]], doc: dict[str, Any]
) -> None:
    """Add and update put the new version, delete removes it: the same for every store."""
    inf, version_in_store = build()
    seen = []
    for kind, rv in (("ADDED", "1"), ("MODIFIED", "2"), ("DELETED", "3")):
        inf.on_event(kind, _at(doc, rv))
        seen.append(version_in_store())
    assert seen == ["1", "2", None]


def test_fan_out_feeds_the_gang_member_index_before_the_scheduler() -> None:
    """The daemon's pod sink: a member is counted by the time the scheduler's handler runs."""
    gangs = GangStore()
    group = make_pod_group("g", min_count=1).build()
    gangs.put(group)
    counted: list[tuple[str, int]] = []

    def scheduler(event: str) -> Callable[..., None]:
        return lambda *pods: counted.append((event, gangs.member_count(group)))

    sink = fan_out(
        CallbackSink(gangs.member_added, gangs.member_updated, gangs.member_deleted),
        CallbackSink(scheduler("add"), scheduler("update"), scheduler("delete")),
    )
    inf = pod_informer(None, sink)  # type: ignore[arg-type]
    doc = make_pod("m").uid("uid-m").scheduling_group("g").obj()
    for kind, rv in (("ADDED", "1"), ("MODIFIED", "2"), ("DELETED", "3")):
        inf.on_event(kind, _at(doc, rv))
    assert counted == [("add", 1), ("update", 1), ("delete", 0)]


def test_a_failing_sink_stops_the_ones_after_it_for_that_event_only() -> None:
    calls: list[str] = []

    def first(obj: Pod) -> None:
        calls.append(f"first:{obj.name}")
        if obj.name == "bad":
            raise RuntimeError("handler bug")

    second: CallbackSink[Pod] = store_sink(lambda p: calls.append(f"second:{p.name}"), lambda p: None)
    inf = _informer(fan_out(CallbackSink(first, lambda o, n: None, lambda o: None), second))
    inf.on_event("ADDED", _doc("bad", "1"))
    inf.on_event("ADDED", _doc("good", "1"))
    assert calls == ["first:bad", "first:good", "second:good"]
    assert sorted(p.name for p in inf.list()) == ["bad", "good"]


def test_null_sink_informer_is_a_lister_only() -> None:
    inf: Informer[Pod] = Informer(None, "/api/v1/pods", pod_from_json, lambda p: p.uid, NULL_SINK, name="pods")  # type: ignore[arg-type]
    inf.replace([_doc("a", "1"), _doc("b", "1")], "10")
    inf.on_event("DELETED", _doc("a", "2"))
    assert [p.name for p in inf.list()] == ["b"]
