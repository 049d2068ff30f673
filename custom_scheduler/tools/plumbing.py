"""What every tool command shares: exit codes, the error that carries one, logs kept off stdout,
the scheduler configuration, and atomic file writes.

``explain``, ``simulate`` and ``snapshot`` print their report on stdout and one message on stderr
when they fail, never a traceback; these pieces make that the same for all three.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

T = TypeVar("T")

EXIT_OK = 0
EXIT_RUNTIME = 1
EXIT_USAGE = 2

#: The minimal configuration: the default profile (what the daemon runs without pluginConfig).
DEFAULT_CONFIG_TEXT = "apiVersion: kubescheduler.config.k8s.io/v1\nkind: KubeSchedulerConfiguration\n"


class ToolError(Exception):
    """Bad input (a file, a flag, a name): the CLI prints the message and exits with ``code``."""

    def __init__(self, message: str, code: int = EXIT_USAGE) -> None:
        super().__init__(message)
        self.code = code


def write_text(path: str, text: str) -> None:
    """``text`` to ``path`` (``-``: stdout) through a temporary file renamed into place, so a failed
    write never leaves half a file where a good one was."""
    if path == "-":
        sys.stdout.write(text)
        return
    try:
        parent = os.path.dirname(os.path.abspath(path))
        os.makedirs(parent, exist_ok=True)
        tmp = f"{path}.tmp"
        with open(tmp, "w", encoding="utf-8") as f:
            f.write(text)
        os.replace(tmp, path)
    except OSError as e:
        raise ToolError(f"cannot write {path}: {e}") from None


def run_command(command: str, work: Callable[[], T]) -> T | ToolError:
    """``work()`` under :func:`quiet_logs`, or the failure that stopped it, already said on stderr
    as ``custom-scheduler COMMAND: ...``: a :class:`ToolError` as raised, an API failure as one
    with :data:`EXIT_RUNTIME`. Each command returns the failure's ``code``, so all of them fail
    the same way: one message, no traceback."""
    from custom_scheduler.kube import api_errors as kerrors

    try:
        with quiet_logs():
            return work()
    except ToolError as e:
        failure = e
    except kerrors.KubeError as e:
        failure = ToolError(f"reading the cluster failed: {e}", EXIT_RUNTIME)
    print(f"custom-scheduler {command}: {failure}", file=sys.stderr)
    return failure


# -- process set-up ----------------------------------------------------------------------------------


@contextlib.contextmanager
def quiet_logs() -> Iterator[None]:
    """While a tool runs, plugins' log lines (e.g. preemption's plans) go to stderr at WARNING
    (``LOG_LEVEL`` overrides), so stdout carries only the report; the previous set-up is restored."""
    import structlog

    was_configured = structlog.is_configured()
    saved = structlog.get_config()
    level = logging.getLevelNamesMapping().get((os.environ.get("LOG_LEVEL") or "warning").upper(), logging.WARNING)
    structlog.configure(
        processors=[structlog.processors.add_log_level, structlog.dev.ConsoleRenderer(colors=False)],
        wrapper_class=structlog.make_filtering_bound_logger(level),
        logger_factory=structlog.PrintLoggerFactory(sys.stderr),
        cache_logger_on_first_use=False,
    )
    try:
        yield
    finally:
        if was_configured:
            structlog.configure(**saved)
        else:
            structlog.reset_defaults()


# -- configuration ----------------------------------------------------------------------------------


def load_scheduler_config(path: str | None, registry: Any) -> Any:
    """The SchedulerConfig of ``path``, or the default profile's when None; ToolError listing every
    field error otherwise."""
    from custom_scheduler import config
    from custom_scheduler.errors import ConfigError

    try:
        if path is None:
            return config.load_config(DEFAULT_CONFIG_TEXT, registry)
        if not os.path.exists(path):
            raise ToolError(f"config {path}: no such file")
        return config.load_config_file(path, registry)
    except ConfigError as e:
        lines = "\n".join(f"  {err}" for err in e.errors)
        raise ToolError(f"invalid configuration {path}:\n{lines}") from None


def deployed_scheduler_config(client: Any, ref: str, registry: Any) -> Any | None:
    """The configuration the daemon runs, from its ConfigMap ``ref`` (``namespace/name``; the first
    key ending in ``.yaml``), or None when the ConfigMap is not there (or not readable). The daemon
    re-reads the mounted file when it changes, so this is what it runs, up to the kubelet's mount
    delay. ToolError when the ConfigMap holds no config or an invalid one."""
    from custom_scheduler import config
    from custom_scheduler.errors import ConfigError
    from custom_scheduler.kube import api_errors

    ns, _, name = ref.partition("/")
    try:
        cm = client.get(f"/api/v1/namespaces/{ns}/configmaps/{name}")
    except api_errors.NotFound:
        return None
    except api_errors.ApiError as e:
        if e.status == 403:
            return None
        raise
    texts = [v for k, v in sorted((cm.get("data") or {}).items()) if k.endswith((".yaml", ".yml"))]
    if not texts:
        raise ToolError(f"ConfigMap {ref} holds no .yaml key")
    try:
        return config.load_config(texts[0], registry)
    except ConfigError as e:
        lines = "\n".join(f"  {err}" for err in e.errors)
        raise ToolError(f"invalid configuration in ConfigMap {ref}:\n{lines}") from None
