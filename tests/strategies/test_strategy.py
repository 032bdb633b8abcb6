"""LayerSelectionStrategy against an in-process grid of scripted ClientApps (no Ray, no torch)."""

from __future__ import annotations

import numpy as np
import pytest
from flwr.app import Array, Context, Message, MetricRecord, RecordDict
from flwr.clientapp import ClientApp

from flower_compat.inprocess import InProcessGrid
from metaheuristics import optimize
from methods import make_rule
from strategies import Aggregate, LayerSelectionStrategy, RoundLog
from strategies.records import RUNTIME, from_record, layer_index, record_bytes, runtime_record, to_record
from tests.helpers.identity import answers_queries

L = 6
EXAMPLES = {0: 10, 1: 30, 2: 60}
BUDGETS = {0: 2, 1: 3, 2: 4}


def initial_state() -> dict[str, np.ndarray]:
    state = {}
    for layer in range(L):
        state[f"{layer}:lora_A"] = np.full((4, 3), layer, dtype=np.float32)
        state[f"{layer}:lora_B"] = np.full((3, 4), -layer, dtype=np.float32)
    return state


def scripted_app(overrides: dict | None = None) -> tuple[ClientApp, dict[int, list[str]]]:
    """Clients whose update adds (partition id + 1) to every trained array.

    ``overrides[pid]`` may replace the score metrics or the train reply to script a bad client.
    Its evaluate reply carries the accuracy if asked to evaluate, and always the scores record.
    """
    overrides = overrides or {}
    uploaded: dict[int, list[str]] = {}
    app = answers_queries(ClientApp())

    @app.train()
    def train(msg: Message, ctx: Context) -> Message:
        pid = int(ctx.node_config["partition-id"])
        if "train" in overrides.get(pid, {}):
            return overrides[pid]["train"](msg)
        mask = set(msg.content["config"]["mask"])
        state = {k: v + (pid + 1) for k, v in from_record(msg.content["arrays"]).items()
                 if layer_index(k) in mask}
        uploaded[pid] = sorted(state)
        content = RecordDict({"arrays": to_record(state),
                              "metrics": MetricRecord({"num-examples": EXAMPLES[pid % 3],
                                                       "train_loss": float(pid)})})
        return Message(content, reply_to=msg)

    @app.evaluate()
    def evaluate(msg: Message, ctx: Context) -> Message:
        pid = int(ctx.node_config["partition-id"])
        eig = np.random.default_rng(pid).random(L).tolist()
        scores = {"eigenvalues": eig, "budget": BUDGETS[pid % 3], "num-examples": EXAMPLES[pid % 3],
                  "partition-id": pid}
        scores.update(overrides.get(pid, {}).get("scores", {}))
        reply = RecordDict({"scores": MetricRecord(scores), RUNTIME: runtime_record()})
        if msg.content["config"]["evaluate"]:
            reply["metrics"] = MetricRecord({"accuracy": 0.1 * (pid + 1), "num-examples": EXAMPLES[pid % 3],
                                             "partition-id": pid})
        return Message(reply, reply_to=msg)

    return app, uploaded


def run_round(strategy_name: str, overrides: dict | None = None, rounds: int = 1, **kwargs):
    """``rounds`` rounds on three scripted clients; the logs of the trained rounds (round 0, the
    initial evaluation, left out)."""
    app, uploaded = scripted_app(overrides)
    grid = InProcessGrid(app, [{"partition-id": p} for p in range(3)], run_config={})
    logs: list[RoundLog] = []
    strategy = LayerSelectionStrategy(
        make_rule(strategy_name, "nsga2", {"pop_size": 20, "n_gen": 10}), L,
        train_config={"local-steps": 1}, seed=0,
        on_round_end=lambda log, state, personal: logs.append(log), **kwargs)
    strategy.start(grid, to_record(initial_state()), num_rounds=rounds)
    assert [log.server_round for log in logs] == list(range(rounds + 1))
    return strategy, logs[1:], uploaded, grid


def node_pid(grid: InProcessGrid) -> dict[int, int]:
    return {n: int(ctx.node_config["partition-id"]) for n, ctx in grid.contexts.items()}


@pytest.mark.parametrize("strategy_name", ["f3ocus", "lntk", "random", "last"])
def test_masks_respect_budgets_and_only_masked_arrays_travel_up(strategy_name):
    _, logs, uploaded, grid = run_round(strategy_name)
    pids = node_pid(grid)
    log = logs[0]
    assert len(log.masks) == 3
    for node, mask in log.masks.items():
        pid = pids[node]
        assert mask.sum() == BUDGETS[pid % 3]
        expected = sorted(f"{layer}:{p}" for layer in np.flatnonzero(mask)
                          for p in ("lora_A", "lora_B"))
        assert uploaded[pid] == expected


def reported_scores(pid: int) -> np.ndarray:
    """The normalised scores S^l = lambda^l / sum_k lambda^k of what client ``pid`` reports."""
    eigenvalues = np.random.default_rng(pid).random(L)
    return eigenvalues / eigenvalues.sum()


def test_lntk_mask_is_each_clients_own_top_k_of_its_scores():
    _, logs, _, grid = run_round("lntk")
    pids = node_pid(grid)
    for node, mask in logs[0].masks.items():
        scores = reported_scores(pids[node])
        np.testing.assert_allclose(logs[0].reports[node].scores, scores)
        top_k = np.argsort(-scores)[:BUDGETS[pids[node]]]
        assert sorted(np.flatnonzero(mask)) == sorted(top_k), (pids[node], scores)


def test_f3ocus_masks_are_exactly_what_the_optimiser_returns_for_those_scores_budgets_and_seed():
    """Every client ranks the layers alike, so its own top-k piles onto the last layers and the
    server step must differ from it. Rows in node order; round r is seeded seed * 1000 + r."""
    eigenvalues = {pid: np.arange(1.0, L + 1) ** 2 * (pid + 1) + 0.01 * pid for pid in BUDGETS}
    overrides = {pid: {"scores": {"eigenvalues": eig.tolist()}} for pid, eig in eigenvalues.items()}
    _, logs, _, grid = run_round("f3ocus", overrides, rounds=2)
    pids = node_pid(grid)
    nodes = sorted(pids)
    scores = np.stack([eigenvalues[pids[n]] / eigenvalues[pids[n]].sum() for n in nodes])
    budgets = [BUDGETS[pids[n]] for n in nodes]
    top_k = np.zeros_like(scores, dtype=bool)
    for row, k in enumerate(budgets):
        top_k[row, np.argsort(-scores[row])[:k]] = True
    for server_round, log in enumerate(logs, 1):
        np.testing.assert_allclose(np.stack([log.reports[n].scores for n in nodes]), scores)
        expected = optimize(scores, budgets, algorithm="nsga2", seed=server_round,
                            pop_size=20, n_gen=10)
        masks = np.stack([log.masks[n] for n in nodes])
        np.testing.assert_array_equal(masks, expected.masks, err_msg=f"round {server_round}")
        assert log.assignment is not None
        np.testing.assert_array_equal(log.assignment.masks, expected.masks)
        assert not np.array_equal(masks, top_k)  # the server step changed the clients' own picks


def test_aggregation_is_the_exact_weighted_mean_per_layer_and_untouched_layers_keep_value():
    strategy, logs, _, grid = run_round("last")
    pids = node_pid(grid)
    start = initial_state()
    for layer in range(L):
        trainers = [pids[n] for n, m in logs[0].masks.items() if m[layer]]
        for param in ("lora_A", "lora_B"):
            key = f"{layer}:{param}"
            if not trainers:
                np.testing.assert_array_equal(strategy.global_state[key], start[key])
                continue
            weights = np.array([EXAMPLES[p] for p in trainers], dtype=float)
            shift = np.dot(weights / weights.sum(), [p + 1 for p in trainers])
            np.testing.assert_allclose(strategy.global_state[key], start[key] + shift, rtol=1e-6)
    # "last" with budgets 2,3,4 of 6 layers: layers 0 and 1 are trained by nobody
    assert not any(m[0] or m[1] for m in logs[0].masks.values())


def test_uplink_bytes_are_the_selected_layers_and_k_over_L_of_all():
    _, logs, uploaded, grid = run_round("lntk")
    _, logs_all, _, _ = run_round("all")
    pids = node_pid(grid)
    state = initial_state()
    for node, sent in logs[0].bytes_up.items():
        keys = uploaded[pids[node]]
        assert sent == sum(len(Array(state[k]).data) for k in keys)
        ratio = sent / logs_all[0].bytes_up[node]
        assert ratio == pytest.approx(BUDGETS[pids[node]] / L)
    assert logs[0].bytes_down  # train + evaluate downlink is counted too


def test_bad_scores_reply_is_dropped_with_a_logged_reason_and_the_round_goes_on():
    overrides = {1: {"scores": {"eigenvalues": [float("nan")] * L}}}
    strategy, logs, uploaded, grid = run_round("f3ocus", overrides)
    log = logs[0]
    pids = node_pid(grid)
    assert sorted(pids[n] for n in log.masks) == [0, 2]
    assert 1 not in uploaded
    assert any("NaN" in r["reason"] and r["stage"] == "scores" for r in log.rejected)
    assert log.aggregated
    assert all(np.isfinite(v).all() for v in strategy.global_state.values())


def test_update_for_an_unassigned_layer_is_rejected_and_not_aggregated():
    def sneaky(msg: Message) -> Message:
        arrays = from_record(msg.content["arrays"])  # every layer, not only the mask
        poisoned = {k: v + 1e6 for k, v in arrays.items()}
        content = RecordDict({"arrays": to_record(poisoned),
                              "metrics": MetricRecord({"num-examples": 5})})
        return Message(content, reply_to=msg)

    strategy, logs, _, _ = run_round("last", {2: {"train": sneaky}})
    assert any("not assigned" in r["reason"] for r in logs[0].rejected)
    assert max(np.abs(v).max() for v in strategy.global_state.values()) < 100


def test_client_that_raises_in_training_is_a_failure_not_a_stop():
    def crash(msg: Message) -> Message:
        raise RuntimeError("out of memory")

    strategy, logs, _, _ = run_round("lntk", {0: {"train": crash}}, rounds=2)
    assert len(logs) == 2
    for log in logs:
        assert any("out of memory" in r["reason"] for r in log.rejected)
        assert log.aggregated


def test_per_client_global_models_from_the_aggregator_are_sent_to_those_clients():
    marker = 123.0

    def personalising(global_state, updates):
        personal = {u.node_id: {k: np.full_like(v, marker) for k, v in global_state.items()}
                    for u in updates[:1]}
        return Aggregate(global_state=global_state, personal=personal)

    strategy, logs, _, grid = run_round("lntk", rounds=2, aggregator=personalising)
    target = next(iter(strategy.personal))  # kept by client id, not node id
    pids = node_pid(grid)
    round2_train = [m for m in grid.sent if m.metadata.message_type == "train"][-3:]
    for msg in round2_train:
        values = from_record(msg.content["arrays"])
        is_marked = all((v == marker).all() for v in values.values())
        assert is_marked == (f"partition-{pids[msg.metadata.dst_node_id]}" == target)
    assert record_bytes(round2_train[0].content["arrays"]) > 0


def test_local_only_clients_keep_their_own_arrays_and_nothing_is_averaged():
    """Planted answer: each scripted client adds (pid + 1) to what it trains, so after three rounds
    its own model is the initial state plus (pid + 1) x (rounds it trained that layer)."""
    from methods.local.server import local_only

    strategy, logs, _, grid = run_round("random", rounds=3, aggregator=local_only)
    pids = node_pid(grid)
    start = initial_state()
    trained = {node: sum(log.masks[node].astype(int) for log in logs) for node in pids}
    assert any(0 < t.min() < 3 for t in trained.values())  # some layer skipped in some round
    for node, pid in pids.items():
        expected = {k: v + (pid + 1) * trained[node][layer_index(k)] for k, v in start.items()}
        got = strategy.personal[f"partition-{pid}"]
        assert sorted(got) == sorted(expected)
        for key in expected:
            np.testing.assert_array_equal(got[key], expected[key])
    for key, value in strategy.global_state.items():
        np.testing.assert_array_equal(value, start[key])
