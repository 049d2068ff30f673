"""NodePorts: a pod's host ports must be free on the node.

A ``hostPort`` binds a port on the node itself, so two pods cannot both hold the same
(hostIP, protocol, port). The wildcard address complicates it: a pod asking for ``0.0.0.0`` conflicts
with *any* use of that protocol/port on the node, and a pod asking for a specific IP conflicts with a
use on that IP or on ``0.0.0.0``. Different protocols never conflict.

PreFilter collects the pod's wanted ports once (and returns Skip for the common pod with none, so the
Filter does not run at all); Filter checks them against ``NodeInfo.used_ports``, which the cache keeps
as ``{(protocol, port): {host IPs}}`` so each check is one dict lookup. Freeing a port by evicting its
holder can help, hence Unschedulable (preemption may try this node).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

from custom_scheduler.api.model import HostPort, Pod
from custom_scheduler.framework import arrays, registry
from custom_scheduler.framework import cluster_events as ce
from custom_scheduler.framework.interface import Handle
from custom_scheduler.framework.types import SKIP, SUCCESS, Code, CycleState, NodeInfo, Snapshot, StateKey, Status
from custom_scheduler.plugins import signers

NAME = "NodePorts"

ERR_REASON = "node(s) didn't have free ports for the requested pod ports"

BIND_ALL_HOST_IP = "0.0.0.0"

PRE_FILTER_KEY: StateKey[tuple[HostPort, ...]] = StateKey(f"PreFilter{NAME}")


def conflicts(used_ports: Mapping[tuple[str, int], set[str]], port: HostPort) -> bool:
    """Whether ``port`` clashes with ``used_ports`` (``{(protocol, port): host IPs}``)."""
    if port.port <= 0:
        return False
    ips = used_ports.get((port.protocol, port.port))
    if not ips:
        return False
    return port.ip == BIND_ALL_HOST_IP or BIND_ALL_HOST_IP in ips or port.ip in ips


def fits_ports(wanted: Sequence[HostPort], node_info: NodeInfo) -> bool:
    used = node_info.used_ports
    if not used:
        return True
    return not any(conflicts(used, p) for p in wanted)


def fits(pod: Pod, node_info: NodeInfo) -> bool:
    """Whether all of ``pod``'s host ports are free on the node."""
    return fits_ports(pod.host_ports, node_info)


_REJECT = Status(Code.UNSCHEDULABLE, (ERR_REASON,), NAME)  # shared, pre-stamped


class NodePorts:
    """PreFilter + Filter on host-port conflicts."""

    name: ClassVar[str] = NAME

    def __init__(self, args: Any, handle: Handle) -> None:
        del args, handle
        self._verdicts = arrays.RowMemo()

    def sign_pod(self, pod: Pod) -> signers.Fragments:
        """What this plugin reads of the pod (opportunistic batching)."""
        return signers.host_ports(pod)

    def events_to_register(self) -> list[ce.ClusterEventWithHint]:
        """A deleted pod that held a port the pod wants; a new node (ports are immutable, so
        pod updates never matter)."""
        return [
            ce.ClusterEventWithHint(ce.ASSIGNED_POD_DELETE, _after_assigned_pod_delete),
            ce.ClusterEventWithHint(ce.NODE_ADD),
        ]

    def pre_filter(self, state: CycleState, pod: Pod, nodes: Sequence[NodeInfo]) -> Status:
        wanted = tuple(p for p in pod.host_ports if p.port > 0)
        if not wanted:
            return SKIP
        state.write(PRE_FILTER_KEY, wanted)
        return SUCCESS

    def filter(self, state: CycleState, pod: Pod, node_info: NodeInfo) -> Status:
        wanted: tuple[HostPort, ...] = state.read(PRE_FILTER_KEY)
        if fits_ports(wanted, node_info):
            return SUCCESS
        return _REJECT

    def filter_mask(self, state: CycleState, pod: Pod, snap: Snapshot) -> arrays.Mask | bool | None:
        """:meth:`filter` for every snapshot node at once. Pods that want the same ports (the
        replicas of a workload) share the verdicts across cycles, and only the nodes that changed
        since (the one that took the last replica) are checked again (:class:`arrays.RowMemo`)."""
        wanted: tuple[HostPort, ...] | None = state.get(PRE_FILTER_KEY)
        if wanted is None:
            return None
        mask: arrays.Mask = self._verdicts.values(
            wanted, snap.arrays, snap.node_list, lambda ni: fits_ports(wanted, ni)
        )
        return mask


def _after_assigned_pod_delete(pod: Pod, old: Pod, new: Any) -> ce.Hint:
    if not old.node_name and not old.nominated_node_name:
        return ce.Hint.SKIP
    freed: dict[tuple[str, int], set[str]] = {}
    for p in old.host_ports:
        if p.port > 0:
            freed.setdefault((p.protocol, p.port), set()).add(p.ip)
    return ce.Hint.QUEUE if any(conflicts(freed, p) for p in pod.host_ports) else ce.Hint.SKIP


SPEC = registry.PluginSpec(NAME, factory=NodePorts, parse_args=registry.no_args)
