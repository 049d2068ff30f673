"""The ``ui`` page in a real browser: Debian's headless chromium, driven over the DevTools protocol.

``custom-scheduler ui --port 0`` runs as its own process (the command a user types; the URL is
read from its first line). The test fills a small case into the text areas (three nodes, four
pods, one of which fits nowhere), clicks Run and polls the DOM, with a deadline, until the results
are drawn. Then:

- the placements the page shows are those ``custom-scheduler simulate`` prints for the same input
  and seed;
- clicking the unschedulable pod shows, for every node, the rejecting plugin and its reason;
- at a 400 px wide viewport nothing overflows horizontally (``scrollWidth <= 400``), inputs,
  results and the drill-down table included; and the page is usable at 1920 px;
- bad YAML shows the loader's message on the page, and the server goes on answering.

The DevTools client is ``websocket-client`` (installed with the kubernetes client). Without a
``chromium`` binary the test is skipped (``apt-get install chromium``).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from custom_scheduler.tools import main
from tests.builders import make_node, make_pod, make_pod_group
from tests.unit.tools.test_ui_server import small_case

websocket = pytest.importorskip("websocket", reason="websocket-client (a kubernetes client dependency) is missing")

CHROMIUM = shutil.which("chromium")
pytestmark = pytest.mark.skipif(
    CHROMIUM is None, reason="chromium is not installed (Debian: apt-get install --no-install-recommends chromium)"
)
SEED = 5
DEADLINE = 60.0


class DevTools:
    """A minimal Chrome DevTools Protocol client on one page target: commands by id, events skipped."""

    def __init__(self, ws_url: str) -> None:
        self.ws = websocket.create_connection(ws_url, timeout=DEADLINE, suppress_origin=True)
        self._id = 0

    def send(self, method: str, **params: Any) -> dict[str, Any]:
        self._id += 1
        self.ws.send(json.dumps({"id": self._id, "method": method, "params": params}))
        while True:
            msg = json.loads(self.ws.recv())
            if msg.get("id") == self._id:
                if "error" in msg:
                    raise AssertionError(f"{method}: {msg['error']}")
                result: dict[str, Any] = msg.get("result", {})
                return result

    def js(self, expression: str) -> Any:
        """The value of a JavaScript expression in the page (JSON-serialisable values only)."""
        r = self.send("Runtime.evaluate", expression=expression, returnByValue=True, awaitPromise=True)
        if "exceptionDetails" in r:
            raise AssertionError(f"{expression}: {r['exceptionDetails']}")
        return r["result"].get("value")

    def wait_for(self, expression: str, what: str) -> Any:
        """Poll ``expression`` until it is truthy; fail after the deadline with ``what``."""
        end = time.monotonic() + DEADLINE
        while time.monotonic() < end:
            value = self.js(expression)
            if value:
                return value
            time.sleep(0.1)
        raise AssertionError(f"timed out after {DEADLINE:.0f}s waiting for {what}")

    def close(self) -> None:
        self.ws.close()


def _first_line(proc: subprocess.Popen[str], what: str) -> str:
    assert proc.stdout is not None
    line = proc.stdout.readline()
    if not line:
        raise AssertionError(f"{what} exited before printing anything: rc={proc.wait(timeout=10)}")
    return line


@pytest.fixture
def ui_url() -> Iterator[str]:
    """``custom-scheduler ui --port 0`` in its own process; its URL."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "custom_scheduler", "ui", "--port", "0"],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    try:
        line = _first_line(proc, "custom-scheduler ui")
        assert "serving on http://127.0.0.1:" in line, line
        yield line.split("serving on ", 1)[1].split()[0]
    finally:
        proc.terminate()
        proc.wait(timeout=20)


def _devtools_port(profile: Path, proc: subprocess.Popen[bytes]) -> int:
    """The port chromium chose (``--remote-debugging-port=0`` writes it to DevToolsActivePort)."""
    end = time.monotonic() + DEADLINE
    active = profile / "DevToolsActivePort"
    while time.monotonic() < end:
        if proc.poll() is not None:
            raise AssertionError(f"chromium exited with {proc.returncode}")
        with contextlib.suppress(FileNotFoundError, ValueError, IndexError):
            return int(active.read_text().splitlines()[0])
        time.sleep(0.1)
    raise AssertionError("chromium did not open its DevTools port")


@pytest.fixture
def page(tmp_path: Path) -> Iterator[DevTools]:
    """A headless chromium (killed by its PID afterwards) and a DevTools session on its page."""
    assert CHROMIUM is not None
    profile = tmp_path / "chromium-profile"
    proc = subprocess.Popen(
        [
            CHROMIUM,
            "--headless=new",
            "--remote-debugging-port=0",
            f"--user-data-dir={profile}",
            "--no-sandbox",
            "--no-first-run",
            "--disable-gpu",
            "--disable-dev-shm-usage",
            "about:blank",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    tools: DevTools | None = None
    try:
        port = _devtools_port(profile, proc)
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list", timeout=30) as r:
            targets = json.load(r)
        target = next(t for t in targets if t["type"] == "page")
        tools = DevTools(target["webSocketDebuggerUrl"])
        tools.send("Runtime.enable")
        yield tools
    finally:
        if tools is not None:
            tools.close()
        # chromium's helpers (renderer, zygote) share its process group: end them all by its PID.
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, 9)
        proc.wait(timeout=20)


def _cli_document(tmp_path: Path, cluster: str, pods: str, capsys: pytest.CaptureFixture[str]) -> dict[str, Any]:
    (tmp_path / "cluster.yaml").write_text(cluster)
    (tmp_path / "pods.yaml").write_text(pods)
    capsys.readouterr()
    argv = ["simulate", "--cluster", str(tmp_path / "cluster.yaml"), "--pods", str(tmp_path / "pods.yaml")]
    assert main([*argv, "--seed", str(SEED), "-o", "json"]) == 0
    doc: dict[str, Any] = json.loads(capsys.readouterr().out)
    return doc


def _fill_and_run(page: DevTools, cluster: str, pods: str) -> None:
    page.js(f"document.getElementById('cluster').value = {json.dumps(cluster)}")
    page.js(f"document.getElementById('pods').value = {json.dumps(pods)}")
    page.js(f"document.getElementById('seed').value = {json.dumps(str(SEED))}")
    page.js("document.getElementById('status').textContent = ''")
    page.js("document.getElementById('run').click()")
    page.wait_for(
        "['done', 'failed'].some(w => document.getElementById('status').textContent.startsWith(w))",
        "the run to finish",
    )


_SHOWN_PODS = """Array.from(document.querySelectorAll('#pods-table tbody tr')).map(tr =>
  ({pod: tr.dataset.pod, result: tr.dataset.result, node: tr.dataset.node,
    attempts: Number(tr.cells[3].textContent)}))"""
_DETAIL_ROWS = """Array.from(document.querySelectorAll('#detail-table tbody tr')).map(tr =>
  ({node: tr.dataset.node, verdict: tr.dataset.verdict, plugin: tr.cells[2].textContent,
    reason: tr.cells[3].textContent}))"""
_WIDTH = "Math.max(document.documentElement.scrollWidth, document.body.scrollWidth)"


def _set_width(page: DevTools, width: int) -> None:
    page.send("Emulation.setDeviceMetricsOverride", width=width, height=900, deviceScaleFactor=1, mobile=False)
    page.wait_for(f"window.innerWidth === {width}", f"the viewport to be {width} px wide")


def test_load_run_and_drill_down(
    page: DevTools, ui_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cluster, pods = small_case()
    cli = _cli_document(tmp_path, cluster, pods, capsys)
    page.send("Page.navigate", url=ui_url)
    page.wait_for("document.readyState === 'complete' && !!document.getElementById('run')", "the page to load")

    _fill_and_run(page, cluster, pods)
    assert page.js("document.getElementById('error').hidden") is True, page.js(
        "document.getElementById('error').textContent"
    )
    shown = page.js(_SHOWN_PODS)
    placed = {p["pod"]: p["node"] for p in shown if p["result"] == "scheduled"}
    assert placed == {p["pod"]: p["node"] for p in cli["placements"]}
    assert (
        [p["pod"] for p in shown if p["result"] == "unschedulable"]
        == [p["pod"] for p in cli["unschedulablePods"]]
        == ["default/huge"]
    )
    assert {p["pod"]: p["attempts"] for p in shown if p["result"] == "scheduled"} == {
        p["pod"]: p["attempts"] for p in cli["placements"]
    }
    assert page.js("document.querySelectorAll('#charts .node-chart svg rect').length") > 0

    page.js("document.querySelector('#pods-table tr[data-pod=\"default/huge\"]').click()")
    page.wait_for("!document.getElementById('detail').hidden", "the pod's detail")
    rows = page.js(_DETAIL_ROWS)
    assert rows == [
        {"node": n, "verdict": "rejected", "plugin": "NodeResourcesFit", "reason": "Insufficient cpu"}
        for n in ("large", "medium", "small")
    ]
    assert "huge: unschedulable after 1 attempt" in page.js("document.getElementById('detail-title').textContent")

    _set_width(page, 400)
    assert page.js(_WIDTH) <= 400
    page.js("document.querySelector('#pods-table tr[data-pod=\"default/web-0\"]').click()")
    assert page.js(_WIDTH) <= 400  # the scored node x plugin table scrolls inside its own box
    _set_width(page, 1920)
    assert page.js(_WIDTH) <= 1920
    # Wide screens use the width: the three editors sit side by side.
    tops = page.js("Array.from(document.querySelectorAll('.editor')).map(e => e.getBoundingClientRect().top)")
    assert len(set(tops)) == 1


def test_bad_yaml_shows_the_message(page: DevTools, ui_url: str) -> None:
    cluster, pods = small_case()
    page.send("Page.navigate", url=ui_url)
    page.wait_for("document.readyState === 'complete' && !!document.getElementById('run')", "the page to load")
    _fill_and_run(page, "nodes: [", pods)
    error = page.js("document.getElementById('error').hidden ? '' : document.getElementById('error').textContent")
    assert error.startswith("cluster snapshot cluster.yaml: invalid YAML")
    assert page.js("document.getElementById('results').hidden") is True
    _fill_and_run(page, cluster, pods)  # the server is still there and the page recovers
    assert page.js("document.getElementById('error').hidden") is True
    assert page.js("document.querySelectorAll('#pods-table tbody tr').length") == 4


_SHOWN_GROUPS = """Array.from(document.querySelectorAll('#groups-table tbody tr')).map(tr =>
  ({key: tr.dataset.group, placed: tr.cells[3].textContent, result: tr.cells[4].textContent}))"""


def test_pod_groups_table_shows_each_gang_as_the_group_cycle_decided(
    page: DevTools, ui_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Two 2-member gangs and room for one: the page's Pod groups table says which ran whole and
    which waits, as simulate's own document does."""
    node = make_node("n1").capacity(cpu="2", memory="4Gi", pods="10").obj()
    groups = [make_pod_group(name, min_count=2).obj() for name in ("a", "b")]
    cluster = yaml.safe_dump(
        {"apiVersion": "custom-scheduler/v1alpha1", "kind": "ClusterSnapshot", "nodes": [node], "podGroups": groups}
    )
    members = [make_pod(f"{g}-{i}").req(cpu="1").scheduling_group(g).obj() for g in ("a", "b") for i in range(2)]
    pods = yaml.safe_dump_all(members)
    cli = _cli_document(tmp_path, cluster, pods, capsys)
    expected = [
        {"key": g["key"], "placed": f"{g['placed']}/{g['members']}", "result": g["result"]} for g in cli["groups"]
    ]
    assert sorted(e["result"] for e in expected) == ["scheduled", "unschedulable"], cli["groups"]

    page.send("Page.navigate", url=ui_url)
    page.wait_for("document.readyState === 'complete' && !!document.getElementById('run')", "the page to load")
    _fill_and_run(page, cluster, pods)
    assert page.js("document.getElementById('groups-section').hidden") is False
    assert page.js(_SHOWN_GROUPS) == expected
