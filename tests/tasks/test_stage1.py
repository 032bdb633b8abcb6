"""LLaVA's stage 1 for `smol-llava` (`tasks.stage1`) and the benchmark configs that start
from it (conf/bench-gen-cover.toml, conf/bench-gen-short.toml).

A tiny recipe (two decoder blocks, two steps) stands in for the real one, whose cache entry takes
about 10 minutes to make; the code path is the same."""

from __future__ import annotations

import shutil
import time
from pathlib import Path

import pytest
import torch

import tasks
from tasks import stage1
from tasks.data import load_partition
from tasks.models import smol_llava
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
    assert model.provenance == {"stage1-projector-sha256": stage1.checksum(aligned / stage1.PROJECTOR_FILE)}


def test_the_recipe_makes_the_same_bytes_whatever_the_callers_threads(tmp_path, monkeypatch):
    """The recipe's own thread count holds while it runs: called from one thread and from two, the
    same projector bit for bit, and the caller's count is back afterwards (float32 on this CPU gives
    other bytes with two threads than with one, so without the fixed count the two differ)."""
    from functools import partial

    monkeypatch.setattr(stage1, "entry_of", lambda recipe: tmp_path / recipe.key)
    monkeypatch.setattr(smol_llava, "build_smol_llava", partial(smol_llava.build_smol_llava, blocks=2))
    recipe = stage1.Recipe(steps=2, batch_size=2, blocks=2, seed=3)
    sums = []
    before = torch.get_num_threads()
    try:
        for threads in (1, 2):
            torch.set_num_threads(threads)
            entry = stage1.align(recipe, log=lambda line: None)
            sums.append(stage1.checksum(entry / stage1.PROJECTOR_FILE))
            assert torch.get_num_threads() == threads
            shutil.rmtree(entry)
    finally:
        torch.set_num_threads(before)
    assert sums[0] == sums[1]


def test_a_projector_whose_bytes_are_not_its_records_is_refused_in_one_line(tmp_path, monkeypatch):
    monkeypatch.setattr(stage1, "entry_of", lambda recipe: tmp_path / recipe.key)
    recipe = stage1.Recipe(steps=1, seed=99)
    state = {"linear_1.weight": torch.ones(2, 2)}
    entry = stage1.install(recipe, state, {"recipe": {}})
    assert torch.equal(stage1.aligned_projector(recipe)["linear_1.weight"], state["linear_1.weight"])
    from safetensors.torch import save_file

    save_file({"linear_1.weight": torch.zeros(2, 2)}, entry / stage1.PROJECTOR_FILE)
    with pytest.raises(ValueError, match="does not match the SHA-256") as err:
        stage1.aligned_projector(recipe)
    assert "\n" not in str(err.value) and stage1.COMMAND in str(err.value)


def test_the_committed_projector_installs_with_its_checksum_and_refuses_another(tmp_path, monkeypatch):
    """`python -m experiments.stage1` copies the committed projector into the cache: the entry's
    bytes are the committed file's; an entry holding other bytes is refused, not overwritten."""
    from experiments import stage1 as command

    monkeypatch.setattr(stage1, "RECIPE", stage1.Recipe())  # the module's fixture reads a tiny one
    monkeypatch.setattr(stage1, "entry_of", lambda recipe: tmp_path / recipe.key)
    record = command.shipped_record()
    entry = command.install_shipped()
    assert stage1.checksum(entry / stage1.PROJECTOR_FILE) == record["sha256"]
    assert stage1.provenance() == {"stage1-projector-sha256": record["sha256"]}
    assert command.install_shipped() == entry  # a second install finds it
    from safetensors.torch import save_file

    save_file({"linear_1.weight": torch.zeros(1)}, entry / stage1.PROJECTOR_FILE)
    with pytest.raises(ValueError, match="another projector than the committed one"):
        command.install_shipped()


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
