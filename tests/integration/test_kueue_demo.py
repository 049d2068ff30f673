"""``./hack/dev.sh demo kueue`` end to end on the session's control plane: kwok, the real Kueue
manager and the real daemon process; every Job runs, where Kueue's constraints say, within quota.

A module of its own: the demo starts its own Kueue, which must not run beside the module-scoped one
of ``test_kueue.py`` (two managers without leader election would both admit).
"""

from __future__ import annotations

import io

import pytest

from custom_scheduler.devenv import kueue as kq
from custom_scheduler.devenv import kueue_demo
from custom_scheduler.devenv.controlplane import ControlPlane


def test_kueue_demo_runs_every_job_where_kueue_says_within_quota(control_plane: ControlPlane) -> None:
    bin_dir = kq.cached_kueue()
    if bin_dir is None:
        # Like the e2e sample: a fresh machine's CI does not pay the ~10-minute build.
        pytest.skip("Kueue is not built: ./hack/dev.sh setup (or kueue) builds it (about 7 minutes the first time)")
    out = io.StringIO()
    placed, peak, rc = kueue_demo.run_kueue_demo(control_plane, bin_dir, out=out, timeout=120, cleanup=True)
    text = out.getvalue()
    assert rc == 0, text
    pools = {name: pool for name, pool, *_ in kueue_demo.NODES}
    racks = {name: rack for name, _, rack, _ in kueue_demo.NODES}
    for spec in kueue_demo.JOBS:
        nodes = placed.get(spec.name, [])
        assert len(nodes) == spec.pods, (spec.name, text)
        want_pool = "tas" if spec.queue == "tas" else "batch"
        assert {pools[n] for n in nodes} == {want_pool}, (spec.name, nodes)
    # The rack pair shares a rack, and only rack-b has two free nodes.
    assert {racks[n] for n in placed["rack-pair"]} == {"rack-b"}
    assert not kq.over_quota(peak, kueue_demo.BATCH_QUOTA), peak
    assert "Kueue admitted gang" in text
    assert "custom-scheduler bound" in text
