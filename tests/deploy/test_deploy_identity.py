"""Identity on Flower's Deployment Engine: a partner's registered key cannot speak for another
site, and a site that cannot answer stops the run by name.

A federation of its own (two sites and the partner's key), so that pytest-xdist runs it beside
tests/deploy/test_deploy.py instead of after it: in that module's federation it made the suite's
longest module longer still. tests/strategies/test_identity.py follows the same question over four
rounds, a drop and a resume without a deployment.
"""

from __future__ import annotations

import time

import pytest

from deploy.launch import Node
from tests.helpers.deployment import RUN_TIMEOUT, run_config, start_federation
from tests.helpers.runs import read_jsonl, trained_rounds


@pytest.fixture(scope="module")
def federation(tmp_path_factory):
    """Sites site-0 and site-1; "impostor"'s key is registered by the test. The Flower executables
    are checked by tests/deploy/test_deploy.py's federation."""
    yield from start_federation(tmp_path_factory.mktemp("identity"), ("impostor",), sites=2,
                                check_flower=False)


def test_a_registered_impostor_gets_no_site_and_a_site_that_cannot_answer_stops_the_run_by_name(
        federation, tmp_path):
    """A partner's registered key (recorded as site 'impostor') whose node claims site-1, as a
    hostile partner would. With personal models (aggregation 'local', kept under each site's id)
    it is refused every time it is asked and sent no arrays (the server's bytes sent), while
    site-1 trains (one round: the rounds after it ask the same question of the same nodes). Then a
    run that needs three sites: the impostor's identity replies all fail, and the run stops within
    its node-wait with one line naming the site missing."""
    federation.register("impostor")
    impostor = Node("impostor", {**federation.nodes[1].config, "state-dir": str(tmp_path / "impostor")})
    federation.start_supernode(impostor)
    try:
        federation.wait_online(["impostor"])
        result = federation.run(run_config(tmp_path, "identity", **{
            "num-server-rounds": 1, "round-timeout": 600, "aggregation": "'local'"}), timeout=RUN_TIMEOUT)
        assert result.ok, result.output[-3000:]
        node = federation.node_ids["impostor"]
        lines = read_jsonl(tmp_path / "identity" / "rounds.jsonl")
        reasons = {r["reason"] for line in lines for r in line["rejected"] if r["node"] == node}
        assert reasons == {"client error: this node's key is registered as site 'impostor', but its node "
                           "config says site = 'site-1': it answers for no other site"}, reasons
        rows = read_jsonl(tmp_path / "identity" / "clients.jsonl")
        assert not [r for r in rows if r["node"] == node]  # nothing was sent to it but the questions
        assert all(line["bytes-down"] == sum(r["bytes-down"] for r in rows if r["round"] == line["round"])
                   for line in lines)
        site1 = federation.node_ids["site-1"]
        assert [r["round"] for r in trained_rounds(tmp_path / "identity" / "clients.jsonl")
                if r["node"] == site1 and r["mask"]] == [1]
        start = time.monotonic()
        stopped = federation.run(run_config(tmp_path, "wait", **{
            "num-server-rounds": 1, "min-nodes": 3, "node-wait": 10}), timeout=RUN_TIMEOUT)
        assert time.monotonic() - start < 10 + 120 and not stopped.ok
        said = [line for line in stopped.output.splitlines() if "The run stops:" in line]
        assert len(said) == 1, stopped.output[-3000:]
        assert "min-nodes = 3 not met after node-wait = 10 s" in said[0]
        assert "registered sites missing: impostor" in said[0]
    finally:
        federation.stop("impostor")
