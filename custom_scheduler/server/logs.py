"""structlog set-up: JSON lines when not on a terminal (in a pod), readable console on a terminal.

Configured once, at start-up, by the CLI. ``LOG_FORMAT=json|console`` overrides the detection and
``LOG_LEVEL`` sets the level. Library loggers (urllib3, kubernetes) go through the stdlib at WARNING
so their lines never carry request headers or bearer tokens, rendered by structlog in the same
format (JSON in a pod: no plain-text line in the stream).

Importing this module first imports structlog without ``rich`` (:func:`import_structlog`): the CLI
imports it before anything else that logs, so the daemon never pays for ``rich``.
"""

from __future__ import annotations

import importlib
import logging
import os
import sys
import types

import orjson


def import_structlog() -> None:
    """Import structlog with ``rich`` hidden, then make ``rich`` importable again.

    ``structlog.dev`` and ``structlog.tracebacks`` try ``import rich`` when they are first imported
    (and ``structlog`` imports both) to make rich the console's exception formatter. ``rich`` is
    installed in production (the CEL library ``common-expression-language`` requires it for its
    command line), and importing it costs 75-160 ms of start-up on two loaded cores, for a renderer
    the daemon never uses: it writes JSON, and on a terminal structlog's plain traceback formatter
    does. A ``None`` in ``sys.modules`` makes ``import rich`` raise ImportError, which structlog
    handles as "rich is not installed"; the entry is removed right after, so anything imported later
    (the CEL library's command line) finds rich as usual. Nothing else runs meanwhile: this is the
    first thing the CLI imports, before any thread starts.

    ``asyncio`` likewise (40 ms of start-up): ``structlog.stdlib`` and ``structlog._native`` import
    it for their async logger methods, which the daemon never calls (it has no event loop). They
    get a :class:`_OnFirstUse` stand-in that imports the real module at its first attribute
    access; the stand-in leaves ``sys.modules`` with rich's marker, so a later ``import asyncio``
    anywhere imports the real one.

    A no-op when structlog is imported already (or rich is): then there is nothing left to save.
    """
    if "structlog" in sys.modules or "rich" in sys.modules:
        return
    sys.modules["rich"] = None  # type: ignore[assignment]  # the import system's "not importable" marker
    stand_in = "asyncio" not in sys.modules
    if stand_in:
        sys.modules["asyncio"] = _OnFirstUse("asyncio")
    try:
        import structlog  # noqa: F401  # structlog.dev and .tracebacks now see no rich
    finally:
        sys.modules.pop("rich", None)
        if stand_in and isinstance(sys.modules.get("asyncio"), _OnFirstUse):
            del sys.modules["asyncio"]


class _OnFirstUse(types.ModuleType):
    """A module that is imported for real when one of its attributes is first read (in Python
    3.11 ``importlib.util.LazyLoader`` loads at the ``import`` statement itself, which reads the
    module's ``__spec__``; a plain module's ``__spec__`` is None and reads nothing)."""

    def __getattr__(self, attr: str) -> object:
        if sys.modules.get(self.__name__) is self:
            del sys.modules[self.__name__]  # read while structlog imports: the real one from now on
        return getattr(importlib.import_module(self.__name__), attr)


import_structlog()

import structlog  # noqa: E402  # after import_structlog(), which imports it first


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
