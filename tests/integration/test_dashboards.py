"""The Grafana dashboard and the Prometheus alerts query metrics the scheduler really exports.

A renamed or misspelt metric makes a panel silently empty and an alert silently never fire (or,
under ``absent()``, always fire); nothing else would notice. So every PromQL expression of
``deploy/grafana/custom-scheduler.json`` (panels and template variables) and of
``deploy/prometheus/custom-scheduler-rules.yaml`` is tokenised, and each metric name must be a
family the running daemon serves at ``/metrics`` (scraped over HTTPS with a token, as Prometheus
does). ``_bucket``/``_sum``/``_count`` belong to a histogram family, ``_total`` to a counter; ``up``
is written by Prometheus itself. The files' shape is checked too: the template variables the
panels filter by, and a summary, a description and a README runbook for each alert.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any

import pytest
import yaml

from custom_scheduler.devenv.controlplane import REPO_ROOT
from tests.builders import make_node, make_pod
from tests.integration.env import Env
from tests.integration.metrics_daemon import Daemon, families, running_daemon

DASHBOARD = REPO_ROOT / "deploy" / "grafana" / "custom-scheduler.json"
RULES = REPO_ROOT / "deploy" / "prometheus" / "custom-scheduler-rules.yaml"

#: Series Prometheus makes per target, not the scheduler.
SYNTHETIC = {"up"}
#: PromQL words that look like identifiers: aggregations, operators, modifiers, literals.
KEYWORDS = {
    *("sum", "min", "max", "avg", "count", "stddev", "stdvar", "topk", "bottomk", "quantile", "group"),
    *("count_values", "limitk", "limit_ratio", "and", "or", "unless", "bool", "offset", "by", "without"),
    *("on", "ignoring", "group_left", "group_right", "inf", "nan", "atan2", "start", "end"),
}
IDENT = re.compile(r"(?<![\w:$.])([a-zA-Z_:][a-zA-Z0-9_:]*)(?=[{\[)\s]|$)")


def metric_names(expr: str) -> set[str]:
    """The metric names a PromQL expression selects: identifiers followed by ``{``, ``[``, ``)``,
    whitespace or the end, once strings, label matchers, ranges and ``by (...)``-style label lists
    are blanked; function calls (an identifier followed by ``(``) and keywords are not names."""
    s = re.sub(r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'', '""', expr)
    s = re.sub(r"\{[^}]*\}", "{}", s)
    s = re.sub(r"\[[^\]]*\]", "[]", s)
    s = re.sub(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", " ", s)
    return {m for m in IDENT.findall(s) if m not in KEYWORDS}


def missing(names: set[str], exported: dict[str, str]) -> set[str]:
    """Names that no family of ``exported`` (family name -> type, from ``# TYPE``) provides."""

    def provided(name: str) -> bool:
        if name in exported or name in SYNTHETIC:
            return True
        base, _, suffix = name.rpartition("_")
        if suffix in {"bucket", "sum", "count"} and exported.get(base) in {"histogram", "summary"}:
            return suffix != "bucket" or exported[base] == "histogram"
        return suffix == "total" and exported.get(base) == "counter"

    return {n for n in names if not provided(n)}


def _dashboard() -> dict[str, Any]:
    doc: dict[str, Any] = json.loads(DASHBOARD.read_text())
    return doc


def _panel_exprs() -> dict[str, list[str]]:
    """Panel title -> its targets' expressions."""
    return {p["title"]: [t["expr"] for t in p.get("targets", [])] for p in _dashboard()["panels"] if p["type"] != "row"}


def _variable_queries() -> list[str]:
    """The metric selectors of the ``label_values(selector, label)`` template variables."""
    out = []
    for var in _dashboard()["templating"]["list"]:
        if var["type"] == "query":
            m = re.fullmatch(r"label_values\((.*),\s*\w+\)", var["definition"])
            assert m, var["definition"]
            out.append(m.group(1))
    return out


def _rules() -> list[dict[str, Any]]:
    doc = yaml.safe_load(RULES.read_text())
    return [rule for group in doc["spec"]["groups"] for rule in group["rules"]]


def _all_exprs() -> dict[str, str]:
    """Where -> expression, for every expression of both files."""
    out = {f"panel {t!r} #{i}": e for t, es in _panel_exprs().items() for i, e in enumerate(es)}
    out |= {f"variable #{i}": e for i, e in enumerate(_variable_queries())}
    out |= {f"rule {r.get('alert') or r.get('record')}": r["expr"] for r in _rules()}
    return out


# -- the tokenizer --------------------------------------------------------------------------------


def test_metric_names_finds_selectors_and_skips_functions_labels_and_keywords() -> None:
    expr = (
        "histogram_quantile(0.99, sum by (extension_point, le)"
        ' (rate(a_bucket{job=~"$job", x="y z"}[$__rate_interval])))'
        " / ignoring(code) group_left b_total offset 5m + on (instance) c and bool d"
        ' or absent(up{job="j"}) > 1e3 or max_over_time(e[5m:1m]) unless count(f)'
    )
    assert metric_names(expr) == {"a_bucket", "b_total", "c", "d", "up", "e", "f"}
    assert missing(
        {"a_bucket", "a_count", "b_total", "b", "up", "nope", "g_bucket"},
        {"a": "histogram", "b": "counter", "g": "summary"},
    ) == {"nope", "g_bucket"}


# -- the files' shape -----------------------------------------------------------------------------


def test_dashboard_filters_every_panel_by_the_datasource_job_and_instance_variables() -> None:
    dash = _dashboard()
    variables = {v["name"]: v for v in dash["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource"
    assert variables["datasource"]["query"] == "prometheus"
    assert {"job", "instance"} <= set(variables)
    for panel in dash["panels"]:
        for target in panel.get("targets", []):
            assert target["datasource"]["uid"] == "${datasource}", panel["title"]
            assert 'job=~"$job"' in target["expr"], panel["title"]
            assert 'instance=~"$instance"' in target["expr"], panel["title"]
    ids = [p["id"] for p in dash["panels"]]
    assert len(ids) == len(set(ids))


def test_dashboard_and_alerts_cover_what_operators_need() -> None:
    """The metrics issue #29 asks the dashboard and the alerts to show."""
    dashboard = set().union(*(metric_names(e) for es in _panel_exprs().values() for e in es))
    assert {
        "scheduler_schedule_attempts_total",
        "scheduler_scheduling_attempt_duration_seconds_bucket",
        "scheduler_pod_scheduling_sli_duration_seconds_bucket",
        "scheduler_pending_pods",
        "scheduler_preemption_attempts_total",
        "scheduler_preemption_victims_sum",
        "scheduler_framework_extension_point_duration_seconds_bucket",
        "custom_scheduler_binding_duration_seconds_bucket",
        "custom_scheduler_bind_retries_total",
        "custom_scheduler_watch_restarts_total",
        "custom_scheduler_leader",
        "leader_election_master_status",
        "custom_scheduler_config_reload_failures_total",
        "rest_client_requests_total",
    } <= dashboard
    alerts = {r["alert"]: metric_names(r["expr"]) for r in _rules()}
    assert "custom_scheduler_leader" in alerts["CustomSchedulerNoLeader"]
    assert "scheduler_pending_pods" in alerts["CustomSchedulerUnschedulablePodsStuck"]
    assert "scheduler_schedule_attempts_total" in alerts["CustomSchedulerSchedulingErrors"]
    assert "custom_scheduler_config_reload_failures_total" in alerts["CustomSchedulerConfigReloadFailed"]
    assert alerts["CustomSchedulerTargetDown"] == {"up"}


def test_every_alert_has_a_summary_a_description_a_severity_and_a_runbook() -> None:
    readme = (REPO_ROOT / "README.md").read_text()
    observability = readme.split("\n## Observability", 1)[1].split("\n## ", 1)[0]
    for rule in _rules():
        name = rule["alert"]
        assert rule["annotations"]["summary"].strip(), name
        assert rule["annotations"]["description"].strip(), name
        assert rule["labels"]["severity"] in {"warning", "critical"}, name
        assert re.search(rf"^- \*\*`{name}`\*\*", observability, flags=re.MULTILINE), f"no runbook for {name}"


# -- against the running daemon -------------------------------------------------------------------


@pytest.fixture
def daemon(env: Env) -> Iterator[Daemon]:
    with running_daemon(env, lease=f"dashboards-{env.namespace}", profile="dashboards-test") as d:
        yield d


def test_every_queried_metric_is_exported(env: Env, daemon: Daemon) -> None:
    """Each metric name of each dashboard and rule expression is a family at /metrics (after a pod
    was scheduled, so the binding path has run too)."""
    env.nodes(make_node("dash-0").capacity(cpu="4", memory="8Gi", pods="10"))
    env.create_pod(make_pod("dash").req(cpu="10m").scheduler("dashboards-test").obj())
    env.wait_bound("dash", timeout=60)
    exported = families(daemon.scrape())
    assert "custom_scheduler_leader" in exported
    exprs = _all_exprs()
    assert len(exprs) >= 20
    gaps = {where: sorted(missing(metric_names(e), exported)) for where, e in exprs.items()}
    assert not {w: g for w, g in gaps.items() if g}, "queried but not exported"
    for where, expr in exprs.items():
        assert metric_names(expr), f"{where}: no metric found in {expr!r}"
