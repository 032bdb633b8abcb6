"""The bad-reply suite: every malformed client reply is rejected with a logged reason,
the round goes on with the other clients, and the global adapters are exactly what the accepted
replies alone give (finite, untouched by the rejected one).

Scripted ClientApps on an in-process grid that behaves like Flower's ``HttpGrid`` (pushed messages
get ids, a lost node is answered by the SuperLink itself from node id 1); no Ray, no torch.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

import numpy as np
import pytest
from flwr.app import Array, ArrayRecord, ConfigRecord, Context, Error, Message, MetricRecord, RecordDict
from flwr.clientapp import ClientApp
from flwr.common.constant import SUPERLINK_NODE_ID, ErrorCode

from flower_compat.inprocess import InProcessGrid
from methods import make_rule
from strategies import LayerSelectionStrategy, RoundLog
from strategies.layer_selection import weighted_means
from strategies.records import PACKED, RUNTIME, State, from_record, layer_index, runtime_record, to_record
from tests.helpers.identity import answers_queries

L = 6
EXAMPLES = {0: 10, 1: 30, 2: 60}
BUDGETS = {0: 2, 1: 3, 2: 4}
BAD = 1  # partition id of the misbehaving client
POISON = 1e6
NODE_UNAVAILABLE = "Error: Node Unavailable - no heartbeat within 2 x its expected interval."

# A tamper function gets the honest reply and the message it answers and returns the replies the
# server sees instead (none, one or several); raising makes it an error reply, as in Flower. It is
# keyed by node and part (`part`): "train", "scores" (an evaluate message that asks for scores:
# with ``num_rounds=1``, round 0's, which also evaluates) or "evaluate" (one that only evaluates:
# round 1's, the last).
Tamper = Callable[[Message, Message], list[Message]]
SCORES = "scores"


def part(msg: Message) -> str:
    config = msg.content["config"]
    return msg.metadata.message_type if config.get("score", "none") == "none" else SCORES


def initial_state() -> State:
    return {f"{layer}:{p}": np.full(shape, sign * layer, dtype=np.float32)
            for layer in range(L) for p, shape, sign in (("lora_A", (4, 3), 1), ("lora_B", (3, 4), -1))}


def honest_app() -> ClientApp:
    """Clients that report seeded scores and add (partition id + 1) to every assigned array."""
    app = answers_queries(ClientApp())

    @app.train()
    def train(msg: Message, ctx: Context) -> Message:
        pid = int(ctx.node_config["partition-id"])
        mask = set(msg.content["config"]["mask"])
        state = {k: v + (pid + 1) for k, v in from_record(msg.content["arrays"]).items()
                 if layer_index(k) in mask}
        metrics = MetricRecord({"num-examples": EXAMPLES[pid % 3], "train_loss": 1.0 + pid})
        return Message(RecordDict({"arrays": to_record(state), "metrics": metrics}), reply_to=msg)

    @app.evaluate()
    def evaluate(msg: Message, ctx: Context) -> Message:
        pid = int(ctx.node_config["partition-id"])
        scores = {"eigenvalues": np.random.default_rng(pid).random(L).tolist(), "budget": BUDGETS[pid % 3],
                  "num-examples": EXAMPLES[pid % 3], "partition-id": pid, "seconds": 0.1}
        reply = RecordDict({"scores": MetricRecord(scores), RUNTIME: runtime_record()})
        if msg.content["config"]["evaluate"]:
            reply["metrics"] = MetricRecord({"accuracy": 0.1 * (pid + 1), "num-examples": EXAMPLES[pid % 3],
                                             "partition-id": pid})
        return Message(reply, reply_to=msg)

    return app


class FleetGrid(InProcessGrid):
    """In-process grid with ``HttpGrid``'s message ids and a hook that tampers with one node's replies."""

    def __init__(self, tamper: dict[tuple[int, str], Tamper]) -> None:
        super().__init__(honest_app(), [{"partition-id": p} for p in range(3)], run_config={})
        self.tamper = tamper

    def answer(self, msg: Message) -> list[Message]:
        replies = super().answer(msg)
        tamper = self.tamper.get((msg.metadata.dst_node_id, part(msg)))
        if tamper is None:
            return replies
        try:
            return tamper(replies[0], msg)
        except Exception as err:  # noqa: BLE001 - Flower turns a ClientApp exception into an error reply
            return [Message(Error(code=ErrorCode.CLIENT_APP_RAISED_EXCEPTION,
                                  reason=f"{type(err).__name__}: {err}"), reply_to=msg)]


# ---------------------------------------------------------------------- building bad replies
def record(name: str, **changes) -> Tamper:
    """The honest reply with some metrics of its MetricRecord ``name`` replaced (``None`` removes)."""
    def tamper(reply: Message, msg: Message) -> list[Message]:
        metrics = {**dict(reply.content[name]), **changes}
        metrics = {k: v for k, v in metrics.items() if v is not None}
        return [Message(RecordDict({**dict(reply.content.items()), name: MetricRecord(metrics)}),
                        reply_to=msg)]
    return tamper


def flower_release(version: str | None) -> Tamper:
    """The honest scores with the ClientApp's Flower version replaced (``None``: not sent)."""
    def tamper(reply: Message, msg: Message) -> list[Message]:
        content = {k: v for k, v in reply.content.items() if k != RUNTIME}
        if version is not None:
            content[RUNTIME] = ConfigRecord({"flwr-version": version})
        return [Message(RecordDict(content), reply_to=msg)]
    return tamper


def scores(**changes) -> Tamper:
    return record("scores", **changes)


def update(arrays: Callable[[State, Message], dict] | None = None, **metric_changes) -> Tamper:
    """The honest update with its arrays passed through ``arrays`` and some metrics replaced."""
    def tamper(reply: Message, msg: Message) -> list[Message]:
        state = from_record(reply.content["arrays"])
        record = arrays(state, msg) if arrays else state
        if not isinstance(record, ArrayRecord):
            record = to_record(record)
        metrics = {**dict(reply.content["metrics"]), **metric_changes}
        metrics = {k: v for k, v in metrics.items() if v is not None}
        return [Message(RecordDict({"arrays": record, "metrics": MetricRecord(metrics)}), reply_to=msg)]
    return tamper


def content(records: dict) -> Tamper:
    return lambda reply, msg: [Message(RecordDict(records), reply_to=msg)]


def poisoned(state: State, msg: Message | None = None) -> State:
    """Every array moved by POISON: if such a reply leaked into the average it would show."""
    return {k: v + POISON for k, v in state.items()}


def first(state: State) -> str:
    return next(iter(state))


def raises(reply: Message, msg: Message) -> list[Message]:
    raise RuntimeError("CUDA out of memory")


def lost_node(reply: Message, msg: Message) -> list[Message]:
    """What the SuperLink answers for a node that stopped sending heartbeats: its own error reply."""
    error = Message(Error(code=ErrorCode.NODE_UNAVAILABLE, reason=NODE_UNAVAILABLE), reply_to=msg)
    error.metadata.__dict__["_src_node_id"] = SUPERLINK_NODE_ID
    return [error]


def oversize(state: State, msg: Message) -> ArrayRecord:
    """The packed buffer carries 100x more bytes than its header declares."""
    packed = to_record(poisoned(state))[PACKED]
    data = packed.data + np.full((400, 300), POISON).tobytes()
    return ArrayRecord({PACKED: Array(dtype=packed.dtype, shape=(len(data),), stype=packed.stype, data=data)})


def truncated(state: State, msg: Message) -> ArrayRecord:
    packed = to_record(state)[PACKED]
    cut = packed.data[:-8]
    return ArrayRecord({PACKED: Array(dtype=packed.dtype, shape=(len(cut),), stype=packed.stype, data=cut)})


def unpacked(state: State, msg: Message) -> ArrayRecord:
    """One Array per parameter (Flower's own layout), not the packed record the server expects."""
    return ArrayRecord({k: Array(v) for k, v in state.items()})


def unassigned(state: State, msg: Message) -> State:
    assigned = set(msg.content["config"]["mask"])
    extra = {k: v + POISON for k, v in from_record(msg.content["arrays"]).items()
             if layer_index(k) not in assigned}
    return {**state, **extra}


def spoofed(reply: Message, msg: Message) -> list[Message]:
    """A reply to this node's message that claims to come from another node."""
    reply.metadata.__dict__["_src_node_id"] = 100  # partition 0's node
    return [reply]


def stale(reply: Message, msg: Message) -> list[Message]:
    """A reply to a message of an earlier step (e.g. one that arrived after its round timed out)."""
    reply.metadata.__dict__["_reply_to_message_id"] = "0" * 64
    return [reply]


SCORES_CASES = {
    "nan-eigenvalue": (scores(eigenvalues=[float("nan")] + [1.0] * (L - 1)), "NaN or inf"),
    "inf-eigenvalue": (scores(eigenvalues=[float("inf")] + [1.0] * (L - 1)), "NaN or inf"),
    "negative-eigenvalue": (scores(eigenvalues=[-1.0] + [1.0] * (L - 1)), "negative"),
    "too-few-layers": (scores(eigenvalues=[1.0] * (L - 1)), f"expected {L}"),
    "too-many-layers": (scores(eigenvalues=[1.0] * (L + 3)), f"expected {L}"),
    "eigenvalues-not-a-list": (scores(eigenvalues=3.0), "not a list"),
    "eigenvalue-sum-overflow": (scores(eigenvalues=[1e308] * L), "overflows"),
    "budget-0": (scores(budget=0), "'budget' = 0"),
    "budget-above-L": (scores(budget=L + 1), f"'budget' = {L + 1}"),
    "budget-not-int": (scores(budget=2.5), "'budget' must be an int"),
    "budget-missing": (scores(budget=None), "missing 'budget'"),
    "examples-missing": (scores(**{"num-examples": None}), "missing 'num-examples'"),
    "examples-zero": (scores(**{"num-examples": 0}), "'num-examples' = 0"),
    "examples-negative": (scores(**{"num-examples": -5}), "'num-examples' = -5"),
    "partition-id-not-int": (scores(**{"partition-id": 1.5}), "'partition-id' must be an int"),
    "nan-metric": (scores(seconds=float("nan")), "'seconds' is NaN"),
    "other-flower-release": (flower_release("1.30.2"), "this ClientApp runs Flower 1.30.2, the ServerApp "
                             "runs Flower"),
    "no-flower-version": (flower_release(None), "names no Flower version"),
    "no-scores-record": (content({"metrics": MetricRecord({"budget": 2}), RUNTIME: runtime_record()}),
                         "no MetricRecord 'scores'"),
    "empty-reply": (content({}), "empty reply"),
    "client-exception": (raises, "CUDA out of memory"),
    "node-lost": (lost_node, "Node Unavailable"),
    "no-reply": (lambda reply, msg: [], "no reply"),
}

TRAIN_CASES = {
    "unassigned-layer": (update(unassigned), "not assigned"),
    "unknown-key": (update(lambda s, m: {**poisoned(s), "0:lora_C": np.ones((4, 3), np.float32)}),
                    "unknown array key"),
    "key-without-layer": (update(lambda s, m: {**poisoned(s), "head.weight": np.ones(2, np.float32)}),
                          "unknown array key"),
    "wrong-shape": (update(lambda s, m: {**s, first(s): np.full((5, 5), POISON, np.float32)}), "expected"),
    "wrong-dtype": (update(lambda s, m: {k: (v + POISON).astype(np.float64) for k, v in s.items()}),
                    "float64"),
    "nan-array": (update(lambda s, m: {**s, first(s): np.full_like(s[first(s)], np.nan)}), "NaN or inf"),
    "inf-array": (update(lambda s, m: {**s, first(s): np.full_like(s[first(s)], np.inf)}), "NaN or inf"),
    "oversize-payload": (update(oversize), "could not be decoded"),
    "truncated-payload": (update(truncated), "could not be decoded"),
    "unpacked-arrays": (update(unpacked), "could not be decoded"),
    "missing-assigned-array": (update(lambda s, m: dict(list(poisoned(s).items())[1:])), "missing"),
    "examples-missing": (update(**{"num-examples": None}), "missing 'num-examples'"),
    "examples-zero": (update(**{"num-examples": 0}), "'num-examples' = 0"),
    "examples-negative": (update(**{"num-examples": -3}), "'num-examples' = -3"),
    "examples-not-int": (update(**{"num-examples": 30.5}), "must be an int"),
    "examples-inflated": (update(poisoned, **{"num-examples": 10**9}), "differs"),
    "nan-loss": (update(poisoned, train_loss=float("nan")), "'train_loss' is NaN"),
    "no-arrays-record": (content({"metrics": MetricRecord({"num-examples": 30})}), "no ArrayRecord"),
    "empty-arrays-record": (update(lambda s, m: ArrayRecord()), "no ArrayRecord"),
    "no-metrics-record": (content({"arrays": to_record({"0:lora_A": np.ones((4, 3), np.float32)})}),
                          "no MetricRecord 'metrics'"),
    "empty-reply": (content({}), "empty reply"),
    "client-exception": (raises, "CUDA out of memory"),
    "node-lost": (lost_node, "Node Unavailable"),
    "no-reply": (lambda reply, msg: [], "no reply"),
    "spoofed-sender": (spoofed, "claims to come from node 100"),
    "stale-reply": (stale, "not sent in this step"),
}

EVALUATE_CASES = {
    "nan-accuracy": (record("metrics", accuracy=float("nan")), "'accuracy' is NaN"),
    "examples-zero": (record("metrics", **{"num-examples": 0}), "'num-examples' = 0"),
    "no-metrics-record": (content({"scores": MetricRecord({"accuracy": 0.5})}), "no MetricRecord 'metrics'"),
    "client-exception": (raises, "CUDA out of memory"),
    "node-lost": (lost_node, "Node Unavailable"),
    "no-reply": (lambda reply, msg: [], "no reply"),
}


def run_round(tamper: dict[tuple[int, str], Tamper]) -> tuple[LayerSelectionStrategy, RoundLog]:
    """One round; its log (round 1: the scores round 0's exchange gathered for it, its training,
    its evaluation)."""
    strategy, logs = run_rounds(tamper, rounds=1)
    return strategy, logs[0]


def expected_global(log: RoundLog, accepted: set[int]) -> State:
    """Masked FedAvg (paper Eq. 1, 5) of the honest updates of the accepted nodes only."""
    result = {}
    for key, value in initial_state().items():
        trainers = [n for n in accepted if log.masks[n][layer_index(key)]]
        weights = np.array([EXAMPLES[n - 100] for n in trainers], dtype=np.float64)
        shift = np.dot(weights / weights.sum(), [n - 100 + 1 for n in trainers]) if trainers else 0.0
        result[key] = value + shift
    return result


def check_rejected_and_unaffected(strategy, log, stage: str, reason: str, accepted: set[int]) -> None:
    bad_node = 100 + BAD
    mine = [r for r in log.rejected if r["node"] == bad_node]
    assert mine and all(r["stage"] == stage for r in mine), log.rejected
    assert any(reason in r["reason"] for r in mine), mine
    assert all(r["node"] == bad_node for r in log.rejected), log.rejected
    assert log.aggregated
    assert all(np.isfinite(v).all() for v in strategy.global_state.values())
    expected = expected_global(log, accepted)
    for key, value in strategy.global_state.items():
        np.testing.assert_allclose(value, expected[key], rtol=1e-6, err_msg=key)


@pytest.mark.parametrize("case", sorted(SCORES_CASES))
def test_bad_scores_reply_is_rejected_and_the_client_sits_the_round_out(case):
    tamper, reason = SCORES_CASES[case]
    strategy, log = run_round({(100 + BAD, SCORES): tamper})
    assert sorted(log.masks) == [100, 102]
    check_rejected_and_unaffected(strategy, log, "scores", reason, accepted={100, 102})


@pytest.mark.parametrize("case", sorted(TRAIN_CASES))
def test_bad_train_reply_is_rejected_and_ignored_by_aggregation(case):
    tamper, reason = TRAIN_CASES[case]
    strategy, log = run_round({(100 + BAD, "train"): tamper})
    assert sorted(log.masks) == [100, 101, 102]  # it was assigned layers, its update is dropped
    check_rejected_and_unaffected(strategy, log, "train", reason, accepted={100, 102})


def test_duplicate_replies_keep_the_first_and_reject_the_rest():
    def twice(reply: Message, msg: Message) -> list[Message]:
        return [reply, update(poisoned)(reply, msg)[0]]

    strategy, log = run_round({(100 + BAD, SCORES): lambda reply, msg: [reply, reply],
                               (100 + BAD, "train"): twice})
    assert [(r["node"], r["stage"], r["reason"]) for r in log.rejected] == [
        (100 + BAD, "scores", "duplicate reply from the same node in this round"),
        (100 + BAD, "train", "duplicate reply from the same node in this round")]
    expected = expected_global(log, {100, 101, 102})  # the first, honest reply counts
    for key, value in strategy.global_state.items():
        np.testing.assert_allclose(value, expected[key], rtol=1e-6, err_msg=key)


@pytest.mark.parametrize("case", sorted(EVALUATE_CASES))
def test_bad_evaluation_reply_is_left_out_of_the_evaluation_means(case):
    tamper, reason = EVALUATE_CASES[case]
    _, log = run_round({(100 + BAD, "evaluate"): tamper})
    assert sorted(log.eval_metrics) == [100, 102]
    assert [(r["node"], r["stage"]) for r in log.rejected] == [(100 + BAD, "evaluate")]
    assert reason in log.rejected[0]["reason"]
    accuracy = (0.1 * EXAMPLES[0] + 0.3 * EXAMPLES[2]) / (EXAMPLES[0] + EXAMPLES[2])
    assert weighted_means(log.eval_metrics)["accuracy"] == pytest.approx(accuracy)


def test_every_rejection_is_logged_with_its_reason(caplog):
    nan_update = update(lambda s, m: {**s, first(s): np.full_like(s[first(s)], np.nan)})
    with caplog.at_level(logging.WARNING):
        run_round({(100 + BAD, "train"): nan_update})
    lines = [r.getMessage() for r in caplog.records]
    assert any("round 1: train reply from node 101 rejected" in ln and "NaN or inf" in ln
               for ln in lines), lines


# ---------------------------------------------------------------------- a node that cannot serve
NODE_ERROR = "node config device = 'cuda:3' is not usable here: no such CUDA device (1 available)"


def refuses(reply: Message, msg: Message) -> list[Message]:
    """What the ClientApp answers when a setting is unusable on its node (`client_app.replies`)."""
    return [Message(Error(code=ErrorCode.CLIENT_APP_RAISED_EXCEPTION, reason=NODE_ERROR), reply_to=msg)]


def run_rounds(tamper: dict[tuple[int, str], Tamper], rounds: int, min_nodes: int = 1
               ) -> tuple[LayerSelectionStrategy, list[RoundLog]]:
    logs: list[RoundLog] = []
    strategy = LayerSelectionStrategy(make_rule("lntk", "nsga2", {}), L, seed=0, min_nodes=min_nodes,
                                      on_round_end=lambda log, state, personal: logs.append(log))
    strategy.start(FleetGrid(tamper), to_record(initial_state()), num_rounds=rounds, timeout=1)
    return strategy, logs[1:]  # the trained rounds' logs (round 0 evaluates the initial adapters)


def test_a_node_error_is_logged_once_per_node_and_recorded_every_round(caplog):
    bad = 100 + BAD
    tamper = {(bad, kind): refuses for kind in (SCORES, "train", "evaluate")}
    with caplog.at_level(logging.WARNING):
        strategy, logs = run_rounds(tamper, rounds=3)
    lines = [r.getMessage() for r in caplog.records if f"node {bad}" in r.getMessage()]
    assert len(lines) == 1 and NODE_ERROR in lines[0], lines
    for log in logs:  # every round: refused scores and evaluation, the others trained
        assert [(r["node"], r["stage"]) for r in log.rejected] == [(bad, "scores"), (bad, "evaluate")]
        assert all(NODE_ERROR in r["reason"] for r in log.rejected)
        assert log.aggregated and sorted(log.masks) == [100, 102]


def test_min_nodes_decides_whether_a_round_without_the_failing_node_aggregates():
    tamper = {(100 + BAD, kind): refuses for kind in (SCORES, "train", "evaluate")}
    strategy, logs = run_rounds(tamper, rounds=1, min_nodes=3)
    assert not logs[0].aggregated
    for key, value in strategy.global_state.items():
        np.testing.assert_array_equal(value, initial_state()[key])
    _, logs = run_rounds(tamper, rounds=1, min_nodes=2)
    assert logs[0].aggregated


def test_the_budgets_clients_report_are_logged_once_while_unchanged(caplog):
    with caplog.at_level(logging.INFO):
        run_rounds({}, rounds=2)
    lines = [r.getMessage() for r in caplog.records if "layer budgets" in r.getMessage()]
    assert lines == ["round 1: layer budgets by partition id: 0: 2, 1: 3, 2: 4"]
