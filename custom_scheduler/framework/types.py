"""The framework's value types: status codes, per-node aggregates, cycle state, the fit error.

These mirror kube-scheduler's ``pkg/scheduler/framework/types.go`` and ``interface.go`` in meaning,
so a reader of upstream finds the same concepts under the same names:

- :class:`Code` / :class:`Status`: what a plugin answers. An expected rejection is a Status value;
  a bug is an exception that the runtime turns into an ERROR status stamped with the plugin's name.
- :class:`NodeInfo`: a node plus the aggregates of the pods on it (requested resources, host ports,
  pods with affinity), maintained incrementally by the cache so filters never rescan pods.
- :class:`CycleState`: per-pod scratch space from PreFilter/PreScore to Filter/Score.
- :class:`FitError`: "0/N nodes are available: ..." built from per-node statuses.
"""

from __future__ import annotations

import enum
import functools
import random
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from custom_scheduler.api.model import Node, Pod
from custom_scheduler.api.resources import Resources

MAX_NODE_SCORE = 100
MIN_NODE_SCORE = 0


class Code(enum.Enum):
    """A plugin's verdict."""

    SUCCESS = 0
    """The plugin ran and the pod may proceed."""
    ERROR = 1
    """An internal error: the attempt fails and the pod is retried with backoff."""
    UNSCHEDULABLE = 2
    """The node does not fit now; preemption may make it fit."""
    UNSCHEDULABLE_AND_UNRESOLVABLE = 3
    """The node cannot fit whatever is evicted; preemption skips it."""
    WAIT = 4
    """Permit only: the pod waits before binding."""
    SKIP = 5
    """PreFilter/PreScore: the plugin has nothing to do for this pod; its Filter/Score is skipped."""


@dataclass(frozen=True, slots=True)
class Status:
    code: Code = Code.SUCCESS
    reasons: tuple[str, ...] = ()
    plugin: str = field(default="", compare=False)  # attribution, not part of the verdict
    error: BaseException | None = field(default=None, compare=False)

    @staticmethod
    def unschedulable(*reasons: str) -> Status:
        return _interned(Code.UNSCHEDULABLE, reasons, "")

    @staticmethod
    def unresolvable(*reasons: str) -> Status:
        return _interned(Code.UNSCHEDULABLE_AND_UNRESOLVABLE, reasons, "")

    @staticmethod
    def from_exception(e: BaseException, plugin: str = "") -> Status:
        return Status(Code.ERROR, (f"{type(e).__name__}: {e}",), plugin, e)

    @staticmethod
    def as_error(message: str, plugin: str = "") -> Status:
        return Status(Code.ERROR, (message,), plugin)

    @property
    def is_success(self) -> bool:
        return self.code is Code.SUCCESS

    @property
    def is_skip(self) -> bool:
        return self.code is Code.SKIP

    @property
    def is_rejected(self) -> bool:
        return self.code in (Code.UNSCHEDULABLE, Code.UNSCHEDULABLE_AND_UNRESOLVABLE)

    @property
    def message(self) -> str:
        return ", ".join(self.reasons)

    def with_plugin(self, plugin: str) -> Status:
        if self.plugin == plugin:
            return self
        if self.error is None:
            return _interned(self.code, self.reasons, plugin)
        return Status(self.code, self.reasons, plugin, self.error)


@functools.lru_cache(maxsize=8192)
def _interned(code: Code, reasons: tuple[str, ...], plugin: str) -> Status:
    """Rejections repeat the same few (code, reasons, plugin) values on thousands of nodes per
    cycle; a Status is immutable, so one shared instance per value spares the allocations."""
    return Status(code, reasons, plugin)


SUCCESS = Status()
SKIP = Status(Code.SKIP)


class BindOutcome(enum.Enum):
    """How a Bind ended, as the scheduler routes it (never by the message text)."""

    BOUND = "bound"
    """The API server accepted the Binding."""
    ALREADY_BOUND = "already_bound"
    """A retry found the pod already bound to this node: an earlier attempt went through."""
    CONFLICT = "conflict"
    """The pod is bound elsewhere or being deleted: it is not ours to bind; forget it."""
    GONE = "gone"
    """The pod no longer exists (or was replaced under the same name)."""
    FENCED = "fenced"
    """Leadership is lost: nothing was sent; the next leader owns the pod."""
    ERROR = "error"
    """Anything else (retries exhausted, rejected): undo and retry the pod after a backoff."""
    SKIPPED = "skipped"
    """This Bind plugin does not handle the pod (upstream's Skip): the next one is asked."""


@dataclass(frozen=True, slots=True)
class BindResult:
    """A Bind plugin's answer: the outcome, the Status for messages and attribution, and how many
    attempts beyond the first it took (per call, so concurrent binds never share a counter)."""

    outcome: BindOutcome
    status: Status = SUCCESS
    retries: int = 0

    @property
    def is_bound(self) -> bool:
        return self.outcome in (BindOutcome.BOUND, BindOutcome.ALREADY_BOUND)

    def with_plugin(self, plugin: str) -> BindResult:
        st = self.status.with_plugin(plugin)
        return self if st is self.status else BindResult(self.outcome, st, self.retries)


@dataclass(slots=True)
class ImageState:
    size: int
    num_nodes: int


class NodeInfo:
    """A node and the aggregates of its pods, kept in step by :meth:`add_pod` / :meth:`remove_pod`.

    ``requested`` holds the actual requests (what the Fit filter compares with allocatable);
    ``non_zero_*`` hold the requests with kube-scheduler's 100m/200Mi defaults (what scoring uses).
    ``generation`` changes on every mutation so snapshots copy only what changed.
    """

    __slots__ = (
        "generation",
        "image_states",
        "node",
        "non_zero_memory",
        "non_zero_milli_cpu",
        "pods",
        "pods_with_affinity",
        "pods_with_required_anti_affinity",
        "pvc_refs",
        "requested",
        "used_ports",
    )

    def __init__(self, node: Node | None = None) -> None:
        self.node: Node | None = node
        self.pods: dict[str, Pod] = {}
        self.requested = Resources()
        self.non_zero_milli_cpu = 0
        self.non_zero_memory = 0
        self.used_ports: dict[tuple[str, int], set[str]] = {}  # (protocol, port) -> host IPs
        self.pods_with_affinity: dict[str, Pod] = {}
        self.pods_with_required_anti_affinity: dict[str, Pod] = {}
        self.image_states: dict[str, ImageState] = {}
        # "namespace/claim" -> how many of this node's pods use it (VolumeRestrictions' RWOP check).
        self.pvc_refs: dict[str, int] = {}
        self.generation = 0

    @property
    def name(self) -> str:
        return self.node.name if self.node else ""

    @property
    def allocatable(self) -> Resources:
        return self.node.allocatable if self.node else Resources()

    def add_pod(self, pod: Pod) -> None:
        self.pods[pod.uid] = pod
        self.requested.add(pod.requests)
        self.non_zero_milli_cpu += pod.non_zero_milli_cpu
        self.non_zero_memory += pod.non_zero_memory
        for hp in pod.host_ports:
            self.used_ports.setdefault((hp.protocol, hp.port), set()).add(hp.ip)
        if pod.has_pod_affinity:
            self.pods_with_affinity[pod.uid] = pod
        if pod.has_required_anti_affinity:
            self.pods_with_required_anti_affinity[pod.uid] = pod
        for v in pod.volumes:
            if v.claim and not v.ephemeral:
                key = f"{pod.namespace}/{v.claim}"
                self.pvc_refs[key] = self.pvc_refs.get(key, 0) + 1

    def remove_pod(self, pod: Pod) -> bool:
        """Remove ``pod`` (matched by UID); returns False when it was not on this node."""
        old = self.pods.pop(pod.uid, None)
        if old is None:
            return False
        self.requested.add(old.requests, -1)
        self.non_zero_milli_cpu -= old.non_zero_milli_cpu
        self.non_zero_memory -= old.non_zero_memory
        for hp in old.host_ports:
            ips = self.used_ports.get((hp.protocol, hp.port))
            if ips is not None:
                # Another pod may hold the same (ip, proto, port) only if over-committed; recount.
                if not any(
                    p2.ip == hp.ip and p2.protocol == hp.protocol and p2.port == hp.port
                    for other in self.pods.values()
                    for p2 in other.host_ports
                ):
                    ips.discard(hp.ip)
                if not ips:
                    del self.used_ports[(hp.protocol, hp.port)]
        self.pods_with_affinity.pop(old.uid, None)
        self.pods_with_required_anti_affinity.pop(old.uid, None)
        for v in old.volumes:
            if v.claim and not v.ephemeral:
                key = f"{old.namespace}/{v.claim}"
                n = self.pvc_refs.get(key, 0) - 1
                if n > 0:
                    self.pvc_refs[key] = n
                else:
                    self.pvc_refs.pop(key, None)
        return True

    def clone(self) -> NodeInfo:
        c = NodeInfo(self.node)
        c.pods = dict(self.pods)
        c.requested = self.requested.copy()
        c.non_zero_milli_cpu = self.non_zero_milli_cpu
        c.non_zero_memory = self.non_zero_memory
        c.used_ports = {k: set(v) for k, v in self.used_ports.items()}
        c.pods_with_affinity = dict(self.pods_with_affinity)
        c.pods_with_required_anti_affinity = dict(self.pods_with_required_anti_affinity)
        c.image_states = self.image_states
        c.pvc_refs = dict(self.pvc_refs)
        c.generation = self.generation
        return c

    def __repr__(self) -> str:
        return f"NodeInfo({self.name!r}, pods={len(self.pods)}, requested={self.requested})"


T = TypeVar("T")


class StateKey(Generic[T]):
    """A typed key into :class:`CycleState`; the name derives from the writing plugin."""

    __slots__ = ("name",)

    def __init__(self, name: str) -> None:
        self.name = name


class StateNotFoundError(KeyError):
    """A plugin read cycle state that its PreFilter/PreScore did not write."""


class CycleState:
    """Per-attempt scratch space. ``node_names`` is the PreFilter result: ``None`` means all nodes."""

    __slots__ = (
        "_data",
        "narrowed_by",
        "node_names",
        "record_plugin_metrics",
        "restrictions",
        "rng",
        "skip_filter",
        "skip_score",
    )

    def __init__(self, rng: random.Random | None = None) -> None:
        self._data: dict[str, Any] = {}
        # The cycle's random source (preemption's candidate offset): owned and seeded by whoever
        # runs the cycle, so explain and simulate reproduce a decision from a seed.
        self.rng: random.Random = rng if rng is not None else _DEFAULT_RNG
        self.node_names: set[str] | None = None
        #: How many times a PreFilter narrowed ``node_names``: the runtime compares it around each
        #: plugin to learn which plugins' results excluded nodes (upstream's pluginsWithNodes).
        self.restrictions = 0
        #: The PreFilter plugins whose result excluded nodes, sorted (set by the runtime).
        self.narrowed_by: tuple[str, ...] = ()
        self.skip_filter: set[str] = set()
        self.skip_score: set[str] = set()
        #: Time each plugin in this cycle (``scheduler_plugin_execution_duration_seconds``): the
        #: cycle draws it for a sampled share of cycles, as upstream's SetRecordPluginMetrics.
        self.record_plugin_metrics = False

    def write(self, key: StateKey[T], value: T) -> None:
        self._data[key.name] = value

    def read(self, key: StateKey[T]) -> T:
        try:
            value: T = self._data[key.name]
        except KeyError:
            raise StateNotFoundError(f"{key.name} not found in cycle state: did its PreFilter run?") from None
        return value

    def get(self, key: StateKey[T]) -> T | None:
        value: T | None = self._data.get(key.name)
        return value

    def restrict_nodes(self, names: Iterable[str]) -> None:
        """Intersect the PreFilter result with ``names``."""
        s = set(names)
        self.node_names = s if self.node_names is None else (self.node_names & s)
        self.restrictions += 1

    def clone(self) -> CycleState:
        c = CycleState(self.rng)
        c._data = dict(self._data)
        c.node_names = None if self.node_names is None else set(self.node_names)
        c.restrictions = self.restrictions
        c.narrowed_by = self.narrowed_by
        c.skip_filter = set(self.skip_filter)
        c.skip_score = set(self.skip_score)
        c.record_plugin_metrics = self.record_plugin_metrics
        return c


_DEFAULT_RNG = random.Random()


@dataclass(slots=True)
class Snapshot:
    """An immutable-by-convention view for one scheduling cycle."""

    node_infos: dict[str, NodeInfo] = field(default_factory=dict)
    node_list: list[NodeInfo] = field(default_factory=list)
    generation: int = 0
    positions: dict[str, int] = field(default_factory=dict)  # node name -> index in node_list
    arrays: Any = None  # framework.arrays.NodeArrays aligned with node_list (set by the cache)
    # Names of nodes holding pods with pod (anti-)affinity / required anti-affinity: InterPodAffinity
    # visits only these instead of every node, for pods without affinity of their own.
    affinity_nodes: set[str] = field(default_factory=set)
    anti_affinity_nodes: set[str] = field(default_factory=set)

    def nodes_named(self, names: set[str]) -> list[NodeInfo]:
        infos = self.node_infos
        return [infos[n] for n in names if n in infos]

    def get(self, name: str) -> NodeInfo | None:
        return self.node_infos.get(name)

    def __len__(self) -> int:
        return len(self.node_list)


@dataclass(slots=True)
class NodeScore:
    name: str
    score: int


NO_NODES_AVAILABLE = "no nodes available to schedule pods"


@dataclass(slots=True)
class FitError(Exception):
    """No node fits: carries every rejected node's status for the aggregated message."""

    pod: Pod
    num_all_nodes: int
    statuses: dict[str, Status] = field(default_factory=dict)
    pre_filter_msg: str = ""
    post_filter_msg: str = ""

    def histogram(self) -> list[str]:
        counts: Counter[str] = Counter()
        for st in self.statuses.values():
            for r in st.reasons:
                counts[r] += 1
        return sorted(f"{n} {reason}" for reason, n in counts.items())

    def __str__(self) -> str:
        if self.num_all_nodes == 0 and not self.pre_filter_msg:
            return NO_NODES_AVAILABLE
        msg = f"0/{self.num_all_nodes} nodes are available:"
        if self.pre_filter_msg:
            msg += f" {self.pre_filter_msg}."
        else:
            msg += " " + ", ".join(self.histogram()) + "."
        if self.post_filter_msg:
            # No period of our own: the PostFilter message ends with one (v1.37's FitError.Error;
            # up to the 1.2x releases it added one more, the well-known "scheduling.." of old events).
            msg += f" {self.post_filter_msg}"
        return msg

    @property
    def rejecting_plugins(self) -> set[str]:
        return {s.plugin for s in self.statuses.values() if s.plugin}
