"""Extension points without a result (Unreserve, PostBind): a plugin that raises is logged, with
the plugin, the pod and the error, and the plugins after it still run."""

from __future__ import annotations

from typing import Any, ClassVar

import pytest
from structlog.testing import capture_logs

from custom_scheduler.config.schema import PluginRef
from custom_scheduler.framework.registry import PluginSpec, Registry
from custom_scheduler.framework.runtime import Framework
from custom_scheduler.framework.types import SUCCESS, CycleState, Status
from custom_scheduler.plugins import priority_sort
from tests.builders import make_pod

NODE = "node-a"


class _Recorder:
    """A Reserve and PostBind plugin that records its calls, and raises when ``fails``."""

    name: ClassVar[str] = ""
    fails: ClassVar[bool] = False

    def __init__(self, args: Any, handle: Any) -> None:
        self.calls: list[str] = []

    def _run(self, what: str) -> None:
        self.calls.append(what)
        if self.fails:
            raise RuntimeError(f"{self.name} broke in {what}")

    def reserve(self, state: CycleState, pod: Any, node_name: str) -> Status:
        return SUCCESS

    def unreserve(self, state: CycleState, pod: Any, node_name: str) -> None:
        self._run("unreserve")

    def post_bind(self, state: CycleState, pod: Any, node_name: str) -> None:
        self._run("post_bind")


class _First(_Recorder):
    name: ClassVar[str] = "First"


class _Broken(_Recorder):
    name: ClassVar[str] = "Broken"
    fails: ClassVar[bool] = True


class _Last(_Recorder):
    name: ClassVar[str] = "Last"


def _framework() -> Framework:
    reg = Registry()
    for spec in (
        priority_sort.SPEC,
        PluginSpec("First", _First),
        PluginSpec("Broken", _Broken),
        PluginSpec("Last", _Last),
    ):
        reg.register(spec)
    order = [PluginRef("First"), PluginRef("Broken"), PluginRef("Last")]
    plugins = {"queueSort": [PluginRef(priority_sort.NAME)], "reserve": order, "postBind": order}
    return Framework("p", plugins, {}, reg, handle=None)  # type: ignore[arg-type]  # no plugin here reads it


def _calls(fwk: Framework) -> dict[str, list[str]]:
    return {name: fwk.plugin(name).calls for name in ("First", "Broken", "Last")}  # type: ignore[union-attr]


@pytest.mark.parametrize(
    ("extension_point", "run", "call"),
    [
        pytest.param("Unreserve", Framework.run_unreserve, "unreserve", id="unreserve"),
        pytest.param("PostBind", Framework.run_post_bind, "post_bind", id="post_bind"),
    ],
)
def test_a_raising_plugin_is_logged_and_the_others_still_run(extension_point: str, run: Any, call: str) -> None:
    fwk = _framework()
    pod = make_pod("web-1").build()
    with capture_logs() as logs:
        run(fwk, CycleState(), pod, NODE)
    assert _calls(fwk) == {"First": [call], "Broken": [call], "Last": [call]}
    (entry,) = logs
    assert entry["event"] == "plugin_failed"
    assert entry["log_level"] == "error"
    assert (entry["extension_point"], entry["plugin"], entry["pod"], entry["node"]) == (
        extension_point,
        "Broken",
        pod.key,
        NODE,
    )
    assert entry["error"] == f"RuntimeError: Broken broke in {call}"
    assert isinstance(entry["exc_info"], RuntimeError)
