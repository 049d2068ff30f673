"""The command line: exit code 2 and a field path for bad configs, effective config printed."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "custom_scheduler", *args],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=60,
        check=False,
    )


@pytest.mark.parametrize(
    ("text", "path"),
    [
        pytest.param(
            "profiles:\n- schedulerName: x\n  plugins:\n    score:\n      enabled:\n      - {name: Nope}\n",
            "profiles[0].plugins.score.enabled[0].name",
            id="unknown plugin",
        ),
        pytest.param("clientConnection: {qps: fast}\n", "clientConnection.qps", id="wrong type"),
        pytest.param("percentageOfNodesToScore: 150\n", "percentageOfNodesToScore", id="out of range"),
        pytest.param("bogus: 1\n", "bogus", id="unknown field"),
        pytest.param("profiles: [\n", "", id="malformed yaml"),
    ],
)
def test_invalid_config_exits_2_naming_the_field(tmp_path: Path, text: str, path: str) -> None:
    cfg = tmp_path / "c.yaml"
    cfg.write_text("apiVersion: kubescheduler.config.k8s.io/v1\nkind: KubeSchedulerConfiguration\n" + text)
    for cmd in (("check-config", str(cfg)), ("run", "--config", str(cfg))):
        proc = _run(*cmd)
        assert proc.returncode == 2, proc.stderr
        assert "Traceback" not in proc.stderr
        assert path in proc.stderr


def test_missing_config_file_exits_2(tmp_path: Path) -> None:
    proc = _run("run", "--config", str(tmp_path / "absent.yaml"))
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr


def test_check_config_prints_effective_config_of_the_example() -> None:
    proc = _run("check-config", "config.example.yaml")
    assert proc.returncode == 0, proc.stderr
    assert "apiVersion: kubescheduler.config.k8s.io/v1" in proc.stdout
    assert "NodeResourcesFit" in proc.stdout
    # stderr: a warning per field without effect, then the one-line summary (issue #29 item 6).
    *warnings, summary = proc.stderr.splitlines()
    assert warnings, proc.stderr
    assert all(w.startswith("custom-scheduler: warning: ") for w in warnings), proc.stderr
    assert summary == (
        "custom-scheduler: config.example.yaml: valid: 2 profile(s) (custom-scheduler, custom-scheduler-binpack), "
        f"{len(warnings)} warning(s)"
    )


def test_version_names_this_release_and_the_upstream_one() -> None:
    proc = _run("--version")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("custom-scheduler "), proc.stdout
    assert proc.stdout.rstrip().endswith("(kube-scheduler 1.37.2 semantics)"), proc.stdout


def test_help_is_the_description_and_the_commands_not_the_module_docstring() -> None:
    proc = _run("--help")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("usage: custom-scheduler [-h] [--version] COMMAND ...\n"), proc.stdout
    for command in ("run", "check-config", "explain", "simulate", "ui", "why", "shadow-report"):
        assert f"\n    {command}" in proc.stdout, command
    assert "Exit codes: 0 success, 1 runtime failure, 2 invalid usage or configuration." in proc.stdout
    # No reST from a module docstring.
    assert "``" not in proc.stdout
    assert ":func:" not in proc.stdout


@pytest.mark.parametrize(
    ("flag", "config_text", "expected"),
    [
        pytest.param(None, "clientConnection: {kubeconfig: KC}\n", "KC", id="from-the-config-file"),
        pytest.param("KC", "clientConnection: {kubeconfig: /elsewhere}\n", "KC", id="the-flag-wins"),
        pytest.param(None, "profiles: []\n", None, id="in-cluster-here-fails"),
        pytest.param(None, ": not yaml [", None, id="unreadable-config"),
        pytest.param(None, "clientConnection: {kubeconfig: EXEC}\n", None, id="exec-plugin-not-run-early"),
    ],
)
def test_the_early_lists_use_the_kubeconfig_the_daemon_will_use(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, flag: str | None, config_text: str, expected: str | None
) -> None:
    """The prefetch reads the kubeconfig as the daemon will (the flag, else the file's
    clientConnection.kubeconfig, else in-cluster or ~/.kube/config), and gives up quietly where it
    cannot: the start that follows reports the problem."""
    import argparse

    from custom_scheduler import cli

    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(
        "{clusters: [{name: c, cluster: {server: 'http://127.0.0.1:9'}}], users: [{name: u, user: {}}],"
        " contexts: [{name: x, context: {cluster: c, user: u}}], current-context: x}"
    )
    exec_kubeconfig = tmp_path / "exec-kubeconfig"
    ran = tmp_path / "ran"
    exec_kubeconfig.write_text(
        "{clusters: [{name: c, cluster: {server: 'http://127.0.0.1:9'}}],"
        " users: [{name: u, user: {exec: {apiVersion: client.authentication.k8s.io/v1,"
        f" command: touch, args: [{ran}]}}}}}}],"
        " contexts: [{name: x, context: {cluster: c, user: u}}], current-context: x}"
    )
    config_file = tmp_path / "config.yaml"
    config_file.write_text(config_text.replace("KC", str(kubeconfig)).replace("EXEC", str(exec_kubeconfig)))
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "absent"))
    args = argparse.Namespace(kubeconfig=flag and flag.replace("KC", str(kubeconfig)), config=str(config_file))
    got = cli._prefetch(args)
    assert not ran.exists(), "the exec plugin ran before the daemon's own start"
    if expected is None:
        assert got is None
    else:
        assert got is not None
        assert got[1] == expected.replace("KC", str(kubeconfig))
        got[0].discard()
