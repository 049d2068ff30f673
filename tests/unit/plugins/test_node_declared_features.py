"""NodeDeclaredFeatures: the features a pod needs (component-helpers' nodedeclaredfeatures at v0.37.2,
one pod that needs each feature and one that does not), the node's declared set, and the plugin's
PreFilter/Filter tables (kube-scheduler's TestPreFilter/TestFilter cases)."""

from __future__ import annotations

from typing import Any

import pytest

from custom_scheduler.api import node_features as nf
from custom_scheduler.api.model import MalformedObject, Node, node_from_json
from custom_scheduler.config import load_config
from custom_scheduler.framework.types import SKIP, SUCCESS, CycleState, StateNotFoundError, Status
from custom_scheduler.plugins import in_tree_registry, node_declared_features
from tests.builders import PodBuilder, make_node
from tests.unit.plugins.support import bare, fake_handle, node_info

RESTART_ALL = "RestartAllContainersOnContainerExits"
USERNS_HOST_NETWORK = "UserNamespacesHostNetworkSupport"
BIND_MOUNT_OPTIONS = "VolumeBindMountOptions"

REJECT = Status.unresolvable("node(s) didn't match Pod's required features")


def container(name: str = "c0", **fields: Any) -> dict[str, Any]:
    return {"name": name, "image": "registry.k8s.io/pause:3.9", **fields}


def restart_rule(action: str) -> dict[str, Any]:
    return {"action": action, "exitCodes": {"operator": "In", "values": [42]}}


def mount(**fields: Any) -> dict[str, Any]:
    return {"name": "data", "mountPath": "/data", **fields}


def pod_with(**spec: Any) -> PodBuilder:
    """A pod without containers whose spec also has ``spec`` (fields as the API spells them)."""
    b = bare()
    b.spec.update(spec)
    return b


def node_declaring(name: str, *features: str) -> Node:
    obj = make_node(name).obj()
    if features:
        obj["status"]["declaredFeatures"] = sorted(features)
    return node_from_json(obj)


# --- inference -----------------------------------------------------------------------------------

ALWAYS_RULE = {"restartPolicy": "Always"}


@pytest.mark.parametrize(
    ("pod", "want"),
    [
        pytest.param(pod_with(containers=[container()]), set(), id="plain-pod-needs-nothing"),
        # RestartAllContainersOnContainerExits
        pytest.param(
            pod_with(
                containers=[container(restartPolicy="Never", restartPolicyRules=[restart_rule("RestartAllContainers")])]
            ),
            {RESTART_ALL},
            id="container-rule-restart-all-containers",
        ),
        pytest.param(
            pod_with(
                containers=[container()],
                initContainers=[
                    container("init", restartPolicy="Never", restartPolicyRules=[restart_rule("RestartAllContainers")])
                ],
            ),
            {RESTART_ALL},
            id="init-container-rule-restart-all-containers",
        ),
        pytest.param(
            pod_with(
                containers=[
                    container(
                        restartPolicy="Never",
                        restartPolicyRules=[restart_rule("Restart"), restart_rule("RestartAllContainers")],
                    )
                ]
            ),
            {RESTART_ALL},
            id="restart-all-containers-after-another-rule",
        ),
        pytest.param(
            pod_with(containers=[container(restartPolicy="Never", restartPolicyRules=[restart_rule("Restart")])]),
            set(),
            id="container-rule-restart-only-needs-nothing",
        ),
        pytest.param(
            pod_with(containers=[container(**ALWAYS_RULE)], initContainers=[container("sidecar", **ALWAYS_RULE)]),
            set(),
            id="restart-policy-without-rules-needs-nothing",
        ),
        # UserNamespacesHostNetworkSupport
        pytest.param(
            pod_with(containers=[container()], hostNetwork=True, hostUsers=False),
            {USERNS_HOST_NETWORK},
            id="host-network-in-user-namespace",
        ),
        pytest.param(
            pod_with(containers=[container()], hostNetwork=True),
            set(),
            id="host-network-host-users-unset-needs-nothing",
        ),
        pytest.param(
            pod_with(containers=[container()], hostNetwork=True, hostUsers=True),
            set(),
            id="host-network-host-users-true-needs-nothing",
        ),
        pytest.param(
            pod_with(containers=[container()], hostUsers=False),
            set(),
            id="user-namespace-without-host-network-needs-nothing",
        ),
        # VolumeBindMountOptions
        pytest.param(
            pod_with(containers=[container(volumeMounts=[mount(bindMountOptions=["nosuid"])])]),
            {BIND_MOUNT_OPTIONS},
            id="container-bind-mount-options",
        ),
        pytest.param(
            pod_with(
                containers=[container(volumeMounts=[mount()])],
                initContainers=[container("init", volumeMounts=[mount(bindMountOptions=["noexec"])])],
            ),
            {BIND_MOUNT_OPTIONS},
            id="init-container-bind-mount-options",
        ),
        pytest.param(
            pod_with(
                containers=[container()],
                ephemeralContainers=[container("debug", volumeMounts=[mount(bindMountOptions=["nodev"])])],
            ),
            {BIND_MOUNT_OPTIONS},
            id="ephemeral-container-bind-mount-options",
        ),
        pytest.param(
            pod_with(containers=[container(volumeMounts=[mount(), mount(bindMountOptions=[])])]),
            set(),
            id="mounts-without-bind-mount-options-need-nothing",
        ),
        # Features that only matter for updates (in-place resize) never matter for scheduling.
        pytest.param(
            pod_with(
                containers=[container(resources={"requests": {"cpu": "1"}})],
                initContainers=[container("init", resources={"requests": {"cpu": "1"}})],
                resources={"limits": {"cpu": "2"}},
                volumes=[{"name": "mem", "emptyDir": {"medium": "Memory", "sizeLimit": "1Gi"}}],
            ),
            set(),
            id="resize-only-features-need-nothing",
        ),
        pytest.param(
            pod_with(
                containers=[
                    container(
                        restartPolicy="Never",
                        restartPolicyRules=[restart_rule("RestartAllContainers")],
                        volumeMounts=[mount(bindMountOptions=["nosuid"])],
                    )
                ],
                hostNetwork=True,
                hostUsers=False,
            ),
            {RESTART_ALL, USERNS_HOST_NETWORK, BIND_MOUNT_OPTIONS},
            id="all-three",
        ),
    ],
)
def test_required_features_of_a_pod(pod: PodBuilder, want: set[str]) -> None:
    assert pod.build().required_node_features == want
    assert nf.infer_for_scheduling(pod.obj()["spec"]) == want


def test_registry_is_upstreams_all_features_sorted_by_name() -> None:
    """features.AllFeatures at v0.37.2, which the framework sorts by name; none has a max version."""
    names = [f.name for f in nf.FEATURES]
    assert names == sorted(names)
    assert set(names) == {
        "DRANodeAllocatableResources",
        "DRAOptionalNodeOperations",
        "ExtendWebSocketsToKubelet",
        "InPlacePodLevelResourcesVerticalScaling",
        "InPlacePodVerticalScalingInitContainers",
        "InPlacePodVerticalScalingMemoryBackedVolumes",
        RESTART_ALL,
        USERNS_HOST_NETWORK,
        BIND_MOUNT_OPTIONS,
    }
    assert all(f.max_version is None for f in nf.FEATURES)
    assert nf.KUBE_VERSION == (1, 37, 2)


def _always(spec: Any) -> bool:
    return True


def _never(spec: Any) -> bool:
    return False


@pytest.mark.parametrize(
    ("max_version", "version", "required"),
    [
        pytest.param(None, (1, 37, 2), True, id="no-max-version"),
        pytest.param((1, 38, 0), (1, 35, 0), True, id="before-max-version"),
        pytest.param((1, 37, 2), (1, 37, 2), True, id="max-version-is-inclusive"),
        pytest.param((1, 33, 0), (1, 34, 0), False, id="past-max-version-not-required"),
        pytest.param((1, 37, 1), (1, 37, 2), False, id="past-max-version-by-a-patch"),
    ],
)
def test_version_gating(max_version: nf.Version | None, version: nf.Version, required: bool) -> None:
    features = (nf.Feature("TestFeature1", _always, max_version), nf.Feature("TestFeature2", _never))
    want = {"TestFeature1"} if required else set()
    assert nf.infer_for_scheduling({}, version, features) == want


# --- the node's declared features ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("status", "want"),
    [
        pytest.param({}, set(), id="absent"),
        pytest.param({"declaredFeatures": None}, set(), id="null"),
        pytest.param({"declaredFeatures": []}, set(), id="empty"),
        pytest.param({"declaredFeatures": [RESTART_ALL, USERNS_HOST_NETWORK]}, {RESTART_ALL, USERNS_HOST_NETWORK}),
        pytest.param({"declaredFeatures": ["SomeFutureFeature"]}, {"SomeFutureFeature"}, id="unknown-kept"),
    ],
)
def test_declared_features_of_a_node(status: dict[str, Any], want: set[str]) -> None:
    obj = make_node("n").obj()
    obj["status"].update(status)
    assert node_from_json(obj).declared_features == want


@pytest.mark.parametrize("bad", ["RestartAllContainersOnContainerExits", [1], {"a": "b"}])
def test_malformed_declared_features_are_a_malformed_node(bad: object) -> None:
    obj = make_node("n").obj()
    obj["status"]["declaredFeatures"] = bad
    with pytest.raises(MalformedObject, match="declaredFeatures"):
        node_from_json(obj)


# --- the plugin ----------------------------------------------------------------------------------


def plugin() -> node_declared_features.NodeDeclaredFeatures:
    return node_declared_features.NodeDeclaredFeatures(None, fake_handle())


NEEDS_RESTART_ALL = pod_with(
    containers=[container(restartPolicy="Never", restartPolicyRules=[restart_rule("RestartAllContainers")])]
)


def test_pre_filter_skips_a_pod_that_needs_nothing() -> None:
    state = CycleState()
    assert plugin().pre_filter(state, pod_with(containers=[container()]).build(), []) == SKIP
    assert state.get(node_declared_features.PRE_FILTER_KEY) is None


def test_pre_filter_stores_the_requirements() -> None:
    state = CycleState()
    assert plugin().pre_filter(state, NEEDS_RESTART_ALL.build(), []) == SUCCESS
    assert state.read(node_declared_features.PRE_FILTER_KEY) == {RESTART_ALL}


@pytest.mark.parametrize(
    ("required", "declared", "want"),
    [
        pytest.param({"FeatureA"}, ("FeatureA", "FeatureB"), SUCCESS, id="node-matches"),
        pytest.param({"FeatureA"}, ("FeatureB",), REJECT, id="node-does-not-match"),
        pytest.param({"FeatureA", "FeatureC"}, ("FeatureA", "FeatureB", "FeatureC"), SUCCESS, id="subset"),
        pytest.param({"FeatureA"}, (), REJECT, id="node-declares-nothing"),
        pytest.param({"FeatureA", "FeatureB"}, ("FeatureA",), REJECT, id="some-but-not-all"),
    ],
)
def test_filter(required: set[str], declared: tuple[str, ...], want: Status) -> None:
    state = CycleState()
    state.write(node_declared_features.PRE_FILTER_KEY, frozenset(required))
    got = plugin().filter(state, bare().build(), node_info(node_declaring("n", *declared)))
    assert got == want
    assert got.is_success or got.plugin == "NodeDeclaredFeatures"


def test_filter_after_pre_filter() -> None:
    """PreFilter's requirements against nodes declaring more, less and other features."""
    pl, state, pod = plugin(), CycleState(), NEEDS_RESTART_ALL.build()
    assert pl.pre_filter(state, pod, []) == SUCCESS
    assert pl.filter(state, pod, node_info(node_declaring("a", RESTART_ALL, BIND_MOUNT_OPTIONS))) == SUCCESS
    assert pl.filter(state, pod, node_info(node_declaring("b", BIND_MOUNT_OPTIONS))) == REJECT
    assert pl.filter(state, pod, node_info(node_declaring("c"))) == REJECT


def test_filter_on_a_node_info_without_its_node_rejects() -> None:
    state = CycleState()
    state.write(node_declared_features.PRE_FILTER_KEY, frozenset({"FeatureA"}))
    assert plugin().filter(state, bare().build(), node_info(None)) == REJECT


def test_filter_without_pre_filter_state_is_an_error() -> None:
    """Upstream answers an error status; here the read raises and the runtime makes it one."""
    with pytest.raises(StateNotFoundError):
        plugin().filter(CycleState(), bare().build(), node_info(node_declaring("n")))


# --- configuration -------------------------------------------------------------------------------

HEADER = "apiVersion: kubescheduler.config.k8s.io/v1\nkind: KubeSchedulerConfiguration\n"


def _enabled(body: str, point: str) -> list[str]:
    profile = load_config(HEADER + body, in_tree_registry()).profiles[0]
    return [r.name for r in profile.enabled(point)]


def test_in_the_default_profile_last_at_pre_filter_and_filter() -> None:
    """Upstream appends it to the default multiPoint list (after DefaultBinder) while its gate is on."""
    # GangScheduling (appended after it, with the GenericWorkload gate) has PreFilter and Filter of
    # its own here (reservations, docs/gangs.md): NodeDeclaredFeatures is last before it.
    assert _enabled("", "preFilter")[-2:] == ["NodeDeclaredFeatures", "GangScheduling"]
    assert _enabled("", "filter")[-2:] == ["NodeDeclaredFeatures", "GangScheduling"]
    assert "NodeDeclaredFeatures" not in _enabled("", "score")


def test_config_may_disable_and_enable_it() -> None:
    off = "profiles:\n- plugins:\n    multiPoint:\n      disabled: [{name: NodeDeclaredFeatures}]\n"
    assert "NodeDeclaredFeatures" not in _enabled(off, "filter")
    assert "NodeDeclaredFeatures" not in _enabled(off, "preFilter")
    only = "profiles:\n- plugins:\n" + "".join(
        f"    {point}:\n      disabled: [{{name: '*'}}]\n      enabled: [{{name: NodeDeclaredFeatures}}]\n"
        for point in ("preFilter", "filter")
    )
    assert _enabled(only, "preFilter") == _enabled(only, "filter") == ["NodeDeclaredFeatures"]
