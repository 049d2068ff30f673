"""Shadow mode compares: a shadow (``dry_run``, LeastAllocated) decides, a real instance of ours with
another policy (MostAllocated, TaintToleration off) binds; the shadow counts agreement per profile
in its metric and record, and ``shadow-report`` lists the pods it would have placed otherwise
with the reason."""

from __future__ import annotations

from typing import Any

import pytest

from custom_scheduler.core.decision import Decision
from custom_scheduler.core.decision_store import RingConfig, read_ring
from custom_scheduler.devenv import cluster
from custom_scheduler.server.metrics import Metrics
from custom_scheduler.tools import main
from tests.builders import make_node, make_pod
from tests.integration.conftest import MINIMAL_CONFIG
from tests.integration.env import Env
from tests.integration.test_why import report_json

#: The real scheduler: packs (MostAllocated) and ignores taints.
REAL_CONFIG = (
    MINIMAL_CONFIG
    + """  plugins:
    multiPoint:
      disabled: [{name: TaintToleration}]
  pluginConfig:
  - name: NodeResourcesFit
    args:
      scoringStrategy:
        type: MostAllocated
        resources: [{name: cpu, weight: 1}, {name: memory, weight: 1}]
"""
)
PROFILE = "custom-scheduler"


def test_shadow_counts_agreement_and_explains_each_disagreement(env: Env, capsys: pytest.CaptureFixture[str]) -> None:
    loaded = env.node(make_node("sh-a").capacity(cpu="4", memory="8Gi", pods="20").label("pool", "a"))
    empty = env.node(make_node("sh-b").capacity(cpu="4", memory="8Gi", pods="20").label("pool", "b"))
    tainted = env.node(
        make_node("sh-c").capacity(cpu="4", memory="8Gi", pods="20").label("pool", "c").taint("dedicated", "x")
    )
    env.create_pod(make_pod("load").scheduler("nobody").node(loaded).req(cpu="2", memory="4Gi").obj())
    cfg = RingConfig(namespace=env.namespace, name="shadow", interval=0.2)
    metrics = Metrics(process_collectors=False)
    decided: list[Decision] = []
    env.start_scheduler(dry_run=True, decision_record=cfg, metrics=metrics, on_decision=decided.append)

    env.create_pod(make_pod("spread-1").req(cpu="100m", memory="128Mi").obj())
    env.create_pod(make_pod("spread-2").req(cpu="100m", memory="128Mi").obj())
    env.create_pod(make_pod("only-b").req(cpu="100m", memory="128Mi").node_selector(pool="b").obj())
    env.create_pod(make_pod("only-c").req(cpu="100m", memory="128Mi").node_selector(pool="c").obj())
    names = ("spread-1", "spread-2", "only-b", "only-c")
    keys = {f"{env.namespace}/{n}" for n in names}
    # The shadow decides first (the real scheduler is not running yet), as it would beside a busy one.
    cluster.wait_for(lambda: keys <= {d.pod for d in decided}, timeout=20, what="the shadow's four decisions")

    env.start_scheduler(REAL_CONFIG)
    placed = env.wait_bound(*names)
    assert [placed[n] for n in names] == [loaded, loaded, empty, tainted]

    def shadow_entries() -> list[dict[str, Any]] | None:
        got = [e for e in read_ring(env.kube, cfg) if e["e"] == "shadow"]
        return got if len(got) == 4 else None

    by_pod = {e["k"].split("/")[1]: e for e in cluster.wait_for(shadow_entries, timeout=20, what="4 comparisons")}
    assert {n: e["res"] for n, e in by_pod.items()} == {
        "spread-1": "disagree",
        "spread-2": "disagree",
        "only-b": "agree",
        "only-c": "shadow-unschedulable",
    }
    spread = by_pod["spread-1"]
    assert (spread["n"], spread["real"]) == (empty, loaded)
    fit = {row[0]: row[1:] for row in spread["cmp"]}
    assert fit["NodeResourcesFit"][0] > fit["NodeResourcesFit"][1]  # LeastAllocated preferred the empty node
    assert spread["why"].startswith(f"shadow scored {empty} ")
    assert "untolerated taint" in by_pod["only-c"]["why"]

    def count(result: str) -> float | None:
        return metrics.sample("custom_scheduler_shadow_decisions_total", {"profile": PROFILE, "result": result})

    assert [count(r) for r in ("agree", "disagree", "shadow-unschedulable", "missed")] == [1, 2, 1, 0]

    capsys.readouterr()
    kc = str(env.control_plane.kubeconfig())
    assert main(["shadow-report", "--kubeconfig", kc, "--record", f"{env.namespace}/shadow", "-o", "json"]) == 0
    [prof] = report_json(capsys.readouterr().out)["profiles"]
    assert (prof["profile"], prof["compared"], prof["agree"], prof["disagree"]) == (PROFILE, 4, 1, 2)
    assert prof["agreement"] == 0.25
    assert sorted(e["k"].split("/")[1] for e in prof["otherwise"]) == ["only-c", "spread-1", "spread-2"]
    assert main(["shadow-report", "--kubeconfig", kc, "--record", f"{env.namespace}/shadow"]) == 0
    text = capsys.readouterr().out
    assert "25.0%" in text
    assert f"{env.namespace}/spread-1" in text
