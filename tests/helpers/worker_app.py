"""A tiny ClientApp for tests/client_app/test_site_worker.py: echoes who ran it, counts calls in its
context."""

from __future__ import annotations

import os

from flwr.app import Context, Message, MetricRecord, RecordDict
from flwr.clientapp import ClientApp

from client_app.worker import site_mod

app = ClientApp(mods=[site_mod])


@app.query("echo")
def echo(msg: Message, context: Context) -> Message:
    import torch

    if msg.content["config"]["fail"]:
        raise KeyError("boom")
    calls = int(context.state["calls"]["n"]) + 1 if "calls" in context.state else 1
    context.state["calls"] = MetricRecord({"n": calls})
    return Message(RecordDict({"echo": MetricRecord({
        "pid": os.getpid(), "threads": torch.get_num_threads(), "calls": calls,
        "x": msg.content["config"]["x"]})}), reply_to=msg)
