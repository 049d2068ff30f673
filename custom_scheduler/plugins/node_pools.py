"""NodePools: dedicated node pools. Member pods only on their pool's nodes, everyone else kept off.

Config declares pools; each has a ``nodeSelector`` (a LabelSelector over node labels: which nodes
are in the pool) and ``members`` (which pods belong to it)::

    pools:
    - name: bigdata
      nodeSelector: {matchLabels: {pool: bigdata}}
      members:
        namespaces: [analytics]
        labelSelector: {matchLabels: {workload: spark}}
        minRequests: {cpu: "8", memory: "32Gi"}

**Membership.** A pod is a member of a pool when *any* of the listed criteria matches (they are
alternatives, so "requests at least 8 CPUs or 32Gi, or runs in namespace analytics" is one pool):

- ``labelSelector``: the pod's labels match;
- ``namespaces``: the pod's namespace is listed;
- ``namespaceSelector``: the labels of the pod's namespace match;
- ``priorityClassNames``: the pod's ``spec.priorityClassName`` is listed;
- ``minPriority``: the pod's resolved ``spec.priority`` is at least this;
- ``minRequests``: the pod requests at least the given amount of *any* listed resource
  (``{cpu: "8", memory: "32Gi"}`` means 8 CPUs **or** 32Gi; the effective request, with init
  containers and overhead, as NodeResourcesFit sees it).

Every pool needs at least one criterion.

**Filter.** For a node that belongs to one or more pools, the pod must be a member of at least one
of them, else ``node(s) belong to pool "bigdata" and the pod is not a member``. For a node outside
every pool, the pod must be a member of no pool, else ``node(s) are outside pool "bigdata" required
by the pod`` (``pools "a", "b"`` when it is a member of several). A pod that is a member of several
pools may go to any of their nodes. Pools may overlap (a node matching two selectors is in both).
Both rejections are UnschedulableAndUnresolvable: evicting pods never changes node labels.

PreFilter computes the pod's memberships once (Skip when no pools are configured); the per-node work
is matching the node's labels against the few pool selectors.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

from custom_scheduler.api import labels, quantity
from custom_scheduler.api.model import Node, Pod
from custom_scheduler.api.resources import CPU
from custom_scheduler.framework import cluster_events as ce
from custom_scheduler.framework import registry
from custom_scheduler.framework.interface import Handle
from custom_scheduler.framework.types import SKIP, SUCCESS, CycleState, NodeInfo, StateKey, Status
from custom_scheduler.plugins import args_reader

NAME = "NodePools"

ERR_REASON_NOT_MEMBER_FORMAT = 'node(s) belong to pool "{pool}" and the pod is not a member'
ERR_REASON_OUTSIDE_FORMAT = "node(s) are outside {pools} required by the pod"
ERR_REASON_INVALID_NODE_INFO = "invalid nodeInfo: node not found"


def not_member_reason(pool: str) -> str:
    return ERR_REASON_NOT_MEMBER_FORMAT.format(pool=pool)


def outside_reason(pools: Sequence[str]) -> str:
    quoted = ", ".join(f'"{p}"' for p in pools)
    return ERR_REASON_OUTSIDE_FORMAT.format(pools=("pool " if len(pools) == 1 else "pools ") + quoted)


# --- args ----------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Members:
    """Which pods belong to a pool: any criterion matching makes a pod a member."""

    label_selector: labels.Selector | None = None
    namespaces: frozenset[str] = frozenset()
    namespace_selector: labels.Selector | None = None
    priority_class_names: frozenset[str] = frozenset()
    min_priority: int | None = None
    min_requests: tuple[tuple[str, int], ...] = ()
    """(resource, amount in the model's units: milli-CPU for cpu, bytes/counts otherwise)."""

    def to_config(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        if self.label_selector is not None:
            out["labelSelector"] = selector_to_config(self.label_selector)
        if self.namespaces:
            out["namespaces"] = sorted(self.namespaces)
        if self.namespace_selector is not None:
            out["namespaceSelector"] = selector_to_config(self.namespace_selector)
        if self.priority_class_names:
            out["priorityClassNames"] = sorted(self.priority_class_names)
        if self.min_priority is not None:
            out["minPriority"] = self.min_priority
        if self.min_requests:
            out["minRequests"] = {name: format_amount(name, amount) for name, amount in self.min_requests}
        return out


@dataclass(frozen=True, slots=True)
class Pool:
    name: str
    node_selector: labels.Selector
    members: Members = field(default_factory=Members)


@dataclass(frozen=True, slots=True)
class NodePoolsArgs:
    pools: tuple[Pool, ...] = ()

    def to_config(self) -> dict[str, Any]:
        return {
            "pools": [
                {
                    "name": p.name,
                    "nodeSelector": selector_to_config(p.node_selector),
                    "members": p.members.to_config(),
                }
                for p in self.pools
            ]
        }


def format_amount(resource: str, amount: int) -> str:
    """A threshold back to a quantity string: ``8`` / ``500m`` for cpu, ``32Gi`` / ``1000`` otherwise."""
    if resource == CPU:
        return str(amount // 1000) if amount % 1000 == 0 else f"{amount}m"
    for suffix, size in (("Ti", 2**40), ("Gi", 2**30), ("Mi", 2**20), ("Ki", 2**10)):
        if amount % size == 0:
            return f"{amount // size}{suffix}"
    return str(amount)


def selector_to_config(sel: labels.Selector) -> dict[str, Any]:
    """A compiled selector back to LabelSelector JSON (every requirement as a matchExpression)."""
    exprs: list[dict[str, Any]] = []
    for req in sel.requirements:
        e: dict[str, Any] = {"key": req.key, "operator": req.operator}
        if req.values:
            e["values"] = sorted(req.values)
        exprs.append(e)
    return {"matchExpressions": exprs}


def _selector(r: args_reader.ArgsReader, raw: object, path: str) -> labels.Selector | None:
    doc = r.mapping(raw, path, fields=("matchLabels", "matchExpressions"))
    if not isinstance(raw, Mapping):
        return None
    for key, value in (doc.get("matchLabels") or {}).items():
        for msg in args_reader.qualified_name_errors(str(key)):
            r.error(f"{path}.matchLabels.{key}", msg)
        if not isinstance(value, str):
            r.error(f"{path}.matchLabels.{key}", "must be a string")
            continue
        for msg in args_reader.label_value_errors(value):
            r.error(f"{path}.matchLabels.{key}", msg)
    for i, expr in enumerate(r.items(doc, "matchExpressions", path)):
        ep = f"{path}.matchExpressions[{i}]"
        e = r.mapping(expr, ep, fields=("key", "operator", "values"))
        for msg in args_reader.qualified_name_errors(r.string(e, "key", ep)):
            r.error(f"{ep}.key", msg)
        for j, v in enumerate(r.strings(e, "values", ep)):
            for msg in args_reader.label_value_errors(v):
                r.error(f"{ep}.values[{j}]", msg)
    try:
        return labels.compile_selector(doc)
    except labels.SelectorError as e:
        r.error(path, str(e))
        return None


def _members(r: args_reader.ArgsReader, raw: object, path: str) -> Members:
    fields = (
        "labelSelector",
        "namespaces",
        "namespaceSelector",
        "priorityClassNames",
        "minPriority",
        "minRequests",
    )
    doc = r.mapping(raw, path, fields=fields)
    selectors: dict[str, labels.Selector | None] = {}
    for key in ("labelSelector", "namespaceSelector"):
        sel = None
        if doc.get(key) is not None:
            sel = _selector(r, doc[key], f"{path}.{key}")
            if sel is not None and sel.is_empty:
                r.error(f"{path}.{key}", "must not be empty (it would make every pod a member)")
        selectors[key] = sel
    label_sel, ns_sel = selectors["labelSelector"], selectors["namespaceSelector"]
    namespaces = r.strings(doc, "namespaces", path)
    pcs = r.strings(doc, "priorityClassNames", path)
    min_priority: int | None = None
    if doc.get("minPriority") is not None:
        min_priority = r.integer(doc, "minPriority", path, 0)
    min_requests: list[tuple[str, int]] = []
    for name, value, qp in r.entries(doc, "minRequests", path, "resource name to quantity"):
        for msg in args_reader.qualified_name_errors(name):
            r.error(qp, msg)
        try:
            if isinstance(value, bool) or not isinstance(value, str | int | float):
                raise quantity.QuantityError(f"must be a quantity, got {type(value).__name__}")
            amount = quantity.to_milli(value) if name == CPU else quantity.to_int(value)
        except quantity.QuantityError as e:
            r.error(qp, str(e))
            continue
        if amount <= 0:
            r.error(qp, "must be greater than 0")
            continue
        min_requests.append((name, amount))
    raw_req = doc.get("minRequests")
    if not (label_sel or ns_sel or namespaces or pcs or min_priority is not None or min_requests or raw_req):
        r.error(
            path,
            "at least one of labelSelector, namespaces, namespaceSelector, priorityClassNames, "
            "minPriority, minRequests is required",
        )
    return Members(label_sel, frozenset(namespaces), ns_sel, frozenset(pcs), min_priority, tuple(min_requests))


def parse_args(raw: Mapping[str, Any] | None, path: str) -> NodePoolsArgs:
    """Parse and validate ``NodePoolsArgs``.

    Raises:
        ConfigError: listing every invalid field, with paths below ``path``.
    """
    r = args_reader.ArgsReader(path)
    doc = r.mapping(raw, path, fields=("pools",), kind="NodePoolsArgs")
    pools: list[Pool] = []
    names: set[str] = set()
    for i, item in enumerate(r.items(doc, "pools", path)):
        pp = f"{path}.pools[{i}]"
        p = r.mapping(item, pp, fields=("name", "nodeSelector", "members"))
        name = r.string(p, "name", pp)
        if not name:
            r.error(f"{pp}.name", "required")
        else:
            for msg in args_reader.label_value_errors(name):
                r.error(f"{pp}.name", msg)
            if name in names:
                r.error(f"{pp}.name", f'Duplicate value: "{name}"')
            names.add(name)
        node_sel: labels.Selector | None = None
        if p.get("nodeSelector") is None:
            r.error(f"{pp}.nodeSelector", "required")
        else:
            node_sel = _selector(r, p["nodeSelector"], f"{pp}.nodeSelector")
            if node_sel is not None and node_sel.is_empty:
                r.error(f"{pp}.nodeSelector", "must not be empty (it would put every node in the pool)")
        if p.get("members") is None:
            r.error(f"{pp}.members", "required")
            members = Members()
        else:
            members = _members(r, p["members"], f"{pp}.members")
        if node_sel is not None:
            pools.append(Pool(name, node_sel, members))
    r.raise_errors()
    return NodePoolsArgs(tuple(pools))


# --- pure helpers --------------------------------------------------------------------------------


def _request(pod: Pod, name: str) -> int:
    return pod.requests.milli_cpu if name == CPU else pod.requests.get(name)


def is_member(pod: Pod, members: Members, namespace_labels: Mapping[str, str] | None = None) -> bool:
    """Whether any of ``members``' criteria matches ``pod``."""
    if members.label_selector is not None and members.label_selector.matches(pod.labels):
        return True
    if pod.namespace in members.namespaces:
        return True
    if (
        members.namespace_selector is not None
        and namespace_labels is not None
        and members.namespace_selector.matches(namespace_labels)
    ):
        return True
    if members.priority_class_names and pod.priority_class_name in members.priority_class_names:
        return True
    if members.min_priority is not None and pod.priority >= members.min_priority:
        return True
    return any(_request(pod, name) >= amount for name, amount in members.min_requests)


def node_pools(node: Node, pools: Sequence[Pool]) -> tuple[str, ...]:
    """The names of the pools ``node`` belongs to, in config order."""
    return tuple(p.name for p in pools if p.node_selector.matches(node.labels))


def pool_reasons(pod_pools: Sequence[str], in_pools: Sequence[str]) -> str | None:
    """The rejection for a pod that is a member of ``pod_pools`` on a node in ``in_pools``; None if it fits."""
    if in_pools:
        if any(p in pod_pools for p in in_pools):
            return None
        return not_member_reason(in_pools[0])
    if pod_pools:
        return outside_reason(pod_pools)
    return None


# --- plugin --------------------------------------------------------------------------------------

PRE_FILTER_KEY: StateKey[tuple[str, ...]] = StateKey(f"PreFilter{NAME}")


class NodePools:
    """PreFilter: the pod's pools; Filter: pool nodes for members only, members on pool nodes only."""

    name: ClassVar[str] = NAME

    def __init__(self, args: NodePoolsArgs | None, handle: Handle) -> None:
        self.args = args or NodePoolsArgs()
        self._handle = handle
        self._needs_ns_labels = any(p.members.namespace_selector is not None for p in self.args.pools)

    def events_to_register(self) -> list[ce.ClusterEventWithHint]:
        """A node joining a pool (labels, taints) or a new one, a pod leaving a pool's capacity,
        and the pod's own labels and annotations (membership). No hints: each may help."""
        node = ce.Action.ADD | ce.Action.UPDATE_NODE_LABEL | ce.Action.UPDATE_NODE_TAINT
        return [
            ce.ClusterEventWithHint(ce.ClusterEvent(ce.Resource.NODE, node)),
            ce.ClusterEventWithHint(ce.ASSIGNED_POD_DELETE),
            ce.ClusterEventWithHint(ce.ClusterEvent(ce.Resource.TARGET_POD, ce.Action.UPDATE)),
        ]

    def pod_pools(self, pod: Pod) -> tuple[str, ...]:
        """The pools ``pod`` is a member of, in config order."""
        ns_labels = self._handle.namespace_labels(pod.namespace) if self._needs_ns_labels else None
        return tuple(p.name for p in self.args.pools if is_member(pod, p.members, ns_labels))

    def pools_of(self, node: Node) -> tuple[str, ...]:
        return node_pools(node, self.args.pools)

    def pre_filter(self, state: CycleState, pod: Pod, nodes: Sequence[NodeInfo]) -> Status:
        if not self.args.pools:
            return SKIP
        state.write(PRE_FILTER_KEY, self.pod_pools(pod))
        return SUCCESS

    def filter(self, state: CycleState, pod: Pod, node_info: NodeInfo) -> Status:
        node = node_info.node
        if node is None:
            return Status.as_error(ERR_REASON_INVALID_NODE_INFO)
        pod_pools = state.get(PRE_FILTER_KEY)
        if pod_pools is None:  # PreFilter disabled in the profile: compute here.
            pod_pools = self.pod_pools(pod)
        reason = pool_reasons(pod_pools, self.pools_of(node))
        if reason is None:
            return SUCCESS
        return Status.unresolvable(reason)


SPEC = registry.PluginSpec(NAME, factory=NodePools, parse_args=parse_args)
