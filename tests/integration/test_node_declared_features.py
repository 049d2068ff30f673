"""NodeDeclaredFeatures on the real API server: a pod whose spec needs a node-declared feature lands
only on a node whose ``status.declaredFeatures`` lists it, and with no such node it stays pending
with upstream's reason until one is added.

The feature used is ``RestartAllContainersOnContainerExits`` (a container restart rule with action
``RestartAllContainers``): beta and on by default since 1.36, so the API server keeps the rule. The
nodes declare features the way a kubelet does, through the status subresource; the API server keeps
``status.declaredFeatures`` while its ``NodeDeclaredFeatures`` gate is on (beta in 1.36, GA and
locked in 1.37), which each test checks on the object it gets back.
"""

from __future__ import annotations

from typing import Any

import pytest

from custom_scheduler.devenv import cluster
from custom_scheduler.kube.client import MERGE_PATCH_CT, node_path
from tests.builders import NodeBuilder, make_node, make_pod
from tests.integration.env import Env

RESTART_ALL = "RestartAllContainersOnContainerExits"
REASON = "node(s) didn't match Pod's required features"


@pytest.fixture(autouse=True)
def _declared_features_served(env: Env) -> None:
    if env.control_plane.minor_version < 36:
        pytest.skip(
            f"status.declaredFeatures and RestartAllContainers rules are on by default from 1.36 "
            f"(this API server is 1.{env.control_plane.minor_version})"
        )


class DeclaringNode(NodeBuilder):
    """A node whose object already declares ``features`` (created with them, as a kubelet that
    registers with its status does)."""

    def __init__(self, name: str, *features: str) -> None:
        super().__init__(name)
        self.capacity(cpu="4", memory="8Gi", pods="110")
        self.features = sorted(features)

    def obj(self) -> dict[str, Any]:
        o = super().obj()
        o["status"]["declaredFeatures"] = self.features
        return o


def declare(env: Env, node: str, *features: str) -> None:
    """Set the node's declared features with a status patch and check the API server kept them."""
    got = env.kube.patch(node_path(node, "status"), {"status": {"declaredFeatures": sorted(features)}}, MERGE_PATCH_CT)
    assert got["status"].get("declaredFeatures") == sorted(features)


def needs_restart_all(name: str) -> dict[str, Any]:
    b = make_pod(name)
    rule = {"action": "RestartAllContainers", "exitCodes": {"operator": "In", "values": [42]}}
    b.spec["containers"][0].update(restartPolicy="Never", restartPolicyRules=[rule])
    return b.obj()


def create_needing(env: Env, name: str) -> None:
    created = env.create_pod(needs_restart_all(name))
    assert created["spec"]["containers"][0].get("restartPolicyRules"), "the API server dropped the restart rule"


def test_pod_needing_a_feature_lands_only_on_a_node_declaring_it(env: Env) -> None:
    plain = env.node(make_node("plain"))
    other = env.node(make_node("other"))
    declaring = env.node(make_node("declaring"))
    declare(env, other, "UserNamespacesHostNetworkSupport")
    declare(env, declaring, RESTART_ALL, "VolumeBindMountOptions")
    env.start_scheduler()
    names = [f"restart-all-{i}" for i in range(3)]
    for name in names:
        create_needing(env, name)
    env.create_pod(make_pod("plain-pod").obj())
    got = env.wait_bound(*names, "plain-pod")
    assert {got[n] for n in names} == {declaring}
    assert got["plain-pod"] in {plain, other, declaring}


def test_pod_stays_pending_until_a_node_declaring_its_feature_is_added(env: Env) -> None:
    env.node(make_node("plain"))
    declare(env, env.node(make_node("other")), "UserNamespacesHostNetworkSupport")
    env.start_scheduler()
    create_needing(env, "waits")
    notes = env.wait_failed_scheduling("waits")
    assert any(REASON in n for n in notes), notes
    cond = cluster.wait_for(
        lambda: next(
            (c for c in env.pod("waits")["status"].get("conditions") or () if c["type"] == "PodScheduled"), None
        ),
        what="PodScheduled condition",
    )
    assert (cond["status"], cond["reason"]) == ("False", "Unschedulable")
    assert REASON in cond["message"]
    assert env.node_of("waits") == ""
    # A node that declares the feature appears: the node add moves the pod back and it binds there.
    declaring = env.node(DeclaringNode("declaring", RESTART_ALL))
    assert env.kube.get(node_path(declaring))["status"].get("declaredFeatures") == [RESTART_ALL]
    assert env.wait_bound("waits", timeout=30)["waits"] == declaring
