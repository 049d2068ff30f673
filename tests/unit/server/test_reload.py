"""Config reload: what needs a restart is named field by field, and the command line's
overrides (``--kubeconfig``) are re-applied to the reloaded file, so the first reload of an
unchanged file reports nothing (it used to report a change from the flag to the file's value)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
from structlog.testing import capture_logs

from custom_scheduler.config import SchedulerConfig, load_config
from custom_scheduler.plugins.builtin import full_registry
from custom_scheduler.server.app import restart_only_changes
from custom_scheduler.server.reload import ConfigWatcher

HEADER = "apiVersion: kubescheduler.config.k8s.io/v1\nkind: KubeSchedulerConfiguration\n"


def cfg(extra: str = "") -> SchedulerConfig:
    return load_config(HEADER + extra, full_registry())


@pytest.mark.parametrize(
    ("extra", "want"),
    [
        pytest.param("", [], id="nothing"),
        pytest.param("percentageOfNodesToScore: 30\n", [], id="reloadable-field"),
        pytest.param("clientConnection: {qps: 10}\n", ["clientConnection.qps"], id="qps"),
        pytest.param(
            "leaderElection: {leaseDuration: 30s, resourceNamespace: other}\n",
            ["leaderElection.leaseDuration", "leaderElection.resourceNamespace"],
            id="two-lease-fields",
        ),
        pytest.param("healthzBindAddress: 0.0.0.0:9999\n", ["healthzBindAddress"], id="health-address"),
    ],
)
def test_restart_only_changes_are_named(extra: str, want: list[str]) -> None:
    assert restart_only_changes(cfg(), cfg(extra)) == want


def test_reload_reapplies_the_command_line_override(tmp_path: Path) -> None:
    path = tmp_path / "config.yaml"
    path.write_text(HEADER + "clientConnection: {kubeconfig: /file/kubeconfig}\n", encoding="utf-8")

    def adjust(c: SchedulerConfig) -> SchedulerConfig:
        conn = dataclasses.replace(c.client_connection, kubeconfig="/flag/kubeconfig")
        return dataclasses.replace(c, client_connection=conn)

    running = adjust(cfg("clientConnection: {kubeconfig: /file/kubeconfig}\n"))
    applied: list[SchedulerConfig] = []
    watcher = ConfigWatcher(path, full_registry(), applied.append, adjust=adjust)
    path.write_text(HEADER + "clientConnection: {kubeconfig: /file/kubeconfig}\npercentageOfNodesToScore: 40\n")
    with capture_logs():
        assert watcher.check() is True
    [new] = applied
    assert new.client_connection.kubeconfig == "/flag/kubeconfig"
    assert new.percentage_of_nodes_to_score == 40
    assert restart_only_changes(running, new) == []
