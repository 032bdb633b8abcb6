"""Which site a node speaks for (`strategies.round.identity`), tried as a hostile partner would: an
impostor after the real site dropped, with and without a site registry; a dropped identity query;
sites that never come; the order the optimiser sees the sites in. Scripted clients on an in-process
grid whose nodes can go offline and come back (no Ray, no torch)."""

from __future__ import annotations

import json
import time

import pytest
from flwr.app import ConfigRecord, Context, Error, Message, MessageType, RecordDict

import strategies.round.identity
from flower_compat import client_app_error_code
from flower_compat.inprocess import InProcessGrid
from methods import make_rule
from methods.local.server import local_only
from strategies import LayerSelectionStrategy, NodesMissing
from strategies.records import IDENTITY, REGISTERED_SITE, to_record
from tests.strategies.test_strategy import L, initial_state, scripted_app


class SiteGrid(InProcessGrid):
    """Nodes that may be offline (not listed, messages answered "Node Unavailable") and that answer
    identity queries as `identity` says; a node whose ``drop-queries`` count is above 0 fails that
    many queries first; a ``silent`` one never answers them."""

    def __init__(self, app, node_configs, offline_in: dict[int, set[int]] | None = None) -> None:
        super().__init__(app, node_configs, run_config={})
        self.offline_in = offline_in or {}  # round -> nodes offline while it runs
        self.server_round = 0

    @property
    def offline(self) -> set[int]:
        return self.offline_in.get(self.server_round, set())

    def get_node_ids(self):
        return [n for n in self.contexts if n not in self.offline]

    def answer(self, msg: Message) -> list[Message]:
        node = msg.metadata.dst_node_id
        if node in self.offline:
            return [Message(Error(code=client_app_error_code(), reason="Node Unavailable"), reply_to=msg)]
        if msg.metadata.message_type != MessageType.QUERY:
            return super().answer(msg)
        config = self.contexts[node].node_config
        if config.get("silent"):
            return []
        if config.get("drop-queries", 0) > 0:
            config["drop-queries"] -= 1
            return [Message(Error(code=client_app_error_code(), reason="query lost"), reply_to=msg)]
        return [identity(msg, config)]


def identity(msg: Message, config: dict) -> Message:
    """A client's answer: its node config ``site`` (else its partition's id). An honest one refuses
    to answer for another site than the one its key is registered as; a lying one (``lies``) claims
    its ``site`` whatever it is told."""
    site = config.get("site") or f"partition-{config['partition-id']}"
    registered = msg.content["config"].get(REGISTERED_SITE)
    if registered is not None and registered != site and not config.get("lies"):
        return Message(Error(code=client_app_error_code(),
                             reason=f"registered as {registered!r}, configured as {site!r}"), reply_to=msg)
    return Message(RecordDict({IDENTITY: ConfigRecord({"client": site})}), reply_to=msg)


def site_app():
    """The scripted clients of test_strategy (their queries are answered by `SiteGrid`)."""
    return scripted_app()[0]


def run(grid: SiteGrid, rounds: int, registry: dict[str, int] | None = None, **kwargs):
    """``rounds`` rounds of ``lntk`` with local-only aggregation (a personal model per client, kept
    under its client id); the strategy and the logs of every round."""
    logs = []

    def end_round(log, state, personal) -> None:
        logs.append(log)
        grid.server_round = log.server_round + 1

    nodes = None if registry is None else {node: site for site, node in registry.items()}
    strategy = LayerSelectionStrategy(make_rule("lntk"), L, train_config={"local-steps": 1}, seed=0,
                                      aggregator=local_only, on_round_end=end_round,
                                      registry=None if nodes is None else lambda: nodes, **kwargs)
    strategy.start(grid, to_record(initial_state()), num_rounds=rounds)
    return strategy, logs


def with_arrays(grid: SiteGrid, node: int) -> list[Message]:
    return [m for m in grid.sent if m.metadata.dst_node_id == node and "arrays" in m.content]


def trained(logs, node: int) -> list[int]:
    """The rounds whose update from ``node`` was accepted."""
    return [log.server_round for log in logs if node in log.train_metrics]


SITES = [{"partition-id": p, "site": f"site-{p}"} for p in range(3)]
REGISTRY = {"site-0": 100, "site-1": 101, "site-2": 102, "intruder": 103}


def test_with_a_registry_an_impostor_after_a_drop_never_gets_the_site_or_its_personal_model():
    """Node 103's key is registered as 'intruder'; it claims site-2 (and lies when told). Site-2
    (node 102) drops during round 2, so round 3 is drawn without it, and is back for round 4. The
    impostor is refused every time it is asked, is sent no arrays at all, and site-2 trains every
    round it is there for (1 and 4)."""
    impostor = {"partition-id": 2, "site": "site-2", "lies": True}
    grid = SiteGrid(site_app(), [*SITES, impostor], offline_in={2: {102}})
    strategy, logs = run(grid, 4, REGISTRY)
    assert 103 not in strategy.clients and not with_arrays(grid, 103)
    kinds = {m.metadata.message_type for m in grid.sent if m.metadata.dst_node_id == 103}
    assert kinds == {MessageType.QUERY}
    reasons = [r["reason"] for log in logs for r in log.rejected if r["node"] == 103]
    assert reasons and all("registered as site 'intruder'" in reason for reason in reasons)
    assert trained(logs, 102) == [1, 4] and trained(logs, 100) == [1, 2, 3, 4]
    assert set(strategy.personal) == {"site-0", "site-1", "site-2"}


def test_an_honest_node_told_it_is_another_site_refuses_and_is_refused():
    grid = SiteGrid(site_app(), [*SITES, {"partition-id": 2, "site": "site-2"}])
    strategy, logs = run(grid, 1, REGISTRY)
    refusals = [r["reason"] for r in logs[0].rejected if r["node"] == 103]
    assert len(refusals) == 1 and refusals[0].endswith("registered as 'intruder', configured as 'site-2'")
    assert 103 not in strategy.clients and not with_arrays(grid, 103)


def test_without_a_registry_a_node_taking_a_dropped_sites_id_is_logged_when_the_site_returns():
    """No keys, so a node's word is its id: the impostor, connecting while site-2 is away (round 2's
    close), takes site-2's id; when site-2 returns its claim is refused with a logged reason, not
    dropped."""
    impostor = {"partition-id": 2, "site": "site-2"}
    grid = SiteGrid(site_app(), [*SITES, impostor], offline_in={0: {103}, 1: {103}, 2: {102}})
    strategy, logs = run(grid, 4)
    assert strategy.clients.get(103) == "site-2" and 102 not in strategy.clients
    reasons = {r["reason"] for log in logs[3:] for r in log.rejected if r["node"] == 102}
    assert reasons == {"client id 'site-2' is already node 103's: give every site its own node config site "
                       "(or partition-id)"}


def test_a_dropped_identity_query_is_asked_again_and_the_run_finishes(monkeypatch):
    monkeypatch.setattr(strategies.round.identity, "REASK_S", 0.05)
    grid = SiteGrid(site_app(), [SITES[0], SITES[1], {**SITES[2], "drop-queries": 2}])
    strategy, logs = run(grid, 2, min_nodes=3, node_wait=30)
    assert strategy.clients == {100: "site-0", 101: "site-1", 102: "site-2"}
    assert [r["reason"] for r in logs[0].rejected if r["node"] == 102] == ["client error: query lost"] * 2
    assert trained(logs, 102) == [1, 2]


def test_sites_missing_after_node_wait_stop_the_run_with_one_line_naming_them(monkeypatch):
    monkeypatch.setattr(strategies.round.identity, "REASK_S", 0.05)
    grid = SiteGrid(site_app(), [SITES[0], SITES[1], {**SITES[2], "drop-queries": 1000}])
    with pytest.raises(NodesMissing) as err:
        run(grid, 1, {**REGISTRY, "site-3": 104}, min_nodes=4, node_wait=0.3)
    line = str(err.value)
    assert "\n" not in line and line.startswith("min-nodes = 4 not met after node-wait = 0.3 s")
    assert "registered sites missing: intruder, site-2, site-3" in line
    assert line.endswith("connected nodes not identified: 102 (client error: query lost)")


def test_a_site_that_never_answers_stops_the_run_at_node_wait_not_the_round_timeout():
    """The identity query waits no longer than what is left of ``node-wait``, not the (long) round
    timeout."""
    grid = SiteGrid(site_app(), [SITES[0], SITES[1], {**SITES[2], "silent": True}])
    start = time.monotonic()
    with pytest.raises(NodesMissing, match="connected nodes not identified: 102"):
        grid.server_round = 1
        strategy = LayerSelectionStrategy(make_rule("lntk"), L, train_config={"local-steps": 1}, seed=0,
                                          aggregator=local_only, min_nodes=3, node_wait=1.0)
        strategy.start(grid, to_record(initial_state()), num_rounds=1, timeout=120.0)
    assert time.monotonic() - start < 60.0


def test_the_optimiser_sees_the_sites_in_client_id_order_whatever_their_node_ids():
    """Sites named so that node order, name order and natural order all differ."""
    names = ["site-10", "site-2", "site-1"]
    grid = SiteGrid(site_app(), [{"partition-id": p, "site": n} for p, n in enumerate(names)])
    strategy, logs = run(grid, 1)
    order = [strategy.clients[node] for node in logs[1].reports]
    assert order == ["site-1", "site-2", "site-10"]


def test_the_clients_identify_handler_refuses_another_registered_site(tmp_path):
    """The project's ClientApp: told its key is registered as another site, one line naming both."""
    from client_app.app import identify
    from settings import ConfigError, default_config

    InProcessGrid(site_app(), [], run_config={})  # what a ServerApp's runtime sets before messages exist
    context = Context(run_id=1, node_id=7, node_config={"site": "site-2", "partition-id": 0},
                      state=RecordDict(), run_config={**default_config(), "dataset": "synthetic"})
    ask = Message(RecordDict({"config": ConfigRecord({"server-round": 0, REGISTERED_SITE: "site-1"})}),
                  dst_node_id=7, message_type=MessageType.QUERY)
    with pytest.raises(ConfigError, match="registered as site 'site-1', but its node config says site = "
                                          "'site-2'"):
        identify(ask, context)
    ask = Message(RecordDict({"config": ConfigRecord({"server-round": 0, REGISTERED_SITE: "site-2"})}),
                  dst_node_id=7, message_type=MessageType.QUERY)
    assert identify(ask, context).content[IDENTITY]["client"] == "site-2"


def test_the_registry_file_is_read_and_a_bad_one_is_one_line(tmp_path):
    from settings.sites import read_registry, register_site

    path = tmp_path / "sites.json"
    register_site(path, "site-0", 100)
    register_site(path, "site-1", 101)
    assert read_registry(path) == {100: "site-0", 101: "site-1"}
    with pytest.raises(ValueError, match="node id 100 is already registered as site 'site-0', not 'site-2'"):
        register_site(path, "site-2", 100)
    register_site(path, "site-1", 102)  # site-1's key registered again
    assert read_registry(path) == {100: "site-0", 102: "site-1"}
    path.write_text(json.dumps({"site-0": 100, "site-1": 100}))
    with pytest.raises(ValueError, match="node id 100 is registered as both 'site-0' and 'site-1'"):
        read_registry(path)
    path.write_text("[1, 2]")
    with pytest.raises(ValueError, match="must hold a JSON object"):
        read_registry(path)
    with pytest.raises(ValueError, match="^site-registry = 'sites.json' must be an absolute path"):
        read_registry("sites.json")

