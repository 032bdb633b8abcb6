"""Validation of client replies: a bad reply is rejected with a reason, never aggregated.

Every check raises :class:`Rejected` with a one-line reason; the strategy logs it, records it in
the round metrics and leaves that client out of the step, so one malformed or malicious reply
cannot stop a round or corrupt the global adapters.

:func:`unique_by_node` also pairs replies with the messages sent: on the Deployment Engine the
SuperLink answers for a node it lost (no heartbeat) with an error reply whose *source* is the
SuperLink itself (node id 1), so the failing node is found through ``reply_to_message_id``; a node
that never answers within the round timeout is reported as missing.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np
from flwr.app import ArrayRecord, Message, MetricRecord

from flower_compat import flower_version, release_mismatch
from strategies.aggregation import ClientUpdate
from strategies.records import IDENTITY, RUNTIME, State, from_record, layer_index
from tasks.names import CLIENT_ID, DP_SAT_OUT

SCORES_KEY = "scores"
ARRAYS_KEY = "arrays"
METRICS_KEY = "metrics"


class Rejected(ValueError):
    """A client reply that fails validation; ``str(err)`` is the logged reason."""


@dataclass(frozen=True)
class LayerReport:
    """A validated ``scores`` record of an evaluate reply: per-layer principal eigenvalues (all 0
    for a rule without a score) and the client's budget, for the next round's selection."""

    node_id: int
    eigenvalues: np.ndarray  # (L,) float64, finite, >= 0
    budget: int
    num_examples: int
    partition_id: int
    seconds: float

    @property
    def scores(self) -> np.ndarray:
        """Normalised importance S^l = lambda_1^l / sum_k lambda_1^k (paper §4.1); uniform if all 0."""
        total = self.eigenvalues.sum()
        if total <= 0:
            return np.full_like(self.eigenvalues, 1.0 / self.eigenvalues.size)
        return self.eigenvalues / total


def unique_by_node(replies: Iterable[Message], sent: Sequence[Message] | None = None
                   ) -> tuple[list[Message], list[tuple[int, str]]]:
    """Keep the first reply of every node; later duplicates are rejected.

    With ``sent`` (the messages of this step, after the Grid gave them ids) every reply is
    attributed to the node its message went to: error replies (a client's exception, or the
    SuperLink's "Node Unavailable") are rejected here under that node, as are replies claiming
    another sender; replies to messages not sent in this step are rejected, and every addressee
    without any reply is reported as missing. Kept replies are then non-error replies whose
    ``src_node_id`` is the node they answer for.
    """
    addressees = {m.metadata.dst_node_id for m in sent or ()}
    ids = [m.metadata.message_id for m in sent or ()]
    by_id = all(ids) and len(set(ids)) == len(ids)  # Flower's grids set ids when pushing
    addressee = {m.metadata.message_id: m.metadata.dst_node_id for m in sent or ()} if by_id else {}
    seen: set[int] = set()
    kept, rejected = [], []
    for msg in replies:
        node = claimed = msg.metadata.src_node_id
        if sent is not None:
            target = (addressee.get(msg.metadata.reply_to_message_id) if by_id
                      else node if node in addressees else None)
            if target is None:
                rejected.append((node, "reply to a message that was not sent in this step"))
                continue
            node = target  # the SuperLink's own error replies come from node 1
        if node in seen:
            rejected.append((node, "duplicate reply from the same node in this round"))
            continue
        seen.add(node)
        if sent is not None and msg.has_error():
            rejected.append((node, f"client error: {msg.error.reason}"))
        elif claimed != node:
            rejected.append((node, f"reply claims to come from node {claimed}"))
        else:
            kept.append(msg)
    if sent is not None:
        missing = sorted(addressees - seen)
        rejected.extend((node, "no reply before the round timeout") for node in missing)
    return kept, rejected


def _content(msg: Message) -> Mapping:
    if msg.has_error():
        raise Rejected(f"client error: {msg.error.reason}")
    if not msg.has_content() or len(msg.content) == 0:
        raise Rejected("empty reply")
    return msg.content


def _metrics(content: Mapping, key: str) -> MetricRecord:
    record = content.get(key) if key in content.metric_records else None
    if record is None:
        raise Rejected(f"reply has no MetricRecord '{key}'")
    return record


def _int_metric(metrics: MetricRecord, key: str, low: int, high: int | None = None) -> int:
    if key not in metrics:
        raise Rejected(f"missing '{key}'")
    value = metrics[key]
    if isinstance(value, bool) or not isinstance(value, int):
        raise Rejected(f"'{key}' must be an int, got {value!r}")
    if value < low or (high is not None and value > high):
        bound = f"{low}..{high}" if high is not None else f">= {low}"
        raise Rejected(f"'{key}' = {value} outside {bound}")
    return value


def _finite_metrics(metrics: MetricRecord) -> None:
    for key, value in metrics.items():
        values = value if isinstance(value, list) else [value]
        if not all(math.isfinite(v) for v in values):
            raise Rejected(f"metric {key!r} is NaN or inf")


def check_release(content: Mapping) -> None:
    """The ClientApp's Flower (``runtime`` record) must be the ServerApp's major.minor release."""
    record = content.get(RUNTIME) if RUNTIME in content.config_records else None
    peer = record.get("flwr-version") if record is not None else None
    if not isinstance(peer, str):
        raise Rejected(f"reply names no Flower version (ConfigRecord '{RUNTIME}', 'flwr-version')")
    problem = release_mismatch(flower_version(), peer, "the ServerApp", "this ClientApp")
    if problem:
        raise Rejected(problem)


def check_identity(msg: Message) -> str:
    """Validate a query reply's ``identity`` record: the client's id, 1-64 letters, digits, '.',
    '_' or '-' (it names the client's checkpoint files)."""
    content = _content(msg)
    record = content.get(IDENTITY) if IDENTITY in content.config_records else None
    client = record.get("client") if record is not None else None
    if not isinstance(client, str) or not CLIENT_ID.fullmatch(client):
        raise Rejected(f"reply names no valid client id (ConfigRecord '{IDENTITY}', 'client'): "
                       f"{client!r}")
    return client


def check_scores(msg: Message, num_layers: int) -> LayerReport:
    """Validate the ``scores`` record of an evaluate reply: the same Flower release as the server
    (`check_release`), L finite non-negative eigenvalues, 1 <= budget <= L."""
    content = _content(msg)
    check_release(content)
    metrics = _metrics(content, SCORES_KEY)
    if metrics.get(DP_SAT_OUT):
        reached, cap = metrics.get("dp-epsilon-next", 0), metrics.get("dp-budget", 0)
        raise Rejected(f"scores withheld: releasing them would take its ε to {reached:.4g} "
                       f"> dp-epsilon = {cap:.4g}")
    raw = metrics.get("eigenvalues")
    if not isinstance(raw, list):
        raise Rejected("'eigenvalues' missing or not a list")
    eig = np.asarray(raw, dtype=np.float64)
    if eig.shape != (num_layers,):
        raise Rejected(f"'eigenvalues' has {eig.size} entries, expected {num_layers}")
    if not np.isfinite(eig).all():
        raise Rejected("'eigenvalues' contains NaN or inf")
    if (eig < 0).any():
        raise Rejected(f"'eigenvalues' contains negative value {eig.min():g}")
    if not np.isfinite(eig.sum()):
        raise Rejected("'eigenvalues' sum overflows")
    _finite_metrics(metrics)
    seconds = metrics.get("seconds", 0.0)
    return LayerReport(
        node_id=msg.metadata.src_node_id,
        eigenvalues=eig,
        budget=_int_metric(metrics, "budget", 1, num_layers),
        num_examples=_int_metric(metrics, "num-examples", 1),
        partition_id=_int_metric(metrics, "partition-id", 0) if "partition-id" in metrics else -1,
        seconds=float(seconds) if isinstance(seconds, int | float) else 0.0,
    )


def check_update(msg: Message, global_state: State, assigned: Iterable[int],
                 expected_examples: int | None = None) -> ClientUpdate:
    """Validate a train reply: exactly the assigned layers' arrays, exact shapes/dtypes, finite.

    An empty assignment (``strategy = "none"``: heads only) expects an empty ``ArrayRecord``.

    ``expected_examples`` (the count the client gave with its scores) must match the count it
    trains with, so a client cannot inflate its FedAvg weight after the selection.
    """
    content = _content(msg)
    metrics = _metrics(content, METRICS_KEY)
    num_examples = _int_metric(metrics, "num-examples", 1)
    _finite_metrics(metrics)
    record = content.get(ARRAYS_KEY) if ARRAYS_KEY in content.array_records else None
    allowed = set(assigned)
    if not isinstance(record, ArrayRecord) or (len(record) == 0 and allowed):
        raise Rejected(f"reply has no ArrayRecord '{ARRAYS_KEY}'")
    try:
        state = from_record(record)
    except Exception as err:  # not a packed record, or bytes that do not match its header
        raise Rejected(f"arrays could not be decoded: {err}") from err
    for key, value in state.items():
        if key not in global_state:
            raise Rejected(f"unknown array key {key!r}")
        if layer_index(key) not in allowed:
            raise Rejected(f"array {key!r} belongs to layer {layer_index(key)}, not assigned")
        expected = global_state[key]
        if value.shape != expected.shape or value.dtype != expected.dtype:
            raise Rejected(f"array {key!r} is {value.dtype}{list(value.shape)}, "
                           f"expected {expected.dtype}{list(expected.shape)}")
    missing = sorted(k for k in global_state if layer_index(k) in allowed and k not in state)
    if missing:
        raise Rejected(f"{len(missing)} arrays of assigned layers missing, e.g. {missing[0]!r}")
    for key, value in state.items():
        if not np.isfinite(value).all():
            raise Rejected(f"array {key!r} contains NaN or inf")
    if expected_examples is not None and num_examples != expected_examples:
        raise Rejected(f"'num-examples' = {num_examples} differs from the {expected_examples} "
                       "reported with the scores")
    return ClientUpdate(node_id=msg.metadata.src_node_id, state=state, num_examples=num_examples,
                        metrics=dict(metrics), base=global_state)


def check_evaluation(msg: Message) -> dict:
    """Validate an evaluate reply: a metrics record, ``num-examples`` >= 1, finite values."""
    metrics = _metrics(_content(msg), METRICS_KEY)
    _int_metric(metrics, "num-examples", 1)
    _finite_metrics(metrics)
    return dict(metrics)
