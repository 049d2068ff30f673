"""An assigned pod's in-place resize and the pods waiting for room: upstream's AssignedPodUpdate
with UpdatePodScaleDown (NodeResourcesFit's hint) moves the pods Fit rejected once the lower size
is counted, and nothing else does."""

from __future__ import annotations

import pytest

from custom_scheduler.core import queue as q
from tests.builders import PodBuilder, make_pod
from tests.unit.core.test_cycles import env


def running(cpu: str, memory: str = "1Gi") -> PodBuilder:
    """The 4-CPU node's one running pod, as the kubelet reports it before any resize."""
    return make_pod("big").uid("uid-big").node("n0").phase("Running").req(cpu=cpu, memory=memory)


@pytest.mark.parametrize(
    ("after", "moves"),
    [
        pytest.param(running("1").resized({"cpu": "1", "memory": "1Gi"}), True, id="scaled-down-actuated"),
        pytest.param(
            running("1").resized({"cpu": "1", "memory": "1Gi"}, {"cpu": "4", "memory": "1Gi"}),
            False,
            id="scaled-down-not-yet-actuated",
        ),
        pytest.param(running("1"), True, id="scaled-down-no-status-reported"),
        pytest.param(
            running("4", memory="512Mi").resized({"cpu": "4", "memory": "512Mi"}),
            False,
            id="lowered-resource-the-waiting-pod-does-not-request",
        ),
        pytest.param(running("4").resized({"cpu": "4", "memory": "1Gi"}), False, id="status-only-no-change"),
    ],
)
def test_a_scale_down_moves_the_pods_fit_rejected(after: PodBuilder, moves: bool) -> None:
    e = env(nodes=1)
    before = running("4").resized({"cpu": "4", "memory": "1Gi"}).build()
    e.sched.on_pod_add(before)
    waiting = make_pod("waiting").req(cpu="2").build()
    e.sched.on_pod_add(waiting)
    e.run_one()
    assert e.queued(waiting) is q.SubQueue.UNSCHEDULABLE
    e.sched.on_pod_update(before, after.build())
    moved = e.queued(waiting) in (q.SubQueue.ACTIVE, q.SubQueue.BACKOFF)
    assert moved is moves
