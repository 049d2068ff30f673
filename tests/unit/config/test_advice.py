"""check-config's warnings for configs that load but likely do not do what was meant."""

from __future__ import annotations

import pytest

from custom_scheduler.config import load_config
from custom_scheduler.config.advice import summary, warnings
from custom_scheduler.config.loading import parse_yaml
from custom_scheduler.plugins.builtin import full_registry

HEADER = "apiVersion: kubescheduler.config.k8s.io/v1\nkind: KubeSchedulerConfiguration\n"


@pytest.mark.parametrize(
    ("body", "want"),
    [
        pytest.param("", [], id="clean"),
        pytest.param(
            "profiles: [{schedulerName: default-scheduler}]\n",
            ["profiles[0].schedulerName: 'default-scheduler' makes this scheduler place every pod"],
            id="default-scheduler-name",
        ),
        pytest.param(
            "profiles:\n- schedulerName: a\n- schedulerName: b\n"
            "  plugins: {multiPoint: {disabled: [{name: NodeAffinity}]}}\n"
            "  pluginConfig: [{name: NodeAffinity, args: {}}, {name: NodeResourcesFit, args: {}}]\n",
            ["profiles[1].pluginConfig[0]: plugin 'NodeAffinity' is not enabled in profile 'b'"],
            id="args-for-a-disabled-plugin",
        ),
        pytest.param(
            "parallelism: 4\n",
            ["parallelism: accepted without effect"],
            id="ineffective-field",
        ),
    ],
)
def test_warnings(body: str, want: list[str]) -> None:
    text = HEADER + body
    found = warnings(parse_yaml(text), load_config(text, full_registry()))
    assert len(found) == len(want)
    for line, prefix in zip(found, want, strict=True):
        assert line.startswith(prefix), line


def test_summary_names_profiles_extenders_and_warnings() -> None:
    cfg = load_config(
        HEADER
        + "profiles: [{schedulerName: a}, {schedulerName: b}]\n"
        + "extenders: [{urlPrefix: 'http://x', filterVerb: f}]\n",
        full_registry(),
    )
    assert summary("c.yaml", cfg, 0) == "c.yaml: valid: 2 profile(s) (a, b), 1 extender(s)"
    assert summary("c.yaml", cfg, 3).endswith(", 3 warning(s)")
