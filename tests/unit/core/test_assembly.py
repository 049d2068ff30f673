"""``assemble``: the one wiring of the queue, the frameworks and the scheduler (daemon and simulate).

The queue is built first and asks the profiles through a :class:`QueueHooks` bound to the scheduler;
these tests pin what that wiring must give: the profiles' QueueSort order, their PreEnqueue
verdicts, both following a config reload, and frameworks built over the scheduler's own parts.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from typing import Any

import pytest

from custom_scheduler.config import load_config
from custom_scheduler.config.schema import SchedulerConfig
from custom_scheduler.core import queue as q
from custom_scheduler.core.assembly import Assembly, FrameworkInputs, Ports, QueueHooks, assemble
from custom_scheduler.core.cache import Cache
from custom_scheduler.core.scheduler import Scheduler
from custom_scheduler.framework.profiles import build_frameworks
from custom_scheduler.framework.registry import Registry
from custom_scheduler.framework.runtime import Framework
from custom_scheduler.plugins.builtin import full_registry
from tests.builders import SCHEDULER_NAME, make_pod

HEADER = "apiVersion: kubescheduler.config.k8s.io/v1\nkind: KubeSchedulerConfiguration\n"
PROFILES = f"profiles:\n- schedulerName: {SCHEDULER_NAME}\n"
DEFAULT = HEADER + PROFILES
NO_GATES = DEFAULT + "  plugins: {preEnqueue: {disabled: [{name: SchedulingGates}]}}\n"
BACKOFF = HEADER + "podInitialBackoffSeconds: 3\npodMaxBackoffSeconds: 7\n" + PROFILES


class _Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def _frameworks(
    registry: Registry, seen: list[FrameworkInputs], cfg: SchedulerConfig, inputs: FrameworkInputs
) -> Mapping[str, Framework]:
    seen.append(inputs)
    return build_frameworks(
        cfg.profiles,
        registry,
        inputs.snapshot,
        client=None,
        nominated_lister=inputs.nominated,
        activator=inputs.activate,
        preempting=inputs.preempting,
    )


def _assembled(config_text: str, seen: list[FrameworkInputs] | None = None) -> tuple[Assembly, _Clock]:
    registry = full_registry(out_of_tree=False)
    clock = _Clock()
    factory = functools.partial(_frameworks, registry, seen if seen is not None else [])
    return assemble(load_config(config_text, registry), Cache(), factory, Ports(events=None), clock=clock), clock


def _reloaded(a: Assembly, config_text: str) -> None:
    """What the daemon's reload does: new frameworks over the same inputs, swapped into the scheduler."""
    registry = full_registry(out_of_tree=False)
    a.scheduler.profiles = _frameworks(registry, [], load_config(config_text, registry), a.inputs)


@pytest.mark.parametrize(
    ("priorities", "want"),
    [
        pytest.param([1, 5, 3], ["p1", "p2", "p0"], id="higher-priority-first"),
        pytest.param([2, 2, 2], ["p0", "p1", "p2"], id="equal-priority-in-queue-order"),
    ],
)
def test_the_queue_pops_in_the_profiles_queue_sort_order(priorities: list[int], want: list[str]) -> None:
    a, _ = _assembled(DEFAULT)
    for i, prio in enumerate(priorities):
        a.scheduler.on_pod_add(make_pod(f"p{i}").uid(f"u{i}").priority(prio).build())
    popped = [a.queue.pop(timeout=0) for _ in priorities]
    assert [p.pod.name for p in popped if p is not None] == want


@pytest.mark.parametrize(
    ("config", "pod", "want"),
    [
        pytest.param(DEFAULT, make_pod("g").uid("u").gates("example.com/a"), q.SubQueue.GATED, id="gated"),
        pytest.param(DEFAULT, make_pod("f").uid("u"), q.SubQueue.ACTIVE, id="no-gates"),
        pytest.param(NO_GATES, make_pod("g").uid("u").gates("example.com/a"), q.SubQueue.ACTIVE, id="plugin-off"),
    ],
)
def test_pre_enqueue_is_the_profiles(config: str, pod: Any, want: q.SubQueue) -> None:
    a, _ = _assembled(config)
    a.scheduler.on_pod_add(pod.build())
    assert a.queue.where("u") is want


def test_a_reload_changes_what_the_queue_asks() -> None:
    """The hooks read the scheduler's profiles at each call: after the swap, PreEnqueue is the new set's."""
    a, _ = _assembled(DEFAULT)
    a.scheduler.on_pod_add(make_pod("g").uid("u").gates("example.com/a").build())
    assert a.queue.where("u") is q.SubQueue.GATED
    _reloaded(a, NO_GATES)
    assert a.queue.recheck_pre_enqueue() == (1, 0)
    assert a.queue.where("u") is q.SubQueue.ACTIVE


def test_the_frameworks_are_built_over_the_schedulers_parts() -> None:
    seen: list[FrameworkInputs] = []
    a, _ = _assembled(DEFAULT, seen)
    assert seen == [a.inputs]
    assert a.inputs.snapshot is a.scheduler.snapshot
    assert a.inputs.activate == a.queue.activate
    assert a.inputs.nominated == a.scheduler.nominator.pods_on
    assert a.scheduler.queue is a.queue


def test_the_configs_backoffs_and_clock_reach_the_queue() -> None:
    a, clock = _assembled(BACKOFF)
    qpi = q.QueuedPodInfo(make_pod("p").build(), clock(), attempts=1)
    assert a.queue.backoff_expiry(qpi) == clock() + 3
    qpi.attempts = 5
    assert a.queue.backoff_expiry(qpi) == clock() + 7


@pytest.mark.parametrize(
    "ask",
    [
        pytest.param(lambda h, pod: h.less(q.QueuedPodInfo(pod, 0.0), q.QueuedPodInfo(pod, 1.0)), id="less"),
        pytest.param(lambda h, pod: h.pre_enqueue(pod), id="pre_enqueue"),
    ],
)
def test_unbound_hooks_refuse_to_answer(ask: Any) -> None:
    """Nothing may be queued before the scheduler exists: an unbound hook says so instead of guessing."""
    with pytest.raises(RuntimeError, match="before the scheduler"):
        ask(QueueHooks(), make_pod("p").build())


def test_a_scheduler_without_profiles_orders_nothing() -> None:
    sched = Scheduler(profiles={}, cache=Cache(), queue=q.SchedulingQueue(lambda a, b: False), writer=None)
    pod = make_pod("p").build()
    assert not sched.queue_less(q.QueuedPodInfo(pod, 0.0), q.QueuedPodInfo(pod, 1.0))
    sched.shutdown(1)
