"""In a pod every log line is one JSON object: the standard library's records (urllib3's
"Connection pool is full", the kubernetes client's warnings) included, tracebacks inside. The daemon
imports structlog without rich, and the console still renders tracebacks."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

SCRIPT = """
import logging
from custom_scheduler.server import logs
import structlog
logs.setup("info", "json")
structlog.get_logger("custom_scheduler.x").info("ours", n=1)
logging.getLogger("urllib3.connectionpool").warning("Connection pool is full, discarding connection: %s", "h")
logging.getLogger("urllib3.connectionpool").info("hidden: below WARNING")
try:
    1 / 0
except ZeroDivisionError:
    logging.getLogger("kubernetes.client").exception("boom")
"""


def test_every_line_is_json() -> None:
    proc = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=60, check=True)
    lines = proc.stderr.splitlines()
    docs = [json.loads(line) for line in lines]  # raises on any plain-text line
    assert [(d["event"], d["level"]) for d in docs] == [
        ("ours", "info"),
        ("Connection pool is full, discarding connection: h", "warning"),
        ("boom", "error"),
    ]
    assert docs[1]["logger"] == "urllib3.connectionpool"
    assert "ZeroDivisionError" in docs[2]["exception"]
    assert all("timestamp" in d for d in docs)


RICH_SCRIPT = """
import sys
from custom_scheduler import cli
try:
    cli.main(["run", "--config", sys.argv[1]])
except SystemExit:
    pass
hidden = "rich" not in sys.modules
no_asyncio = "asyncio.base_events" not in sys.modules  # structlog holds a stand-in
import structlog.dev, structlog.tracebacks, structlog.stdlib
no_rich = structlog.dev.rich is None and structlog.tracebacks.rich is None
import rich.console  # importable again for whoever needs it later (the CEL library's command line)
import asyncio  # the real module for whoever imports it later, and behind structlog's stand-in
through = structlog.stdlib.asyncio.get_running_loop is asyncio.get_running_loop
real = asyncio.run(asyncio.sleep(0, "ok")) == "ok" and through
print(hidden, no_rich, no_asyncio, real)
"""


def test_the_daemon_imports_structlog_without_rich(tmp_path: Path) -> None:
    """``run`` reaches the config file (here: missing) with structlog loaded and neither rich nor
    asyncio imported, and both stay importable afterwards (asyncio also through structlog)."""
    proc = subprocess.run(
        [sys.executable, "-c", RICH_SCRIPT, str(tmp_path / "absent.yaml")],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    assert proc.stdout.split() == ["True", "True", "True", "True"], proc.stderr


CONSOLE_SCRIPT = """
import sys
from custom_scheduler.server import logs
import structlog
logs.setup("info", "console")
try:
    1 / 0
except ZeroDivisionError:
    structlog.get_logger("custom_scheduler.x").exception("boom", n=1)
"""


def test_the_console_renders_tracebacks_without_rich() -> None:
    proc = subprocess.run(
        [sys.executable, "-c", CONSOLE_SCRIPT], capture_output=True, text=True, timeout=60, check=True
    )
    assert "boom" in proc.stderr
    assert "n=1" in proc.stderr
    assert "Traceback (most recent call last)" in proc.stderr
    assert "ZeroDivisionError: division by zero" in proc.stderr
