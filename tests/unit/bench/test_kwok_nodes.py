"""``bench.run --kwok``'s pure parts: which Nodes get their not-ready taint lifted, how the API
server's Lease writes are read from its metrics, and that the flag changes the report only when on
(rows, ratios, medians and config), so a run without it reports what it did before."""

from __future__ import annotations

import math
from typing import Any

import pytest

from bench import kwok_nodes
from bench import run as bench_run
from custom_scheduler.devenv import kwok
from tests.builders import make_node

NR = kwok.NOT_READY_TAINT


def _node(name: str, ready: str, *taints: str) -> dict[str, Any]:
    b = make_node(name)
    for key in taints:
        b = b.taint(key)
    obj = b.obj()
    if ready:
        obj["status"]["conditions"] = [
            {"type": "MemoryPressure", "status": "False"},
            {"type": "Ready", "status": ready},
        ]
    return obj


@pytest.mark.parametrize(
    ("nodes", "done", "lift"),
    [
        pytest.param([_node("a", "", NR)], 0, {}, id="not-initialised-keeps-its-taint"),
        pytest.param([_node("a", "False", NR)], 0, {}, id="not-ready-keeps-its-taint"),
        pytest.param([_node("a", "True", NR)], 0, {"a": []}, id="ready-is-lifted"),
        pytest.param([_node("a", "True")], 1, {}, id="ready-and-untainted-is-done"),
        pytest.param(
            [_node("a", "True", "dedicated", NR), _node("b", "True", "gpu")],
            1,
            {"a": [{"key": "dedicated", "effect": "NoSchedule"}]},
            id="other-taints-stay",
        ),
    ],
)
def test_to_lift(nodes: list[dict[str, Any]], done: int, lift: dict[str, list[dict[str, Any]]]) -> None:
    assert kwok_nodes.to_lift(nodes) == (done, lift)


def test_without_not_ready_drops_every_effect() -> None:
    taints = [
        {"key": NR, "effect": "NoSchedule"},
        {"key": NR, "effect": "NoExecute"},
        {"key": "x", "effect": "NoSchedule"},
    ]
    assert kwok_nodes.without_not_ready(taints) == [{"key": "x", "effect": "NoSchedule"}]


def _sample(resource: str, verb: str, code: str, value: int, sub: str = "") -> str:
    """One ``apiserver_request_total`` line with the labels kube-apiserver 1.37 writes, in its order."""
    group = "coordination.k8s.io" if resource == "leases" else ""
    labels = (
        f'code="{code}",component="apiserver",dry_run="",group="{group}",resource="{resource}",'
        f'scope="resource",subresource="{sub}",verb="{verb}",version="v1"'
    )
    return f"apiserver_request_total{{{labels}}} {value}"


METRICS_TEXT = "\n".join(
    [
        "# HELP apiserver_request_total [STABLE] Counter of apiserver requests",
        "# TYPE apiserver_request_total counter",
        _sample("leases", "PUT", "200", 1200),
        _sample("leases", "POST", "201", 30),
        _sample("leases", "PUT", "409", 2),
        _sample("leases", "GET", "200", 500),
        _sample("nodes", "PATCH", "200", 77, sub="status"),
        'apiserver_request_duration_seconds_count{group="coordination.k8s.io",resource="leases",verb="PUT"} 9999',
    ]
)


def test_lease_writes_counts_lease_write_verbs_only() -> None:
    assert kwok_nodes.lease_writes(METRICS_TEXT) == 1232  # PUT 200 + POST 201 + PUT 409; not GET, nodes
    assert kwok_nodes.lease_writes("") == 0


@pytest.mark.parametrize(
    ("before", "after", "seconds", "want"),
    [(100.0, 400.0, 3.0, 100.0), (5.0, 5.0, 2.0, 0.0), (1.0, 2.0, 0.0, math.nan), (math.nan, 2.0, 1.0, math.nan)],
)
def test_per_second(before: float, after: float, seconds: float, want: float) -> None:
    got = kwok_nodes.per_second(before, after, seconds)
    assert math.isnan(got) if math.isnan(want) else got == want


def test_running_counts_phase_running() -> None:
    pods = [{"status": {"phase": "Running"}}, {"status": {"phase": "Pending"}}, {}, {"status": {"phase": "Running"}}]
    assert kwok_nodes.running(pods) == 2


@pytest.mark.parametrize(
    ("argv", "on", "lease", "workers"),
    [
        ([], False, 40, 64),
        (["--kwok"], True, 40, 64),
        (["--kwok", "--kwok-lease", "20", "--kwok-parallelism", "8"], True, 20, 8),
    ],
)
def test_flags(argv: list[str], on: bool, lease: int, workers: int) -> None:
    opts, _ = bench_run.parse_args(["--workload", "SchedulingBasic", *argv])
    assert (opts.kwok, opts.kwok_lease, opts.kwok_parallelism) == (on, lease, workers)
    config = bench_run._config(opts)
    keys = ("kwok" in config, "kwok_lease" in config, "kwok_parallelism" in config)
    assert keys == (on, on, on), "config keys only with --kwok"


def test_too_short_a_lease_is_refused() -> None:
    with pytest.raises(SystemExit):
        bench_run.parse_args(["--kwok", "--kwok-lease", "2"])


def _round(setup: float | None, tput: float = 100.0) -> dict[str, Any]:
    r: dict[str, Any] = {
        "bound": 10,
        "pods": 10,
        "all_bound": True,
        "throughput_first_to_last": tput,
        "placement": {"violations_total": 0, "violations": {}},
    }
    if setup is not None:
        r["kwok"] = {"node_setup_s": setup, "cpu_s": setup / 10, "lease_writes_per_s": 100.0, "running_at_end": 10}
    return r


def test_kwok_rows_and_ratios_only_with_kwok() -> None:
    opts = bench_run.Options(nodes=1, pods=10, workload="SchedulingBasic", schedulers=["custom", "kube"])
    plain = {"custom": _round(None), "kube": _round(None)}
    assert set(bench_run.ratios(plain)) == {k for k, _, _, _ in bench_run.METRICS}
    assert "kwok CPU" not in bench_run.render_table(plain, opts)
    living = {"custom": _round(30.0), "kube": _round(60.0)}
    assert bench_run.ratios(living)["kwok.node_setup_s"] == 0.5
    table = bench_run.render_table(living, opts)
    for _, label, _, _ in bench_run.KWOK_METRICS:
        assert label in table


def test_rounds_report_medians_of_the_kwok_numbers() -> None:
    out = bench_run.aggregate([_round(10.0), _round(30.0), _round(20.0)])
    assert out["kwok"]["node_setup_s"] == 20.0
    assert out["kwok"]["cpu_s"] == 2.0
    assert [r["kwok"]["node_setup_s"] for r in out["rounds"]] == [10.0, 30.0, 20.0], "each round kept as it was"


def _pod(node: str, phase: str, deleting: bool = False) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": "p", **({"deletionTimestamp": "2026-01-01T00:00:00Z"} if deleting else {})}
    return {"metadata": meta, "spec": {"nodeName": node} if node else {}, "status": {"phase": phase}}


@pytest.mark.parametrize(
    ("pods", "at_least", "want"),
    [
        pytest.param([_pod("n", "Running"), _pod("", "Pending")], 1, True, id="unbound-pending-is-not-waited-on"),
        pytest.param([_pod("n", "Running"), _pod("n", "Pending")], 1, False, id="a-bound-pod-not-yet-running"),
        pytest.param([_pod("n", "Running"), _pod("n", "Succeeded")], 2, True, id="completed-counts-as-ran"),
        pytest.param([_pod("n", "Running")], 2, False, id="fewer-bound-than-measured"),
        pytest.param([_pod("n", "Running"), _pod("n", "Pending", deleting=True)], 1, True, id="deleting-left-out"),
    ],
)
def test_all_bound_ran(pods: list[dict[str, Any]], at_least: int, want: bool) -> None:
    assert kwok_nodes.all_bound_ran(pods, at_least) is want
