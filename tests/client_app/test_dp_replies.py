"""What a client sends under each privacy mode: the keys of every reply record, listed against an
allow-list written out here (not read from the product), on three in-process sites of the real
apps (tiny model, one round), with a rule that scores layers and one that does not."""

from __future__ import annotations

import pytest
from flwr.app import Context, MessageType, RecordDict

from client_app.app import app as client_app
from flower_compat.inprocess import InProcessGrid
from server_app.app import app as server_app
from tests.client_app.test_config_node import RUN

LOSSES = {"train_loss", "train_loss_first", "train_loss_last", "samples_seen", "steps"}
# evaluation on the site's held-out test split (outside ε, said in README), the scores record
EVALUATE = {"metrics", "scores", "runtime"}
PUBLIC = {"num-examples", "partition-id", "budget", "eigenvalues"}
ALLOWED = {
    "sample": PUBLIC | {"dp-epsilon", "dp-epsilon-rdp", "dp-delta", "dp-noise-multiplier", "dp-sample-rate",
                        "dp-score-noise", "dp-sat-out", "dp-epsilon-next", "dp-budget"},
    "client": PUBLIC,
}


def replies(tmp_path, **settings) -> dict[str, list[RecordDict]]:
    """Every reply's content by message type."""
    run = {**RUN, "results-dir": str(tmp_path), "run-name": "run", "num-server-rounds": 1,
           "strategy": "last", **settings}
    seen: dict[str, list[RecordDict]] = {}

    def app(msg, context):
        reply = client_app(msg, context)
        assert not reply.has_error(), reply.error.reason
        seen.setdefault(msg.metadata.message_type, []).append(reply.content)
        return reply

    grid = InProcessGrid(app, [{"partition-id": i, "num-partitions": 3} for i in range(3)], run)
    server_app(grid, Context(run_id=1, node_id=0, node_config={}, state=RecordDict(), run_config=run))
    return seen


@pytest.mark.parametrize(("mode", "strategy"), [("sample", "last"), ("sample", "lntk"), ("client", "lntk")])
def test_a_dp_reply_carries_its_arrays_and_only_the_allowed_metrics(tmp_path, mode, strategy):
    seen = replies(tmp_path, dp=mode, strategy=strategy, **({"dp-noise": 1.0} if mode == "client" else {}))
    assert seen[MessageType.TRAIN]
    for content in seen[MessageType.TRAIN]:
        assert set(content) == {"arrays", "metrics"}
        keys = set(content["metrics"])
        assert keys <= ALLOWED[mode], keys - ALLOWED[mode]
        assert {"num-examples", "partition-id"} <= keys and not keys & LOSSES
        if mode == "sample":
            assert {"dp-epsilon", "dp-noise-multiplier", "dp-sample-rate", "dp-delta"} <= keys
    scored = [c["scores"] for c in seen[MessageType.EVALUATE] if "scores" in c]
    assert len(scored) == 6  # 3 sites, round 0 and round 1
    for content in seen[MessageType.EVALUATE]:
        assert set(content) <= EVALUATE
        assert set(content["scores"]) <= ALLOWED[mode], set(content["scores"]) - ALLOWED[mode]
    assert [set(c) for c in seen[MessageType.QUERY]] == [{"identity"}] * 3


def test_without_dp_a_train_reply_still_carries_its_losses(tmp_path):
    """The control: the allow-list is what removes them, not a change of the training's output."""
    for content in replies(tmp_path)[MessageType.TRAIN]:
        assert LOSSES - {"steps"} <= set(content["metrics"])
