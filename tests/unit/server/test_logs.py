"""In a pod every log line is one JSON object: the standard library's records (urllib3's
"Connection pool is full", the kubernetes client's warnings) included, tracebacks inside."""

from __future__ import annotations

import json
import subprocess
import sys

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
