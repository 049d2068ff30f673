"""Safe config reload: watch the config file, apply a valid change, refuse an invalid one.

A ConfigMap mounted as a volume is updated by the kubelet swapping a symlink, so we poll the
*content* (a hash) rather than relying on inotify events or mtimes. A new config is fully
validated first; if valid it is applied between scheduling cycles (queued pods are kept), if
invalid the running config stays, every error is logged with its field path and the failure is
counted (``custom_scheduler_config_reload_failures_total``).
"""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Callable
from pathlib import Path

import structlog

from custom_scheduler import config as cfgmod
from custom_scheduler.config.schema import SchedulerConfig
from custom_scheduler.errors import ConfigError
from custom_scheduler.framework.registry import Registry

log = structlog.get_logger("custom_scheduler.server.reload")


def _digest(path: Path) -> str | None:
    try:
        return hashlib.sha256(path.read_bytes()).hexdigest()
    except OSError:
        return None


class ConfigWatcher:
    def __init__(
        self,
        path: str | Path,
        registry: Registry,
        apply: Callable[[SchedulerConfig], None],
        *,
        interval: float = 2.0,
        on_failure: Callable[[ConfigError], None] | None = None,
        adjust: Callable[[SchedulerConfig], SchedulerConfig] | None = None,
    ) -> None:
        self.path = Path(path)
        # What the command line overrides (``--kubeconfig``), applied to every reloaded file as
        # it was at start-up, so a reload never reads the file's own value as a change.
        self.adjust = adjust or (lambda c: c)
        self.registry = registry
        self.apply = apply
        self.interval = interval
        self.on_failure = on_failure or (lambda e: None)
        self._last = _digest(self.path)
        self.applied = 0
        self.failed = 0

    def check(self) -> bool | None:
        """Look once: None if unchanged, True if a new config was applied, False if refused."""
        digest = _digest(self.path)
        if digest is None or digest == self._last:
            return None
        self._last = digest
        try:
            new = self.adjust(cfgmod.load_config_file(self.path, self.registry))
        except ConfigError as e:
            self.failed += 1
            log.error("config_reload_rejected", file=str(self.path), errors=[str(x) for x in e.errors])
            self.on_failure(e)
            return False
        try:
            self.apply(new)
        except Exception as e:
            self.failed += 1
            log.error("config_reload_failed", file=str(self.path), error=f"{type(e).__name__}: {e}")
            self.on_failure(ConfigError(str(e)))
            return False
        self.applied += 1
        log.info("config_reloaded", file=str(self.path))
        return True

    def run(self, stop: threading.Event) -> None:
        while not stop.wait(self.interval):
            self.check()
