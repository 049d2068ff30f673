"""GangScheduling's reservations with activeDeadlineSeconds as a declared runtime (issue #28 item
3): Filter backfills a pod whose deadline ends before the gang's expected start, from either
declaration, and planning counts a running pod's deadline as when it frees its node."""

from __future__ import annotations

import pytest

from custom_scheduler.api.model import Pod
from custom_scheduler.framework.reservations import NEVER, RUNTIME_ANNOTATION
from custom_scheduler.framework.types import CycleState, NodeInfo
from custom_scheduler.plugins import gang_reservations as gr
from tests.builders import make_node, make_pod
from tests.unit.plugins.test_gang_reservations import GPU, GROUP, _gpu_pod, _reserve, _setup


def _pod(name: str, *, deadline: int | None = None, runtime: str | None = None, node: str = "") -> Pod:
    return _gpu_pod(name, 1, runtime, node, deadline)


@pytest.mark.parametrize(
    ("pod", "want_ok"),
    [
        # The gang expects to start 9 s from the Filter's now (n1's pods end 10 s after reserving).
        pytest.param(_pod("s", deadline=5), True, id="deadline-ends-before-start"),
        pytest.param(_pod("s", deadline=9), True, id="deadline-ends-exactly-at-start"),
        pytest.param(_pod("s", deadline=30), False, id="deadline-too-long"),
        pytest.param(_pod("s", deadline=0), False, id="invalid-deadline-declares-nothing"),
        pytest.param(_pod("s", deadline=30, runtime="5s"), True, id="annotation-earlier-wins"),
        pytest.param(_pod("s", deadline=5, runtime="30s"), True, id="deadline-earlier-wins"),
        pytest.param(_pod("s", deadline=30, runtime="30s"), False, id="both-too-long"),
    ],
)
def test_filter_backfills_by_either_declaration(pod: Pod, want_ok: bool) -> None:
    pl, h, clock, _ = _setup()
    _reserve(pl, clock)
    r = h.gangs.reservations.get(GROUP)
    assert r is not None
    clock.now += 1
    assert r.expected_start == clock.now + 9
    st = pl.filter(CycleState(), pod, h.nodes["n1"])
    assert st.is_success == want_ok, st.message
    if not want_ok:
        assert "activeDeadlineSeconds" in st.message


def test_outlook_counts_a_running_pods_deadline_from_its_start() -> None:
    ni = NodeInfo(make_node("n").capacity_named({GPU: "8", "pods": "110"}).build())
    started = make_pod("a", "ns").uid("a").req_named({GPU: "2"}).node("n").active_deadline(60)
    ni.add_pod(started.start_time("2026-01-01T00:00:00Z").build())
    ni.add_pod(_pod("b", deadline=30, node="n"))  # not started: counts from now
    ni.add_pod(_pod("c", node="n"))  # declares nothing
    got = gr.outlook(ni, RUNTIME_ANNOTATION, 2000000000.0)
    assert sorted((at, amounts[GPU]) for at, amounts in got.releases) == [
        (1767225600.0 + 60, 2),
        (2000000000.0 + 30, 1),
        (NEVER, 1),
    ]
