"""Kubernetes' own end-to-end specs (``e2e.test``, the ``[sig-scheduling]`` ones) against our
scheduler and against kube-scheduler, each as the default scheduler of a kwok cluster.

Why: our conformance tests are ours; upstream's e2e suite is what kube-scheduler itself must pass,
written by others, so it finds what ours did not think to check. kube-scheduler of the same release
runs the same specs on the same kind of cluster as the reference: a spec it passes, we must pass.

What one run sets up (:func:`run_suite`), and why:
- the control plane of :mod:`~custom_scheduler.devenv.controlplane` with what the e2e framework
  checks in every namespace it makes (``service_accounts=True`` and the controllers in
  :data:`E2E_CONTROLLERS`: the ``default`` ServiceAccount, the ``kube-root-ca.crt`` ConfigMap),
  plus the controllers the specs' objects need (ReplicationControllers, pod GC);
- kwok (:mod:`~custom_scheduler.devenv.kwok`) as the kubelet of :data:`NODE_COUNT` Nodes in two
  zones (the Multi-AZ specs need two), each with cpu, memory, pods and ephemeral-storage in
  allocatable (the specs read them; the extended resources they need they patch in themselves) and
  its own InternalIP (the hostPort specs tell nodes' addresses from 127.0.0.1); a loop copies the
  extended resources a spec patches into a node's capacity into its allocatable, as a kubelet's next
  status update would (:func:`sync_allocatable`); graceful deletions are finished not by kwok's
  pod-delete stage (it deletes by name, so a late delete can remove a new pod of the same name) but
  by :class:`~custom_scheduler.devenv.pod_finisher.PodFinisher`, with the pod's UID as a
  precondition, and a pod with a preStop hook stays Terminating for its grace period;
- stand-in system pods on every node (:data:`STAND_IN_PODS`): the framework's node health check
  (``e2enode.WaitForTotalHealthy``) waits a minute per spec unless every untainted node runs pods
  whose names match kube-proxy, fluentd-elasticsearch and node-problem-detector;
- the scheduler under test as ``default-scheduler`` (ours through ``custom-scheduler run``, leader
  election off; or kube-scheduler with the API server's feature gates, which is what puts
  GangScheduling in its default profile), then ``e2e.test --provider=skeleton`` with a JUnit report.

What is skipped (:data:`SKIPS`) is what kwok cannot do, with the reason beside each pattern; none
of 1.37.2's 35 [sig-scheduling] specs needs it (none execs into a container or sends traffic).
Everything started is stopped by PID, also on SIGTERM/SIGINT (``main`` turns SIGTERM into
``SystemExit``, so the same ``finally`` blocks run).
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import json
import os
import shutil
import signal
import ssl
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
import xml.etree.ElementTree as ET
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import Any

from custom_scheduler.devenv import cluster, kwok
from custom_scheduler.devenv.controlplane import (
    CONTROLLERS,
    REPO_ROOT,
    ControlPlane,
    ControlPlaneError,
    find_binaries,
    free_port,
)
from custom_scheduler.devenv.pod_finisher import PodFinisher
from custom_scheduler.kube import api_errors
from custom_scheduler.kube.client import MERGE_PATCH_CT, KubeClient, node_path, pod_path

#: The specs run: every [sig-scheduling] one.
FOCUS = r"\[sig-scheduling\]"

#: (pattern, why): specs left out because kwok cannot do what they check. kwok reports containers
#: Running without running them, so nothing can exec into a container or carry traffic. Empty: no
#: [sig-scheduling] spec of 1.37.2 does either (a new release's might).
SKIPS: tuple[tuple[str, str], ...] = ()

#: The controllers the e2e framework and the specs' objects need besides the usual ones.
E2E_CONTROLLERS: tuple[str, ...] = (
    *CONTROLLERS,
    "serviceaccount-controller",  # the framework waits for each namespace's `default` ServiceAccount
    "root-ca-certificate-publisher-controller",  # ... and its kube-root-ca.crt ConfigMap
    "replicationcontroller-controller",  # Multi-AZ: "spread the pods of a replication controller"
    "pod-garbage-collector-controller",  # orphaned pods go, as in a real cluster
    "podgroup-protection-controller",  # PodGroup deletion as in a real cluster (its finalizer handled)
)

NODE_COUNT = 4
NODE_CAPACITY: dict[str, str] = {"cpu": "8", "memory": "32Gi", "pods": "110", "ephemeral-storage": "100Gi"}
ZONES = ("zone-a", "zone-b")

#: Name prefixes the framework's node health check wants running on every untainted node.
STAND_IN_PODS = ("kube-proxy", "fluentd-elasticsearch", "node-problem-detector")

#: kwok's stages for the e2e run: ours without pod-delete; :class:`PodFinisher` finishes graceful
#: deletions instead, with the pod's UID as a precondition (pod_finisher's doc says why).
E2E_STAGES: tuple[Path, ...] = tuple(p for p in kwok.DEFAULT_STAGES if p.name != "pod-delete.yaml")

SCHEDULERS = ("kube", "custom")
LABELS = {"kube": "kube-scheduler", "custom": "ours"}

BINARIES = "etcd kube-apiserver kube-controller-manager kube-scheduler kubectl"


def log(msg: str) -> None:
    print(f"e2e: {msg}", file=sys.stderr, flush=True)


def find_e2e() -> Path:
    """The directory holding ``e2e.test``: the cache, or a build through ``hack/e2e.sh`` (7-15
    minutes on 2 cores the first time; the script says what is missing when it can do neither)."""
    proc = subprocess.run(["bash", str(REPO_ROOT / "hack" / "e2e.sh")], capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise ControlPlaneError(f"hack/e2e.sh failed:\n{proc.stderr[-4000:]}")
    return Path(proc.stdout.strip().splitlines()[-1])


def cached_e2e() -> Path | None:
    """``e2e.test`` if it is cached already (nothing is built), else None."""
    proc = subprocess.run(
        ["bash", str(REPO_ROOT / "hack" / "e2e.sh"), "--version-only"], capture_output=True, text=True, check=False
    )
    if proc.returncode != 0:
        return None
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "custom-scheduler"
    path = cache / f"e2e-{proc.stdout.strip()}" / "bin" / "e2e.test"
    return path if path.exists() else None


# -- results ----------------------------------------------------------------------------------------
@dataclass(frozen=True)
class SpecResult:
    name: str
    status: str  # passed | failed | skipped
    seconds: float
    message: str = ""


@dataclass
class SuiteRun:
    which: str
    specs: list[SpecResult] = field(default_factory=list)
    seconds: float = 0.0
    out_dir: Path = Path()
    error: str = ""

    def status(self, name: str) -> str:
        for s in self.specs:
            if s.name == name:
                return s.status
        return "-"


def parse_junit(path: Path) -> list[SpecResult]:
    """The [sig-scheduling] specs of a Ginkgo JUnit report (and a suite node that failed, which
    would explain why none ran)."""
    results = []
    for case in ET.parse(path).getroot().iter("testcase"):
        name = case.get("name", "").removeprefix("[It] ")
        status = case.get("status", "")
        failure = case.find("failure")
        if failure is None:
            failure = case.find("error")
        if not status:
            status = "failed" if failure is not None else "skipped" if case.find("skipped") is not None else "passed"
        if "[sig-scheduling]" not in name and status not in ("failed", "panicked", "timedout", "interrupted"):
            continue
        if status == "skipped" and case.find("skipped") is not None:
            skipped = case.find("skipped")
            reason = (skipped.get("message") or "") if skipped is not None else ""
            if reason.strip() in ("", "skipped"):  # left out by focus/skip; a spec's own Skip says why
                continue
        message = (failure.get("message") or failure.text or "") if failure is not None else ""
        results.append(SpecResult(name, status, float(case.get("time") or 0), message.strip()))
    return results


def short(name: str) -> str:
    return name.removeprefix("[sig-scheduling] ")


def table(runs: Sequence[SuiteRun]) -> str:
    """A Markdown table: one row per spec, one column per scheduler (in the order run)."""
    names: list[str] = []
    for run in runs:
        names.extend(s.name for s in run.specs if s.name not in names)
    head = "| spec | " + " | ".join(LABELS[r.which] for r in runs) + " |"
    rows = [head, "|" + "---|" * (len(runs) + 1)]
    rows += [f"| {short(n)} | " + " | ".join(r.status(n) for r in runs) + " |" for n in sorted(names, key=short)]
    totals = []
    for r in runs:
        passed = sum(s.status == "passed" for s in r.specs)
        totals.append(f"{passed}/{len(r.specs)} passed, {r.seconds / 60:.1f} min")
    rows.append("| **total** | " + " | ".join(totals) + " |")
    return "\n".join(rows)


def regressions(runs: Sequence[SuiteRun]) -> list[str]:
    """Specs the reference (kube-scheduler) passed that another run did not pass; with one run,
    every spec it did not pass (skipped ones aside)."""
    ref = next((r for r in runs if r.which == "kube"), None)
    bad = []
    for r in runs:
        for s in r.specs:
            if s.status in ("passed", "skipped"):
                continue
            if r is ref or ref is None or ref.status(s.name) == "passed":
                bad.append(f"{LABELS[r.which]}: {short(s.name)}")
    return bad


# -- the cluster -----------------------------------------------------------------------------------
def node_object(i: int) -> dict[str, Any]:
    name = f"e2e-node-{i}"
    labels = {
        "kubernetes.io/hostname": name,
        "kubernetes.io/os": "linux",
        "kubernetes.io/arch": "amd64",
        "topology.kubernetes.io/zone": ZONES[i % len(ZONES)],
        "topology.kubernetes.io/region": "region-1",
    }
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": labels},
        "status": {
            "capacity": dict(NODE_CAPACITY),
            "allocatable": dict(NODE_CAPACITY),
            # kwok keeps addresses it finds; its own --node-ip (127.0.0.1) would be every node's.
            "addresses": [{"type": "InternalIP", "address": f"10.88.0.{i + 2}"}, {"type": "Hostname", "address": name}],
        },
    }


def stand_in_pod(prefix: str, node: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": f"{prefix}-{node}", "namespace": "kube-system", "labels": {"e2e-stand-in": prefix}},
        "spec": {
            # Bound through the binding subresource (:func:`_create_stand_ins`), which also sets
            # PodScheduled=True, as for a scheduled pod: the specs' WaitForStableCluster fails on a
            # pod on a node without that condition. No scheduler has this name.
            "schedulerName": "e2e-stand-in",
            "priorityClassName": "system-node-critical",
            "tolerations": [{"operator": "Exists"}],
            "automountServiceAccountToken": False,
            "containers": [{"name": "pause", "image": "registry.k8s.io/pause:3.10"}],
        },
    }


def _create_stand_ins(kube: KubeClient, nodes: Sequence[str]) -> None:
    """Create the stand-in system pods, bind them, and wait until kwok runs them all."""

    def create(obj: dict[str, Any]) -> bool:
        try:
            kube.post(pod_path("kube-system"), obj)
        except api_errors.Conflict:
            return True  # made by an earlier try
        except api_errors.ApiError as e:
            if e.status == 403:  # kube-system's default ServiceAccount is not there yet
                return False
            raise
        return True

    for node in nodes:
        for prefix in STAND_IN_PODS:
            obj = stand_in_pod(prefix, node)
            name = obj["metadata"]["name"]
            cluster.wait_for(functools.partial(create, obj), timeout=60, interval=0.5, what=f"pod {name}")
            cluster.bind(kube, "kube-system", name, node)

    def all_running() -> bool:
        pods = cluster.list_pods(kube, "kube-system", "e2e-stand-in")
        running = [p for p in pods if (p.get("status") or {}).get("phase") == "Running"]
        return len(running) == len(nodes) * len(STAND_IN_PODS)

    cluster.wait_for(all_running, timeout=60, interval=0.5, what="the stand-in system pods to run")


def sync_allocatable(kube: KubeClient, nodes: Sequence[str]) -> None:
    """Make each node's extended resources (names with a "/") in allocatable what they are in
    capacity, as a kubelet does on its next status update: the specs patch only capacity (pod
    overhead's ``example.com/beardsecond``, workload-aware preemption's), and kwok does not copy it."""
    for name in nodes:
        status = kube.get(node_path(name)).get("status") or {}
        capacity, allocatable = status.get("capacity") or {}, status.get("allocatable") or {}
        patch: dict[str, str | None] = {
            k: v for k, v in capacity.items() if "/" in k and not k.startswith("hugepages") and allocatable.get(k) != v
        }
        patch.update({k: None for k in allocatable if "/" in k and k not in capacity})
        if patch:
            kube.patch(node_path(name, "status"), {"status": {"allocatable": patch}}, MERGE_PATCH_CT)


def _allocatable_loop(kube: KubeClient, nodes: Sequence[str], stop: threading.Event) -> None:
    while not stop.wait(0.5):
        try:
            sync_allocatable(kube, nodes)
        except api_errors.KubeError as e:  # a conflict or a blip: the next round retries
            log(f"allocatable sync: {e}")


@contextlib.contextmanager
def kwok_cluster(bin_dir: Path, kwok_dir: Path, workdir: Path) -> Iterator[ControlPlane]:
    """A control plane, kwok and :data:`NODE_COUNT` Ready nodes with their stand-in system pods;
    everything is stopped on the way out."""
    cp = ControlPlane(bin_dir, workdir=workdir / "controlplane", controllers=E2E_CONTROLLERS, service_accounts=True)
    with contextlib.ExitStack() as stack:
        cp.start()
        stack.callback(cp.stop)
        k = kwok.Kwok(kwok_dir, cp.kubeconfig(), stages=E2E_STAGES, workdir=workdir / "kwok").start()
        stack.callback(k.stop)
        kube = KubeClient.from_kubeconfig(str(cp.kubeconfig()), qps=0, burst=1)
        stack.callback(kube.close)
        nodes = []
        for i in range(NODE_COUNT):
            obj = node_object(i)
            kwok.create_node(kube, obj)
            nodes.append(obj["metadata"]["name"])
        _create_stand_ins(kube, nodes)
        finisher = PodFinisher(kube, log=log).start()
        stack.callback(finisher.stop)
        stop = threading.Event()
        syncer = threading.Thread(target=_allocatable_loop, args=(kube, nodes, stop), name="allocatable", daemon=True)
        syncer.start()
        stack.callback(syncer.join, 5)
        stack.callback(stop.set)
        yield cp


# -- the scheduler under test ------------------------------------------------------------------------
def scheduler_argv(which: str, cp: ControlPlane, workdir: Path, port: int) -> tuple[list[str], dict[str, str]]:
    """The command line (and environment) of the scheduler under test, serving /healthz on ``port``."""
    kc = str(cp.kubeconfig())
    cfg = workdir / f"{which}-scheduler.yaml"
    if which == "custom":
        cfg.write_text(
            "apiVersion: kubescheduler.config.k8s.io/v1\n"
            "kind: KubeSchedulerConfiguration\n"
            "leaderElection: {leaderElect: false}\n"
            f"healthzBindAddress: 127.0.0.1:{port}\n"
            "profiles:\n"
            "- schedulerName: default-scheduler\n"
        )
        argv = [sys.executable, "-m", "custom_scheduler", "run", "--config", str(cfg), "--kubeconfig", kc]
        return argv, {**os.environ, "LOG_FORMAT": "json", "PYTHONUNBUFFERED": "1"}
    cfg.write_text(
        "apiVersion: kubescheduler.config.k8s.io/v1\n"
        "kind: KubeSchedulerConfiguration\n"
        "leaderElection: {leaderElect: false}\n"
        f"clientConnection: {{kubeconfig: {kc}}}\n"
        "profiles:\n"
        "- schedulerName: default-scheduler\n"
    )
    argv = [
        str(cp.bin_dir / "kube-scheduler"),
        f"--config={cfg}",
        "--bind-address=127.0.0.1",
        f"--secure-port={port}",
        f"--cert-dir={workdir / 'kube-scheduler-certs'}",
        f"--authentication-kubeconfig={kc}",
        f"--authorization-kubeconfig={kc}",
        "--v=2",
    ]
    if gates := cp.feature_gates:
        argv.append(f"--feature-gates={gates}")
    return argv, dict(os.environ)


def _healthy(port: int) -> bool:
    ctx = ssl.create_default_context()
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE  # a self-signed serving certificate
    try:
        with urllib.request.urlopen(f"https://127.0.0.1:{port}/healthz", timeout=2, context=ctx) as r:
            return bool(r.status == 200)
    except (OSError, urllib.error.URLError, ssl.SSLError):
        return False


def stop_process(proc: subprocess.Popen[bytes], grace: float = 10.0) -> None:
    """SIGTERM ``proc`` (by its PID), then SIGKILL it after ``grace`` seconds."""
    if proc.poll() is not None:
        return
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout=grace)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout=10)


@contextlib.contextmanager
def scheduler(which: str, cp: ControlPlane, workdir: Path, timeout: float = 60.0) -> Iterator[Path]:
    """Run the scheduler under test until the block ends; yield its log file."""
    port = free_port()
    argv, env = scheduler_argv(which, cp, workdir, port)
    log_path = workdir / f"{which}-scheduler.log"
    with log_path.open("ab") as out:
        proc = subprocess.Popen(
            argv, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env, start_new_session=True
        )
    try:
        deadline = time.monotonic() + timeout
        while not _healthy(port):
            if proc.poll() is not None or time.monotonic() > deadline:
                tail = "\n".join(log_path.read_text(errors="replace").splitlines()[-30:])
                raise ControlPlaneError(f"{LABELS[which]} did not become healthy (exit {proc.poll()}):\n{tail}")
            time.sleep(0.5)
        yield log_path
    finally:
        stop_process(proc)


# -- e2e.test -----------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Binaries:
    kube: Path
    kwok: Path
    e2e: Path


def e2e_argv(binaries: Binaries, kubeconfig: Path, report_dir: Path, focus: str, skip: str) -> list[str]:
    argv = [
        str(binaries.e2e / "e2e.test"),
        f"--kubeconfig={kubeconfig}",
        "--provider=skeleton",
        f"--kubectl-path={binaries.kube / 'kubectl'}",
        f"--report-dir={report_dir}",
        "--dump-logs-on-failure=false",
        f"--ginkgo.focus={focus}",
        "--ginkgo.timeout=4h",
        "--ginkgo.no-color",
        "--ginkgo.v",
    ]
    if skip:
        argv.append(f"--ginkgo.skip={skip}")
    return argv


def run_e2e(argv: list[str], log_path: Path, what: str) -> int:
    """Run ``e2e.test`` (output to ``log_path``), saying every few minutes how far it got."""
    start = time.monotonic()
    with log_path.open("ab") as out:
        proc = subprocess.Popen(
            argv, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True
        )
    try:
        while True:
            try:
                return proc.wait(timeout=120)
            except subprocess.TimeoutExpired:
                done = log_path.read_text(errors="replace").count("\n• ")
                log(f"{what}: {(time.monotonic() - start) / 60:.0f} min, about {done} specs done ({log_path})")
    finally:
        stop_process(proc, grace=30)


def run_suite(which: str, binaries: Binaries, out_dir: Path, focus: str = FOCUS, skip: str | None = None) -> SuiteRun:
    """One whole run for scheduler ``which`` ("custom" or "kube"): cluster, scheduler, e2e.test;
    logs and the JUnit report under ``out_dir/<which>``."""
    skip = "|".join(p for p, _ in SKIPS) if skip is None else skip
    run_dir = out_dir / which
    run_dir.mkdir(parents=True, exist_ok=True)
    run = SuiteRun(which, out_dir=run_dir)
    start = time.monotonic()
    work = Path(tempfile.mkdtemp(prefix=f"cs-e2e-{which}-"))
    try:
        log(f"{LABELS[which]}: starting a control plane, kwok and {NODE_COUNT} nodes")
        with kwok_cluster(binaries.kube, binaries.kwok, work) as cp, scheduler(which, cp, run_dir) as sched_log:
            log(f"{LABELS[which]}: running e2e.test (log: {run_dir / 'e2e.log'}, scheduler log: {sched_log})")
            argv = e2e_argv(binaries, cp.kubeconfig(), run_dir, focus, skip)
            rc = run_e2e(argv, run_dir / "e2e.log", LABELS[which])
            for name in ("kube-apiserver", "kube-controller-manager"):
                (run_dir / f"{name}.log.tail").write_text(cp.log_tail(name, 400))
        report = run_dir / "junit_01.xml"
        if report.exists():
            run.specs = parse_junit(report)
        if not run.specs:
            run.error = f"e2e.test exited {rc} with no spec results; see {run_dir / 'e2e.log'}"
    except (ControlPlaneError, TimeoutError) as e:
        run.error = str(e)
    finally:
        run.seconds = time.monotonic() - start
        shutil.rmtree(work, ignore_errors=True)
    return run


# -- the command -------------------------------------------------------------------------------------
def _on_sigterm(signum: int, frame: FrameType | None) -> None:
    raise SystemExit(128 + signum)


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="hack/dev.sh e2e", description=__doc__.split("\n\n")[0] if __doc__ else "")
    p.add_argument("--scheduler", choices=("custom", "kube", "both"), default="both")
    p.add_argument("--focus", default=FOCUS, help=f"Ginkgo focus regexp (default {FOCUS!r})")
    p.add_argument("--skip", default=None, help="Ginkgo skip regexp (default: what kwok cannot do, SKIPS)")
    p.add_argument("--out", default=None, help="where logs, JUnit reports and results go (default: a new /tmp dir)")
    return p


def report(runs: Sequence[SuiteRun], out_dir: Path) -> str:
    """The table plus failures and errors; also written to ``out_dir/results.md`` and ``.json``."""
    lines = [table(runs), ""]
    for r in runs:
        if r.error:
            lines.append(f"{LABELS[r.which]}: ERROR {r.error}")
        for s in r.specs:
            if s.status not in ("passed", "skipped"):
                first = s.message.splitlines()[0] if s.message else ""
                lines.append(f"{LABELS[r.which]} {s.status}: {short(s.name)}: {first[:300]}")
    if SKIPS:
        lines += ["", "skipped (kwok cannot do it):", *(f"  {p}: {why}" for p, why in SKIPS)]
    text = "\n".join(lines)
    (out_dir / "results.md").write_text(text + "\n")
    doc = {r.which: {"seconds": r.seconds, "error": r.error, "specs": [s.__dict__ for s in r.specs]} for r in runs}
    (out_dir / "results.json").write_text(json.dumps(doc, indent=1))
    return text


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    signal.signal(signal.SIGTERM, _on_sigterm)
    out_dir = Path(args.out) if args.out else Path(tempfile.mkdtemp(prefix="cs-e2e-results-"))
    out_dir.mkdir(parents=True, exist_ok=True)
    binaries = Binaries(find_binaries(BINARIES), kwok.find_kwok(), find_e2e())
    which = SCHEDULERS if args.scheduler == "both" else (args.scheduler,)
    runs = []
    for w in which:
        runs.append(run_suite(w, binaries, out_dir, args.focus, args.skip))
        log(f"{LABELS[w]}: done in {runs[-1].seconds / 60:.1f} min")
    print(report(runs, out_dir))
    log(f"logs and reports: {out_dir}")
    bad = regressions(runs)
    return 1 if bad or any(r.error for r in runs) else 0


if __name__ == "__main__":
    sys.exit(main())
