"""The playground's pure parts and its process bookkeeping, without a cluster (the cluster itself is
``tests/integration/test_playground.py``): the nodes it registers, the config it gives the daemon,
how a recorded PID is told from a reused one, and the SIGTERM handling that ``demo --keep`` lacked."""

from __future__ import annotations

import io
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from custom_scheduler import config
from custom_scheduler.devenv import playground
from custom_scheduler.devenv.controlplane import ControlPlaneError, signals_as_exit
from custom_scheduler.plugins.builtin import full_registry

KUBELET_LABELS = ("kubernetes.io/hostname", "kubernetes.io/os", "kubernetes.io/arch", "topology.kubernetes.io/zone")


@pytest.mark.parametrize("node", playground.playground_nodes(), ids=lambda n: n["metadata"]["name"])
def test_each_node_carries_a_kubelets_labels_and_only_gpu_nodes_carry_gpus_and_their_taint(
    node: dict[str, Any],
) -> None:
    name = node["metadata"]["name"]
    labels = node["metadata"]["labels"]
    assert all(labels.get(k) for k in KUBELET_LABELS), labels
    assert labels["kubernetes.io/hostname"] == name
    gpu = name.startswith("gpu-")
    assert ("nvidia.com/gpu" in node["status"]["allocatable"]) is gpu
    assert (node["spec"]["taints"] == [playground.GPU_TAINT]) is gpu
    assert node["status"]["capacity"] == node["status"]["allocatable"]


def test_the_nodes_span_three_zones() -> None:
    zones = {n["metadata"]["labels"]["topology.kubernetes.io/zone"] for n in playground.playground_nodes()}
    assert zones == {"zone-a", "zone-b", "zone-c"}


def test_scheduler_config_is_the_example_with_only_the_health_port_moved() -> None:
    example = playground.EXAMPLE_CONFIG.read_text()
    got = yaml.safe_load(playground.scheduler_config(example, 12345))
    want = yaml.safe_load(example)
    assert got.pop("healthzBindAddress") == "127.0.0.1:12345"
    want.pop("healthzBindAddress")
    assert got == want
    config.load_config(playground.scheduler_config(example, 12345), full_registry())  # still valid


@pytest.mark.parametrize("text", ["- a list\n", "just text\n"])
def test_scheduler_config_refuses_an_example_that_is_not_a_mapping(text: str) -> None:
    with pytest.raises(ControlPlaneError, match="not a YAML mapping"):
        playground.scheduler_config(text, 1)


def test_a_recorded_pid_is_alive_only_while_the_same_process_runs() -> None:
    me = playground.Recorded.of("me", os.getpid())
    assert me is not None
    assert me.alive()
    # Same PID, another start time: a reused PID, never taken for ours.
    assert not playground.Recorded("me", os.getpid(), str(int(me.started) + 1)).alive()

    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    rec = playground.Recorded.of("sleeper", child.pid)
    assert rec is not None
    assert rec.alive()
    assert (rec.pid, rec.started) in {(c.pid, c.started) for c in playground.children_of(os.getpid())}
    child.kill()
    child.wait()
    assert not rec.alive()
    assert playground.Recorded.of("sleeper", child.pid) is None


def test_records_round_trip_and_a_damaged_file_reads_as_none(tmp_path: Path) -> None:
    recs = [playground.Recorded("supervisor", 10, "5"), playground.Recorded("etcd", 11, "6")]
    playground.write_json(tmp_path / "supervisor.json", [recs[0].to_json()])
    playground.write_json(tmp_path / "pids.json", [recs[1].to_json()])
    assert playground.read_records(tmp_path) == recs
    (tmp_path / "pids.json").write_text("{not json")
    assert playground.read_records(tmp_path) == recs[:1]


def test_down_without_a_playground_says_so(tmp_path: Path) -> None:
    out = io.StringIO()
    assert playground.down(tmp_path / "nothing", out=out) == 0
    assert out.getvalue().startswith("no playground")


def test_sigterm_inside_signals_as_exit_unwinds_through_finally_and_the_handler_is_restored() -> None:
    before = signal.getsignal(signal.SIGTERM)
    unwound = []

    def owner() -> None:
        with signals_as_exit():
            try:
                os.kill(os.getpid(), signal.SIGTERM)  # Python runs the handler right after the call
            finally:
                unwound.append(True)  # where the demo stops its control plane

    with pytest.raises(SystemExit) as exited:
        owner()
    assert exited.value.code == 128 + signal.SIGTERM
    assert unwound == [True]
    assert signal.getsignal(signal.SIGTERM) == before


@pytest.mark.parametrize(
    ("files", "usable"),
    [
        (None, True),  # absent: up creates it
        ([], True),  # empty
        (["supervisor.json"], True),
        (["playground.log", "kubeconfig"], True),
        (["notes.txt"], False),  # somebody's directory: never removed
    ],
)
def test_only_a_playgrounds_own_directory_is_used_and_removed(
    tmp_path: Path, files: list[str] | None, usable: bool
) -> None:
    state = tmp_path / "state"
    if files is not None:
        state.mkdir()
        for name in files:
            (state / name).write_text("")
    assert playground.is_state_dir(state) is usable
    if not usable:
        assert playground.down(state, out=io.StringIO()) == 1
        assert (state / "notes.txt").exists()


@pytest.mark.parametrize(
    ("argv", "name"),
    [
        (["/cache/k8s-1.37.2/bin/kube-controller-manager", "--v=0"], "kube-controller-manager"),
        (["/repo/.venv/bin/python", "-m", "custom_scheduler", "run"], "custom_scheduler"),
        (["python3.11", "script.py"], "python3.11"),
        (["python3", "-m"], "python3"),
        ([], "?"),
    ],
)
def test_a_process_is_named_by_its_program_or_its_python_module(argv: list[str], name: str) -> None:
    assert playground.command_name(argv) == name
