"""Flower's round without Ray or a network: a ``Grid`` that hands each message straight to a
ClientApp in this process, and `run_in_process`, which runs a ServerApp on it.

For federations where Ray's per-message cost dominates (many simulated clients on a small machine:
``run_simulation.py --engine in-process``, `experiments.privacy_client`'s 50 sites) and for the
tests, which inspect every message the server sent (``InProcessGrid.sent``). Clients run one at a
time, each node with its own ``Context`` (node config, persistent state) as on a SuperNode; a
ClientApp that raises produces an error reply, as Flower's runtime does, so failure paths behave
as in a real run.

Private Flower names come through `flower_compat._private`, each with its reason below.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

from flwr.app import Context, Error, Message, RecordDict
from flwr.serverapp import Grid

from flower_compat import _private, client_app_error_code, set_task_identity

Handler = Callable[[Message, Context], Message]
"""A ClientApp, or anything answering a message as one."""

RUN_ID = 1
FIRST_NODE_ID = 100


class InProcessGrid(Grid):
    """Grid over in-memory nodes: every pushed message gets its id (as ``HttpGrid`` gives it) and
    is answered at once; its replies wait in ``inbox`` until pulled."""

    def __init__(self, app: Handler, node_configs: list[dict], run_config: Mapping[str, Any]) -> None:
        self.app = app
        self.run_config = dict(run_config)
        # what the ServerApp runtime sets before the server code creates messages. Private
        # (flwr.common.constant): no public module names the SuperLink's node id.
        set_task_identity((RUN_ID, 1, _private("flwr.common.constant", "SUPERLINK_NODE_ID")))
        self.contexts = {
            FIRST_NODE_ID + i: Context(run_id=RUN_ID, node_id=FIRST_NODE_ID + i, node_config=dict(cfg),
                                       state=RecordDict(), run_config=dict(self.run_config))
            for i, cfg in enumerate(node_configs)
        }
        self.sent: list[Message] = []
        self.inbox: dict[str, list[Message]] = {}
        # Private (flwr.supercore.run): the public Grid must hold a Run (its abstract ``run``), and
        # no public module exports the class.
        self._run = _private("flwr.supercore.run", "Run").create_empty(RUN_ID)

    @classmethod
    def federation(cls, client_app: Handler, run_config: Mapping[str, Any],
                   num_clients: int) -> InProcessGrid:
        """``num_clients`` nodes of ``client_app`` with the node config the Simulation Engine gives
        its virtual SuperNodes (``partition-id``, ``num-partitions``)."""
        nodes = [{"partition-id": i, "num-partitions": num_clients} for i in range(num_clients)]
        return cls(client_app, nodes, run_config)

    def serve(self, server_app: Callable[[Grid, Context], None]) -> None:
        """Run ``server_app`` on this grid, its context holding the grid's run config."""
        server_app(self, Context(run_id=RUN_ID, node_id=0, node_config={}, state=RecordDict(),
                                 run_config=dict(self.run_config)))

    def set_run(self, run: Any) -> None:
        self._run = run

    @property
    def run(self) -> Any:
        return self._run

    def create_message(self, content: RecordDict, message_type: str, dst_node_id: int,
                       group_id: str, ttl: float | None = None) -> Message:
        return Message(content=content, message_type=message_type, dst_node_id=dst_node_id,
                       group_id=group_id, ttl=ttl)

    def get_node_ids(self) -> Iterable[int]:
        return list(self.contexts)

    def answer(self, msg: Message) -> list[Message]:
        """The node's replies to ``msg``: its ClientApp's, or an error reply if that raises."""
        try:
            return [self.app(msg, self.contexts[msg.metadata.dst_node_id])]
        except Exception as err:  # noqa: BLE001 - mirrors Flower turning exceptions into errors
            return [Message(Error(code=client_app_error_code(), reason=f"{type(err).__name__}: {err}"),
                            reply_to=msg)]

    def push_messages(self, messages: Iterable[Message]) -> Iterable[str]:
        ids = []
        for msg in messages:
            msg.metadata.__dict__["_message_id"] = msg.object_id  # as HttpGrid.push_messages
            self.sent.append(msg)
            self.inbox[msg.metadata.message_id] = self.answer(msg)
            ids.append(msg.metadata.message_id)
        return ids

    def pull_messages(self, message_ids: Iterable[str]) -> Iterable[Message]:
        return [reply for i in list(message_ids) for reply in self.inbox.pop(i, [])]

    def send_and_receive(self, messages: Iterable[Message], *, timeout: float | None = None
                         ) -> Iterable[Message]:
        return self.pull_messages(self.push_messages(messages))


def run_in_process(server_app: Callable[[Grid, Context], None], client_app: Handler,
                   run_config: Mapping[str, Any], num_clients: int) -> InProcessGrid:
    """One run of ``server_app`` on `InProcessGrid.federation`, every app seeing ``run_config`` as
    ``context.run_config``; the grid, for inspection."""
    grid = InProcessGrid.federation(client_app, run_config, num_clients)
    grid.serve(server_app)
    return grid
