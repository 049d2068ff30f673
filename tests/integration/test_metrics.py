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

import re
import threading
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from custom_scheduler import config
from custom_scheduler.devenv import cluster
from custom_scheduler.kube.client import KubeClient
from custom_scheduler.plugins.builtin import full_registry
from custom_scheduler.server.app import App
from custom_scheduler.server.daemon import serve
from custom_scheduler.server.metrics import Metrics
from tests import secure
from tests.builders import make_node, make_pod
from tests.integration.env import Env

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

CONFIG = """
apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
leaderElection:
  leaderElect: true
  resourceNamespace: kube-system
  resourceName: {lease}
  leaseDuration: 4s
  renewDeadline: 3s
  retryPeriod: 500ms
profiles:
- schedulerName: metrics-test
"""

SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? (\S+)$")
LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="(?:[^"\\]|\\.)*"')


@dataclass
class Daemon:
    app: App
    metrics: Metrics
    token: str

    def scrape(self) -> str:
        status, body, _ = secure.get(f"https://127.0.0.1:{self.app.health_port}/metrics", token=self.token)
        assert status == 200
        return body.decode()


@pytest.fixture
def daemon(env: Env) -> Iterator[Daemon]:
    """``daemon.serve`` (HTTPS, leader election on a Lease of its own) with process metrics."""
    cfg = config.load_config(CONFIG.format(lease=f"metrics-{env.namespace}"), full_registry())
    client = KubeClient.from_kubeconfig(str(env.control_plane.kubeconfig()), qps=50, burst=100)
    metrics = Metrics()
    app = App(cfg, full_registry(), client, metrics=metrics)
    # A seeded cycle: which cycles time their plugins (10 %) is then the same every run.
    app.scheduler.cycle.rng.seed(1)
    result: list[int] = []
    t = threading.Thread(
        target=lambda: result.append(serve(app, metrics, health_address="127.0.0.1:0", sync_timeout=30)),
        daemon=True,
    )
    t.start()
    d = Daemon(app, metrics, env.control_plane.admin_token)
    cluster.wait_for(lambda: app.health_port, timeout=10, what="health server")
    cluster.wait_for(lambda: metrics.sample("custom_scheduler_leader") == 1.0, timeout=20, what="leading")
    yield d
    app.stop_event.set()
    t.join(30)
    assert result == [0]


def _samples(text: str) -> dict[str, list[set[str]]]:
    """Sample name -> the label-name sets of its samples."""
    out: dict[str, list[set[str]]] = defaultdict(list)
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        m = SAMPLE.match(line)
        assert m, line
        out[m.group(1)].append({k for k in LABEL.findall(m.group(2) or "") if k != "le"})
    return out


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
    incoming = {"queue": "active", "event": "PodAdd"}
    assert (daemon.metrics.sample("scheduler_queue_incoming_pods_total", incoming) or 0) >= len(names) + 1
    bind = {"extension_point": "Bind", "status": "Success", "profile": "metrics-test"}
    assert daemon.metrics.sample("scheduler_framework_extension_point_duration_seconds_count", bind) == len(names)
    posts = [
        line
        for line in text.splitlines()
        if line.startswith("rest_client_requests_total{") and 'code="201"' in line and 'method="POST"' in line
    ]
    assert posts, "the Binding POSTs are counted"
