"""Flower's Deployment Engine on 127.0.0.1 (issue 6): a TLS SuperLink with SuperNode authentication,
three SuperNodes with their own budgets, refused nodes, and a node killed in the middle of a run.

One federation (deploy.launch.Federation) serves the whole module; every process it starts is
stopped by its PID at the end, and the teardown fails if any process naming its folder or ports is left.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import threading
import time
from pathlib import Path

import pytest

from deploy.launch import Federation, Node, site_nodes

BUDGETS = {"site-0": 1, "site-1": 2, "site-2": 3}  # tiny-vilt has 4 selectable layers
SETTINGS = ("model='tiny-vilt' dataset='synthetic' partitioner='iid' budgets='1,2,3' local-steps=4 "
            "batch-size=8 max-test-samples=40 optimizer-pop-size=20 optimizer-generations=10")
RUN_TIMEOUT = 1200  # generous: other work may share the 2 cores


def free_port_block(size: int) -> int:
    """A port p with p..p+size-1 all free on 127.0.0.1."""
    for _ in range(50):
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            base = probe.getsockname()[1]
        if base + size > 65535:
            continue
        try:
            for port in range(base, base + size):
                with socket.socket() as s:
                    s.bind(("127.0.0.1", port))
        except OSError:
            continue
        return base
    raise RuntimeError("no block of free ports on 127.0.0.1")


@pytest.fixture(scope="module")
def federation(tmp_path_factory):
    workdir = tmp_path_factory.mktemp("federation")
    nodes = site_nodes([str(b) for b in BUDGETS.values()], "synthetic", "cpu", workdir)
    fed = Federation(workdir, nodes, port=free_port_block(16))
    fed.credentials(extra=["stranger"])  # a key pair nobody registers
    try:
        fed.start(timeout=600)
        yield fed
    finally:
        fed.stop_all()  # every process by its PID, then any SuperExec/App process left of them
        time.sleep(2)
        left = fed.strays()
        for pid in left:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        assert not left, f"processes left running: {left}"


def run_config(tmp: Path, name: str, **extra: object) -> str:
    settings = {"results-dir": f"'{tmp}'", "run-name": f"'{name}'", **extra}
    return SETTINGS + " " + " ".join(f"{k}={v}" for k, v in settings.items())


def read_jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_node_with_an_unregistered_key_is_refused(federation):
    before = federation.online_nodes()
    stranger = Node("stranger", {"partition-id": 0, "num-partitions": 3, "dataset": "synthetic"})
    proc = federation.start_supernode(stranger)  # its own key pair, never registered
    assert proc.wait(timeout=300) != 0
    log = federation.log_path("stranger").read_text()
    assert "Failed to activate SuperNode" in log
    assert "No SuperNode found with the given public key" in federation.log_path("superlink").read_text()
    assert federation.online_nodes() == before


def test_node_without_tls_is_refused(federation):
    before = federation.online_nodes()
    plain = Node("plain", {"partition-id": 0, "num-partitions": 3, "dataset": "synthetic"})
    proc = federation.start_supernode(plain, tls=False, max_retries=2)
    assert proc.wait(timeout=300) != 0
    log = federation.log_path("plain").read_text()
    assert "Failed to initialize the connection to the SuperLink" in log
    assert federation.online_nodes() == before


def test_three_authenticated_nodes_complete_two_rounds_with_their_own_budgets(federation, tmp_path):
    result = federation.run(run_config(tmp_path, "deploy", **{"num-server-rounds": 2,
                                                               "round-timeout": 600}),
                            timeout=RUN_TIMEOUT)
    assert result.ok, result.output[-3000:]
    run_dir = tmp_path / "deploy"
    rounds = read_jsonl(run_dir / "rounds.jsonl")
    assert [r["round"] for r in rounds] == [1, 2]
    assert all(r["aggregated"] and r["failures"] == 0 for r in rounds), rounds
    budget_of = {federation.node_ids[name]: budget for name, budget in BUDGETS.items()}
    rows = read_jsonl(run_dir / "clients.jsonl")
    assert sorted((r["round"], r["node"]) for r in rows) == sorted(
        (rnd, node) for rnd in (1, 2) for node in budget_of)
    for row in rows:
        assert row["budget"] == budget_of[row["node"]]
        assert len(row["mask"]) == budget_of[row["node"]] == len(set(row["mask"]))
        assert row["evaluate"]["num-examples"] > 0
    for name in BUDGETS:  # each site keeps its own head in its state-dir, never on the server
        assert list((federation.workdir / "sites" / name / "state").rglob("personal-*.safetensors"))
    assert not (run_dir / "clients").exists()


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
