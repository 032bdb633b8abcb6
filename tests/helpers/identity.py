"""The ``query`` handler every ClientApp needs: the server asks each node who it is (its client
id) before it first samples it (`strategies.layer_selection.LayerSelectionStrategy.identify`)."""

from __future__ import annotations

from flwr.app import ConfigRecord, Context, Message, RecordDict
from flwr.clientapp import ClientApp

from strategies.records import IDENTITY


def identity_reply(msg: Message, ctx: Context) -> Message:
    """The reply of a client whose id is its partition's, as the project's ClientApp says it."""
    client = f"partition-{int(ctx.node_config['partition-id'])}"
    return Message(RecordDict({IDENTITY: ConfigRecord({"client": client})}), reply_to=msg)


def answers_queries(app: ClientApp) -> ClientApp:
    """``app`` with `identity_reply` as its query handler."""
    app.query()(identity_reply)
    return app
