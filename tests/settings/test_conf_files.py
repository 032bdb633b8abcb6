"""Every committed run-config file is a valid run config on top of the defaults, and a recipe file
(conf/dp-sample.toml) is valid on top of the benchmark it was chosen on."""

from __future__ import annotations

from pathlib import Path

import pytest

import run_simulation
from settings import PROJECT_ROOT, RunConfig, default_config

CONF = sorted((PROJECT_ROOT / "conf").glob("*.toml"))


@pytest.mark.parametrize("path", CONF, ids=[p.name for p in CONF])
def test_a_conf_file_is_a_valid_run_config(path: Path):
    RunConfig.from_mapping({**default_config(), **run_simulation.load_overrides([str(path)], [])})


def test_the_dp_recipe_on_the_yes_no_benchmark_trains_by_dp_sgd_with_large_expected_batches():
    files = [str(PROJECT_ROOT / "conf" / name) for name in ("bench-yesno.toml", "dp-sample.toml")]
    config = RunConfig.from_mapping({**default_config(), **run_simulation.load_overrides(files, [])})
    assert config.privacy.mode == "sample" and config.training.batch_size >= 256
    assert config.training.physical_batch < config.training.batch_size  # virtual steps
    assert config.dataset == "easy-vqa-yes-no"  # the benchmark's own keys survive the recipe
