"""``strategy = "none"``: heads only. The server sends empty masks, clients train only
their own head and projection and send no adapter arrays, the global adapters never change.

Scripted clients first (no torch), then the real ServerApp and ClientApp in this process on
tiny-vilt with synthetic data (no Ray), as in tests/client_app/test_config_node.py.
"""

from __future__ import annotations

import json

import numpy as np
from flwr.app import Context, Message, RecordDict
from safetensors.numpy import load_file

import tasks
from client_app.app import app as client_app
from client_app.runtime import client_setup
from flower_compat.inprocess import InProcessGrid
from server_app.app import app as server_app
from strategies.records import from_record, to_record
from tests.client_app.test_config_node import RUN, node, score, train
from tests.strategies.test_strategy import initial_state, run_round


def test_scripted_round_sends_empty_masks_and_no_adapter_bytes_and_keeps_the_global_state():
    strategy, logs, uploaded, grid = run_round("none", rounds=2)
    start = initial_state()
    for log in logs:
        assert log.aggregated and not log.rejected
        assert len(log.masks) == 3 and not any(m.any() for m in log.masks.values())
        assert log.bytes_up == dict.fromkeys(log.masks, 0)
    assert all(keys == [] for keys in uploaded.values()) and len(uploaded) == 3
    assert strategy.global_state.keys() == start.keys()
    for key, value in start.items():
        np.testing.assert_array_equal(strategy.global_state[key], value)
    sent = {m.metadata.message_type: m for m in grid.sent}
    assert all(m.content["config"]["score"] == "none" for m in grid.sent  # no score to compute
               if m.metadata.message_type == "evaluate")
    assert list(sent["train"].content["config"]["mask"]) == []


def test_the_client_accepts_an_empty_mask_only_in_a_heads_only_run():
    model = tasks.build_model(tasks.ModelSpec("tiny-vilt", seed=0), 1)
    record = to_record(tasks.get_layer_state(model, range(len(model.layer_names))))
    grid, node_id = node({}, {"strategy": "none"})
    score(grid, node_id)
    reply = train(grid, node_id, [], record)
    assert not reply.has_error(), reply.error.reason if reply.has_error() else ""
    assert len(reply.content["arrays"]) == 0
    refused = train(grid, node_id, [0], record)
    assert refused.error.reason == "train mask [0] assigns layers, but strategy = 'none' trains heads only"
    grid, node_id = node({}, {"strategy": "last"})
    assert train(grid, node_id, [], record).error.reason == "train mask [] assigns no layer"


def test_real_round_trains_heads_only_and_sends_no_adapter_bytes(tmp_path):
    """Two rounds, two tiny-vilt clients: adapters equal the initial ones in the global state,
    in the final file and in each client's model after training; each client's head moved."""
    after_train: dict[int, dict] = {}

    def watching(msg: Message, ctx: Context) -> Message:
        reply = client_app(msg, ctx)
        if msg.metadata.message_type == "train":
            setup = client_setup(ctx)
            layers = range(len(setup.model.layer_names))
            after_train[ctx.node_id] = {
                "sent": from_record(msg.content["arrays"]),
                "adapters": tasks.get_layer_state(setup.model, layers),
                "head": tasks.get_personal_state(setup.model),
                "initial-head": setup.initial_personal,
            }
        return reply

    run = {**RUN, "strategy": "none", "budgets": "2,1", "results-dir": str(tmp_path),
           "run-name": "run"}
    grid = InProcessGrid(watching, [{"partition-id": i, "num-partitions": 2} for i in range(2)],
                         run_config=run)
    server_app(grid, Context(run_id=1, node_id=0, node_config={}, state=RecordDict(), run_config=run))

    initial = tasks.get_layer_state(tasks.build_model(tasks.ModelSpec("tiny-vilt", seed=0), 1), range(4))
    final = load_file(tmp_path / "run" / "adapters.safetensors")
    assert final.keys() == initial.keys()
    for key, value in initial.items():
        np.testing.assert_array_equal(final[key], value, err_msg=key)
    rounds = [json.loads(ln) for ln in (tmp_path / "run" / "rounds.jsonl").read_text().splitlines()]
    assert [(r["aggregated"], r["bytes-up"], r["failures"]) for r in rounds] == [
        (False, 0, 0), (True, 0, 0), (True, 0, 0)]  # round 0 evaluates the initial adapters
    rows = [json.loads(ln) for ln in (tmp_path / "run" / "clients.jsonl").read_text().splitlines()]
    rows = [r for r in rows if r["round"] > 0]  # round 0 evaluates the initial adapters
    assert len(rows) == 4
    assert all(r["mask"] == [] and r["bytes-up"] == 0 and r["train"] is not None for r in rows)
    assert sorted(after_train) == sorted(grid.contexts)
    for seen in after_train.values():
        for key, value in initial.items():
            np.testing.assert_array_equal(seen["sent"][key], value, err_msg=key)
            np.testing.assert_array_equal(seen["adapters"][key], value, err_msg=key)
        moved = [k for k, v in seen["head"].items() if not np.array_equal(v, seen["initial-head"][k])]
        assert moved, "the personal head did not change"
