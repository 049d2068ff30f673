"""structlog set-up: JSON lines when not on a terminal (in a pod), readable console on a terminal.

Configured once, at start-up, by the CLI. ``LOG_FORMAT=json|console`` overrides the detection and
``LOG_LEVEL`` sets the level. Library loggers (urllib3, kubernetes) go through the stdlib at WARNING
so their lines never carry request headers or bearer tokens.
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
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr, format="%(levelname)s %(name)s: %(message)s")
