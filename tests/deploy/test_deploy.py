"""Flower's Deployment Engine on 127.0.0.1: three authenticated SuperNodes with their own
budgets complete a run, refused nodes, and a node killed in the middle of a run (tests/helpers/deployment.py
starts the federation).

The runs set no run-config ``budgets``, so the budgets the sites declare (node config) are the only
source. The refused nodes each have one fault and are all tried at once against the same SuperLink,
while the budget run runs: a refused node mostly waits between its tries (Flower's back-off), and
tried alone before the run they cost the module 49 s of wall time (the last quiet CI run); nodes
that are never activated are not sampled, so the run sees only its three sites.
A FedMosaic run (two model sizes) uses the same sites. The killed-node run, on a generative model,
comes last and reuses the federation and its sites' warm workers: a federation of its own cost
another start (SuperLink, registrations, SuperNodes) and three cold workers, about 45 s of the
suite's CPU.

The SuperNodes send Flower's most frequent heartbeat (tests/helpers/fast_supernode.py: every ~4 s, declared
interval 10 s), so the SuperLink marks the killed node offline about 20 s after the kill instead of
the 60 s of Flower's fixed 30 s interval; what the test checks does not depend on how soon that is.
"""

from __future__ import annotations

import json
import signal
import threading
import time
from pathlib import Path

import pytest
from safetensors.numpy import load_file

from client_app.personal import LOCAL
from deploy.launch import Node
from deploy.make_certs import make_credentials
from tests.helpers.deployment import BUDGETS, RUN_TIMEOUT, run_config, start_federation
from tests.helpers.runs import read_jsonl, trained_rounds


@pytest.fixture(scope="module")
def federation(tmp_path_factory):
    # "stranger"'s key is never registered; "wrong-ca" is registered by `refused`
    yield from start_federation(tmp_path_factory.mktemp("federation"), ("stranger", "wrong-ca"))


@pytest.fixture(scope="module")
def refused_tries(federation):
    """Four SuperNodes, one fault each, started together (not waited for); the nodes online before."""
    before = federation.online_nodes()
    federation.register("wrong-ca")  # a valid, registered key: only its CA is wrong
    other_ca = make_credentials(federation.workdir / "other-ca", []).ca_cert
    config = {"partition-id": 0, "num-partitions": 3, "dataset": "synthetic"}
    tries = {"plain": {"tls": False}, "no-key": {"key": ""}, "stranger": {},
             "wrong-ca": {"root_certificates": other_ca}}
    procs = {name: federation.start_supernode(Node(name, config), max_retries=2, **kwargs)
             for name, kwargs in tries.items()}
    return procs, before


@pytest.fixture(scope="module")
def budget_run(request, federation, tmp_path_factory):
    """The two-round FedPIA run on the three sites, while the refused nodes are tried (when their
    tests are selected: the Flower lower-bound job of .ci/run selects this run alone)."""
    if any("refused" in item.fixturenames for item in request.session.items):
        request.getfixturevalue("refused_tries")
    tmp_path = tmp_path_factory.mktemp("budget-run")
    result = federation.run(run_config(tmp_path, "deploy", **{"num-server-rounds": 2,
                                                               "round-timeout": 600,
                                                               "aggregation": "'fedpia'"}),
                            timeout=RUN_TIMEOUT)
    return result, tmp_path / "deploy"


@pytest.fixture(scope="module")
def refused(federation, refused_tries, budget_run):
    """The refused nodes' exit codes and logs; the nodes online before and after them."""
    procs, before = refused_tries
    codes = {name: proc.wait(timeout=300) for name, proc in procs.items()}
    logs = {name: federation.log_path(name).read_text() for name in [*procs, "superlink"]}
    return codes, logs, before, federation.online_nodes()


def refusal(logs: dict[str, str], name: str) -> str:
    """The reason the node gave up: the lines after Flower's catch-all connect error."""
    assert "Failed to initialize the connection to the SuperLink" in logs[name], logs[name][-2000:]
    return logs[name].split("Failed to initialize the connection to the SuperLink", 1)[1][:400]


def test_refused_nodes_exit_and_none_comes_online(federation, refused):
    codes, _, before, after = refused
    assert all(code != 0 for code in codes.values()), codes
    assert after == before and federation.node_ids["wrong-ca"] not in after


def test_node_with_an_unregistered_key_is_refused_by_authentication(refused):
    _, logs, _, _ = refused
    assert "[code: 2004] Failed to activate SuperNode" in refusal(logs, "stranger")
    assert "No SuperNode found with the given public key" in logs["superlink"]


def test_node_over_tls_without_a_key_is_refused_by_authentication(refused):
    _, logs, _, _ = refused
    reason = refusal(logs, "no-key")
    assert "SuperNode authentication is enabled. All SuperNodes must be registered" in reason
    assert "CERTIFICATE_VERIFY_FAILED" not in reason  # TLS itself worked
    assert "[/v1/fleet/register-node][ApiError:2001]" in logs["superlink"]


def test_node_without_tls_is_refused_before_reaching_the_superlinks_api(refused):
    """Without TLS a SuperNode can hold no key (Flower exits: authentication needs TLS), so this
    node's only fault is plain HTTP against the SuperLink's HTTPS port: no API answer at all, the
    TLS server closes the connection (with or without a reset, depending on timing)."""
    _, logs, _, _ = refused
    reason = refusal(logs, "plain")
    assert ("Server disconnected without sending a response" in reason
            or "Connection reset by peer" in reason), reason
    assert "[code:" not in reason and "Option `--insecure` was set" in logs["plain"]


def test_node_with_a_registered_key_refuses_a_superlink_certified_by_another_ca(refused):
    _, logs, _, _ = refused
    reason = refusal(logs, "wrong-ca")
    assert "CERTIFICATE_VERIFY_FAILED" in reason and "[code:" not in reason


def test_three_authenticated_nodes_complete_two_rounds_with_their_own_budgets(federation, budget_run):
    """F3OCUS selection with FedPIA aggregation: the budgets come from the sites, and
    each site keeps its own adapters for client-level PIA in its state-dir."""
    result, run_dir = budget_run
    assert result.ok, result.output[-3000:]
    assert json.loads((run_dir / "config.json").read_text())["budgets"] == ""  # node config only
    rounds = trained_rounds(run_dir / "rounds.jsonl")
    assert [r["round"] for r in rounds] == [1, 2]
    assert all(r["aggregated"] and r["failures"] == 0 for r in rounds), rounds
    assert [r["exchanges"] for r in read_jsonl(run_dir / "rounds.jsonl")] == [2, 2, 2]  # 0: + who is who
    budget_of = {federation.node_ids[name]: budget for name, budget in BUDGETS.items()}
    rows = trained_rounds(run_dir / "clients.jsonl")
    assert sorted((r["round"], r["node"]) for r in rows) == sorted(
        (rnd, node) for rnd in (1, 2) for node in budget_of)
    for row in rows:
        assert row["budget"] == budget_of[row["node"]]
        assert len(row["mask"]) == budget_of[row["node"]] == len(set(row["mask"]))
        assert row["evaluate"]["num-examples"] > 0
    for name in BUDGETS:  # each site keeps its own head and adapters in its state-dir, not the server
        stored = sorted((federation.workdir / "sites" / name / "state").rglob("personal-*.safetensors"))
        assert stored, name
        assert any(key.startswith(LOCAL) for key in load_file(stored[-1])), name
    assert not (run_dir / "clients").exists()
    # a site's first ClientApp process starts its fork server; later ones are forked from it
    for node in federation.nodes:
        rows = [r for r in read_jsonl(Path(str(node.config["state-dir"])) / "timings.jsonl")
                if r["run-id"] == result.run_id]
        assert rows and rows[-1]["process"] == "forked", rows
        # one warm worker served both: its key is the SuperExec's pid, which a forked child's
        # parent (the fork server) is not
        assert len(list((Path(str(node.config["state-dir"])) / "worker").glob("*.lock"))) == 1


def test_two_model_sizes_run_sima_with_pq_lora_and_share_only_p_and_q(federation, tmp_path):
    """FedMosaic on the same sites: SIMA with PQ-LoRA, sites of two model sizes (the run's
    ``model-sizes`` cycled by partition id: base, large, base), one round. Its evaluate messages
    already carry the P and Q aggregated over both sizes; a site's own ``model-size`` node config
    is read by the same code (tests/methods/test_sima.py), and node config reaching the app on a
    SuperNode is the budget run's subject: a federation of its own for it cost another start and
    two cold workers, about 55 s of the suite's CPU."""
    result = federation.run(run_config(tmp_path, "mosaic", **{
        "num-server-rounds": 1, "round-timeout": 600, "strategy": "'all'", "aggregation": "'sima'",
        "adapter": "'pq-lora'", "model-sizes": "'base,large'"}), timeout=RUN_TIMEOUT)
    assert result.ok, result.output[-3000:]
    run_dir = tmp_path / "mosaic"
    rounds = trained_rounds(run_dir / "rounds.jsonl")
    assert [r["round"] for r in rounds] == [1]
    assert all(r["aggregated"] and r["failures"] == 0 for r in rounds), rounds
    shared = load_file(run_dir / "adapters.safetensors")
    assert shared and all(key.rsplit(".", 1)[-1] in ("P", "Q") for key in shared), sorted(shared)[:5]
    size_of = {federation.node_ids[n.name]: int(n.config["partition-id"]) % 2 for n in federation.nodes}
    rows = trained_rounds(run_dir / "clients.jsonl")
    assert sorted(r["node"] for r in rows) == sorted(size_of)
    for row in rows:  # Self accuracy per client, with the size it ran (0 base, 1 large)
        assert_a_rate_over_its_examples(row["evaluate"])
        assert row["evaluate"]["model-size"] == size_of[row["node"]]


def assert_a_rate_over_its_examples(evaluated: dict) -> None:
    """The accuracy is a count of right answers over the site's test examples (none missing)."""
    hits = evaluated["accuracy"] * evaluated["num-examples"]
    assert evaluated["num-examples"] > 0
    assert hits == pytest.approx(round(hits), abs=1e-6) and 0 <= round(hits) <= evaluated["num-examples"]


def assert_generated_answer_accuracy(evaluated: dict) -> None:
    """Generated-answer accuracy is an exact-match rate over the site's test examples, and the
    per-question-type rates (each over a part of those examples) bracket it."""
    assert_a_rate_over_its_examples(evaluated)
    per_type = [value for key, value in evaluated.items() if key.startswith("accuracy-")]
    assert per_type and min(per_type) - 1e-9 <= evaluated["accuracy"] <= max(per_type) + 1e-9


def test_killed_node_is_recorded_the_run_completes_and_the_restarted_node_rejoins(federation, tmp_path):
    """A generative model (tiny-llava) on the sites, whose answers are generated and
    scored, while one site is killed mid-round and restarted. One site (a seeded third) evaluates
    a round: the subject is the generative model on a site, not every site evaluating (the
    budget run's); a generative run of its own cost another ServerApp and 25-30 s of wall time."""
    victim = federation.nodes[2]
    victim_id = federation.node_ids[victim.name]
    log = federation.log_path(victim.name)
    seen = log.read_text().count("Receiving:")
    outcome = {}
    runner = threading.Thread(target=lambda: outcome.setdefault("result", federation.run(
        run_config(tmp_path, "fault", **{"num-server-rounds": 2, "round-timeout": 600,
                                         "fraction-evaluate": 0.34}).replace("model='tiny-vilt'",
                                                                            "model='tiny-llava'"),
        timeout=RUN_TIMEOUT)))
    runner.start()
    try:
        deadline = time.monotonic() + RUN_TIMEOUT
        while log.read_text().count("Receiving:") == seen:  # its first message of this run
            assert time.monotonic() < deadline and runner.is_alive(), "the victim got no message"
            time.sleep(0.5)
        federation.stop(victim.name, signal.SIGKILL)  # dies mid-round, with its App processes
        # Once the SuperLink has marked the node offline (missed heartbeats), it turns the lost
        # message into a "Node Unavailable" reply when the ServerApp next pulls: restart the node
        # only after the server has seen that reply, or the message waits for the round timeout.
        # The run log is read rather than `flwr supernode list` polled: each CLI call is a process
        # that imports Flower (2.3 s of CPU).
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
    rounds = trained_rounds(tmp_path / "fault" / "rounds.jsonl")
    assert [r["round"] for r in rounds] == [1, 2]
    assert all(r["aggregated"] for r in rounds)
    # its first message of the run may be the question who it is (round 0) or a round-1 message
    early = read_jsonl(tmp_path / "fault" / "rounds.jsonl")[:2]
    failures = [f for r in early for f in r["rejected"] if f["node"] == victim_id]
    assert failures, [r["rejected"] for r in early]
    assert any("Node Unavailable" in f["reason"] or "no reply" in f["reason"] for f in failures)
    rows = read_jsonl(tmp_path / "fault" / "clients.jsonl")
    first = {r["node"]: r for r in rows if r["round"] == 1}
    assert first.get(victim_id, {}).get("mask") is None  # no layers for a node that cannot train
    assert len(first) >= 2 and all(len(r["mask"]) == r["budget"] for n, r in first.items() if n != victim_id)
    again = [r for r in rows if r["round"] == 2 and r["node"] == victim_id]
    assert again and len(again[0]["mask"]) == BUDGETS[victim.name], rows  # it rejoined
    assert json.loads((tmp_path / "fault" / "config.json").read_text())["model"] == "tiny-llava"
    evaluated = [r["evaluate"] for r in rows if r["round"] == 2 and r["evaluate"]]
    assert len(evaluated) == 1, rows
    assert_generated_answer_accuracy(evaluated[0])
