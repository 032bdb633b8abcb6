"""A new model and a new data set are one registry entry each.

This module plants both, pointing the registries at its own builder and loader as a newcomer's
entry would point at ``tasks/models/<family>.py`` and ``tasks/data/<name>.py``: a tiny model
(`PlantedVLM`: three residual Linear blocks over a pixel stem and byte embeddings) and a tiny data
set (``planted-colours``: one-colour images, "what colour is it?"). Each is then picked up end to
end by name: built and loaded from a run config, LNTK-scored, and federated for two rounds through
``run_simulation.main`` on the in-process grid (tests/helpers/inprocess.py), as
tests/project/test_resume_inprocess.py runs it. Nothing else of the project is edited.
"""

from __future__ import annotations

import json
from collections.abc import Sequence

import numpy as np
import pytest
import torch
from flwr.app import MessageType
from torch import nn

import run_simulation
import tasks
from flower_compat.inprocess import InProcessGrid
from settings import RunConfig, default_config
from tasks.data import registry as data_registry
from tasks.data.types import Source, Split
from tasks.models import registry as model_registry
from tasks.models.base import FederatedVLM, images_to_tensor
from tests.helpers.inprocess import Simulator as InProcessSimulator

MODEL, DATASET = "planted-mlp", "planted-colours"
COLOURS = ("red", "green", "blue")
RGB = np.array([[220, 30, 30], [30, 200, 40], [40, 50, 230]], np.uint8)
TRAIN, TEST, CLIENTS, ROUNDS = 24, 12, 2, 2
SETTINGS = {"model": MODEL, "dataset": DATASET, "partitioner": "iid", "strategy": "lntk", "budgets": "2,1",
            "num-server-rounds": ROUNDS, "local-steps": 1, "batch-size": 4, "score-batch-size": 4,
            "max-train-samples": 8, "max-test-samples": 4}


class PlantedVLM(FederatedVLM):
    """Pixels -> Linear stem, question bytes -> embedding (both frozen, in `embed`); three
    selectable residual blocks; mean features -> the personal head."""

    WIDTH, TOKENS = 8, 16

    def __init__(self, num_outputs: int, task: str) -> None:
        super().__init__(num_outputs, task, self.WIDTH)
        self.image_size = 4
        self.stem = nn.Linear(3 * self.image_size**2, self.WIDTH)
        self.words = nn.Embedding(256, self.WIDTH)
        self.blocks = nn.ModuleList(nn.Sequential(nn.Linear(self.WIDTH, self.WIDTH), nn.Tanh())
                                    for _ in range(3))
        self.layer_names = [f"blocks.{i}" for i in range(3)]
        self.layer_prefixes = [(name,) for name in self.layer_names]

    def encode_inputs(self, samples: Sequence) -> dict[str, torch.Tensor]:
        ids = np.zeros((len(samples), self.TOKENS), np.int64)
        for row, sample in zip(ids, samples, strict=True):
            text = sample.question.encode()[: self.TOKENS]
            row[: len(text)] = list(text)
        return {"input_ids": torch.from_numpy(ids),
                "pixel_values": images_to_tensor(samples, self.image_size, 0.5, 0.5)}

    def embed(self, batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        pixels = self.stem(batch["pixel_values"].to(self.device).flatten(1))
        return {"h": pixels + self.words(batch["input_ids"].to(self.device)).mean(1)}

    def features(self, emb: dict[str, torch.Tensor]) -> torch.Tensor:
        h = emb["h"]
        for block in self.blocks:
            h = h + block(h)
        return h


def build_planted(spec: model_registry.ModelSpec, num_outputs: int, task: str) -> PlantedVLM:
    """The planted model's registry builder (`tasks.models.registry`)."""
    return PlantedVLM(num_outputs, task)


def _split(rng: np.random.Generator, n: int) -> Split:
    answers = rng.integers(0, len(COLOURS), n)
    images = np.broadcast_to(RGB[answers][:, None, None, :], (n, 4, 4, 3)).copy()
    return Split(blocks=(images,), groups=np.zeros(n, np.int64), rows=np.arange(n),
                 questions=("what colour is it?",) * n, targets=answers.astype(np.int64),
                 qtypes=np.array(["colour"] * n))


def colour_source(argument: str, seed: int) -> Source:
    """The planted data set's registry loader (`tasks.data.registry`): seeded one-colour images."""
    rng = np.random.default_rng(seed)
    return Source(_split(rng, TRAIN), _split(rng, TEST), COLOURS, "vqa")


@pytest.fixture(scope="module")
def planted():
    """Both entries registered for this module (restored afterwards)."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setitem(model_registry.REGISTRY, MODEL, model_registry.ModelEntry(f"{__name__}:build_planted"))
        patch.setitem(data_registry.REGISTRY, DATASET,
                      data_registry.DatasetEntry(f"{__name__}:colour_source"))
        yield


@pytest.fixture(scope="module")
def federated(planted, tmp_path_factory):
    """Two federated rounds of the planted model on the planted data set through
    ``run_simulation.main``; returns the run directory and every (message, client reply)."""
    results = tmp_path_factory.mktemp("planted")
    replies = []
    with pytest.MonkeyPatch.context() as patch:
        sim = InProcessSimulator()
        patch.setattr(run_simulation, "simulate", sim)
        real_answer = InProcessGrid.answer

        def answer(grid: InProcessGrid, msg):
            out = real_answer(grid, msg)
            replies.extend((msg, reply) for reply in out)
            return out

        patch.setattr(InProcessGrid, "answer", answer)
        text = " ".join(f"{k}='{v}'" if isinstance(v, str) else f"{k}={v}" for k, v in
                        {**SETTINGS, "results-dir": str(results), "run-name": "run"}.items())
        code = run_simulation.main(["--num-clients", str(CLIENTS), "--run-config", text])
    assert code == 0
    return results / "run", replies


def test_a_planted_model_entry_is_built_by_name_scored_and_federated(federated):
    config = RunConfig.from_mapping({**default_config(), **SETTINGS})
    model = tasks.build_model(config.model_spec(), len(COLOURS))
    assert isinstance(model, PlantedVLM) and model.layer_names == ["blocks.0", "blocks.1", "blocks.2"]
    assert any("lora_B" in name for name in tasks.layer_parameter_names(model, 0))  # LoRA injected
    part = tasks.load_partition(DATASET, 0, CLIENTS, seed=0)
    scores = tasks.layer_scores(model, part.train[:6])
    assert scores.eigenvalues.shape == (3,) and (scores.eigenvalues > 1e-8).all()

    run_dir, replies = federated
    lntk = [r.content["scores"] for m, r in replies if m.metadata.message_type == MessageType.EVALUATE
            and m.content["config"]["score"] == "lntk"]
    assert len(lntk) == CLIENTS * ROUNDS
    assert all(len(s["eigenvalues"]) == 3 and max(s["eigenvalues"]) > 0 for s in lntk)
    rows = [json.loads(line) for line in (run_dir / "rounds.jsonl").read_text().splitlines()]
    assert [row["round"] for row in rows] == [0, 1, 2]


def test_a_planted_data_set_entry_is_loaded_by_name_and_federated(federated):
    RunConfig.from_mapping({**default_config(), **SETTINGS, "dataset": f"mixed:{DATASET}+synthetic"})
    parts = [tasks.load_partition(DATASET, i, CLIENTS, seed=0) for i in range(CLIENTS)]
    assert [len(p.train) + len(p.test) for p in parts] == [(TRAIN + TEST) // CLIENTS] * CLIENTS
    sample = parts[0].train[0]
    assert parts[0].labels == list(COLOURS) and sample.question == "what colour is it?"
    assert np.array_equal(sample.image[0, 0], RGB[sample.target])

    _, replies = federated
    trained = [r.content["metrics"] for _, r in replies if r.metadata.message_type == MessageType.TRAIN]
    assert len(trained) == CLIENTS * ROUNDS
    assert all(m["num-examples"] == SETTINGS["max-train-samples"] for m in trained)
