"""Bad input: random and malformed Pod and Node JSON through the model, the informers and one
scheduling cycle (hypothesis).

A daemon's informer threads parse whatever the API server sends; a conversion webhook, an
aggregated API or a bug can send what validation would have refused. The properties:

- the projections return a value or raise :class:`MalformedObject`, nothing else;
- the informer never raises: a refused object is skipped, reported once per uid and
  resourceVersion (a replay or re-list logs nothing new), and the next event is processed;
- what does parse goes through the scheduler's sinks and one scheduling cycle, offline, without
  an exception, and leaves the cache consistent.

The examples that found bugs are pinned below as table rows (``test_found_by_the_fuzzer``).
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import orjson
import pytest
import structlog
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from custom_scheduler import config
from custom_scheduler.api.model import MalformedObject, Node, Pod, node_from_json, pod_from_json
from custom_scheduler.core import queue as q
from custom_scheduler.core.cache import Cache
from custom_scheduler.core.informers import Informer
from custom_scheduler.core.scheduler import Scheduler
from custom_scheduler.framework.profiles import build_frameworks
from custom_scheduler.kube.watch import Reflector
from custom_scheduler.plugins.builtin import full_registry
from tests.builders import make_node, make_pod

ODD_QUANTITIES = [
    "1.5.3Gi",
    "-1",
    "-0",
    "1e999999",
    "1E999997",
    "NaN",
    "0x10",
    "",
    " ",
    "1Ei",
    "9223372036854775808",
    "500m",
]
SCALARS = (
    st.none()
    | st.booleans()
    | st.integers(-(2**70), 2**70)
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.text(max_size=12)
    | st.sampled_from(ODD_QUANTITIES)
)
JUNK = st.recursive(
    SCALARS,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=12,
)

CONFIG = """
apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
profiles:
- schedulerName: custom-scheduler
"""


def _base_pod() -> dict[str, Any]:
    o = (
        make_pod("fuzz")
        .scheduler("custom-scheduler")
        .uid("uid-fuzz")
        .req(cpu="100m", memory="64Mi")
        .label("app", "x")
        .obj()
    )
    o["metadata"]["resourceVersion"] = "1"
    spec = o["spec"]
    spec["tolerations"] = [{"key": "k", "operator": "Exists", "effect": "NoSchedule"}]
    spec["nodeSelector"] = {"zone": "a"}
    spec["affinity"] = {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": []}}
    spec["topologySpreadConstraints"] = [
        {"maxSkew": 1, "topologyKey": "zone", "whenUnsatisfiable": "ScheduleAnyway", "labelSelector": {}}
    ]
    spec["containers"][0]["ports"] = [{"containerPort": 80, "hostPort": 8080}]
    spec["initContainers"] = [{"name": "i", "image": "busybox", "resources": {"requests": {"cpu": "1"}}}]
    return o


def _base_node() -> dict[str, Any]:
    o = make_node("fuzz-node").label("zone", "a").obj()
    o["metadata"].update(uid="uid-node", resourceVersion="1")
    o["spec"]["taints"] = [{"key": "k", "value": "v", "effect": "NoSchedule"}]
    o["status"]["images"] = [{"names": ["busybox:latest"], "sizeBytes": 1000}]
    return o


def _paths(doc: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    out = [prefix]
    if isinstance(doc, dict):
        for k, v in doc.items():
            out += _paths(v, (*prefix, k))
    elif isinstance(doc, list):
        for i, v in enumerate(doc):
            out += _paths(v, (*prefix, i))
    return out


@st.composite
def mutated(draw: st.DrawFn, base: Callable[[], dict[str, Any]]) -> Any:
    """The valid base object with a few paths replaced by junk, deleted, or given unknown fields;
    sometimes the whole document is junk."""
    doc: Any = base()
    if draw(st.integers(0, 20)) == 0:
        return draw(JUNK)
    for _ in range(draw(st.integers(1, 4))):
        paths = _paths(doc)
        path = draw(st.sampled_from(paths))
        if not path:
            continue
        parent = doc
        for p in path[:-1]:
            parent = parent[p]
        action = draw(st.sampled_from(["junk", "null", "delete", "unknown", "huge"]))
        last = path[-1]
        if action == "junk":
            parent[last] = draw(JUNK)
        elif action == "null":
            parent[last] = None
        elif action == "delete" and isinstance(parent, dict):
            del parent[last]
        elif action == "unknown" and isinstance(parent[last], dict):
            parent[last][draw(st.text(min_size=1, max_size=8))] = draw(JUNK)
        elif action == "huge" and isinstance(parent[last], list) and parent[last]:
            parent[last] = parent[last] * draw(st.integers(50, 500))
    return doc


class Sink:
    def __init__(self, on: Callable[[str, Any], None]) -> None:
        self.on = on

    def on_add(self, obj: Any) -> None:
        self.on("add", obj)

    def on_update(self, old: Any, new: Any) -> None:
        self.on("update", new)

    def on_delete(self, obj: Any) -> None:
        self.on("delete", obj)


def _scheduler() -> Scheduler:
    registry = full_registry()
    cfg = config.load_config(CONFIG, registry)
    cache = Cache()
    queue = q.SchedulingQueue(lambda a, b: a.timestamp < b.timestamp)
    sched = Scheduler(profiles={}, cache=cache, queue=queue, writer=None, dry_run=True)
    sched.profiles = build_frameworks(cfg.profiles, registry, sched.snapshot, client=None)
    for i in range(3):
        cache.add_node(make_node(f"n{i}").label("zone", "a").build())
    return sched


def _project(kind: str, doc: Any) -> Pod | Node | None:
    fn = pod_from_json if kind == "pod" else node_from_json
    try:
        return fn(doc)
    except MalformedObject:
        return None  # the only exception allowed


def _through_daemon_paths(kind: str, doc: Any) -> None:
    """Informer (twice: a replay) → scheduler sinks → one cycle, as the daemon runs them."""
    sched = _scheduler()
    if kind == "pod":
        sink = Sink(lambda ev, p: sched.on_pod_add(p) if ev == "add" else sched.on_pod_update(p, p))
        inf: Informer[Any] = Informer(None, "/api/v1/pods", pod_from_json, lambda p: p.uid, sink, name="pods")  # type: ignore[arg-type]
    else:
        sink = Sink(lambda ev, n: sched.on_node_add(n) if ev == "add" else sched.on_node_update(n, n))
        inf = Informer(None, "/api/v1/nodes", node_from_json, lambda n: n.name, sink, name="nodes")  # type: ignore[arg-type]
    parsed = _project(kind, copy.deepcopy(doc))
    with structlog.testing.capture_logs() as logs:
        inf.on_event("ADDED", copy.deepcopy(doc))
        inf.on_event("MODIFIED", copy.deepcopy(doc))  # the same version replayed
        inf.replace([copy.deepcopy(doc)], "2")  # and re-listed
        inf.on_event("DELETED", copy.deepcopy(doc))
    skipped = [e for e in logs if e["event"] == "object_skipped"]
    crashed = [e for e in logs if e["event"] == "informer_handler_failed"]
    assert not crashed, crashed
    if parsed is None:
        assert len(skipped) == 1, "reported exactly once across replays and a re-list"
    else:
        assert skipped == []
    # One scheduling cycle with whatever made it in (plus a valid pod, for a fuzzed node).
    inf.on_event("ADDED", copy.deepcopy(doc))
    sched.queue.add(make_pod("probe").scheduler("custom-scheduler").req(cpu="10m").build())
    while (qpi := sched.queue.pop(timeout=0)) is not None:
        d = sched.schedule_one(qpi)
        assert d.result in ("scheduled", "unschedulable", "error", "skipped")
    assert sched.cache.check_invariants() == []


FUZZ = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@FUZZ
@given(mutated(_base_pod))
def test_fuzzed_pods_never_escape_the_daemon_paths(doc: Any) -> None:
    _through_daemon_paths("pod", doc)


@FUZZ
@given(mutated(_base_node))
def test_fuzzed_nodes_never_escape_the_daemon_paths(doc: Any) -> None:
    _through_daemon_paths("node", doc)


def _set(base: Callable[[], dict[str, Any]], path: str, value: Any) -> dict[str, Any]:
    doc = base()
    keys = [int(k) if k.isdigit() else k for k in path.split(".")]
    parent: Any = doc
    for k in keys[:-1]:
        parent = parent[k]
    parent[keys[-1]] = value
    return doc


@pytest.mark.parametrize(
    ("kind", "doc", "why"),
    [
        # Crashed the informer thread (AttributeError escaped the old (ValueError, TypeError, KeyError)).
        pytest.param("pod", _set(_base_pod, "spec.tolerations", [3]), "toleration not an object", id="toleration-int"),
        pytest.param("node", _set(_base_node, "spec.taints", ["x"]), "taint not an object", id="taint-str"),
        pytest.param("pod", ["not", "an", "object"], "document is a list", id="doc-list"),
        pytest.param("pod", _set(_base_pod, "metadata", "m"), "metadata is a string", id="metadata-str"),
        # Parsed, then crashed later: a sink (has_pod_affinity on a string) or a plugin.
        pytest.param("pod", _set(_base_pod, "spec.affinity", "x"), "affinity not an object", id="affinity-str"),
        pytest.param("pod", _set(_base_pod, "metadata.labels", {"a": 1}), "label value int", id="label-int"),
        pytest.param("pod", _set(_base_pod, "metadata.name", 7), "name int", id="name-int"),
        pytest.param("node", _set(_base_node, "metadata.name", None), "node without a name", id="node-no-name"),
        # Over-commit hazards: negative requests free room, huge ones overflow the int64 arrays.
        pytest.param(
            "pod", _set(_base_pod, "spec.containers.0.resources.requests.cpu", "-2"), "negative", id="cpu-negative"
        ),
        pytest.param("node", _set(_base_node, "status.allocatable.pods", -5), "negative", id="pods-negative"),
        pytest.param(
            "node", _set(_base_node, "status.allocatable.memory", "9223372036854775808"), "int64", id="memory-huge"
        ),
        pytest.param("pod", _set(_base_pod, "spec.containers.0.resources.requests.memory", "1.5.3Gi"), "q", id="q"),
        pytest.param("pod", _set(_base_pod, "spec.priority", 2**40), "priority beyond int32", id="priority-huge"),
        # decimal.Overflow (an ArithmeticError, not a ValueError) from "1E999997" x 1000 in to_milli.
        pytest.param(
            "pod", _set(_base_pod, "spec.initContainers.0.resources.requests.cpu", "1E999997"), "q", id="cpu-overflow"
        ),
    ],
)
def test_found_by_the_fuzzer(kind: str, doc: Any, why: str) -> None:
    """Each row was an escape before the fix; now: refused as MalformedObject, reported once, and
    the daemon's paths go on."""
    assert _project(kind, doc) is None, why
    _through_daemon_paths(kind, doc)


def test_malformed_delete_removes_the_stored_version() -> None:
    """A DELETED event whose object no longer parses still frees what the valid version held."""
    deleted: list[str] = []
    sink = Sink(lambda ev, p: deleted.append(p.name) if ev == "delete" else None)
    inf: Informer[Pod] = Informer(None, "/api/v1/pods", pod_from_json, lambda p: p.uid, sink, name="pods")  # type: ignore[arg-type]
    good = _base_pod()
    inf.on_event("ADDED", good)
    bad = _set(_base_pod, "spec.tolerations", [3])
    bad["metadata"]["resourceVersion"] = "2"
    inf.on_event("DELETED", bad)
    assert deleted == ["fuzz"]
    assert inf.list() == []


def test_sink_exception_does_not_stop_the_informer() -> None:
    """A bug in a handler is logged; the store and the next events are still processed."""
    seen: list[str] = []

    def on(ev: str, p: Any) -> None:
        if p.name == "boom":
            raise RuntimeError("handler bug")
        seen.append(p.name)

    inf: Informer[Pod] = Informer(None, "/api/v1/pods", pod_from_json, lambda p: p.uid, Sink(on), name="pods")  # type: ignore[arg-type]
    with structlog.testing.capture_logs() as logs:
        inf.on_event("ADDED", make_pod("boom").uid("u1").obj())
        inf.on_event("ADDED", make_pod("fine").uid("u2").obj())
    assert seen == ["fine"]
    assert [e["event"] for e in logs] == ["informer_handler_failed"]
    assert {p.name for p in inf.list()} == {"boom", "fine"}


class _Stream:
    """The part of KubeClient a watch uses: one stream of the given lines."""

    def __init__(self, lines: list[bytes]) -> None:
        self.lines = lines

    def stream(self, path: str, query: Any, **kw: Any) -> Any:
        yield from self.lines


@pytest.mark.parametrize(
    "line",
    [
        pytest.param(b"[]", id="event-is-a-list"),
        pytest.param(b'"ADDED"', id="event-is-a-string"),
        pytest.param(b'{"type":"ADDED","object":[1]}', id="object-is-a-list"),
        pytest.param(b'{"type":"MODIFIED","object":{"metadata":"x"}}', id="metadata-is-a-string"),
    ],
)
def test_watch_skips_a_malformed_event_and_goes_on(line: bytes) -> None:
    """Valid JSON that is no event used to end the reflector thread (AttributeError); now it is
    skipped and the next event is delivered, with the resourceVersion advancing."""
    names: list[str] = []
    sink = Sink(lambda ev, p: names.append(p.name))
    inf: Informer[Pod] = Informer(None, "/api/v1/pods", pod_from_json, lambda p: p.uid, sink, name="pods")  # type: ignore[arg-type]
    good = make_pod("after").uid("u-after").obj()
    good["metadata"]["resourceVersion"] = "42"
    client = _Stream([line, orjson.dumps({"type": "ADDED", "object": good})])
    reflector = Reflector(client, "/api/v1/pods", inf, name="pods")  # type: ignore[arg-type]
    reflector._watch()
    assert names == ["after"]
    assert reflector.resource_version == "42"


class _Flaky:
    """A list that works and watches that break: after one event each (``progress``) or at once."""

    def __init__(self, progress: bool, rounds: int) -> None:
        self.progress = progress
        self.rounds = rounds
        self.watches = 0
        self.reflector: Reflector | None = None

    def get(self, path: str, query: Any = None, **kw: Any) -> Any:
        return {"items": [], "metadata": {"resourceVersion": "1"}}

    def stream(self, path: str, query: Any, **kw: Any) -> Any:
        from custom_scheduler.kube import api_errors

        self.watches += 1
        if self.watches >= self.rounds and self.reflector is not None:
            self.reflector._stop.set()
        if self.progress:
            pod = make_pod(f"p{self.watches}").uid(f"u{self.watches}").obj()
            pod["metadata"]["resourceVersion"] = str(self.watches + 1)
            yield orjson.dumps({"type": "ADDED", "object": pod})
        raise api_errors.TransportError("stream broken")


@pytest.mark.parametrize(
    ("progress", "expected"),
    [
        pytest.param(True, [0.5, 0.5, 0.5], id="watches-that-deliver-keep-the-backoff-short"),
        pytest.param(False, [0.5, 1.0, 2.0], id="watches-that-never-deliver-back-off"),
    ],
)
def test_reflector_backoff_resets_after_a_watch_that_made_progress(progress: bool, expected: list[float]) -> None:
    """Found by the chaos test: after a burst of faults every watch restart waited up to 45 s (the
    backoff only reset on a normal close, which a failing watch never reaches), so the nodes cache
    stayed stale long after the API server was fine again."""
    quiet = Sink(lambda e, p: None)
    inf: Informer[Pod] = Informer(None, "/api/v1/pods", pod_from_json, lambda p: p.uid, quiet, name="pods")  # type: ignore[arg-type]
    client = _Flaky(progress, rounds=4)
    reflector = Reflector(client, "/api/v1/pods", inf, name="pods")  # type: ignore[arg-type]
    client.reflector = reflector
    with structlog.testing.capture_logs() as logs:
        reflector.run()
    assert [e["retry_in"] for e in logs if e["event"] == "watch_error"] == expected
