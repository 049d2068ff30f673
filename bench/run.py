"""End-to-end benchmark: custom-scheduler and kube-scheduler, one after the other, on one API server.

    python -m bench.run --nodes 100 --pods 500 --workload plain --schedulers custom,kube [--json FILE]
    python -m bench.run --nodes 1000 --pods 2000 --workload all --json FILE   # + FILE.md, the table

``--workload all`` (or a comma-separated list) runs every workload in turn on one control plane
(:func:`run_suite`) and writes one JSON and one markdown table with custom/kube ratio columns.

One control plane (etcd, kube-apiserver and kube-controller-manager 1.37 from ``hack/testenv.sh``)
per invocation. For each
scheduler in turn:

1. a fresh namespace and N Ready fake nodes (created concurrently); for ``--workload dra`` also
   the round's DeviceClass and ResourceSlices and, in the namespace, the ResourceClaimTemplate;
2. a pod watch on the namespace (raw JSON) that records, per pod, when ``spec.nodeName`` first
   appears (monotonic clock of this process); the workload's PriorityClasses;
3. the scheduler as a subprocess (our ``python -m custom_scheduler run`` or the upstream binary),
   with the same client QPS/burst; a canary pod proves it is up and warm (``--order
   scheduler-first``, the default), then M pods are created in a burst from a thread pool,
   recording when each create call returned (before them: the gated pods, and the init pods,
   waited on until bound; beside them: the workload's churn thread); with ``--order pods-first``
   the pods exist before the scheduler starts (pure scheduling throughput from a full queue);
4. wait, with a deadline and a stall timeout, until every pod is bound; read the scheduler's CPU
   seconds (``/proc/<pid>/stat``) and peak RSS (``VmHWM``) before stopping it by PID;
5. placement quality and constraint checks from the final pod list (and, for dra, the claims)
   (bench/workloads.py), then delete pods (grace 0) and nodes so the next scheduler starts from an
   empty cluster; for dra also the claims (waiting until the resourceclaim controller released
   them), slices and class, so it starts from a clean device state too.

``--workload gangs``: the round's PodGroups (scheduling.k8s.io/v1beta1) are created in its
namespace before the pods; both schedulers run their GangScheduling plugin (ours enabled in the
profile, kube-scheduler 1.37 through ``--feature-gates=GenericWorkload=true``, which adds it to its
default plugins), and before the burst :func:`_gang_probe` proves from behaviour that each one is
all-or-nothing. Per gang: first member created -> last member bound, and how long it was partially
bound (:func:`bench.workloads.gang_report`).

Latency is bound-seen minus create-returned, both on this process's clock: ``creationTimestamp``
has one-second resolution. Everything waits with a deadline; a scheduler that does not bind
every pod is reported as "bound X/M", never waited on forever.

``--kwok`` (off by default; ``--kwok-lease SECONDS``, 40 as kubelet's; ``--kwok-parallelism N``,
64, kwok's workers per kind, so Lease renewals keep up at 15000 Nodes): one kwok beside the control
plane is the kubelet of every round's Nodes: they heartbeat through their Leases and bound pods go
Running, as in a living cluster. Step 1 then creates the Nodes for kwok and waits until it reports
them all Ready (the not-ready taint lifted), timed as node set-up, before any scheduler starts; each
round also reports kwok's CPU and the API server's Lease writes/s (bench/kwok_nodes.py).
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import math
import os
import platform
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

from bench import kwok_nodes, perf_more, script, script_run, topology, workloads
from custom_scheduler.devenv import cluster, kwok
from custom_scheduler.devenv.controlplane import ControlPlane, find_binaries, free_port, signals_as_exit
from custom_scheduler.kube import api_errors
from custom_scheduler.kube.client import KubeClient, pod_path

REPO_ROOT = Path(__file__).resolve().parents[1]
SCHEDULERS = ("custom", "kube", "null")
SCHEDULER_NAMES = {"custom": "custom-scheduler", "kube": "kube-bench", "null": "null-binder"}
CANARY = "canary"
BENCH_BINARIES = "etcd kube-apiserver kube-controller-manager kube-scheduler"
CLK_TCK = os.sysconf("SC_CLK_TCK")
#: kubelet's (and kwok's) default lease duration; ``--kwok-lease``'s default.
KWOK_LEASE_S = kwok.DEFAULT_LEASE_SECONDS
#: ``--kwok-parallelism``'s default: enough workers that 15000 Nodes' Leases (1500 writes/s with a
#: 40 s lease) are renewed at a round trip of up to about 40 ms (kwok's own 4 reached about 90/s).
KWOK_PARALLELISM = 64

#: kube-scheduler 1.37's default profile has plugins ours does not run on these workloads: the volume
#: plugins and DynamicResources (their pods have no volumes or claims, so the plugins only add work).
#: "matched" disables them there, so both run the same filters and scores with the same weights
#: (both use upstream's default weights); "default" leaves kube-scheduler alone.
KUBE_MATCHED_PLUGINS = """\
    plugins:
      multiPoint:
        disabled:
        - {name: VolumeRestrictions}
        - {name: NodeVolumeLimits}
        - {name: VolumeBinding}
        - {name: VolumeZone}
        - {name: DynamicResources}
"""


def kube_matched_plugins(workload: str) -> str:
    """KUBE_MATCHED_PLUGINS, except that the dra workloads keep DynamicResources (their pods have
    claims, which both schedulers must allocate), and the plugins :data:`bench.perf_more.KUBE_KEEPS`
    names for a workload."""
    keep = set(perf_more.KUBE_KEEPS.get(workload, ()))
    if workload in ("dra", "dra-partitions"):
        keep.add("DynamicResources")
    if not keep:
        return KUBE_MATCHED_PLUGINS
    return "".join(line + "\n" for line in KUBE_MATCHED_PLUGINS.splitlines() if not any(k in line for k in keep))


# -- process metrics ------------------------------------------------------------------------------


def proc_cpu_seconds(pid: int) -> float:
    """user + system CPU seconds of a live process (all its threads)."""
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return math.nan
    fields = raw.rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK  # utime, stime (stat fields 14, 15)


def host_busy_seconds() -> float:
    """CPU seconds all CPUs spent not idle since boot (``/proc/stat``)."""
    try:
        first = Path("/proc/stat").read_text().splitlines()[0].split()
    except OSError:
        return math.nan
    ticks = [int(x) for x in first[1:]]
    idle = ticks[3] + (ticks[4] if len(ticks) > 4 else 0)  # idle + iowait
    return (sum(ticks[:8]) - idle) / CLK_TCK


#: The machine's CPU share (all cores) under which the cluster counts as settled before a
#: scheduler starts; see :func:`wait_settled`.
SETTLED_BUSY = 0.25


def wait_settled(timeout: float = 20.0, window: float = 0.5) -> float:
    """Wait (at most ``timeout``) until the machine is nearly idle, and return the last window's
    busy share. Why: work left over from creating a round (or from the previous round's cleanup)
    falls into whichever scheduler starts next, and ours is CPU-bound while it imports. The cause
    measured was the previous round's namespace being deleted (see ``_cleanup``, which now waits
    for it); this is the second guard, for whatever else a round leaves running."""
    cores = os.cpu_count() or 1
    deadline = time.monotonic() + timeout
    if timeout <= 0:
        return math.nan
    while True:
        busy, t0 = host_busy_seconds(), time.monotonic()
        time.sleep(window)  # a sampling interval: the share is measured over it
        share = (host_busy_seconds() - busy) / ((time.monotonic() - t0) * cores)
        if share < SETTLED_BUSY or time.monotonic() >= deadline:
            return share


class CpuWindow:
    """CPU seconds of the scheduler, kube-apiserver, etcd, this harness and everything else over a
    window: "other" shows how noisy the machine was (other jobs compete for the same cores)."""

    def __init__(self, cp: ControlPlane, scheduler_pid: int | None, extra: dict[str, int] | None = None) -> None:
        self.pids = {"apiserver": cp._procs["kube-apiserver"].pid, "etcd": cp._procs["etcd"].pid, **(extra or {})}
        if scheduler_pid is not None:
            self.pids["scheduler"] = scheduler_pid
        self.start = self._sample()

    def _sample(self) -> dict[str, float]:
        out = {name: proc_cpu_seconds(pid) for name, pid in self.pids.items()}
        t = os.times()
        out["harness"] = t.user + t.system
        out["host"] = host_busy_seconds()
        return out

    def stop(self) -> dict[str, float]:
        end = self._sample()
        d = {k: end[k] - self.start.get(k, 0.0) for k in end}
        d.setdefault("scheduler", math.nan)
        d["other"] = d["host"] - sum(v for k, v in d.items() if k != "host" and not math.isnan(v))
        return d


def proc_status_kb(pid: int, key: str) -> int:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith(key + ":"):
                return int(line.split()[1])
    except OSError:
        pass
    return 0


# -- the pod watch --------------------------------------------------------------------------------


class PodWatcher:
    """Watch one namespace's pods; remember when each pod was first seen with a nodeName, and
    which pods were tried (a PodScheduled condition, or bound: upstream's ``isAttempted``)."""

    def __init__(self, kube: KubeClient, namespace: str) -> None:
        self.kube = kube.clone(qps=0, pool_maxsize=2)
        self.namespace = namespace
        self.bound: dict[str, tuple[float, str]] = {}
        self.attempted: set[str] = set()
        self.cond = threading.Condition()
        self.restarts = 0
        self._stop = threading.Event()
        self._resp: Any = None
        self._thread = threading.Thread(target=self._run, name=f"watch-{namespace}", daemon=True)
        self._rv = ""

    def start(self) -> PodWatcher:
        self._rv = self._relist()
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        resp = self._resp
        if resp is not None:
            with contextlib.suppress(Exception):
                resp.shutdown()
        self._thread.join(10)
        self.kube.close()

    def _record(self, name: str, node: str, at: float) -> None:
        with self.cond:
            if name not in self.bound:
                self.bound[name] = (at, node)
                self.attempted.add(name)
                self.cond.notify_all()

    def _seen(self, obj: dict[str, Any], at: float) -> None:
        node = (obj.get("spec") or {}).get("nodeName")
        name = (obj.get("metadata") or {}).get("name", "")
        if node:
            self._record(name, node, at)
        elif name not in self.attempted and any(
            c.get("type") == "PodScheduled" for c in (obj.get("status") or {}).get("conditions") or ()
        ):
            with self.cond:
                self.attempted.add(name)
                self.cond.notify_all()

    def _relist(self) -> str:
        doc = self.kube.get(pod_path(self.namespace))
        now = time.monotonic()
        for p in doc.get("items") or ():
            self._seen(p, now)
        return str((doc.get("metadata") or {}).get("resourceVersion", ""))

    def _opened(self, resp: Any) -> None:
        self._resp = resp

    def _run(self) -> None:
        while not self._stop.is_set():
            query = {"watch": "1", "resourceVersion": self._rv, "timeoutSeconds": 1800}
            try:
                for line in self.kube.stream(pod_path(self.namespace), query, read_timeout=60, on_open=self._opened):
                    now = time.monotonic()
                    ev = orjson.loads(line)
                    obj = ev.get("object") or {}
                    if ev.get("type") == "ERROR":
                        self._rv = self._relist()
                        break
                    meta = obj.get("metadata") or {}
                    self._rv = meta.get("resourceVersion") or self._rv
                    if ev.get("type") in ("ADDED", "MODIFIED"):
                        self._seen(obj, now)
            except (api_errors.KubeError, orjson.JSONDecodeError):
                if self._stop.is_set():
                    return
                time.sleep(0.2)
            self.restarts += 1

    def wait(
        self,
        names: set[str],
        deadline: float,
        stall: float,
        alive: Callable[[], bool] | None = None,
        *,
        attempted: bool = False,
    ) -> bool:
        """Block until every name in ``names`` is bound (``attempted``: tried or bound), ``deadline``
        passes, nothing new happens for ``stall`` seconds, or ``alive`` says the scheduler exited.
        True if all were."""
        last_count, last_progress = -1, time.monotonic()
        with self.cond:
            while True:
                seen = self.attempted if attempted else self.bound.keys()
                done = sum(1 for n in names if n in seen) if len(names) < 64 else len(names & seen)
                if done == len(names):
                    return True
                now = time.monotonic()
                if done != last_count:
                    last_count, last_progress = done, now
                if now >= deadline or now - last_progress >= stall or (alive is not None and not alive()):
                    return False
                self.cond.wait(min(0.5, max(0.01, deadline - now)))


# -- schedulers -----------------------------------------------------------------------------------


@dataclass
class Options:
    nodes: int
    pods: int
    workload: str
    schedulers: list[str]
    qps: float = 5000.0
    burst: int = 5000
    order: str = "scheduler-first"
    kube_plugins: str = "matched"
    create_workers: int = 32
    rate: float = 0.0
    timeout: float = 0.0
    stall: float = 30.0
    #: Seconds at most to wait, before each scheduler starts, for the previous round's namespace
    #: to be deleted and the machine to settle (:func:`wait_settled`); 0: start at once (the
    #: smoke suite in CI, whose figures mean nothing anyway).
    settle: float = 20.0
    startup_timeout: float = 120.0
    seed: int = 1
    custom_log_level: str = "info"
    kube_verbosity: int = 0
    py_spy: str = ""
    py_spy_rate: int = 100
    keep: bool = False
    rounds: int = 1
    kube_scheduler: str = ""  # the upstream binary; found through hack/testenv.sh when empty
    gangs: str = ""  # the gangs workload's mix, "100x8,10x100"; empty: scaled from --pods
    gang_partial_limit_s: float = 10.0  # a gang partially bound longer than this is a violation
    kwok: bool = False  # the Nodes are kwok's: they heartbeat, bound pods go Running (bench/kwok_nodes.py)
    kwok_lease: int = KWOK_LEASE_S  # kwok's --node-lease-duration-seconds (renewed every 1/4)
    kwok_parallelism: int = KWOK_PARALLELISM  # kwok's Lease / node-stage / pod-stage workers each

    @property
    def deadline_s(self) -> float:
        return self.timeout or 60.0 + self.pods / 20.0


def compile_bytecode() -> None:
    """Compile our modules' bytecode before the daemon starts, as it is deployed: the image's pip
    install writes every module's ``.pyc``. Without it, a machine with PYTHONDONTWRITEBYTECODE set
    (this one) compiles all of them from source on every start: 0.3 s of the start-up measured on
    this machine (``python -X importtime``: 664 ms of our modules' own import time, 350 ms with
    bytecode). Writes ``__pycache__`` under ``custom_scheduler/`` (ignored by git)."""
    import compileall

    compileall.compile_dir(str(REPO_ROOT / "custom_scheduler"), quiet=1)


def custom_command(cp: ControlPlane, workdir: Path, opts: Options) -> tuple[list[str], dict[str, str]]:
    compile_bytecode()
    cfg = workdir / "custom-scheduler.yaml"
    cfg.write_text(
        "apiVersion: kubescheduler.config.k8s.io/v1\n"
        "kind: KubeSchedulerConfiguration\n"
        "leaderElection: {leaderElect: false}\n"
        f"clientConnection: {{kubeconfig: {cp.kubeconfig()}, qps: {opts.qps:g}, burst: {opts.burst}}}\n"
        f"healthzBindAddress: 127.0.0.1:{free_port()}\n"
        "profiles:\n"
        f"- schedulerName: {SCHEDULER_NAMES['custom']}\n"
        + (CUSTOM_GANG_PLUGINS if opts.workload in ("gangs", topology.NAME) else "")
        + (CUSTOM_TOPOLOGY_ARGS if opts.workload == topology.NAME else "")
        + perf_more.plugin_config(opts.workload, "  ")
    )
    argv = [sys.executable, "-m", "custom_scheduler", "run", "--config", str(cfg), "--kubeconfig", str(cp.kubeconfig())]
    env = {**os.environ, "LOG_FORMAT": "json", "LOG_LEVEL": opts.custom_log_level, "PYTHONUNBUFFERED": "0"}
    return argv, env


#: Our GangScheduling plugin is registered but, like upstream's without its gate, not in the default
#: profile: the gangs workload enables it.
CUSTOM_GANG_PLUGINS = """\
  plugins:
    multiPoint:
      enabled: [{name: GangScheduling}]
"""
#: kube-scheduler 1.37 adds GangScheduling to its default plugins only with this gate (beta, off by
#: default; it depends on no other gate: pkg/features/kube_features.go, default_plugins.go).
KUBE_GANG_GATES = "GenericWorkload=true"
#: The topology-gangs workload: our GangScheduling told the workload's hierarchy (widest first).
CUSTOM_TOPOLOGY_ARGS = f"""\
  pluginConfig:
  - name: GangScheduling
    args: {{topologyLevels: [{", ".join(topology.LEVELS)}]}}
"""
#: kube-scheduler 1.37 adds TopologyPlacementGenerator (placements per domain of a PodGroup's
#: ``schedulingConstraints.topology[0].key``) and PodGroupPodsCount (their score, weight 1) to its
#: default plugins with this alpha gate, which needs GenericWorkload (kube_features.go,
#: default_plugins.go ``applyTopologyAwareWorkloadScheduling``); no plugin args.
KUBE_TOPOLOGY_GATES = "GenericWorkload=true,TopologyAwareWorkloadScheduling=true"


def kube_command(cp: ControlPlane, workdir: Path, opts: Options) -> tuple[list[str], dict[str, str]]:
    cfg = workdir / "kube-scheduler.yaml"
    plugins = kube_matched_plugins(opts.workload) if opts.kube_plugins == "matched" else ""
    cfg.write_text(
        "apiVersion: kubescheduler.config.k8s.io/v1\n"
        "kind: KubeSchedulerConfiguration\n"
        "leaderElection: {leaderElect: false}\n"
        f"clientConnection: {{kubeconfig: {cp.kubeconfig()}, qps: {opts.qps:g}, burst: {opts.burst}}}\n"
        "profiles:\n"
        f"  - schedulerName: {SCHEDULER_NAMES['kube']}\n" + plugins + perf_more.plugin_config(opts.workload, "    ")
    )
    kc = str(cp.kubeconfig())
    argv = [
        opts.kube_scheduler or str(cp.bin_dir / "kube-scheduler"),
        f"--config={cfg}",
        "--bind-address=127.0.0.1",
        f"--secure-port={free_port()}",
        f"--cert-dir={workdir / 'kube-scheduler-certs'}",
        f"--authentication-kubeconfig={kc}",
        f"--authorization-kubeconfig={kc}",
        f"--v={opts.kube_verbosity}",
    ]
    if opts.workload == "gangs":
        argv.append(f"--feature-gates={KUBE_GANG_GATES}")
    elif opts.workload == topology.NAME:
        argv.append(f"--feature-gates={KUBE_TOPOLOGY_GATES}")
    return argv, dict(os.environ)


def null_command(cp: ControlPlane, workdir: Path, opts: Options) -> tuple[list[str], dict[str, str]]:
    """The ceiling (:mod:`bench.null_binder`): binds without scheduling, on plain-pod workloads."""
    argv = [sys.executable, "-m", "bench.null_binder", "--kubeconfig", str(cp.kubeconfig())]
    return [*argv, "--scheduler-name", SCHEDULER_NAMES["null"]], {**os.environ, "PYTHONUNBUFFERED": "1"}


COMMANDS: dict[str, Callable[[ControlPlane, Path, Options], tuple[list[str], dict[str, str]]]] = {
    "custom": custom_command,
    "kube": kube_command,
    "null": null_command,
}


class SchedulerProcess:
    def __init__(self, which: str, cp: ControlPlane, workdir: Path, opts: Options) -> None:
        self.which = which
        argv, env = COMMANDS[which](cp, workdir, opts)
        self.log_path = workdir / f"{which}-scheduler.log"
        self._log = self.log_path.open("wb")
        self.started = time.monotonic()
        self.proc = subprocess.Popen(
            argv, stdout=self._log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env, cwd=REPO_ROOT
        )
        self.pid = self.proc.pid
        self.exit_code: int | None = None
        #: With ``--keep``, each scrape's whole /metrics text is saved here (the last one stays).
        self.metrics_dump = workdir / f"{which}-metrics.txt" if opts.keep else None
        self.metrics_url = _metrics_url(argv, workdir) if which != "null" else ""  # the null binder serves none

    def alive(self) -> bool:
        return self.proc.poll() is None

    def attempts(self, token: str) -> dict[str, float]:
        """``scheduler_schedule_attempts_total`` by result, read from the process's /metrics (both
        schedulers serve it over HTTPS with delegated authentication: the admin token passes)."""
        if not self.metrics_url:
            return {}
        return scrape_attempts(self.metrics_url, token, self.metrics_dump)

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)
        self._log.close()
        self.exit_code = self.proc.returncode
        return self.exit_code

    def log_errors(self) -> dict[str, int]:
        """Our daemon's error-level log lines, counted by event (a round that hides a failing
        hint or write behind good figures is not a good round); kube-scheduler's klog: {}."""
        if self.which != "custom":
            return {}
        counts: dict[str, int] = {}
        try:
            with self.log_path.open("rb") as f:
                for line in f:
                    if b'"level":"error"' not in line and b'"level":"critical"' not in line:
                        continue
                    try:
                        event = str(orjson.loads(line).get("event", "?"))
                    except orjson.JSONDecodeError:
                        event = "?"
                    counts[event] = counts.get(event, 0) + 1
        except OSError:
            return {}
        return counts

    def log_tail(self, n: int = 30) -> str:
        try:
            lines = self.log_path.read_text(errors="replace").splitlines()
        except OSError:
            return ""
        return "\n".join(lines[-n:])


def _metrics_url(argv: Sequence[str], workdir: Path) -> str:
    """Where the process serves /metrics: kube-scheduler's ``--secure-port``, ours the config's
    ``healthzBindAddress`` (both HTTPS)."""
    for a in argv:
        if a.startswith("--secure-port="):
            return f"https://127.0.0.1:{a.split('=', 1)[1]}/metrics"
    cfg = workdir / "custom-scheduler.yaml"
    if cfg.exists():
        for line in cfg.read_text().splitlines():
            if line.startswith("healthzBindAddress:"):
                return f"https://{line.split(':', 1)[1].strip()}/metrics"
    return ""


def scrape_attempts(url: str, token: str, dump: Path | None = None) -> dict[str, float]:
    """Sum ``scheduler_schedule_attempts_total`` per ``result`` label (every profile); the whole
    text is written to ``dump`` when given (requeue counters, per-plugin figures, for a post-mortem)."""
    import ssl
    import urllib.request

    ctx = ssl.create_default_context()
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE  # the schedulers' self-signed serving certificates
    req = urllib.request.Request(url, headers={"Authorization": f"Bearer {token}"})
    try:
        with urllib.request.urlopen(req, timeout=10, context=ctx) as resp:
            text = resp.read().decode()
    except OSError:
        return {}
    if dump is not None:
        dump.write_text(text)
    out: dict[str, float] = {}
    for line in text.splitlines():
        if line.startswith("scheduler_schedule_attempts_total{"):
            labels, _, value = line.rpartition(" ")
            result = labels.split('result="', 1)[1].split('"', 1)[0] if 'result="' in labels else ""
            out[result] = out.get(result, 0.0) + float(value)
    return out


class PySpy:
    """``py-spy record --gil`` attached to a PID (raw collapsed stacks of the thread holding the GIL,
    i.e. where the interpreter spends its one core), stopped with SIGINT."""

    def __init__(self, pid: int, out: Path, rate: int = 100) -> None:
        exe = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
        self.out = out
        self.log = out.with_suffix(".log").open("wb")
        self.proc = subprocess.Popen(
            [exe, "record", "--pid", str(pid), "--rate", str(rate), "--gil", "--threads", "-f", "raw", "-o", str(out)],
            stdout=self.log,
            stderr=subprocess.STDOUT,
        )

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
            try:
                self.proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()


# -- one run --------------------------------------------------------------------------------------


def _create_nodes(kube: KubeClient, nodes: Sequence[dict[str, Any]], workers: int) -> None:
    with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="mknode") as ex:
        for f in [ex.submit(cluster.create_ready_node, kube, orjson.loads(orjson.dumps(n))) for n in nodes]:
            f.result()


def _create_pods(
    kube: KubeClient, namespace: str, pods: Sequence[dict[str, Any]], workers: int, rate: float = 0.0
) -> dict[str, float]:
    """Create pods concurrently; return name → monotonic time the create call returned.

    ``rate`` > 0 paces the creates (pod ``i`` is sent at ``start + i / rate``): an open-loop
    arrival process that is the same whichever scheduler runs, so latency measures the scheduler
    at a given load rather than how fast the API server admits a burst while it competes for CPU.
    """
    path = pod_path(namespace)
    bodies = [(i, p["metadata"]["name"], orjson.dumps(p)) for i, p in enumerate(pods)]
    done: dict[str, float] = {}
    start = time.monotonic()

    def create(item: tuple[int, str, bytes]) -> None:
        i, name, body = item
        if rate > 0:
            delay = start + i / rate - time.monotonic()
            if delay > 0:
                time.sleep(delay)
        for attempt in range(5):
            try:
                kube.request_raw("POST", path, body=body, rate_limited=False)
                break
            except api_errors.Conflict:
                break
            except (api_errors.TransportError, api_errors.ServerError, api_errors.TooManyRequests):
                if attempt == 4:
                    raise
                time.sleep(0.2 * (attempt + 1))
        done[name] = time.monotonic()

    with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="mkpod") as ex:
        list(ex.map(create, bodies))
    return done


def _canary(scheduler_name: str, namespace: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": CANARY, "namespace": namespace, "labels": {"app": CANARY}},
        "spec": {
            "schedulerName": scheduler_name,
            "terminationGracePeriodSeconds": 0,
            "containers": [{"name": "app", "image": workloads.PAUSE_IMAGE}],
            # every node is the canary's, cordoned and tainted ones too: some workloads start with
            # nothing else (EventHandlingNodeAdd's one node is cordoned)
            "tolerations": [{"operator": "Exists"}],
        },
    }


def _create_dra(kube: KubeClient, wl: workloads.Workload, namespace: str) -> None:
    """The dra workload's DeviceClasses and ResourceSlices (cluster-scoped, after the nodes they
    name) and its ResourceClaimTemplates (in the round's namespace, before the pods)."""
    api = workloads.DRA_API
    for obj in wl.device_classes:
        kube.post(f"{api}/deviceclasses", obj)
    for obj in wl.slices:
        kube.post(f"{api}/resourceslices", obj)
    for obj in wl.claim_templates:
        kube.post(f"{api}/namespaces/{namespace}/resourceclaimtemplates", obj)


def _list_claims(kube: KubeClient, namespace: str) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = kube.get(f"{workloads.DRA_API}/namespaces/{namespace}/resourceclaims")["items"]
    return items


def _cleanup_dra(kube: KubeClient, namespace: str, run_id: str, timeout: float) -> None:
    """After the pods: delete the round's claims and wait until the resourceclaim controller has
    deallocated them and dropped their finalizers (so the next scheduler starts from a clean device
    state), then the round's slices and classes."""
    api = workloads.DRA_API
    with contextlib.suppress(api_errors.KubeError):
        kube.request("DELETE", f"{api}/namespaces/{namespace}/resourceclaims", timeout=(5.0, timeout))
    try:
        cluster.wait_for(lambda: not _list_claims(kube, namespace), timeout=timeout, interval=0.5, what="claims gone")
    except TimeoutError as e:
        print(f"warning: {e}", file=sys.stderr)
    selector = {"labelSelector": f"{workloads.RUN_LABEL}={run_id}"}
    for kind in ("resourceslices", "deviceclasses"):
        with contextlib.suppress(api_errors.KubeError):
            kube.request("DELETE", f"{api}/{kind}", query=selector, timeout=(5.0, timeout))


def _delete_pods_and_nodes(kube: KubeClient, namespace: str, run_id: str, timeout: float, workers: int) -> None:
    """One pass: the namespace's pods as a collection, the run's Nodes one by one in parallel.

    Why one by one: a DELETE of the Node collection is one request the API server works through
    serially; at 15000 Nodes it ended (its request deadline) with 11252 left, which then kept
    heartbeating through kwok into the next round. Parallel deletes, like the parallel creates,
    finish and can be repeated for whatever a pass missed."""
    with contextlib.suppress(api_errors.KubeError):
        kube.request("DELETE", pod_path(namespace), query={"gracePeriodSeconds": 0}, timeout=(5.0, timeout))
    names: list[str] = []
    cont = ""
    with contextlib.suppress(api_errors.KubeError):
        while True:  # paged: 15000 kwok Nodes in one LIST are tens of MB
            query = {"labelSelector": f"{workloads.RUN_LABEL}={run_id}", "limit": 1000, "continue": cont}
            doc = kube.get("/api/v1/nodes", query)
            names += [n["metadata"]["name"] for n in doc.get("items") or []]
            cont = (doc.get("metadata") or {}).get("continue") or ""
            if not cont:
                break

    def delete(name: str) -> None:
        with contextlib.suppress(api_errors.KubeError):
            kube.delete(f"/api/v1/nodes/{name}")

    with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="rmnode") as ex:
        list(ex.map(delete, names))


def _cleanup(
    kube: KubeClient,
    namespace: str,
    run_id: str,
    timeout: float = 120.0,
    dra: bool = False,
    workers: int = 32,
    wait_namespace: bool = True,
) -> None:
    deadline = time.monotonic() + timeout

    def gone() -> bool:
        pods = kube.get(pod_path(namespace), {"limit": 1}).get("items")
        nodes = kube.get("/api/v1/nodes", {"limit": 1, "labelSelector": f"{workloads.RUN_LABEL}={run_id}"}).get("items")
        return not pods and not nodes

    # Repeat the deletes while anything is left (a pass can miss what a slow API server dropped).
    while True:
        _delete_pods_and_nodes(kube, namespace, run_id, timeout, workers)
        try:
            cluster.wait_for(gone, timeout=min(30.0, max(1.0, deadline - time.monotonic())), interval=0.5, what="")
            break
        except TimeoutError:
            if time.monotonic() >= deadline:
                print(f"warning: benchmark pods or nodes still there after {timeout:.0f}s", file=sys.stderr)
                break
    if dra:
        _cleanup_dra(kube, namespace, run_id, timeout)
    selector = {"labelSelector": f"{workloads.RUN_LABEL}={run_id}"}
    for kind in (
        "/apis/scheduling.k8s.io/v1/priorityclasses",
        "/apis/storage.k8s.io/v1/csinodes",
        "/api/v1/persistentvolumes",
    ):
        with contextlib.suppress(api_errors.KubeError):
            kube.request("DELETE", kind, query=selector, timeout=(5.0, timeout))
    with contextlib.suppress(api_errors.KubeError):
        kube.delete(f"/api/v1/namespaces/{namespace}")
    if not wait_namespace:
        return
    # Until it is gone: the namespace controller then deletes what the round left in it (thousands
    # of Events), a second of etcd and API server CPU that otherwise fell on the next scheduler's
    # start-up (measured: 0.5-0.8 s each of etcd and kube-apiserver CPU inside our daemon's 1.1-1.7 s
    # start in the rounds it hit, against 0.01-0.03 s of etcd in the others).
    try:
        cluster.wait_for(
            lambda: _namespace_gone(kube, namespace),
            timeout=max(5.0, min(120.0, deadline - time.monotonic())),
            interval=0.5,
            what=f"namespace {namespace} deleted",
        )
    except TimeoutError as e:
        print(f"warning: {e}", file=sys.stderr)


def _namespace_gone(kube: KubeClient, namespace: str) -> bool:
    try:
        kube.get(f"/api/v1/namespaces/{namespace}")
    except api_errors.NotFound:
        return True
    return False


class Churner:
    """The workload's :class:`~bench.workloads.Churn` in a thread during the measured phase.

    Everything it creates carries the run's names, so cleanup finds it; what it created is kept
    (``never_fit``, ``nodes``) so the checks can prove none of it took a pod."""

    def __init__(self, kube: KubeClient, namespace: str, run_id: str, churn: workloads.Churn, init: Sequence[str]):
        self.kube = kube
        self.namespace = namespace
        self.run_id = run_id
        self.churn = churn
        self.init = list(init)
        self.never_fit: list[str] = []
        self.nodes: list[str] = []
        self.deleted = 0
        self.created = 0
        self.errors = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"churn-{run_id}", daemon=True)

    def start(self) -> Churner:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(30)

    def _pod(self, k: int) -> None:
        assert self.churn.pod is not None
        name = f"churn-{k:05d}"
        pod = {**self.churn.pod, "metadata": {**self.churn.pod["metadata"], "name": name, "namespace": self.namespace}}
        self.kube.post(pod_path(self.namespace), pod)
        self.created += 1
        if not self.churn.fits:
            self.never_fit.append(name)

    def _delete(self, path: str) -> None:
        with contextlib.suppress(api_errors.NotFound):
            self.kube.request("DELETE", path, query={"gracePeriodSeconds": 0})

    def _run(self) -> None:
        c, k = self.churn, 0
        if c.mode == "delete-init":
            for name in self.init:
                if self._stop.wait(1.0 / c.per_second):
                    return
                self._guard(self._delete, pod_path(self.namespace, name))
                self.deleted += 1
            return
        prev: tuple[str, str, str] | None = None
        while not self._stop.is_set():
            if c.mode == "recreate":
                if prev is not None:
                    node, pod, svc = prev
                    self._guard(self._delete, f"/api/v1/nodes/{node}")
                    self._guard(self._delete, pod_path(self.namespace, pod))
                    self._guard(self._delete, f"/api/v1/namespaces/{self.namespace}/services/{svc}")
                prev = self._guard(self._recreate, k) or prev
            else:
                self._guard(self._pod, k)
            k += 1
            self._stop.wait(c.interval_s)

    def _recreate(self, k: int) -> tuple[str, str, str]:
        c = self.churn
        assert c.node is not None
        assert c.service is not None
        node = orjson.loads(orjson.dumps(c.node))
        name = f"bench-{self.run_id}-churn{k:05d}"
        node["metadata"]["name"] = name
        node["metadata"]["labels"][workloads.HOST_KEY] = name
        self.nodes.append(name)
        cluster.create_ready_node(self.kube, node)
        self._pod(k)
        svc = {**c.service, "metadata": {"name": f"churn-{k:05d}", "namespace": self.namespace}}
        self.kube.post(f"/api/v1/namespaces/{self.namespace}/services", svc)
        return name, self.never_fit[-1], svc["metadata"]["name"]

    def _guard(self, fn: Callable[..., Any], *args: Any) -> Any:
        try:
            return fn(*args)
        except api_errors.KubeError:
            self.errors += 1  # counted and reported; the measured pods are what is judged
            return None


def _create_pod_groups(kube: KubeClient, namespace: str, groups: Sequence[dict[str, Any]], workers: int) -> None:
    path = f"{workloads.PODGROUP_API}/namespaces/{namespace}/podgroups"
    with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="mkpg") as ex:
        for f in [
            ex.submit(kube.post, path, {**g, "metadata": {**g["metadata"], "namespace": namespace}}) for g in groups
        ]:
            f.result()


def _gang_probe(
    kube: KubeClient, namespace: str, scheduler_name: str, watcher: PodWatcher, timeout: float
) -> dict[str, Any]:
    """Is the running scheduler all-or-nothing? (For kube-scheduler: is its gang plugin on?)

    A gang of 3 with only 2 members created, then plain pods one after another, each waited on
    until bound: by then the scheduler has seen the two members and, if it placed pods one by one,
    bound them. ``held``: neither is bound. Then the third member: ``completed`` if all three are
    bound within ``timeout`` (``complete_s`` after its create). The probe's pods and PodGroup are
    deleted afterwards, so the burst starts on empty nodes."""
    probe = workloads.gang_probe()
    _create_pod_groups(kube, namespace, [probe.pod_group], 1)
    held = workloads.for_scheduler(probe.held, scheduler_name, namespace)
    plain = workloads.for_scheduler(probe.plain, scheduler_name, namespace)
    (last,) = workloads.for_scheduler([probe.last], scheduler_name, namespace)
    for p in held:
        kube.post(pod_path(namespace), p)
    for p in plain:
        kube.post(pod_path(namespace), p)
        name = p["metadata"]["name"]
        if not watcher.wait({name}, time.monotonic() + timeout, timeout):
            raise RuntimeError(f"gang probe: the plain pod {name} was not bound within {timeout:.0f}s")
    held_names = {p["metadata"]["name"] for p in held}
    with watcher.cond:
        bound_early = sorted(held_names & watcher.bound.keys())
    t0 = time.monotonic()
    kube.post(pod_path(namespace), last)
    members = held_names | {last["metadata"]["name"]}
    completed = watcher.wait(members, t0 + timeout, timeout)
    with watcher.cond:
        binds = [watcher.bound[n][0] for n in members if n in watcher.bound]
    for p in [*held, *plain, last]:
        with contextlib.suppress(api_errors.NotFound):
            kube.request("DELETE", pod_path(namespace, p["metadata"]["name"]), query={"gracePeriodSeconds": 0})
    with contextlib.suppress(api_errors.NotFound):
        kube.delete(f"{workloads.PODGROUP_API}/namespaces/{namespace}/podgroups/{probe.pod_group['metadata']['name']}")
    return {
        "min_count": len(members),
        "held": not bound_early,
        "bound_before_quorum": bound_early,
        "completed": completed,
        "complete_s": (max(binds) - t0) if completed else math.nan,
    }


def _kwok_pids(kwok_proc: kwok.Kwok | None) -> dict[str, int]:
    """kwok's entry for :class:`CpuWindow` (its own column, out of "other"), when it runs."""
    pid = kwok_proc.pid if kwok_proc is not None else None
    return {"kwok": pid} if pid is not None else {}


def _create_priority_classes(kube: KubeClient, wl: workloads.Workload) -> None:
    for pc in wl.priority_classes:
        with contextlib.suppress(api_errors.Conflict):
            kube.post("/apis/scheduling.k8s.io/v1/priorityclasses", pc)


def run_one(
    which: str,
    cp: ControlPlane,
    kube: KubeClient,
    opts: Options,
    workdir: Path,
    log: Callable[[str], None],
    kwok_proc: kwok.Kwok | None = None,
) -> dict[str, Any]:
    """One round of ``which`` (see :func:`_round`); a round that fails still deletes what it made.

    Why: its Nodes are cluster-scoped, and left behind they are nodes every later round's
    scheduler sees and binds to (one failed smoke workload once turned the rest of a CI session
    red: 33 tests, each finding an extra tainted node or a pod bound outside its workload)."""
    run_id = f"{which}-{uuid.uuid4().hex[:6]}"
    try:
        return _round(which, run_id, cp, kube, opts, workdir, log, kwok_proc)
    except BaseException as e:
        log(f"[{which}] round failed ({type(e).__name__}: {e}); cleaning up {run_id}")
        try:
            _cleanup_failed(kube, f"bench-{run_id}", run_id, opts)
        except Exception as ce:  # the round's own error is the one to report
            log(f"[{which}] the cleanup after it failed too: {type(ce).__name__}: {ce}")
        raise


def _cleanup_failed(kube: KubeClient, namespace: str, run_id: str, opts: Options) -> None:
    """After a failed round: take the finalizers off the namespace's pods (a script's pods may
    hold one), then the round's usual cleanup, DRA objects included (deleting none is harmless)."""
    with contextlib.suppress(api_errors.KubeError):
        for pod in kube.get(pod_path(namespace)).get("items") or []:
            if pod["metadata"].get("finalizers"):
                with contextlib.suppress(api_errors.KubeError):
                    kube.patch(pod_path(namespace, pod["metadata"]["name"]), {"metadata": {"finalizers": None}})
    _cleanup(kube, namespace, run_id, timeout=max(120.0, opts.nodes / 25), dra=True, workers=opts.create_workers)


def _round(  # noqa: C901, PLR0912, PLR0915 -- one round is one timed script (start, create, wait, measure, stop); split, its clock reads would scatter over helpers
    which: str,
    run_id: str,
    cp: ControlPlane,
    kube: KubeClient,
    opts: Options,
    workdir: Path,
    log: Callable[[str], None],
    kwok_proc: kwok.Kwok | None,
) -> dict[str, Any]:
    namespace = f"bench-{run_id}"
    scheduler_name = SCHEDULER_NAMES[which]
    wl = workloads.build(
        opts.workload, opts.nodes, opts.pods, run_id, opts.seed, gang_mix=workloads.parse_gang_mix(opts.gangs)
    )
    pods = workloads.for_scheduler(wl.pods, scheduler_name, namespace)
    init = workloads.for_scheduler(wl.init_pods, scheduler_name, namespace)
    gated = workloads.for_scheduler(wl.gated_pods, scheduler_name, namespace)
    names = {p["metadata"]["name"] for p in pods}
    init_names = {p["metadata"]["name"] for p in init}
    res: dict[str, Any] = {"scheduler": which, "scheduler_name": scheduler_name, "namespace": namespace}
    res.update(workload=wl.name, init_pods=len(init), gated_pods=len(gated))
    churner: Churner | None = None
    runner: script_run.Runner | None = None
    leases: kwok_nodes.LeaseRate | None = None
    if wl.steps and opts.order == "pods-first":
        raise ValueError(f"{wl.name} runs a script (bench/script.py): --order pods-first does not apply")
    # a script's pods are more than --pods, and its paced updates take their time
    scripted = script.created_pods(wl.steps)
    deadline_s = (
        opts.deadline_s if opts.timeout or not wl.steps else 60 + len(scripted) / 20 + script.paced_seconds(wl.steps)
    )

    cluster.create_namespace(kube, namespace)
    if wl.namespace_labels:
        kube.patch(f"/api/v1/namespaces/{namespace}", {"metadata": {"labels": wl.namespace_labels}})
    t0 = time.monotonic()
    if kwok_proc is not None:
        res["kwok"] = kwok_nodes.set_up(kube, wl.nodes, run_id, opts.create_workers, log)
        res["kwok"]["lease_s"] = opts.kwok_lease
        res["kwok"]["lease_writes_expected_per_s"] = len(wl.nodes) * 4 / opts.kwok_lease
        # From here to the last bind, not only the burst: kwok renews the Leases of Nodes created
        # together at the same moment, so a window of a few seconds can miss a whole wave.
        leases = kwok_nodes.LeaseRate(kube)
        res["node_create_s"] = res["kwok"]["node_setup_s"]
        log(
            f"[{which}] {len(wl.nodes)} kwok nodes created in {res['kwok']['node_create_s']:.1f}s, "
            f"all Ready and untainted {res['node_create_s']:.1f}s after the first create"
        )
    else:
        _create_nodes(kube, wl.nodes, opts.create_workers)
        res["node_create_s"] = time.monotonic() - t0
        log(f"[{which}] {len(wl.nodes)} nodes ready in {res['node_create_s']:.1f}s")
    is_dra = bool(wl.slices or wl.device_classes or wl.claim_templates)
    if is_dra:
        _create_dra(kube, wl, namespace)
        log(f"[{which}] {len(wl.slices)} ResourceSlices, {len(wl.device_classes)} DeviceClass(es) created")
    _create_priority_classes(kube, wl)
    if wl.pod_groups:
        t0 = time.monotonic()
        _create_pod_groups(kube, namespace, wl.pod_groups, opts.create_workers)
        log(f"[{which}] {len(wl.pod_groups)} PodGroups created in {time.monotonic() - t0:.1f}s")

    def before_measuring() -> None:
        """The gang probe; gated pods (they stay in the queue), then the init pods, bound before
        measuring."""
        if wl.pod_groups:
            res["gang_probe"] = probe = _gang_probe(kube, namespace, scheduler_name, watcher, opts.startup_timeout)
            log(f"[{which}] gang probe: held={probe['held']} completed={probe['completed']}")
        if gated:
            _create_pods(kube, namespace, gated, opts.create_workers)
        if init:
            t_init = time.monotonic()
            _create_pods(kube, namespace, init, opts.create_workers)
            # The init pods' own deadline (scaled by their number, not the measured pods'): a
            # 5000-node PreemptionBasic has 20000 of them, which no scheduler binds in 110 s here.
            ok = watcher.wait(init_names, t_init + (opts.timeout or 60.0 + len(init) / 20.0), opts.stall)
            res["init_s"] = time.monotonic() - t_init
            res["init_bound"] = len(init_names & watcher.bound.keys())
            log(f"[{which}] {res['init_bound']}/{len(init)} init pods bound in {res['init_s']:.1f}s")
            if not ok:
                raise RuntimeError(f"{which}: init pods not bound ({res['init_bound']}/{len(init)})")
        if runner is not None and script.setup(wl.steps):
            t_setup = time.monotonic()
            if not runner.run(script.setup(wl.steps), t_setup + opts.deadline_s):
                raise RuntimeError(f"{which}: the script's set-up failed: {runner.failed}")
            res["setup_s"] = time.monotonic() - t_setup
            log(f"[{which}] script set-up done in {res['setup_s']:.1f}s")

    watcher = PodWatcher(kube, namespace).start()
    if wl.steps:
        runner = script_run.Runner(
            kube,
            namespace,
            scheduler_name,
            lambda names, deadline, attempted: watcher.wait(names, deadline, opts.stall, attempted=attempted),
            lambda ps: _create_pods(kube, namespace, ps, opts.create_workers),
            workers=opts.create_workers,
        )
    sched: SchedulerProcess | None = None
    spy: PySpy | None = None
    attempts_before: dict[str, float] = {}  # pods-first: the scheduler starts at zero
    try:
        created: dict[str, float] = {}
        if opts.order == "pods-first":
            # Everything exists before the scheduler starts: init pods are then part of the queue.
            _create_pods(kube, namespace, gated + init, opts.create_workers)
            t_burst = time.monotonic()
            created = _create_pods(kube, namespace, pods, opts.create_workers)
            res["pod_create_s"] = time.monotonic() - t_burst
            log(f"[{which}] {len(pods)} pods created in {res['pod_create_s']:.1f}s; starting the scheduler")
            res["busy_before_start"] = wait_settled(opts.settle)
            sched = SchedulerProcess(which, cp, workdir, opts)
            if opts.py_spy and which == "custom":
                spy = PySpy(sched.pid, Path(opts.py_spy), opts.py_spy_rate)
            t_start = sched.started
            window = CpuWindow(cp, None, _kwok_pids(kwok_proc))
            window.pids["scheduler"] = sched.pid
            window.start["scheduler"] = 0.0
            res["startup_s"] = math.nan
        else:
            res["busy_before_start"] = wait_settled(opts.settle)
            during_start = CpuWindow(cp, None)
            sched = SchedulerProcess(which, cp, workdir, opts)
            during_start.pids["scheduler"], during_start.start["scheduler"] = sched.pid, 0.0
            kube.post(pod_path(namespace), _canary(scheduler_name, namespace))
            ok = watcher.wait({CANARY}, time.monotonic() + opts.startup_timeout, opts.startup_timeout, sched.alive)
            if not ok or not sched.alive():
                raise RuntimeError(
                    f"{which}: the canary pod was not bound within {opts.startup_timeout:.0f}s "
                    f"(process alive: {sched.alive()}); log tail:\n{sched.log_tail()}"
                )
            res["startup_s"] = watcher.bound[CANARY][0] - sched.started
            # Who used the CPU meanwhile: a busy control plane lengthens a CPU-bound start.
            res["startup_cpu_s"] = {k: round(v, 3) for k, v in during_start.stop().items()}
            log(
                f"[{which}] scheduler up (canary bound {res['startup_s']:.1f}s after start, machine "
                f"{100 * res['busy_before_start']:.0f}% busy before it; CPU meanwhile: "
                + ", ".join(f"{k} {v:.2f}s" for k, v in res["startup_cpu_s"].items() if k != "host")
                + "); creating pods"
            )
            before_measuring()
            attempts_before = sched.attempts(cp.admin_token)
            if opts.py_spy and which == "custom":
                spy = PySpy(sched.pid, Path(opts.py_spy), opts.py_spy_rate)
                time.sleep(1.0)  # let py-spy attach before the burst
            window = CpuWindow(cp, sched.pid, _kwok_pids(kwok_proc))
            if wl.churn is not None:
                churner = Churner(kube, namespace, run_id, wl.churn, sorted(init_names)).start()
            t_burst = t_start = time.monotonic()
            if runner is not None:
                # the script creates the measured pods among its events; "pod creation" is all of it
                if not runner.run(script.measured(wl.steps), t_start + deadline_s):
                    log(f"[{which}] script stopped: {runner.failed}")
                created = runner.created
            else:
                created = _create_pods(kube, namespace, pods, opts.create_workers, opts.rate)
            res["pod_create_s"] = time.monotonic() - t_burst
            log(f"[{which}] {len(pods)} pods created in {res['pod_create_s']:.1f}s")

        all_bound = watcher.wait(names, t_start + deadline_s, opts.stall)
        t_end = time.monotonic()
        if leases is not None:
            res["kwok"]["lease_writes_per_s"] = leases.stop()
        if churner is not None:
            churner.stop()
        if runner is not None:
            runner.stop()
        cpu = window.stop()
        attempts_after = sched.attempts(cp.admin_token)
        res["attempts"] = {k: v - attempts_before.get(k, 0.0) for k, v in attempts_after.items()}
        res["cpu_s"] = cpu["scheduler"]
        res["apiserver_cpu_s"] = cpu["apiserver"]
        res["cpu_window_s"] = cpu
        if kwok_proc is not None:
            res["kwok"]["cpu_s"] = cpu.get("kwok", math.nan)
        res["loadavg_1m"] = float(Path("/proc/loadavg").read_text().split()[0])
        res["peak_rss_mb"] = proc_status_kb(sched.pid, "VmHWM") / 1024
        res["alive_at_end"] = sched.alive()
        if spy is not None:
            spy.stop()
        if not all_bound:
            log(f"[{which}] stopped waiting: {len(names & watcher.bound.keys())}/{len(names)} bound")
    finally:
        if churner is not None:
            churner.stop()
        if runner is not None:
            runner.stop()
        if sched is not None:
            res["exit_code"] = sched.stop()
        if spy is not None:
            spy.stop()
        watcher.stop()

    with watcher.cond:
        bound = {n: watcher.bound[n] for n in names if n in watcher.bound}
    times = sorted(t for t, _ in bound.values())
    lat = sorted(max(0.0, t - created[n]) for n, (t, _) in bound.items() if n in created)
    n_bound = len(bound)
    span = times[-1] - times[0] if times else 0.0
    res.update(
        pods=len(names),
        bound=n_bound,
        all_bound=n_bound == len(names),
        wait_s=t_end - t_start,
        first_bind_s=(times[0] - t_start) if times else math.nan,
        last_bind_s=(times[-1] - t_start) if times else math.nan,
        throughput_from_start=(n_bound / (times[-1] - t_start)) if times else 0.0,
        attempts_per_bound=(sum(res.get("attempts", {}).values()) / n_bound)
        if n_bound and res.get("attempts")
        else math.nan,
        throughput_first_to_last=((n_bound - 1) / span) if n_bound > 1 and span > 0 else 0.0,
        latency_p50_s=workloads.percentile(lat, 50),
        latency_p90_s=workloads.percentile(lat, 90),
        latency_p99_s=workloads.percentile(lat, 99),
        latency_max_s=lat[-1] if lat else math.nan,
        cpu_ms_per_pod=(res["cpu_s"] * 1000 / n_bound) if n_bound else math.nan,
        watch_restarts=watcher.restarts,
        latencies_s=[round(x, 4) for x in lat],
    )
    if kwok_proc is not None:  # after the measurement: kwok did run every pod that was bound
        res["kwok"]["running_after_s"] = kwok_nodes.wait_running(kube, namespace, n_bound, 60.0 + n_bound / 50)
    final = [p for p in cluster.list_pods(kube, namespace) if p["metadata"]["name"] != CANARY]
    claims = _list_claims(kube, namespace) if is_dra else None
    pending: dict[str, list[str]] | None = None
    ever_bound: list[dict[str, Any]] = []
    if gated or wl.churn is not None:
        # Judged from every bind the watch saw, not only the final list: a churn pod is deleted
        # a second later, and a bind before that would still be a wrong one.
        pending = {
            "gated_bound": [p["metadata"]["name"] for p in gated],
            "unschedulable_bound": list(churner.never_fit) if churner is not None else [],
        }
        with watcher.cond:
            ever_bound = [
                {"metadata": {"name": n}, "spec": {"nodeName": node}} for n, (_, node) in watcher.bound.items()
            ]
    # a script adds and changes nodes: judge against the nodes as they are at the end
    check_nodes = _run_nodes(kube, run_id) if wl.steps else wl.nodes
    res["placement"] = workloads.placement(check_nodes, final, claims, wl.slices)
    extra_checks = {key: check(check_nodes, final) for key, check in wl.checks.items()}
    if runner is not None:
        with watcher.cond:
            seen = {n: t for n, (t, _) in watcher.bound.items()}
        extra_checks["held_bound"] = runner.held_bound(seen)
        res["script"] = runner.summary()
    res["placement"]["violations"].update(extra_checks)
    res["placement"]["violations_total"] += sum(extra_checks.values())
    if kwok_proc is not None:
        res["kwok"]["running_at_end"] = kwok_nodes.running(final)  # every pod of the round but the canary
    if wl.pod_groups:
        with watcher.cond:
            bind_times = {n: watcher.bound[n][0] for n in names if n in watcher.bound}
        times_by_gang = workloads.gang_times(wl.gang_members(), created, bind_times)
        res["gangs"] = workloads.gang_report(times_by_gang, t_end, opts.gang_partial_limit_s)
        probe = res.get("gang_probe") or {}
        gang_viol = dict(res["gangs"]["violations"])
        gang_viol["gang_probe_not_held"] = 0 if probe.get("held", True) else 1
        gang_viol["gang_incomplete"] += 0 if probe.get("completed", True) else 1
        res["placement"]["violations"].update(gang_viol)
        res["placement"]["violations_total"] += sum(gang_viol.values())
    if wl.name == topology.NAME:
        res["topology"] = topology.report(wl.gang_members(), wl.nodes, final)
        split = {"topology_split_required": res["topology"]["split_required"]}
        res["placement"]["violations"].update(split)
        res["placement"]["violations_total"] += sum(split.values())
    if pending is not None:
        extra = workloads.pending_violations(ever_bound, pending, churner.nodes if churner is not None else ())
        res["placement"]["violations"].update({k: extra.get(k, 0) for k in workloads.PENDING_CHECKS})
        res["placement"]["violations_total"] += sum(extra.values())
    if churner is not None:
        res["churn"] = {
            "mode": wl.churn.mode if wl.churn else "",
            "never_fit_pods": len(churner.never_fit),
            "pods_created": churner.created,
            "nodes": len(churner.nodes),
            "init_deleted": churner.deleted,
            "errors": churner.errors,
        }
    if wl.priority_classes and init:
        res["preempted"] = len(init_names - {p["metadata"]["name"] for p in final})
    res["classes"] = dict(wl.classes)
    if sched is not None:
        res["log_errors"] = sched.log_errors()
    if sched is not None and (not res["all_bound"] or opts.keep):
        res["log_tail"] = sched.log_tail(20)
    errors = res.get("log_errors") or {}
    log(
        f"[{which}] bound {n_bound}/{len(names)} in {res['last_bind_s']:.1f}s; "
        f"{res['throughput_first_to_last']:.0f} pods/s; cleaning up"
        + (f" (error log lines: {errors})" if errors else "")
    )
    if runner is not None:
        runner.drop_finalizers()
    # Deleting thousands of Nodes (and their Leases, through the garbage collector) takes the API
    # server minutes: the next round must not start while it is still at it (120 s was too short
    # at 15000 Nodes), so the wait grows with the node count.
    _cleanup(
        kube,
        namespace,
        run_id,
        timeout=max(120.0, len(wl.nodes) / 25),
        dra=is_dra,
        workers=opts.create_workers,
        wait_namespace=opts.settle > 0,
    )
    return res


def _run_nodes(kube: KubeClient, run_id: str) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = kube.get("/api/v1/nodes", {"labelSelector": f"{workloads.RUN_LABEL}={run_id}"})[
        "items"
    ]
    return items


# -- report ---------------------------------------------------------------------------------------

#: (key, label, format, higher_is_better); None: context only.
METRICS: list[tuple[str, str, str, bool | None]] = [
    ("bound", "pods bound", "{:.0f}", True),
    ("throughput_first_to_last", "throughput, first→last bind (pods/s)", "{:.1f}", True),
    ("throughput_from_start", "throughput, from burst start (pods/s)", "{:.1f}", True),
    ("latency_p50_s", "latency p50, created→bound (s)", "{:.3f}", False),
    ("latency_p90_s", "latency p90 (s)", "{:.3f}", False),
    ("latency_p99_s", "latency p99 (s)", "{:.3f}", False),
    ("latency_max_s", "latency max (s)", "{:.3f}", False),
    ("cpu_s", "scheduler CPU during run (s)", "{:.2f}", False),
    ("cpu_ms_per_pod", "scheduler CPU per pod (ms)", "{:.2f}", False),
    ("attempts_per_bound", "scheduling attempts per bound pod", "{:.2f}", False),
    ("peak_rss_mb", "scheduler peak RSS (MB)", "{:.1f}", False),
    ("startup_s", "start-up, process→canary bound (s)", "{:.2f}", False),
    ("apiserver_cpu_s", "kube-apiserver CPU during run (s)", "{:.2f}", None),
    ("cpu_window_s.etcd", "etcd CPU during run (s)", "{:.2f}", None),
    ("cpu_window_s.harness", "harness CPU during run (s)", "{:.2f}", None),
    ("cpu_window_s.other", "other processes' CPU during run (s)", "{:.2f}", None),
    ("loadavg_1m", "load average (1 min) at end", "{:.2f}", None),
    ("pod_create_s", "pod creation, first to last (s)", "{:.2f}", None),
    ("placement.pods_per_node_max", "pods per node, max", "{:.0f}", False),
    ("placement.pods_per_node_stddev", "pods per node, stddev", "{:.2f}", False),
    ("placement.cpu_util_stddev", "CPU utilisation stddev", "{:.4f}", False),
    ("placement.cpu_util_max", "CPU utilisation max", "{:.3f}", False),
    ("placement.mem_util_stddev", "memory utilisation stddev", "{:.4f}", False),
    ("placement.violations_total", "constraint violations", "{:.0f}", False),
    ("gangs.gangs_whole", "gangs wholly bound", "{:.0f}", True),
    ("gangs.time_to_all_bound_p50_s", "gang time to all bound p50 (s)", "{:.3f}", False),
    ("gangs.time_to_all_bound_p99_s", "gang time to all bound p99 (s)", "{:.3f}", False),
    ("gangs.time_to_all_bound_max_s", "gang time to all bound max (s)", "{:.3f}", False),
    ("gangs.partial_max_s", "gang partially bound, max (s)", "{:.3f}", False),
    ("gang_probe.complete_s", "probe gang: last member created → all bound (s)", "{:.3f}", False),
    ("topology.one_rack_share", "whole gangs inside one rack (share)", "{:.3f}", True),
    ("topology.one_block_share", "whole gangs inside one block (share)", "{:.3f}", True),
    ("topology.mean_racks", "racks per whole gang, mean", "{:.2f}", False),
    ("topology.max_racks", "racks per whole gang, max", "{:.0f}", False),
    ("topology.mean_hosts", "nodes per whole gang, mean", "{:.2f}", False),
    ("topology.split_required", "gangs split across blocks (violations)", "{:.0f}", False),
    ("topology.fragmentation.free", "GPUs free after the run", "{:.0f}", None),
    ("topology.fragmentation.free_in_whole_nodes", "GPUs free on wholly free nodes", "{:.0f}", True),
    ("topology.fragmentation.stranded.8", "GPUs stranded for an 8-GPU pod", "{:.0f}", False),
    ("topology.fragmentation.stranded.4", "GPUs stranded for a 4-GPU pod", "{:.0f}", False),
    ("topology.fragmentation.stranded.2", "GPUs stranded for a 2-GPU pod", "{:.0f}", False),
    ("topology.fragmentation.hostable.8", "8-GPU pods still hostable", "{:.0f}", True),
]


#: ``--kwok`` rounds' rows, shown (and given ratios and medians) only where a round has them.
KWOK_METRICS: list[tuple[str, str, str, bool | None]] = [
    ("kwok.node_setup_s", "node set-up: created, kwok Ready, untainted (s)", "{:.1f}", None),
    ("kwok.cpu_s", "kwok CPU during run (s)", "{:.2f}", None),
    ("kwok.lease_writes_per_s", "Lease writes/s, node set-up → last bind", "{:.1f}", None),
    ("kwok.running_at_end", "pods Running after the run (kwok)", "{:.0f}", None),
    ("kwok.running_after_s", "after the run → all bound pods Running (s)", "{:.1f}", None),
]


def _metrics(results: dict[str, dict[str, Any]]) -> list[tuple[str, str, str, bool | None]]:
    """METRICS, plus KWOK_METRICS when a round ran on kwok's Nodes (so a run without ``--kwok``
    reports exactly what it did before the flag existed)."""
    return METRICS + KWOK_METRICS if any("kwok" in r for r in results.values()) else METRICS


def _get(res: dict[str, Any], key: str) -> Any:
    cur: Any = res
    for part in key.split("."):
        if not isinstance(cur, dict) or part not in cur:
            return None
        cur = cur[part]
    return cur


def ceiling(results: dict[str, dict[str, Any]]) -> dict[str, float]:
    """Each scheduler's first-to-last throughput as a fraction of the null binder's (the API
    server's ceiling in the same run; issue #25: ours at least 0.6 on plain pods)."""
    top = _get(results.get("null") or {}, "throughput_first_to_last")
    if not isinstance(top, int | float) or not top:
        return {}
    out: dict[str, float] = {}
    for name in ("custom", "kube"):
        v = _get(results.get(name) or {}, "throughput_first_to_last")
        if isinstance(v, int | float):
            out[name] = v / top
    return out


def ratios(results: dict[str, dict[str, Any]]) -> dict[str, float | None]:
    out: dict[str, float | None] = {}
    if "custom" not in results or "kube" not in results:
        return out
    for key, _, _, _ in _metrics(results):
        a, b = _get(results["custom"], key), _get(results["kube"], key)
        if not (isinstance(a, int | float) and isinstance(b, int | float)) or math.isnan(a) or math.isnan(b):
            out[key] = None
        elif a < 0 or b < 0:
            out[key] = None  # "other processes' CPU" is a difference and can dip below zero
        else:
            out[key] = a / b if b else (1.0 if a == b else None)
    return out


def render_table(results: dict[str, dict[str, Any]], opts: Options, header: str = "") -> str:
    rs = ratios(results)
    cols = [s for s in SCHEDULERS if s in results]
    both = "custom" in cols and "kube" in cols
    rows: list[list[str]] = [["metric", *cols, "custom/kube" if both else "", "better"]]
    for key, label, fmt, higher in _metrics(results):
        section = key.split(".", 1)[0]
        if section in ("gangs", "gang_probe", "topology") and not any(section in results[s] for s in cols):
            continue  # the gang rows only where there are gangs
        cells = []
        for s in cols:
            v = _get(results[s], key)
            if key == "bound":
                cells.append(f"{int(v)}/{results[s]['pods']}" if isinstance(v, int | float) else "-")
            elif isinstance(v, int | float) and not math.isnan(v):
                cells.append(fmt.format(v))
            else:
                cells.append("-")
        r = rs.get(key)
        ratio = f"{r:.2f}x" if r is not None else ("-" if both else "")
        better = "" if higher is None else ("higher" if higher else "lower")
        rows.append([label, *cells, ratio, better])
    for s in cols:
        viol = _get(results[s], "placement.violations") or {}
        bad = {k: v for k, v in viol.items() if v}
        if bad:
            detail = ", ".join(f"{k}={v}" for k, v in bad.items())
            rows.append([f"  violations ({s}): {detail}"] + [""] * (len(rows[0]) - 1))
    widths = [
        max(len(row[i]) for row in rows[1:] if row[1]) if i == 0 else max(len(row[i]) for row in rows)
        for i in range(len(rows[0]))
    ]
    lines = [header] if header else []
    for i, row in enumerate(rows):
        if i and not row[1]:
            lines.append(row[0])
            continue
        cells = [c.ljust(w) if j == 0 else c.rjust(w) for j, (c, w) in enumerate(zip(row, widths, strict=True))]
        lines.append("  ".join(cells))
        if i == 0:
            lines.append("  ".join("-" * w for w in widths))
    return "\n".join(lines)


def machine_info(cp: ControlPlane | None = None) -> dict[str, Any]:
    cpu_model = ""
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu_model = line.split(":", 1)[1].strip()
                break
    return {
        "nproc": os.cpu_count(),
        "sched_affinity": len(os.sched_getaffinity(0)),
        "cpu_model": cpu_model,
        "python": platform.python_version(),
        "kernel": platform.release(),
        "kube_apiserver": cp.version if cp else "",
    }


def run(
    opts: Options,
    cp: ControlPlane | None = None,
    log: Callable[[str], None] | None = None,
    kwok_proc: kwok.Kwok | None = None,
) -> dict[str, Any]:
    """Run the benchmark; with ``cp`` given, reuse that control plane (the smoke test does). With
    ``opts.kwok``: ``kwok_proc``, or one kwok of our own against ``cp`` for the whole run (never two
    on one control plane: they would fight over the same Nodes)."""
    say = log or (lambda msg: print(msg, file=sys.stderr, flush=True))
    own_cp = cp is None
    if "kube" in opts.schedulers and not opts.kube_scheduler:
        bin_dir = cp.bin_dir if cp is not None else find_binaries(need=BENCH_BINARIES)
        if not (bin_dir / "kube-scheduler").exists():
            bin_dir = find_binaries(need=BENCH_BINARIES)
        opts.kube_scheduler = str(bin_dir / "kube-scheduler")
    if cp is None:
        cp = ControlPlane(find_binaries(need=BENCH_BINARIES)).start()
    workdir = Path(tempfile.mkdtemp(prefix="cs-bench-"))
    rounds: dict[str, list[dict[str, Any]]] = {s: [] for s in opts.schedulers}
    own_kwok = opts.kwok and kwok_proc is None
    try:
        if own_kwok:
            kwok_proc = kwok.Kwok.for_control_plane(
                cp, node_lease_duration_seconds=opts.kwok_lease, parallelism=opts.kwok_parallelism
            ).start()
            say(
                f"kwok started (lease {opts.kwok_lease}s, renewed every {opts.kwok_lease / 4:g}s; "
                f"{opts.kwok_parallelism} workers each for Leases, node and pod stages)"
            )
        kube = KubeClient.from_kubeconfig(str(cp.kubeconfig()), qps=0, burst=1, pool_maxsize=opts.create_workers + 8)
        for r in range(opts.rounds):
            for which in opts.schedulers:
                if opts.rounds > 1:
                    say(f"-- round {r + 1}/{opts.rounds}: {which}")
                rounds[which].append(
                    run_one(which, cp, kube, opts, workdir, say, kwok_proc=kwok_proc if opts.kwok else None)
                )
        kube.close()
        info = machine_info(cp)
    finally:
        if own_kwok and kwok_proc is not None:
            kwok_proc.stop()
        if own_cp:
            cp.stop()
        if opts.keep:
            say(f"logs kept in {workdir}")
        else:
            shutil.rmtree(workdir, ignore_errors=True)
    results = {which: aggregate(rs) for which, rs in rounds.items()}
    config = _config(opts)
    return {
        "config": config,
        "machine": info,
        "results": results,
        "ratios": ratios(results),
        "ceiling": ceiling(results),
    }


def _config(opts: Options) -> dict[str, Any]:
    """The options as the report's ``config``; the kwok fields only with ``--kwok``, so a report
    without it is what it was before the flag existed."""
    config = dataclasses.asdict(opts)
    if not opts.kwok:
        del config["kwok"], config["kwok_lease"], config["kwok_parallelism"]
    return config


def run_suite(
    opts: Options, names: Sequence[str], cp: ControlPlane | None = None, log: Callable[[str], None] | None = None
) -> dict[str, Any]:
    """Every workload of ``names`` in turn on one control plane (each as :func:`run`, with the
    same sizes and schedulers): ``{"config", "machine", "suite": {workload: report}}``."""
    say = log or (lambda msg: print(msg, file=sys.stderr, flush=True))
    own_cp = cp is None
    if cp is None:
        cp = ControlPlane(find_binaries(need=BENCH_BINARIES)).start()
    suite: dict[str, dict[str, Any]] = {}
    try:
        for name in names:
            say(f"== {name}")
            try:
                suite[name] = run(dataclasses.replace(opts, workload=name, schedulers=list(opts.schedulers)), cp, say)
            except Exception as e:  # one broken workload must not cost the others' numbers
                say(f"== {name} failed: {e}")
                suite[name] = {"error": f"{type(e).__name__}: {e}", "results": {}, "ratios": {}}
        info = machine_info(cp)
    finally:
        if own_cp:
            cp.stop()
    config = {**_config(opts), "workload": ",".join(names)}
    return {"config": config, "machine": info, "suite": suite, "date": time.strftime("%Y-%m-%d %H:%M %Z")}


#: The suite table's columns: (label, metric key, format, ratio shown).
SUITE_COLUMNS: list[tuple[str, str, str]] = [
    ("throughput (pods/s)", "throughput_first_to_last", "{:.0f}"),
    ("p50 latency (s)", "latency_p50_s", "{:.2f}"),
    ("p99 latency (s)", "latency_p99_s", "{:.2f}"),
    ("CPU per pod (ms)", "cpu_ms_per_pod", "{:.2f}"),
    ("attempts per bound pod", "attempts_per_bound", "{:.2f}"),
    ("peak RSS (MB)", "peak_rss_mb", "{:.0f}"),
    ("start-up to first bind (s)", "startup_s", "{:.2f}"),
    ("pods per node stddev", "placement.pods_per_node_stddev", "{:.2f}"),
]


def _cell(results: dict[str, dict[str, Any]], key: str, fmt: str) -> str:
    vals = []
    for s in SCHEDULERS:
        v = _get(results[s], key) if s in results else None
        vals.append(fmt.format(v) if isinstance(v, int | float) and not math.isnan(v) else "-")
    r = ratios(results).get(key)
    if len(results) < 2:
        return next((vals[i] for i, name in enumerate(SCHEDULERS) if name in results), "-")
    return f"{vals[0]} / {vals[1]} (**{r:.2f}x**)" if r is not None else f"{vals[0]} / {vals[1]}"


def render_suite_markdown(report: dict[str, Any]) -> str:
    """One row per workload; each cell ``custom / kube (ratio)``; bound and violations per side."""
    c, m = report["config"], report["machine"]
    lines = [
        f"nodes={c['nodes']} pods={c['pods']} order={c['order']} rounds={c.get('rounds', 1)} "
        f"qps/burst={c['qps']:g}/{c['burst']} | {m['nproc']} CPUs ({m['cpu_model']}), kube-apiserver "
        f"{m['kube_apiserver']}, python {m['python']} | {report.get('date', '')}",
        "",
        "| workload | bound (custom / kube) | "
        + " | ".join(label for label, _, _ in SUITE_COLUMNS)
        + " | violations |",
        "|---" * (len(SUITE_COLUMNS) + 3) + "|",
    ]
    for name, rep in report["suite"].items():
        results = rep["results"]
        if rep.get("error") or not results:
            lines.append(f"| {name} | failed: {str(rep.get('error', ''))[:80]} |" + " |" * (len(SUITE_COLUMNS) + 1))
            continue
        bound = " / ".join(f"{results[s]['bound']}/{results[s]['pods']}" for s in SCHEDULERS if s in results)
        viol = " / ".join(str(_get(results[s], "placement.violations_total")) for s in SCHEDULERS if s in results)
        cells = [_cell(results, key, fmt) for _, key, fmt in SUITE_COLUMNS]
        lines.append(f"| {name} | {bound} | " + " | ".join(cells) + f" | {viol} |")
    lines += ["", "Cells: custom / kube-scheduler (custom/kube). Throughput: higher is better; the rest: lower."]
    return "\n".join(lines)


def aggregate(rounds: list[dict[str, Any]]) -> dict[str, Any]:
    """One round as is; several: the median of every table metric (the fewest pods bound), with
    each round's numbers kept under ``rounds``."""
    if len(rounds) == 1:
        return rounds[0]
    out: dict[str, Any] = {k: v for k, v in rounds[0].items() if k != "latencies_s"}
    out["placement"] = dict(rounds[0]["placement"])
    out["cpu_window_s"] = dict(rounds[0].get("cpu_window_s") or {})
    for key in ("gangs", "gang_probe", "topology", "kwok"):
        if key in rounds[0]:
            out[key] = dict(rounds[0][key])
    if "topology" in out:  # nested sections the medians below write into: copies, not round 0's
        frag = out["topology"]["fragmentation"] = dict(out["topology"]["fragmentation"])
        frag.update(stranded=dict(frag["stranded"]), hostable=dict(frag["hostable"]))
    for key, _, _, _ in _metrics({str(i): r for i, r in enumerate(rounds)}):
        values = [_get(r, key) for r in rounds]
        nums = [float(v) for v in values if isinstance(v, int | float) and not math.isnan(v)]
        if not nums:
            continue
        agg: float = int(min(nums)) if key == "bound" else statistics.median(nums)
        cur = out
        parts = key.split(".")
        for part in parts[:-1]:
            cur = cur[part]
        cur[parts[-1]] = agg
    out["all_bound"] = all(r["all_bound"] for r in rounds)
    out["pods"] = rounds[0]["pods"]
    out["rounds"] = rounds
    return out


def header_line(report: dict[str, Any]) -> str:
    c, m = report["config"], report["machine"]
    return (
        f"workload={c['workload']} nodes={c['nodes']} pods={c['pods']} order={c['order']} "
        f"{'rate=' + format(c['rate'], 'g') + '/s ' if c.get('rate') else ''}"
        f"{'kwok(lease=' + str(c['kwok_lease']) + 's) ' if c.get('kwok') else ''}"
        f"qps/burst={c['qps']:g}/{c['burst']} kube-plugins={c['kube_plugins']} rounds={c.get('rounds', 1)} | "
        f"nproc={m['nproc']} ({m['cpu_model']}) kube-apiserver {m['kube_apiserver']} python {m['python']}"
    )


def parse_args(argv: Sequence[str] | None = None) -> tuple[Options, str]:
    p = argparse.ArgumentParser(prog="python -m bench.run", description=__doc__.split("\n\n")[0])
    p.add_argument("--nodes", type=int, default=100)
    p.add_argument("--pods", type=int, default=500)
    p.add_argument(
        "--workload",
        default="plain",
        help=f"one of {', '.join(workloads.WORKLOADS + workloads.BY_NAME_ONLY)}; a comma-separated list; "
        f"or 'all' (every one but {', '.join(workloads.BY_NAME_ONLY)}, in that order)",
    )
    p.add_argument("--markdown", default="", help="suite runs: write the table here (default: the --json path, .md)")
    p.add_argument(
        "--schedulers",
        default="custom,kube",
        help="comma-separated: custom, kube, null (a binder without scheduling: the ceiling; run in this order)",
    )
    p.add_argument("--qps", type=float, default=5000.0, help="client QPS for both schedulers (default 5000)")
    p.add_argument("--burst", type=int, default=5000, help="client burst for both schedulers (default 5000)")
    p.add_argument("--order", choices=("scheduler-first", "pods-first"), default="scheduler-first")
    p.add_argument("--kube-plugins", choices=("matched", "default"), default="matched")
    p.add_argument("--create-workers", type=int, default=32)
    p.add_argument(
        "--rate",
        type=float,
        default=0.0,
        help="create pods at this many per second (open-loop arrivals, scheduler-first only); 0: one burst",
    )
    p.add_argument("--timeout", type=float, default=0.0, help="seconds to wait for all binds (default 60 + pods/20)")
    p.add_argument("--stall", type=float, default=30.0, help="give up after this many seconds without a new bind")
    p.add_argument(
        "--settle",
        type=float,
        default=20.0,
        help="before each scheduler starts, wait at most this long for the previous round's namespace to go "
        "and the machine to settle (0: start at once)",
    )
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--rounds", type=int, default=1, help="alternate the schedulers this many times; report medians")
    p.add_argument(
        "--gangs", default="", help="gangs workload: COUNTxSIZE,... (default: 100x8,10x100 scaled to --pods)"
    )
    p.add_argument(
        "--gang-partial-limit", type=float, default=10.0, help="gangs: max seconds a gang may be partly bound"
    )
    p.add_argument(
        "--kwok", action="store_true", help="kwok is the Nodes' kubelet: Lease heartbeats, bound pods go Running"
    )
    p.add_argument(
        "--kwok-lease",
        type=int,
        default=kwok.DEFAULT_LEASE_SECONDS,
        help=f"--kwok: the Nodes' lease duration, renewed every quarter (default {kwok.DEFAULT_LEASE_SECONDS})",
    )
    p.add_argument(
        "--kwok-parallelism",
        type=int,
        default=KWOK_PARALLELISM,
        help=f"--kwok: kwok's workers for Leases, node and pod stages (default {KWOK_PARALLELISM}; kwok's own: 4)",
    )
    p.add_argument("--custom-log-level", default="info")
    p.add_argument("--kube-verbosity", type=int, default=0)
    p.add_argument("--py-spy", default="", help="record our daemon with py-spy (raw stacks) into this file")
    p.add_argument("--py-spy-rate", type=int, default=100, help="py-spy samples per second")
    p.add_argument("--keep", action="store_true", help="keep the scheduler logs and configs")
    p.add_argument("--json", default="", help="write the raw numbers here")
    p.add_argument("--render", metavar="JSON", help="only re-print the table of an earlier --json file")
    a = p.parse_args(argv)
    scheds = [s.strip() for s in a.schedulers.split(",") if s.strip()]
    bad = [s for s in scheds if s not in SCHEDULERS]
    if bad or not scheds:
        p.error(f"--schedulers: unknown {bad} (choose from {', '.join(SCHEDULERS)})")
    names = list(workloads.WORKLOADS) if a.workload == "all" else [w.strip() for w in a.workload.split(",")]
    unknown = [w for w in names if w not in workloads.WORKLOADS + workloads.BY_NAME_ONLY]
    if unknown or not names:
        p.error(f"--workload: unknown {unknown} (choose from {', '.join(workloads.WORKLOADS)} or all)")
    opts = Options(
        nodes=a.nodes,
        pods=a.pods,
        workload=",".join(names),
        schedulers=scheds,
        qps=a.qps,
        burst=a.burst,
        order=a.order,
        kube_plugins=a.kube_plugins,
        create_workers=a.create_workers,
        rate=a.rate,
        timeout=a.timeout,
        stall=a.stall,
        settle=a.settle,
        seed=a.seed,
        custom_log_level=a.custom_log_level,
        kube_verbosity=a.kube_verbosity,
        py_spy=a.py_spy,
        py_spy_rate=a.py_spy_rate,
        keep=a.keep,
        rounds=max(1, a.rounds),
        gangs=a.gangs,
        gang_partial_limit_s=a.gang_partial_limit,
        kwok=a.kwok,
        kwok_lease=a.kwok_lease,
        kwok_parallelism=a.kwok_parallelism,
    )
    try:
        workloads.parse_gang_mix(a.gangs)
    except ValueError as e:
        p.error(f"--gangs: {e}")
    if a.kwok_lease < 4:
        p.error(f"--kwok-lease: {a.kwok_lease}s is too short (kwok renews every quarter; at least 4)")
    return opts, a.json


def summarize_collapsed(path: Path, top: int = 25) -> str:
    """Self and inclusive time per function from py-spy's raw (collapsed) output."""
    self_t: Counter[str] = Counter()
    incl: Counter[str] = Counter()
    total = 0
    for line in path.read_text().splitlines():
        stack, _, n = line.rpartition(" ")
        if not stack or not n.isdigit():
            continue
        count = int(n)
        frames = [f for f in stack.split(";") if not f.startswith("thread (") and not f.startswith("process ")]
        total += count
        if frames:
            self_t[_short(frames[-1])] += count
        for f in {_short(f) for f in frames}:
            incl[f] += count
    if not total:
        return "(no samples)"
    lines = [f"{total} samples", "self %   function"]
    lines += [f"{100 * c / total:6.1f}   {f}" for f, c in self_t.most_common(top)]
    lines += ["", "inclusive %   function"]
    lines += [f"{100 * c / total:6.1f}   {f}" for f, c in incl.most_common(top)]
    return "\n".join(lines)


def _short(frame: str) -> str:
    # "func (path/to/file.py:123)" -> "file.py:func"
    name, _, loc = frame.partition(" (")
    file = loc.rstrip(")").rsplit(":", 1)[0]
    marker = "custom_scheduler/"
    file = file[file.index(marker) :] if marker in file else file.rsplit("/", 1)[-1]
    return f"{file}:{name}"


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if args[:1] == ["--render"]:
        # Re-print the table of an earlier --json file: python -m bench.run --render FILE
        report = orjson.loads(Path(args[1]).read_bytes())
        if "suite" in report:
            print(render_suite_markdown(report))
            return 0
        report["ratios"] = ratios(report["results"])
        print(render_table(report["results"], parse_args([])[0], header_line(report)))
        return 0
    if _arg_value(args, "--workload") == "GangStarvation":
        # Kwok nodes, a stream and a gang over a time window: its own runner (bench/starvation.py).
        from bench import starvation

        rest = [a for a in args if a not in ("--workload", "GangStarvation", "--workload=GangStarvation")]
        return starvation.main(rest)
    opts, json_path = parse_args(argv)
    if "," in opts.workload:  # a list, or all
        return main_suite(opts, json_path, _arg_value(args, "--markdown"))
    report = run(opts)
    print(render_table(report["results"], opts, header_line(report)))
    if report.get("ceiling"):
        shares = ", ".join(f"{k} {v:.0%}" for k, v in report["ceiling"].items())
        print(f"throughput as a share of the null binder's (the ceiling): {shares}")
    if json_path:
        Path(json_path).write_bytes(orjson.dumps(report, option=orjson.OPT_INDENT_2))
        print(f"raw numbers written to {json_path}", file=sys.stderr)
    if opts.py_spy and Path(opts.py_spy).exists():
        print("\npy-spy profile of custom-scheduler:\n" + summarize_collapsed(Path(opts.py_spy)))
    failed = [s for s, r in report["results"].items() if not r.get("all_bound")]
    return 1 if failed else 0


def _arg_value(args: Sequence[str], flag: str) -> str:
    for i, a in enumerate(args):
        if a == flag and i + 1 < len(args):
            return args[i + 1]
        if a.startswith(flag + "="):
            return a.split("=", 1)[1]
    return ""


def main_suite(opts: Options, json_path: str, markdown_path: str) -> int:
    names = opts.workload.split(",")
    report = run_suite(opts, names)
    for name, rep in report["suite"].items():
        if rep.get("error"):
            print(f"== {name}: FAILED: {rep['error']}\n")
            continue
        print(render_table(rep["results"], rep_opts(rep), f"== {name}: " + header_line(rep)) + "\n")
    table = render_suite_markdown(report)
    print(table)
    if json_path:
        Path(json_path).write_bytes(orjson.dumps(report, option=orjson.OPT_INDENT_2))
        print(f"raw numbers written to {json_path}", file=sys.stderr)
    md = markdown_path or (str(Path(json_path).with_suffix(".md")) if json_path else "")
    if md:
        Path(md).write_text(table + "\n")
        print(f"table written to {md}", file=sys.stderr)
    failed = [w for w, rep in report["suite"].items() if rep.get("error")]
    failed += [w for w, rep in report["suite"].items() for r in rep["results"].values() if not r.get("all_bound")]
    return 1 if failed else 0


def rep_opts(report: dict[str, Any]) -> Options:
    return Options(**{k: v for k, v in report["config"].items() if k in {f.name for f in dataclasses.fields(Options)}})


if __name__ == "__main__":
    # SIGTERM unwinds the stack like Ctrl-C, so each finally stops the control plane, kwok and the
    # scheduler it started (by PID); Python's default SIGTERM would leave them running.
    with signals_as_exit():
        raise SystemExit(main())
