"""A tiny ClientApp for tests/client_app/test_site_worker.py: echoes who ran it, counts calls in its
context, sleeps as long as a message asks (saying when it starts); and `forked_clientapp`, a
stand-in for Flower's ``flwr-clientapp`` entry point that runs one message of it (the fork
server's child)."""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

from flwr.app import ConfigRecord, Context, Message, MetricRecord, RecordDict
from flwr.clientapp import ClientApp

from client_app import worker
from flower_compat import set_task_identity

APP = "tests.helpers.worker_app:app"  # for client_app.worker.APP
app = ClientApp(mods=[worker.site_mod])


def message(x: int, fail: bool = False, sleep: float = 0.0, mark: str = "") -> Message:
    """A query for `echo`; it sleeps `sleep` s after writing its pid to the file `mark` (if any)."""
    config = ConfigRecord({"x": x, "fail": fail, "sleep": sleep, "mark": mark, "server-round": 1})
    return Message(RecordDict({"config": config}), dst_node_id=5, message_type="query.echo")


def context(**node_config: object) -> Context:
    return Context(run_id=7, node_id=5, node_config=node_config, state=RecordDict(), run_config={})


@app.query("echo")
def echo(msg: Message, context: Context) -> Message:
    import torch

    config = msg.content["config"]
    if config["fail"]:
        raise KeyError("boom")
    if config["mark"]:
        Path(str(config["mark"])).write_text(str(os.getpid()))
    time.sleep(config["sleep"])
    calls = int(context.state["calls"]["n"]) + 1 if "calls" in context.state else 1
    context.state["calls"] = MetricRecord({"n": calls})
    return Message(RecordDict({"echo": MetricRecord({
        "pid": os.getpid(), "threads": torch.get_num_threads(), "calls": calls, "x": config["x"]})}),
        reply_to=msg)


def forked_clientapp() -> int:
    """Send one message to the warm worker of the site whose state-dir is ``--state-dir=<path>``
    and print its echo as JSON."""
    worker.APP = APP
    set_task_identity((11, 12, 13))
    state_dir = next(a.split("=", 1)[1] for a in sys.argv if a.startswith("--state-dir="))
    reply = app(message(1), context(**{"state-dir": state_dir, "num-threads": 1, "worker-idle": 60}))
    print(json.dumps(dict(reply.content["echo"])), flush=True)
    return 0
