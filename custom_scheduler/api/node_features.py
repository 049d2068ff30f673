"""Node declared features: which features a pod needs of its node, and which features a node declares.

Why: a kubelet publishes in ``status.declaredFeatures`` the features it has enabled that change what a
pod may ask of it (named after their feature gates; kept sorted and unique by API validation). A pod
whose spec uses one (a ``RestartAllContainers`` restart rule, host network in a user namespace, bind
mount options) must land on a node that declares it, or a kubelet of an older or differently gated
release would run it wrongly or reject it. Which spec fields make a pod need which feature is
kube-scheduler's (its ``NodeDeclaredFeatures`` plugin calls
``ndf.DefaultFramework.InferForPodScheduling``, k8s.io/component-helpers/nodedeclaredfeatures at
v0.37.2); it is carried over here as plain functions on the pod's JSON spec, evaluated once when the
pod is projected (:func:`infer_for_scheduling`), so the plugin only compares two sets.

Only the scheduling half is here: the features' ``Discover`` (the kubelet's side) and
``InferForUpdate`` (in-place resize admission) do not concern a scheduler, so the features that only
matter for updates, or that another plugin checks (``DRAOptionalNodeOperations`` is checked by
DynamicResources on the allocation), are registered with an inference that never asks for them.

Version gating: a feature may name a ``max_version`` (its GA release plus the supported version skew);
a scheduler newer than that stops requiring it, since every node it may meet has it. Upstream compares
the scheduler binary's own version; ours is the release whose semantics we implement,
:data:`KUBE_VERSION`. No feature registered at v0.37.2 has a max version yet.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

JSON = Mapping[str, Any]

#: A Kubernetes release as (major, minor, patch), compared as upstream's semantic versions are.
Version = tuple[int, int, int]

#: The kube-scheduler release this scheduler matches (v1.37.2): what upstream passes as the target
#: version (``version.Get()`` of its binary). Bump it together with the feature registry below.
KUBE_VERSION: Version = (1, 37, 2)

#: ``ContainerRestartRule.action`` that restarts every container of the pod in place.
RESTART_ALL_CONTAINERS = "RestartAllContainers"


@dataclass(frozen=True, slots=True)
class Feature:
    """One declared feature, as far as scheduling is concerned (upstream's ``types.Feature``).

    ``infer_for_scheduling(spec)`` says whether a pod with this spec needs a node declaring the
    feature; ``max_version`` is the last release (inclusive) for which that still matters, None
    for no bound.
    """

    name: str
    infer_for_scheduling: Callable[[JSON], bool]
    max_version: Version | None = None


def _never(spec: JSON) -> bool:
    """Features that do not affect scheduling (update-only, node-side, or checked elsewhere)."""
    del spec
    return False


def _containers(spec: JSON, *kinds: str) -> Iterable[JSON]:
    for kind in kinds:
        yield from spec.get(kind) or ()


def _needs_restart_all_containers(spec: JSON) -> bool:
    """RestartAllContainersOnContainerExits: a container or init container has a restart rule whose
    action restarts the whole pod (ephemeral containers have no restart rules)."""
    return any(
        rule.get("action") == RESTART_ALL_CONTAINERS
        for c in _containers(spec, "containers", "initContainers")
        for rule in c.get("restartPolicyRules") or ()
    )


def _needs_user_namespaces_host_network(spec: JSON) -> bool:
    """UserNamespacesHostNetworkSupport: host network *and* a user namespace (``hostUsers: false``
    given explicitly; unset means the host's user namespace)."""
    return spec.get("hostNetwork") is True and spec.get("hostUsers") is False


def _needs_volume_bind_mount_options(spec: JSON) -> bool:
    """VolumeBindMountOptions: a volume mount of any container, init or ephemeral container with
    non-empty ``bindMountOptions``."""
    return any(
        bool(m.get("bindMountOptions"))
        for c in _containers(spec, "containers", "initContainers", "ephemeralContainers")
        for m in c.get("volumeMounts") or ()
    )


#: Every feature of ``features.AllFeatures`` at v0.37.2, sorted by name as upstream's framework sorts
#: its registry. Names are the declared feature names (equal to their feature gates).
FEATURES: tuple[Feature, ...] = (
    Feature("DRANodeAllocatableResources", _never),
    Feature("DRAOptionalNodeOperations", _never),  # checked by DynamicResources on the allocation
    Feature("ExtendWebSocketsToKubelet", _never),
    Feature("InPlacePodLevelResourcesVerticalScaling", _never),  # resize (update) only
    Feature("InPlacePodVerticalScalingInitContainers", _never),  # resize (update) only
    Feature("InPlacePodVerticalScalingMemoryBackedVolumes", _never),  # resize (update) only
    Feature("RestartAllContainersOnContainerExits", _needs_restart_all_containers),
    Feature("UserNamespacesHostNetworkSupport", _needs_user_namespaces_host_network),
    Feature("VolumeBindMountOptions", _needs_volume_bind_mount_options),
)

_NONE: frozenset[str] = frozenset()


def infer_for_scheduling(
    spec: JSON, version: Version = KUBE_VERSION, features: Sequence[Feature] = FEATURES
) -> frozenset[str]:
    """The features a pod with ``spec`` needs its node to declare, for a scheduler at ``version``
    (upstream's ``InferForPodScheduling``): each feature whose inference says so, unless
    ``version`` is past the feature's max version. Empty for almost every pod."""
    needed = [
        f.name for f in features if (f.max_version is None or version <= f.max_version) and f.infer_for_scheduling(spec)
    ]
    return frozenset(needed) if needed else _NONE


def declared_features(status: JSON) -> frozenset[str]:
    """A node's ``status.declaredFeatures`` as a set.

    Upstream maps the list onto its registry and drops names it does not know (``TryMap``); keeping
    them changes nothing, since a pod only ever needs registered features and the check is a subset
    test. Raises TypeError when the field is not a list of strings (the projection reports that as
    a malformed object)."""
    raw = status.get("declaredFeatures")
    if not raw:
        return _NONE
    if not isinstance(raw, list) or not all(isinstance(f, str) for f in raw):
        raise TypeError("status.declaredFeatures is not a list of strings")
    return frozenset(raw)


def satisfies(declared: frozenset[str], required: frozenset[str]) -> bool:
    """Whether a node declaring ``declared`` has every feature in ``required`` (upstream's
    ``FeatureSet.IsSubset``)."""
    return required <= declared
