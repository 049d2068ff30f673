"""Shadow mode writes nothing; a bad config edit is refused while scheduling goes on; a good one
takes effect without dropping queued pods."""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from custom_scheduler import config
from custom_scheduler.core.scheduler import Decision
from custom_scheduler.devenv import cluster
from custom_scheduler.framework.loadmetrics import MetricsServerSource
from custom_scheduler.plugins.builtin import full_registry
from custom_scheduler.server.app import App
from custom_scheduler.server.reload import ConfigWatcher
from tests.builders import make_node, make_pod
from tests.integration.conftest import MINIMAL_CONFIG
from tests.integration.env import Env
from tests.unit.framework.test_loadmetrics import FakeMetricsServer


def test_shadow_mode_decides_but_never_writes(env: Env) -> None:
    env.nodes(make_node("shadow").capacity(cpu="2", memory="4Gi", pods="10"))
    decisions: list[Decision] = []
    app = env.start_scheduler(dry_run=True, on_decision=decisions.append)
    for i in range(3):
        env.create_pod(make_pod(f"fits-{i}").req(cpu="500m").obj())
    env.create_pod(make_pod("too-big").req(cpu="8").obj())
    mine = [f"{env.namespace}/fits-{i}" for i in range(3)] + [f"{env.namespace}/too-big"]
    cluster.wait_for(lambda: set(mine) <= {d.pod for d in decisions}, timeout=20, what="four decisions")
    by_pod = {d.pod.split("/")[1]: d for d in decisions if d.pod in mine}
    assert all(by_pod[f"fits-{i}"].result == "scheduled" for i in range(3))
    assert by_pod["too-big"].result == "unschedulable"
    # The decisions were assumed in memory (later decisions see them) ...
    assert app.cache.counts()["assumed_pods"] == 3
    # ... but the server saw no binding, no event, no status write.
    app.writer.flush()
    for p in env.pods().values():
        assert not p["spec"].get("nodeName")
        assert not [c for c in p.get("status", {}).get("conditions", []) if c["type"] == "PodScheduled"]
    assert env.events() == []


def test_bad_config_edit_is_refused_and_good_one_applies(env: Env, tmp_path: Path) -> None:
    env.nodes(make_node("reload").capacity(cpu="4", memory="8Gi", pods="20"))
    path = tmp_path / "scheduler-config.yaml"
    path.write_text(MINIMAL_CONFIG)
    app = env.start_scheduler(MINIMAL_CONFIG)
    failures: list[Any] = []
    watcher = ConfigWatcher(path, full_registry(), app.apply_config, interval=0.2, on_failure=failures.append)
    stop = threading.Event()
    threading.Thread(target=watcher.run, args=(stop,), daemon=True).start()
    try:
        # A pod for a profile that does not exist yet waits, untouched.
        env.create_pod(make_pod("for-b").scheduler("custom-scheduler-b").obj())

        path.write_text(MINIMAL_CONFIG + "  plugins:\n    score:\n      enabled: [{name: NoSuchPlugin}]\n")
        cluster.wait_for(lambda: failures, timeout=10, what="reload refused")
        assert "profiles[0].plugins.score.enabled[0].name" in str(failures[0])
        env.create_pod(make_pod("still-works").obj())
        env.wait_bound("still-works", timeout=15)  # scheduling continues on the old config

        path.write_text(MINIMAL_CONFIG + "- schedulerName: custom-scheduler-b\n")
        cluster.wait_for(lambda: watcher.applied == 1, timeout=10, what="reload applied")
        assert set(app.profiles) == {"custom-scheduler", "custom-scheduler-b"}
        env.wait_bound("for-b", timeout=15)  # the new profile's waiting pod bound
    finally:
        stop.set()
    assert watcher.failed == 1


def test_reload_that_changes_node_load_args_rebuilds_its_metrics_source(
    start_scheduler: Callable[..., App],
) -> None:
    def with_node_load(args: str) -> str:
        return (
            MINIMAL_CONFIG
            + "  plugins:\n    multiPoint:\n      enabled: [{name: NodeLoad}]\n"
            + f"  pluginConfig:\n  - name: NodeLoad\n    args: {{{args}}}\n"
        )

    with FakeMetricsServer() as first, FakeMetricsServer() as second:
        first.set("n1", "1", "1Gi")
        second.set("n1", "2", "1Gi")
        app = start_scheduler(with_node_load(f"metricsURL: '{first.url}', refreshInterval: 10s"))

        def source() -> MetricsServerSource | None:  # a call, so each read is fresh to the type checker
            return app.load_metrics

        old = source()
        assert old is not None
        assert app.metrics_sources.get() is old
        cluster.wait_for(lambda: old.get("n1") is not None, timeout=10, what="first refresh")

        # Args that do not change the source (a threshold): the same source keeps running.
        app.apply_config(
            config.load_config(
                with_node_load(f"metricsURL: '{first.url}', refreshInterval: 10s, thresholds: {{cpu: 90}}"),
                full_registry(),
            )
        )
        assert source() is old

        # A new URL and interval: a new source, started and installed; the old one stopped.
        app.apply_config(
            config.load_config(with_node_load(f"metricsURL: '{second.url}', refreshInterval: 1s"), full_registry())
        )
        new = source()
        assert new is not None
        assert new is not old
        assert new.interval == 1.0
        assert app.metrics_sources.get() is new
        assert old._thread is None  # stopped
        cluster.wait_for(
            lambda: (u := new.get("n1")) is not None and u.milli_cpu == 2000, timeout=10, what="new source refresh"
        )

        # NodeLoad disabled: no source at all.
        app.apply_config(config.load_config(MINIMAL_CONFIG, full_registry()))
        assert source() is None
        assert app.metrics_sources.get() is None
        assert new._thread is None
