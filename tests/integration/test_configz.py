"""``/configz`` on the real API server: the daemon (``daemon.serve`` as the scheduler's
ServiceAccount with the manifests' RBAC, so the TokenReviews and SubjectAccessReviews are real)
serves its effective configuration as component-base's ``{"componentconfig": ...}`` JSON, to the
identities the API server lets ``get`` the path ``/configz``, refusing the others exactly as it
refuses them ``/metrics``; after the config file changes, the new config."""

from __future__ import annotations

import threading
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson
import pytest

from custom_scheduler import config
from custom_scheduler.devenv import cluster
from custom_scheduler.devenv.controlplane import ADMIN_TOKEN_USER, ControlPlane
from custom_scheduler.kube.client import KubeClient
from custom_scheduler.plugins.builtin import full_registry
from custom_scheduler.server.app import App
from custom_scheduler.server.daemon import serve
from custom_scheduler.server.metrics import Metrics
from tests import kubectl as k
from tests.secure import get

CONFIG = """
apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
leaderElection: {leaderElect: false}
percentageOfNodesToScore: 40
profiles:
- schedulerName: configz-main
  plugins:
    score:
      enabled:
      - {name: TaintToleration, weight: 250}
      - {name: NodeAffinity}
  pluginConfig:
  - name: DynamicResources
    args: {filterTimeout: 750ms}
  - name: NodeResourcesFit
    args:
      scoringStrategy:
        type: MostAllocated
        resources: [{name: cpu, weight: 3}, {name: memory, weight: 1}]
- schedulerName: configz-binpack
  plugins:
    score:
      disabled: [{name: "*"}]
      enabled: [{name: NodeResourcesFit, weight: 5}]
"""

RELOADED = """
apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
leaderElection: {leaderElect: false}
profiles:
- schedulerName: configz-main
  pluginConfig:
  - name: DynamicResources
    args: {filterTimeout: 0s, bindingTimeout: 2m}
"""


@dataclass
class Daemon:
    app: App
    config_file: Path

    @property
    def url(self) -> str:
        return f"https://127.0.0.1:{self.app.health_port}"


@pytest.fixture
def daemon(control_plane: ControlPlane, tmp_path: Path) -> Iterator[Daemon]:
    k.apply_rbac(control_plane)
    sa = KubeClient.from_kubeconfig(str(control_plane.kubeconfig(k.SCHEDULER_USER)), qps=0, burst=1)
    path = tmp_path / "config.yaml"
    path.write_text(CONFIG)
    metrics = Metrics(process_collectors=False)
    app = App(config.load_config_file(path, full_registry()), full_registry(), sa, metrics=metrics)
    result: list[int] = []

    def run() -> None:
        result.append(serve(app, metrics, config_path=path, health_address="127.0.0.1:0", sync_timeout=60))

    t = threading.Thread(target=run, daemon=True)
    t.start()
    d = Daemon(app, path)
    cluster.wait_for(lambda: app.health_port, timeout=10, what="health server")
    cluster.wait_for(lambda: get(f"{d.url}/readyz")[0] == 200, timeout=60, what="ready")
    yield d
    app.stop_event.set()
    t.join(30)
    assert result == [0]


def configz(d: Daemon, token: str) -> dict[str, Any]:
    status, body, content_type = get(f"{d.url}/configz", token=token)
    assert (status, content_type) == (200, "application/json"), body[:300]
    doc: dict[str, Any] = orjson.loads(body)
    assert list(doc) == ["componentconfig"]
    cc: dict[str, Any] = doc["componentconfig"]
    return cc


def args_of(profile: dict[str, Any], plugin: str) -> dict[str, Any]:
    [args] = [c["args"] for c in profile["pluginConfig"] if c["name"] == plugin]
    return dict(args)


def test_configz_serves_the_effective_config(control_plane: ControlPlane, daemon: Daemon) -> None:
    cc = configz(daemon, control_plane.tokens[ADMIN_TOKEN_USER])
    assert (cc["kind"], cc["apiVersion"]) == ("KubeSchedulerConfiguration", "kubescheduler.config.k8s.io/v1")
    assert cc["percentageOfNodesToScore"] == 40
    assert (cc["podInitialBackoffSeconds"], cc["podMaxBackoffSeconds"], cc["parallelism"]) == (1, 10, 16)
    assert cc["leaderElection"]["leaderElect"] is False
    main, binpack = cc["profiles"]
    assert (main["schedulerName"], binpack["schedulerName"]) == ("configz-main", "configz-binpack")
    weights = {e["name"]: e["weight"] for e in main["plugins"]["score"]["enabled"]}
    # Re-enabled at score: TaintToleration with its 250, NodeAffinity without a weight is 1 (not its
    # default 2), as kube-scheduler weighs them; the other defaults keep theirs.
    assert (weights["TaintToleration"], weights["NodeAffinity"], weights["PodTopologySpread"]) == (250, 1, 2)
    assert binpack["plugins"]["score"]["enabled"] == [{"name": "NodeResourcesFit", "weight": 5}]
    assert [e["name"] for e in main["plugins"]["queueSort"]["enabled"]] == ["PrioritySort"]
    assert {"name": "DynamicResources"} in main["plugins"]["filter"]["enabled"]
    assert args_of(main, "DynamicResources") == {
        "kind": "DynamicResourcesArgs",
        "apiVersion": "kubescheduler.config.k8s.io/v1",
        "filterTimeout": "750ms",
        "bindingTimeout": "10m0s",
    }
    fit = args_of(main, "NodeResourcesFit")
    assert fit["kind"] == "NodeResourcesFitArgs"
    assert fit["scoringStrategy"] == {
        "type": "MostAllocated",
        "resources": [{"name": "cpu", "weight": 3}, {"name": "memory", "weight": 1}],
    }
    # Defaults applied to the profile that configured no args.
    assert args_of(binpack, "DynamicResources")["filterTimeout"] == "10s"
    assert args_of(binpack, "NodeResourcesFit")["scoringStrategy"]["type"] == "LeastAllocated"


def test_configz_is_refused_exactly_like_metrics(
    control_plane: ControlPlane, daemon: Daemon, metrics_reader_token: str
) -> None:
    """The same 401/403 answers, naming the path asked for; and per path: the metrics reader may
    scrape /metrics but not read /configz."""
    cases: list[tuple[str, str | None, int, int]] = [
        ("anonymous", None, 401, 401),
        ("unknown token", "not-a-token-" + uuid.uuid4().hex, 401, 401),
        ("authenticated, no RBAC", control_plane.tokens["nobody"], 403, 403),
        ("metrics reader", metrics_reader_token, 403, 200),
        ("system:masters", control_plane.tokens[ADMIN_TOKEN_USER], 200, 200),
    ]
    for who, token, want_configz, want_metrics in cases:
        c_status, c_body, c_type = get(f"{daemon.url}/configz", token=token)
        m_status, m_body, _ = get(f"{daemon.url}/metrics", token=token)
        assert (c_status, m_status) == (want_configz, want_metrics), (who, c_body[:300])
        if want_configz != 200:
            assert c_type == "application/json", who
            assert b"componentconfig" not in c_body, who
            assert orjson.loads(c_body)["code"] == want_configz, who
        if want_configz == want_metrics != 200:
            assert c_body.replace(b"/configz", b"/metrics") == m_body, who
    nobody = orjson.loads(get(f"{daemon.url}/configz", token=control_plane.tokens["nobody"])[1])
    assert nobody["message"].startswith('forbidden: User "nobody" cannot get path "/configz"')


def test_configz_follows_a_config_reload(control_plane: ControlPlane, daemon: Daemon) -> None:
    admin = control_plane.tokens[ADMIN_TOKEN_USER]
    assert [p["schedulerName"] for p in configz(daemon, admin)["profiles"]] == ["configz-main", "configz-binpack"]
    daemon.config_file.write_text(RELOADED)

    def reloaded() -> dict[str, Any] | None:
        cc = configz(daemon, admin)
        return cc if [p["schedulerName"] for p in cc["profiles"]] == ["configz-main"] else None

    cc = cluster.wait_for(reloaded, timeout=30, what="/configz showing the reloaded config")
    [main] = cc["profiles"]
    assert args_of(main, "DynamicResources")["filterTimeout"] == "0s"
    assert args_of(main, "DynamicResources")["bindingTimeout"] == "2m0s"
    assert cc["percentageOfNodesToScore"] == 0
    weights = {e["name"]: e["weight"] for e in main["plugins"]["score"]["enabled"]}
    assert (weights["TaintToleration"], weights["NodeAffinity"]) == (3, 2)
