"""Pod fields of current clusters, end to end on the real API server: sidecar containers, pod-level
resources and topology spread's ``minDomains``, ``nodeAffinityPolicy``, ``nodeTaintsPolicy`` and
``matchLabelKeys``. Each case is built so that ignoring the field would place the pod differently.

A field the running server does not serve (it drops unknown fields silently) skips only there, with
the reason; the newest release we test against serves them all.
"""

from __future__ import annotations

from typing import Any

import pytest

from custom_scheduler.devenv import cluster
from custom_scheduler.devenv.controlplane import ControlPlane
from tests.builders import PodBuilder, make_node, make_pod
from tests.integration.env import Env

ZONE = "topology.kubernetes.io/zone"
SELECTOR = {"matchLabels": {"app": "s"}}


def _failed(env: Env, name: str) -> str:
    """The newest FailedScheduling note for pod ``name`` ("" while there is none)."""
    notes = env.failed_scheduling(name)
    return notes[-1] if notes else ""


def _wait_bound(env: Env, name: str) -> str:
    return env.wait_bound(name)[name]


def _wait_failed(env: Env, name: str) -> str:
    note: str = cluster.wait_for(lambda: _failed(env, name), timeout=30, what=f"{name} FailedScheduling")
    assert env.node_of(name) == ""
    return note


def _require_field(created: dict[str, Any], path: tuple[str, ...], what: str, cp: ControlPlane) -> None:
    doc: Any = created
    for key in path:
        doc = doc.get(key) if isinstance(doc, dict) else (doc[0] if isinstance(doc, list) and doc else None)
        if doc is None:
            pytest.skip(f"kube-apiserver {cp.version} does not serve {what} (the field was dropped)")


def _zone_nodes(env: Env, *zones: str, **kw: Any) -> dict[str, str]:
    """One node per zone (zone names unique to the test); returns zone → node name."""
    out = {}
    for z in zones:
        b = make_node(f"{z}-n").label(ZONE, f"{env.namespace}-{z}").capacity(cpu="8", memory="16Gi", pods="20")
        for key, value in kw.get(z, {}).items():
            b.label(key, value)
        for key in kw.get(f"{z}-taint", ()):
            b.taint(key, "x", "NoSchedule")
        out[z] = env.node(b)
    return out


def _spread_pod(name: str, **extra: Any) -> PodBuilder:
    return make_pod(name).label("app", "s").spread(1, ZONE, "DoNotSchedule", SELECTOR, **extra)


def test_sidecar_requests_count_towards_fit(env: Env) -> None:
    """A 600m container with a 500m sidecar (``restartPolicy: Always`` init container) needs 1100m:
    it does not fit a 1-CPU node; the same pod without the sidecar does."""
    node = env.node(make_node("sidecar").capacity(cpu="1", memory="4Gi", pods="10"))
    env.start_scheduler()
    created = env.create_pod(make_pod("with-sidecar").req(cpu="600m").init_req({"cpu": "500m"}, sidecar=True).obj())
    _require_field(created, ("spec", "initContainers", "restartPolicy"), "sidecar containers", env.control_plane)
    assert "Insufficient cpu" in _wait_failed(env, "with-sidecar")
    env.create_pod(make_pod("plain").req(cpu="600m").obj())
    assert _wait_bound(env, "plain") == node


def test_pod_level_resources_replace_container_sum(env: Env) -> None:
    """``spec.resources.requests.cpu: 1500m`` over a 100m container does not fit 1 CPU; two pods
    with pod-level 800m and containers that request nothing (100m each for scoring) do not both fit:
    exactly one is bound."""
    node = env.node(make_node("podlevel").capacity(cpu="1", memory="4Gi", pods="10"))
    env.start_scheduler()
    big = make_pod("pod-level-big").req(cpu="100m")
    big.spec["resources"] = {"requests": {"cpu": "1500m"}}
    created = env.create_pod(big.obj())
    _require_field(created, ("spec", "resources", "requests"), "pod-level resources", env.control_plane)
    assert "Insufficient cpu" in _wait_failed(env, "pod-level-big")
    for i in range(2):
        p = make_pod(f"pod-level-{i}")
        p.spec["resources"] = {"requests": {"cpu": "800m"}}
        env.create_pod(p.obj())
    placed = cluster.wait_for(
        lambda: sorted(env.node_of(f"pod-level-{i}") for i in range(2))[1:] == [node],
        timeout=30,
        what="one pod-level pod bound",
    )
    assert placed
    pending = next(f"pod-level-{i}" for i in range(2) if not env.node_of(f"pod-level-{i}"))
    assert "Insufficient cpu" in _wait_failed(env, pending)
    assert sorted(env.node_of(f"pod-level-{i}") for i in range(2)) == ["", node]


def test_min_domains_counts_missing_domains_as_empty(env: Env) -> None:
    """Two zones, ``minDomains: 3``: the global minimum is 0, so each zone takes one matching pod and
    the third pod waits (without minDomains it would bind, skew 1)."""
    zones = _zone_nodes(env, "a", "b")
    env.start_scheduler()
    for i in range(2):
        env.create_pod(_spread_pod(f"s{i}", minDomains=3).obj())
        _wait_bound(env, f"s{i}")
    assert {env.node_of(f"s{i}") for i in range(2)} == set(zones.values())
    env.create_pod(_spread_pod("s2", minDomains=3).obj())
    assert "didn't match pod topology spread constraints" in _wait_failed(env, "s2")


@pytest.mark.parametrize(("policy", "binds"), [("Honor", True), ("Ignore", False)])
def test_node_affinity_policy(policy: str, binds: bool, env: Env) -> None:
    """Zone a holds one matching pod; the new pod may only go to zone a (nodeSelector). Honor counts
    only zone a (skew 1: binds); Ignore counts zone b's 0 too (skew 2: refused)."""
    zones = _zone_nodes(env, "a", "b", a={"pool": "x"})
    env.start_scheduler()
    env.create_pod(make_pod("existing").label("app", "s").node_selector(pool="x").obj())
    assert _wait_bound(env, "existing") == zones["a"]
    env.create_pod(_spread_pod("new", nodeAffinityPolicy=policy).node_selector(pool="x").obj())
    if binds:
        assert _wait_bound(env, "new") == zones["a"]
    else:
        assert "didn't match pod topology spread constraints" in _wait_failed(env, "new")


@pytest.mark.parametrize(("policy", "binds"), [("Honor", True), ("Ignore", False)])
def test_node_taints_policy(policy: str, binds: bool, env: Env) -> None:
    """Zone b's only node has a taint the pod does not tolerate. Honor leaves zone b out of the
    count (binds in zone a beside the existing pod); Ignore (the default) counts its 0 (refused)."""
    zones = _zone_nodes(env, "a", "b", **{"b-taint": ("dedicated",)})
    env.start_scheduler()
    env.create_pod(make_pod("existing").label("app", "s").obj())
    assert _wait_bound(env, "existing") == zones["a"]
    env.create_pod(_spread_pod("new", nodeTaintsPolicy=policy).obj())
    if binds:
        assert _wait_bound(env, "new") == zones["a"]
    else:
        note = _wait_failed(env, "new")
        assert "didn't match pod topology spread constraints" in note
        assert "untolerated taint(s)" in note


@pytest.mark.parametrize(("keys", "binds"), [(["rev"], True), ([], False)])
def test_match_label_keys(keys: list[str], binds: bool, env: Env) -> None:
    """Revision 1 has a pod in zone a; revision 2's pod may only go to zone a. With
    ``matchLabelKeys: [rev]`` only revision 2 is counted (0 everywhere: binds); without, skew 2."""
    zones = _zone_nodes(env, "a", "b", a={"pool": "x"})
    env.start_scheduler()
    env.create_pod(make_pod("rev1").labels(app="s", rev="1").node_selector(pool="x").obj())
    assert _wait_bound(env, "rev1") == zones["a"]
    extra: dict[str, Any] = {"nodeAffinityPolicy": "Ignore"}
    if keys:
        extra["matchLabelKeys"] = keys
    env.create_pod(_spread_pod("rev2", **extra).label("rev", "2").node_selector(pool="x").obj())
    if binds:
        assert _wait_bound(env, "rev2") == zones["a"]
    else:
        assert "didn't match pod topology spread constraints" in _wait_failed(env, "rev2")
