"""NodePorts: kube-scheduler's host-port conflict table, including the 0.0.0.0 wildcard rules."""

from __future__ import annotations

import pytest

from custom_scheduler.core.cache import Cache
from custom_scheduler.framework.types import SKIP, SUCCESS, CycleState, Snapshot, StateNotFoundError, Status
from custom_scheduler.plugins import node_ports
from tests.builders import PodBuilder, make_node, make_pod
from tests.unit.plugins.support import bare, fake_handle, node_info

CONFLICT = Status.unschedulable("node(s) didn't have free ports for the requested pod ports")


def ports(*specs: str, name: str | None = None) -> PodBuilder:
    """A pod with host ports given as ``PROTOCOL/IP/PORT`` (kube-scheduler's test notation)."""
    b = bare(make_pod(name) if name else None)
    b.spec["containers"] = [{"name": "c0", "image": "registry.k8s.io/pause:3.9", "ports": []}]
    for spec in specs:
        proto, ip, port = spec.split("/")
        b.host_port(int(port), proto, ip)
    return b


@pytest.mark.parametrize(
    ("pod", "existing", "want"),
    [
        pytest.param(ports("UDP/127.0.0.1/8080"), ports("UDP/127.0.0.1/9090"), SUCCESS, id="other-port"),
        pytest.param(ports("UDP/127.0.0.1/8080"), ports("UDP/127.0.0.1/8080"), CONFLICT, id="same-udp-port"),
        pytest.param(ports("TCP/127.0.0.1/8080"), ports("TCP/127.0.0.1/8080"), CONFLICT, id="same-tcp-port"),
        pytest.param(ports("TCP/127.0.0.1/8080"), ports("TCP/127.0.0.2/8080"), SUCCESS, id="different-host-ip"),
        pytest.param(ports("UDP/127.0.0.1/8080"), ports("TCP/127.0.0.1/8080"), SUCCESS, id="different-protocol"),
        pytest.param(
            ports("UDP/127.0.0.1/8000", "UDP/127.0.0.1/8080"),
            ports("UDP/127.0.0.1/8080"),
            CONFLICT,
            id="second-udp-port-conflict",
        ),
        pytest.param(
            ports("TCP/127.0.0.1/8001", "UDP/127.0.0.1/8080"),
            ports("TCP/127.0.0.1/8001", "UDP/127.0.0.1/8081"),
            CONFLICT,
            id="first-tcp-port-conflict",
        ),
        pytest.param(
            ports("TCP/0.0.0.0/8001"), ports("TCP/127.0.0.1/8001"), CONFLICT, id="wildcard-wanted-conflicts-with-any-ip"
        ),
        pytest.param(
            ports("TCP/10.0.10.10/8001", "TCP/0.0.0.0/8001"),
            ports("TCP/127.0.0.1/8001"),
            CONFLICT,
            id="tcp-conflict-due-to-wildcard-in-second-port",
        ),
        pytest.param(
            ports("TCP/127.0.0.1/8001"),
            ports("TCP/0.0.0.0/8001"),
            CONFLICT,
            id="specific-ip-conflicts-with-wildcard-use",
        ),
        pytest.param(
            ports("UDP/127.0.0.1/8001"), ports("TCP/0.0.0.0/8001"), SUCCESS, id="wildcard-other-protocol-is-free"
        ),
        pytest.param(
            ports("UDP/127.0.0.1/8001"),
            ports("TCP/0.0.0.0/8001", "UDP/0.0.0.0/8001"),
            CONFLICT,
            id="udp-conflict-due-to-wildcard",
        ),
        pytest.param(ports("TCP//8080"), ports("TCP/127.0.0.1/8080"), CONFLICT, id="empty-host-ip-means-wildcard"),
    ],
)
def test_filter(pod: PodBuilder, existing: PodBuilder, want: Status) -> None:
    pl = node_ports.NodePorts(None, fake_handle())
    state = CycleState()
    p = pod.build()
    assert pl.pre_filter(state, p, []) == SUCCESS
    ni = node_info(make_node("m1").build(), existing.node("m1").build())
    assert pl.filter(state, p, ni) == want
    assert node_ports.fits(p, ni) is (want == SUCCESS)


def test_pre_filter_skips_pods_without_host_ports() -> None:
    pl = node_ports.NodePorts(None, fake_handle())
    assert pl.pre_filter(CycleState(), bare().build(), []) == SKIP
    container_port_only = ports()
    container_port_only.spec["containers"][0]["ports"].append({"containerPort": 80, "protocol": "TCP"})
    assert pl.pre_filter(CycleState(), container_port_only.build(), []) == SKIP


def test_nothing_running_fits() -> None:
    pl = node_ports.NodePorts(None, fake_handle())
    state = CycleState()
    p = ports("TCP/0.0.0.0/80").build()
    pl.pre_filter(state, p, [])
    assert pl.filter(state, p, node_info(make_node("m1").build())) == SUCCESS


def test_filter_without_pre_filter_state_raises() -> None:
    """The runtime turns this into an ERROR status, as kube-scheduler does when PreFilter did not run."""
    pl = node_ports.NodePorts(None, fake_handle())
    with pytest.raises(StateNotFoundError, match="PreFilterNodePorts"):
        pl.filter(CycleState(), ports("TCP/0.0.0.0/80").build(), node_info(make_node("m1").build()))


def test_port_freed_when_holder_removed() -> None:
    pl = node_ports.NodePorts(None, fake_handle())
    holder = ports("TCP/0.0.0.0/80").build()
    ni = node_info(make_node("m1").build(), holder)
    state = CycleState()
    p = ports("TCP/10.0.0.1/80").build()
    pl.pre_filter(state, p, [])
    assert pl.filter(state, p, ni) == CONFLICT
    ni.remove_pod(holder)
    assert pl.filter(state, p, ni) == SUCCESS


def _mask_and_filter(pl: node_ports.NodePorts, pod: PodBuilder, snap: Snapshot) -> tuple[list[bool], list[bool]]:
    state = CycleState()
    p = pod.build()
    assert pl.pre_filter(state, p, snap.node_list) == SUCCESS
    mask = pl.filter_mask(state, p, snap)
    assert mask is not None
    assert not isinstance(mask, bool)
    return mask.tolist(), [pl.filter(state, p, ni) == SUCCESS for ni in snap.node_list]


def test_filter_mask_equals_the_per_node_filter_as_nodes_take_and_free_ports() -> None:
    """The mask (the daemon's path) is remembered per wanted ports across cycles: a node that
    took a holder since, or lost one, is checked again; the others keep their verdicts."""
    pl = node_ports.NodePorts(None, fake_handle())
    cache = Cache()
    for i in range(4):
        cache.add_node(make_node(f"n{i}").build())
    cache.add_pod(ports("TCP/0.0.0.0/80", name="h1").node("n1").build())
    cache.add_pod(ports("UDP/10.0.0.1/80", name="h3").node("n3").build())
    snap = cache.snapshot()
    wanted = ports("TCP/10.0.0.1/80")
    assert _mask_and_filter(pl, wanted, snap) == ([True, False, True, True], [True, False, True, True])
    holder = ports("TCP/10.0.0.1/80", name="h2").node("n2").build()
    cache.add_pod(holder)
    cache.update_snapshot(snap)
    assert _mask_and_filter(pl, wanted, snap) == ([True, False, False, True], [True, False, False, True])
    cache.remove_pod(holder)
    cache.update_snapshot(snap)
    assert _mask_and_filter(pl, wanted, snap) == ([True, False, True, True], [True, False, True, True])
    other = ports("UDP/0.0.0.0/80")  # another key: its own verdicts
    assert _mask_and_filter(pl, other, snap) == ([True, True, True, False], [True, True, True, False])


def test_filter_mask_is_not_asked_for_pods_without_host_ports() -> None:
    pl = node_ports.NodePorts(None, fake_handle())
    state = CycleState()
    snap = Cache().snapshot()
    assert pl.pre_filter(state, bare().build(), []) == SKIP
    assert pl.filter_mask(state, bare().build(), snap) is None
