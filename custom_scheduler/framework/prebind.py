"""The binding cycle's extension points beside PreBind itself: the PreBindPreFlight checks, PreBind's
waits joined into one Future (``PreBindWaiter``), and Bind.

Apart from :mod:`~custom_scheduler.framework.runtime` to keep that module to its size; the binding
cycle (:mod:`custom_scheduler.core.binding`) continues as the waits' Future's callback, so a pod
whose volumes or devices are still being provisioned holds no thread.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from concurrent.futures import Future
from typing import cast

from custom_scheduler.api.model import Pod
from custom_scheduler.framework import instrument as ins
from custom_scheduler.framework import interface as fi
from custom_scheduler.framework.types import SUCCESS, BindOutcome, BindResult, Code, CycleState, Status

_KINDS: dict[tuple[type, type], bool] = {}


def _is(plugin: object, proto: type) -> bool:
    """``isinstance(plugin, proto)`` for a runtime-checkable protocol of methods, remembered per
    class: the protocol check costs microseconds, and these run for every bound pod."""
    key = (type(plugin), proto)
    found = _KINDS.get(key)
    if found is None:
        found = _KINDS[key] = isinstance(plugin, proto)
    return found


def pre_flights(plugins: Sequence[fi.PreBindPlugin], state: CycleState, pod: Pod, node_name: str) -> Status:
    """Upstream's RunPreBindPreFlights: SUCCESS when any PreBind plugin will have work, SKIP when
    none will (a plugin without the check counts as none: it must declare its work to get a
    nomination written), the first ERROR otherwise."""
    out = Status(Code.SKIP)
    for p in plugins:
        if not _is(p, fi.PreBindPreFlightPlugin):
            continue
        try:
            st = cast(fi.PreBindPreFlightPlugin, p).pre_bind_pre_flight(state, pod, node_name)
        except Exception as e:
            st = Status.from_exception(e, p.name)
        if st.is_success:
            out = SUCCESS
        elif st.code is not Code.SKIP:
            return Status.as_error(f"running PreBindPreFlight {p.name!r}: {st.message}", p.name)
    return out


def pending(plugins: Sequence[fi.PreBindPlugin], state: CycleState, pod: Pod, node_name: str) -> Future[Status] | None:
    """What the PreBind ``plugins`` left to wait for, as one Future: SUCCESS once every wait
    succeeded, else the first failure stamped with its plugin. None when nothing waits."""
    waits: list[tuple[str, Future[Status]]] = []
    for p in plugins:
        if _is(p, fi.PreBindWaiter):
            try:
                fut = cast(fi.PreBindWaiter, p).pre_bind_pending(state, pod, node_name)
            except Exception as e:
                fut = Future()
                fut.set_result(Status.from_exception(e, p.name))
            if fut is not None:
                waits.append((p.name, fut))
    if not waits:
        return None
    if len(waits) == 1:
        name, only = waits[0]
        out: Future[Status] = Future()
        only.add_done_callback(lambda f: out.set_result(f.result().with_plugin(name)))
        return out
    return all_of(waits)


def all_of(pending: Sequence[tuple[str, Future[Status]]]) -> Future[Status]:
    """One Future for several waits: the first failure, or SUCCESS once all succeeded."""
    out: Future[Status] = Future()
    left = [len(pending)]
    lock = threading.Lock()

    def done(name: str, f: Future[Status]) -> None:
        st = f.result()
        with lock:
            left[0] -= 1
            finished = out.done()
            if not finished and (not st.is_success or left[0] == 0):
                out.set_result(st.with_plugin(name) if not st.is_success else SUCCESS)

    for name, f in pending:
        f.add_done_callback(lambda f, name=name: done(name, f))  # type: ignore[misc]
    return out


def bind(
    plugins: Sequence[fi.BindPlugin], state: CycleState, pod: Pod, node_name: str, recorder: ins.Recorder
) -> BindResult:
    """The first Bind plugin that does not skip decides; an exception is an ERROR result. In a
    sampled cycle each plugin is timed into ``recorder``."""
    timed = state.record_plugin_metrics
    for p in plugins:
        tp = ins.now() if timed else 0.0
        try:
            r = p.bind(state, pod, node_name)
        except Exception as e:
            r = BindResult(BindOutcome.ERROR, Status.from_exception(e, p.name))
        if timed:
            code = Code.SUCCESS if r.is_bound else r.status.code
            recorder.plugin_duration(p.name, ins.BIND, code, ins.now() - tp)
        if r.outcome is BindOutcome.SKIPPED:
            continue
        return r.with_plugin(p.name)
    return BindResult(BindOutcome.ERROR, Status.as_error("no bind plugin bound the pod"))
