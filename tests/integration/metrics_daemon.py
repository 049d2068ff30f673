"""A scheduler daemon run in-process for scraping its ``/metrics`` (shared by test_metrics.py and
test_dashboards.py, which both need the real HTTPS port, its token check and every metric family).

``daemon.serve`` runs in a thread with leader election on a Lease of its own, so tests in one
session never share a leader; :func:`running_daemon` returns once it leads and stops it after.
"""

from __future__ import annotations

import re
import threading
from collections import defaultdict
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from custom_scheduler import config
from custom_scheduler.devenv import cluster
from custom_scheduler.kube.client import KubeClient
from custom_scheduler.plugins.builtin import full_registry
from custom_scheduler.server.app import App
from custom_scheduler.server.daemon import serve
from custom_scheduler.server.metrics import Metrics
from tests import secure
from tests.integration.env import Env

#: A configuration with leader election (so ``custom_scheduler_leader`` and client-go's
#: ``leader_election_*`` are exported) on ``{lease}`` in kube-system, and one profile ``{profile}``.
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
- schedulerName: {profile}
"""

SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? (\S+)$")
LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="(?:[^"\\]|\\.)*"')


@dataclass
class Daemon:
    app: App
    metrics: Metrics
    token: str

    def scrape(self) -> str:
        """GET /metrics over HTTPS with an authorized token, as Prometheus does."""
        status, body, _ = secure.get(f"https://127.0.0.1:{self.app.health_port}/metrics", token=self.token)
        assert status == 200
        return body.decode()


@contextmanager
def running_daemon(env: Env, *, lease: str, profile: str) -> Iterator[Daemon]:
    """``daemon.serve`` (HTTPS, leader election on ``lease``) with process metrics, leading."""
    cfg = config.load_config(CONFIG.format(lease=lease, profile=profile), full_registry())
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
    try:
        cluster.wait_for(lambda: app.health_port, timeout=10, what="health server")
        cluster.wait_for(lambda: metrics.sample("custom_scheduler_leader") == 1.0, timeout=20, what="leading")
        yield Daemon(app, metrics, env.control_plane.admin_token)
    finally:
        app.stop_event.set()
        t.join(30)
    assert result == [0]


def samples(text: str) -> dict[str, list[set[str]]]:
    """Sample name -> the label-name sets of its samples (``le`` left out)."""
    out: dict[str, list[set[str]]] = defaultdict(list)
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        m = SAMPLE.match(line)
        assert m, line
        out[m.group(1)].append({k for k in LABEL.findall(m.group(2) or "") if k != "le"})
    return out


def families(text: str) -> dict[str, str]:
    """Metric family name (as ``# TYPE`` names it) -> its type, families without samples included."""
    out: dict[str, str] = {}
    for line in text.splitlines():
        if line.startswith("# TYPE "):
            _, _, name, kind = line.split(" ", 3)
            out[name] = kind
    return out
