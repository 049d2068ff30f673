"""NodeDeclaredFeatures: a pod that uses a node-dependent feature lands only on nodes declaring it.

Kubelets publish the features they have enabled in ``status.declaredFeatures``; a pod whose spec
needs one (a ``RestartAllContainers`` restart rule, host network in a user namespace, bind mount
options: :mod:`custom_scheduler.api.node_features`) may only run on a node that declares every
feature it needs. The requirements are inferred once when the pod is projected, so PreFilter reads
them, returns Skip for the usual pod that needs nothing (Filter then does not run at all) and Filter
is one subset test. Evicting pods cannot give a node a feature, so the rejection is
UnschedulableAndUnresolvable (preemption skips such nodes). A NodeInfo without its Node declares
nothing, as upstream's empty feature set.

Upstream's gate is GA and locked on in 1.37, so the plugin is always active. Its other gate,
``InPlacePodVerticalScalingSchedulerPreemption`` (alpha in 1.37, off by default), would skip pods
whose resize is deferred; with the default off that skip never happens, and this plugin omits it.

Requeueing: upstream registers Node/Add and Node/UpdateNodeDeclaredFeature (queue when the list
changed) and the pod's own update (queue when its requirements changed). Plugins here declare no
events; the core decides which events move unschedulable pods (``core.scheduler``): a node add
moves every one, a node update when a field it compares (declared features among them) changed, and a pod's own
update counts when its spec signature (``required_node_features`` included) changes.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, ClassVar

from custom_scheduler.api.model import Node, Pod
from custom_scheduler.api.node_features import satisfies
from custom_scheduler.framework import cluster_events as ce
from custom_scheduler.framework import registry
from custom_scheduler.framework.interface import Handle
from custom_scheduler.framework.types import SKIP, SUCCESS, Code, CycleState, NodeInfo, StateKey, Status
from custom_scheduler.plugins import signers

NAME = "NodeDeclaredFeatures"

ERR_REASON_UNSATISFIED_REQUIREMENTS = "node(s) didn't match Pod's required features"

#: The features the pod needs, written by PreFilter for Filter.
PRE_FILTER_KEY: StateKey[frozenset[str]] = StateKey(f"PreFilter{NAME}")

_REJECT = Status(Code.UNSCHEDULABLE_AND_UNRESOLVABLE, (ERR_REASON_UNSATISFIED_REQUIREMENTS,), NAME)  # shared

_NOTHING: frozenset[str] = frozenset()


class NodeDeclaredFeatures:
    """PreFilter + Filter: the node must declare every feature the pod needs."""

    name: ClassVar[str] = NAME

    def __init__(self, args: Any, handle: Handle) -> None:
        del args, handle

    def sign_pod(self, pod: Pod) -> signers.Fragments:
        """What this plugin reads of the pod (opportunistic batching)."""
        return signers.features(pod)

    def events_to_register(self) -> list[ce.ClusterEventWithHint]:
        """A node that declares new features; the pod needing other features."""
        return [
            ce.ClusterEventWithHint(
                ce.ClusterEvent(ce.Resource.NODE, ce.Action.ADD | ce.Action.UPDATE_NODE_DECLARED_FEATURE),
                _after_node_change,
            ),
            ce.ClusterEventWithHint(ce.ClusterEvent(ce.Resource.TARGET_POD, ce.Action.UPDATE), _after_pod_update),
        ]

    def pre_filter(self, state: CycleState, pod: Pod, nodes: Sequence[NodeInfo]) -> Status:
        required = pod.required_node_features
        if not required:
            return SKIP
        state.write(PRE_FILTER_KEY, required)
        return SUCCESS

    def filter(self, state: CycleState, pod: Pod, node_info: NodeInfo) -> Status:
        required = state.read(PRE_FILTER_KEY)
        node = node_info.node
        if satisfies(node.declared_features if node is not None else _NOTHING, required):
            return SUCCESS
        return _REJECT


def _after_node_change(pod: Pod, old: Node | None, new: Node) -> ce.Hint:
    same = old is not None and old.declared_features == new.declared_features
    return ce.Hint.SKIP if same else ce.Hint.QUEUE


def _after_pod_update(pod: Pod, old: Pod, new: Pod) -> ce.Hint:
    return ce.Hint.SKIP if old.required_node_features == new.required_node_features else ce.Hint.QUEUE


SPEC = registry.PluginSpec(NAME, factory=NodeDeclaredFeatures, parse_args=registry.no_args)
