"""Test helpers for plugin unit tests: a fake Handle, NodeInfo assembly, pods without containers.

``tests/builders.py`` always gives a pod one container; kube-scheduler's plugin tests often use pods
with no containers at all (``&v1.Pod{}``), which matters for non-zero request defaults.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any, cast

from custom_scheduler.api.labels import Selector
from custom_scheduler.api.model import Node, Pod, PodDisruptionBudget
from custom_scheduler.framework.dra_store import DRAStore
from custom_scheduler.framework.fence import Fence
from custom_scheduler.framework.gang_store import GangStore
from custom_scheduler.framework.interface import Handle, RequestsFit, WaitingPods
from custom_scheduler.framework.loadmetrics import MetricsSource, Sources
from custom_scheduler.framework.types import CycleState, ImageState, NodeInfo, NodeScore, Snapshot, Status
from custom_scheduler.framework.volumes import VolumeStore
from tests.builders import PodBuilder, make_pod


class StubHandle:
    """The part of the Handle these plugins use: the snapshot's nodes. Offline: no API client."""

    def __init__(
        self, nodes: Sequence[NodeInfo] = (), dra: DRAStore | None = None, metrics: Sources | None = None
    ) -> None:
        self._nodes = list(nodes)
        self._dra = dra if dra is not None else DRAStore()
        self._metrics = metrics if metrics is not None else Sources()

    def snapshot_nodes(self) -> Sequence[NodeInfo]:
        return self._nodes

    def get_node(self, name: str) -> NodeInfo | None:
        return next((n for n in self._nodes if n.name == name), None)

    @property
    def client(self) -> Any:
        return None

    @property
    def profile_name(self) -> str:
        return "custom-scheduler"

    @property
    def dra(self) -> DRAStore:
        """DRA objects (empty unless given): plugins that look at devices read them here."""
        return self._dra

    def metrics_source(self, name: str) -> MetricsSource | None:
        """NodeLoad's usage sources (none unless given)."""
        return self._metrics.get(name)


def fake_handle(nodes: Sequence[NodeInfo] = (), dra: DRAStore | None = None, metrics: Sources | None = None) -> Handle:
    """A :class:`StubHandle` typed as a Handle.

    The cast is deliberate: the Handle protocol grows with the runtime (preemption, events), while the
    plugins tested here only ever read the snapshot; an unexpected call fails loudly with AttributeError.
    """
    return cast(Handle, StubHandle(nodes, dra, metrics))


def node_info(node: Node | None, *pods: Pod) -> NodeInfo:
    ni = NodeInfo(node)
    for p in pods:
        ni.add_pod(p)
    return ni


def with_images(infos: Iterable[NodeInfo]) -> list[NodeInfo]:
    """Fill ``image_states`` the way the cache does: size per image, number of nodes holding it."""
    infos = list(infos)
    counts: dict[str, int] = {}
    for ni in infos:
        for image in ni.node.images if ni.node else {}:
            counts[image] = counts.get(image, 0) + 1
    for ni in infos:
        if ni.node:
            ni.image_states = {img: ImageState(size, counts[img]) for img, size in ni.node.images.items()}
    return infos


def bare(builder: PodBuilder | None = None) -> PodBuilder:
    """A pod builder with no containers (kube-scheduler tests' ``&v1.Pod{}``)."""
    b = builder or make_pod()
    b.spec["containers"] = []
    return b


def containers(*requests: dict[str, str], builder: PodBuilder | None = None) -> PodBuilder:
    """A pod with one container per ``requests`` mapping (an empty mapping: a container without requests)."""
    b = bare(builder)
    for i, req in enumerate(requests):
        c: dict[str, Any] = {"name": f"c{i}", "image": "registry.k8s.io/pause:3.9"}
        if req:
            c["resources"] = {"requests": dict(req)}
        b.spec["containers"].append(c)
    return b


def scores(plugin: Any, pod: Pod, infos: Sequence[NodeInfo], *, normalize: bool = True) -> list[int]:
    """Run PreScore (if any), Score over ``infos`` and NormalizeScore (if any); return the scores."""
    state = CycleState()
    if hasattr(plugin, "pre_score"):
        plugin.pre_score(state, pod, infos)
    result = [NodeScore(ni.name, plugin.score(state, pod, ni)) for ni in infos]
    if normalize and hasattr(plugin, "normalize_score"):
        plugin.normalize_score(state, pod, result)
    return [s.score for s in result]


class FakeHandle:
    """A full framework Handle for plugin tests (mypy checks it against the protocol): snapshot,
    namespace labels (counting lookups) and the default spread selector are real, the snapshot has
    no columns, the stores are empty, the fence is held; the preemption and Permit methods are never
    called by the plugins that use it and raise."""

    def __init__(
        self,
        nodes: Sequence[NodeInfo],
        namespaces: Mapping[str, Mapping[str, str]] | None = None,
        *,
        spread_selector: Selector | None = None,
    ) -> None:
        self.nodes = list(nodes)
        self.namespaces = dict(namespaces or {})
        self.spread_selector = spread_selector
        self.namespace_lookups = 0
        self._volumes = VolumeStore()
        self._dra = DRAStore()
        self._gangs = GangStore()
        self._fence = Fence()
        #: Pods whose own preemption is "still running" (DefaultPreemption's PreEnqueue reads it).
        self.preempting_uids: set[str] = set()

    def snapshot_nodes(self) -> Sequence[NodeInfo]:
        return self.nodes

    def current_snapshot(self) -> Snapshot:
        """The nodes as a snapshot without columns, so the plugins take their per-node paths."""
        infos = list(self.nodes)
        return Snapshot(
            node_infos={n.name: n for n in infos}, node_list=infos, positions={n.name: i for i, n in enumerate(infos)}
        )

    def get_node(self, name: str) -> NodeInfo | None:
        return next((n for n in self.nodes if n.name == name), None)

    @property
    def client(self) -> Any:
        return None

    @property
    def profile_name(self) -> str:
        return "test"

    def namespace_labels(self, namespace: str) -> Mapping[str, str] | None:
        self.namespace_lookups += 1
        return self.namespaces.get(namespace)

    def namespace_labels_version(self) -> int:
        return 0

    def default_spread_selector(self, pod: Pod) -> Selector | None:
        return self.spread_selector

    def pdbs(self) -> Sequence[PodDisruptionBudget]:
        return ()

    def nominated_pods(self, node_name: str) -> Sequence[Pod]:
        return ()

    def run_filter_with_nominated(self, state: CycleState, pod: Pod, node_info: NodeInfo) -> Status:
        raise NotImplementedError

    def run_pre_filter_extension_add_pod(
        self, state: CycleState, pod: Pod, pod_to_add: Pod, node_info: NodeInfo
    ) -> Status:
        raise NotImplementedError

    def run_pre_filter_extension_remove_pod(
        self, state: CycleState, pod: Pod, pod_to_remove: Pod, node_info: NodeInfo
    ) -> Status:
        raise NotImplementedError

    def extensions_see_added_pods(self, state: CycleState) -> bool:
        raise NotImplementedError

    def requests_fit(self, state: CycleState, pod: Pod) -> RequestsFit | None:
        return None

    def record_event(
        self, pod: Any, *, type_: str, reason: str, action: str, note: str, kind: str = "Pod", api_version: str = "v1"
    ) -> None:
        return None

    def metrics_source(self, name: str) -> MetricsSource | None:
        return None

    @property
    def volumes(self) -> VolumeStore:
        return self._volumes

    @property
    def dra(self) -> DRAStore:
        return self._dra

    @property
    def waiting_pods(self) -> WaitingPods:
        raise NotImplementedError

    def activate(self, pods: Sequence[Pod]) -> None:
        raise NotImplementedError

    def preempting(self, uid: str) -> bool:
        return uid in self.preempting_uids

    @property
    def gangs(self) -> GangStore:
        return self._gangs

    @property
    def fence(self) -> Fence:
        return self._fence
