"""``projection = "frozen"``: minilm-effnet's image→text projection stays as drawn from the seed while
the head and the masked adapters train; a model without such a projection refuses it in one line."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import tasks
from settings import ConfigError, RunConfig, default_config
from tasks.adapters import personal_parameter_names
from tasks.models.checks import check_model_settings


def test_a_frozen_projection_stays_as_drawn_while_the_head_and_adapters_train():
    partition = tasks.load_partition("synthetic", 0, 1, "iid", seed=0, max_train=16, max_test=2)
    spec = tasks.ModelSpec("minilm-effnet", seed=0, frozen_projection=True)
    model = tasks.build_model(spec, len(partition.labels))
    drawn = tasks.build_model(tasks.ModelSpec("minilm-effnet", seed=0), len(partition.labels))
    assert personal_parameter_names(model) == ["head.weight", "head.bias"]
    check_model_settings(spec, model)  # the server's check of the built model (round 0) accepts it
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    mask = np.zeros(len(model.layer_names), dtype=bool)
    mask[-1] = True
    tasks.train(model, partition.train, mask, steps=2, batch_size=8, lr=0.01)
    after = dict(model.named_parameters())
    for name in ("visual_proj.weight", "visual_proj.bias", "visual_pos.weight"):
        assert torch.equal(after[name], before[name]), name
        assert torch.equal(after[name], dict(drawn.named_parameters())[name]), name  # the seed's draw
    moved = {n for n in before if not torch.equal(after[n], before[n])}
    assert "head.weight" in moved and any("text.encoder.layer.5" in n and "lora" in n for n in moved)


def test_a_model_without_a_projection_refuses_a_frozen_one():
    values = {**default_config(), "model": "tiny-vilt", "projection": "frozen"}
    config = RunConfig.from_mapping(values)
    with pytest.raises(ValueError, match="projection = 'frozen' is not supported by model 'tiny-vilt'"):
        tasks.build_model(config.model_spec(), 13)
    with pytest.raises(ConfigError, match="projection = 'sideways' is unknown; choose one of trained"):
        RunConfig.from_mapping({**values, "projection": "sideways"})
