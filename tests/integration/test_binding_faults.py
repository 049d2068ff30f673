"""Binding under faults, through a fault-injecting proxy in front of the real API server."""

from __future__ import annotations

from collections.abc import Callable

from custom_scheduler.devenv import cluster
from custom_scheduler.server.app import App
from tests.builders import make_node, make_pod
from tests.faultproxy import FaultProxy, Rule
from tests.integration.env import Env
from tests.observers import RetriesSeen


def test_bind_answered_500_twice_is_retried_and_succeeds(
    env: Env, proxy: FaultProxy, proxied: Callable[..., App]
) -> None:
    node = env.node(make_node("retry"))
    rule = proxy.add(Rule("POST", rf"/namespaces/{env.namespace}/pods/flaky/binding", times=2, status=500))
    observed = RetriesSeen()
    app = proxied(observer=observed)
    env.create_pod(make_pod("flaky").obj())
    cluster.wait_for(lambda: env.node_of("flaky") == node, timeout=30, what="flaky bound")
    assert rule.hits == 2
    assert proxy.answers("/pods/flaky/binding") == [500, 500, 201]
    # Retried inside one binding cycle by the binder (not by requeueing the pod).
    cluster.wait_for(lambda: observed.retries, timeout=10, what="the binding cycle's report")
    assert observed.retries == [2]
    assert app.cache.check_invariants() == []


def test_bind_429_with_retry_after_is_honoured(env: Env, proxy: FaultProxy, proxied: Callable[..., App]) -> None:
    node = env.node(make_node("throttled"))
    proxy.add(Rule("POST", rf"/namespaces/{env.namespace}/pods/slow/binding", times=1, status=429, retry_after=1))
    observed = RetriesSeen()
    proxied(observer=observed)
    env.create_pod(make_pod("slow").obj())
    cluster.wait_for(lambda: env.node_of("slow") == node, timeout=30, what="slow bound")
    assert proxy.answers("/pods/slow/binding") == [429, 201]
    cluster.wait_for(lambda: observed.retries, timeout=10, what="the binding cycle's report")
    assert observed.retries == [1]


def test_409_already_bound_elsewhere_is_dropped_not_retried(
    env: Env, proxy: FaultProxy, proxied: Callable[..., App]
) -> None:
    """Someone else binds the pod while our bind is in flight: our POST gets 409 and the pod is
    forgotten (no retry, no second binding, cache consistent)."""
    ours = env.node(make_node("ours"))
    theirs = env.node(make_node("theirs").unschedulable())  # we never pick it
    # Delay our bind so the competing bind lands first.
    proxy.add(Rule("POST", rf"/namespaces/{env.namespace}/pods/raced/binding", times=1, delay=1.0))
    app = proxied()
    pod = env.create_pod(make_pod("raced").obj())
    cluster.wait_for(
        lambda: any(p.endswith("/pods/raced/binding") for _, p, _ in proxy.log) or proxy.rules[0].hits,
        timeout=10,
        what="our bind started",
    )
    cluster.bind(env.kube, env.namespace, "raced", theirs, uid=pod["metadata"]["uid"])
    cluster.wait_for(
        lambda: [s for _, p, s in proxy.log if p.endswith("/pods/raced/binding")], timeout=10, what="our bind answered"
    )
    assert [s for _, p, s in proxy.log if p.endswith("/pods/raced/binding")] == [409]
    assert env.node_of("raced") == theirs
    cluster.wait_for(lambda: not app.cache.is_assumed(pod["metadata"]["uid"]), timeout=10, what="assumption dropped")
    cached = app.cache.get_pod(pod["metadata"]["uid"])
    cluster.wait_for(
        lambda: (c := app.cache.get_pod(pod["metadata"]["uid"])) and c.node_name == theirs,
        timeout=10,
        what="cache shows the other binding",
    )
    assert cached is None or cached.node_name in (ours, theirs)
    assert app.cache.check_invariants() == []
