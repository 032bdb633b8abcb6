"""experiments.bench_client: its defaults are the app's, and it prints the overhead it measured."""

import json
import time

import numpy as np
import pytest
import torch

from experiments import bench_client as bench
from settings import default_config
from tasks import ModelSpec, build_model, load_partition
from tasks.lntk import LayerScores


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
    # seconds and ratios are printed to 4 decimals; on a tiny round (~0.01 s) that rounding alone
    # moves the ratio of the printed seconds by up to 5e-5 * (1 + ratio) / train_round_s
    train_s = result["train_round_s"]
    for lntk, ratio in (("lntk_s", "overhead"), ("lntk_first_s", "overhead_first")):
        assert result[lntk] > 0
        slack = 5e-5 * (1 + result[ratio]) / train_s + 5e-5
        assert result[ratio] == pytest.approx(result[lntk] / train_s, abs=slack), lntk
    assert result["samples_per_s"] == pytest.approx(8 / result["train_round_s"],
                                               rel=1e-2, abs=5e-3)  # printed to 2 decimals


def test_bench_profile_lists_the_operators_lntk_spends_most_on(capsys):
    def profile(top: str) -> list[dict]:
        bench.main(["--model", "tiny-vilt", "--dataset", "synthetic", "--steps", "1", "--batch-size", "4",
                    "--scoring-batch", "4", "--profile", top, "--json"])
        return json.loads(capsys.readouterr().out)["lntk_profile"]

    assert len(profile("3")) == 3
    every = profile("10000")  # all of them: their shares make the whole call, the most first
    assert sum(r["share"] for r in every) == pytest.approx(1.0, abs=5e-5 * len(every))
    shares = [r["share"] for r in every]
    assert shares == sorted(shares, reverse=True) and shares[0] > shares[-1]
    assert {"aten::mm", "aten::addmm"} & {r["op"] for r in every}, every  # LoRA's matrices


def test_bench_rank_check_reports_agreement(capsys):
    bench.main(["--model", "tiny-vilt", "--dataset", "synthetic", "--steps", "1", "--batch-size", "4",
                "--scoring-batch", "4", "--budget", "2", "--rank-check", "--rank-reference", "16", "--json"])
    result = json.loads(capsys.readouterr().out)
    assert -1.0 <= result["rank_rho_min"] <= result["rank_rho_mean"] <= 1.0
    assert 0.0 <= result["topk_overlap_mean"] <= 1.0


def test_rank_check_of_identical_batches_is_perfect():
    """Copies of one sample: every batch's Θˡ is a multiple of the reference's, so the normalised
    scores, their ranks and their top-k are the reference's (ρ = 1, overlap = 1)."""
    part = load_partition("synthetic", 0, 1, "iid", max_train=4, max_test=1)
    model = build_model(ModelSpec("tiny-vilt"), len(part.labels), part.task)
    result = bench.rank_agreement(model, [part.train[0]] * 24, 4, 2, reference=8)
    assert result == {"rank_rho_mean": 1.0, "rank_rho_min": 1.0, "topk_overlap_mean": 1.0}


def test_rank_check_of_planted_orders(monkeypatch):
    """Reference order 0 > 1 > 2 > 3; batch 0 agrees, batches 1-3 reverse it: ρ = 1, -1, -1, -1
    and top-2 overlap 1, 0, 0, 0."""
    reference = np.array([0.4, 0.3, 0.2, 0.1])
    samples = list(range(24))

    def planted(model, batch):
        order = reference if batch[0] in (0, samples[-8]) else reference[::-1]
        return LayerScores(order, order, 0.0)

    monkeypatch.setattr(bench, "layer_scores", planted)
    result = bench.rank_agreement(None, samples, 4, 2, reference=8)
    assert result == {"rank_rho_mean": -0.5, "rank_rho_min": -1.0, "topk_overlap_mean": 0.25}


def test_bench_repeat_runs_fresh_processes_and_summarises(monkeypatch, capsys):
    calls = []
    figures = iter([(0.5, 10.0), (0.2, 5.0), (0.3, 6.0)])

    def fake_run(argv):
        calls.append(argv)
        lntk, train = next(figures)
        return {"model": "tiny-vilt", "lntk_s": lntk, "train_round_s": train, "overhead": lntk / train}

    monkeypatch.setattr(bench, "run_fresh", fake_run)
    bench.main(["--model", "tiny-vilt", "--steps", "3", "--repeat", "3", "--rank-check", "--json"])
    out = json.loads(capsys.readouterr().out)
    assert len(calls) == 3 and calls[0] == calls[2]
    assert calls[0][:2] == ["--model", "tiny-vilt"] and "--rank-check" in calls[0]
    assert "--repeat" not in calls[0] and calls[0][calls[0].index("--steps") + 1] == "3"
    assert "--profile" not in calls[0]  # not asked for: a child would refuse "--profile 0"
    assert out["repeat"] == 3 and len(out["runs"]) == 3
    assert out["median"] == {"lntk_s": 0.3, "train_round_s": 6.0, "overhead": 0.05}
    assert out["min"] == {"lntk_s": 0.2, "train_round_s": 5.0, "overhead": 0.04}
    assert out["max"] == {"lntk_s": 0.5, "train_round_s": 10.0, "overhead": 0.05}


def test_bench_repeat_prints_a_table(monkeypatch, capsys):
    values = iter([0.06, 0.04])
    monkeypatch.setattr(bench, "run_fresh", lambda argv: {"model": "m", "overhead": next(values)})
    bench.main(["--repeat", "2"])
    lines = capsys.readouterr().out.splitlines()
    assert lines[-1].split() == ["overhead", "0.05", "0.04", "0.06"]


@pytest.mark.parametrize("flag", ["--budget", "--steps", "--scoring-batch", "--batch-size", "--repeat",
                                  "--profile"])
def test_bench_rejects_non_positive_settings(flag, capsys):
    with pytest.raises(SystemExit):
        bench.main([flag, "0"])
    assert flag in capsys.readouterr().err


def test_bench_config_file_sets_the_model_data_and_round_and_flags_win(tmp_path, capsys, monkeypatch):
    conf = tmp_path / "bench.toml"
    conf.write_text('model = "tiny-vilt"\ndataset = "synthetic"\nlocal-steps = 2\nbatch-size = 4\n'
                    'score-batch-size = 4\nlr = 0.001\n')
    bench.main(["--config", str(conf), "--steps", "1", "--json"])
    result = json.loads(capsys.readouterr().out)
    assert (result["model"], result["dataset"]) == ("tiny-vilt", "synthetic")
    assert (result["steps"], result["batch_size"], result["scoring_batch"]) == (1, 4, 4)
    defaults = bench.config_defaults(conf)
    assert defaults["lr"] == 0.001 and defaults["head-lr"] == bench.APP["head-lr"]  # unset: the app's
    calls = []
    monkeypatch.setattr(bench, "run_fresh", lambda argv: calls.append(argv) or {"overhead": 0.1})
    bench.main(["--config", str(conf), "--repeat", "2", "--json"])
    assert calls[0][:2] == ["--config", str(conf)]  # each fresh run reads the same file


def test_bench_config_file_that_cannot_be_read_is_one_line(tmp_path):
    with pytest.raises(SystemExit, match="--config .*missing.toml"):
        bench.main(["--config", str(tmp_path / "missing.toml")])


def test_bench_prints_the_peak_memory_of_scoring_and_of_the_round_apart(capsys, monkeypatch):
    pieces = []
    scores = bench.layer_scores
    monkeypatch.setattr(bench, "layer_scores", lambda model, samples, piece_size: pieces.append(piece_size)
                        or scores(model, samples, piece_size=piece_size))
    bench.main(["--model", "tiny-llava", "--dataset", "synthetic", "--partitioner", "by-question-type:0.5",
                "--steps", "1", "--batch-size", "3", "--scoring-batch", "4", "--peak-flops", "1e12",
                "--json"])
    result = json.loads(capsys.readouterr().out)
    assert pieces == [3, 3], "LNTK scores a training batch's samples at a time, as the client does"
    assert result["memory"] == "rss sampled every 2 ms"
    for phase in ("lntk", "train"):
        assert 0 < result[f"{phase}_base_mb"] <= result[f"{phase}_peak_mb"] <= result["peak_rss_mb"] + 1
    assert result["lntk_over_train_peak"] == pytest.approx(result["lntk_peak_mb"] / result["train_peak_mb"],
                                                           abs=1e-4)
    assert result["step_s"] == pytest.approx(result["train_round_s"], abs=1e-4)
    share = result["step_flops"] / result["step_s"] / 1e12
    assert result["step_peak_share"] == pytest.approx(share, rel=1e-2)


def test_phase_peak_sees_memory_freed_before_the_phase_ends():
    """A 256 MB tensor held 0.2 s and freed inside the phase: RSS at the end no longer shows it,
    the sampled peak does."""
    with bench.PhasePeak(torch.device("cpu")) as memory:
        block = torch.ones(64 * 2**20)
        time.sleep(0.2)
        del block
    assert memory.peak_mb - memory.base_mb >= 200


def test_step_flops_are_4_n_t():
    part = load_partition("synthetic", 0, 1, "iid", max_train=4, max_test=1)
    model = build_model(ModelSpec("tiny-llava"), len(part.labels), part.task)
    model.answers = tuple(part.labels)
    tokens = model.collate(part.train[:4])["input_ids"].numel()
    parameters = sum(p.numel() for p in model.parameters())
    out = bench.step_flops(model, part.train[:4], 0.5, 1e9)
    assert out["step_tokens"] == tokens
    assert out["step_flops"] == pytest.approx(4 * parameters * tokens, rel=1e-3)
    assert out["step_peak_share"] == pytest.approx(out["step_flops"] / 0.5 / 1e9, rel=1e-3)
    assert "step_peak_share" not in bench.step_flops(model, part.train[:4], 0.5, None)
