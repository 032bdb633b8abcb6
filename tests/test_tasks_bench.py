"""tasks.bench: its defaults are the app's, and it prints the overhead it measured."""

import json

import pytest

from settings import default_config
from tasks import bench


def test_bench_defaults_are_the_apps_run_config():
    config = default_config()
    for key in ("score-batch-size", "local-steps", "batch-size", "lr", "head-lr", "weight-decay"):
        assert bench.APP[key] == config[key], key


def test_bench_prints_lntk_round_and_overhead(capsys):
    bench.main(["--model", "tiny-vilt", "--dataset", "synthetic", "--steps", "2", "--batch-size", "4",
                "--scoring-batch", "4", "--json"])
    result = json.loads(capsys.readouterr().out)
    assert (result["steps"], result["batch_size"], result["scoring_batch"]) == (2, 4, 4)
    assert result["lntk_s"] > 0 and result["train_round_s"] > 0
    assert result["overhead"] == pytest.approx(result["lntk_s"] / result["train_round_s"], abs=2e-3)
    assert result["samples_per_s"] == pytest.approx(8 / result["train_round_s"],
                                               rel=1e-2, abs=5e-3)  # printed to 2 decimals


def test_bench_rank_check_reports_agreement(capsys):
    bench.main(["--model", "tiny-vilt", "--dataset", "synthetic", "--steps", "1", "--batch-size", "4",
                "--scoring-batch", "4", "--budget", "2", "--rank-check", "--rank-reference", "16", "--json"])
    result = json.loads(capsys.readouterr().out)
    assert -1.0 <= result["rank_rho_min"] <= result["rank_rho_mean"] <= 1.0
    assert 0.0 <= result["topk_overlap_mean"] <= 1.0


@pytest.mark.parametrize("flag", ["--budget", "--steps", "--scoring-batch", "--batch-size"])
def test_bench_rejects_non_positive_settings(flag, capsys):
    with pytest.raises(SystemExit):
        bench.main([flag, "0"])
    assert flag in capsys.readouterr().err
