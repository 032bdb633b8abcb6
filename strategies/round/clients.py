"""The clients of a run: who is connected and who they are, the seeded samples of a round, and one
exchange of messages with them (timed, replies matched to the messages sent)."""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Iterable, Sequence
from logging import getLogger

from flwr.app import ArrayRecord, ConfigRecord, Message, RecordDict
from flwr.serverapp import Grid

from strategies.records import State, layer_index, record_bytes, to_record
from strategies.round.identity import Identities
from strategies.validation import ARRAYS_KEY, unique_by_node

log = getLogger("flwr").log  # Flower's logger: its handlers reach the console and `flwr run --stream`

CONFIG_KEY = "config"
REPLY_POLL_S = 0.25  # seconds between pulls for a phase's replies (`exchange`)


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


class Clients(Identities):
    """`LayerSelectionStrategy`'s part that knows the clients and sends them an exchange."""

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
              reject: Callable[[int, str], None], timeout: float | None = None) -> list[Message]:
        """Send (one exchange of this round, timed as ``phase``), wait up to the round timeout (or
        ``timeout``, where shorter), and ``reject`` errors, strays and missing replies.

        Replies are matched to the messages sent (the Grid gives them ids when pushing), so a
        node the SuperLink reports unavailable, or that never answers, is recorded under its own
        node id; only non-error replies from their addressees are returned.
        """
        if not messages:
            return []
        start = time.perf_counter()
        limit = timeout if self.timeout is None else min(self.timeout, timeout or self.timeout)
        replies = exchange(grid, messages, limit)
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

