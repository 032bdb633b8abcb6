"""An in-process Flower ``Grid`` that hands each message straight to a ClientApp (no Ray, no network).

Each node has its own ``Context`` (node config, persistent state), as on a SuperNode. A handler
that raises produces an error reply, as Flower's runtime does, so failure paths can be tested.
`Simulator` stands in for ``run_simulation.simulate`` so that ``run_simulation.main`` (config
resolution, run directories, sweeps, resume) runs the real ServerApp and ClientApp without Ray's
startup; the Ray path itself is tested by tests/project/test_simulation.py and tests/project/test_resume.py.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from flwr.app import Context, Error, Message, RecordDict
from flwr.common.constant import SUPERLINK_NODE_ID
from flwr.serverapp import Grid
from flwr.supercore.run import Run
from flwr.supercore.task_identity import TaskIdentity

Handler = Callable[[Message, Context], Message]


class InProcessGrid(Grid):
    """Grid over in-memory nodes: every pushed message gets its id (as ``HttpGrid`` gives it) and
    is answered at once; its replies wait in ``inbox`` until pulled."""

    def __init__(self, app: Handler, node_configs: list[dict], run_config: dict) -> None:
        self.app = app
        # what the ServerApp runtime sets before the server code creates messages
        TaskIdentity.run_id, TaskIdentity.task_id, TaskIdentity.node_id = 1, 1, SUPERLINK_NODE_ID
        self.contexts = {
            100 + i: Context(run_id=1, node_id=100 + i, node_config=dict(cfg), state=RecordDict(),
                             run_config=dict(run_config))
            for i, cfg in enumerate(node_configs)
        }
        self.sent: list[Message] = []
        self.inbox: dict[str, list[Message]] = {}
        self._run = Run.create_empty(1)

    def set_run(self, run: Run) -> None:
        self._run = run

    @property
    def run(self) -> Run:
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
            return [Message(Error(code=1, reason=f"{type(err).__name__}: {err}"), reply_to=msg)]

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


class Simulator:
    """Stands in for ``run_simulation.simulate``: same arguments, the real ServerApp and ClientApp
    on one in-process grid per run (kept in ``grids`` for inspection)."""

    def __init__(self) -> None:
        self.grids: list[InProcessGrid] = []

    def __call__(self, config, num_clients: int, client_cpus: float, client_gpus: float,
                 cpus: int | None = None) -> None:
        from client_app.app import app as client_app
        from server_app.app import app as server_app

        values = config.to_dict()
        grid = InProcessGrid(client_app, [{"partition-id": i, "num-partitions": num_clients}
                                          for i in range(num_clients)], values)
        self.grids.append(grid)
        server_app(grid, Context(run_id=1, node_id=0, node_config={}, state=RecordDict(),
                                 run_config=values))


def call_in_process(command: list[str], stdout, stderr=None, cwd=None) -> int:
    """Stands in for the sweep's ``subprocess.call(["python", "run_simulation.py", ...])``: the
    same ``run_simulation.main`` in this process, its output to the run's log file."""
    import contextlib
    import sys

    import experiments.sweep
    import run_simulation

    assert command[:2] == [sys.executable, str(experiments.sweep.PROJECT_ROOT / "run_simulation.py")]
    with contextlib.redirect_stdout(stdout), contextlib.redirect_stderr(stdout):
        return run_simulation.main(command[2:])
