"""In-memory benchmark of the scheduling cycle alone: no API server, no threads, no I/O.

    python -m bench.cycle [--nodes 100,1000,5000] [--pods 500] [--workload plain] [--profile] [--json FILE]

For each cluster size: a :class:`~custom_scheduler.core.cache.Cache` filled with the workload's
nodes (``model.Node``, parsed from the same JSON the end-to-end harness creates), the default
profile's frameworks from :func:`custom_scheduler.framework.profiles.build_frameworks`, and the
daemon's :class:`~custom_scheduler.core.algorithm.Algorithm`. Each pod runs what the scheduling thread runs
per pod: refresh the snapshot, PreFilter → Filter → PreScore → Score → select, assume, Reserve.
Pods stay assumed, so the cluster fills up as it would.

Reports time per pod (mean, p50, p99) split into snapshot / algorithm / assume+reserve, the nodes
evaluated per pod, the time spent in the garbage collector (the p99 is mostly full, generation-2
collections), and how the time grows with the node count. ``--profile`` prints cProfile's
top functions for the largest size.
"""

from __future__ import annotations

import argparse
import cProfile
import gc
import io
import pstats
import random
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from bench import workloads
from custom_scheduler import config
from custom_scheduler.api.model import Pod, node_from_json, pod_from_json
from custom_scheduler.core.algorithm import Algorithm
from custom_scheduler.core.cache import Cache
from custom_scheduler.framework.profiles import build_frameworks
from custom_scheduler.framework.runtime import Framework
from custom_scheduler.framework.types import CycleState, FitError, Snapshot
from custom_scheduler.plugins.builtin import full_registry

SCHEDULER_NAME = "custom-scheduler"
CONFIG = f"""
apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
leaderElection: {{leaderElect: false}}
profiles:
- schedulerName: {SCHEDULER_NAME}
"""


def _pods(wl: workloads.Workload, namespace: str) -> list[Pod]:
    out = []
    for i, obj in enumerate(workloads.for_scheduler(wl.pods, SCHEDULER_NAME, namespace)):
        obj["metadata"]["uid"] = f"uid-{i:06d}"
        obj["metadata"]["creationTimestamp"] = "2024-01-01T00:00:00Z"
        out.append(pod_from_json(obj))
    return out


@dataclass(slots=True)
class _Timings:
    """Seconds per pod in each part of the cycle (a failed pod: no assume), nodes evaluated per placed pod."""

    snapshot: list[float] = field(default_factory=list)
    algorithm: list[float] = field(default_factory=list)
    assume: list[float] = field(default_factory=list)
    evaluated: list[int] = field(default_factory=list)
    failed: int = 0


class _GcTimer:
    """Time spent in each generation's collections, while installed as a ``gc`` callback."""

    def __init__(self, clock: Callable[[], float]) -> None:
        self._clock = clock
        self._started = 0.0
        self.time = [0.0, 0.0, 0.0]
        self.runs = [0, 0, 0]

    def __call__(self, phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            self._started = self._clock()
        else:
            gen = info["generation"]
            self.time[gen] += self._clock() - self._started
            self.runs[gen] += 1

    def __enter__(self) -> _GcTimer:
        gc.callbacks.append(self)
        return self

    def __exit__(self, *exc: object) -> None:
        gc.callbacks.remove(self)


def _cluster(wl: workloads.Workload, seed: int) -> tuple[Cache, Snapshot, Framework, Algorithm]:
    """The workload's nodes in a cache, and the default profile's framework and algorithm over a snapshot."""
    registry = full_registry()
    cfg = config.load_config(CONFIG, registry)
    cache = Cache()
    for i, obj in enumerate(wl.nodes):
        obj["metadata"]["uid"] = f"node-uid-{i}"
        cache.add_node(node_from_json(obj))
    snap = Snapshot()
    fwk = build_frameworks(
        cfg.profiles,
        registry,
        snap,
        client=None,
        namespace_labels=lambda ns: {"kubernetes.io/metadata.name": ns},
    )[SCHEDULER_NAME]
    algo = Algorithm(rng=random.Random(seed), percentage_of_nodes_to_score=cfg.percentage_of_nodes_to_score)
    return cache, snap, fwk, algo


def _schedule_all(cache: Cache, snap: Snapshot, fwk: Framework, algo: Algorithm, pods: Sequence[Pod]) -> _Timings:
    """What the scheduling thread runs per pod, timed part by part; placed pods stay assumed."""
    clock = time.perf_counter
    t = _Timings()
    for pod in pods:
        t0 = clock()
        cache.update_snapshot(snap)
        t1 = clock()
        state = CycleState()
        try:
            result = algo.schedule(fwk, state, pod, snap)
        except FitError:
            t.failed += 1
            t.algorithm.append(clock() - t1)
            t.snapshot.append(t1 - t0)
            t.assume.append(0.0)
            continue
        t2 = clock()
        assumed = cache.assume(pod, result.node)
        fwk.run_reserve(state, assumed, result.node)
        cache.finish_binding(pod.uid)
        t3 = clock()
        t.snapshot.append(t1 - t0)
        t.algorithm.append(t2 - t1)
        t.assume.append(t3 - t2)
        t.evaluated.append(result.evaluated)
    return t


def bench_size(n_nodes: int, n_pods: int, workload: str, seed: int, profile: cProfile.Profile | None) -> dict[str, Any]:
    wl = workloads.build(workload, n_nodes, n_pods, "cycle", seed)
    cache, snap, fwk, algo = _cluster(wl, seed)
    pods = _pods(wl, "bench")
    gc.collect()
    with _GcTimer(time.perf_counter) as gct:
        if profile is not None:
            profile.enable()
        t_all = time.perf_counter()
        t = _schedule_all(cache, snap, fwk, algo, pods)
        wall = time.perf_counter() - t_all
    if profile is not None:
        profile.disable()
    return _row(n_nodes, n_pods, workload, t, gct, wall)


def _row(n_nodes: int, n_pods: int, workload: str, t: _Timings, gct: _GcTimer, wall: float) -> dict[str, Any]:
    per_pod = sorted(a + b + c for a, b, c in zip(t.snapshot, t.algorithm, t.assume, strict=True))
    ms = 1000.0
    return {
        "nodes": n_nodes,
        "pods": n_pods,
        "workload": workload,
        "failed": t.failed,
        "wall_s": wall,
        "pods_per_s": n_pods / wall if wall else 0.0,
        "mean_ms": statistics.fmean(per_pod) * ms,
        "p50_ms": workloads.percentile(per_pod, 50) * ms,
        "p99_ms": workloads.percentile(per_pod, 99) * ms,
        "snapshot_ms": statistics.fmean(t.snapshot) * ms,
        "algorithm_ms": statistics.fmean(t.algorithm) * ms,
        "assume_reserve_ms": statistics.fmean(t.assume) * ms,
        "evaluated_mean": statistics.fmean(t.evaluated) if t.evaluated else 0.0,
        "gc_ms_per_pod": sum(gct.time) * ms / n_pods,
        "gc_collections": gct.runs,
        "gc_gen2_ms_mean": gct.time[2] * ms / gct.runs[2] if gct.runs[2] else 0.0,
    }


def render(rows: list[dict[str, Any]]) -> str:
    base = rows[0] if rows else None
    head = [
        "nodes",
        "pods",
        "ms/pod mean",
        "p50",
        "p99",
        "pods/s",
        "snapshot ms",
        "algorithm ms",
        "assume+reserve ms",
        "nodes evaluated",
        "GC ms/pod",
        "gen2 GCs",
        "time x",
        "nodes x",
        "failed",
    ]
    table = [head]
    for r in rows:
        assert base is not None
        table.append(
            [
                str(r["nodes"]),
                str(r["pods"]),
                f"{r['mean_ms']:.3f}",
                f"{r['p50_ms']:.3f}",
                f"{r['p99_ms']:.3f}",
                f"{r['pods_per_s']:.0f}",
                f"{r['snapshot_ms']:.3f}",
                f"{r['algorithm_ms']:.3f}",
                f"{r['assume_reserve_ms']:.3f}",
                f"{r['evaluated_mean']:.0f}",
                f"{r['gc_ms_per_pod']:.3f}",
                f"{r['gc_collections'][2]} x {r['gc_gen2_ms_mean']:.0f}ms",
                f"{r['mean_ms'] / base['mean_ms']:.1f}",
                f"{r['nodes'] / base['nodes']:.0f}",
                str(r["failed"]),
            ]
        )
    widths = [max(len(row[i]) for row in table) for i in range(len(head))]
    lines = []
    for i, row in enumerate(table):
        lines.append("  ".join(c.rjust(w) for c, w in zip(row, widths, strict=True)))
        if i == 0:
            lines.append("  ".join("-" * w for w in widths))
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.cycle", description=__doc__.split("\n\n")[0])
    p.add_argument("--nodes", default="100,1000,5000", help="comma-separated cluster sizes")
    p.add_argument("--pods", type=int, default=500, help="pods scheduled per size")
    p.add_argument("--workload", choices=workloads.WORKLOADS, default="plain")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--profile", action="store_true", help="cProfile the largest size; print the top functions")
    p.add_argument("--json", default="")
    a = p.parse_args(argv)
    sizes = [int(x) for x in a.nodes.split(",") if x.strip()]
    rows = []
    prof: cProfile.Profile | None = None
    for i, n in enumerate(sizes):
        prof = cProfile.Profile() if a.profile and i == len(sizes) - 1 else None
        rows.append(bench_size(n, a.pods, a.workload, a.seed, prof))
        print(f"{n} nodes: {rows[-1]['mean_ms']:.3f} ms/pod", file=sys.stderr, flush=True)
    print(f"scheduling cycle, in memory: workload={a.workload}, {a.pods} pods per size, default profile")
    print(render(rows))
    if prof is not None:
        out = io.StringIO()
        stats = pstats.Stats(prof, stream=out)
        stats.sort_stats("tottime").print_stats(20)
        stats.sort_stats("cumulative").print_stats(25)
        print(out.getvalue())
    if a.json:
        Path(a.json).write_bytes(orjson.dumps({"workload": a.workload, "rows": rows}, option=orjson.OPT_INDENT_2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
