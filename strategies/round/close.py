"""Step 4 of a round: the exchange that closes it, in which clients evaluate the model they hold and
report the scores and budgets of the next round, each part validated on its own."""

from __future__ import annotations

from collections.abc import Callable, Iterable

from flwr.app import ArrayRecord, ConfigRecord, Message, MessageType, MetricRecord
from flwr.serverapp import Grid
from flwr.serverapp.strategy import Result

from strategies.records import to_record
from strategies.round.log import RoundLog, weighted_means
from strategies.validation import Rejected, check_evaluation, check_scores, unique_by_node
from tasks.names import NO_SCORE


class ClosingPhase:
    """`LayerSelectionStrategy`'s part that closes a round."""

    def configure_evaluate(self, server_round: int, arrays: ArrayRecord, config: ConfigRecord,
                           grid: Grid) -> Iterable[Message]:
        """The exchange that closes round ``server_round`` (0: before round 1): its seeded
        evaluation sample evaluates the model it holds now, round ``server_round + 1``'s seeded
        train sample scores it (none after the last round). Each sample is seeded by the round it
        serves (salt 2 for evaluation, 1 for training); the reports go to ``next_log``, the log of
        round ``server_round + 1``."""
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
                         "score": scorer if node in self.scored and scorer else NO_SCORE})
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

    def first_exchange(self, grid: Grid, start_round: int, config: ConfigRecord, evaluate_fn: Callable | None,
                       result: Result) -> None:
        """Before the first round run: a fresh run evaluates the initial adapters (round 0) with round 1's
        scores; a resumed one only scores for ``start_round`` (its scores were not checkpointed)."""
        if start_round == 1:
            self.round_log = RoundLog(0, logged=self.logged)
            self._close_round(grid, 0, config, evaluate_fn, result)
        elif start_round <= self.num_rounds:
            self.round_log = self.next_log = RoundLog(start_round, logged=self.logged)
            messages = self.round_messages(start_round - 1, (), self._sample(
                grid, self.fraction_train, start_round, salt=1))
            self.aggregate_evaluate(start_round - 1, self._send(grid, messages, "scoring", self.reject_parts))
