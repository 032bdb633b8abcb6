"""A shared answer head (run config ``head = "shared"``): one head over the data set's
answers, trained by every client and aggregated with the adapters, as shared unit L."""

from __future__ import annotations

import json

import numpy as np
import pytest
from flwr.app import Context, Message, RecordDict
from safetensors.numpy import load_file

import tasks
from client_app.app import app as client_app
from flower_compat.inprocess import InProcessGrid
from server_app.app import app as server_app
from settings import default_config
from strategies.records import from_record
from tasks.data import load_partition
from tests.helpers.runs import trained_rounds

RUN = {"model": "tiny-vilt", "dataset": "synthetic", "partitioner": "iid", "budgets": "2",
       "num-server-rounds": 2, "local-steps": 2, "batch-size": 8, "max-test-samples": 20,
       "optimizer-pop-size": 10, "optimizer-generations": 3, "head": "shared"}


def test_the_shared_head_is_unit_l_every_client_trains_not_personal_state():
    part = load_partition("synthetic", 0, 2, "iid", seed=0, max_train=16, max_test=8)
    model = tasks.build_model(tasks.ModelSpec("tiny-vilt", seed=0, shared_head=True), len(part.labels))
    state = tasks.get_layer_state(model, [])
    assert sorted(state) == ["4:head.bias", "4:head.weight"]  # unit L = 4 whatever the mask
    assert tasks.get_personal_state(model) == {}
    tasks.train(model, part.train, np.zeros(4, bool), steps=2, batch_size=4, lr=1e-4, head_lr=1e-2)
    trained = tasks.get_layer_state(model, [])
    assert all(np.abs(trained[k] - state[k]).max() > 0 for k in state)  # the head trained
    tasks.set_layer_state(model, state)
    assert all(np.array_equal(tasks.get_layer_state(model, [])[k], state[k]) for k in state)
    private = tasks.build_model(tasks.ModelSpec("tiny-vilt", seed=0), len(part.labels))
    assert "head.weight" in tasks.get_personal_state(private)
    assert not any(k.startswith("4:") for k in tasks.get_layer_state(private, range(4)))


def test_a_shared_head_brings_the_private_projection_into_unit_l():
    model = tasks.build_model(tasks.ModelSpec("minilm-effnet", seed=0, shared_head=True), 13)
    unit = {k.partition(":")[2].split(".")[0] for k in tasks.get_layer_state(model, [])}
    assert unit == {"head", "visual_proj", "visual_pos"}  # nothing private between encoder and head
    assert tasks.get_personal_state(model) == {}
    private = tasks.build_model(tasks.ModelSpec("minilm-effnet", seed=0), 13)
    assert {k.split(".")[0] for k in tasks.get_personal_state(private)} == {"head", "visual_proj",
                                                                           "visual_pos"}


@pytest.mark.parametrize("aggregation", ["masked-fedavg", "group-oracle"])
def test_a_run_averages_the_head_over_every_client_and_each_evaluates_with_it(aggregation, tmp_path):
    uploads: dict[int, dict[str, np.ndarray]] = {}
    examples: dict[int, int] = {}

    def watching(msg: Message, ctx: Context) -> Message:
        reply = client_app(msg, ctx)
        if msg.metadata.message_type == "train" and not reply.has_error():
            uploads[ctx.node_id] = from_record(reply.content["arrays"])
            examples[ctx.node_id] = int(reply.content["metrics"]["num-examples"])
        return reply

    run = {**default_config(), **RUN, "aggregation": aggregation, "client-groups": "0,1,0,1",
           "results-dir": str(tmp_path), "run-name": "run"}
    grid = InProcessGrid(watching, [{"partition-id": i, "num-partitions": 4} for i in range(4)], run)
    server_app(grid, Context(run_id=1, node_id=0, node_config={}, state=RecordDict(), run_config=run))
    rounds = trained_rounds(tmp_path / "run" / "rounds.jsonl")
    assert all(r["aggregated"] and r["failures"] == 0 for r in rounds), rounds
    assert all("4:head.weight" in up for up in uploads.values())  # every client sent its head
    rows = [json.loads(line) for line in (tmp_path / "run" / "clients.jsonl").read_text().splitlines()]
    assert len({r["node"] for r in rows if r["round"] == 2}) == 4
    final = load_file(tmp_path / "run" / "adapters.safetensors")
    weights = np.array([examples[n] for n in uploads], dtype=np.float64)  # the last round's uploads
    heads = np.stack([uploads[n]["4:head.weight"].astype(np.float64) for n in uploads])
    expected = np.tensordot(weights / weights.sum(), heads, axes=1)
    np.testing.assert_allclose(final["4:head.weight"], expected, rtol=1e-5, atol=1e-7)
