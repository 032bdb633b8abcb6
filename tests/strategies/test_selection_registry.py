"""The two axes of a run as registries: `methods.SELECTIONS` (which layers
train) and `methods.AGGREGATIONS` (how updates combine), their run-config keys, and the wiring in
`server_app.app.build_strategy`. No Ray, no torch model."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from metaheuristics import optimize
from methods import AGGREGATIONS, SELECTIONS, make_rule
from server_app.app import build_strategy
from server_app.results import Recorder
from settings import ConfigError, RunConfig, default_config
from strategies import Aggregate
from strategies.aggregation.masked import masked_fedavg
from tasks.names import BASELINE_SCORERS
from tests.strategies.test_strategy import run_round

SCORES = np.random.default_rng(7).random((4, 6))
BUDGETS = [1, 2, 3, 6]


def test_settings_accepts_exactly_the_registered_aggregations_and_each_names_its_step():
    for name, entry in AGGREGATIONS.items():
        assert RunConfig.from_mapping({**default_config(), "aggregation": name, "client-groups": "0,1",
                                       "adapter": "lora"}).method is entry
        assert callable(entry.server_step()) and (entry.client is None or callable(entry.client_factory()))
    assert AGGREGATIONS["masked-fedavg"].server_step() is masked_fedavg


def test_every_registered_strategy_is_a_valid_run_config_value_and_builds_its_rule():
    assert set(BASELINE_SCORERS) < set(SELECTIONS)  # each pruning score is also a top-k rule
    for name in SELECTIONS:
        RunConfig.from_mapping({**default_config(), "strategy": name})
        assert make_rule(name).name == name


def test_unknown_strategy_and_aggregation_are_one_line_errors_naming_them():
    choices = ", ".join(SELECTIONS)
    with pytest.raises(ValueError, match=rf"^strategy = 'fedsgd' is unknown; choose one of {choices}$"):
        make_rule("fedsgd")
    with pytest.raises(ConfigError, match=r"^aggregation = 'fedprox' is unknown; choose one of "
                                          rf"{', '.join(AGGREGATIONS)}$"):
        RunConfig.from_mapping({**default_config(), "aggregation": "fedprox"})


@pytest.mark.parametrize(("name", "algorithm"), [("lntk", "topk"), ("random", "random"),
                                                 ("last", "last"), *((s, "topk") for s in BASELINE_SCORERS)])
def test_optimiser_backed_rules_give_the_same_masks_as_before_for_the_same_seed(name, algorithm):
    """Before the split every one of these was ``optimize(scores, budgets, algorithm, seed)``."""
    rule = make_rule(name)
    assert rule.scorer == {"random": None, "last": None}.get(name, name)
    for seed in (0, 1, 1003):
        masks, assignment = rule.select(SCORES, BUDGETS, seed)
        expected = optimize(SCORES, BUDGETS, algorithm=algorithm, seed=seed)
        np.testing.assert_array_equal(masks, expected.masks)
        np.testing.assert_array_equal(assignment.masks, expected.masks)


def test_f3ocus_runs_the_configured_optimiser_with_its_settings():
    params = {"pop_size": 8, "n_gen": 3, "pick": "knee"}
    rule = make_rule("f3ocus", "mopso", params)
    assert (rule.scorer, rule.algorithm) == ("lntk", "mopso")
    masks, assignment = rule.select(SCORES, BUDGETS, 5)
    np.testing.assert_array_equal(masks, optimize(SCORES, BUDGETS, algorithm="mopso", seed=5,
                                                  **params).masks)
    assert assignment is not None


def test_all_and_none_need_no_score_and_no_optimiser():
    for name, fill in (("all", True), ("none", False)):
        rule = make_rule(name)
        masks, assignment = rule.select(SCORES, BUDGETS, 0)
        assert rule.scorer is None and assignment is None
        assert masks.dtype == bool and masks.shape == SCORES.shape and (masks == fill).all()


def test_build_strategy_wires_the_run_configs_rule_and_aggregator(tmp_path: Path):
    config = RunConfig.from_mapping({**default_config(), "strategy": "snip"})
    strategy = build_strategy(config, 6, Recorder(tmp_path / "run", 1, [f"l{i}" for i in range(6)]))
    assert strategy.rule == make_rule("snip")
    assert strategy.aggregator is masked_fedavg


def test_an_aggregator_receives_each_clients_train_metrics_with_its_update():
    """What FedMosaic's SIMA needs: a per-client vector sent with the train reply reaches the
    aggregator (``ClientUpdate.metrics``) next to that client's arrays."""
    seen = {}

    def recording(global_state, updates):
        seen.update({u.node_id: u for u in updates})
        return Aggregate(global_state=global_state)

    _, logs, _, grid = run_round("lntk", aggregator=recording)
    assert sorted(seen) == sorted(logs[0].masks)
    for node, update in seen.items():
        pid = int(grid.contexts[node].node_config["partition-id"])
        assert update.metrics["train_loss"] == float(pid)
        assert update.metrics["num-examples"] == update.num_examples
