"""kwok's worker counts (``Kwok(parallelism=N)``): a KwokConfiguration file passed after the stages,
or nothing at all when kwok's defaults are kept."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from custom_scheduler.devenv import kwok


def test_options_config_raises_every_worker_kind() -> None:
    doc = yaml.safe_load(kwok.options_config(64))
    assert (doc["apiVersion"], doc["kind"]) == ("config.kwok.x-k8s.io/v1alpha1", "KwokConfiguration")
    assert doc["options"] == {"nodeLeaseParallelism": 64, "nodePlayStageParallelism": 64, "podPlayStageParallelism": 64}


@pytest.mark.parametrize(("parallelism", "extra"), [(0, []), (32, ["kwok-options.yaml"])])
def test_argv_passes_the_options_file_only_when_asked(tmp_path: Path, parallelism: int, extra: list[str]) -> None:
    k = kwok.Kwok(tmp_path / "bin", tmp_path / "kubeconfig", parallelism=parallelism, workdir=tmp_path / "w")
    configs = [a.removeprefix("--config=") for a in k.argv() if a.startswith("--config=")]
    assert configs[: len(kwok.DEFAULT_STAGES)] == [str(p) for p in kwok.DEFAULT_STAGES]
    assert [Path(c).name for c in configs[len(kwok.DEFAULT_STAGES) :]] == extra
