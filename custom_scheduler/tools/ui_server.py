"""``custom-scheduler ui``: the simulator as an interactive page served on 127.0.0.1.

The page (``tools/ui/``: one HTML file, one script, one stylesheet; no external resource, so it
works on an air-gapped host) holds the cluster snapshot, the pending pods and an optional
KubeSchedulerConfiguration as YAML text areas, pre-filled from ``--cluster``/``--pods``/``--config``.
Run posts them to ``POST /api/simulate``, which runs exactly what ``simulate`` runs: the texts go
through the same loaders (:func:`~custom_scheduler.tools.snapshot_file.load_cluster`,
:func:`~custom_scheduler.tools.snapshot_file.load_pods`,
:func:`~custom_scheduler.tools.plumbing.load_scheduler_config`) and
:func:`custom_scheduler.tools.simulate.simulate`, so the page and the CLI cannot disagree.

The answer is ``simulate -o json``'s document plus, per pod, its outcome (attempts included) and
the framework's diagnosis of its last attempt (every node's Filter verdict, every scored node's
per-plugin scores). Bad input is the caller's: HTTP 400 with the loaders' message; an unexpected
failure is HTTP 500 with its text, and the server goes on serving.

The server is the standard library's ``ThreadingHTTPServer``. Simulations run one at a time
(:data:`_RUN_LOCK`): :func:`~custom_scheduler.tools.plumbing.quiet_logs` reconfigures the
process's logging while one runs, and a simulation is CPU-bound anyway.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from importlib import resources
from typing import Any

from custom_scheduler.framework.registry import Registry
from custom_scheduler.tools.plumbing import EXIT_OK, ToolError, load_scheduler_config, quiet_logs, run_command
from custom_scheduler.tools.simulate import simulate
from custom_scheduler.tools.simulation_result import SimulationResult
from custom_scheduler.tools.snapshot_file import load_cluster, load_pods

#: The page's files, served at ``/`` + name; nothing else is.
ASSETS = {
    "index.html": "text/html; charset=utf-8",
    "app.js": "text/javascript; charset=utf-8",
    "app.css": "text/css; charset=utf-8",
}
#: A request body larger than this is refused (a snapshot of a few thousand nodes fits).
MAX_BODY = 64 << 20
_RUN_LOCK = threading.Lock()


@dataclass(frozen=True, slots=True)
class Reply:
    """An HTTP answer as a value: status code and JSON document."""

    status: int
    body: dict[str, Any]


def _text_field(body: Mapping[str, Any], key: str, *, required: bool) -> str:
    value = body.get(key)
    if value is None or value == "":
        if required:
            raise ToolError(f"{key}: empty; paste or load the YAML first")
        return ""
    if not isinstance(value, str):
        raise ToolError(f"{key}: expected a string of YAML, found {type(value).__name__}")
    return value


def _optional_int(body: Mapping[str, Any], key: str) -> int | None:
    value = body.get(key)
    if value is None or value == "":
        return None
    if isinstance(value, bool) or not isinstance(value, int | str):
        raise ToolError(f"{key}: expected an integer, found {value!r}")
    try:
        return int(value)
    except ValueError:
        raise ToolError(f"{key}: expected an integer, found {value!r}") from None


def _run_texts(body: Mapping[str, Any], registry: Registry) -> SimulationResult:
    """The request's texts through the CLI's own loaders: each is written to a file of a private
    directory (named after the field, which is also how messages name it) and read back by them."""
    cluster = _text_field(body, "cluster", required=True)
    pods = _text_field(body, "pods", required=True)
    config = _text_field(body, "config", required=False)
    seed = _optional_int(body, "seed")
    profile = body.get("profile") or None
    if profile is not None and not isinstance(profile, str):
        raise ToolError(f"profile: expected a name, found {profile!r}")
    with tempfile.TemporaryDirectory(prefix="custom-scheduler-ui-") as tmp:
        paths = {}
        for name, text in (("cluster", cluster), ("pods", pods), ("config", config)):
            paths[name] = os.path.join(tmp, f"{name}.yaml")
            with open(paths[name], "w", encoding="utf-8") as f:
                f.write(text)
        try:
            cfg = load_scheduler_config(paths["config"] if config.strip() else None, registry)
            state = load_cluster(paths["cluster"])
            state.source = "the page's snapshot"
            docs = load_pods(paths["pods"])
            return simulate(state, docs, cfg, registry, seed=seed, profile=profile, diagnose=True)
        except ToolError as e:
            raise ToolError(str(e).replace(tmp + os.sep, ""), e.code) from None


def result_document(res: SimulationResult) -> dict[str, Any]:
    """``simulate -o json``'s document, every pod's outcome in file order (the placements list
    holds only the placed ones) and the per-pod diagnoses."""
    doc = res.to_dict()
    doc["pods"] = [
        {
            "pod": o.pod,
            "profile": o.profile,
            "result": o.result,
            "node": o.node,
            "score": o.score,
            "ties": list(o.ties),
            "attempts": o.attempts,
            "order": o.order,
            "message": o.message,
        }
        for o in res.outcomes
    ]
    doc["diagnoses"] = {pod: d.to_dict() for pod, d in res.diagnoses.items()}
    return doc


def handle_simulate(raw: bytes, registry: Registry) -> Reply:
    """``POST /api/simulate``: a JSON object ``{cluster, pods, config?, seed?, profile?}`` (YAML
    texts) in, the simulation's document out; 400 with a message for any bad input."""
    try:
        body = json.loads(raw.decode("utf-8") or "null")
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        return Reply(400, {"error": f"the request is not JSON: {e}"})
    if not isinstance(body, dict):
        return Reply(400, {"error": "the request must be a JSON object with cluster, pods and config texts"})
    try:
        with _RUN_LOCK, quiet_logs():
            res = _run_texts(body, registry)
    except ToolError as e:
        return Reply(400, {"error": str(e)})
    except Exception as e:  # a bug in a plugin must not take the page's server down
        return Reply(500, {"error": f"the simulation failed: {type(e).__name__}: {e}"})
    return Reply(200, result_document(res))


@dataclass(frozen=True, slots=True)
class Initial:
    """What the text areas start with (``--cluster``, ``--pods``, ``--config`` read once)."""

    cluster: str = ""
    pods: str = ""
    config: str = ""
    seed: int | None = None
    profile: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "cluster": self.cluster,
            "pods": self.pods,
            "config": self.config,
            "seed": self.seed,
            "profile": self.profile,
        }


def _read(path: str | None, what: str) -> str:
    if path is None:
        return ""
    try:
        with open(path, encoding="utf-8") as f:
            return f.read()
    except (OSError, UnicodeDecodeError) as e:
        raise ToolError(f"{what} {path}: cannot read: {e}") from None


def asset(name: str) -> bytes:
    """One of the page's files, from the package data."""
    return resources.files("custom_scheduler.tools").joinpath("ui", name).read_bytes()


class UIServer(ThreadingHTTPServer):
    """The page's server: its registry and initial texts travel with it to the handler."""

    daemon_threads = True

    def __init__(self, address: tuple[str, int], registry: Registry, initial: Initial) -> None:
        super().__init__(address, _Handler)
        self.registry = registry
        self.initial = initial

    @property
    def url(self) -> str:
        host, port = self.server_address[0], self.server_address[1]
        shown = f"[{host!s}]" if ":" in str(host) else str(host)
        return f"http://{shown}:{port}/"


class _Handler(BaseHTTPRequestHandler):
    server: UIServer
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:
        """Quiet: the terminal shows the URL, not a line per request."""

    def _send(self, status: int, body: bytes, content_type: str) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Cache-Control", "no-store")
        self.end_headers()
        self.wfile.write(body)

    def _json(self, reply: Reply) -> None:
        self._send(reply.status, json.dumps(reply.body).encode(), "application/json")

    def do_GET(self) -> None:
        path = self.path.split("?", 1)[0]
        name = "index.html" if path == "/" else path.lstrip("/")
        if path == "/api/initial":
            self._json(Reply(200, self.server.initial.to_dict()))
        elif name in ASSETS:
            self._send(200, asset(name), ASSETS[name])
        else:
            self._json(Reply(404, {"error": f"no such page: {path}"}))

    def do_POST(self) -> None:
        if self.path.split("?", 1)[0] != "/api/simulate":
            self._json(Reply(404, {"error": f"no such endpoint: {self.path}"}))
            return
        try:
            length = int(self.headers.get("Content-Length") or "0")
        except ValueError:
            length = -1
        if length < 0 or length > MAX_BODY:
            self.close_connection = True
            self._json(Reply(413 if length > 0 else 400, {"error": f"bad request size (at most {MAX_BODY} bytes)"}))
            return
        self._json(handle_simulate(self.rfile.read(length), self.server.registry))


def serve(args: argparse.Namespace, registry: Registry) -> UIServer:
    """Bind the server (port 0: a free one), print its URL and serve until interrupted."""
    initial = Initial(
        cluster=_read(args.cluster, "cluster snapshot"),
        pods=_read(args.pods, "pods file"),
        config=_read(args.config, "config"),
        seed=args.seed,
        profile=args.profile,
    )
    try:
        server = UIServer((args.address, args.port), registry, initial)
    except OSError as e:
        raise ToolError(f"cannot listen on {args.address}:{args.port}: {e}") from None
    print(f"custom-scheduler ui: serving on {server.url} (Ctrl-C to stop)", flush=True)
    return server


def cmd_ui(args: argparse.Namespace) -> int:
    from custom_scheduler.plugins.builtin import full_registry

    server = run_command("ui", lambda: serve(args, full_registry()))
    if isinstance(server, ToolError):
        return server.code
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
    print("custom-scheduler ui: stopped", file=sys.stderr)
    return EXIT_OK
