"""No field silently ignored: every top-level field of upstream's v1 KubeSchedulerConfiguration is
either in effect or listed as "accepted without effect"; ``check-config`` warns once per such
field a file sets (on stderr, the effective config still on stdout); and the ``/configz`` document
has upstream's shape."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest
import yaml

from custom_scheduler import cli
from custom_scheduler.config import load_config, render, schema
from custom_scheduler.config.ineffective import FIELDS_WITHOUT_EFFECT, Ineffective, ineffective_fields
from custom_scheduler.plugins.builtin import full_registry

HEADER = "apiVersion: kubescheduler.config.k8s.io/v1\nkind: KubeSchedulerConfiguration\n"
BINDING_WHY = "device binding conditions are not implemented yet; it takes effect once they are"

#: Upstream v1 (k8s.io/kube-scheduler@v0.37.2/config/v1/types.go) top-level JSON fields, the
#: inlined DebuggingConfiguration's included, and where each one's effect is.
UPSTREAM_TOP_LEVEL = {
    "parallelism": None,
    "leaderElection": "server/leader.py",
    "clientConnection": "cli.py (kubeconfig, qps, burst)",
    "enableProfiling": None,
    "enableContentionProfiling": None,
    "percentageOfNodesToScore": "core/algorithm.py",
    "podInitialBackoffSeconds": "core/assembly.py",
    "podMaxBackoffSeconds": "core/assembly.py",
    "profiles": "framework/profiles.py",
    "extenders": "config/extenders.py",
    "delayCacheUntilActive": "server/daemon.py",
}


def test_every_upstream_field_is_decoded_and_either_in_effect_or_listed() -> None:
    """Each field loads (strict decoding would refuse an unknown one) and is in the list exactly
    when it has no effect."""
    without = {k for k, v in UPSTREAM_TOP_LEVEL.items() if v is None}
    assert without == {p for p in FIELDS_WITHOUT_EFFECT if "." not in p}
    rendered = render.to_dict(load_config(HEADER, full_registry()))
    assert set(UPSTREAM_TOP_LEVEL) <= set(rendered)
    fields = {f.name for f in dataclasses.fields(schema.ClientConnectionConfig)}
    assert {"content_type", "accept_content_types"} <= fields


@pytest.mark.parametrize(
    ("body", "want"),
    [
        pytest.param("", [], id="nothing-set"),
        pytest.param("parallelism: 16\n", ["parallelism"], id="set-to-the-default-still-counts"),
        pytest.param(
            "enableProfiling: false\nenableContentionProfiling: false\n"
            "clientConnection: {contentType: application/json, acceptContentTypes: application/json, qps: 5}\n",
            [
                "enableProfiling",
                "enableContentionProfiling",
                "clientConnection.contentType",
                "clientConnection.acceptContentTypes",
            ],
            id="profiling-and-content-types",
        ),
        pytest.param(
            "podInitialBackoffSeconds: 2\ndelayCacheUntilActive: true\nclientConnection: {qps: 5, burst: 9}\n",
            [],
            id="fields-in-effect-are-not-warned",
        ),
        pytest.param(
            "profiles:\n- schedulerName: a\n- schedulerName: b\n  pluginConfig:\n"
            "  - {name: NodeResourcesFit, args: {}}\n"
            "  - {name: DynamicResources, args: {filterTimeout: 1s, bindingTimeout: 2m}}\n",
            ["profiles[1].pluginConfig[1].args.bindingTimeout"],
            id="binding-timeout",
        ),
        pytest.param(
            "profiles:\n- pluginConfig:\n  - {name: DynamicResources, args: {filterTimeout: 1s}}\n",
            [],
            id="filter-timeout-is-in-effect",
        ),
    ],
)
def test_ineffective_fields(body: str, want: list[str]) -> None:
    raw = yaml.safe_load(HEADER + body)
    load_config(HEADER + body, full_registry())  # each case is a valid config
    assert [f.path for f in ineffective_fields(raw)] == want


def test_check_config_warns_on_stderr_and_prints_the_config(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cfg = tmp_path / "c.yaml"
    cfg.write_text(
        HEADER
        + "parallelism: 8\nprofiles:\n- pluginConfig:\n  - {name: DynamicResources, args: {bindingTimeout: 5m}}\n"
    )
    assert cli.main(["check-config", str(cfg)]) == 0
    out, err = capsys.readouterr()
    assert err.splitlines() == [
        f"custom-scheduler: warning: parallelism: accepted without effect ({FIELDS_WITHOUT_EFFECT['parallelism']})",
        f"custom-scheduler: warning: {Ineffective('profiles[0].pluginConfig[0].args.bindingTimeout', BINDING_WHY)}",
        f"custom-scheduler: {cfg}: valid: 1 profile(s) (custom-scheduler), 2 warning(s)",
    ]
    doc: dict[str, Any] = yaml.safe_load(out)
    assert doc["parallelism"] == 8
    assert "bindingTimeout: 5m0s" in out


def test_check_config_of_a_clean_file_warns_nothing(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cfg = tmp_path / "c.yaml"
    cfg.write_text(HEADER + "percentageOfNodesToScore: 50\n")
    assert cli.main(["check-config", str(cfg)]) == 0
    assert capsys.readouterr().err == f"custom-scheduler: {cfg}: valid: 1 profile(s) (custom-scheduler)\n"


# --- /configz ------------------------------------------------------------------------------------


def test_configz_has_upstreams_shape() -> None:
    """``{"componentconfig": ...}`` with the type meta of the config and of each args object (as
    kube-scheduler's conversion to v1 sets it), empty ``extenders``/false ``delayCacheUntilActive``
    left out as its omitempty JSON does, and DynamicResourcesArgs as upstream writes them."""
    cfg = load_config(HEADER + "profiles:\n- schedulerName: x\n", full_registry())
    doc = render.configz(cfg)
    assert list(doc) == ["componentconfig"]
    cc = doc["componentconfig"]
    assert list(cc)[:2] == ["kind", "apiVersion"]
    assert "extenders" not in cc
    assert "delayCacheUntilActive" not in cc
    [profile] = cc["profiles"]
    for entry in profile["pluginConfig"]:
        assert entry["args"]["kind"] == f"{entry['name']}Args"
        assert entry["args"]["apiVersion"] == "kubescheduler.config.k8s.io/v1"
    by_name = {e["name"]: e["args"] for e in profile["pluginConfig"]}
    assert by_name["DynamicResources"] == {
        "kind": "DynamicResourcesArgs",
        "apiVersion": "kubescheduler.config.k8s.io/v1",
        "filterTimeout": "10s",
        "bindingTimeout": "10m0s",
    }
    assert by_name["DefaultPreemption"] == {
        "kind": "DefaultPreemptionArgs",
        "apiVersion": "kubescheduler.config.k8s.io/v1",
        "minCandidateNodesPercentage": 10,
        "minCandidateNodesAbsolute": 100,
    }
    assert profile["plugins"]["score"]["enabled"][0] == {"name": "TaintToleration", "weight": 3}
    # check-config's document is unchanged by it (configz works on its own copy).
    assert "kind" not in next(iter(render.to_dict(cfg)["profiles"][0]["pluginConfig"]))["args"]
    assert render.configz_json(cfg).startswith(b'{"componentconfig":{"kind":"KubeSchedulerConfiguration"')
