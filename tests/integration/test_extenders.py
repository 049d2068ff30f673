"""HTTP scheduler extenders end to end: a real extender (an HTTP server on loopback, in this
process) and the real API server.

Each test runs its extender's verbs as Python functions behind ``http.server`` and checks what the
scheduler did with the answers: filter (nodes narrowed; the FailedNodes reasons in the
FailedScheduling histogram), prioritize (the extender's node wins with a large weight), preempt
(a candidate node dropped changes the node and the victims), bind (the extender POSTs the
Binding itself; a failed bind is retried, never bound twice), managedResources (uninterested pods
never reach the extender; ``ignoredByScheduler`` resources are not checked by NodeResourcesFit),
an unreachable extender (ignorable: skipped; not: the pod's FailedScheduling names it), and
malformed answers (invalid JSON, unknown nodes, an ``Error``, a timeout) failing only that pod.
"""

from __future__ import annotations

import contextlib
import json
import socket
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from custom_scheduler.devenv import cluster
from custom_scheduler.kube.client import pod_path
from tests.builders import make_node, make_pod
from tests.integration.conftest import MINIMAL_CONFIG
from tests.integration.env import Env, with_class

Verb = Callable[[dict[str, Any]], Any]


@dataclass(frozen=True)
class Raw:
    """An answer sent as it is (not JSON-encoded)."""

    body: bytes


@dataclass(frozen=True)
class Slow:
    """An answer sent after ``seconds``."""

    seconds: float
    answer: Any


@dataclass
class LoopbackExtender:
    """A scheduler extender on 127.0.0.1: ``verbs[name](args)`` answers ``POST /ext/<name>``."""

    verbs: dict[str, Verb]
    calls: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    server: ThreadingHTTPServer | None = None

    @property
    def url(self) -> str:
        assert self.server is not None
        return f"http://127.0.0.1:{self.server.server_address[1]}/ext"

    def start(self) -> LoopbackExtender:
        ext = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                verb = self.path.rsplit("/", 1)[-1]
                args = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                ext.calls.append((verb, args))
                answer = ext.verbs[verb](args)
                if isinstance(answer, Slow):
                    time.sleep(answer.seconds)
                    answer = answer.answer
                body = answer.body if isinstance(answer, Raw) else json.dumps(answer).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                with contextlib.suppress(OSError):  # the scheduler may have timed out
                    self.wfile.write(body)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        return self

    def pods_seen(self, verb: str) -> list[str]:
        return [args["Pod"]["metadata"]["name"] for v, args in self.calls if v == verb]


@pytest.fixture
def extender() -> Iterator[Callable[[dict[str, Verb]], LoopbackExtender]]:
    started: list[LoopbackExtender] = []

    def start(verbs: dict[str, Verb]) -> LoopbackExtender:
        ext = LoopbackExtender(verbs).start()
        started.append(ext)
        return ext

    yield start
    for ext in started:
        assert ext.server is not None
        ext.server.shutdown()
        ext.server.server_close()


def with_extenders(*extenders: dict[str, Any]) -> str:
    return MINIMAL_CONFIG + "extenders: " + json.dumps(list(extenders)) + "\n"


def labels(args: dict[str, Any]) -> dict[str, str]:
    got: dict[str, str] = args["Pod"]["metadata"].get("labels") or {}
    return got


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
    return port


def node(env: Env, name: str, cpu: str = "4") -> str:
    return env.node(make_node(name).capacity(cpu=cpu, memory="16Gi", pods="20"))


def scheduled_events(env: Env, name: str) -> int:
    return len(env.events("Scheduled", about=name))


# --- filter --------------------------------------------------------------------------------------


def test_filter_narrows_the_nodes_and_its_reasons_make_the_histogram(
    env: Env, extender: Callable[[dict[str, Verb]], LoopbackExtender]
) -> None:
    """The extender rejects node a: the pod goes to b. For a pod it rejects everywhere (a
    resolvable and an unresolvable reason), FailedScheduling carries its reasons as upstream's
    FitError histogram, and preemption only tries the resolvable node."""
    a, b = node(env, "ext-a"), node(env, "ext-b")

    def filter_(args: dict[str, Any]) -> Any:
        if labels(args).get("want") == "none":
            return {
                "NodeNames": [],
                "FailedNodes": {a: "no license here"},
                "FailedAndUnresolvableNodes": {b: "wrong rack"},
            }
        return {"NodeNames": [n for n in args["NodeNames"] if n != a], "FailedNodes": {a: "no license here"}}

    ext = extender({"filter": filter_})
    env.start_scheduler(with_extenders({"urlPrefix": ext.url, "filterVerb": "filter", "nodeCacheCapable": True}))
    env.create_pod(make_pod("goes-to-b").req(cpu="100m").obj())
    env.create_pod(make_pod("nowhere").label("want", "none").obj())

    assert env.wait_bound("goes-to-b")["goes-to-b"] == b
    notes = env.wait_failed_scheduling("nowhere")
    assert notes[0] == (
        "0/2 nodes are available: 1 no license here, 1 wrong rack. preemption: 0/2 nodes are available: "
        "1 No preemption victims found for incoming pod, 1 Preemption is not helpful for scheduling."
    ), notes
    assert env.node_of("nowhere") == ""
    assert all(set(args["NodeNames"]) == {a, b} and args["Nodes"] is None for _, args in ext.calls)


# --- prioritize ----------------------------------------------------------------------------------


def test_prioritize_with_a_large_weight_beats_the_plugins(
    env: Env, extender: Callable[[dict[str, Verb]], LoopbackExtender]
) -> None:
    """LeastAllocated prefers the big node; the extender's 10 x weight 5 x 10 = 500 points send
    each pod to the node it names, and with no preference the plugins decide. Without
    nodeCacheCapable the extender gets the full NodeList."""
    small, big = node(env, "ext-small", cpu="2"), node(env, "ext-big", cpu="64")
    want = {"small": small, "big": big}

    def prioritize(args: dict[str, Any]) -> Any:
        preferred = want.get(labels(args).get("prefer", ""))
        return [
            {"Host": n["metadata"]["name"], "Score": 10 if n["metadata"]["name"] == preferred else 0}
            for n in args["Nodes"]["items"]
        ]

    ext = extender({"prioritize": prioritize})
    env.start_scheduler(with_extenders({"urlPrefix": ext.url, "prioritizeVerb": "prioritize", "weight": 5}))
    env.create_pod(make_pod("likes-small").label("prefer", "small").req(cpu="1").obj())
    env.create_pod(make_pod("likes-big").label("prefer", "big").req(cpu="1").obj())
    env.create_pod(make_pod("no-preference").req(cpu="1").obj())

    got = env.wait_bound("likes-small", "likes-big", "no-preference")
    assert got == {"likes-small": small, "likes-big": big, "no-preference": big}
    assert sorted(ext.pods_seen("prioritize")) == ["likes-big", "likes-small", "no-preference"]
    _, args = ext.calls[0]
    assert {n["metadata"]["name"] for n in args["Nodes"]["items"]} == {small, big}
    assert args["NodeNames"] is None


# --- preempt -------------------------------------------------------------------------------------


def test_preempt_drops_the_node_preemption_would_have_chosen(
    env: Env, extender: Callable[[dict[str, Verb]], LoopbackExtender], priority_class: Callable[[int], str]
) -> None:
    """Two full 1-CPU nodes; the victim on a has the lower priority, so preemption alone would
    evict it. The extender keeps only node b: the victim on b is evicted, the preemptor is
    nominated to b and binds there; the victim on a is untouched."""
    a, b = node(env, "ext-pa", cpu="1"), node(env, "ext-pb", cpu="1")
    low, mid, high = priority_class(10), priority_class(20), priority_class(1000)
    env.create_pod(with_class(make_pod("victim-a").node(a).req(cpu="1"), low))
    env.create_pod(with_class(make_pod("victim-b").node(b).req(cpu="1"), mid))
    victim_b_uid = env.pod("victim-b")["metadata"]["uid"]

    def preempt(args: dict[str, Any]) -> Any:
        return {"NodeNameToMetaVictims": {n: v for n, v in args["NodeNameToMetaVictims"].items() if n == b}}

    ext = extender({"preempt": preempt})
    env.start_scheduler(with_extenders({"urlPrefix": ext.url, "preemptVerb": "preempt", "nodeCacheCapable": True}))
    env.create_pod(with_class(make_pod("preemptor").req(cpu="1"), high))

    def finish_until_bound() -> bool:  # kwok finishes the victim's graceful delete
        return env.node_of("preemptor") == b

    cluster.wait_for(finish_until_bound, timeout=45, interval=0.3, what="preemptor bound to b")
    pods = env.pods()
    assert "victim-b" not in pods
    assert pods["victim-a"]["spec"]["nodeName"] == a
    assert "deletionTimestamp" not in pods["victim-a"]["metadata"]
    # The extender was offered both nodes (a with the cheaper victim) and took a away.
    offered = ext.calls[0][1]["NodeNameToMetaVictims"]
    assert set(offered) == {a, b}
    assert offered[b]["Pods"] == [{"UID": victim_b_uid}]
    assert ext.calls[0][1]["NodeNameToVictims"] is None


# --- bind ----------------------------------------------------------------------------------------


def test_bind_is_done_by_the_extender_once_and_a_failed_bind_is_retried(
    env: Env, extender: Callable[[dict[str, Verb]], LoopbackExtender]
) -> None:
    """The extender POSTs each Binding itself; the pod ends bound with one Scheduled event (had
    the default binder also bound, the API server's conflict would have left none). Its first
    answer for ``flaky`` is an Error: a FailedScheduling naming the extender, no bind by the
    plugins, then a retry that the extender binds."""
    target = node(env, "ext-bind")
    failed_once: set[str] = set()

    def bind(args: dict[str, Any]) -> Any:
        name = args["PodName"]
        if name == "flaky" and name not in failed_once:
            failed_once.add(name)
            return {"Error": "binding quota exceeded"}
        env.kube.post(
            pod_path(args["PodNamespace"], name, "binding"),
            {
                "apiVersion": "v1",
                "kind": "Binding",
                "metadata": {"name": name, "uid": args["PodUID"]},
                "target": {"apiVersion": "v1", "kind": "Node", "name": args["Node"]},
            },
        )
        return {}

    ext = extender({"bind": bind})
    env.start_scheduler(with_extenders({"urlPrefix": ext.url, "bindVerb": "bind"}))
    env.create_pod(make_pod("steady").obj())
    env.create_pod(make_pod("flaky").obj())

    assert env.wait_bound("steady", "flaky") == {"steady": target, "flaky": target}
    cluster.wait_for(lambda: scheduled_events(env, "steady") and scheduled_events(env, "flaky"), what="Scheduled")
    assert scheduled_events(env, "steady") == 1
    assert scheduled_events(env, "flaky") == 1
    binds = [args for verb, args in ext.calls if verb == "bind"]
    assert sorted(a["PodName"] for a in binds) == ["flaky", "flaky", "steady"]
    assert all(a["Node"] == target and a["PodNamespace"] == env.namespace and a["PodUID"] for a in binds)
    assert env.failed_scheduling("flaky") == [f'extender "{ext.url}" bind: binding quota exceeded']


# --- managedResources ----------------------------------------------------------------------------


def test_managed_resources_decide_which_pods_the_extender_sees(
    env: Env, extender: Callable[[dict[str, Verb]], LoopbackExtender]
) -> None:
    """The extender manages ``example.com/widget`` (ignored by the scheduler): a pod without it
    never reaches the extender; a pod with it is not refused by NodeResourcesFit on nodes that
    have no widgets, and goes where the extender says."""
    a, b = node(env, "ext-wa"), node(env, "ext-wb")

    def filter_(args: dict[str, Any]) -> Any:
        return {"NodeNames": [b], "FailedNodes": {a: "no widgets left"}}

    ext = extender({"filter": filter_})
    managed = [{"name": "example.com/widget", "ignoredByScheduler": True}]
    env.start_scheduler(
        with_extenders(
            {"urlPrefix": ext.url, "filterVerb": "filter", "nodeCacheCapable": True, "managedResources": managed}
        )
    )
    widget = make_pod("widget").obj()
    widget["spec"]["containers"][0]["resources"] = {
        "requests": {"example.com/widget": "1"},
        "limits": {"example.com/widget": "1"},
    }
    env.create_pod(widget)
    env.create_pod(make_pod("plain").req(cpu="100m").obj())

    got = env.wait_bound("widget", "plain")
    assert got["widget"] == b
    assert ext.pods_seen("filter") == ["widget"]


# --- unreachable extenders -----------------------------------------------------------------------


def test_an_ignorable_extender_that_is_down_does_not_stop_scheduling(env: Env) -> None:
    target = node(env, "ext-ign")
    url = f"http://127.0.0.1:{closed_port()}/ext"
    env.start_scheduler(
        with_extenders(
            {"urlPrefix": url, "filterVerb": "filter", "prioritizeVerb": "prioritize", "weight": 1, "ignorable": True}
        )
    )
    env.create_pod(make_pod("unbothered").obj())
    assert env.wait_bound("unbothered")["unbothered"] == target


def test_a_non_ignorable_extender_that_is_down_fails_the_pod_naming_it(env: Env) -> None:
    node(env, "ext-down")
    port = closed_port()
    env.start_scheduler(with_extenders({"urlPrefix": f"http://127.0.0.1:{port}/ext", "filterVerb": "filter"}))
    env.create_pod(make_pod("stuck").obj())
    notes = env.wait_failed_scheduling("stuck")
    assert (
        notes[0] == f'Post "http://127.0.0.1:{port}/ext/filter": dial tcp 127.0.0.1:{port}: connect: connection refused'
    )
    assert env.node_of("stuck") == ""
    assert env.pod("stuck")["status"]["conditions"][0]["reason"] == "SchedulerError"


# --- malformed answers ---------------------------------------------------------------------------


def test_malformed_answers_fail_only_that_pod(
    env: Env, extender: Callable[[dict[str, Verb]], LoopbackExtender]
) -> None:
    """Invalid JSON, a node that was not sent, an ``Error`` and an answer slower than httpTimeout
    each fail their pod's attempt with a message naming the extender; the daemon keeps
    scheduling the others, each bound once."""
    target = node(env, "ext-mal")

    def filter_(args: dict[str, Any]) -> Any:
        mode = labels(args).get("mode")
        ok = {"NodeNames": args["NodeNames"]}
        return {
            "json": Raw(b"{not json"),
            "unknown": {"NodeNames": ["no-such-node"]},
            "error": {"Error": "license server unavailable"},
            "slow": Slow(1.5, ok),
        }.get(mode or "", ok)

    ext = extender({"filter": filter_})
    env.start_scheduler(
        with_extenders({"urlPrefix": ext.url, "filterVerb": "filter", "nodeCacheCapable": True, "httpTimeout": "300ms"})
    )
    bad = ("json", "unknown", "error", "slow")
    for mode in bad:
        env.create_pod(make_pod(f"bad-{mode}").label("mode", mode).obj())
    env.create_pod(make_pod("good-before").obj())

    want = {
        "json": f'extender "{ext.url}" filter: invalid JSON in the answer: ',
        "unknown": f'extender "{ext.url}" claims a filtered node "no-such-node" '
        "which is not found in the input node list",
        "error": f'extender "{ext.url}" filter: license server unavailable',
        "slow": f'Post "{ext.url}/filter": context deadline exceeded (Client.Timeout exceeded while awaiting headers)',
    }
    for mode in bad:
        notes = env.wait_failed_scheduling(f"bad-{mode}")
        assert notes[0].startswith(want[mode]), (mode, notes)
    env.create_pod(make_pod("good-after").obj())
    assert env.wait_bound("good-before", "good-after") == {
        **{f"bad-{m}": "" for m in bad},
        "good-before": target,
        "good-after": target,
    }
    assert scheduled_events(env, "good-before") == 1
    assert scheduled_events(env, "good-after") == 1
