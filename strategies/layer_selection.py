"""The layer-selecting Flower strategy: the one round every run shares, whatever its two axes.

`server_app.app.build_strategy` picks the axes from the run config: the selection rule
(``strategy``, `strategies.selection`) and the aggregator (``aggregation``,
`strategies.aggregation`). A run of N rounds is 2N + 2 message exchanges:

0. before round 1, one ``query`` message per node asks who it is (`LayerSelectionStrategy.identify`:
   sampling, personal models and records are keyed by that client id, never by Flower's node id,
   which Ray draws at random), then one ``evaluate`` message per client (`client_app.app.evaluate`)
   evaluates the initial adapters (recorded as round 0) and scores the layers for round 1;
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

import math
import random
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from logging import DEBUG, INFO, WARNING, getLogger

import numpy as np
from flwr.app import ArrayRecord, ConfigRecord, Message, MessageType, MetricRecord, RecordDict
from flwr.serverapp import Grid
from flwr.serverapp.strategy import Result, Strategy

from metaheuristics import Assignment
from methods.masked_fedavg.server import masked_fedavg
from strategies.aggregation import Aggregator, ClientUpdate
from strategies.privacy import ClientAccountant
from strategies.records import State, from_record, layer_index, record_bytes, to_record
from strategies.selection import SelectionRule
from strategies.validation import (
    ARRAYS_KEY,
    METRICS_KEY,
    LayerReport,
    Rejected,
    check_evaluation,
    check_identity,
    check_scores,
    check_update,
    unique_by_node,
)
from tasks.names import DP_SAT_OUT

log = getLogger("flwr").log  # Flower's logger: its handlers reach the console and `flwr run --stream`

CONFIG_KEY = "config"
REPLY_POLL_S = 0.25  # seconds between pulls for a phase's replies (`exchange`)
PHASES = ("identifying", "scoring", "optimising", "training", "aggregating", "evaluating")
"""``RoundLog.seconds``: "identifying" asks newly connected nodes who they are (`client_ids`);
"evaluating" is the exchange that closes a round (its evaluation and the next round's scores, one
message); "scoring" an exchange that only scores (a resumed run's first)."""


def exchange(grid: Grid, messages: Sequence[Message], timeout: float | None,
             poll: float = REPLY_POLL_S) -> list[Message]:
    """``Grid.send_and_receive`` with ``poll`` seconds between pulls: push the messages, pull
    their replies until all are in or ``timeout`` has passed.

    Flower's deployed Grid waits a fixed 3 s between pulls (1.41, 1.42), so a phase's last reply
    waited 1.5 s on average, 3 s at worst, every phase; a pull for replies that are not
    there yet is one small request to the SuperLink.
    """
    pending = set(grid.push_messages(messages))  # the Grid sets each message's id
    deadline = None if timeout is None else time.monotonic() + timeout
    replies: list[Message] = []
    while pending:
        pulled = list(grid.pull_messages(pending))
        replies += pulled
        pending -= {m.metadata.reply_to_message_id for m in pulled}
        if not pending or (deadline is not None and time.monotonic() >= deadline):
            break
        time.sleep(poll)
    return replies


@dataclass
class RoundLog:
    """Everything one round decided and measured; handed to ``on_round_end``."""

    server_round: int
    reports: dict[int, LayerReport] = field(default_factory=dict)
    masks: dict[int, np.ndarray] = field(default_factory=dict)
    assignment: Assignment | None = None
    rejected: list[dict] = field(default_factory=list)
    bytes_down: dict[int, int] = field(default_factory=dict)
    bytes_up: dict[int, int] = field(default_factory=dict)
    train_metrics: dict[int, dict] = field(default_factory=dict)
    eval_metrics: dict[int, dict] = field(default_factory=dict)
    sat_out: dict[int, dict] = field(default_factory=dict)  # node -> its reply metrics (`sit_out`)
    clients: dict[int, str] = field(default_factory=dict)  # node -> its client id
    seconds: dict[str, float] = field(default_factory=lambda: dict.fromkeys(PHASES, 0.0))
    exchanges: int = 0  # message exchanges sent in this round (each one phase)
    messages: int = 0  # messages sent in them
    aggregated: bool = False
    epsilon: float | None = None  # dp = "client": the ε every site has spent after this round (PLD)
    epsilon_rdp: float | None = None  # the same by RDP, recorded beside it
    logged: set[tuple[int, str]] = field(default_factory=set, repr=False)  # shared across rounds

    def reject(self, node_id: int, stage: str, reason: str) -> None:
        """Record a rejected reply; log it unless this node gave the same reason before."""
        self.rejected.append({"node": node_id, "stage": stage, "reason": reason})
        if (node_id, reason) in self.logged:
            log(DEBUG, "round %d: %s reply from node %d rejected again: %s",
                self.server_round, stage, node_id, reason)
            return
        self.logged.add((node_id, reason))
        log(WARNING, "round %d: %s reply from node %d rejected: %s (shown once per node and reason)",
            self.server_round, stage, node_id, reason)

    def sit_out(self, node_id: int, metrics: dict) -> None:
        """Record a client that sat the round out to stay within its privacy budget (``dp =
        "sample"``, `client_app.privacy`); one log line, not a rejection."""
        self.sat_out[node_id] = metrics
        log(INFO, "round %d: node %d sits out: one more round would spend ε %.3f, over its dp-epsilon %.3f "
            "(spent %.3f)", self.server_round, node_id, metrics.get("dp-epsilon-next", float("nan")),
            metrics.get("dp-budget", float("nan")), metrics.get("dp-epsilon", float("nan")))

    def add_bytes(self, direction: dict[int, int], node_id: int, count: int) -> None:
        direction[node_id] = direction.get(node_id, 0) + count


NOT_METRICS = ("num-examples", "partition-id", "model-size")


def weighted_means(per_client: dict[int, dict]) -> dict[str, float]:
    """Example-weighted mean of every numeric metric the clients reported; exactly rounded sums
    (`math.fsum`), so the mean does not depend on the order the replies came in."""
    weights = {node: m.get("num-examples", 0) for node, m in per_client.items()}
    total = math.fsum(weights.values())
    if total <= 0:
        return {}
    keys = {k for m in per_client.values() for k, v in m.items()
            if isinstance(v, int | float) and k not in NOT_METRICS}
    return {k: math.fsum(weights[n] * m[k] for n, m in per_client.items() if k in m) / total
            for k in sorted(keys)}


class LayerSelectionStrategy(Strategy):
    """Layer-selecting federated fine-tuning with masked aggregation (F3OCUS and baselines).

    ``train_config`` and ``score_config`` are sent to clients as they are (plus round, mask and
    learning rate), ``common_config`` with every message; ``lr_schedule(round)`` gives the
    round's learning rate. ``aggregator`` is the
    replaceable aggregation step; it may return per-client global models, which are then sent to
    those clients instead of the shared one. ``accountant`` (``dp = "client"``, the aggregator then
    made DP-FedAvg by the ServerApp) gives each round's ε and stops the run before a round that
    would pass its cap.
    """

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
        accountant: ClientAccountant | None = None,
    ) -> None:
        self.rule = rule
        self.num_layers = num_layers
        self.train_config = dict(train_config or {})
        self.score_config = dict(score_config or {})
        self.common_config = dict(common_config or {})
        self.lr_schedule = lr_schedule
        self.aggregator = aggregator
        self.fraction_train = fraction_train
        self.fraction_evaluate = fraction_evaluate
        self.min_nodes = min_nodes
        self.seed = seed
        self.on_round_end = on_round_end
        self.accountant = accountant
        self.stopped: str | None = None  # why the run ended before its last round (privacy budget)
        self.global_state: State = {}
        self.personal: dict[str, State] = {}  # client id -> its own global model
        self.clients: dict[int, str] = {}  # node id -> client id, learnt by `identify`
        self.asked: dict[int, int] = {}  # node id -> the round it was last asked who it is
        self.logged: set[tuple[int, str]] = set()  # (node, reason) pairs already logged
        self.budgets_seen: dict[int, int] = {}  # partition id -> budget last logged
        self.round_log = RoundLog(0, logged=self.logged)
        self.next_log = self.round_log  # the round the scores of the closing exchange are for
        self.evaluated: set[int] = set()  # the closing exchange's two parts: who evaluates,
        self.scored: set[int] = set()  # who reports scores and budget for the next round
        self.num_rounds = 0
        self.timeout: float | None = None

    # ------------------------------------------------------------------ helpers
    def identify(self, grid: Grid, nodes: Iterable[int]) -> None:
        """Ask every connected node not yet known (at most once a round) for its client id (its
        site name, else ``partition-<id>``): one ``query`` exchange, timed as "identifying". A
        node claiming the id of another connected node is rejected; a reconnected site (new node
        id, same id) takes its id, and so its personal model, over."""
        nodes, server_round = list(nodes), self.round_log.server_round
        unknown = [n for n in nodes if n not in self.clients and self.asked.get(n) != server_round]
        if not unknown:
            return
        self.asked.update(dict.fromkeys(unknown, server_round))
        messages = [self._message(n, MessageType.QUERY, {"server-round": server_round}, None)
                    for n in unknown]
        replies = self._send(grid, messages, "identifying",
                             lambda node, reason: self.round_log.reject(node, "identify", reason))
        held = {self.clients[n]: n for n in nodes if n in self.clients}
        for msg in sorted(replies, key=lambda m: m.metadata.src_node_id):
            node = msg.metadata.src_node_id
            try:
                client = check_identity(msg)
                if client in held:
                    raise Rejected(f"client id {client!r} is already node {held[client]}'s: give every "
                                   "site its own node config site (or partition-id)")
            except Rejected as err:
                self.round_log.reject(node, "identify", str(err))
                continue
            self.clients[node] = held[client] = client

    def client_ids(self, grid: Grid) -> dict[str, int]:
        """Client id -> node id of every connected, identified node (at least ``min_nodes``,
        waiting for them)."""
        while True:
            nodes = sorted(grid.get_node_ids())
            self.identify(grid, nodes)
            by_client = {self.clients[n]: n for n in nodes if n in self.clients}
            if len(by_client) >= self.min_nodes:
                return by_client
            log(INFO, "Waiting for nodes: %d identified, %d needed", len(by_client), self.min_nodes)
            time.sleep(1)

    def _sample(self, grid: Grid, fraction: float, server_round: int, salt: int) -> list[int]:
        """Seeded sample of connected clients, drawn by client id (so the same seed samples the
        same clients on every engine), returned as their node ids in client-id order."""
        by_client = self.client_ids(grid)
        ids = sorted(by_client)
        size = min(len(ids), max(self.min_nodes, round(fraction * len(ids))))
        chosen = random.Random(self.seed * 100_003 + server_round * 7 + salt).sample(ids, size)
        return [by_client[c] for c in sorted(chosen)]

    @property
    def shared_units(self) -> list[int]:
        """Units of the global state past the L selectable layers (a shared answer head,
        `tasks.adapters.shared_units`): every client trains and sends them whatever its mask."""
        return sorted({layer_index(k) for k in self.global_state} - set(range(self.num_layers)))

    def _state_for(self, node_id: int) -> State:
        return self.personal.get(self.clients.get(node_id, -1), self.global_state)

    def _send(self, grid: Grid, messages: list[Message], phase: str,
              reject: Callable[[int, str], None]) -> list[Message]:
        """Send (one exchange of this round, timed as ``phase``), wait up to the round timeout,
        and ``reject`` errors, strays and missing replies.

        Replies are matched to the messages sent (the Grid gives them ids when pushing), so a
        node the SuperLink reports unavailable, or that never answers, is recorded under its own
        node id; only non-error replies from their addressees are returned.
        """
        if not messages:
            return []
        start = time.perf_counter()
        replies = exchange(grid, messages, self.timeout)
        self.round_log.seconds[phase] += time.perf_counter() - start
        self.round_log.exchanges += 1
        self.round_log.messages += len(messages)
        kept, problems = unique_by_node(replies, sent=messages)
        for node, reason in problems:
            reject(node, reason)
        return kept

    def _message(self, node_id: int, kind: str, config: dict, arrays: ArrayRecord | None) -> Message:
        content = RecordDict({CONFIG_KEY: ConfigRecord({**self.common_config, **config})})
        if arrays is not None:
            content[ARRAYS_KEY] = arrays
            self.round_log.add_bytes(self.round_log.bytes_down, node_id, record_bytes(arrays))
        return Message(content=content, message_type=kind, dst_node_id=node_id)

    def _arrays_for(self, node_ids: Iterable[int]) -> dict[int, ArrayRecord]:
        shared = to_record(self.global_state)
        return {n: to_record(self.personal[c]) if (c := self.clients.get(n)) in self.personal else shared
                for n in node_ids}

    # ------------------------------------------------------------------ scoring + selection
    def _record_reports(self, reports: list[LayerReport]) -> None:
        """The validated reports of ``next_log``'s round, in partition order (seeded runs: the
        same optimiser input each run)."""
        reports.sort(key=lambda r: (r.partition_id, r.node_id))
        self.next_log.reports = {r.node_id: r for r in reports}
        self._log_budgets(self.next_log.server_round, reports)

    def _log_budgets(self, server_round: int, reports: Sequence[LayerReport]) -> None:
        """Log the budgets the clients reported, by partition id, when any is new or changed."""
        budgets = {r.partition_id: r.budget for r in reports}
        if any(self.budgets_seen.get(pid) != k for pid, k in budgets.items()):
            self.budgets_seen.update(budgets)
            log(INFO, "round %d: layer budgets by partition id: %s", server_round,
                ", ".join(f"{pid}: {k}" for pid, k in sorted(budgets.items())))

    def assign_layers(self, server_round: int, reports: Sequence[LayerReport]) -> dict[int, np.ndarray]:
        """Step 1: one mask per reporting client from the selection rule."""
        start = time.perf_counter()
        scores = np.stack([r.scores for r in reports])
        budgets = [r.budget for r in reports]
        masks, assignment = self.rule.select(scores, budgets, seed=self.seed * 1_000 + server_round)
        self.round_log.seconds["optimising"] += time.perf_counter() - start
        self.round_log.assignment = assignment
        self.round_log.masks = {r.node_id: m for r, m in zip(reports, masks, strict=True)}
        return self.round_log.masks

    # ------------------------------------------------------------------ Strategy API
    def configure_train(self, server_round: int, arrays: ArrayRecord, config: ConfigRecord,
                        grid: Grid) -> Iterable[Message]:
        """Masks from the reports the previous exchange gathered for this round (its clients are
        this round's seeded train sample) and one train message per reporting client."""
        if not self.global_state:
            self.global_state = from_record(arrays)
        reports = list(self.round_log.reports.values())
        if not reports:
            log(WARNING, "round %d: no valid layer report, no training", server_round)
            return []
        masks = self.assign_layers(server_round, reports)
        train_config = {**self.train_config, **dict(config), "server-round": server_round}
        if self.lr_schedule is not None:
            train_config["lr"] = self.lr_schedule(server_round)
        records = self._arrays_for(masks)
        return [
            self._message(node, MessageType.TRAIN,
                          {**train_config, "mask": np.flatnonzero(mask).tolist()}, records[node])
            for node, mask in masks.items()
        ]

    def aggregate_train(self, server_round: int, replies: Iterable[Message]
                        ) -> tuple[ArrayRecord | None, MetricRecord | None]:
        log_ = self.round_log
        start = time.perf_counter()
        kept, duplicates = unique_by_node(replies)
        for node, reason in duplicates:
            log_.reject(node, "train", reason)
        updates: list[ClientUpdate] = []
        shared = self.shared_units  # every client trains these whatever its mask
        for msg in kept:
            node = msg.metadata.src_node_id
            try:
                if node not in log_.masks:
                    raise Rejected("reply from a node that was not assigned layers this round")
                if METRICS_KEY in msg.content and msg.content[METRICS_KEY].get(DP_SAT_OUT):
                    log_.sit_out(node, dict(msg.content[METRICS_KEY]))
                    continue
                assigned = [*np.flatnonzero(log_.masks[node]), *shared]
                report = log_.reports.get(node)
                update = check_update(msg, self._state_for(node), assigned,
                                      expected_examples=report.num_examples if report else None)
            except Rejected as err:
                log_.reject(node, "train", str(err))
                continue
            updates.append(update)
            log_.add_bytes(log_.bytes_up, node, record_bytes(msg.content[ARRAYS_KEY]))
            log_.train_metrics[node] = dict(msg.content[METRICS_KEY])
        if len(updates) < self.min_nodes:
            log(WARNING, "round %d: %d valid updates < min-nodes %d, global adapters unchanged",
                server_round, len(updates), self.min_nodes)
            log_.seconds["aggregating"] += time.perf_counter() - start
            return None, None
        result = self.aggregator(self.global_state, updates)
        # a client that took no part in this round keeps the model last made for it
        made = {self.clients[node]: state for node, state in result.personal.items()}
        self.global_state, self.personal = result.global_state, {**self.personal, **made}
        log_.aggregated = True
        log_.seconds["aggregating"] += time.perf_counter() - start
        return to_record(self.global_state), MetricRecord(weighted_means(log_.train_metrics))

    def configure_evaluate(self, server_round: int, arrays: ArrayRecord, config: ConfigRecord,
                           grid: Grid) -> Iterable[Message]:
        """The exchange that closes round ``server_round`` (0: before round 1): its seeded
        evaluation sample evaluates the model it holds now, round ``server_round + 1``'s seeded
        train sample scores it (none after the last round). The samples are the ones the
        three-exchange order drew (salt 2 for evaluation, 1 for training, each seeded by the
        round it serves); the reports go to ``next_log``, the log of round ``server_round + 1``."""
        evaluated = (self._sample(grid, self.fraction_evaluate, server_round, salt=2)
                     if self.fraction_evaluate > 0 else [])
        scored = (self._sample(grid, self.fraction_train, server_round + 1, salt=1)
                  if server_round < self.num_rounds else [])
        self.next_log = RoundLog(server_round + 1, logged=self.logged)
        return self.round_messages(server_round, evaluated, scored, dict(config))

    def round_messages(self, server_round: int, evaluated: Iterable[int], scored: Iterable[int],
                       config: dict | None = None) -> list[Message]:
        """One ``evaluate`` message per client in either set, on the model it holds after round
        ``server_round``: ``evaluate`` says whether it evaluates that model, ``score`` which score
        it computes on it for round ``server_round + 1`` ("none": only its budget and example
        count, which every reply carries). The adapters go only to clients that use them."""
        self.evaluated, self.scored = set(evaluated), set(scored)
        scorer = self.rule.scorer
        records = self._arrays_for(self.evaluated | (self.scored if scorer else set()))
        messages = []
        for node in sorted(self.evaluated | self.scored):
            part: dict = {**(config or {})} if node in self.evaluated else {}
            if node in self.scored and scorer:
                part.update(self.score_config)
            part.update({"server-round": server_round, "evaluate": node in self.evaluated,
                         "score": scorer if node in self.scored and scorer else "none"})
            messages.append(self._message(node, MessageType.EVALUATE, part, records.get(node)))
        return messages

    def reject_parts(self, node_id: int, reason: str) -> None:
        """A reply of the closing exchange that failed as a whole fails each part it was for."""
        if node_id in self.evaluated or node_id not in self.scored:
            self.round_log.reject(node_id, "evaluate", reason)
        if node_id in self.scored:
            self.next_log.reject(node_id, "scores", reason)

    def aggregate_evaluate(self, server_round: int, replies: Iterable[Message]) -> MetricRecord | None:
        """Record round ``server_round``'s evaluation and round ``server_round + 1``'s reports
        (each part validated on its own: a bad score does not drop a good evaluation)."""
        kept, duplicates = unique_by_node(replies)
        for node, reason in duplicates:
            self.reject_parts(node, reason)
        reports = []
        for msg in kept:
            node = msg.metadata.src_node_id
            if node not in self.evaluated | self.scored:
                self.round_log.reject(node, "evaluate", "reply from a node that was not asked this round")
                continue
            if node in self.evaluated:
                try:
                    self.round_log.eval_metrics[node] = check_evaluation(msg)
                except Rejected as err:
                    self.round_log.reject(node, "evaluate", str(err))
            if node in self.scored:
                try:
                    reports.append(check_scores(msg, self.num_layers))
                except Rejected as err:
                    self.next_log.reject(node, "scores", str(err))
        if self.scored:
            self._record_reports(reports)
        means = weighted_means(self.round_log.eval_metrics)
        return MetricRecord(means) if means else None

    def summary(self) -> None:
        log(INFO, "\t├──> Selection: strategy=%s scorer=%s algorithm=%s",
            self.rule.name, self.rule.scorer, self.rule.algorithm)
        log(INFO, "\t├──> Layers: %d, aggregator: %s", self.num_layers,
            getattr(self.aggregator, "__name__", type(self.aggregator).__name__))
        log(INFO, "\t└──> Sampling: train %.2f, evaluate %.2f, min nodes %d",
            self.fraction_train, self.fraction_evaluate, self.min_nodes)

    # ------------------------------------------------------------------ loop
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
        if start_round == 1:
            self.round_log = RoundLog(0, logged=self.logged)
            self._close_round(grid, 0, eval_config, evaluate_fn, result)
        elif start_round <= num_rounds:
            self.round_log = self.next_log = RoundLog(start_round, logged=self.logged)
            messages = self.round_messages(start_round - 1, (), self._sample(
                grid, self.fraction_train, start_round, salt=1))
            self.aggregate_evaluate(start_round - 1, self._send(grid, messages, "scoring", self.reject_parts))
        for server_round in range(start_round, num_rounds + 1):
            if self.accountant is not None and not self.accountant.allows(server_round):
                self.stopped = (f"Privacy budget spent: round {server_round} would bring ε to "
                                f"{self.accountant.epsilon(server_round):.3g} > {self.accountant.cap:.3g} "
                                f"(dp = 'client'), so the run stops after round {server_round - 1}, its "
                                "results and checkpoint kept")
                log(WARNING, "%s", self.stopped)
                break
            self.round_log = self.next_log
            if self.accountant is not None:
                self.round_log.epsilon = self.accountant.epsilon(server_round)
                self.round_log.epsilon_rdp = self.accountant.epsilon(server_round, "rdp")
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

    def _close_round(self, grid: Grid, server_round: int, config: ConfigRecord,
                     evaluate_fn: Callable | None, result: Result) -> None:
        """The closing exchange of ``server_round``, its records, then ``on_round_end``."""
        messages = list(self.configure_evaluate(server_round, to_record(self.global_state), config, grid))
        replies = self._send(grid, messages, "evaluating" if self.evaluated else "scoring",
                             self.reject_parts)
        if (eval_metrics := self.aggregate_evaluate(server_round, replies)) is not None:
            result.evaluate_metrics_clientapp[server_round] = eval_metrics
        if evaluate_fn is not None and (res := evaluate_fn(server_round, self.global_state)):
            result.evaluate_metrics_serverapp[server_round] = res
        self.round_log.clients = dict(self.clients)
        if self.on_round_end is not None:
            self.on_round_end(self.round_log, self.global_state, self.personal)
