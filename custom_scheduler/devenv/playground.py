"""A local playground: a control plane, kwok nodes and our scheduler, left running to try things on.

``hack/dev.sh up`` (``python -m custom_scheduler.devenv.playground up``) starts, in the background:

- the tests' control plane (:mod:`~custom_scheduler.devenv.controlplane`: etcd, kube-apiserver,
  kube-controller-manager on loopback);
- kwok (:mod:`~custom_scheduler.devenv.kwok`) as the kubelet of :func:`playground_nodes`: Nodes
  that heartbeat and report Ready, labelled as a kubelet labels them (hostname, os, arch) plus a
  topology zone, two of them GPU nodes shaped like the demo's (4 ``nvidia.com/gpu``, tainted so only
  pods that tolerate it go there); the pods bound there go Running;
- ``custom-scheduler run`` with ``config.example.yaml`` (its health port moved to a free loopback
  port, so two checkouts never collide).

Then it prints the KUBECONFIG and a few commands to try. ``hack/dev.sh down`` stops it.

Why a supervisor process: the control plane, kwok and the daemon are stopped by the ``finally``
blocks of the code that started them, in order; SIGTERM or SIGINT to the supervisor unwinds them
(:func:`~custom_scheduler.devenv.controlplane.signals_as_exit`). ``down`` signals the supervisor,
then checks every PID it recorded (each with its start time, so a reused PID is never signalled)
and stops any survivor, by PID, never by name; then it removes the state directory.

State (``--state``, default ``$CS_PLAYGROUND_DIR`` or ``~/.cache/custom-scheduler/playground``):
``supervisor.json`` (written by ``up``), ``pids.json`` and ``info.json`` (written by the supervisor
once everything runs), ``kubeconfig``, ``scheduler-config.yaml`` and the logs.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import shutil
import signal
import ssl
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

import yaml

from custom_scheduler.devenv import kwok
from custom_scheduler.devenv.cluster import wait_for
from custom_scheduler.devenv.controlplane import (
    REPO_ROOT,
    ControlPlane,
    ControlPlaneError,
    find_binaries,
    free_port,
    signals_as_exit,
)
from custom_scheduler.kube.client import KubeClient

GPU_TAINT = {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}
EXAMPLE_CONFIG = REPO_ROOT / "config.example.yaml"
SAMPLE_POD = REPO_ROOT / "manifests" / "sample-pod.yaml"

#: (name, zone, cpu, memory, GPUs): three general nodes, one per zone, and two GPU nodes.
NODE_SHAPES: tuple[tuple[str, str, str, str, int], ...] = (
    ("node-a", "zone-a", "4", "8Gi", 0),
    ("node-b", "zone-b", "4", "8Gi", 0),
    ("node-c", "zone-c", "4", "8Gi", 0),
    ("gpu-1", "zone-a", "8", "32Gi", 4),
    ("gpu-2", "zone-b", "8", "32Gi", 4),
)


def default_state_dir() -> Path:
    env = os.environ.get("CS_PLAYGROUND_DIR")
    if env:
        return Path(env)
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return cache / "custom-scheduler" / "playground"


# -- what the playground holds (pure) ----------------------------------------------------------------
def playground_nodes() -> list[dict[str, Any]]:
    """The Nodes, as a kubelet would register them (its well-known labels), for kwok to run."""
    nodes = []
    for name, zone, cpu, memory, gpus in NODE_SHAPES:
        labels = {
            "kubernetes.io/hostname": name,
            "kubernetes.io/os": "linux",
            "kubernetes.io/arch": "amd64",
            "topology.kubernetes.io/zone": zone,
        }
        capacity = {"cpu": cpu, "memory": memory, "pods": "110"}
        taints: list[dict[str, str]] = []
        if gpus:
            labels["nvidia.com/gpu.product"] = "A100"
            capacity["nvidia.com/gpu"] = str(gpus)
            taints.append(dict(GPU_TAINT))
        nodes.append(
            {
                "apiVersion": "v1",
                "kind": "Node",
                "metadata": {"name": name, "labels": labels},
                "spec": {"taints": taints},
                "status": {"capacity": dict(capacity), "allocatable": dict(capacity)},
            }
        )
    return nodes


def scheduler_config(example: str, health_port: int) -> str:
    """``config.example.yaml`` with its health port on loopback at ``health_port`` (the example's
    0.0.0.0:10259 is kube-scheduler's, which a second playground or a real scheduler may hold)."""
    doc = yaml.safe_load(example)
    if not isinstance(doc, dict):
        raise ControlPlaneError(f"{EXAMPLE_CONFIG} is not a YAML mapping")
    doc["healthzBindAddress"] = f"127.0.0.1:{health_port}"
    return yaml.safe_dump(doc, sort_keys=False)


def try_commands(state: Path, info: dict[str, Any]) -> str:
    """What ``up`` prints: where things are and a few commands to try."""
    kubectl = info.get("kubectl") or "kubectl"
    cli = info.get("cli") or "custom-scheduler"
    state_flag = "" if state == default_state_dir().resolve() else f" --state {state}"
    return "\n".join(
        [
            f"playground up: Kubernetes {info['version']} at {info['host']}, "
            f"{len(info['nodes'])} kwok nodes ({', '.join(info['nodes'])}), "
            f"custom-scheduler pid {info['scheduler_pid']}",
            f"state and logs: {state}",
            "",
            f"export KUBECONFIG={state / 'kubeconfig'}",
            f"alias kubectl={kubectl}" if kubectl != "kubectl" else "",
            "kubectl get nodes -L topology.kubernetes.io/zone,nvidia.com/gpu.product",
            f"kubectl apply -f {SAMPLE_POD}",
            "kubectl get pod custom-scheduler-sample -o wide      # NODE chosen by custom-scheduler",
            f"{cli} explain default/custom-scheduler-sample --config {state / 'scheduler-config.yaml'}",
            f"{cli} why default/custom-scheduler-sample            # the decision record",
            f"tail -f {state / 'scheduler.log'}",
            f"hack/dev.sh down{state_flag}",
        ]
    )


# -- recorded processes ------------------------------------------------------------------------------
def start_time(pid: int) -> str | None:
    """The process's start time (``/proc/PID/stat`` field 22), or None when it is gone or a zombie.

    A PID is recorded with it, so a PID reused by an unrelated process is never taken for ours.
    """
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat[stat.rindex(")") + 2 :].split()
    if fields[0] in ("Z", "X"):  # exited, not yet reaped: nothing left to stop
        return None
    return fields[19]


@dataclass(frozen=True)
class Recorded:
    """A process the playground started: its name, PID and start time."""

    name: str
    pid: int
    started: str

    @classmethod
    def of(cls, name: str, pid: int) -> Recorded | None:
        started = start_time(pid)
        return None if started is None else cls(name, pid, started)

    def alive(self) -> bool:
        return start_time(self.pid) == self.started

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "pid": self.pid, "started": self.started}

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> Recorded:
        return cls(str(d["name"]), int(d["pid"]), str(d["started"]))


def command_name(argv: list[str]) -> str:
    """What to call a process: its program (``kube-controller-manager``, which ``comm`` cuts to 15
    characters), or for ``python -m MODULE`` the module."""
    if not argv:
        return "?"
    name = Path(argv[0]).name
    if name.startswith("python") and "-m" in argv[:-1]:
        return argv[argv.index("-m") + 1]
    return name


def children_of(pid: int) -> list[Recorded]:
    """The live children of ``pid`` (from /proc), named by :func:`command_name`."""
    out = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            text = stat.read_text()
            argv = Path(stat.parent, "cmdline").read_bytes().decode(errors="replace").split("\0")
        except OSError:
            continue  # exited while we looked
        if int(text[text.rindex(")") + 2 :].split()[1]) != pid:
            continue
        if rec := Recorded.of(command_name([a for a in argv if a]), int(stat.parent.name)):
            out.append(rec)
    return out


def write_json(path: Path, doc: Any) -> None:
    """Write atomically, so a reader never sees half a file."""
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(doc, indent=2))
    tmp.replace(path)


def read_records(state: Path) -> list[Recorded]:
    """Every PID recorded in ``state``: the supervisor's, then the ones it started."""
    records = []
    for name in ("supervisor.json", "pids.json"):
        path = state / name
        with contextlib.suppress(OSError, ValueError, KeyError, TypeError):
            records += [Recorded.from_json(d) for d in json.loads(path.read_text())]
    return records


def stop_process(proc: subprocess.Popen[bytes], timeout: float = 15.0) -> None:
    """SIGTERM, then SIGKILL after ``timeout``; by the Popen's PID."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=5)


# -- the supervisor ----------------------------------------------------------------------------------
def readyz_ok(port: int) -> bool:
    """Whether the daemon on 127.0.0.1:``port`` answers /readyz 200 (its caches synced)."""
    ctx = ssl.create_default_context()
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE  # the daemon's self-signed serving certificate
    try:
        with urllib.request.urlopen(f"https://127.0.0.1:{port}/readyz", timeout=2, context=ctx) as r:
            return bool(r.status == 200)
    except (OSError, urllib.error.URLError, ssl.SSLError):
        return False


@contextlib.contextmanager
def running_scheduler(state: Path, kubeconfig: Path, timeout: float = 60.0) -> Iterator[subprocess.Popen[bytes]]:
    """``custom-scheduler run`` with the example config, until its /readyz says the caches synced."""
    port = free_port()
    config = state / "scheduler-config.yaml"
    config.write_text(scheduler_config(EXAMPLE_CONFIG.read_text(), port))
    argv = [sys.executable, "-m", "custom_scheduler", "run", f"--config={config}", f"--kubeconfig={kubeconfig}"]
    log_path = state / "scheduler.log"
    with log_path.open("ab") as log:
        proc = subprocess.Popen(
            argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True
        )
    try:

        def ready() -> bool:
            if proc.poll() is not None:
                tail = "\n".join(log_path.read_text(errors="replace").splitlines()[-30:])
                raise ControlPlaneError(f"custom-scheduler exited with {proc.returncode}:\n{tail}")
            return readyz_ok(port)

        wait_for(ready, timeout=timeout, interval=0.2, what="custom-scheduler /readyz")
        yield proc
    finally:
        stop_process(proc)


def serve(state: Path, out: TextIO = sys.stdout) -> int:
    """Run the playground in the foreground until SIGTERM, SIGHUP or SIGINT; stop everything then
    (the signal leaves as :class:`SystemExit`, 128 + its number). SIGINT is handled explicitly, not
    left to Python's KeyboardInterrupt, which a shell's background job never gets (it starts with
    SIGINT ignored)."""
    with signals_as_exit((signal.SIGTERM, signal.SIGHUP, signal.SIGINT)):
        _serve(state, out)
    return 0


def _serve(state: Path, out: TextIO) -> None:
    cp = ControlPlane(find_binaries(), workdir=state / "controlplane")
    cp.start()
    try:
        kube = KubeClient.from_kubeconfig(str(cp.kubeconfig()), qps=0, burst=1)
        fake_kubelet = kwok.Kwok.for_control_plane(cp, workdir=state / "kwok").start()
        try:
            for node in playground_nodes():
                kwok.create_node(kube, node)
            shutil.copy(cp.kubeconfig(), state / "kubeconfig")
            with running_scheduler(state, state / "kubeconfig") as scheduler:
                write_json(state / "pids.json", [r.to_json() for r in children_of(os.getpid())])
                info = {
                    "version": cp.version,
                    "host": cp.host,
                    "nodes": [n["metadata"]["name"] for n in playground_nodes()],
                    "scheduler_pid": scheduler.pid,
                    "kubectl": str(cp.bin_dir / "kubectl") if (cp.bin_dir / "kubectl").exists() else "",
                    "cli": str(cli) if (cli := Path(sys.executable).with_name("custom-scheduler")).exists() else "",
                }
                write_json(state / "info.json", info)
                print(try_commands(state, info), file=out, flush=True)
                while scheduler.poll() is None:
                    time.sleep(1)
                print(f"custom-scheduler exited with {scheduler.returncode}; stopping", file=out, flush=True)
        finally:
            fake_kubelet.stop()
    finally:
        cp.stop()


# -- up / down -----------------------------------------------------------------------------------------
STATE_MARKERS = ("supervisor.json", "pids.json", "playground.log")


def is_state_dir(state: Path) -> bool:
    """Whether ``state`` may be used and removed as a playground's state: absent, empty, or holding
    what a playground writes. Anything else (a mistyped ``--state ~``) is never deleted."""
    if not state.exists():
        return True
    return state.is_dir() and (any((state / m).exists() for m in STATE_MARKERS) or not any(state.iterdir()))


def supervisor_alive(state: Path) -> Recorded | None:
    for rec in read_records(state):
        if rec.name == "supervisor" and rec.alive():
            return rec
    return None


def up(state: Path, out: TextIO = sys.stdout, timeout: float = 240.0) -> int:
    """Start the supervisor in the background; return once everything runs (or say why not)."""
    running = supervisor_alive(state)
    if running and (state / "info.json").exists():
        info = json.loads((state / "info.json").read_text())
        print(f"already up (supervisor pid {running.pid}; 'down' first to restart)\n", file=out)
        print(try_commands(state, info), file=out)
        return 0
    if running:
        print(f"already starting (supervisor pid {running.pid}, log {state / 'playground.log'})", file=out)
        return 1
    if not is_state_dir(state):
        print(f"{state} exists and is not a playground's state directory: choose another --state", file=out)
        return 1
    if state.exists():
        down(state, out=io.StringIO())  # what a crashed run left: its survivors stopped, its files gone
    state.mkdir(parents=True)
    log_path = state / "playground.log"
    argv = [sys.executable, "-m", "custom_scheduler.devenv.playground", "serve", f"--state={state}"]
    with log_path.open("ab") as log:
        proc = subprocess.Popen(
            argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True, cwd=REPO_ROOT
        )
    rec = Recorded.of("supervisor", proc.pid)
    write_json(state / "supervisor.json", [rec.to_json()] if rec else [])
    print(f"starting the playground (supervisor pid {proc.pid}, log {log_path})...", file=out, flush=True)
    deadline = time.monotonic() + timeout
    while not (state / "info.json").exists():
        if proc.poll() is not None or time.monotonic() > deadline:
            tail = "\n".join(log_path.read_text(errors="replace").splitlines()[-40:])
            down(state, out=out)
            print(f"the playground did not start:\n{tail}", file=out)
            return 1
        time.sleep(0.2)
    print(try_commands(state, json.loads((state / "info.json").read_text())), file=out)
    return 0


def down(state: Path, out: TextIO = sys.stdout, timeout: float = 60.0) -> int:
    """Stop the supervisor (it stops what it started), then any recorded PID still alive; remove
    the state directory."""
    records = read_records(state)
    if not state.exists():
        print(f"no playground in {state}", file=out)
        return 0
    if not is_state_dir(state):
        print(f"{state} is not a playground's state directory: left alone", file=out)
        return 1
    for rec in records:  # the supervisor first: its finally blocks stop the rest in order
        if rec.name == "supervisor" and rec.alive():
            os.kill(rec.pid, signal.SIGTERM)
    with contextlib.suppress(TimeoutError):
        wait_for(lambda: not any(r.alive() for r in records), timeout=timeout, interval=0.2, what="the playground")
    survivors = [r for r in records if r.alive()]
    for rec in survivors:
        os.kill(rec.pid, signal.SIGKILL)
    with contextlib.suppress(TimeoutError):
        wait_for(lambda: not any(r.alive() for r in survivors), timeout=10, interval=0.1, what="killed processes")
    shutil.rmtree(state, ignore_errors=True)
    killed = f", {len(survivors)} killed after {timeout:.0f}s" if survivors else ""
    print(f"playground down: {len(records)} processes stopped{killed}; {state} removed", file=out)
    return 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="playground", description=__doc__.split("\n\n")[0] if __doc__ else "")
    p.add_argument("command", choices=("up", "down", "status", "serve"))
    p.add_argument("--state", type=Path, default=default_state_dir(), help="state directory (PIDs, logs, kubeconfig)")
    p.add_argument("--foreground", action="store_true", help="up: run in this terminal until Ctrl-C")
    args = p.parse_args(argv)
    state: Path = args.state.resolve()
    if args.command == "down":
        return down(state)
    if args.command == "status":
        rec = supervisor_alive(state)
        print(f"up (supervisor pid {rec.pid}), state {state}" if rec else f"not up ({state})")
        return 0 if rec else 1
    if args.command == "serve" or args.foreground:
        return _serve_in_foreground(state) if args.foreground else serve(state)
    return up(state)


def _serve_in_foreground(state: Path) -> int:
    """``up --foreground``: the supervisor is this process (recorded, so ``down`` and ``status``
    from another terminal work), and its state goes when it stops."""
    if supervisor_alive(state):
        print(f"already up (state {state}): 'down' first")
        return 1
    if not is_state_dir(state):
        print(f"{state} exists and is not a playground's state directory: choose another --state")
        return 1
    if state.exists():
        down(state, out=io.StringIO())
    state.mkdir(parents=True)
    rec = Recorded.of("supervisor", os.getpid())
    write_json(state / "supervisor.json", [rec.to_json()] if rec else [])
    try:
        return serve(state)
    finally:
        shutil.rmtree(state, ignore_errors=True)


if __name__ == "__main__":
    raise SystemExit(main())
