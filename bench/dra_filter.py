"""In-memory benchmark of DynamicResources' scheduling-cycle hot path: PreFilter + Filter over every
node for one pod with one claim, then Reserve, the way the daemon runs it in a burst.

    python -m bench.dra_filter [--nodes 500] [--pods 300] [--profile]

The objects are the ``dra`` workload's (bench/workloads.py): every other node has a ResourceSlice of
4-8 GPUs, one DeviceClass with a CEL selector, one claim of one GPU per pod. Filter is the end-to-end
workload's cost centre (its throughput was bound by it), and this isolates it from the API server,
so a change to the allocator can be timed in seconds and profiled with cProfile.

Reports milliseconds per pod (mean, p50, p99) and checks that no device went to two pods.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import pstats
import statistics
import sys
import time
from collections.abc import Sequence
from typing import Any

from bench import workloads
from custom_scheduler.api import dra
from custom_scheduler.api.model import node_from_json, pod_from_json
from custom_scheduler.framework import dra_store as fdra
from custom_scheduler.framework.handle import SnapshotHandle
from custom_scheduler.framework.types import CycleState, NodeInfo, Snapshot
from custom_scheduler.plugins import dynamic_resources

NAMESPACE = "bench"


def _claim(i: int, class_name: str) -> dict[str, Any]:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": f"c{i:06d}", "namespace": NAMESPACE, "uid": f"claim-{i}", "resourceVersion": "1"},
        "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": class_name}}]}},
    }


def run(n_nodes: int, n_pods: int, profile: bool = False) -> dict[str, Any]:
    wl = workloads.dra(n_nodes, n_pods, "mem")
    store = fdra.DRAStore()
    store.load(fdra.SLICE, (dra.resource_slice_from_json(s) for s in wl.slices))
    store.load(fdra.CLASS, (dra.device_class_from_json(c) for c in wl.device_classes))
    class_name = wl.device_classes[0]["metadata"]["name"]
    gpus = sum(len(s["spec"]["devices"]) for s in wl.slices)
    n_pods = min(n_pods, gpus)
    claims = [_claim(i, class_name) for i in range(n_pods)]
    store.load(fdra.CLAIM, (dra.resource_claim_from_json(c) for c in claims))
    infos = [NodeInfo(node_from_json(n)) for n in wl.nodes]
    handle = SnapshotHandle(Snapshot({ni.name: ni for ni in infos}, infos), profile_name="custom-scheduler", dra=store)
    plugin = dynamic_resources.DynamicResources(None, handle)

    times: list[float] = []
    chosen: list[dra.DeviceID] = []
    prof = cProfile.Profile() if profile else None
    for i in range(n_pods):
        obj = {
            "metadata": {"name": f"p{i:06d}", "namespace": NAMESPACE, "uid": f"pod-{i}"},
            "spec": {"resourceClaims": [{"name": "gpu", "resourceClaimName": f"c{i:06d}"}], "containers": []},
        }
        pod = pod_from_json(obj)
        t0 = time.perf_counter()
        if prof is not None:
            prof.enable()
        state = CycleState()
        plugin.pre_filter(state, pod, infos)
        feasible = [ni.name for ni in infos if plugin.filter(state, pod, ni).is_success]
        if feasible:
            plugin.reserve(state, pod, feasible[0])
        if prof is not None:
            prof.disable()
        times.append(time.perf_counter() - t0)
        if feasible:
            s = state.read(dynamic_resources.STATE_KEY)
            chosen.extend(r.id for r in (s.allocations(feasible[0]) or [])[0].results)
    out: dict[str, Any] = {
        "nodes": n_nodes,
        "pods": n_pods,
        "ms_per_pod_mean": statistics.fmean(times) * 1000,
        "ms_per_pod_p50": statistics.median(times) * 1000,
        "ms_per_pod_p99": sorted(times)[int(0.99 * (len(times) - 1))] * 1000,
        "allocated": len(chosen),
        "double_allocations": len(chosen) - len(set(chosen)),
    }
    if prof is not None:
        buf = io.StringIO()
        pstats.Stats(prof, stream=buf).sort_stats("tottime").print_stats(25)
        out["profile"] = buf.getvalue()
    return out


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.dra_filter", description=__doc__.split("\n\n")[0])
    p.add_argument("--nodes", type=int, default=500)
    p.add_argument("--pods", type=int, default=300)
    p.add_argument("--profile", action="store_true")
    a = p.parse_args(argv)
    res = run(a.nodes, a.pods, a.profile)
    prof = res.pop("profile", "")
    print(" ".join(f"{k}={v:.3f}" if isinstance(v, float) else f"{k}={v}" for k, v in res.items()))
    if prof:
        print(prof)
    return 1 if res["double_allocations"] else 0


if __name__ == "__main__":
    sys.exit(main())
