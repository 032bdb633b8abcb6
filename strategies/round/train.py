"""Steps 1-3 of a round: masks from the clients' reports (the selection rule), the train exchange and
the aggregation of the validated updates."""

from __future__ import annotations

import time
from collections.abc import Iterable, Sequence
from logging import INFO, WARNING, getLogger
from typing import Protocol

import numpy as np
from flwr.app import ArrayRecord, ConfigRecord, Message, MessageType, MetricRecord
from flwr.serverapp import Grid

from strategies.aggregation import ClientUpdate
from strategies.records import from_record, natural_key, record_bytes, to_record
from strategies.round.log import weighted_means
from strategies.validation import ARRAYS_KEY, METRICS_KEY, LayerReport, Rejected, check_update, unique_by_node
from tasks.names import DP_SAT_OUT

log = getLogger("flwr").log  # Flower's logger: its handlers reach the console and `flwr run --stream`


class Accountant(Protocol):
    """A run's privacy accountant as the round sees it (``dp = "client"``, with privacy): whether a
    round keeps ε within its cap, and the ε after a round."""

    cap: float

    def allows(self, server_round: int) -> bool: ...

    def epsilon(self, rounds: int, accountant: str = "pld") -> float: ...


class TrainPhase:
    """`LayerSelectionStrategy`'s part that assigns layers, trains and aggregates."""

    def _record_reports(self, reports: list[LayerReport]) -> None:
        """The validated reports of ``next_log``'s round in client-id order (`natural_key`: numbers
        by value, so ``partition-2`` before ``partition-10``), whatever the node ids: the same
        optimiser input each run of a seed, on every engine and after a restart."""
        reports.sort(key=lambda r: natural_key(self.clients.get(r.node_id, "")))
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

    def open_round(self, server_round: int) -> bool:
        """Make ``server_round`` the current round, or (``dp = "client"``) stop the run before a round
        whose ε would pass the accountant's cap: False, the reason in ``stopped``."""
        if self.accountant is not None and not self.accountant.allows(server_round):
            self.stopped = (f"Privacy budget spent: round {server_round} would bring ε to "
                            f"{self.accountant.epsilon(server_round):.3g} > {self.accountant.cap:.3g} "
                            f"(dp = 'client'), so the run stops after round {server_round - 1}, its "
                            "results and checkpoint kept")
            log(WARNING, "%s", self.stopped)
            return False
        self.round_log = self.next_log
        if self.accountant is not None:
            self.round_log.epsilon = self.accountant.epsilon(server_round)
            self.round_log.epsilon_rdp = self.accountant.epsilon(server_round, "rdp")
        return True

    def summary(self) -> None:
        log(INFO, "\t├──> Selection: strategy=%s scorer=%s algorithm=%s",
            self.rule.name, self.rule.scorer, self.rule.algorithm)
        log(INFO, "\t├──> Layers: %d, aggregator: %s", self.num_layers,
            getattr(self.aggregator, "__name__", type(self.aggregator).__name__))
        log(INFO, "\t└──> Sampling: train %.2f, evaluate %.2f, min nodes %d",
            self.fraction_train, self.fraction_evaluate, self.min_nodes)
