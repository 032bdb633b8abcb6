"""The layer-selecting Flower strategy: the one round every run shares, whatever its two axes.

`server_app.app.build_strategy` picks the axes from the run config: the selection rule
(``strategy``) and the aggregator (``aggregation``), each a `methods` entry. Its parts, one per
phase, are in `strategies.round`. A run of N rounds is 2N + 2 message exchanges:

0. before round 1, one ``query`` message per node asks who it is (`LayerSelectionStrategy.identify`:
   sampling, personal models and records are keyed by that client id, never by Flower's node id,
   which Ray draws at random), then one ``evaluate`` message per client (`client_app.app.evaluate`)
   evaluates the initial adapters (recorded as round 0) and scores the layers for round 1
   (`strategies.round.identity`: who may speak for a site, how long the server waits for sites);
1. the selection rule turns the scores and budgets of round r's clients into one mask per client
   (paper Eq. 21 for F3OCUS; all empty for ``none``);
2. each client gets its own train message with its mask (`client_app.app.train` -> `tasks.train`)
   and returns only the trained layers' adapters (none for an empty mask);
3. the aggregator (masked FedAvg by default) merges the updates per layer;
4. one ``evaluate`` message per client closes the round: the client loads the model it received
   (the new global adapters, or its personal model) once, evaluates it with its own head
   (`tasks.evaluate`) and, when the rule needs scores (`SelectionRule.scorer`), scores that same
   model's layers for round r + 1 (`tasks.scores`: the principal LNTK eigenvalue of every layer,
   or the rule's other score). Every reply carries the client's budget and example count. After
   the last round the message only evaluates.

Evaluating round r's model and scoring it for round r + 1 act on the same model (the same
per-client model with personalised aggregation), so step 4 does both in one message. Clients
sampled for only one part (``fraction-evaluate`` != ``fraction-train``) get only that part; a rule
without a score sends no scoring request: a client in round r + 1's training sample then only
reports its budget, without adapters. Round r + 1's train sample is drawn when round r closes: in
deployment a node that connects in between is first sampled a round later.
Every reply is validated (`strategies.validation`); a bad one is logged (once per node and reason,
however many rounds it repeats) and its client sits that part out.
"""

from __future__ import annotations

from collections.abc import Callable
from logging import getLogger

from flwr.app import ArrayRecord, ConfigRecord
from flwr.serverapp import Grid
from flwr.serverapp.strategy import Result, Strategy

from strategies.aggregation import Aggregator, masked_fedavg
from strategies.records import State, from_record, to_record
from strategies.round.clients import Clients
from strategies.round.close import ClosingPhase
from strategies.round.log import RoundLog, weighted_means
from strategies.round.train import Accountant, TrainPhase
from strategies.selection import SelectionRule

log = getLogger("flwr").log  # Flower's logger: its handlers reach the console and `flwr run --stream`


class LayerSelectionStrategy(Clients, TrainPhase, ClosingPhase, Strategy):
    """Layer-selecting federated fine-tuning with masked aggregation (F3OCUS and baselines).

    ``train_config`` and ``score_config`` are sent to clients as they are (plus round, mask and
    learning rate), ``common_config`` with every message; ``lr_schedule(round)`` gives the round's
    learning rate. ``aggregator`` may return per-client global models, sent to those clients
    instead of the shared one. ``accountant`` (``dp = "client"``) gives each round's ε and stops
    the run before a round that would pass its cap; ``registry``, ``node_wait``: see step 0."""

    def __init__(
        self,
        rule: SelectionRule,
        num_layers: int,
        *,
        train_config: dict | None = None,
        score_config: dict | None = None,
        common_config: dict | None = None,
        lr_schedule: Callable[[int], float] | None = None,
        aggregator: Aggregator = masked_fedavg,
        fraction_train: float = 1.0,
        fraction_evaluate: float = 1.0,
        min_nodes: int = 1,
        seed: int = 0,
        on_round_end: Callable[[RoundLog, State, dict[str, State]], None] | None = None,
        accountant: Accountant | None = None,
        registry: Callable[[], dict[int, str]] | None = None,
        node_wait: float = 600.0,
    ) -> None:
        self.rule = rule
        self.num_layers = num_layers
        self.train_config, self.score_config = dict(train_config or {}), dict(score_config or {})
        self.common_config = dict(common_config or {})
        self.lr_schedule = lr_schedule
        self.aggregator = aggregator
        self.fraction_train, self.fraction_evaluate = fraction_train, fraction_evaluate
        self.min_nodes, self.seed, self.node_wait, self.registry = min_nodes, seed, node_wait, registry
        self.on_round_end, self.accountant = on_round_end, accountant
        self.stopped: str | None = None  # why the run ended before its last round (privacy budget)
        self.global_state: State = {}
        self.personal: dict[str, State] = {}  # client id -> its own global model
        self.clients: dict[int, str] = {}  # node id -> client id (`identify`), last asked, last refusal
        self.asked, self.refusals = dict[int, tuple[int, float]](), dict[int, str]()
        self.logged: set[tuple[int, str]] = set()  # (node, reason) pairs already logged
        self.budgets_seen: dict[int, int] = {}  # partition id -> budget last logged
        self.round_log = RoundLog(0, logged=self.logged)
        self.next_log = self.round_log  # the round the scores of the closing exchange are for
        # the closing exchange's two parts: who evaluates, who reports scores and budget for the next round
        self.evaluated, self.scored = set[int](), set[int]()
        self.num_rounds, self.timeout = 0, None

    def start(  # type: ignore[override]
        self,
        grid: Grid,
        initial_arrays: ArrayRecord,
        num_rounds: int = 3,
        timeout: float = 3600,
        train_config: ConfigRecord | None = None,
        evaluate_config: ConfigRecord | None = None,
        evaluate_fn: Callable | None = None,
        start_round: int = 1,
        personal: dict[str, State] | None = None,
    ) -> Result:
        """Run rounds ``start_round..num_rounds`` (``start_round > 1`` resumes a checkpoint).

        A fresh run first evaluates the initial adapters (round 0, with round 1's scores); a
        resumed one only scores for its first round (its last round's evaluation is recorded, the
        scores were not checkpointed). Each round is then train + the closing exchange
        (`configure_evaluate`). ``on_round_end`` receives every round's log (round 0's too) and
        the new global (and per-client) state, e.g. to checkpoint it; ``evaluate_fn`` sees round
        0 too, as in ``Strategy.start``.
        """
        self.timeout, self.num_rounds = timeout, num_rounds
        self.global_state = from_record(initial_arrays)
        self.personal = dict(personal or {})
        self.summary()
        result = Result()
        eval_config = ConfigRecord(dict(evaluate_config or {}))
        self.first_exchange(grid, start_round, eval_config, evaluate_fn, result)
        for server_round in range(start_round, num_rounds + 1):
            if not self.open_round(server_round):
                break
            messages = list(self.configure_train(
                server_round, to_record(self.global_state), ConfigRecord(dict(train_config or {})),
                grid))
            replies = self._send(grid, messages, "training",
                                 lambda node, reason: self.round_log.reject(node, "train", reason))
            _, train_metrics = self.aggregate_train(server_round, replies)
            if train_metrics is not None:
                result.train_metrics_clientapp[server_round] = train_metrics
            self._close_round(grid, server_round, eval_config, evaluate_fn, result)
        result.arrays = to_record(self.global_state)
        return result


__all__ = ["LayerSelectionStrategy", "RoundLog", "weighted_means"]
