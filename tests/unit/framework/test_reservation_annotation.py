"""The reservation annotation's codec: what is written, what is read back, what is refused."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from custom_scheduler.api import podgroup as gang
from custom_scheduler.framework import reservation_annotation as ra
from custom_scheduler.framework import reservations as rv
from tests.builders import make_crd_pod_group, make_pod_group

GPU = "nvidia.com/gpu"
T0 = 1796525400.0  # 2026-12-06T02:50:00Z


def _reservation(start: float = T0 + 40, **amounts: dict[str, int]) -> rv.Reservation:
    held = amounts or {"n1": {GPU: 8, "pods": 1}}
    return rv.Reservation("native:ns/g", "p", "rack=r1", held, start, T0, T0 + 600)


@pytest.mark.parametrize(
    ("r", "nodes"),
    [
        pytest.param(_reservation(), {"n1": {GPU: "8", "pods": "1"}}, id="gpus"),
        pytest.param(
            _reservation(n1={"cpu": 1500, "memory": 4 << 30, "ephemeral-storage": 10**9, "hugepages-2Mi": 2 << 20}),
            {"n1": {"cpu": "1500m", "memory": "4Gi", "ephemeral-storage": "1000000000", "hugepages-2Mi": "2Mi"}},
            id="quantities-as-kubectl-writes-them",
        ),
        pytest.param(
            _reservation(n2={GPU: 8, "cpu": 2000}, n1={GPU: 4}),
            {"n1": {GPU: "4"}, "n2": {"cpu": "2", GPU: "8"}},
            id="several-nodes",
        ),
        pytest.param(_reservation(rv.NEVER), {"n1": {GPU: "8", "pods": "1"}}, id="unknown-expected-start"),
    ],
)
def test_encode_then_decode_gives_the_reservation_back(r: rv.Reservation, nodes: dict[str, Any]) -> None:
    raw = ra.encode(r, "sched-0_abc")
    doc = json.loads(raw)
    assert doc["nodes"] == nodes
    assert doc["expires"] == "2026-12-06T03:00:00Z"
    assert doc["expectedStart"] == (None if r.expected_start == rv.NEVER else "2026-12-06T02:50:40Z")
    rec = ra.decode(raw)
    assert isinstance(rec, ra.Record)
    assert (rec.holder, rec.profile, rec.domain) == ("sched-0_abc", "p", "rack=r1")
    back = rec.reservation("native:ns/g")
    assert (back.created, back.expected_start, back.expires) == (r.created, r.expected_start, r.expires)
    assert back.amounts == r.amounts
    assert ra.encode(back, "sched-0_abc") == raw, "the same reservation is the same string"


def test_times_are_whole_seconds() -> None:
    """The annotation keeps the seconds the Event and FailedScheduling texts show."""
    r = _reservation(T0 + 40.9)
    r.expires = T0 + 600.7
    rec = ra.decode(ra.encode(r, ""))
    assert isinstance(rec, ra.Record)
    assert (rec.expected_start, rec.expires) == (T0 + 40, T0 + 600)


def _valid() -> dict[str, Any]:
    doc: dict[str, Any] = json.loads(ra.encode(_reservation(), "h"))
    return doc


def _with(**changes: Any) -> str:
    doc = _valid()
    for k, v in changes.items():
        if v is _DROP:
            doc.pop(k)
        else:
            doc[k] = v
    return json.dumps(doc)


_DROP = object()


@pytest.mark.parametrize(
    ("raw", "why"),
    [
        pytest.param("", "not JSON", id="empty"),
        pytest.param("{not json", "not JSON", id="not-json"),
        pytest.param("[1, 2]", "not a JSON object", id="a-list"),
        pytest.param('"reserved"', "not a JSON object", id="a-string"),
        pytest.param('{"nodes": ["a"], "until": "tomorrow"}', "version must be 1", id="foreign-format"),
        pytest.param(_with(version=2), "version must be 1", id="newer-version"),
        pytest.param(_with(version="1"), "version must be 1", id="version-as-string"),
        pytest.param(_with(holder=7), "must be strings", id="holder-not-a-string"),
        pytest.param(_with(expires=_DROP), "expires must be an RFC 3339 time", id="no-expiry"),
        pytest.param(_with(created="yesterday"), "created must be an RFC 3339 time", id="bad-time"),
        pytest.param(_with(expectedStart=12), "expectedStart must be", id="epoch-number"),
        pytest.param(_with(nodes={}), "non-empty map", id="no-nodes"),
        pytest.param(_with(nodes=[{"n1": {}}]), "non-empty map", id="nodes-a-list"),
        pytest.param(_with(nodes={"n1": "8"}), "must map resource names", id="amounts-not-a-map"),
        pytest.param(_with(nodes={"n1": {GPU: "eight"}}), "invalid quantity", id="bad-quantity"),
        pytest.param(_with(nodes={"n1": {GPU: "-1"}}), "must not be negative", id="negative"),
        pytest.param(_with(nodes={"n1": {GPU: True}}), "a quantity must be a string", id="boolean"),
        pytest.param(_with(nodes={"n1": {GPU: 1.5}}), "a quantity must be a string", id="float"),
        pytest.param(_with(nodes={"n1": {GPU: "9e30"}}), "out of range", id="huge"),
        pytest.param("[" * 100_000 + "]" * 100_000, "", id="deeply-nested"),
        pytest.param(" " * (ra.MAX_LENGTH + 1), "longer than", id="too-long"),
    ],
)
def test_a_value_that_is_not_our_reservation_is_refused_never_raised(raw: str, why: str) -> None:
    got = ra.decode(raw)
    assert isinstance(got, ra.Invalid)
    assert why in got.why


@given(
    st.recursive(
        st.none() | st.booleans() | st.integers() | st.text(max_size=20),
        lambda c: st.lists(c) | st.dictionaries(st.text(max_size=10), c),
        max_leaves=20,
    )
)
def test_any_json_decodes_or_is_refused(doc: Any) -> None:
    raw = json.dumps(doc)
    assert isinstance(ra.decode(raw), ra.Record | ra.Invalid)
    v = _valid()
    v["nodes"] = {"n1": doc}
    assert isinstance(ra.decode(json.dumps(v)), ra.Record | ra.Invalid)


@pytest.mark.parametrize(
    ("builder", "api"),
    [
        pytest.param(make_pod_group("g", "ns"), gang.NATIVE, id="native"),
        pytest.param(make_crd_pod_group("g", "ns"), gang.CRD, id="crd"),
    ],
)
def test_both_podgroup_apis_carry_the_raw_annotation(builder: Any, api: str) -> None:
    """The PodGroup keeps the value as written, whatever it is: a bad one never makes the group
    malformed (GangScheduling would then hold its members back)."""
    assert builder.build().reservation is None
    pg = builder.set("metadata.annotations", {ra.ANNOTATION: "{not json"}).build()
    assert (pg.api, pg.reservation) == (api, "{not json")
    assert builder.set("metadata.annotations", {ra.ANNOTATION: 5}).build().reservation is None
