"""Generative vision-language models: tiny LLaVA, Idefics3 and BLIP-2 checkpoints built
offline (tests/helpers/tiny_vlms.py) and run through ``hf:<dir>`` and the built-in ``tiny-llava``.

Oracles: forced right answers score 100 % and forced wrong ones 0 % through the real generation
path; the loss mask covers exactly the answer tokens; LNTK per block equals brute force.
"""

from __future__ import annotations

import contextlib
import importlib.util
import io
from dataclasses import replace
from functools import partial

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import run_simulation
import tasks
from tasks.data import load_partition
from tasks.lntk import principal_eigenvalue
from tasks.models.generative import ANSWER_TOKEN_TYPE, IGNORE, normalize_answer
from tests.helpers.inprocess import Simulator
from tests.helpers.runs import trained_rounds
from tests.helpers.tiny_vlms import (
    qwen2vl_processor,
    save_blip2,
    save_gemma3,
    save_idefics3,
    save_llava,
    save_llava_next,
    save_paligemma,
    save_qwen2vl,
)

FAMILIES = {"llava": save_llava, "idefics3": save_idefics3, "blip2": save_blip2}  # also run federated
TINY = {**FAMILIES, "llava-next": save_llava_next, "paligemma": save_paligemma,  # every checkpoint the
        "gemma3": save_gemma3}  # oracles run on
EVERY = ["tiny-llava", *TINY, "qwen2-vl"]
RUN = ("dataset='synthetic' partitioner='iid' num-server-rounds=2 local-steps=2 batch-size=4 "
       "max-train-samples=16 max-test-samples=6 score-batch-size=4 optimizer-pop-size=10 "
       "optimizer-generations=3")


@pytest.fixture(scope="module")
def partition():
    return load_partition("synthetic", 0, 2, "iid", seed=0, max_train=16, max_test=8)


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory) -> dict:
    root = tmp_path_factory.mktemp("vlms")
    return {name: save(root / name) for name, save in TINY.items()}


@pytest.fixture(scope="module")
def qwen(tmp_path_factory):
    """A tiny Qwen2-VL checkpoint and its processor built in memory (tests/helpers/tiny_vlms.py)."""
    folder = save_qwen2vl(tmp_path_factory.mktemp("qwen") / "qwen")
    return folder, qwen2vl_processor(folder)


def with_processor(folder, processor):
    """`load_processor` answering for ``folder`` with ``processor`` (the one step torchvision
    blocks here); every other step of ``hf:<dir>`` runs as for any checkpoint."""
    from tasks.models import generative

    real = generative.load_processor
    return lambda path, arch: processor if path == folder else real(path, arch)


def family_model(family: str, partition, checkpoints, qwen, monkeypatch) -> tasks.FederatedVLM:
    """The generator of one family of the tests (Qwen2-VL with its in-memory processor)."""
    if family == "qwen2-vl":
        monkeypatch.setattr("tasks.models.generative.load_processor", with_processor(*qwen))
        return generator(f"hf:{qwen[0]}", partition)
    return generator("tiny-llava" if family == "tiny-llava" else f"hf:{checkpoints[family]}", partition)


def generator(name: str, partition, **options) -> tasks.FederatedVLM:
    model = tasks.build_model(tasks.ModelSpec(name, seed=0, **options), len(partition.labels))
    model.answers = tuple(partition.labels)
    return model


def simulate(*args: str) -> tuple[int, str, str]:
    """``run_simulation.py`` in this process with the in-process federation (no Ray)."""
    out, err = io.StringIO(), io.StringIO()
    with pytest.MonkeyPatch.context() as patch, contextlib.redirect_stdout(out), \
            contextlib.redirect_stderr(err):
        patch.setattr(run_simulation, "simulate", Simulator())
        code = run_simulation.main(list(args))
    return code, out.getvalue(), err.getvalue()


@pytest.mark.parametrize("family", EVERY)
def test_the_loss_mask_covers_exactly_the_answer_tokens(family, partition, checkpoints, qwen, monkeypatch):
    model = family_model(family, partition, checkpoints, qwen, monkeypatch)
    samples = partition.train[:4]
    batch = model.collate(samples)
    for i, sample in enumerate(samples):
        answer = (batch["labels"][i] != IGNORE).nonzero().flatten()
        assert answer.tolist() == list(range(int(answer[0]), int(answer[-1]) + 1))  # one run of tokens
        text = model.tokenizer.decode(batch["input_ids"][i, answer[:-1]])
        assert text == f" {partition.labels[sample.target]}"
        assert int(batch["input_ids"][i, answer[-1]]) == model.stop_ids[0]
        assert torch.equal(batch["labels"][i, answer], batch["input_ids"][i, answer])
        assert batch["attention_mask"][i, int(answer[-1]) + 1:].sum() == 0  # only padding after it
    logits = model(batch)
    by_hand = [F.cross_entropy(logits[i, j - 1].float(), batch["labels"][i, j], reduction="sum")
               for i in range(len(samples)) for j in (batch["labels"][i] != IGNORE).nonzero().flatten()]
    assert float(model.loss(logits, batch["labels"])) == pytest.approx(float(sum(by_hand) / len(by_hand)),
                                                                       rel=1e-6)


def forcing(model, answers: list[str]):
    """``prefix_allowed_tokens_fn`` that makes greedy generation write ``answers[i]`` for sample i."""
    width = {}

    def allowed(i: int, ids: torch.Tensor) -> list[int]:
        width.setdefault("prompt", ids.shape[0])
        target = model.answer_ids(answers[i])
        step = ids.shape[0] - width["prompt"]
        return [target[step] if step < len(target) else model.stop_ids[0]]

    return allowed


@pytest.mark.parametrize("family", EVERY)
def test_forced_right_answers_score_100_and_forced_wrong_ones_0(family, partition, checkpoints, qwen,
                                                                monkeypatch):
    model = family_model(family, partition, checkpoints, qwen, monkeypatch)
    samples = partition.test[:6]
    right = [partition.labels[s.target] for s in samples]
    wrong = [partition.labels[(s.target + 1) % len(partition.labels)] for s in samples]
    generate = model.backbone.generate
    for answers, expected in ((right, 1.0), (wrong, 0.0)):
        model.backbone.generate = partial(generate, prefix_allowed_tokens_fn=forcing(model, answers))
        result = tasks.evaluate(model, samples, batch_size=len(samples))
        assert result["accuracy"] == expected
        assert all(result[f"accuracy-{s.qtype}"] == expected for s in samples)
    model.backbone.generate = generate


@pytest.mark.parametrize("family", EVERY)
def test_a_later_answer_token_never_changes_the_logits_of_an_earlier_one(family, partition, checkpoints, qwen,
                                                                        monkeypatch):
    """Causal answers in every family: the logits up to answer token k do not move when token k + 1
    changes. Where token types exist, the planted fault (the answer typed as the bidirectional part:
    PaliGemma's prefix 0, Gemma 3's image 1) makes them move, so the check can fail."""
    model = family_model(family, partition, checkpoints, qwen, monkeypatch).eval()
    batch = model.collate(partition.train[:1])
    answer = (batch["labels"][0] != IGNORE).nonzero().flatten()
    last = int(answer[-1])
    changed = {**batch, "input_ids": batch["input_ids"].clone()}
    changed["input_ids"][0, last] = model.tokenizer.convert_tokens_to_ids("Z")
    with torch.no_grad():
        before, after = model(batch)[0, :last], model(changed)[0, :last]
        assert float((before - after).abs().max()) == 0.0
        if "token_type_ids" in batch:
            types = batch["token_type_ids"][0]
            right = ANSWER_TOKEN_TYPE.get(model.backbone.config.model_type, 0)
            assert types[answer].eq(right).all() and types[:int(answer[0])].eq(1 - right).any()
            leaky = {k: v.clone() for k, v in batch.items()}
            leaky["token_type_ids"][0, answer] = 1 - right
            leaked = {**leaky, "input_ids": changed["input_ids"]}
            assert float((model(leaky)[0, :last] - model(leaked)[0, :last]).abs().max()) > 1e-5


def test_paligemma_attends_its_image_and_prompt_prefix_bidirectionally(partition, checkpoints):
    """PaliGemma's prefix (token type 0) is bidirectional: a later prompt token moves earlier logits."""
    model = generator(f"hf:{checkpoints['paligemma']}", partition).eval()
    batch = model.collate(partition.train[:1])
    first = int((batch["labels"][0] != IGNORE).nonzero()[0])
    changed = {**batch, "input_ids": batch["input_ids"].clone()}
    changed["input_ids"][0, first - 2] = model.tokenizer.convert_tokens_to_ids("Z")
    with torch.no_grad():
        assert float((model(batch)[0, :first - 3] - model(changed)[0, :first - 3]).abs().max()) > 1e-5


def test_generation_is_greedy_whatever_the_checkpoints_generation_config(partition):
    model = generator("tiny-llava", partition)
    samples = partition.test[:6]
    plain = model.generate_answers(samples)
    model.backbone.generation_config.update(do_sample=True, temperature=50.0, num_beams=3,
                                            repetition_penalty=50.0, top_k=0)
    torch.manual_seed(1)
    assert model.generate_answers(samples) == plain


def test_the_chat_templates_turn_end_token_ends_training_answers_and_generation(partition, checkpoints):
    model = generator(f"hf:{checkpoints['idefics3']}", partition)
    end, eos = (model.tokenizer.convert_tokens_to_ids(t) for t in ("<end_of_utterance>", "</s>"))
    assert model.stop_ids == [end, eos]
    assert model.answer_ids("yes")[-1] == end
    assert generator("tiny-llava", partition).stop_ids == [eos]


def sentencepiece_tokenizer(words: tuple[str, ...]):
    """A SentencePiece-style tokenizer built offline (Llama's fast-tokenizer layout): Unigram pieces,
    spaces written "▁" and one prepended, so a lone " yes" tokenises as a stray "▁" plus "▁yes"."""
    from tokenizers import Tokenizer, decoders, models, normalizers
    from transformers import PreTrainedTokenizerFast

    specials = ["<pad>", "<s>", "</s>", "<unk>", "<image>"]
    pieces = [*specials, "▁", *(chr(c) for c in range(33, 127)), *(f"▁{w}" for w in words)]
    core = Tokenizer(models.Unigram([(p, -float(len(pieces)) if len(p) == 1 else -1.0) for p in pieces],
                                    unk_id=3))
    core.normalizer = normalizers.Sequence([normalizers.Prepend("▁"), normalizers.Replace(" ", "▁")])
    core.decoder = decoders.Sequence([decoders.Replace("▁", " "), decoders.Fuse(), decoders.Strip(" ", 1, 0)])
    return PreTrainedTokenizerFast(tokenizer_object=core, pad_token="<pad>", bos_token="<s>",
                                   eos_token="</s>", unk_token="<unk>", additional_special_tokens=["<image>"])


def test_answers_with_a_sentencepiece_tokenizer_have_no_stray_word_boundary_token():
    from tasks.models.generative import GenerativeVLM
    from tasks.models.tiny_llava import llava_processor, tiny_llava

    tok = sentencepiece_tokenizer(("yes", "red"))
    assert tok.convert_ids_to_tokens(tok(" yes", add_special_tokens=False)["input_ids"]) == ["▁", "▁yes"]
    backbone, processor = tiny_llava(llava_processor(tok))
    model = GenerativeVLM(backbone, processor)
    ids = model.answer_ids("yes")
    assert tok.convert_ids_to_tokens(ids) == ["▁yes", "</s>"]
    assert tok.decode(ids[:-1]).strip() == "yes"


def test_an_encoder_decoder_language_model_is_refused_with_one_line():
    from transformers import Blip2Config, Blip2ForConditionalGeneration

    from tasks.models.generative import GenerativeVLM
    from tasks.models.tiny_llava import llava_processor

    text = {"model_type": "t5", "d_model": 32, "d_ff": 64, "num_layers": 1, "num_heads": 2, "d_kv": 16,
            "vocab_size": 300}
    config = Blip2Config(vision_config={"hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 1,
                                        "num_attention_heads": 2, "image_size": 32, "patch_size": 8},
                         text_config=text, num_query_tokens=2,
                         qformer_config={"hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 1,
                                         "num_attention_heads": 2, "encoder_hidden_size": 32})
    with pytest.raises(ValueError, match=r"encoder-decoder language model \(T5Config\)"):
        GenerativeVLM(Blip2ForConditionalGeneration(config), llava_processor())


def test_answers_are_normalised_as_vqa_accuracy_does():
    assert normalize_answer("The Circle.") == "circle"
    assert normalize_answer("  a  RED, square!") == "red square"
    assert normalize_answer("yes") != normalize_answer("no")


def brute_force_eigenvalues(model, samples) -> np.ndarray:
    """λ₁ of J Jᵀ per layer, J's rows from one backward pass per sample, each alone in its batch."""
    model.eval()
    rows = []
    for sample in samples:
        batch = model.collate([sample])
        loss = model.loss(model(batch), batch["labels"])
        names = [n for layer in range(len(model.layer_names))
                 for n in tasks.layer_parameter_names(model, layer)]
        params = dict(model.named_parameters())
        grads = torch.autograd.grad(loss, [params[n] for n in names])
        rows.append(dict(zip(names, grads, strict=True)))
    values = []
    for layer in range(len(model.layer_names)):
        names = tasks.layer_parameter_names(model, layer)
        j = torch.stack([torch.cat([r[n].reshape(-1) for n in names]) for r in rows]).double()
        values.append(principal_eigenvalue(j @ j.T))
    return np.array(values)


@pytest.mark.parametrize("family", ["tiny-llava", "idefics3", "blip2", "qwen2-vl"])
def test_lntk_per_block_equals_brute_force(family, partition, checkpoints, qwen, monkeypatch):
    if family == "qwen2-vl":
        monkeypatch.setattr("tasks.models.generative.load_processor", with_processor(*qwen))
    folder = qwen[0] if family == "qwen2-vl" else checkpoints.get(family)
    name = "tiny-llava" if family == "tiny-llava" else f"hf:{folder}"
    model = generator(name, partition)
    tasks.train(model, partition.train, np.ones(len(model.layer_names), bool), steps=2, batch_size=4,
                lr=1e-2)  # LoRA B leaves zero, so every layer's gradient is non-trivial
    samples = partition.train[:4]
    flattened = pytest.warns(RuntimeWarning, match=r"LNTK hooks cannot score GenerativeVLM \(Linear input "
                             "is not batch-first")  # OPT flattens tokens
    with flattened if family == "blip2" else contextlib.nullcontext():
        scored = tasks.layer_scores(model, samples).eigenvalues
    expected = brute_force_eigenvalues(model, samples)
    assert (expected > 0).all()
    np.testing.assert_allclose(scored, expected, rtol=1e-6)


def test_vlm_layers_pick_decoder_blocks_vision_blocks_and_projector(partition):
    language = generator("tiny-llava", partition)
    assert language.layer_names == [f"backbone.model.language_model.layers.{i}" for i in range(4)]
    vision = generator("tiny-llava", partition, vlm_layers="vision")
    assert vision.layer_names == ["backbone.model.vision_tower.encoder.layers.0",
                                  "backbone.model.vision_tower.encoder.layers.1",
                                  "backbone.model.multi_modal_projector"]
    both = generator("tiny-llava", partition, vlm_layers="both")
    assert both.layer_names == vision.layer_names + language.layer_names
    modules = {k.split(":")[1].rsplit(".lora_", 1)[0].rpartition(".")[2]
               for k in tasks.get_layer_state(language, [0])}
    assert modules == {"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"}
    narrow = generator("tiny-llava", partition, lora_targets=("q_proj", "v_proj"))
    assert {k.split(".lora_")[0].rpartition(".")[2] for k in tasks.get_layer_state(narrow, [0])} == {
        "q_proj", "v_proj"}
    with pytest.raises(ValueError, match="vlm-layers 'decoder' is unknown"):
        generator("tiny-llava", partition, vlm_layers="decoder")


@pytest.mark.parametrize("family", list(FAMILIES))
def test_each_family_runs_two_federated_rounds_with_f3ocus_through_hf_dir(family, checkpoints, tmp_path):
    code, out, err = simulate("--num-clients", "2", "--run-config",
                              f"model='hf:{checkpoints[family]}' budgets='2,1' {RUN} "
                              f"results-dir='{tmp_path}' run-name='run'")
    assert code == 0, out[-2000:] + err[-2000:]
    rows = trained_rounds(tmp_path / "run" / "clients.jsonl")
    assert sorted((r["round"], r["partition-id"]) for r in rows) == [(1, 0), (1, 1), (2, 0), (2, 1)]
    for row in rows:
        assert_exact_match_rates(row["evaluate"])
        assert {"accuracy-shape", "accuracy-color", "accuracy-yes/no"} & set(row["evaluate"])
        assert len(row["mask"]) == row["budget"]


def test_a_qwen2_vl_checkpoint_runs_two_federated_rounds_with_its_processor(qwen, tmp_path, monkeypatch):
    """Packed image patches, image_grid_thw and mm_token_type_ids pass through collate, training,
    LNTK and generation; only the processor is built in memory (torchvision, see tiny_vlms)."""
    monkeypatch.setattr("tasks.models.generative.load_processor", with_processor(*qwen))
    code, out, err = simulate("--num-clients", "2", "--run-config",
                              f"model='hf:{qwen[0]}' budgets='2,1' {RUN} results-dir='{tmp_path}' "
                              "run-name='run'")
    assert code == 0, out[-2000:] + err[-2000:]
    rows = trained_rounds(tmp_path / "run" / "clients.jsonl")
    assert sorted((r["round"], r["partition-id"]) for r in rows) == [(1, 0), (1, 1), (2, 0), (2, 1)]
    for row in rows:
        assert_exact_match_rates(row["evaluate"])


@pytest.mark.parametrize(("aggregation", "extra"), [("masked-fedavg", ""), ("fedpia", ""), ("local", ""),
                                                     ("sima", "sima-freq=1"),
                                                     ("sima", "adapter='pq-lora' num-blocks=2")])
def test_every_aggregation_runs_with_a_generative_model(aggregation, extra, tmp_path):
    code, out, err = simulate("--num-clients", "2", "--run-config",
                              f"model='tiny-llava' budgets='2' aggregation='{aggregation}' {extra} {RUN} "
                              f"results-dir='{tmp_path}' run-name='run'")
    assert code == 0, out[-2000:] + err[-2000:]
    rounds = trained_rounds(tmp_path / "run" / "rounds.jsonl")
    assert len(rounds) == 2 and all(r["aggregated"] and r["failures"] == 0 for r in rounds)


@pytest.mark.parametrize("strategy", ["lntk", "random", "last", "all", "none", "snip", "grasp", "synflow"])
def test_selection_rules_run_with_a_generative_model(strategy, tmp_path):
    code, out, err = simulate("--num-clients", "2", "--run-config",
                              f"model='tiny-llava' budgets='2' strategy='{strategy}' "
                              f"{RUN.replace('num-server-rounds=2', 'num-server-rounds=1')} "
                              f"results-dir='{tmp_path}' run-name='run'")
    assert code == 0, out[-2000:] + err[-2000:]
    rows = trained_rounds(tmp_path / "run" / "clients.jsonl")
    for row in rows:
        assert_exact_match_rates(row["evaluate"])
    if strategy == "none":  # no head and no adapters: the zero-shot row, nothing sent
        assert all(r["bytes-up"] == 0 and not r["mask"] for r in rows)


def assert_exact_match_rates(evaluation: dict) -> None:
    """Exact-match accuracy is a count of right answers over the test samples, and the overall rate is
    a weighted mean of the per-question-type rates (token-level or mis-grouped scoring fails this)."""
    n, accuracy = evaluation["num-examples"], evaluation["accuracy"]
    assert n > 0 and abs(accuracy * n - round(accuracy * n)) < 1e-6, evaluation
    per_type = [v for k, v in evaluation.items() if k.startswith("accuracy-")]
    assert per_type and min(per_type) - 1e-9 <= accuracy <= max(per_type) + 1e-9, evaluation


def one_line(err: str) -> str:
    line = err.strip()
    assert line.startswith("error: ") and "\n" not in line, err
    return line


def test_bad_generative_settings_fail_before_round_1_with_one_line(checkpoints, tmp_path):
    code, _, err = simulate("--num-clients", "2", "--run-config", f"model='tiny-llava' quantization='4bit' "
                            f"device='cpu' {RUN} results-dir='{tmp_path}'")
    assert code == 2 and "quantization = '4bit' needs a CUDA device" in one_line(err)
    code, _, err = simulate("--run-config",
                            f"model='tiny-llava' vlm-layers='decoder' results-dir='{tmp_path}'")
    assert code == 2 and "vlm-layers = 'decoder' is unknown" in one_line(err)
    bare = tmp_path / "no-processor"
    model, _ = __import__("tasks.models.tiny_llava", fromlist=["tiny_llava"]).tiny_llava()
    model.save_pretrained(bare)
    code, _, err = simulate("--run-config", f"model='hf:{bare}' {RUN} results-dir='{tmp_path}'")
    assert code == 2 and "has no processor" in one_line(err)
    assert not list(tmp_path.glob("*/rounds.jsonl"))


@pytest.mark.skipif(importlib.util.find_spec("torchvision") is not None, reason="torchvision is installed")
def test_a_qwen2_vl_checkpoint_without_torchvision_is_one_line(tmp_path):
    folder = save_qwen2vl(tmp_path / "qwen")
    code, _, err = simulate("--run-config", f"model='hf:{folder}' {RUN} results-dir='{tmp_path}'")
    assert code == 2 and "need torchvision" in one_line(err)


@pytest.mark.parametrize("family", EVERY)
def test_closed_set_scores_are_each_answers_summed_token_log_likelihood(family, partition, checkpoints, qwen,
                                                                        monkeypatch):
    """Oracle: one row per (sample, answer) through the plain forward, the answer's tokens' log-
    probabilities summed by hand (stop token excluded). The one-row-per-sample pass (first tokens
    from where the prompt ends, with the template's shared opening run once from a cache where
    the family allows it) must give the same numbers."""
    model = family_model(family, partition, checkpoints, qwen, monkeypatch)
    model.answers = model.answers[:4]  # the oracle runs once per answer
    samples = [replace(s, target=int(s.target) % 4) for s in partition.test[:3]]
    assert torch.allclose(model.answer_scores(samples), summed_answer_log_likelihood(model, samples),
                          atol=1e-4), family


def summed_answer_log_likelihood(model, samples) -> torch.Tensor:
    """(B, A): each answer's tokens' log-probabilities after each sample's prompt (stop token left
    out), summed by hand from one plain forward pass per answer: the closed-set scores' oracle."""
    expected = torch.zeros(len(samples), len(model.answers))
    with torch.no_grad():
        for k in range(len(model.answers)):
            batch = model.collate([replace(s, target=k) for s in samples])
            logp = model(batch).float().log_softmax(-1)
            for i in range(len(samples)):
                answer = (batch["labels"][i] != IGNORE).nonzero().flatten()[:-1]
                expected[i, k] = logp[i, answer - 1, batch["labels"][i, answer]].sum()
    return expected


def test_closed_set_runs_the_templates_shared_opening_once(partition, checkpoints, monkeypatch):
    """The prefix is real (the chat template's opening tokens, before the image) and changes no score."""
    model = generator(f"hf:{checkpoints['llava']}", partition)
    samples = partition.test[:4]
    emb = model.embed(model.collate(samples))
    size = model._shared_prefix(emb, emb["first"])
    image = model.backbone.config.image_token_id
    assert 0 < size <= int((emb["input_ids"][0] == image).nonzero()[0])
    cached = model.answer_scores(samples)
    monkeypatch.setattr(model, "_shared_prefix", lambda emb, first: 0)
    assert torch.allclose(cached, model.answer_scores(samples), atol=1e-5)


def test_two_builds_of_tiny_llava_give_a_question_the_same_token_ids():
    """Each client process builds its own tokenizer: the ids must not depend on the build."""
    from tasks.models.tiny_llava import byte_tokenizer

    assert byte_tokenizer()("what color is the shape? teal")["input_ids"] == \
        byte_tokenizer()("what color is the shape? teal")["input_ids"]
