"""Every registered aggregation and selection rule runs two rounds through the real ServerApp and
ClientApp on the tiny model (in process) and keeps the contract its entry declares: every round
aggregates with no failure, a rule that needs budgets gives each client exactly its budget, a rule
that trains no adapter gives empty masks, and clients report non-zero scores exactly when the rule
has a scorer. The entries are read from the registries, so a new method is covered without a change here.
Runs are shared: run i pairs the i-th aggregation with the i-th selection rule (each list cycled)."""

from __future__ import annotations

import pytest
from flwr.app import Context, RecordDict

import methods
from client_app.app import app as client_app
from flower_compat.inprocess import InProcessGrid
from server_app.app import app as server_app
from tests.client_app.test_config_node import RUN
from tests.helpers.runs import trained_rounds

AGGREGATIONS, SELECTIONS = list(methods.AGGREGATIONS), list(methods.SELECTIONS)
PAIRS = [(AGGREGATIONS[i % len(AGGREGATIONS)], SELECTIONS[i % len(SELECTIONS)])
         for i in range(max(len(AGGREGATIONS), len(SELECTIONS)))]
BUDGETS = (1, 2)


def run_two_rounds(tmp_path, aggregation: str, strategy: str) -> tuple[list[dict], list[dict]]:
    """(rounds, client rows) of a two-client, two-round run of the pair."""
    run = {**RUN, "aggregation": aggregation, "strategy": strategy, "budgets": ",".join(map(str, BUDGETS)),
           "client-groups": "0,1", "results-dir": str(tmp_path), "run-name": "run"}
    grid = InProcessGrid(client_app, [{"partition-id": i, "num-partitions": 2} for i in range(2)], run)
    server_app(grid, Context(run_id=1, node_id=0, node_config={}, state=RecordDict(), run_config=run))
    out = tmp_path / "run"
    return trained_rounds(out / "rounds.jsonl"), trained_rounds(out / "clients.jsonl")


def check_contract(entry: methods.Selection, rounds: list[dict], clients: list[dict]) -> None:
    assert [(r["aggregated"], r["failures"]) for r in rounds] == [(True, 0)] * 2
    assert sorted((row["round"], row["partition-id"]) for row in clients) == [(1, 0), (1, 1), (2, 0), (2, 1)]
    for row in clients:
        mask = row["mask"]
        if not entry.trains_adapter:
            assert mask == [], row
        elif entry.needs_budget:
            assert len(mask) == BUDGETS[row["partition-id"]], row
        assert any(row["eigenvalues"]) == bool(entry.scorer), row  # a scoreless rule's are zeros


@pytest.mark.parametrize(("aggregation", "strategy"), PAIRS, ids=[f"{a}+{s}" for a, s in PAIRS])
def test_every_registered_method_runs_two_rounds_and_keeps_its_contract(tmp_path, aggregation, strategy):
    check_contract(methods.SELECTIONS[strategy], *run_two_rounds(tmp_path, aggregation, strategy))


def test_every_registered_method_is_in_a_pair():
    assert {a for a, _ in PAIRS} == set(methods.AGGREGATIONS)
    assert {s for _, s in PAIRS} == set(methods.SELECTIONS)
