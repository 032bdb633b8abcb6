"""Error replies: a client that cannot or will not serve a message says why in one line.

Flower's Message API lets a ClientApp answer with ``Message(Error(code, reason), reply_to=msg)``.
`released_only` passes every reply's metrics through the privacy mode's allow-list. The mod
`error_replies` answers with an error reply for a setting this node cannot use (`settings.ConfigError`, e.g.
``node config device = 'tpu'``) and for a request it refuses (`Refused`, e.g. a train mask over its
budget), instead of letting the exception reach Flower's runtime, which logs a traceback for every
message. The server logs the reason once per node and goes on with the other nodes
(`strategies.layer_selection`). The node logs each reason once per process.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from logging import WARNING, getLogger

from flwr.app import Context, Error, Message, MetricRecord

from flower_compat import FlowerVersionError, client_app_error_code
from settings import ConfigError, RunConfig

log = getLogger("flwr").log  # Flower's logger: its handlers reach the console and `flwr run --stream`


class Refused(ValueError):
    """A server request this client will not carry out; ``str(err)`` names the bad field."""


_logged: set[tuple[int, str]] = set()


def error_replies(msg: Message, context: Context, call_next: Callable[[Message, Context], Message]
                  ) -> Message:
    """Flower mod: a ConfigError, a FlowerVersionError or Refused becomes an error reply naming the
    setting, the release or the field."""
    try:
        return call_next(msg, context)
    except (ConfigError, FlowerVersionError, Refused) as err:
        reason = str(err)
        if (context.node_id, reason) not in _logged:
            _logged.add((context.node_id, reason))
            log(WARNING, "node %d refuses %s messages: %s", context.node_id,
                msg.metadata.message_type, reason)
        return Message(Error(code=client_app_error_code(), reason=reason), reply_to=msg)


def released_only(msg: Message, context: Context, call_next: Callable[[Message, Context], Message]
                  ) -> Message:
    """Flower mod: every metric record of every reply (train, evaluate, scores, a round sat out)
    passes the privacy mode's one allow-list (`privacy.base.Privacy.allows`); what it does
    not allow is logged here and never leaves the site."""
    reply = call_next(msg, context)
    if reply.has_error():
        return reply
    privacy = RunConfig.from_mapping(context.run_config).privacy.component
    server_round = int(msg.content["config"].get("server-round", 0)) if "config" in msg.content else 0
    for name, record in list(reply.content.metric_records.items()):
        reply.content[name] = MetricRecord(privacy.release(dict(record), server_round))
    return reply


def check_mask(mask: object, num_layers: int, budget: int, *, heads_only: bool = False) -> list[int]:
    """The layers of a train message's ``mask``: distinct layer indices in ``0..L-1``, at least
    one and at most this client's budget k_i (paper Eq. 21's constraint |M_i| <= k_i); in a
    ``strategy = "none"`` run (``heads_only``) exactly none: only the client's own head trains."""
    if not isinstance(mask, Sequence) or isinstance(mask, str | bytes):
        raise Refused(f"train mask {mask!r} is not a list of layer indices")
    layers = list(mask)
    bad = [v for v in layers if isinstance(v, bool) or not isinstance(v, int)
           or not 0 <= v < num_layers]
    if bad:
        raise Refused(f"train mask {layers}: {bad[0]!r} is not a layer index in 0..{num_layers - 1}")
    repeated = [v for i, v in enumerate(layers) if v in layers[:i]]
    if repeated:
        raise Refused(f"train mask {layers} lists layer {repeated[0]} twice")
    if heads_only:
        if layers:
            raise Refused(f"train mask {layers} assigns layers, but strategy = 'none' trains heads only")
        return layers
    if not layers:
        raise Refused("train mask [] assigns no layer")
    if len(layers) > budget:
        raise Refused(f"train mask {layers} has {len(layers)} layers, over this client's budget "
                      f"of {budget}")
    return layers
