"""``/metrics`` of the daemon on the real API server, scraped over HTTPS with a token the API server
authorizes, after it scheduled pods (one unschedulable, so PostFilter/preemption runs):

- every STABLE and BETA metric of kube-scheduler 1.37.2 is there with upstream's label names, with
  samples (``scheduler_permit_wait_duration_seconds`` only as a family: it is observed when a pod
  waits at Permit, i.e. a gang, which tests/integration/test_gangs.py covers), and client-go's
  ``rest_client_*`` and ``leader_election_master_status``;
- every metric name the kubernetes-mixin scheduler dashboard, recording rules and alerts query
  (tests/integration/kubernetes_mixin_scheduler_metrics.txt, which names the commit read) has samples;
- there are no ``_created`` series.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from custom_scheduler.devenv import cluster
from tests.builders import make_node, make_pod
from tests.integration.env import Env
from tests.integration.metrics_daemon import Daemon, running_daemon
from tests.integration.metrics_daemon import samples as _samples

MIXIN_NAMES = Path(__file__).with_name("kubernetes_mixin_scheduler_metrics.txt")

#: kube-scheduler 1.37.2's STABLE and BETA metrics (pkg/scheduler/metrics/metrics.go) by sample
#: name, with their label names (histograms' ``le`` aside), and client-go's series it exports.
UPSTREAM: dict[str, set[str]] = {
    "scheduler_schedule_attempts_total": {"result", "profile"},
    "scheduler_scheduling_attempt_duration_seconds_bucket": {"result", "profile"},
    "scheduler_scheduling_algorithm_duration_seconds_bucket": set(),
    "scheduler_preemption_victims_bucket": set(),
    "scheduler_preemption_attempts_total": set(),
    "scheduler_pending_pods": {"queue"},
    "scheduler_goroutines": {"operation"},
    "scheduler_pod_scheduling_sli_duration_seconds_bucket": {"attempts"},
    "scheduler_pod_scheduling_attempts_bucket": set(),
    "scheduler_framework_extension_point_duration_seconds_bucket": {"extension_point", "status", "profile"},
    "scheduler_plugin_execution_duration_seconds_bucket": {"plugin", "extension_point", "status"},
    "scheduler_queue_incoming_pods_total": {"queue", "event"},
    "scheduler_unschedulable_pods": {"plugin", "profile"},
    "scheduler_plugin_evaluation_total": {"plugin", "extension_point", "profile"},
    "rest_client_requests_total": {"code", "method", "host"},
    "rest_client_request_duration_seconds_bucket": {"verb", "host"},
    "rest_client_rate_limiter_duration_seconds_bucket": {"verb", "host"},
    "leader_election_master_status": {"name"},
}
#: Families that exist before anything observes them (no samples in this test; see the docstring).
FAMILY_ONLY = {"scheduler_permit_wait_duration_seconds": "histogram"}


@pytest.fixture
def daemon(env: Env) -> Iterator[Daemon]:
    """``daemon.serve`` (HTTPS, leader election on a Lease of its own) with process metrics."""
    with running_daemon(env, lease=f"metrics-{env.namespace}", profile="metrics-test") as d:
        yield d


def _mixin_names() -> set[str]:
    lines = (line.strip() for line in MIXIN_NAMES.read_text().splitlines())
    return {line for line in lines if line and not line.startswith("#")}


def test_metrics_cover_kube_scheduler_and_the_kubernetes_mixin(env: Env, daemon: Daemon) -> None:
    for i in range(2):
        env.nodes(make_node(f"metrics-{i}").capacity(cpu="8", memory="16Gi", pods="110"))
    names = [f"fits-{i}" for i in range(40)]
    for name in names:
        env.create_pod(make_pod(name).req(cpu="10m", memory="16Mi").scheduler("metrics-test").obj())
    env.create_pod(make_pod("too-big").req(cpu="64").scheduler("metrics-test").obj())
    env.wait_bound(*names, timeout=60)

    def reasons_seen() -> bool:
        labels = {"plugin": "NodeResourcesFit", "profile": "metrics-test"}
        return daemon.metrics.sample("scheduler_unschedulable_pods", labels) == 1.0

    cluster.wait_for(reasons_seen, timeout=30, what="the unschedulable pod counted")
    text = daemon.scrape()
    samples = _samples(text)

    for name, labels in UPSTREAM.items():
        assert samples.get(name), f"{name}: no samples"
        assert all(s == labels for s in samples[name]), (name, samples[name])
    for family, kind in FAMILY_ONLY.items():
        assert f"# TYPE {family} {kind}" in text
    for name in sorted(_mixin_names()):
        assert samples.get(name), f"{name} (kubernetes-mixin) has no samples"
    assert not [name for name in samples if name.endswith("_created")]

    scheduled = {"result": "scheduled", "profile": "metrics-test"}
    assert daemon.metrics.sample("scheduler_schedule_attempts_total", scheduled) == len(names)
    assert daemon.metrics.sample("scheduler_pod_scheduling_attempts_count") == len(names)
    assert (daemon.metrics.sample("scheduler_preemption_attempts_total") or 0) >= 1
    assert daemon.metrics.sample("leader_election_master_status", {"name": "custom-scheduler"}) == 1.0
    incoming = {"queue": "active", "event": "UnscheduledPodAdd"}
    assert (daemon.metrics.sample("scheduler_queue_incoming_pods_total", incoming) or 0) >= len(names) + 1
    bind = {"extension_point": "Bind", "status": "Success", "profile": "metrics-test"}
    assert daemon.metrics.sample("scheduler_framework_extension_point_duration_seconds_count", bind) == len(names)
    posts = [
        line
        for line in text.splitlines()
        if line.startswith("rest_client_requests_total{") and 'code="201"' in line and 'method="POST"' in line
    ]
    assert posts, "the Binding POSTs are counted"
