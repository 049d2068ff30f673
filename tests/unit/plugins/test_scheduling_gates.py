"""SchedulingGates and the PreEnqueue extension point: the plugin's verdicts, the framework's
``run_pre_enqueue``, the default profile and registry, and the scheduler's queue callback."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

import pytest

from custom_scheduler.api.model import Pod
from custom_scheduler.config import load_config
from custom_scheduler.config.schema import SchedulerConfig
from custom_scheduler.core import queue
from custom_scheduler.core.assembly import FrameworkInputs, Ports, assemble
from custom_scheduler.core.cache import Cache
from custom_scheduler.core.scheduler import Scheduler
from custom_scheduler.framework import interface as fi
from custom_scheduler.framework.profiles import build_frameworks
from custom_scheduler.framework.registry import PluginSpec, Registry, extension_points
from custom_scheduler.framework.runtime import Framework
from custom_scheduler.framework.types import SUCCESS, Code, Snapshot, Status
from custom_scheduler.plugins import in_tree_registry, scheduling_gates
from custom_scheduler.plugins.builtin import full_registry
from tests.builders import make_pod
from tests.unit.plugins.support import fake_handle

HEADER = "apiVersion: kubescheduler.config.k8s.io/v1\nkind: KubeSchedulerConfiguration\n"


# -- the plugin ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("gates", "want"),
    [
        pytest.param((), SUCCESS, id="no-gates"),
        pytest.param(
            ("example.com/a",),
            Status.unresolvable("waiting for scheduling gates: [example.com/a]"),
            id="one-gate",
        ),
        pytest.param(
            ("example.com/a", "example.com/b"),
            Status.unresolvable("waiting for scheduling gates: [example.com/a example.com/b]"),
            id="two-gates-in-spec-order",
        ),
        pytest.param(
            ("b", "a"),
            Status.unresolvable("waiting for scheduling gates: [b a]"),
            id="order-kept-not-sorted",
        ),
    ],
)
def test_pre_enqueue(gates: tuple[str, ...], want: Status) -> None:
    """Upstream's verdict and message (Go's %v of the gate names: brackets, space-separated)."""
    pl = scheduling_gates.SchedulingGates(None, fake_handle())
    got = pl.pre_enqueue(make_pod("p").gates(*gates).build())
    assert got == want
    if not got.is_success:
        assert got.code is Code.UNSCHEDULABLE_AND_UNRESOLVABLE
        assert got.plugin == "SchedulingGates"


def test_plugin_shape() -> None:
    """Implements PreEnqueue only (so multiPoint puts it nowhere else) and takes no args."""
    assert scheduling_gates.NAME == "SchedulingGates"
    assert extension_points(scheduling_gates.SPEC) == frozenset({"preEnqueue"})
    assert isinstance(scheduling_gates.SchedulingGates(None, fake_handle()), fi.PreEnqueuePlugin)
    assert scheduling_gates.SPEC.parse_args(None, "pluginConfig[0].args") is None


def test_queue_constant_matches_the_plugin_name() -> None:
    """The queue skips SchedulingGates-gated pods by name without importing the plugin."""
    assert queue.SCHEDULING_GATES == scheduling_gates.NAME


# -- registry and default profile ---------------------------------------------------------------


def test_registered_in_tree_and_in_the_full_registry() -> None:
    assert "SchedulingGates" in in_tree_registry()
    assert "SchedulingGates" in full_registry(out_of_tree=False)


def test_default_profile_runs_scheduling_gates_at_pre_enqueue() -> None:
    """Upstream's default multiPoint list starts with SchedulingGates."""
    cfg = load_config(HEADER, full_registry(out_of_tree=False))
    [profile] = cfg.profiles
    assert [r.name for r in profile.enabled("preEnqueue")] == [
        "SchedulingGates",
        "DynamicResources",
        "DefaultPreemption",
        "GangScheduling",
    ]
    assert profile.plugin_names()[0] == "SchedulingGates"
    fwk = _framework(HEADER, full_registry(out_of_tree=False))
    assert [p.name for p in fwk.pre_enqueue] == [r.name for r in profile.enabled("preEnqueue")]
    # Only at preEnqueue: no other point of the built framework holds it.
    assert "SchedulingGates" not in [p.name for p in (*fwk.pre_filter, *fwk.filter, *fwk.pre_score)]


# -- the framework's run_pre_enqueue ------------------------------------------------------------


class _Gate:
    """A PreEnqueue plugin that rejects pods carrying its label and records what it saw."""

    name: ClassVar[str] = "QuotaGate"
    calls: ClassVar[list[str]] = []

    def __init__(self, args: Any, handle: Any) -> None: ...

    def pre_enqueue(self, pod: Pod) -> Status:
        _Gate.calls.append(pod.name)
        if pod.labels.get("quota") == "boom":
            raise RuntimeError("quota service down")
        if pod.labels.get("quota") == "wait":
            return Status.unschedulable("over quota")
        return SUCCESS


def _registry() -> Registry:
    reg = Registry(full_registry(out_of_tree=False))
    reg.register(PluginSpec(_Gate.name, _Gate))
    return reg


def _framework(text: str, reg: Registry) -> Framework:
    cfg = load_config(text, reg)
    return build_frameworks(cfg.profiles, reg, Snapshot(), client=None)["custom-scheduler"]


WITH_GATE = HEADER + "profiles:\n- plugins:\n    preEnqueue: {enabled: [{name: QuotaGate}]}\n"


@pytest.mark.parametrize(
    ("pod", "code", "plugin", "message", "gate_ran"),
    [
        pytest.param(make_pod("free"), Code.SUCCESS, "", "", True, id="all-pass"),
        pytest.param(
            make_pod("gated").gates("g"),
            Code.UNSCHEDULABLE_AND_UNRESOLVABLE,
            "SchedulingGates",
            "waiting for scheduling gates: [g]",
            False,
            id="first-rejection-stops",
        ),
        pytest.param(
            make_pod("quota").label("quota", "wait"), Code.UNSCHEDULABLE, "QuotaGate", "over quota", True, id="second"
        ),
        pytest.param(
            make_pod("boom").label("quota", "boom"),
            Code.ERROR,
            "QuotaGate",
            "RuntimeError: quota service down",
            True,
            id="exception-is-error",
        ),
    ],
)
def test_run_pre_enqueue(pod: Any, code: Code, plugin: str, message: str, gate_ran: bool) -> None:
    """Plugins run in configured order (the defaults SchedulingGates, DynamicResources,
    DefaultPreemption and GangScheduling, then the appended QuotaGate); the first non-success is returned stamped with
    its plugin; an exception becomes an ERROR status."""
    fwk = _framework(WITH_GATE, _registry())
    assert [p.name for p in fwk.pre_enqueue] == [
        "SchedulingGates",
        "DynamicResources",
        "DefaultPreemption",
        "GangScheduling",
        "QuotaGate",
    ]
    _Gate.calls.clear()
    p = pod.build()
    st = fwk.run_pre_enqueue(p)
    assert (st.code, st.plugin, st.message) == (code, plugin, message)
    assert _Gate.calls == ([p.name] if gate_ran else [])


def test_run_pre_enqueue_without_plugins_lets_everything_in() -> None:
    fwk = _framework(HEADER + "profiles:\n- plugins: {preEnqueue: {disabled: [{name: '*'}]}}\n", _registry())
    assert fwk.pre_enqueue == []
    assert fwk.run_pre_enqueue(make_pod("p").gates("g").build()) is SUCCESS


# -- the scheduler's queue callback --------------------------------------------------------------


@pytest.mark.parametrize(
    ("pod", "want"),
    [
        pytest.param(make_pod("free"), None, id="passes"),
        pytest.param(make_pod("gated").gates("g"), "SchedulingGates", id="gated"),
        pytest.param(make_pod("quota").label("quota", "wait"), "QuotaGate", id="other-plugin"),
        pytest.param(make_pod("boom").label("quota", "boom"), "QuotaGate", id="error-gates-too"),
        pytest.param(make_pod("theirs").gates("g").scheduler("other"), None, id="not-our-profile"),
    ],
)
def test_scheduler_pre_enqueue(pod: Any, want: str | None) -> None:
    """What the queue is told: the rejecting plugin's name, or None (pods of no profile pass: the
    scheduling cycle skips them)."""
    reg = _registry()
    cfg = load_config(WITH_GATE, reg)
    fwks = build_frameworks(cfg.profiles, reg, Snapshot(), client=None)
    q = queue.SchedulingQueue(lambda a, b: False)
    s = Scheduler(profiles=fwks, cache=Cache(), queue=q, writer=None)
    try:
        assert s.pre_enqueue(pod.build()) == want
    finally:
        s.shutdown()


def test_gated_pod_is_never_handed_to_the_scheduling_cycle() -> None:
    """Wired as the daemon wires it (App, through ``assemble``): the informer sink queues a gated
    pod, the scheduling loop's pop never returns it; the update that removes the gate makes it pop
    at once."""
    reg = full_registry(out_of_tree=False)
    cfg = load_config(HEADER, reg)

    def frameworks(config: SchedulerConfig, inputs: FrameworkInputs) -> Mapping[str, Framework]:
        return build_frameworks(
            config.profiles,
            reg,
            inputs.snapshot,
            client=None,
            nominated_lister=inputs.nominated,
            activator=inputs.activate,
            preempting=inputs.preempting,
        )

    assembly = assemble(cfg, Cache(), frameworks, Ports(events=None))
    s, q = assembly.scheduler, assembly.queue
    try:
        gated = make_pod("gated").uid("uid-gated").gates("example.com/a").build()
        s.on_pod_add(gated)
        assert q.pop(timeout=0.05) is None
        assert q.where("uid-gated") is queue.SubQueue.GATED
        assert q.pending_counts()["gated"] == 1
        ungated = make_pod("gated").uid("uid-gated").build()
        s.on_pod_update(gated, ungated)
        qpi = q.pop(timeout=0)
        assert qpi is not None
        assert qpi.pod is ungated
        assert qpi.attempts == 1
    finally:
        s.shutdown()
