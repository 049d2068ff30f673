"""bench/run.py's wiring of the topology-gangs workload, pure: the configs both schedulers get,
the name being accepted on the command line, and the medians over rounds of its nested numbers."""

from __future__ import annotations

from pathlib import Path
from typing import Any, cast

import pytest

from bench import run as bench_run
from bench import topology as topo
from custom_scheduler.config import load_config
from custom_scheduler.devenv.controlplane import ControlPlane
from custom_scheduler.plugins.builtin import full_registry
from custom_scheduler.plugins.gang_scheduling import GangSchedulingArgs


class _FakeControlPlane:
    """The two things the command builders read of a control plane."""

    bin_dir = Path("/opt/k8s/bin")

    def kubeconfig(self) -> Path:
        return Path("/tmp/kubeconfig")


def _opts(workload: str) -> bench_run.Options:
    opts, _ = bench_run.parse_args(["--workload", workload, "--nodes", "50", "--pods", "40"])
    return opts


def test_the_workload_is_accepted_by_name_but_not_part_of_all() -> None:
    assert _opts(topo.NAME).workload == topo.NAME
    assert topo.NAME not in _opts("all").workload.split(",")


def test_our_profile_enables_gang_scheduling_with_the_workload_hierarchy(tmp_path: Path) -> None:
    cp = cast(ControlPlane, _FakeControlPlane())
    bench_run.custom_command(cp, tmp_path, _opts(topo.NAME))
    cfg = load_config(tmp_path / "custom-scheduler.yaml", full_registry())
    [profile] = cfg.profiles
    assert "GangScheduling" in profile.plugin_names()
    args = profile.plugin_args["GangScheduling"]
    assert isinstance(args, GangSchedulingArgs)
    assert args.topology_levels == topo.LEVELS


@pytest.mark.parametrize(
    ("workload", "gates"),
    [
        (topo.NAME, "--feature-gates=GenericWorkload=true,TopologyAwareWorkloadScheduling=true"),
        ("gangs", "--feature-gates=GenericWorkload=true"),
        ("plain", None),
    ],
)
def test_kube_scheduler_gets_the_topology_gate_only_for_the_topology_workload(
    tmp_path: Path, workload: str, gates: str | None
) -> None:
    argv, _ = bench_run.kube_command(cast(ControlPlane, _FakeControlPlane()), tmp_path, _opts(workload))
    assert [a for a in argv if a.startswith("--feature-gates")] == ([gates] if gates else [])


def _round(share: float, stranded8: int, split: int) -> dict[str, Any]:
    return {
        "bound": 10,
        "pods": 10,
        "all_bound": True,
        "placement": {"violations_total": split},
        "topology": {
            "one_rack_share": share,
            "split_required": split,
            "fragmentation": {"free": 5, "stranded": {"8": stranded8}, "hostable": {"8": 1}},
        },
    }


def test_rounds_report_medians_of_the_nested_topology_numbers_and_keep_each_round() -> None:
    rounds = [_round(0.5, 10, 0), _round(0.9, 30, 2), _round(0.7, 20, 1)]
    out = bench_run.aggregate(rounds)
    assert out["topology"]["one_rack_share"] == pytest.approx(0.7)
    assert out["topology"]["fragmentation"]["stranded"]["8"] == 20
    assert out["topology"]["split_required"] == 1
    # round 0's own numbers are not overwritten by the medians
    assert rounds[0]["topology"]["fragmentation"]["stranded"]["8"] == 10
    assert [r["topology"]["one_rack_share"] for r in out["rounds"]] == [0.5, 0.9, 0.7]
