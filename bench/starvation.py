"""GangStarvation: a 16-GPU gang behind a steady stream of short 1-GPU pods (issue #28 item 3).

    python -m bench.run --workload GangStarvation [--rounds 2] [--schedulers custom,kube] [--json FILE]
    python -m bench.starvation --rounds 2 --window 120          # the same, with this module's flags

One control plane (etcd, kube-apiserver, kube-controller-manager 1.37) and one kwok for the run;
per round and scheduler, one after the other:

1. a fresh namespace and ``--nodes`` kwok nodes of 8 GPUs (labelled with the round's pool);
2. the scheduler as a subprocess (bench/run.py's commands): ours with nothing but GangScheduling
   enabled and its defaults (a 30 s reservation threshold), kube-scheduler 1.37.2 with
   ``--feature-gates=GenericWorkload=true`` (which adds its GangScheduling plugin);
3. the stream: a thread of this process keeps ``GPUs + 8`` 1-GPU pods not finished (every GPU
   busy, 8 queued), topping up every 0.2 s; each completes after a runtime drawn (seeded) from
   0.5x..1.5x ``--runtime`` seconds, so completions do not come in waves (kwok's
   pod-complete stage, which acts on pods owned by a Job: they are owned by a suspended one) and
   declares that runtime in ``custom-scheduler.io/expected-runtime``; waited on until every GPU
   is busy;
4. the gang: a native PodGroup of 2 members x 8 GPUs; the time from its creation until both
   members are bound, or "starved" when the ``--window`` passes first; beside it, how many stream
   pods were bound during the window (the stream's throughput, so a "fix" that stops the stream
   would show);
5. the Job, pods, PodGroup and nodes deleted; the scheduler stopped by PID.
"""

from __future__ import annotations

import argparse
import contextlib
import math
import random
import statistics
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import orjson

from bench import run as harness
from bench import workloads as wl
from custom_scheduler.devenv import cluster, kwok
from custom_scheduler.devenv.controlplane import ControlPlane, find_binaries
from custom_scheduler.kube import api_errors
from custom_scheduler.kube.client import KubeClient, node_path, pod_path

NAME = "GangStarvation"
#: Stream pods kept queued beyond the GPUs: a freed GPU always has a taker waiting.
QUEUED = 8


def _bound(kube: KubeClient, namespace: str) -> dict[str, tuple[str, str]]:
    """Pod name -> (node, phase) for every pod of the namespace."""
    return {
        p["metadata"]["name"]: (p["spec"].get("nodeName") or "", (p.get("status") or {}).get("phase") or "")
        for p in cluster.list_pods(kube, namespace)
    }


def _busy_gpus(pods: dict[str, tuple[str, str]]) -> int:
    return sum(
        1 for name, (node, phase) in pods.items() if name.startswith("stream-") and node and phase != "Succeeded"
    )


class Stream:
    """Keeps ``target`` stream pods not finished, topping up every 0.2 s (a thread; :meth:`stop`)."""

    def __init__(self, kube: KubeClient, namespace: str, make: Callable[[str], dict[str, Any]], target: int) -> None:
        self.kube, self.namespace, self.make, self.target = kube, namespace, make, target
        self.created = 0
        self.error = ""
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="stream", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(0.2):
            try:
                pods = _bound(self.kube, self.namespace)
                active = sum(
                    1 for n, (_, ph) in pods.items() if n.startswith("stream-") and ph not in ("Succeeded", "Failed")
                )
                for _ in range(self.target - active):
                    self.kube.post(pod_path(self.namespace), self.make(f"stream-{self.created}"))
                    self.created += 1
            except api_errors.KubeError as e:  # a hiccup of the API: report it, keep streaming
                self.error = str(e)[:200]

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=10)


def _queued(pods: dict[str, tuple[str, str]]) -> int:
    return sum(1 for name, (node, _) in pods.items() if name.startswith("stream-") and not node)


def one_round(
    which: str,
    cp: ControlPlane,
    kube: KubeClient,
    opts: harness.Options,
    window: float,
    runtime: int,
    say: Callable[[str], None],
) -> dict[str, Any]:
    """One scheduler's run: see the module docstring, steps 1-5."""
    run_id = uuid.uuid4().hex[:6]
    namespace, pool = f"starve-{which}-{run_id}", f"starve-{run_id}"
    scheduler_name = harness.SCHEDULER_NAMES[which]
    kube.post("/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}})
    nodes = [f"{pool}-{i}" for i in range(opts.nodes)]
    for name in nodes:
        kwok.create_node(kube, wl.starvation_node(name, pool))
    workdir = Path(tempfile.mkdtemp(prefix=f"cs-starve-{which}-"))
    # bench/run.py gives both schedulers their gang plugin for the "gangs" workload.
    proc = harness.SchedulerProcess(which, cp, workdir, harness.Options(**{**vars(opts), "workload": "gangs"}))
    res: dict[str, Any] = {"scheduler": which}
    stream: Stream | None = None
    try:
        gpus = opts.nodes * wl.STARVATION_NODE_GPUS
        owner = kube.post(f"/apis/batch/v1/namespaces/{namespace}/jobs", wl.starvation_owner())
        rng = random.Random(opts.seed)  # the same runtimes, in the same order, for both schedulers

        def stream_pod(name: str) -> dict[str, Any]:
            # Runtimes spread over 0.5x..1.5x so completions do not come in waves that would free
            # whole nodes at once by chance.
            seconds = max(1, round(runtime * (0.5 + rng.random())))
            return wl.starvation_stream_pod(name, scheduler_name, pool, owner, seconds)

        stream = Stream(kube, namespace, stream_pod, target=gpus + QUEUED)
        cluster.wait_for(
            lambda: _busy_gpus(_bound(kube, namespace)) >= gpus,
            timeout=opts.startup_timeout,
            interval=0.5,
            what="every GPU busy",
        )
        group, members = wl.starvation_gang(scheduler_name, pool)
        kube.post(f"{wl.PODGROUP_API}/namespaces/{namespace}/podgroups", group)
        created = time.monotonic()
        before = {n for n, (node, _) in _bound(kube, namespace).items() if node}
        for m in members:
            kube.post(pod_path(namespace), m)
        names = {m["metadata"]["name"] for m in members}
        started = math.nan
        next_report = 0.0
        while time.monotonic() - created < window:
            pods = _bound(kube, namespace)
            if time.monotonic() - created >= next_report:
                next_report += 10.0
                elapsed, busy, queued = time.monotonic() - created, _busy_gpus(pods), _queued(pods)
                say(f"[{which}] t={elapsed:.0f}s: {busy}/{gpus} GPUs busy, {queued} stream pods queued")
            if all(pods.get(n, ("", ""))[0] for n in names):
                started = time.monotonic() - created
                break
            if not proc.alive():
                raise RuntimeError(f"{which} scheduler exited:\n{proc.log_tail()}")
            time.sleep(0.2)
        stream.stop()
        pods = _bound(kube, namespace)
        stream_bound = sum(1 for n, (node, _) in pods.items() if n.startswith("stream-") and node and n not in before)
        res.update(
            gang_start_s=started,
            starved=math.isnan(started),
            window_s=window,
            stream_bound_in_window=stream_bound,
            gpus=gpus,
            runtime_s=runtime,
            stream_error=stream.error,
        )
        say(
            f"[{which}] gang "
            + ("starved for the whole window" if res["starved"] else f"bound {started:.1f}s after creation")
            + f"; {stream_bound} stream pods bound meanwhile"
        )
    finally:
        if stream is not None:
            stream.stop()
        proc.stop()
        _cleanup(kube, namespace, nodes)
    return res


def _cleanup(kube: KubeClient, namespace: str, nodes: Sequence[str]) -> None:
    with contextlib.suppress(api_errors.NotFound):
        kube.request(
            "DELETE", f"/apis/batch/v1/namespaces/{namespace}/jobs/stream", query={"propagationPolicy": "Background"}
        )
    for p in cluster.list_pods(kube, namespace):
        with contextlib.suppress(api_errors.NotFound):
            kube.request("DELETE", pod_path(namespace, p["metadata"]["name"]), query={"gracePeriodSeconds": 0})
    with contextlib.suppress(api_errors.NotFound):
        kube.delete(f"/api/v1/namespaces/{namespace}")
    for name in nodes:
        with contextlib.suppress(api_errors.NotFound):
            kube.delete(node_path(name))


def run(
    opts: harness.Options,
    *,
    window: float = 120.0,
    runtime: int = wl.STARVATION_RUNTIME_S,
    log: Callable[[str], None] | None = None,
) -> dict[str, Any]:
    """Every round, each scheduler in turn, on one control plane and one kwok; the report."""
    say = log or (lambda msg: print(msg, file=sys.stderr, flush=True))
    bin_dir = find_binaries(need=harness.BENCH_BINARIES)
    opts.kube_scheduler = opts.kube_scheduler or str(bin_dir / "kube-scheduler")
    cp = ControlPlane(bin_dir).start()
    k = kwok.Kwok.for_control_plane(cp).start()
    rounds: dict[str, list[dict[str, Any]]] = {s: [] for s in opts.schedulers}
    try:
        kube = KubeClient.from_kubeconfig(str(cp.kubeconfig()), qps=0, burst=1)
        for r in range(opts.rounds):
            for which in opts.schedulers:
                say(f"-- round {r + 1}/{opts.rounds}: {which}")
                rounds[which].append(one_round(which, cp, kube, opts, window, runtime, say))
        kube.close()
    finally:
        k.stop()
        cp.stop()
    return {
        "workload": NAME,
        "config": {"nodes": opts.nodes, "window_s": window, "runtime_s": runtime},
        "rounds": rounds,
    }


def render(report: dict[str, Any]) -> str:
    """One row per scheduler: the gang's time to start in each round ("starved" past the window),
    the median, and the stream's pace (pods bound per second until the gang started or the window
    ended, per round)."""
    cfg = report["config"]
    n = max(len(v) for v in report["rounds"].values())
    lines = [
        f"GangStarvation: {cfg['nodes']} kwok nodes x 8 GPUs, stream of 1-GPU pods of "
        f"{cfg['runtime_s'] / 2:.0f}-{cfg['runtime_s'] * 1.5:.0f} s (declared), "
        f"a 2 x 8-GPU gang, window {cfg['window_s']:.0f} s",
        "",
        "| scheduler | " + " | ".join(f"round {i + 1}" for i in range(n)) + " | median | stream pods bound/s |",
        "|---|" + "---|" * (n + 2),
    ]
    for which, rs in report["rounds"].items():
        cells = ["starved" if r["starved"] else f"{r['gang_start_s']:.1f} s" for r in rs]
        times = [math.inf if r["starved"] else r["gang_start_s"] for r in rs]
        med = statistics.median(times) if times else math.nan
        pace = " / ".join(
            f"{r['stream_bound_in_window'] / (r['window_s'] if r['starved'] else r['gang_start_s']):.1f}" for r in rs
        )
        median = "starved" if math.isinf(med) else f"{med:.1f} s"
        lines.append(f"| {which} | " + " | ".join(cells) + f" | {median} | {pace} |")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.starvation", description=__doc__.split("\n\n")[0])
    p.add_argument("--nodes", type=int, default=4, help="kwok nodes of 8 GPUs (default 4)")
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--schedulers", default="custom,kube")
    p.add_argument("--window", type=float, default=120.0, help="seconds the gang is given before it counts as starved")
    p.add_argument("--runtime", type=int, default=wl.STARVATION_RUNTIME_S, help="seconds each stream pod runs")
    p.add_argument("--json", default="")
    p.add_argument("--render", default="", help="print the table of an earlier --json file and exit")
    a = p.parse_args(argv)
    if a.render:
        print(render(orjson.loads(Path(a.render).read_bytes())))
        return 0
    opts = harness.Options(nodes=a.nodes, pods=0, workload=NAME, schedulers=a.schedulers.split(","), rounds=a.rounds)
    report = run(opts, window=a.window, runtime=a.runtime)
    print(render(report))
    if a.json:
        Path(a.json).write_bytes(orjson.dumps(report, option=orjson.OPT_INDENT_2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
