"""A sample of Kubernetes' own e2e ``[sig-scheduling]`` specs (``e2e.test``, built by ``hack/e2e.sh``)
against our scheduler, the default scheduler of a kwok cluster (:mod:`custom_scheduler.devenv.e2e`).

Why a sample, and only when ``e2e.test`` is cached: building it takes 7-15 minutes on 2 cores and
the whole [sig-scheduling] set about 25 minutes per scheduler, more than CI's budget on a fresh
machine allows beside the rest of the suite. The full comparison with kube-scheduler is
``./hack/dev.sh e2e`` (README, "Kubernetes' e2e specs"). The sample takes one spec of each kind that
finishes in seconds: a predicate, scheduling gates, preemption, a gang, workload-aware preemption.
It has its own cluster (its own control plane, kwok and nodes), not the session's, because the
specs assume they own the cluster's nodes and its default scheduler. ``-m e2e`` selects it.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from custom_scheduler.devenv import e2e, kwok
from custom_scheduler.devenv.controlplane import find_binaries

E2E_TEST = e2e.cached_e2e()

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.skipif(E2E_TEST is None, reason="e2e.test is not cached (hack/e2e.sh builds it; 7-15 minutes)"),
]

#: One fast spec of each kind (names as in the e2e suite; regexp-escaped into the focus).
SAMPLE = (
    "validates that NodeSelector is respected if matching",
    "validates Pods with non-empty schedulingGates are blocked on scheduling",
    "validates basic preemption works",
    "should schedule pods only when quorum is reached",
    "should preempt partial group with Single disruption mode by a pod group",
)


@pytest.mark.timeout(1200)
def test_our_scheduler_passes_a_sample_of_upstreams_sig_scheduling_specs(tmp_path: Path) -> None:
    assert E2E_TEST is not None
    binaries = e2e.Binaries(find_binaries(e2e.BINARIES), kwok.find_kwok(), E2E_TEST.parent)
    focus = e2e.FOCUS + ".*(" + "|".join(_escape(s) for s in SAMPLE) + ")"
    run = e2e.run_suite("custom", binaries, tmp_path, focus=focus)
    assert not run.error, run.error
    got = {s.name: s for s in run.specs}
    for wanted in SAMPLE:
        (name,) = [n for n in got if wanted in n]
        spec = got[name]
        assert spec.status == "passed", f"{name}: {spec.status}\n{spec.message}\n(logs: {run.out_dir})"


def _escape(text: str) -> str:
    """A Ginkgo (Go RE2) regexp matching ``text`` literally."""
    return "".join("\\" + ch if ch in r"\.+*?()|[]{}^$" else ch for ch in text)
