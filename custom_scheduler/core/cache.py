"""The scheduler's view of nodes and of the pods on them, including pods it has only assumed.

Pod states (kube-scheduler's cache state machine)::

                 assume()                   informer add (bound)
    (unknown) ─────────────▶  Assumed  ─────────────────────────▶  Added
        │                     │  │  forget() / expire()               │
        │                     │  └──────────────────▶ (unknown)       │ informer delete
        │  informer add       │ finish_binding(): starts the TTL      ▼
        └──────────────────────────────────────────────────────▶  (unknown)

Invariant (checked by :meth:`Cache.check_invariants` in tests): for every node, ``requested`` equals
the sum of the requests of its assigned and assumed pods. Assumed pods count at once, so a burst
of pods never over-commits a node while their bindings are still in flight.

The informer threads mutate the cache under one lock; the scheduling thread copies what changed
into a :class:`Snapshot` once per cycle (incrementally, by NodeInfo generation), so each cycle
reads a consistent view without holding the lock.
"""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from custom_scheduler.api.model import Node, Pod
from custom_scheduler.framework.arrays import NodeArrays
from custom_scheduler.framework.types import ImageState, NodeInfo, Snapshot

#: How long an assumed pod whose binding succeeded may wait for the watch to confirm it.
DEFAULT_ASSUME_TTL = 30.0

ZONE_LABELS = ("topology.kubernetes.io/zone", "failure-domain.beta.kubernetes.io/zone")


@dataclass(slots=True)
class _PodState:
    pod: Pod
    assumed: bool = False
    binding_finished: bool = False
    deadline: float | None = None


class Cache:
    def __init__(self, *, ttl: float = DEFAULT_ASSUME_TTL, clock: Callable[[], float] = time.monotonic) -> None:
        self._lock = threading.RLock()
        self._nodes: dict[str, NodeInfo] = {}
        self._pods: dict[str, _PodState] = {}
        self._images: dict[str, ImageState] = {}
        self._gen = itertools.count(1)
        self._structure_gen = 0  # bumps when the set of nodes changes
        # Names touched since the primary snapshot (the scheduling loop's) was last updated, so a
        # cycle copies only what changed instead of walking every node.
        self._dirty: set[str] = set()
        self._primary: Snapshot | None = None
        # Bound pods taken out for a group preemption's dry run (hold_out/restore_held).
        self._held: dict[str, _PodState] = {}
        self._ttl = ttl
        self._clock = clock

    # -- nodes ------------------------------------------------------------------------------------
    def _touch(self, ni: NodeInfo, name: str) -> None:
        ni.generation = next(self._gen)
        self._dirty.add(name)

    def add_node(self, node: Node) -> None:
        with self._lock:
            ni = self._nodes.get(node.name)
            if ni is None:
                ni = self._nodes[node.name] = NodeInfo()
                self._structure_gen = next(self._gen)
            elif ni.node is not None:
                self._remove_images(ni.node)
            elif ni.node is None:
                self._structure_gen = next(self._gen)
            ni.node = node
            self._add_images(node, ni)
            self._touch(ni, node.name)

    update_node = add_node

    def remove_node(self, name: str) -> None:
        """Forget a node. Its pods stay accounted (as kube-scheduler does) until their own deletes."""
        with self._lock:
            ni = self._nodes.get(name)
            if ni is None:
                return
            if ni.node is not None:
                self._remove_images(ni.node)
            ni.node = None
            if not ni.pods:
                del self._nodes[name]
            self._structure_gen = next(self._gen)
            self._touch(ni, name)

    def _add_images(self, node: Node, ni: NodeInfo) -> None:
        states = {}
        for image, size in node.images.items():
            st = self._images.get(image)
            if st is None:
                st = self._images[image] = ImageState(size, 0)
            st.num_nodes += 1
            states[image] = st
        ni.image_states = states

    def _remove_images(self, node: Node) -> None:
        for image in node.images:
            st = self._images.get(image)
            if st is not None:
                st.num_nodes -= 1
                if st.num_nodes <= 0:
                    del self._images[image]

    # -- pods -------------------------------------------------------------------------------------
    def _node_for(self, name: str) -> NodeInfo:
        ni = self._nodes.get(name)
        if ni is None:
            # A pod may arrive before its node (informers are independent); keep a placeholder.
            ni = self._nodes[name] = NodeInfo()
        return ni

    def _add_to_node(self, pod: Pod) -> None:
        ni = self._node_for(pod.node_name)
        ni.add_pod(pod)
        self._touch(ni, pod.node_name)

    def _remove_from_node(self, pod: Pod) -> None:
        ni = self._nodes.get(pod.node_name)
        if ni is None:
            return
        ni.remove_pod(pod)
        self._touch(ni, pod.node_name)
        if ni.node is None and not ni.pods:
            del self._nodes[pod.node_name]

    def assume(self, pod: Pod, node_name: str) -> Pod:
        """Account ``pod`` on ``node_name`` before its binding is confirmed; returns the assumed copy."""
        with self._lock:
            if pod.uid in self._pods:
                raise ValueError(f"pod {pod.key} ({pod.uid}) is already in the cache")
            assumed = _with_node(pod, node_name)
            self._pods[pod.uid] = _PodState(assumed, assumed=True)
            self._add_to_node(assumed)
            return assumed

    def finish_binding(self, uid: str) -> None:
        """The bind call succeeded; the assumption expires after the TTL unless the watch confirms it."""
        with self._lock:
            st = self._pods.get(uid)
            if st is not None and st.assumed:
                st.binding_finished = True
                st.deadline = self._clock() + self._ttl

    def forget(self, uid: str) -> None:
        """Drop an assumed pod (its binding failed)."""
        with self._lock:
            st = self._pods.get(uid)
            if st is None or not st.assumed:
                return
            del self._pods[uid]
            self._remove_from_node(st.pod)

    def overcommitted(self, node_name: str) -> list[str]:
        """Resources on which the node's pods (assigned and assumed) exceed its allocatable.

        The binder checks this just before it POSTs a binding: pods bound meanwhile by another
        scheduler reach the cache through the watch, and binding on top of them would over-commit.
        """
        with self._lock:
            ni = self._nodes.get(node_name)
            if ni is None or ni.node is None:
                return []
            alloc, req = ni.node.allocatable, ni.requested
            out = []
            if alloc.allowed_pods and len(ni.pods) > alloc.allowed_pods:
                out.append("pods")
            if req.milli_cpu > alloc.milli_cpu:
                out.append("cpu")
            if req.memory > alloc.memory:
                out.append("memory")
            if alloc.ephemeral_storage and req.ephemeral_storage > alloc.ephemeral_storage:
                out.append("ephemeral-storage")
            out.extend(r for r, v in req.scalar.items() if v > alloc.scalar.get(r, 0))
            return out

    def is_assumed(self, uid: str) -> bool:
        with self._lock:
            st = self._pods.get(uid)
            return bool(st and st.assumed)

    def hold_out(self, pods: Iterable[Pod]) -> list[Pod]:
        """Take bound ``pods`` out of their nodes for a dry run (a gang's preemption: would the
        whole gang fit with these gone?); :meth:`restore_held` puts them back. An informer
        event about a held pod meanwhile wins: an update puts it back at once, a delete means it
        is not restored. Returns the pods actually held (assumed or unknown pods are skipped)."""
        out: list[Pod] = []
        with self._lock:
            for pod in pods:
                st = self._pods.get(pod.uid)
                if st is None or st.assumed:
                    continue
                del self._pods[pod.uid]
                self._remove_from_node(st.pod)
                self._held[pod.uid] = st
                out.append(st.pod)
        return out

    def restore_held(self) -> None:
        with self._lock:
            for uid, st in self._held.items():
                if uid not in self._pods:
                    self._pods[uid] = st
                    self._add_to_node(st.pod)
            self._held.clear()

    def add_pod(self, pod: Pod) -> None:
        """An assigned pod seen by the informer: confirms an assumption, or adds a new pod."""
        with self._lock:
            self._held.pop(pod.uid, None)
            st = self._pods.get(pod.uid)
            if st is not None:
                # Confirmed (possibly on another node than assumed, or an update of a known pod).
                self._remove_from_node(st.pod)
            self._pods[pod.uid] = _PodState(pod)
            self._add_to_node(pod)

    def update_pod(self, pod: Pod) -> None:
        self.add_pod(pod)

    def remove_pod(self, pod: Pod) -> None:
        with self._lock:
            self._held.pop(pod.uid, None)
            st = self._pods.pop(pod.uid, None)
            if st is not None:
                self._remove_from_node(st.pod)

    def get_pod(self, uid: str) -> Pod | None:
        with self._lock:
            st = self._pods.get(uid)
            return st.pod if st else None

    def cleanup_expired(self) -> list[Pod]:
        """Expire assumed pods whose binding finished more than TTL ago without confirmation."""
        now = self._clock()
        expired = []
        with self._lock:
            for uid, st in list(self._pods.items()):
                if st.assumed and st.binding_finished and st.deadline is not None and st.deadline <= now:
                    del self._pods[uid]
                    self._remove_from_node(st.pod)
                    expired.append(st.pod)
        return expired

    # -- snapshots --------------------------------------------------------------------------------
    def update_snapshot(self, snap: Snapshot) -> None:
        """Bring ``snap`` up to date, copying only NodeInfos that changed since it was last updated.

        The first snapshot updated becomes the *primary* one (the scheduling loop's): for it the
        cache remembers which nodes changed, so an update costs O(changed nodes). Any other
        snapshot (explain, simulate, tests) is brought up to date by generation, in O(nodes).
        """
        with self._lock:
            if self._primary is None:
                self._primary = snap
            structural = self._structure_gen > snap.generation
            if snap is self._primary and snap.generation:
                names: set[str] | list[str] = self._dirty
            else:
                names = [n for n, ni in self._nodes.items() if ni.generation > snap.generation]
                structural = structural or not snap.node_list
            for name in names:
                ni = self._nodes.get(name)
                if ni is None or ni.node is None:
                    if snap.node_infos.pop(name, None) is not None:
                        structural = True
                    snap.affinity_nodes.discard(name)
                    snap.anti_affinity_nodes.discard(name)
                    continue
                clone = ni.clone()
                _mark(snap.affinity_nodes, name, bool(clone.pods_with_affinity))
                _mark(snap.anti_affinity_nodes, name, bool(clone.pods_with_required_anti_affinity))
                if name not in snap.node_infos:
                    structural = True
                snap.node_infos[name] = clone
                pos = snap.positions.get(name)
                if pos is not None and not structural:
                    snap.node_list[pos] = clone
                    if snap.arrays is not None:
                        snap.arrays.set_row(pos, clone)
            if snap is self._primary:
                self._dirty = set()
            if structural:
                for name in [n for n in snap.node_infos if n not in self._nodes or self._nodes[n].node is None]:
                    del snap.node_infos[name]
                snap.node_list = _zone_interleaved(snap.node_infos.values())
                snap.positions = {ni.name: i for i, ni in enumerate(snap.node_list)}
                snap.arrays = NodeArrays()
                snap.arrays.rebuild(snap.node_list)
                snap.affinity_nodes = {ni.name for ni in snap.node_list if ni.pods_with_affinity}
                snap.anti_affinity_nodes = {ni.name for ni in snap.node_list if ni.pods_with_required_anti_affinity}
            snap.generation = next(self._gen)

    def snapshot(self) -> Snapshot:
        s = Snapshot()
        self.update_snapshot(s)
        return s

    # -- introspection ----------------------------------------------------------------------------
    def node_names(self) -> list[str]:
        with self._lock:
            return [n for n, ni in self._nodes.items() if ni.node is not None]

    def counts(self) -> dict[str, int]:
        with self._lock:
            return {
                "nodes": sum(1 for ni in self._nodes.values() if ni.node is not None),
                "pods": len(self._pods),
                "assumed_pods": sum(1 for st in self._pods.values() if st.assumed),
            }

    def check_invariants(self) -> list[str]:
        """Problems found (empty when consistent): requested == Σ pods, and each pod is on its node."""
        from custom_scheduler.api.resources import Resources

        problems = []
        with self._lock:
            for name, ni in self._nodes.items():
                total = Resources()
                for p in ni.pods.values():
                    total.add(p.requests)
                    st = self._pods.get(p.uid)
                    if st is None or st.pod.node_name != name:
                        problems.append(f"{name}: pod {p.key} is not tracked on this node")
                if (total.milli_cpu, total.memory, total.scalar) != (
                    ni.requested.milli_cpu,
                    ni.requested.memory,
                    ni.requested.scalar,
                ):
                    problems.append(f"{name}: requested {ni.requested} != sum of pods {total}")
            for uid, st in self._pods.items():
                holder = self._nodes.get(st.pod.node_name)
                if holder is None or uid not in holder.pods:
                    problems.append(f"pod {st.pod.key} is missing from node {st.pod.node_name}")
        return problems


def _mark(names: set[str], name: str, present: bool) -> None:
    if present:
        names.add(name)
    else:
        names.discard(name)


def _with_node(pod: Pod, node_name: str) -> Pod:
    from dataclasses import replace

    return replace(pod, node_name=node_name)


def _zone_interleaved(infos: Iterable[NodeInfo]) -> list[NodeInfo]:
    """Order nodes round-robin across zones (kube-scheduler's node tree), so that scanning a
    prefix of the list (percentageOfNodesToScore) still spreads over zones."""
    zones: dict[str, list[NodeInfo]] = {}
    for ni in sorted(infos, key=lambda n: n.name):
        labels = ni.node.labels if ni.node else {}
        zone = next((labels[k] for k in ZONE_LABELS if k in labels), "")
        zones.setdefault(zone, []).append(ni)
    out: list[NodeInfo] = []
    lists = list(zones.values())
    for i in range(max((len(v) for v in lists), default=0)):
        out.extend(v[i] for v in lists if i < len(v))
    return out
