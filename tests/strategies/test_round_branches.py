"""Round branches the happy path never takes: every client rejected, fewer valid
updates than ``min-nodes``, and ``fraction-train`` < 1. Scripted clients of tests/strategies/test_strategy.py
on an in-process grid, recorded by the real ``Recorder``; no Ray, no torch.
"""

from __future__ import annotations

import json

import numpy as np
from flwr.app import Message, MessageType, MetricRecord, RecordDict

from flower_compat.inprocess import InProcessGrid
from methods import make_rule
from server_app.results import Recorder, load_checkpoint
from strategies import LayerSelectionStrategy
from strategies.records import from_record, layer_index, to_record
from tests.strategies.test_strategy import BUDGETS, EXAMPLES, L, initial_state, scripted_app


def run(tmp_path, overrides: dict | None = None, rounds: int = 2, nodes: int = 3,
        pids: list[int] | None = None, **kwargs):
    """``rounds`` rounds of ``lntk`` on ``nodes`` scripted clients (partition ids ``pids``, by
    default 0..nodes-1, in node-id order); returns the strategy, the grid, the recorded lines of
    the trained rounds and the global state after each (round 0, the initial evaluation, is left
    out of both)."""
    app, _ = scripted_app(overrides)
    grid = InProcessGrid(app, [{"partition-id": p} for p in (pids or range(nodes))], run_config={})
    recorder = Recorder(tmp_path / "run", rounds, [f"layer{i}" for i in range(L)])
    after: list[dict[str, np.ndarray]] = []

    def end_round(log, global_state, personal) -> None:
        after.append({k: v.copy() for k, v in global_state.items()})
        recorder.end_round(log, global_state, personal)

    strategy = LayerSelectionStrategy(make_rule("lntk"), L, train_config={"local-steps": 1}, seed=0,
                                      on_round_end=end_round, **kwargs)
    strategy.start(grid, to_record(initial_state()), num_rounds=rounds)
    lines = [json.loads(ln) for ln in (recorder.run_dir / "rounds.jsonl").read_text().splitlines()]
    assert [line["round"] for line in lines] == list(range(rounds + 1))
    return strategy, grid, lines[1:], after[1:]


def crash_in(pid: int, *rounds: int):
    """Client ``pid``'s train reply: it raises in ``rounds``; otherwise it adds (pid + 1) to the
    assigned layers, as the scripted clients do."""
    def train(msg: Message) -> Message:
        server_round = msg.content["config"]["server-round"]
        if server_round in rounds:
            raise RuntimeError(f"crashed in round {server_round}")
        mask = set(msg.content["config"]["mask"])
        state = {k: v + pid + 1 for k, v in from_record(msg.content["arrays"]).items()
                 if layer_index(k) in mask}
        return Message(RecordDict({"arrays": to_record(state),
                                   "metrics": MetricRecord({"num-examples": EXAMPLES[pid]})}),
                       reply_to=msg)
    return train


def assert_state(state: dict[str, np.ndarray], expected: dict[str, np.ndarray]) -> None:
    assert state.keys() == expected.keys()
    for key, value in expected.items():
        np.testing.assert_array_equal(state[key], value, err_msg=key)


def sent(grid: InProcessGrid, kind: str, server_round: int, part: str | None = None) -> list[int]:
    """Nodes sent a ``kind`` message of ``server_round`` (for an evaluate message: that asks for
    ``part``, "evaluate" or "score", when given)."""
    def asks(config) -> bool:
        return part is None or (config["evaluate"] if part == "evaluate" else config["score"] != "none")
    return sorted(m.metadata.dst_node_id for m in grid.sent if m.metadata.message_type == kind
                  and m.content["config"]["server-round"] == server_round and asks(m.content["config"]))


def test_round_where_every_score_is_rejected_trains_nobody_and_keeps_the_global_adapters(tmp_path):
    overrides = {pid: {"scores": {"eigenvalues": [float("nan")] * L}} for pid in BUDGETS}
    _, grid, lines, after = run(tmp_path, overrides)
    assert [line["round"] for line in lines] == [1, 2]  # the run goes on
    for line in lines:
        assert not line["aggregated"] and line["clients"] == 0 and line["failures"] == 3
        assert {r["stage"] for r in line["rejected"]} == {"scores"}
        assert all("NaN" in r["reason"] for r in line["rejected"])
        assert line["evaluate"]["accuracy"] > 0  # the unchanged adapters were still evaluated
    assert not [m for m in grid.sent if m.metadata.message_type == MessageType.TRAIN]
    for state in after:
        assert_state(state, initial_state())
    done, global_state, _ = load_checkpoint(tmp_path / "run")
    assert done == 2
    assert_state(global_state, initial_state())


def test_round_where_every_update_fails_is_recorded_and_the_next_round_aggregates(tmp_path):
    overrides = {pid: {"train": crash_in(pid, 1)} for pid in BUDGETS}
    strategy, _, lines, after = run(tmp_path, overrides)
    first, second = lines
    assert not first["aggregated"] and first["failures"] == 3
    assert {r["stage"] for r in first["rejected"]} == {"train"}
    assert all("crashed in round 1" in r["reason"] for r in first["rejected"])
    assert_state(after[0], initial_state())
    assert second["aggregated"] and second["failures"] == 0
    assert any(not np.array_equal(after[1][k], v) for k, v in initial_state().items())


def test_fewer_valid_updates_than_min_nodes_leave_the_global_adapters_unchanged(tmp_path):
    """Three clients, one crashes every round: 2 valid updates < min-nodes 3, nothing aggregated;
    with min-nodes 2 the same replies are aggregated (so min-nodes is what stopped it)."""
    overrides = {2: {"train": crash_in(2, 1, 2)}}
    _, _, lines, after = run(tmp_path / "three", overrides, min_nodes=3)
    for line in lines:
        assert not line["aggregated"] and line["clients"] == 3 and line["failures"] == 1
        assert line["train"]  # the two valid updates were received and their metrics recorded
    for state in after:
        assert_state(state, initial_state())
    _, _, lines, after = run(tmp_path / "two", overrides, min_nodes=2)
    assert all(line["aggregated"] for line in lines)
    assert any(not np.array_equal(after[0][k], v) for k, v in initial_state().items())


def test_fraction_train_below_one_scores_and_trains_only_that_share(tmp_path):
    """6 nodes, fraction-train 0.5: 3 nodes per round are scored (by the exchange closing the
    round before) and trained, the same 3 in every run with the same seed; fraction-evaluate 1
    still evaluates all 6, and only those 3 are asked for scores."""
    strategy, grid, lines, _ = run(tmp_path / "a", nodes=6, fraction_train=0.5)
    _, again, _, _ = run(tmp_path / "b", nodes=6, fraction_train=0.5)
    all_nodes = sorted(grid.get_node_ids())
    chosen = []
    for server_round, line in enumerate(lines, 1):
        trained = sent(grid, MessageType.TRAIN, server_round)
        assert len(trained) == 3 and line["clients"] == 3
        assert sent(grid, MessageType.EVALUATE, server_round - 1, "score") == trained
        assert sent(grid, MessageType.EVALUATE, server_round, "evaluate") == all_nodes
        assert sent(again, MessageType.TRAIN, server_round) == trained  # seeded
        chosen.append(trained)
    rows = [json.loads(ln) for ln in (tmp_path / "a" / "run" / "clients.jsonl").read_text().splitlines()]
    for server_round, trained in enumerate(chosen, 1):
        masked = sorted(r["node"] for r in rows if r["round"] == server_round and r["mask"])
        assert masked == trained
    assert chosen[0] != chosen[1]  # a new share each round (seeded by round)


def trained_partitions(grid: InProcessGrid, rounds: int) -> list[list[int]]:
    pids = {n: int(ctx.node_config["partition-id"]) for n, ctx in grid.contexts.items()}
    return [sorted(pids[n] for n in sent(grid, MessageType.TRAIN, r)) for r in range(1, rounds + 1)]


def test_the_seed_samples_the_same_clients_whatever_node_ids_they_have(tmp_path):
    """Ray gives nodes random ids: the same seed must train the same partitions with the same
    masks when the node ids come in another order (here: reversed)."""
    kwargs = {"nodes": 6, "rounds": 3, "fraction_train": 0.5}
    _, grid, lines, _ = run(tmp_path / "a", **kwargs)
    _, reversed_grid, reversed_lines, _ = run(tmp_path / "b", pids=[5, 4, 3, 2, 1, 0], **kwargs)
    chosen = trained_partitions(grid, 3)
    assert trained_partitions(reversed_grid, 3) == chosen
    assert len({tuple(c) for c in chosen}) == 3  # a new share each round
    rows = [[{k: v for k, v in json.loads(ln).items() if k not in ("node", "bytes-down", "bytes-up")}
             for ln in (tmp_path / name / "run" / "clients.jsonl").read_text().splitlines()]
            for name in ("a", "b")]
    assert rows[0] == rows[1]  # masks, budgets, scores and metrics by partition id
    assert [r["evaluate"] for r in lines] == [r["evaluate"] for r in reversed_lines]


def test_a_node_claiming_another_nodes_partition_id_is_left_out_with_a_reason(tmp_path):
    """Partition ids 0, 1, 1: the second node with id 1 is rejected once, at "identify"; the other
    two train every round."""
    strategy, grid, lines, _ = run(tmp_path, pids=[0, 1, 1])
    impostor = max(grid.contexts)
    assert impostor not in strategy.clients
    assert trained_partitions(grid, 2) == [[0, 1], [0, 1]]
    assert not [m for m in grid.sent if m.metadata.dst_node_id == impostor
                and m.metadata.message_type != MessageType.QUERY]
    initial = [json.loads(ln) for ln in (tmp_path / "run" / "rounds.jsonl").read_text().splitlines()][0]
    reasons = [r["reason"] for line in (initial, *lines) for r in line["rejected"] if r["node"] == impostor]
    assert reasons and all("client id 'partition-1' is already node" in reason for reason in reasons)
