"""Adapters: peft LoRA placement, layer/personal state round-trips, validation, freezing."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from peft.tuners.lora import LoraLayer

import tasks


@pytest.fixture
def model():
    return tasks.build_model(tasks.ModelSpec("tiny-vilt"), 5)


def test_lora_in_every_layer_on_every_linear(model):
    for layer in range(len(model.layer_names)):
        names = tasks.layer_parameter_names(model, layer)
        assert names and all("lora_A" in n or "lora_B" in n for n in names)
        assert all(n.startswith(model.layer_names[layer] + ".") for n in names)
        # 6 linears per ViLT block (q, k, v, attention out, intermediate, output) x (A, B)
        assert len(names) == 12
    lora_b = [p for n, p in model.named_parameters() if "lora_B" in n]
    assert all(torch.count_nonzero(p) == 0 for p in lora_b)  # B = 0 at initialisation


def test_layer_adapter_unit_is_the_layers_own_weights():
    model = tasks.build_model(tasks.ModelSpec("tiny-vilt", adapter="layer"), 5)
    assert not any("lora_" in n for n, _ in model.named_parameters())
    names = tasks.layer_parameter_names(model, 2)
    prefix = "backbone.encoder.layer.2."
    expected = [n for n, _ in model.named_parameters() if n.startswith(prefix)]
    assert names == expected and len(names) == 16  # 6 linears x (w, b) + 2 LayerNorms x (w, b)


def test_layer_state_round_trips_exactly(model):
    state = tasks.get_layer_state(model, [1, 3])
    assert {tasks.layer_of_key(k) for k in state} == {1, 3}
    assert all(isinstance(v, np.ndarray) for v in state.values())
    other = tasks.build_model(tasks.ModelSpec("tiny-vilt", seed=9), 5)
    changed = {k: v + np.float32(0.25) for k, v in state.items()}
    tasks.set_layer_state(other, changed)
    back = tasks.get_layer_state(other, [1, 3])
    assert back.keys() == changed.keys()
    assert all(np.array_equal(back[k], changed[k]) for k in back)
    assert all(back[k].dtype == np.float32 for k in back)
    # get returns copies: mutating them does not touch the model
    back[next(iter(back))][...] = 7.0
    assert not np.array_equal(tasks.get_layer_state(other, [1])[next(iter(back))], back[next(iter(back))])


def test_set_layer_state_validates_everything_before_writing(model):
    state = tasks.get_layer_state(model, [0])
    before = tasks.get_layer_state(model, range(4))
    altered = {k: v + np.float32(1) for k, v in state.items()}  # valid, would change the model
    key = next(iter(state))
    bad_entries = [
        ("0:not.a.parameter", state[key], "not a trainable parameter of layer 0"),
        ("1:" + key[2:], state[key], "not a trainable parameter of layer 1"),
        ("9:" + key[2:], state[key], "layer 9 out of range"),
        ("x" + key, state[key], "must look like '<layer>:<parameter>'"),
        (key, state[key][:1], "has shape"),
        (key, state[key].astype(np.float64), "has dtype float64, expected float32"),
        (key, torch.from_numpy(state[key]), "must be a numpy array"),
    ]
    for bad_key, bad_value, message in bad_entries:
        with pytest.raises(ValueError, match=message):
            tasks.set_layer_state(model, {**altered, bad_key: bad_value})
        after = tasks.get_layer_state(model, range(4))
        assert all(np.array_equal(after[k], before[k]) for k in before)


def test_layer_of_key():
    assert tasks.layer_of_key("12:backbone.encoder.layer.12.x.lora_A.default.weight") == 12
    for bad in ("backbone.x", ":x", "3:", "-1:x", 5):
        with pytest.raises(ValueError, match="layer state key"):
            tasks.layer_of_key(bad)


def test_personal_state_round_trips_and_validates(model):
    state = tasks.get_personal_state(model)
    assert set(state) == {"head.weight", "head.bias"}
    other = tasks.build_model(tasks.ModelSpec("tiny-vilt", seed=1), 5)
    tasks.set_personal_state(other, state)
    assert all(np.array_equal(tasks.get_personal_state(other)[k], v) for k, v in state.items())
    with pytest.raises(ValueError, match="not a personal parameter"):
        tasks.set_personal_state(other, {"backbone.pooler.dense.weight": np.zeros((32, 32), np.float32)})
    with pytest.raises(ValueError, match="has shape"):
        tasks.set_personal_state(other, {"head.bias": np.zeros(4, np.float32)})


def test_freeze_except_and_mask_validation(model):
    mask = np.array([False, True, False, True])
    tasks.freeze_except(model, mask)
    trainable = {n for n, p in model.named_parameters() if p.requires_grad}
    expected = set(tasks.layer_parameter_names(model, 1)) | set(tasks.layer_parameter_names(model, 3))
    assert trainable == expected | {"head.weight", "head.bias"}
    tasks.freeze_except(model, np.array([0, 1, 0, 0]))  # 0/1 integers are accepted
    assert {n for n, p in model.named_parameters() if p.requires_grad} == set(
        tasks.layer_parameter_names(model, 1)
    ) | {"head.weight", "head.bias"}
    with pytest.raises(ValueError, match="length-4 array"):
        tasks.freeze_except(model, np.ones(3, bool))
    with pytest.raises(ValueError, match="dtype float64"):
        tasks.freeze_except(model, np.ones(4))
    with pytest.raises(ValueError, match="dtype int64"):
        tasks.freeze_except(model, np.array([0, 2, 0, 1]))


def test_minilm_effnet_lora_targets_cover_image_stage_convs(minilm):
    adapted = [n for n, m in minilm.named_modules() if isinstance(m, LoraLayer)]
    convs = [n for n in adapted if n.startswith("image.")]
    # every MBConv block has a 1x1 project conv, all but the first a 1x1 expand conv
    assert len(convs) == 16 + 15
    assert all(isinstance(minilm.get_submodule(n).base_layer, torch.nn.Conv2d) for n in convs)
    assert len(adapted) == len(convs) + 6 * 6  # + 6 linears in each of the 6 MiniLM blocks
    assert not any("depthwise" in n for n in adapted)
    assert len(minilm.layer_names) == 13
    for layer in range(13):
        assert tasks.layer_parameter_names(minilm, layer)


@pytest.fixture(scope="module")
def minilm():
    return tasks.build_model(tasks.ModelSpec("minilm-effnet"), 13)
