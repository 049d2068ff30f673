"""structlog set-up: JSON lines when not on a terminal (in a pod), readable console on a terminal.

Configured once, at start-up, by the CLI. ``LOG_FORMAT=json|console`` overrides the detection and
``LOG_LEVEL`` sets the level. Library loggers (urllib3, kubernetes) go through the stdlib at WARNING
so their lines never carry request headers or bearer tokens, rendered by structlog in the same
format (JSON in a pod: no plain-text line in the stream).
"""

from __future__ import annotations

import logging
import os
import sys

import orjson
import structlog


def setup(level: str | None = None, fmt: str | None = None) -> None:
    level_name = (level or os.environ.get("LOG_LEVEL") or "info").upper()
    lvl = logging.getLevelNamesMapping().get(level_name, logging.INFO)
    fmt = fmt or os.environ.get("LOG_FORMAT") or ("console" if sys.stderr.isatty() else "json")
    processors: list[structlog.types.Processor] = [
        structlog.contextvars.merge_contextvars,
        structlog.processors.add_log_level,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
        structlog.processors.format_exc_info,
    ]
    if fmt == "console":
        processors.append(structlog.dev.ConsoleRenderer(colors=sys.stderr.isatty()))
        factory: structlog.types.WrappedLogger = structlog.PrintLoggerFactory(sys.stderr)
    else:
        processors.append(structlog.processors.JSONRenderer(serializer=orjson.dumps))
        factory = structlog.BytesLoggerFactory(sys.stderr.buffer)
    structlog.configure(
        processors=processors,
        wrapper_class=structlog.make_filtering_bound_logger(lvl),
        logger_factory=factory,
        cache_logger_on_first_use=True,
    )
    _route_stdlib(fmt)


def _route_stdlib(fmt: str) -> None:
    """The standard library's records (urllib3, the kubernetes client) in the same format as
    ours: one JSON object per line in a pod, so a log pipeline never meets a plain-text line. The
    level stays WARNING: their debug lines carry request headers and bearer tokens."""
    renderer: structlog.types.Processor = structlog.processors.JSONRenderer()
    if fmt == "console":
        renderer = structlog.dev.ConsoleRenderer(colors=sys.stderr.isatty())
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(
        structlog.stdlib.ProcessorFormatter(
            processors=[structlog.stdlib.ProcessorFormatter.remove_processors_meta, renderer],
            foreign_pre_chain=[
                structlog.stdlib.add_logger_name,
                structlog.stdlib.add_log_level,
                structlog.processors.TimeStamper(fmt="iso", utc=True),
                structlog.processors.format_exc_info,
            ],
        )
    )
    root = logging.getLogger()
    root.handlers = [handler]
    root.setLevel(logging.WARNING)
