"""Informer bookkeeping: a re-list (after 410 Gone) turns vanished objects into deletes."""

from __future__ import annotations

from typing import Any

from custom_scheduler.api.model import Pod, pod_from_json
from custom_scheduler.core.informers import Informer
from tests.builders import make_pod


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


def _informer(sink: RecordingSink) -> Informer[Pod]:
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


def test_malformed_object_is_skipped_not_fatal() -> None:
    sink = RecordingSink()
    inf = _informer(sink)
    bad = _doc("bad", "1")
    bad["spec"]["containers"][0]["resources"] = {"requests": {"cpu": "lots"}}
    inf.on_event("ADDED", bad)
    inf.replace([bad, _doc("ok", "1")], "5")
    assert sink.calls == [("add", "ok")]
