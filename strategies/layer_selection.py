"""The layer-selecting Flower strategy: the one round every run shares, whatever its two axes.

`server_app.app.build_strategy` picks the axes from the run config: the selection rule
(``strategy``, `strategies.selection`) and the aggregator (``aggregation``,
`strategies.aggregation`). One round (paper Fig. 4):
1. ``query.lntk`` to the sampled clients with the current global adapters; each replies
   (`client_app.app.lntk` -> `tasks.scores`) with the principal LNTK eigenvalue of every layer (or
   the rule's other score; zeros when the rule needs none), its budget and example count;
2. replies are validated (`strategies.validation`), a bad one is logged (once per node and reason,
   however many rounds it repeats, e.g. a node that cannot use a setting) and its client sits the
   round out;
3. the selection rule turns scores and budgets into one mask per client (paper Eq. 21 for F3OCUS;
   all empty for ``none``);
4. each client gets its own train message with its mask (`client_app.app.train` -> `tasks.train`)
   and returns only the trained layers' adapters (none for an empty mask);
5. the aggregator (masked FedAvg by default) merges the updates per layer;
6. every sampled client evaluates the new global adapters with its own head
   (`client_app.app.evaluate` -> `tasks.evaluate`).
"""

from __future__ import annotations

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
from strategies.aggregation import Aggregator, ClientUpdate, masked_fedavg
from strategies.records import State, from_record, layer_index, record_bytes, to_record
from strategies.selection import SelectionRule
from strategies.validation import (
    ARRAYS_KEY,
    METRICS_KEY,
    LayerReport,
    Rejected,
    check_evaluation,
    check_scores,
    check_update,
    unique_by_node,
)
from tasks.names import DP_SAT_OUT

log = getLogger("flwr").log  # Flower's logger: its handlers reach the console and `flwr run --stream`

QUERY_LNTK = f"{MessageType.QUERY}.lntk"
CONFIG_KEY = "config"
REPLY_POLL_S = 0.25  # seconds between pulls for a phase's replies (`exchange`)
PHASES = ("scoring", "optimising", "training", "aggregating", "evaluating")
STAGES = {"scoring": "scores", "training": "train", "evaluating": "evaluate"}


def exchange(grid: Grid, messages: Sequence[Message], timeout: float | None,
             poll: float = REPLY_POLL_S) -> list[Message]:
    """``Grid.send_and_receive`` with ``poll`` seconds between pulls: push the messages, pull
    their replies until all are in or ``timeout`` has passed.

    Flower's deployed Grid waits a fixed 3 s between pulls (1.41, 1.42), so a phase's last reply
    waited 1.5 s on average, 3 s at worst, three phases a round; a pull for replies that are not
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
    seconds: dict[str, float] = field(default_factory=lambda: dict.fromkeys(PHASES, 0.0))
    aggregated: bool = False
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
    """Example-weighted mean of every numeric metric the clients reported."""
    weights = {node: m.get("num-examples", 0) for node, m in per_client.items()}
    total = sum(weights.values())
    if total <= 0:
        return {}
    keys = {k for m in per_client.values() for k, v in m.items()
            if isinstance(v, int | float) and k not in NOT_METRICS}
    return {k: sum(weights[n] * m[k] for n, m in per_client.items() if k in m) / total
            for k in sorted(keys)}


class LayerSelectionStrategy(Strategy):
    """Layer-selecting federated fine-tuning with masked aggregation (F3OCUS and baselines).

    ``train_config`` and ``score_config`` are sent to clients as they are (plus round, mask and
    learning rate), ``common_config`` with every message; ``lr_schedule(round)`` gives the
    round's learning rate. ``aggregator`` is the
    replaceable aggregation step; it may return per-client global models, which are then sent to
    those clients instead of the shared one.
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
        on_round_end: Callable[[RoundLog, State, dict[int, State]], None] | None = None,
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
        self.global_state: State = {}
        self.personal: dict[int, State] = {}
        self.logged: set[tuple[int, str]] = set()  # (node, reason) pairs already logged
        self.budgets_seen: dict[int, int] = {}  # partition id -> budget last logged
        self.round_log = RoundLog(0, logged=self.logged)
        self.timeout: float | None = None

    # ------------------------------------------------------------------ helpers
    def _sample(self, grid: Grid, fraction: float, server_round: int, salt: int) -> list[int]:
        """Seeded sample of connected nodes (at least ``min_nodes``, waiting for them)."""
        while len(nodes := sorted(grid.get_node_ids())) < self.min_nodes:
            log(INFO, "Waiting for nodes: %d connected, %d needed", len(nodes), self.min_nodes)
            time.sleep(1)
        size = min(len(nodes), max(self.min_nodes, round(fraction * len(nodes))))
        return sorted(random.Random(self.seed * 100_003 + server_round * 7 + salt).sample(nodes, size))

    @property
    def shared_units(self) -> list[int]:
        """Units of the global state past the L selectable layers (a shared answer head,
        `tasks.adapters.shared_units`): every client trains and sends them whatever its mask."""
        return sorted({layer_index(k) for k in self.global_state} - set(range(self.num_layers)))

    def _state_for(self, node_id: int) -> State:
        return self.personal.get(node_id, self.global_state)

    def _send(self, grid: Grid, messages: list[Message], phase: str) -> list[Message]:
        """Send, wait up to the round timeout, and reject errors, strays and missing replies.

        Replies are matched to the messages sent (the Grid gives them ids when pushing), so a
        node the SuperLink reports unavailable, or that never answers, is recorded under its own
        node id; only non-error replies from their addressees are returned.
        """
        start = time.perf_counter()
        replies = exchange(grid, messages, self.timeout) if messages else []
        self.round_log.seconds[phase] += time.perf_counter() - start
        kept, problems = unique_by_node(replies, sent=messages)
        for node, reason in problems:
            self.round_log.reject(node, STAGES[phase], reason)
        return kept

    def _message(self, node_id: int, kind: str, config: dict, arrays: ArrayRecord | None) -> Message:
        content = RecordDict({CONFIG_KEY: ConfigRecord({**self.common_config, **config})})
        if arrays is not None:
            content[ARRAYS_KEY] = arrays
            self.round_log.add_bytes(self.round_log.bytes_down, node_id, record_bytes(arrays))
        return Message(content=content, message_type=kind, dst_node_id=node_id)

    def _arrays_for(self, node_ids: Iterable[int]) -> dict[int, ArrayRecord]:
        shared = to_record(self.global_state)
        return {n: to_record(self.personal[n]) if n in self.personal else shared for n in node_ids}

    # ------------------------------------------------------------------ scoring + selection
    def collect_reports(self, server_round: int, node_ids: Sequence[int], grid: Grid
                        ) -> list[LayerReport]:
        """Step 1-2: ask every node for its layer scores, budget and example count; validate."""
        config = {"server-round": server_round, "score": self.rule.scorer or "none",
                  **self.score_config}
        arrays = self._arrays_for(node_ids) if self.rule.scorer else {}
        messages = [self._message(n, QUERY_LNTK, config, arrays.get(n)) for n in node_ids]
        replies, duplicates = unique_by_node(self._send(grid, messages, "scoring"))
        for node, reason in duplicates:
            self.round_log.reject(node, "scores", reason)
        reports = []
        for msg in replies:
            try:
                reports.append(check_scores(msg, self.num_layers))
            except Rejected as err:
                self.round_log.reject(msg.metadata.src_node_id, "scores", str(err))
        reports.sort(key=lambda r: (r.partition_id, r.node_id))  # seeded runs: same order each run
        self.round_log.reports = {r.node_id: r for r in reports}
        self._log_budgets(server_round, reports)
        return reports

    def _log_budgets(self, server_round: int, reports: Sequence[LayerReport]) -> None:
        """Log the budgets the clients reported, by partition id, when any is new or changed."""
        budgets = {r.partition_id: r.budget for r in reports}
        if any(self.budgets_seen.get(pid) != k for pid, k in budgets.items()):
            self.budgets_seen.update(budgets)
            log(INFO, "round %d: layer budgets by partition id: %s", server_round,
                ", ".join(f"{pid}: {k}" for pid, k in sorted(budgets.items())))

    def assign_layers(self, server_round: int, reports: Sequence[LayerReport]) -> dict[int, np.ndarray]:
        """Step 3: one mask per reporting client from the selection rule."""
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
        if not self.global_state:
            self.global_state = from_record(arrays)
        node_ids = self._sample(grid, self.fraction_train, server_round, salt=1)
        reports = self.collect_reports(server_round, node_ids, grid)
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
        self.global_state, self.personal = result.global_state, {**self.personal, **result.personal}
        log_.aggregated = True
        log_.seconds["aggregating"] += time.perf_counter() - start
        return to_record(self.global_state), MetricRecord(weighted_means(log_.train_metrics))

    def configure_evaluate(self, server_round: int, arrays: ArrayRecord, config: ConfigRecord,
                           grid: Grid) -> Iterable[Message]:
        if self.fraction_evaluate <= 0:
            return []
        node_ids = self._sample(grid, self.fraction_evaluate, server_round, salt=2)
        records = self._arrays_for(node_ids)
        eval_config = {**dict(config), "server-round": server_round}
        return [self._message(n, MessageType.EVALUATE, eval_config, records[n]) for n in node_ids]

    def aggregate_evaluate(self, server_round: int, replies: Iterable[Message]) -> MetricRecord | None:
        kept, duplicates = unique_by_node(replies)
        for node, reason in duplicates:
            self.round_log.reject(node, "evaluate", reason)
        for msg in kept:
            node = msg.metadata.src_node_id
            try:
                self.round_log.eval_metrics[node] = check_evaluation(msg)
            except Rejected as err:
                self.round_log.reject(node, "evaluate", str(err))
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
        personal: dict[int, State] | None = None,
    ) -> Result:
        """Run rounds ``start_round..num_rounds`` (``start_round > 1`` resumes a checkpoint).

        Same order of calls as ``Strategy.start``; after every round ``on_round_end`` receives
        the round log and the new global (and per-client) state, e.g. to checkpoint it.
        """
        self.timeout = timeout
        self.global_state = from_record(initial_arrays)
        self.personal = dict(personal or {})
        self.summary()
        result = Result()
        for server_round in range(start_round, num_rounds + 1):
            self.round_log = RoundLog(server_round, logged=self.logged)
            messages = list(self.configure_train(
                server_round, to_record(self.global_state), ConfigRecord(dict(train_config or {})),
                grid))
            replies = self._send(grid, messages, "training")
            _, train_metrics = self.aggregate_train(server_round, replies)
            if train_metrics is not None:
                result.train_metrics_clientapp[server_round] = train_metrics
            messages = list(self.configure_evaluate(
                server_round, to_record(self.global_state),
                ConfigRecord(dict(evaluate_config or {})), grid))
            eval_metrics = self.aggregate_evaluate(
                server_round, self._send(grid, messages, "evaluating"))
            if eval_metrics is not None:
                result.evaluate_metrics_clientapp[server_round] = eval_metrics
            if evaluate_fn is not None and (res := evaluate_fn(server_round, self.global_state)):
                result.evaluate_metrics_serverapp[server_round] = res
            if self.on_round_end is not None:
                self.on_round_end(self.round_log, self.global_state, self.personal)
        result.arrays = to_record(self.global_state)
        return result
