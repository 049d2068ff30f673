"""The topology-gangs workload end to end at a small size, both schedulers, on the session's real
control plane: it keeps the harness wired (PodGroups with the native topology field, the GPU
nodes, kube-scheduler's TopologyAwareWorkloadScheduling gate, the topology report and table rows)
and checks what each scheduler promises. Not timed: the figures come from ``python -m bench.run``.

220 nodes make 20 blocks of 2 racks (racks_per_block = 2), so "one rack" and "one block" differ;
64 pods are gangs of 8 to 64 members, each of which fits a rack of an empty cluster.
"""

from __future__ import annotations

import pytest

from bench import run as bench_run
from bench import topology, workloads
from custom_scheduler.devenv.controlplane import ControlPlane

pytestmark = pytest.mark.timeout(300)


def test_both_schedulers_keep_every_gang_in_one_block_and_ours_in_one_rack(control_plane: ControlPlane) -> None:
    opts = bench_run.Options(
        settle=0, nodes=220, pods=64, workload=topology.NAME, schedulers=["custom", "kube"], stall=30.0
    )
    report = bench_run.run(opts, cp=control_plane, log=lambda msg: None)
    for which in ("custom", "kube"):
        r = report["results"][which]
        assert r["bound"] == r["pods"], (which, r.get("log_tail", ""))
        topo = r["topology"]
        assert topo["gangs_whole"] == r["gangs"]["gangs"] > 1, (which, topo)
        # the required level holds for both: no gang split across blocks
        assert topo["split_required"] == 0, (which, topo)
        assert topo["one_block_share"] == 1.0, (which, topo)
        assert r["placement"]["violations_total"] == 0, (which, r["placement"]["violations"])
        frag = topo["fragmentation"]
        assert frag["capacity"] == 220 * topology.GPUS_PER_NODE
        assert frag["free"] == frag["capacity"] - _gpus_requested(opts)
    # ours also honours the preferred level: every gang fits a rack here, so every gang is in one
    assert report["results"]["custom"]["topology"]["one_rack_share"] == 1.0, report["results"]["custom"]["topology"]
    table = bench_run.render_table(report["results"], opts)
    assert "whole gangs inside one rack (share)" in table
    assert "GPUs stranded for an 8-GPU pod" in table


def _gpus_requested(opts: bench_run.Options) -> int:
    """The GPUs every measured pod asks for, from the workload the harness built (same seed)."""
    wl = workloads.build(topology.NAME, opts.nodes, opts.pods, "x", opts.seed)
    return sum(int(p["spec"]["containers"][0]["resources"]["requests"][topology.GPU]) for p in wl.pods)
