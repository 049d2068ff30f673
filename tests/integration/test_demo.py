"""The README's demo runs the real daemon process end to end and ends cleanly on SIGTERM."""

from __future__ import annotations

import io

from custom_scheduler.devenv.controlplane import ControlPlane
from custom_scheduler.devenv.demo import run_demo


def test_demo_places_the_workload_and_exits_0_on_sigterm(control_plane: ControlPlane) -> None:
    out = io.StringIO()
    result, rc = run_demo(control_plane, out=out, timeout=60, cleanup=True)
    assert rc == 0, out.getvalue()
    assert all(result[f"web-{i}"].startswith("node-") for i in range(6))
    assert result["train-0"] == "gpu-1"
    assert result["train-1"] == "gpu-1"
    assert "Insufficient nvidia.com/gpu" in result["train-2"]
    assert "Insufficient cpu" in result["batch-huge"]
    assert "not ours" in result["other-scheduler"]
    assert "Where each pod went" in out.getvalue()
