"""Flower's Deployment Engine on 127.0.0.1 (issue 6): a node killed in the middle of a run is
recorded as that round's failure, the run completes, and the restarted node rejoins with its id.

The test federation's SuperNodes send Flower's most frequent heartbeat (tests/fast_supernode.py:
every ~4 s, declared interval 10 s), so the SuperLink marks the victim offline about 20 s after the
kill instead of the 60 s of Flower's fixed 30 s interval; what the test checks does not depend on
how soon that is."""

from __future__ import annotations

import signal
import threading
import time

import pytest

from tests.deployment import BUDGETS, RUN_TIMEOUT, read_jsonl, run_config, start_federation


@pytest.fixture(scope="module")
def federation(tmp_path_factory):
    yield from start_federation(tmp_path_factory.mktemp("federation"))


def test_killed_node_is_recorded_the_run_completes_and_the_restarted_node_rejoins(federation, tmp_path):
    victim = federation.nodes[2]
    victim_id = federation.node_ids[victim.name]
    log = federation.log_path(victim.name)
    seen = log.read_text().count("Receiving:")
    outcome = {}
    runner = threading.Thread(target=lambda: outcome.setdefault("result", federation.run(
        run_config(tmp_path, "fault", **{"num-server-rounds": 2, "round-timeout": 600,
                                         "fraction-evaluate": 0.0}),
        timeout=RUN_TIMEOUT)))
    runner.start()
    try:
        deadline = time.monotonic() + RUN_TIMEOUT
        while log.read_text().count("Receiving:") == seen:  # its first message of this run
            assert time.monotonic() < deadline and runner.is_alive(), "the victim got no message"
            time.sleep(0.5)
        federation.stop(victim.name, signal.SIGKILL)  # dies mid-round, with its App processes
        while victim_id in federation.online_nodes():  # the SuperLink notices the missing heartbeats
            assert time.monotonic() < deadline, "the SuperLink never marked the killed node offline"
            time.sleep(2)
        # The SuperLink turns the lost message into a "Node Unavailable" reply only when the
        # ServerApp next pulls while the node is offline: restart it only after the server has seen
        # that reply, or the message waits for the round timeout instead.
        run_log = federation.log_path("flwr-run")
        while f"from node {victim_id} rejected" not in (run_log.read_text() if run_log.exists() else ""):
            assert time.monotonic() < deadline and runner.is_alive(), "the server never saw the failure"
            time.sleep(1)
        federation.start_supernode(victim)  # same key, so the same node id; same state-dir
    except BaseException:
        federation.stop("flwr-run")
        raise
    finally:
        runner.join(timeout=RUN_TIMEOUT)
    result = outcome["result"]
    assert result.ok, result.output[-3000:]
    rounds = read_jsonl(tmp_path / "fault" / "rounds.jsonl")
    assert [r["round"] for r in rounds] == [1, 2]
    assert all(r["aggregated"] for r in rounds)
    failures = [f for f in rounds[0]["rejected"] if f["node"] == victim_id]
    assert failures and rounds[0]["failures"] >= 1, rounds[0]["rejected"]
    assert any("Node Unavailable" in f["reason"] or "no reply" in f["reason"] for f in failures)
    rows = read_jsonl(tmp_path / "fault" / "clients.jsonl")
    first = {r["node"]: r for r in rows if r["round"] == 1}
    assert first.get(victim_id, {}).get("mask") is None  # no layers for a node that cannot train
    assert len(first) >= 2 and all(len(r["mask"]) == r["budget"] for n, r in first.items() if n != victim_id)
    again = [r for r in rows if r["round"] == 2 and r["node"] == victim_id]
    assert again and len(again[0]["mask"]) == BUDGETS[victim.name], rows  # it rejoined
