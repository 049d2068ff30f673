"""The extender wire protocol and the cycle's extender rules, without a network.

The answers are tables of bodies as an extender would send them (well-formed, and each way one can
be malformed); :class:`CannedExtender` replaces only ``send`` (the HTTP POST), so the rules of
:class:`Extenders` (interest, ignorable errors, order, scoring arithmetic, victims) run unchanged.
"""

from __future__ import annotations

import json
import random
import urllib.error
from collections.abc import Callable, Mapping
from typing import Any

import pytest

from custom_scheduler.api.model import Pod
from custom_scheduler.config import load_config
from custom_scheduler.config.schema import Extender, ManagedResource
from custom_scheduler.core.algorithm import Algorithm
from custom_scheduler.core.cache import Cache
from custom_scheduler.framework import extender_wire as wire
from custom_scheduler.framework.extender import Extenders, HTTPExtender, _transport_error, extenders_of
from custom_scheduler.framework.extender_wire import ExtenderError, FilterAnswer, MetaVictims
from custom_scheduler.framework.profiles import build_frameworks
from custom_scheduler.framework.runtime import Framework
from custom_scheduler.framework.types import Code, CycleState, FitError, NodeInfo, Snapshot, Status
from custom_scheduler.plugins.builtin import full_registry
from tests.builders import make_node, make_pod

E = "http://ext:8888/prefix"
SENT = ("n1", "n2", "n3")


def _body(doc: object) -> bytes:
    return doc if isinstance(doc, bytes) else json.dumps(doc).encode()


# --- parse_filter --------------------------------------------------------------------------------

FILTER_OK = [
    pytest.param({"NodeNames": ["n1", "n3"]}, True, FilterAnswer(("n1", "n3"), {}, {}), id="names"),
    pytest.param(
        {"NodeNames": ["n1"], "FailedNodes": {"n2": "busy"}, "FailedAndUnresolvableNodes": {"n3": "gone"}},
        True,
        FilterAnswer(("n1",), {"n2": "busy"}, {"n3": "gone"}),
        id="both-maps",
    ),
    pytest.param(
        {"Nodes": {"items": [{"metadata": {"name": "n2"}}]}}, False, FilterAnswer(("n2",), {}, {}), id="node-list"
    ),
    # Upstream reads NodeNames only from a node-cache-capable extender: none passed.
    pytest.param({"NodeNames": ["n1"]}, False, FilterAnswer((), {}, {}), id="names-without-cache"),
    pytest.param(
        {"Nodes": {"items": [{"metadata": {"name": "n1"}}]}, "NodeNames": None},
        True,
        FilterAnswer(("n1",), {}, {}),
        id="cache-capable-answers-node-list",
    ),
    pytest.param(
        {"nodenames": ["n2"], "failednodes": {"n1": "x"}}, True, FilterAnswer(("n2",), {"n1": "x"}, {}), id="case"
    ),
    pytest.param(None, True, FilterAnswer((), {}, {}), id="null"),
    pytest.param({"NodeNames": [], "Error": ""}, True, FilterAnswer((), {}, {}), id="empty-error"),
]


@pytest.mark.parametrize(("answer", "cache", "want"), FILTER_OK)
def test_parse_filter(answer: object, cache: bool, want: FilterAnswer) -> None:
    assert wire.parse_filter(_body(answer), E, "filter", SENT, cache) == want


FILTER_BAD = [
    pytest.param(b"{nope", f'extender "{E}" filter: invalid JSON in the answer: ', id="invalid-json"),
    pytest.param({"Error": "license down"}, f'extender "{E}" filter: license down', id="error-string"),
    pytest.param({"Error": 3}, f'extender "{E}" filter: Error must be a string', id="error-type"),
    pytest.param(
        {"NodeNames": ["n1", "zz"]},
        f'extender "{E}" claims a filtered node "zz" which is not found in the input node list',
        id="unknown-node",
    ),
    pytest.param(
        {"NodeNames": [7]},
        f'extender "{E}" claims a filtered node "7" which is not found in the input node list',
        id="name-type",
    ),
    pytest.param({"NodeNames": "n1"}, f'extender "{E}" filter: NodeNames must be a list', id="names-type"),
    pytest.param({"FailedNodes": {"n1": 1}}, "FailedNodes must map node names to strings", id="failed-type"),
    pytest.param([], f'extender "{E}" filter: expected an ExtenderFilterResult object, got list', id="not-object"),
]


@pytest.mark.parametrize(("answer", "message"), FILTER_BAD)
def test_parse_filter_refuses(answer: object, message: str) -> None:
    with pytest.raises(ExtenderError) as info:
        wire.parse_filter(_body(answer), E, "filter", SENT, True)
    assert message in str(info.value)
    assert E in str(info.value)


def test_node_list_with_unknown_node_is_refused() -> None:
    with pytest.raises(ExtenderError, match="claims a filtered node"):
        wire.parse_filter(_body({"Nodes": {"items": [{"metadata": {"name": "zz"}}]}}), E, "f", SENT, False)


# --- the other answers ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("answer", "want"),
    [
        pytest.param([{"Host": "n1", "Score": 10}, {"Host": "n2", "Score": 0}], [("n1", 10), ("n2", 0)], id="ok"),
        pytest.param([{"host": "n1", "score": 3}], [("n1", 3)], id="case"),
        pytest.param([{"Host": "n1"}], [("n1", 0)], id="no-score"),
        pytest.param(None, [], id="null"),
    ],
)
def test_parse_priorities(answer: object, want: list[tuple[str, int]]) -> None:
    assert wire.parse_priorities(_body(answer), E, "prio") == want


@pytest.mark.parametrize(
    "answer",
    [
        pytest.param(b"<html>", id="invalid-json"),
        pytest.param({"Host": "n1"}, id="object"),
        pytest.param([{"Host": "n1", "Score": "10"}], id="score-string"),
        pytest.param([{"Host": "n1", "Score": 1.5}], id="score-float"),
        pytest.param([{"Host": "n1", "Score": True}], id="score-bool"),
        pytest.param([{"Host": 1, "Score": 1}], id="host-type"),
    ],
)
def test_parse_priorities_refuses(answer: object) -> None:
    with pytest.raises(ExtenderError, match=f'extender "{E}" prio'):
        wire.parse_priorities(_body(answer), E, "prio")


@pytest.mark.parametrize(
    ("answer", "error"),
    [
        pytest.param({}, None, id="ok"),
        pytest.param(None, None, id="null"),
        pytest.param({"Error": ""}, None, id="empty-error"),
        pytest.param({"Error": "quota"}, f'extender "{E}" bind: quota', id="error"),
        pytest.param(b"", f'extender "{E}" bind: invalid JSON', id="empty-body"),
    ],
)
def test_parse_binding(answer: object, error: str | None) -> None:
    if error is None:
        wire.parse_binding(_body(answer), E, "bind")
        return
    with pytest.raises(ExtenderError) as info:
        wire.parse_binding(_body(answer), E, "bind")
    assert str(info.value).startswith(error)


@pytest.mark.parametrize(
    ("answer", "want"),
    [
        pytest.param(
            {"NodeNameToMetaVictims": {"n1": {"Pods": [{"UID": "u1"}], "NumPDBViolations": 2}}},
            {"n1": MetaVictims(("u1",), 2)},
            id="ok",
        ),
        pytest.param({"NodeNameToMetaVictims": {"n1": None}}, {"n1": MetaVictims((), 0)}, id="null-victims"),
        pytest.param({"NodeNameToMetaVictims": None}, {}, id="null-map"),
        pytest.param({}, {}, id="empty"),
    ],
)
def test_parse_preemption(answer: object, want: dict[str, MetaVictims]) -> None:
    assert wire.parse_preemption(_body(answer), E, "preempt") == want


@pytest.mark.parametrize(
    "answer",
    [
        pytest.param({"NodeNameToMetaVictims": []}, id="map-type"),
        pytest.param({"NodeNameToMetaVictims": {"n1": {"Pods": [{"UID": 1}]}}}, id="uid-type"),
        pytest.param({"NodeNameToMetaVictims": {"n1": {"NumPDBViolations": "2"}}}, id="pdb-type"),
        pytest.param({"NodeNameToMetaVictims": {"n1": 5}}, id="victims-type"),
    ],
)
def test_parse_preemption_refuses(answer: object) -> None:
    with pytest.raises(ExtenderError, match=E):
        wire.parse_preemption(_body(answer), E, "preempt")


# --- what goes out -------------------------------------------------------------------------------


def test_args_send_names_or_the_node_list() -> None:
    pod = {"metadata": {"name": "p"}}
    assert wire.filter_args(pod, None, ["a"]) == {"Pod": pod, "Nodes": None, "NodeNames": ["a"]}
    nodes = [{"metadata": {"name": "a"}}]
    assert wire.filter_args(pod, nodes, None) == {
        "Pod": pod,
        "Nodes": {"metadata": {}, "items": nodes},
        "NodeNames": None,
    }


def test_preemption_args_meta_victims_when_node_cache_capable() -> None:
    victims = {"n1": ([{"metadata": {"uid": "u1"}}], ["u1"], 1)}
    meta = wire.preemption_args({}, victims, True)
    assert meta["NodeNameToMetaVictims"] == {"n1": {"Pods": [{"UID": "u1"}], "NumPDBViolations": 1}}
    assert meta["NodeNameToVictims"] is None
    full = wire.preemption_args({}, victims, False)
    assert full["NodeNameToVictims"] == {"n1": {"Pods": [{"metadata": {"uid": "u1"}}], "NumPDBViolations": 1}}
    assert full["NodeNameToMetaVictims"] is None


def test_pod_and_node_rebuilt_from_the_projections() -> None:
    pod = make_pod("p").label("app", "web").req(cpu="500m", memory="1Gi").build()
    doc = wire.pod_to_json(pod)
    assert doc["metadata"]["name"] == "p"
    assert doc["metadata"]["labels"] == {"app": "web"}
    assert doc["spec"]["containers"][0]["resources"]["requests"] == {"cpu": "500m", "memory": str(2**30)}
    node = wire.node_to_json(make_node("n").capacity(cpu="4", pods="10").taint("k", "v").build())
    assert node["metadata"]["name"] == "n"
    assert node["status"]["allocatable"]["cpu"] == "4000m"
    assert node["status"]["allocatable"]["pods"] == "10"
    assert node["spec"]["taints"] == [{"key": "k", "value": "v", "effect": "NoSchedule"}]


@pytest.mark.parametrize(
    ("error", "want"),
    [
        pytest.param(
            ConnectionRefusedError(111, "refused"),
            'Post "http://h:1/f": dial tcp h:1: connect: connection refused',
            id="refused",
        ),
        pytest.param(
            TimeoutError("timed out"),
            'Post "http://h:1/f": context deadline exceeded (Client.Timeout exceeded while awaiting headers)',
            id="timeout",
        ),
        pytest.param(
            urllib.error.URLError(TimeoutError("x")),
            'Post "http://h:1/f": context deadline exceeded',
            id="connect-timeout",
        ),
        pytest.param(OSError("boom"), 'Post "http://h:1/f": boom', id="other"),
    ],
)
def test_transport_errors_read_like_go(error: Exception, want: str) -> None:
    assert _transport_error("http://h:1/f", error).startswith(want)


# --- the cycle's rules ---------------------------------------------------------------------------


class CannedExtender(HTTPExtender):
    """An HTTPExtender whose POST answers from ``answers[verb](args)`` (or raises it)."""

    def __init__(self, cfg: Extender, answers: Mapping[str, Callable[[dict[str, Any]], object]]) -> None:
        super().__init__(cfg)
        self.answers = answers
        self.sent: list[tuple[str, dict[str, Any]]] = []

    def send(self, verb: str, args: object) -> bytes:
        assert isinstance(args, dict)
        self.sent.append((verb, args))
        got = self.answers[verb](args)
        if isinstance(got, ExtenderError):
            raise got
        return _body(got)


def ext(url: str = E, **kw: Any) -> Extender:
    return Extender(url_prefix=url, **kw)


def infos(*names: str) -> list[NodeInfo]:
    out = []
    for n in names:
        ni = NodeInfo(make_node(n).build())
        out.append(ni)
    return out


WIDGET = "example.com/widget"


@pytest.mark.parametrize(
    ("managed", "requests", "want"),
    [
        pytest.param((), {}, True, id="manages-nothing"),
        pytest.param((WIDGET,), {WIDGET: "1"}, True, id="requests-it"),
        pytest.param((WIDGET,), {"cpu": "1"}, False, id="requests-other"),
        pytest.param((WIDGET, "example.com/gadget"), {"example.com/gadget": "2"}, True, id="one-of"),
    ],
)
def test_is_interested(managed: tuple[str, ...], requests: dict[str, str], want: bool) -> None:
    e = HTTPExtender(ext(managed_resources=tuple(ManagedResource(m) for m in managed)))
    assert e.is_interested(make_pod("p").req_named(requests).build()) is want


def test_filter_chains_extenders_and_records_reasons() -> None:
    first = CannedExtender(
        ext("http://a", filter_verb="f", node_cache_capable=True),
        {"f": lambda a: {"NodeNames": ["n1", "n2"], "FailedNodes": {"n3": "busy"}}},
    )
    second = CannedExtender(
        ext("http://b", filter_verb="f", node_cache_capable=True),
        {
            "f": lambda a: {
                "NodeNames": ["n2"],
                "FailedAndUnresolvableNodes": {"n1": "gone"},
                "FailedNodes": {"n1": "x"},
            }
        },
    )
    statuses: dict[str, Status] = {}
    kept = Extenders([first, second]).filter(make_pod("p").build(), infos(*SENT), statuses)
    assert [ni.name for ni in kept] == ["n2"]
    assert second.sent[0][1]["NodeNames"] == ["n1", "n2"]
    assert statuses["n3"] == Status.unschedulable("busy")
    assert statuses["n1"].code is Code.UNSCHEDULABLE_AND_UNRESOLVABLE  # the unresolvable map wins
    assert statuses["n1"].plugin == "Extender"


def test_filter_errors_ignorable_skipped_others_raised() -> None:
    down = ExtenderError('Post "http://down/f": boom')
    ignorable = CannedExtender(ext("http://down", filter_verb="f", ignorable=True), {"f": lambda a: down})
    strict = CannedExtender(ext("http://strict", filter_verb="f"), {"f": lambda a: {"Error": "no"}})
    # Ignorable extenders run last whatever the configured order.
    exts = Extenders([ignorable, strict])
    assert [e.name for e in exts] == ["http://strict", "http://down"]
    with pytest.raises(ExtenderError, match='extender "http://strict" f: no'):
        exts.filter(make_pod("p").build(), infos("n1"), {})
    kept = Extenders([ignorable]).filter(make_pod("p").build(), infos("n1"), {})
    assert [ni.name for ni in kept] == ["n1"]


def test_uninterested_extender_is_not_called() -> None:
    e = CannedExtender(ext(filter_verb="f", managed_resources=(ManagedResource(WIDGET),)), {})
    kept = Extenders([e]).filter(make_pod("p").build(), infos("n1"), {})
    assert [ni.name for ni in kept] == ["n1"]
    assert e.sent == []


def test_prioritize_scales_by_weight_and_skips_failures() -> None:
    good = CannedExtender(
        ext("http://good", prioritize_verb="p", weight=3),
        {"p": lambda a: [{"Host": "n1", "Score": 10}, {"Host": "n2", "Score": 4}, {"Host": "zz", "Score": 9}]},
    )
    bad = CannedExtender(ext("http://bad", prioritize_verb="p", weight=50), {"p": lambda a: b"not json"})
    got = Extenders([good, bad]).prioritize(make_pod("p").build(), infos("n1", "n2"))
    assert got["n1"] == {"http://good": (10, 300)}  # 10 x weight 3 x (100 / 10)
    assert got["n2"] == {"http://good": (4, 120)}
    assert "http://bad" not in got.get("n1", {})
    # The full node list went out (not nodeCacheCapable).
    assert [n["metadata"]["name"] for n in good.sent[0][1]["Nodes"]["items"]] == ["n1", "n2"]


@pytest.mark.parametrize(
    ("answers", "want"),
    [
        pytest.param({"http://a": {}}, (True, None), id="first-binder-binds"),
        pytest.param({"http://a": {"Error": "no"}}, (True, 'extender "http://a" b: no'), id="failure-is-final"),
    ],
)
def test_bind_first_interested_binder(answers: dict[str, object], want: tuple[bool, str | None]) -> None:
    a = CannedExtender(ext("http://a", bind_verb="b"), {"b": lambda args: answers["http://a"]})
    taken, err = Extenders([a]).bind(make_pod("p").build(), "n1")
    assert (taken, None if err is None else str(err)) == want
    assert a.sent[0][1]["Node"] == "n1"


def test_bind_ignorable_failure_falls_through_to_the_plugins() -> None:
    a = CannedExtender(ext("http://a", bind_verb="b", ignorable=True), {"b": lambda args: {"Error": "no"}})
    assert Extenders([a]).bind(make_pod("p").build(), "n1") == (False, None)
    assert Extenders([]).bind(make_pod("p").build(), "n1") == (False, None)


def _victims_setup() -> tuple[list[NodeInfo], Pod, Pod]:
    nodes = infos("n1", "n2")
    v1, v2 = make_pod("v1").node("n1").build(), make_pod("v2").node("n2").build()
    nodes[0].add_pod(v1)
    nodes[1].add_pod(v2)
    return nodes, v1, v2


def test_process_preemption_narrows_and_maps_uids_back() -> None:
    nodes, v1, v2 = _victims_setup()
    by_name = {ni.name: ni for ni in nodes}
    e = CannedExtender(
        ext(preempt_verb="pre", node_cache_capable=True),
        {"pre": lambda a: {"NodeNameToMetaVictims": {"n2": {"Pods": [{"UID": v2.uid}], "NumPDBViolations": 1}}}},
    )
    got = Extenders([e]).process_preemption(make_pod("p").build(), {"n1": ([v1], 0), "n2": ([v2], 0)}, by_name.get)
    assert got == {"n2": ([v2], 1)}
    assert e.sent[0][1]["NodeNameToMetaVictims"]["n1"] == {"Pods": [{"UID": v1.uid}], "NumPDBViolations": 0}


@pytest.mark.parametrize(
    ("answer", "ignorable", "want"),
    [
        pytest.param(
            {"n1": {"Pods": [{"UID": "nope"}]}}, False, "claims to preempt pod (UID: nope) on node: n1", id="pod"
        ),
        pytest.param({"n9": {"Pods": []}}, False, 'nodeinfo not found for node name "n9"', id="node"),
        pytest.param({"n1": {"Pods": []}}, False, 'expected at least one victim pod on node "n1"', id="no-victims"),
        pytest.param({"n1": {"Pods": [{"UID": "nope"}]}}, True, None, id="ignorable-skipped"),
    ],
)
def test_process_preemption_refuses_unknown(answer: dict[str, Any], ignorable: bool, want: str | None) -> None:
    nodes, v1, _ = _victims_setup()
    by_name = {ni.name: ni for ni in nodes}
    e = CannedExtender(
        ext(preempt_verb="pre", ignorable=ignorable), {"pre": lambda a: {"NodeNameToMetaVictims": answer}}
    )
    victims = {"n1": ([v1], 0)}
    if want is None:
        assert Extenders([e]).process_preemption(make_pod("p").build(), victims, by_name.get) == victims
        return
    with pytest.raises(ExtenderError, match=want.replace("(", r"\(").replace(")", r"\)")):
        Extenders([e]).process_preemption(make_pod("p").build(), victims, by_name.get)


def test_handles_without_extenders_lend_none() -> None:
    assert not extenders_of(object())


# --- in the algorithm ----------------------------------------------------------------------------

CONFIG = """
apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
profiles: [{schedulerName: custom-scheduler}]
"""


def _algorithm_setup(*exts: HTTPExtender) -> tuple[Framework, Snapshot]:
    cache = Cache()
    for name in ("n1", "n2", "n3"):
        cache.add_node(make_node(name).build())
    snap = cache.snapshot()
    cfg = load_config(CONFIG, full_registry())
    fwks = build_frameworks(cfg.profiles, full_registry(), snap, client=None, extenders=Extenders(list(exts)))
    return fwks["custom-scheduler"], snap


def _preferring(node: str) -> CannedExtender:
    return CannedExtender(
        ext(prioritize_verb="p", weight=100, node_cache_capable=True),
        {"p": lambda a: [{"Host": n, "Score": 10 if n == node else 0} for n in a["NodeNames"]]},
    )


@pytest.mark.parametrize("detail", [False, True], ids=["fast", "detail"])
def test_extender_priorities_join_the_totals(detail: bool) -> None:
    """10 x 100 x 10 points outweigh every plugin: both paths pick the extender's node, and the
    detail reports its score under the extender's name."""
    fwk, snap = _algorithm_setup(_preferring("n3"))
    result = Algorithm(random.Random(1)).schedule(fwk, CycleState(), make_pod("p").build(), snap, detail=detail)
    assert result.node == "n3"
    if detail:
        n3 = next(s for s in result.scores if s.name == "n3")
        assert (n3.raw[E], n3.normalized[E], n3.weighted[E]) == (10, 100, 10_000)
        assert n3.total == 10_000 + sum(v for k, v in n3.weighted.items() if k != E)


def test_extender_rejections_make_the_fit_error() -> None:
    """FailedNodes reasons count in the histogram; a node dropped without one counts nothing; the
    pod records the Extender as what rejected it (any cluster event may help)."""
    rejecting = CannedExtender(
        ext(filter_verb="f", node_cache_capable=True),
        {
            "f": lambda a: {
                "NodeNames": [],
                "FailedNodes": {"n1": "no license"},
                "FailedAndUnresolvableNodes": {"n2": "rack"},
            }
        },
    )
    fwk, snap = _algorithm_setup(rejecting)
    with pytest.raises(FitError) as info:
        Algorithm(random.Random(1)).schedule(fwk, CycleState(), make_pod("p").build(), snap)
    assert str(info.value) == "0/3 nodes are available: 1 no license, 1 rack."
    assert info.value.rejecting_plugins == {"Extender"}
    assert info.value.statuses["n3"].code is Code.UNSCHEDULABLE_AND_UNRESOLVABLE


def test_a_failing_extender_fails_the_attempt_with_its_error() -> None:
    down = CannedExtender(ext(filter_verb="f"), {"f": lambda a: ExtenderError('Post "x": refused')})
    fwk, snap = _algorithm_setup(down)
    with pytest.raises(ExtenderError, match='Post "x": refused'):
        Algorithm(random.Random(1)).schedule(fwk, CycleState(), make_pod("p").build(), snap)
