"""Queueing hints on the real API server: a rejected pod is retried only on a change its rejecting
plugin says may help (upstream's EventsToRegister and QueueingHints, v1.37.2)."""

from __future__ import annotations

from custom_scheduler.core.queue import SubQueue
from custom_scheduler.devenv import cluster
from custom_scheduler.server.app import App
from tests.builders import make_node, make_pod
from tests.integration.conftest import MINIMAL_CONFIG
from tests.integration.env import Env


def _attempts(app: App, uid: str) -> int:
    qpi = app.queue.get(uid)
    assert qpi is not None, "the rejected pod left the queue"
    return qpi.attempts


def test_fit_rejection_waits_through_unrelated_node_changes_and_retries_when_room_frees(env: Env) -> None:
    """A pod NodeResourcesFit rejected stays unschedulable, not attempted again, when a node is
    relabelled or a node too small for it is added; deleting the pod that holds the room sends it
    back, and it binds."""
    node = env.node(make_node("hint").capacity(cpu="2", memory="4Gi", pods="10"))
    app = env.start_scheduler()
    env.create_pod(make_pod("filler").req(cpu="1500m").obj())
    env.wait_bound("filler")
    big = env.create_pod(make_pod("big").req(cpu="1").obj())
    uid = big["metadata"]["uid"]
    assert env.wait_failed_scheduling("big")
    cluster.wait_for(
        lambda: app.queue.where(uid) is SubQueue.UNSCHEDULABLE, timeout=15, what="big parked as unschedulable"
    )
    before = _attempts(app, uid)

    # Unrelated to fit: a new label on the node, then a node too small to ever hold the pod. The
    # node informer handles them in order, so once the second is in the cache the first was seen.
    env.kube.patch(f"/api/v1/nodes/{node}", {"metadata": {"labels": {"example.com/team": "a"}}})
    tiny = env.node(make_node("tiny").capacity(cpu="500m", memory="1Gi", pods="10"))
    cluster.wait_for(lambda: app.nodes.get(tiny) is not None, timeout=15, what="tiny node in the informer")
    relabelled = app.nodes.get(node)
    assert relabelled is not None
    assert relabelled.labels.get("example.com/team") == "a"
    assert app.queue.where(uid) is SubQueue.UNSCHEDULABLE
    assert _attempts(app, uid) == before
    incoming = app.queue.incoming_counts()
    assert not any(event in ("NodeUpdateNodeLabel", "NodeAdd") for (_, event) in incoming), incoming

    # The filler's deletion frees the room NodeResourcesFit was missing.
    env.delete_pod_now("filler")
    assert env.wait_bound("big")["big"] == node
    assert incoming.get(("backoff", "AssignedPodDelete"), 0) + incoming.get(("active", "AssignedPodDelete"), 0) == 0
    after = app.queue.incoming_counts()
    assert after.get(("backoff", "AssignedPodDelete"), 0) + after.get(("active", "AssignedPodDelete"), 0) == 1


def test_the_store_informers_are_those_the_plugins_events_need(env: Env) -> None:
    """A profile whose plugins register no DRA or PodGroup event starts no informer for them (a
    server or RBAC without those APIs must not matter to it); the default profile watches all."""
    full = env.start_scheduler()
    assert full.dra_informers
    assert full.gang_informers
    assert full.volume_informers
    lean = env.start_scheduler(
        MINIMAL_CONFIG
        + """  plugins:
    multiPoint:
      disabled: [{name: DynamicResources}, {name: GangScheduling}]
"""
    )
    assert lean.dra_informers == []
    assert lean.gang_informers == []
    assert lean.volume_informers
