"""``resolve_budget``: node config ``layer-budget`` > run config ``budgets`` (by partition id, cycled)
> every layer; ``auto`` in either place asks supplement Algorithm 46 (``tasks.estimate_budget``).

A fake Context and a minimal setup object (only what ``resolve_budget`` reads): no model, no data.
"""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from flwr.app import Context, RecordDict

import tasks
from client_app.node import node_settings
from client_app.runtime import resolve_budget
from settings import ConfigError, RunConfig, default_config

LAYERS = ["l0", "l1", "l2", "l3"]
AUTO = 3  # what the patched estimate returns: distinct from every other expected value


def setup(budgets: str, partition_id: int = 0, node_config: dict | None = None) -> SimpleNamespace:
    """The fields `resolve_budget` reads, with the node's settings resolved as a real node does."""
    config = RunConfig.from_mapping({**default_config(), "budgets": budgets, "batch-size": 8,
                                     "device": "cpu"})
    node = node_settings({"partition-id": partition_id, "num-partitions": 4, **(node_config or {})},
                         config)
    return SimpleNamespace(model=SimpleNamespace(layer_names=LAYERS), partition_id=partition_id,
                           config=config, device="cpu", node=node)


def context(node_config: dict) -> Context:
    return Context(run_id=1, node_id=7, node_config=node_config, state=RecordDict(), run_config={})


@pytest.fixture
def estimates(monkeypatch) -> list[tuple]:
    calls: list[tuple] = []

    def estimate(model, batch_size, device):
        calls.append((model, batch_size, device))
        return AUTO

    monkeypatch.setattr(tasks, "estimate_budget", estimate)
    return calls


@pytest.mark.parametrize(("budgets", "pid", "node_config", "expected"), [
    ("1,2,4", 0, {"layer-budget": 2}, 2),        # node config wins over the run config
    ("1,2,4", 2, {"layer-budget": "1"}, 1),      # ... also given as a string
    ("", 0, {"layer-budget": 4}, 4),             # ... and without run-config budgets
    ("1,2,4", 1, {}, 2),                         # run config by partition id
    ("1,2", 3, {}, 2),                           # cycled: partition 3 of a 2-entry list
    ("", 1, {}, len(LAYERS)),                    # neither: every layer
])
def test_node_budget_beats_run_budgets_beats_all_layers(estimates, budgets, pid, node_config, expected):
    assert resolve_budget(setup(budgets, pid, node_config), context(node_config)) == expected
    assert estimates == []


@pytest.mark.parametrize(("budgets", "pid", "node_config"), [
    ("1,2,4", 0, {"layer-budget": "auto"}),      # node says auto, run config says 1
    ("1,auto", 1, {}),                           # run config says auto for this partition
])
def test_auto_asks_algorithm_46_with_the_clients_model_batch_and_device(estimates, budgets, pid,
                                                                          node_config):
    client = setup(budgets, pid, node_config)
    assert resolve_budget(client, context(node_config)) == AUTO
    assert estimates == [(client.model, 8, "cpu")]


def test_a_fixed_node_budget_beats_auto_in_the_run_config(estimates):
    assert resolve_budget(setup("auto,auto", 0, {"layer-budget": 1}), context({})) == 1
    assert estimates == []


def test_bad_node_budget_names_the_setting_and_the_value(estimates):
    with pytest.raises(ConfigError,
                       match=r"^node config layer-budget = 'two' is not a positive int or 'auto'$"):
        setup("1,2", 0, {"layer-budget": "two"})
