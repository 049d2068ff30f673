"""The decision record on a real API server: ``why`` answers for a deleted pod and after the daemon
was replaced (a restart or failover), the new daemon continues the ring, and the ring stays
within its bound."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from custom_scheduler.core.decision import Decision
from custom_scheduler.core.decision_store import RING_LABEL, DecisionRing, RingConfig, read_ring
from custom_scheduler.devenv import cluster
from custom_scheduler.devenv.controlplane import free_port
from custom_scheduler.kube.client import KubeClient
from custom_scheduler.server.decision_log import DecisionLog
from custom_scheduler.server.metrics import Metrics
from custom_scheduler.tools import main
from tests.builders import make_node, make_pod
from tests.integration.env import Env, with_class


def ring(env: Env, **kw: Any) -> RingConfig:
    kw.setdefault("scores", True)
    return RingConfig(namespace=env.namespace, name="decisions", interval=0.2, **kw)


def why(env: Env, capsys: pytest.CaptureFixture[str], pod: str, *extra: str) -> tuple[int, str]:
    capsys.readouterr()
    kc = str(env.control_plane.kubeconfig())
    code = main(["why", f"{env.namespace}/{pod}", "--kubeconfig", kc, "--record", f"{env.namespace}/decisions", *extra])
    return code, capsys.readouterr().out


def report_json(out: str) -> Any:
    """The report in ``out``: the daemon runs in this process, so its log lines may share stdout."""
    return json.JSONDecoder().raw_decode(out[out.index('{\n  "') :])[0]


def recorded(env: Env, cfg: RingConfig, pod: str, kind: str) -> list[dict[str, Any]]:
    return [e for e in read_ring(env.kube, cfg) if e["k"] == f"{env.namespace}/{pod}" and e["e"] == kind]


def test_why_tells_where_a_deleted_pod_went_and_why_another_waits(env: Env, capsys: pytest.CaptureFixture[str]) -> None:
    cfg = ring(env)
    big = env.node(make_node("why-big").capacity(cpu="4", memory="8Gi", pods="10"))
    small = env.node(make_node("why-small").capacity(cpu="2", memory="2Gi", pods="10"))
    env.start_scheduler(decision_record=cfg)
    env.create_pod(make_pod("fits").req(cpu="1500m", memory="1Gi").obj())
    env.create_pod(make_pod("too-big").req(cpu="8").obj())
    env.wait_bound("fits")
    cluster.wait_for(lambda: recorded(env, cfg, "fits", "bound"), timeout=20, what="the bound entry written")
    cluster.wait_for(lambda: recorded(env, cfg, "too-big", "unschedulable"), timeout=20, what="unschedulable entry")
    env.delete_pod_now("fits")
    cluster.wait_for(lambda: "fits" not in env.pods(), timeout=20, what="fits deleted")

    code, out = why(env, capsys, "fits", "-o", "json")
    assert code == 0
    rep = report_json(out)
    assert rep["found"]
    assert rep["now"] == "the pod does not exist (deleted)"
    sched, bound = (e for e in rep["decisions"] if e["e"] in ("scheduled", "bound"))
    assert (sched["n"], sched["f"], sched["p"]) == (big, 2, "custom-scheduler")  # the least allocated
    assert sched["top"]
    assert all(isinstance(s, int) for _, s in sched["top"])
    assert sched["ru"]["n"] == small
    assert sched["ru"]["s"] < sched["s"]
    assert (bound["n"], bound["by"]) == (big, "custom-scheduler")

    code, out = why(env, capsys, "too-big", "-o", "json")
    [e, *_] = report_json(out)["decisions"]
    assert e["e"] == "unschedulable"
    assert e["why"] == {"NodeResourcesFit": {"Insufficient cpu": 2}}
    code, text = why(env, capsys, "too-big")
    assert "NodeResourcesFit: Insufficient cpu (2 nodes)" in text
    assert "Now: pending (not bound)." in text

    code, text = why(env, capsys, "never-existed")
    assert code == 0
    assert text.startswith(f"No decision recorded for {env.namespace}/never-existed")


def test_a_second_daemon_continues_the_ring_and_why_still_answers(env: Env, capsys: pytest.CaptureFixture[str]) -> None:
    """Stop the daemon, start another (a restart, or the standby after a failover): the first's
    decisions are still there, and the second appends after them in the same ring. With scores off
    the node and the node counts are recorded, no per-plugin scores."""
    cfg = ring(env, scores=False)
    env.node(make_node("why-restart").capacity(cpu="4", memory="8Gi", pods="10"))
    first = env.start_scheduler(decision_record=cfg)
    env.create_pod(make_pod("before").obj())
    env.wait_bound("before")
    cluster.wait_for(lambda: recorded(env, cfg, "before", "bound"), timeout=20, what="first daemon's entries")
    first.stop()
    batches_before = _batch_keys(env.kube, cfg)

    second = env.start_scheduler(decision_record=cfg)
    env.create_pod(make_pod("after").obj())
    env.wait_bound("after")
    cluster.wait_for(lambda: recorded(env, cfg, "after", "bound"), timeout=20, what="second daemon's entries")
    assert second.decision_log is not None
    assert second.decision_log.ring is not None
    assert batches_before < _batch_keys(env.kube, cfg)  # appended: nothing of the first daemon's lost
    _, out = why(env, capsys, "before", "-o", "json")
    # (an attempt before the node was usable would add an unschedulable entry first)
    sched, bound = (e for e in report_json(out)["decisions"] if e["e"] in ("scheduled", "bound"))
    assert (sched["e"], bound["e"]) == ("scheduled", "bound")
    assert (sched["f"], sched["v"]) == (1, 1)
    assert "top" not in sched
    kinds = [(e["k"].split("/")[1], e["e"]) for e in read_ring(env.kube, cfg) if e["e"] in ("scheduled", "bound")]
    assert kinds == [("before", "scheduled"), ("before", "bound"), ("after", "scheduled"), ("after", "bound")]


def _batch_keys(kube: KubeClient, cfg: RingConfig) -> set[str]:
    path = f"/api/v1/namespaces/{cfg.namespace}/configmaps"
    items = kube.get(path, {"labelSelector": f"{RING_LABEL}={cfg.name}"})["items"]
    return {f"{cm['metadata']['name']}/{k}" for cm in items for k in cm.get("binaryData") or {}}


def test_the_ring_keeps_the_newest_entries_within_its_bound(env: Env) -> None:
    cfg = ring(env, segments=3, segment_entries=10)
    writer = DecisionRing(env.kube, cfg)
    for batch in range(10):  # 100 entries through a ring of 3 x 10
        writer.append([{"k": f"ns/p{batch * 10 + i}", "e": "bound"} for i in range(10)])
    kept = [int(e["k"].removeprefix("ns/p")) for e in read_ring(env.kube, cfg)]
    assert kept == list(range(70, 100))  # the oldest segments were overwritten, order kept
    items = env.kube.get(f"/api/v1/namespaces/{cfg.namespace}/configmaps", {"labelSelector": f"{RING_LABEL}=decisions"})
    assert sorted(cm["metadata"]["name"] for cm in items["items"]) == ["decisions-0", "decisions-1", "decisions-2"]
    assert writer.writes == 10  # one write per append

    # A new writer (a new leader) continues after the last batch, in the newest segment.
    successor = DecisionRing(env.kube, cfg)
    successor.append([{"k": "ns/next", "e": "bound"}])
    assert [e["k"] for e in read_ring(env.kube, cfg)][-1] == "ns/next"
    assert len(read_ring(env.kube, cfg)) == 21  # the oldest segment was replaced by the new one


def test_why_says_who_preempted_a_pod_and_where_the_preemptor_was_nominated(
    env: Env, capsys: pytest.CaptureFixture[str], priority_class: Callable[..., str]
) -> None:
    cfg = ring(env)
    node = env.node(make_node("why-preempt").capacity(cpu="1", memory="8Gi", pods="10"))
    env.start_scheduler(decision_record=cfg)
    env.create_pod(with_class(make_pod("low").req(cpu="800m"), priority_class(1)))
    env.wait_bound("low")
    env.create_pod(with_class(make_pod("vip").req(cpu="800m"), priority_class(100)))
    cluster.wait_for(lambda: recorded(env, cfg, "low", "preempted"), timeout=20, what="the victim's entry")

    _, out = why(env, capsys, "low", "-o", "json")
    preempted = [e for e in report_json(out)["decisions"] if e["e"] == "preempted"]
    assert [(e["by"], e["n"]) for e in preempted] == [(f"{env.namespace}/vip", node)]
    _, out = why(env, capsys, "vip", "-o", "json")
    first = report_json(out)["decisions"][0]
    assert (first["e"], first["nom"], first["victims"]) == ("unschedulable", node, [f"{env.namespace}/low"])


def test_entries_wait_while_the_api_refuses_and_go_with_the_next_write(env: Env) -> None:
    """A ring the API refuses (here its namespace does not exist yet, as RBAC without ConfigMaps
    would refuse it): nothing is lost up to the buffer's size, and the next write sends it all."""
    ns = f"{env.namespace}-rec"
    metrics = Metrics(process_collectors=False)
    log = DecisionLog(
        DecisionRing(env.kube, RingConfig(namespace=ns, name="decisions")),
        shadow=False,
        profiles=lambda: {"custom-scheduler"},
        profile_of=lambda uid: "custom-scheduler",
        registry=metrics.registry,
    )
    for i in range(3):
        log.on_decision(Decision(f"{ns}/p{i}", "scheduled", "n1", uid=f"u{i}"))
    log.drain()
    assert log.flush(force=True) == 0
    assert log.failures == 1
    cluster.create_namespace(env.kube, ns)
    try:
        assert log.flush(force=True) == 3
        assert [e["k"] for e in read_ring(env.kube, RingConfig(namespace=ns, name="decisions"))] == [
            f"{ns}/p{i}" for i in range(3)
        ]
        assert metrics.sample("custom_scheduler_decision_record_entries_total", {"result": "written"}) == 3
        assert metrics.sample("custom_scheduler_decision_record_entries_total", {"result": "dropped"}) is None
    finally:
        cluster.delete_namespace(env.kube, ns)


def test_run_records_where_its_flags_say(env: Env, tmp_path: Path) -> None:
    """The command line's path: ``run --decision-record NS/NAME --decision-record-scores on``
    records into that ring, and exits 0 on SIGTERM after its last write."""
    env.node(make_node("why-cli-a").capacity(cpu="4", memory="8Gi", pods="10"))
    env.node(make_node("why-cli-b").capacity(cpu="2", memory="8Gi", pods="10"))
    cfg_file = tmp_path / "config.yaml"
    cfg_file.write_text(
        "apiVersion: kubescheduler.config.k8s.io/v1\nkind: KubeSchedulerConfiguration\n"
        f"leaderElection: {{leaderElect: false}}\nhealthzBindAddress: 127.0.0.1:{free_port()}\n"
        "profiles:\n- schedulerName: why-cli\n"
    )
    log = (tmp_path / "daemon.log").open("wb")
    argv = [sys.executable, "-m", "custom_scheduler", "run", f"--config={cfg_file}"]
    argv += [f"--kubeconfig={env.control_plane.kubeconfig()}", f"--decision-record={env.namespace}/cli"]
    proc = subprocess.Popen([*argv, "--decision-record-scores=on"], stderr=log, stdout=log)
    try:
        env.create_pod(make_pod("via-cli").scheduler("why-cli").req(cpu="1").obj())
        cfg = RingConfig(namespace=env.namespace, name="cli")
        [bound] = cluster.wait_for(lambda: recorded(env, cfg, "via-cli", "bound"), timeout=60, what="CLI's entries")
        [sched] = recorded(env, cfg, "via-cli", "scheduled")
        assert (sched["n"], sched["f"], sched["p"]) == (bound["n"], 2, "why-cli")
        assert "top" in sched
        assert "ru" in sched
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            code = proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            code = proc.wait(10)
        log.close()
    assert code == 0, (tmp_path / "daemon.log").read_text()[-2000:]
