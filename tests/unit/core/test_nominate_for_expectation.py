"""NominatedNodeNameForExpectation (beta, on since 1.35): before a binding that will take time
(PreBind has work, or the pod waits at Permit) the pod's ``status.nominatedNodeName`` is set to
its node, so the cluster autoscaler and others see where it is going; a pod bound at once gets no
extra write; a failing PreBindPreFlight fails the attempt."""

from __future__ import annotations

from typing import Any, ClassVar

import pytest

from custom_scheduler.api.model import Pod
from custom_scheduler.framework.interface import Handle
from custom_scheduler.framework.registry import PluginSpec, no_args
from custom_scheduler.framework.types import SUCCESS, Code, CycleState, Status
from tests.builders import make_pod
from tests.unit.core.test_cycles import env

CONFIG = """
apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
profiles:
- schedulerName: custom-scheduler
  plugins:
    preBind:
      enabled: [{name: SlowBinder}]
    permit:
      enabled: [{name: GatePermit}]
"""


class SlowBinder:
    """A PreBind plugin whose pre-flight reads the pod's ``prebind`` label: work, skip or error."""

    name: ClassVar[str] = "SlowBinder"

    def __init__(self, args: Any, handle: Handle) -> None: ...

    def pre_bind_pre_flight(self, state: CycleState, pod: Pod, node_name: str) -> Status:
        verdict = pod.labels.get("prebind", "skip")
        if verdict == "work":
            return SUCCESS
        if verdict == "boom":
            return Status.as_error("cannot tell")
        return Status(Code.SKIP)

    def pre_bind(self, state: CycleState, pod: Pod, node_name: str) -> Status:
        return SUCCESS


@pytest.mark.parametrize(
    ("labels", "nominated"),
    [
        pytest.param({"prebind": "work"}, True, id="prebind-has-work"),
        pytest.param({"prebind": "skip"}, False, id="bound-at-once"),
        pytest.param({"prebind": "skip", "wait": "yes"}, True, id="waits-at-permit"),
    ],
)
def test_nominated_before_a_slow_binding(labels: dict[str, str], nominated: bool) -> None:
    e = env(config=CONFIG, specs=[PluginSpec(SlowBinder.name, SlowBinder, no_args)], nodes=1)
    pod = make_pod("p").req(cpu="100m").labels(**labels).build()
    e.sched.on_pod_add(pod)
    e.run_one()
    assert e.events.nominations.get(pod.key) == ("n0" if nominated else None)
    e.sched.shutdown(5)


def test_a_failing_pre_flight_fails_the_attempt() -> None:
    e = env(config=CONFIG, specs=[PluginSpec(SlowBinder.name, SlowBinder, no_args)], nodes=1)
    pod = make_pod("p").req(cpu="100m").labels(prebind="boom").build()
    e.sched.on_pod_add(pod)
    e.run_one()
    assert pod.key not in e.events.nominations
    assert e.sched.cache.get_pod(pod.uid) is None
    last = e.events.last(pod.key)
    assert last is not None
    assert last.reason == "FailedScheduling"
    assert "running PreBindPreFlight 'SlowBinder': cannot tell" in last.note
