"""Settings only a SuperNode can judge and train masks it must refuse: the real
ClientApp answers with an error reply naming the key or the mask, never with an exception, and the
server logs it once per node while the other nodes' rounds go on.

tiny-vilt on synthetic data, called in this process (no Ray); the node checks run before the
model or the data are loaded, so most cases cost milliseconds.
"""

from __future__ import annotations

import logging

import numpy as np
import pytest
from flwr.app import ConfigRecord, Context, Message, RecordDict

import tasks
from client_app.app import app as client_app
from client_app.node import node_settings
from flower_compat.inprocess import InProcessGrid
from server_app.app import app as server_app
from settings import RunConfig, default_config
from strategies.records import from_record, to_record
from tests.helpers.runs import trained_rounds

RUN = {**default_config(), "model": "tiny-vilt", "dataset": "synthetic", "partitioner": "iid",
       "budgets": "2,1,3", "num-server-rounds": 2, "local-steps": 1, "batch-size": 4,
       "max-train-samples": 8, "max-test-samples": 8, "optimizer-pop-size": 6,
       "optimizer-generations": 2, "score-batch-size": 2}
L = 4  # tiny-vilt's selectable layers


def node(node_config: dict, run_config: dict | None = None) -> tuple[InProcessGrid, int]:
    grid = InProcessGrid(client_app, [{"partition-id": 0, "num-partitions": 3, **node_config}],
                         {**RUN, **(run_config or {})})
    return grid, 100


def ask(grid: InProcessGrid, node_id: int, kind: str, config: dict, arrays=None) -> Message:
    """Call the ClientApp directly (an exception would fail the test, not become an error reply)."""
    content = RecordDict({"config": ConfigRecord({"server-round": 1, "run-dir": "", **config})})
    if arrays is not None:
        content["arrays"] = arrays
    msg = Message(content=content, message_type=kind, dst_node_id=node_id)
    return client_app(msg, grid.contexts[node_id])


def score(grid: InProcessGrid, node_id: int) -> Message:
    """The budget-only request: an evaluate message that neither evaluates nor scores."""
    return ask(grid, node_id, "evaluate", {"evaluate": False, "score": "none"})


NODE_CASES = {
    "device": ({"device": "tpu"}, "node config device = 'tpu' is unknown"),
    "device-missing": ({"device": "cuda:7"}, "node config device = 'cuda:7' is not usable here"),
    "budget-text": ({"layer-budget": "many"}, "node config layer-budget = 'many' is not a positive int"),
    "budget-zero": ({"layer-budget": 0}, "node config layer-budget = 0 is not a positive int"),
    "budget-over-L": ({"layer-budget": 9}, f"node config layer-budget = 9 exceeds the model's {L}"),
    "partition-id": ({"partition-id": 3}, "node config partition-id = 3 must be below num-partitions = 3"),
    "partition-count": ({"num-partitions": "3"}, "node config num-partitions = '3' must be an int"),
    "data-dir-missing": ({"dataset": "medmnist-vqa:/data", "data-dir": "/no/such/dir"},
                         "node config data-dir = '/no/such/dir': no folder '/no/such/dir'"),
    "data-dir-for-synthetic": ({"data-dir": "/data"}, "node config data-dir = '/data' applies to"),
    "dataset": ({"dataset": "imagenet"}, "node config dataset = 'imagenet' is unknown"),
}


@pytest.mark.parametrize("case", sorted(NODE_CASES))
def test_a_setting_the_node_cannot_use_is_an_error_reply_naming_it(case):
    node_config, reason = NODE_CASES[case]
    grid, node_id = node(node_config)
    reply = score(grid, node_id)
    assert reply.has_error(), case
    assert reply.error.reason.startswith(reason), reply.error.reason
    assert "\n" not in reply.error.reason and "Traceback" not in reply.error.reason


def test_a_state_dir_the_node_cannot_create_is_an_error_reply(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("")
    grid, node_id = node({"state-dir": str(blocker / "state")})
    reply = score(grid, node_id)
    assert reply.has_error()
    assert reply.error.reason.startswith(f"node config state-dir = '{blocker / 'state'}' cannot be created")


def test_a_run_config_folder_the_node_lacks_is_an_error_reply():
    grid, node_id = node({}, {"dataset": "medmnist-vqa:/no/such/dir"})
    reply = score(grid, node_id)
    assert reply.has_error()
    assert reply.error.reason == ("dataset = 'medmnist-vqa:/no/such/dir': no folder '/no/such/dir' "
                                  "on this machine")


# ---------------------------------------------------------------------- train masks
@pytest.fixture(scope="module")
def global_arrays():
    model = tasks.build_model(tasks.ModelSpec("tiny-vilt", seed=0), 1)
    return to_record(tasks.get_layer_state(model, range(len(model.layer_names))))


def train(grid: InProcessGrid, node_id: int, mask: object, arrays) -> Message:
    config = {"mask": mask, "local-steps": 1, "batch-size": 4, "lr": 1e-3, "head-lr": 1e-3,
              "weight-decay": 0.0}
    return ask(grid, node_id, "train", config, arrays)


MASK_CASES = {
    "over-budget": ([0, 1, 2], "train mask [0, 1, 2] has 3 layers, over this client's budget of 2"),
    "repeat": ([1, 1], "train mask [1, 1] lists layer 1 twice"),
    "out-of-range": ([0, L], f"train mask [0, {L}]: {L} is not a layer index in 0..{L - 1}"),
    "negative": ([-1], f"train mask [-1]: -1 is not a layer index in 0..{L - 1}"),
    "empty": ([], "train mask [] assigns no layer"),
    "not-a-list": ("0,1", "train mask '0,1' is not a list of layer indices"),
}


@pytest.mark.parametrize("case", sorted(MASK_CASES))
def test_a_bad_train_mask_is_refused_with_an_error_reply_naming_it(case, global_arrays):
    mask, reason = MASK_CASES[case]
    grid, node_id = node({})  # partition 0: budget 2 of "2,1,3"
    reply = train(grid, node_id, mask, global_arrays)
    assert reply.has_error() and reply.error.reason == reason


def test_the_mask_is_checked_against_the_budget_the_node_reported(global_arrays):
    grid, node_id = node({"layer-budget": 1})
    assert score(grid, node_id).content["scores"]["budget"] == 1
    assert train(grid, node_id, [0, 3], global_arrays).error.reason.endswith("over this client's budget of 1")
    reply = train(grid, node_id, [3], global_arrays)
    assert not reply.has_error()
    assert {int(k.split(":")[0]) for k in from_record(reply.content["arrays"])} == {3}


def test_strategy_all_trains_every_layer_whatever_the_budget(global_arrays):
    """``all`` is the budget-free upper reference: its all-layer masks are not refused as over budget."""
    grid, node_id = node({"layer-budget": 1}, {"strategy": "all"})
    reply = train(grid, node_id, [0, 1, 2, 3], global_arrays)
    assert not reply.has_error(), reply.error.reason if reply.has_error() else ""
    assert {int(k.split(":")[0]) for k in from_record(reply.content["arrays"])} == {0, 1, 2, 3}


def test_the_server_logs_a_node_error_once_and_the_others_train(tmp_path, caplog):
    """Two rounds, three nodes, one with a device it lacks: its error is logged once, recorded in
    every round, and the other two nodes are trained and aggregated in both rounds."""
    grid = InProcessGrid(client_app, [{"partition-id": i, "num-partitions": 3} for i in range(3)],
                         run_config={})
    grid.contexts[101].node_config["device"] = "cuda:7"
    context = Context(run_id=1, node_id=0, node_config={}, state=RecordDict(),
                      run_config={**RUN, "results-dir": str(tmp_path), "run-name": "run"})
    for ctx in grid.contexts.values():
        ctx.run_config.update(context.run_config)
    with caplog.at_level(logging.WARNING):
        server_app(grid, context)
    warnings = [r.getMessage() for r in caplog.records if "node 101" in r.getMessage()]
    server = [w for w in warnings if "rejected" in w]
    assert len(server) == 1 and "node config device = 'cuda:7'" in server[0], warnings
    assert len(warnings) == 2, warnings  # and the node's own one line
    rows = trained_rounds(tmp_path / "run" / "rounds.jsonl")
    assert [r["aggregated"] for r in rows] == [True, True]
    assert all({f["node"] for f in r["rejected"]} == {101} for r in rows)
    assert all(r["clients"] == 2 for r in rows)
    assert np.isfinite([r["train"]["train_loss_last"] for r in rows]).all()


def test_a_nodes_data_dir_keeps_the_hf_disk_column_options(tmp_path):
    (tmp_path / "state.json").write_text("{}")
    config = RunConfig.from_mapping({**default_config(),
                                     "dataset": "hf-disk:/server/copy?image=img&answer=a"})
    node = node_settings({"data-dir": str(tmp_path)}, config)
    assert node.dataset == f"hf-disk:{tmp_path}?image=img&answer=a"
