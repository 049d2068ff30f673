"""A preemption dry run on a tally (the node's summed requests and pod count, no copy of the node)
chooses exactly the victims, PDB violations and statuses of the dry run on a modified copy of the
node, whenever the runner offers one (:meth:`DryRunner.requests_fit`): for any pods on the node,
priorities, requests (cpu, memory, an extended resource, the pod count), PDBs, pods nominated to
the node, and a node that its node-only filters reject (cordoned, tainted)."""

from __future__ import annotations

from typing import Any, cast

import hypothesis.strategies as st
from hypothesis import given, settings

from custom_scheduler.api.model import Pod, PodDisruptionBudget, pdb_from_json
from custom_scheduler.config import load_config
from custom_scheduler.core.cache import Cache
from custom_scheduler.framework.handle import SnapshotHandle
from custom_scheduler.framework.profiles import build_frameworks
from custom_scheduler.framework.runtime import Framework
from custom_scheduler.framework.types import CycleState, Snapshot, Status
from custom_scheduler.plugins.builtin import full_registry
from custom_scheduler.plugins.preemption import selection
from tests.builders import make_node, make_pod

DEFAULT = "apiVersion: kubescheduler.config.k8s.io/v1\nkind: KubeSchedulerConfiguration\n"
GPU = "example.com/gpu"
NOW = 1e10


def _env(
    nodes: list[Any], pods: list[Pod], nominated: dict[str, list[Pod]]
) -> tuple[Framework, SnapshotHandle, Snapshot]:
    cache = Cache()
    for n in nodes:
        cache.add_node(n.build())
    for p in pods:
        cache.add_pod(p)
    snap = cache.snapshot()
    cfg = load_config(DEFAULT, full_registry())
    fwk = build_frameworks(cfg.profiles, full_registry(), snap, client=None)["custom-scheduler"]
    handle = cast(SnapshotHandle, fwk.handle)
    handle.nominated_lister = lambda node: tuple(nominated.get(node, ()))
    return fwk, handle, snap


@st.composite
def scenario(draw: Any) -> tuple[Framework, SnapshotHandle, Snapshot, Pod, list[PodDisruptionBudget]]:
    nodes: list[Any] = []
    pods: list[Pod] = []
    nominated: dict[str, list[Pod]] = {}
    for i in range(draw(st.integers(1, 4))):
        b = make_node(f"n{i}").capacity(
            cpu=f"{draw(st.integers(500, 4000))}m", memory="8Gi", pods=str(draw(st.integers(1, 5)))
        )
        if draw(st.booleans()):
            b.capacity_named({GPU: str(draw(st.integers(0, 4)))})
        if draw(st.integers(0, 6)) == 0:
            b.unschedulable()
        if draw(st.integers(0, 6)) == 0:
            b.taint("dedicated", "infra", "NoSchedule")
        nodes.append(b)
        for j in range(draw(st.integers(0, 5))):
            p = (
                make_pod(f"p{i}-{j}")
                .node(f"n{i}")
                .priority(draw(st.integers(0, 3)))
                .req(cpu=f"{draw(st.integers(0, 1500))}m", memory=f"{draw(st.integers(0, 3))}Gi")
                .start_time(f"2024-01-01T00:{draw(st.integers(0, 59)):02d}:00Z")
                .label("app", draw(st.sampled_from(["a", "b"])))
            )
            if draw(st.booleans()):
                p.req_named({GPU: str(draw(st.integers(1, 2)))})
            pods.append(p.build())
        for k in range(draw(st.integers(0, 2))):
            nom = make_pod(f"nom{i}-{k}").priority(draw(st.integers(1, 4))).req(cpu=f"{draw(st.integers(0, 2000))}m")
            nominated.setdefault(f"n{i}", []).append(nom.build())
    pod = make_pod("preemptor").priority(draw(st.integers(1, 4))).req(cpu=f"{draw(st.integers(0, 3000))}m")
    if draw(st.booleans()):
        pod.req_named({GPU: str(draw(st.integers(1, 3)))})
    if draw(st.booleans()):
        pod.toleration("dedicated", "infra", "NoSchedule", operator="Equal")
    pdbs = [
        pdb_from_json(
            {
                "metadata": {"name": f"pdb-{app}", "namespace": "default"},
                "spec": {"selector": {"matchLabels": {"app": app}}},
                "status": {"disruptionsAllowed": draw(st.integers(0, 2))},
            }
        )
        for app in draw(st.lists(st.sampled_from(["a", "b"]), unique=True))
    ]
    fwk, handle, snap = _env(nodes, pods, nominated)
    return fwk, handle, snap, pod.build(), pdbs


def _verdict(st_: Status) -> tuple[str, tuple[str, ...], str]:
    return st_.code.name, st_.reasons, st_.plugin


@settings(max_examples=400, deadline=None)
@given(scenario())
def test_the_tally_chooses_as_the_node_copy(
    s: tuple[Framework, SnapshotHandle, Snapshot, Pod, list[PodDisruptionBudget]],
) -> None:
    fwk, handle, snap, pod, pdbs = s
    state = CycleState()
    if not fwk.run_pre_filter(state, pod, snap.node_list).is_success:
        return
    fit = handle.requests_fit(state, pod)
    assert fit is not None  # only node-only filters and NodeResourcesFit run for this pod
    for ni in snap.node_list:
        before = (dict(ni.pods), ni.requested.copy())
        want_v, want_st = selection.select_victims_on_node(handle, state.clone(), pod, ni.clone(), pdbs, now=NOW)
        got_v, got_st = selection.select_victims_on_node(handle, state, pod, ni, pdbs, now=NOW, fit=fit)
        assert got_v == want_v
        assert _verdict(got_st) == _verdict(want_st)
        assert (dict(ni.pods), ni.requested) == before  # the tally leaves the node as it was
    # The whole dry run (which takes the tally when offered) against the copies.
    nodes = list(snap.node_list)
    got = selection.dry_run_preemption(handle, state, pod, nodes, pdbs, 0, 2, now=NOW)
    handle_untallied = _Untallied(handle)
    want = selection.dry_run_preemption(handle_untallied, state, pod, nodes, pdbs, 0, 2, now=NOW)
    assert got[0] == want[0]
    assert {k: _verdict(v) for k, v in got[1].items()} == {k: _verdict(v) for k, v in want[1].items()}


class _Untallied:
    """The handle as a DryRunner that offers no tally: the dry run copies each node."""

    def __init__(self, handle: SnapshotHandle) -> None:
        self.handle = handle

    def __getattr__(self, name: str) -> Any:
        return getattr(self.handle, name)

    def requests_fit(self, state: CycleState, pod: Pod) -> None:
        return None


def test_no_tally_when_a_filter_reads_more_of_the_pods_or_an_extension_follows_them() -> None:
    """Host ports (NodePorts reads each pod's ports) and a topology spread constraint
    (PodTopologySpread counts pods, and its PreFilter extension follows each removal) need the
    node copy; a plain pod does not."""
    fwk, handle, snap = _env([make_node("n0").capacity(cpu="2", memory="8Gi", pods="10")], [], {})
    cases = [
        (make_pod("plain").req(cpu="1"), True),
        (make_pod("ports").req(cpu="1").host_port(8080), False),
        (make_pod("spread").label("app", "a").spread(1, "zone", selector={"matchLabels": {"app": "a"}}), False),
    ]
    for b, tallied in cases:
        pod = b.build()
        state = CycleState()
        assert fwk.run_pre_filter(state, pod, snap.node_list).is_success
        assert (handle.requests_fit(state, pod) is not None) is tallied, pod.name
