"""LLaVA's stage 1 for `smol-llava` (`tasks.models.stage1`) and the benchmark configs that start
from it (conf/bench-gen-cover.toml, conf/bench-gen-short.toml).

A tiny recipe (two decoder blocks, two steps) stands in for the real one, whose cache entry takes
about 10 minutes to make; the code path is the same."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
import torch

import tasks
from tasks.data import load_partition
from tasks.models import smol_llava, stage1
from tests.helpers.runs import trained_rounds
from tests.tasks.test_generative import one_line, simulate

TINY = stage1.Recipe(steps=2, batch_size=2, blocks=2)
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def aligned():
    """`smol-llava-aligned` reading the tiny recipe's entry, on the two-block slice."""
    from functools import partial

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(stage1, "RECIPE", TINY)
        patch.setattr(smol_llava, "build_smol_llava", partial(smol_llava.build_smol_llava, blocks=2))
        yield stage1.align(TINY, log=lambda line: None)


def test_the_cached_projector_loads_fast_into_the_aligned_model_and_differs_from_the_seeded_one(aligned):
    start = time.perf_counter()
    state = stage1.aligned_projector()
    assert time.perf_counter() - start <= 5.0
    labels = load_partition("easy-vqa", 0, 3, "iid", seed=0, max_train=4, max_test=2).labels
    model = tasks.build_model(tasks.ModelSpec("smol-llava-aligned", seed=0), len(labels))
    plain = tasks.build_model(tasks.ModelSpec("smol-llava", seed=0), len(labels))
    projector = model.get_submodule(smol_llava.PROJECTOR).state_dict()
    assert sorted(projector) == sorted(state)
    assert all(torch.equal(projector[k], state[k]) for k in state)
    assert not torch.equal(projector["linear_1.weight"],
                           plain.get_submodule(smol_llava.PROJECTOR).state_dict()["linear_1.weight"])
    record = (aligned / "stage1.json").read_text()
    assert '"steps": 2' in record and '"captions": 2435' in record


def test_captions_come_from_train_images_only_and_name_colour_and_shape():
    samples, vocabulary = stage1.captions()
    train = {s.image.tobytes() for s in samples[:50]}
    test = load_partition("easy-vqa", 0, 1, "iid", seed=0).test
    assert not train & {s.image.tobytes() for s in test[:2000]}
    assert len(vocabulary) == 24 and all(len(c.split()) == 2 for c in vocabulary)  # 8 colours x 3 shapes


def test_a_missing_stage_1_cache_is_refused_in_one_line_before_round_1(monkeypatch, tmp_path):
    monkeypatch.setattr(stage1, "RECIPE", stage1.Recipe(steps=1, batch_size=1, blocks=1, seed=12345))
    code, _, err = simulate("--run-config", f"model='smol-llava-aligned' results-dir='{tmp_path}'")
    assert code == 2 and stage1.COMMAND in one_line(err)
    assert not list(tmp_path.glob("*/rounds.jsonl"))


@pytest.mark.parametrize("config", ["bench-gen-cover", "bench-gen-short"])
def test_the_paper_regime_configs_run_a_round_with_closed_set_and_exact_match(config, tmp_path):
    """Each config as written (6 clients by question type, a frozen projector, closed-set
    evaluation) on the tiny test checkpoint, made small (budgets too: it has two blocks; float32:
    tiny bfloat16 matrices are slow on a CPU): the last round reports closed-set accuracy and exact
    match."""
    code, out, err = simulate("--config", str(ROOT / "conf" / f"{config}.toml"), "--run-config",
                              "model='tiny-llava' dtype='float32' budgets='2,1,1,1,2,1' num-server-rounds=1 "
                              "local-steps=1 batch-size=2 max-train-samples=4 "
                              "max-test-samples=2 score-batch-size=2 optimizer-pop-size=10 "
                              f"optimizer-generations=3 results-dir='{tmp_path}' run-name='run'")
    assert code == 0, out[-2000:] + err[-2000:]
    rows = trained_rounds(tmp_path / "run" / "clients.jsonl")
    assert sorted(r["partition-id"] for r in rows) == list(range(6))
    for row in rows:
        metrics = row["evaluate"]
        assert {"accuracy", "exact-match"} <= set(metrics)
        assert row["bytes-up"] > 0 and len(row["mask"]) == row["budget"]
