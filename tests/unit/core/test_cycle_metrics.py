"""What the scheduling and binding cycles tell the Observer, where upstream records it: an attempt
counts as ``scheduled`` only once bound (with its attempts and SLI), as ``unschedulable``/``error``
when either cycle fails; the algorithm's latency every cycle; the plugin-timing sample drawn for
about one cycle in ten, and only when the observer asks for it."""

from __future__ import annotations

import random
from collections.abc import Mapping
from typing import Any

import pytest

from custom_scheduler.config import load_config
from custom_scheduler.config.schema import SchedulerConfig
from custom_scheduler.core.assembly import FrameworkInputs, Ports, assemble
from custom_scheduler.core.binding import Executor
from custom_scheduler.core.cache import Cache
from custom_scheduler.core.ports import Observer, RecordingEvents
from custom_scheduler.core.scheduler import Scheduler
from custom_scheduler.framework.profiles import build_frameworks
from custom_scheduler.framework.runtime import Framework
from custom_scheduler.plugins.builtin import full_registry
from tests.builders import make_node, make_pod

CONFIG = "apiVersion: kubescheduler.config.k8s.io/v1\nkind: KubeSchedulerConfiguration\n"


class Seen(Observer):
    samples_plugins = True

    def __init__(self) -> None:
        self.attempts: list[str] = []
        self.algorithms = 0
        self.scheduled: list[tuple[int, bool]] = []

    def attempt(self, profile: str, result: str, seconds: float) -> None:
        assert seconds >= 0
        self.attempts.append(result)

    def algorithm(self, seconds: float) -> None:
        self.algorithms += 1

    def pod_scheduled(self, profile: str, attempts: int, since_first_attempt: float | None) -> None:
        self.scheduled.append((attempts, since_first_attempt is not None))


class NoBind:
    """A client whose Binding POSTs all fail with a 500 (the binding cycle's error path)."""

    def post(self, path: str, body: Mapping[str, Any], **kw: Any) -> Any:
        from custom_scheduler.framework.clusterapi import api_errors

        raise api_errors.ApiError(500, "InternalError", "no")


class Binds:
    def post(self, path: str, body: Mapping[str, Any], **kw: Any) -> Any:
        return {}


def _scheduler(observer: Observer, client: Any) -> Scheduler:
    cfg = load_config(CONFIG, full_registry())
    cache = Cache()
    cache.add_node(make_node("n0").capacity(cpu="2", memory="4Gi", pods="10").build())

    def frameworks(config: SchedulerConfig, inputs: FrameworkInputs) -> Mapping[str, Framework]:
        return build_frameworks(config.profiles, full_registry(), inputs.snapshot, client=client)

    ports = Ports(RecordingEvents(), executor=Executor(), observer=observer, rng=random.Random(7))
    return assemble(cfg, cache, frameworks, ports).scheduler


def _run_all(sched: Scheduler) -> None:
    while (qpi := sched.queue.pop(timeout=0)) is not None:
        sched.schedule_one(qpi)


def test_a_bound_pod_counts_as_scheduled_at_bind_and_a_failed_one_when_it_fails() -> None:
    seen = Seen()
    sched = _scheduler(seen, Binds())
    sched.queue.add(make_pod("fits").uid("a").req(cpu="1").build())
    sched.queue.add(make_pod("too-big").uid("b").req(cpu="8").build())
    _run_all(sched)
    assert sorted(seen.attempts) == ["scheduled", "unschedulable"]
    assert seen.algorithms == 2
    assert seen.scheduled == [(1, True)]


def test_a_failed_bind_counts_as_an_error_attempt_and_not_as_scheduled() -> None:
    seen = Seen()
    sched = _scheduler(seen, NoBind())
    sched.queue.add(make_pod("p").uid("p").req(cpu="1").build())
    _run_all(sched)
    assert seen.attempts == ["error"]
    assert seen.scheduled == []
    assert sched.binding.in_flight() == 0


@pytest.mark.parametrize(("samples", "low", "high"), [(True, 60, 140), (False, 0, 0)])
def test_about_one_cycle_in_ten_times_its_plugins(samples: bool, low: int, high: int) -> None:
    """Upstream's pluginMetricsSamplePercent = 10, drawn per cycle from the cycle's random source;
    without an observer that asks, nothing is drawn (a seeded simulate keeps its tie-breaks)."""
    seen = Seen()
    seen.samples_plugins = samples
    sched = _scheduler(seen, Binds())
    before = sched.cycle.rng.getstate()
    drawn = sum(sched.cycle.new_state().record_plugin_metrics for _ in range(1000))
    assert low <= drawn <= high
    assert (sched.cycle.rng.getstate() == before) is not samples
