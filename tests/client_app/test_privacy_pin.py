"""A site's privacy is the site's (`client_app.node.PrivacyPin`, `client_app.node.ledger_file`): tried as a
coordinator that wants more of a site's data than it agreed to would, asking for a larger ε, a
larger clip or another mode, and naming a fresh run folder so that the site's ledger starts empty.
Three in-process sites of the real apps (tiny model), the last one pinning its privacy."""

from __future__ import annotations

import pytest
from flwr.app import Context, MessageType, RecordDict

from client_app.app import app as client_app
from client_app.node import ledger_file, node_settings
from flower_compat.inprocess import InProcessGrid
from server_app.app import app as server_app
from settings import ConfigError, RunConfig
from tests.client_app.test_config_node import RUN
from tests.helpers.runs import read_jsonl

MODE_PINNED = "node config pins this site's privacy (dp = 'sample')"
DP = {"dp": "sample", "dp-epsilon": 3.0, "strategy": "last", "num-server-rounds": 1}


def pinned(tmp_path, **pins) -> dict:
    """A site pinning its privacy: its data and where its ledger lives, plus ``pins``."""
    return {"partition-id": 2, "num-partitions": 3, "dataset": "synthetic",
            "privacy-dir": str(tmp_path / "site" / "privacy"), **pins}


def run(tmp_path, name: str, site: dict, **settings) -> tuple[list[dict], list[dict]]:
    """One round of the real apps on a plain site and ``site``: its rounds and client rows."""
    config = {**RUN, "results-dir": str(tmp_path / "runs"), "run-name": name, **DP, **settings}
    grid = InProcessGrid(client_app, [{"partition-id": 0, "num-partitions": 3}, site], config)
    server_app(grid, Context(run_id=1, node_id=0, node_config={}, state=RecordDict(), run_config=config))
    return read_jsonl(tmp_path / "runs" / name / "rounds.jsonl"), read_jsonl(tmp_path / "runs" / name /
                                                                          "clients.jsonl")


@pytest.mark.parametrize(("asked", "why"), [
    ({"dp-epsilon": 8.0},
     "node config dp-epsilon = 3 pins this site's budget, but the run asks dp-epsilon = 8"),
    ({"dp": "none"}, f"{MODE_PINNED}, but the run asks dp = 'none'"),
    ({"dp": "client"}, f"{MODE_PINNED}, but the run asks dp = 'client'"),
    ({"dp-clip": 2.0}, "node config dp-clip = 1 is this site's most, but the run asks dp-clip = 2"),
    ({"validation-share": 0.1}, "node config pins this site's privacy, but the run asks validation-share = "
     "0.1: its held-out questions are training examples whose metrics no ε covers"),
])
@pytest.mark.parametrize("mode_pinned", [True, False], ids=["mode-pinned", "epsilon-only"])
def test_a_run_asking_less_privacy_than_the_site_pins_is_refused_in_one_line(tmp_path, asked, why,
                                                                             mode_pinned):
    """Also where the site pins only its ε and clip: a pinned ε means DP-SGD on the site."""
    mode = {"dp": "sample"} if mode_pinned else {}
    node = pinned(tmp_path, **{"dp-epsilon": 3.0, "dp-clip": 1.0}, **mode)
    with pytest.raises(ConfigError) as err:
        node_settings(node, RunConfig.from_mapping({**RUN, **DP, **asked}))
    assert str(err.value) == f"{why}: refused before training"
    assert node_settings(node, RunConfig.from_mapping({**RUN, **DP, "dp-epsilon": 2.0})).pin.epsilon == 3.0


def test_a_client_level_run_whose_cap_passes_the_pinned_epsilon_is_refused(tmp_path):
    node = pinned(tmp_path, **{"dp": "client", "dp-epsilon": 3.0})
    asked = {**RUN, **DP, "dp": "client", "dp-epsilon": 2.0}
    with pytest.raises(ConfigError, match="but the run's cap is dp-max-epsilon = 9: refused before training"):
        node_settings(node, RunConfig.from_mapping({**asked, "dp-max-epsilon": 9.0}))
    assert node_settings(node, RunConfig.from_mapping(asked)).pin.mode == "client"


def test_the_ledger_is_named_by_the_node_config_alone(tmp_path):
    """Whatever data set name the run resolves to, a pinning site keeps one ledger per data of its own."""
    node = pinned(tmp_path, **{"dp-epsilon": 3.0})
    files = {ledger_file(node, name, 2, 3, node_settings(node, RunConfig.from_mapping({**RUN, **DP})).pin)
             for name in ("synthetic", "synthetic-renamed", "other")}
    assert len(files) == 1
    moved = ledger_file({**node, "data-dir": str(tmp_path / "data")}, "synthetic", 2, 3,
                        node_settings(node, RunConfig.from_mapping({**RUN, **DP})).pin)
    assert moved not in files


def test_a_pin_needs_the_sites_own_ledger_folder_and_data(tmp_path):
    config = RunConfig.from_mapping({**RUN, **DP})
    with pytest.raises(ConfigError, match="its ledger must live on the site: set node config privacy-dir"):
        node_settings({"partition-id": 0, "dataset": "synthetic", "dp-epsilon": 3.0}, config)
    with pytest.raises(ConfigError, match="pin the data its ε counts against too"):
        node_settings({"partition-id": 0, "privacy-dir": str(tmp_path), "dp-epsilon": 3.0}, config)
    with pytest.raises(ConfigError, match=r"node config dp-epsilon = -1\.0 is out of range"):
        node_settings(pinned(tmp_path, **{"dp-epsilon": -1.0}), config)


def test_the_site_refuses_a_run_asking_for_more_epsilon_before_it_trains(tmp_path):
    """ε = 8 asked, 3 pinned: the site answers every message with one error line and trains nothing;
    the other sites run."""
    lines, rows = run(tmp_path, "greedy", pinned(tmp_path, **{"dp-epsilon": 3.0}), **{"dp-epsilon": 8.0})
    refusals = {r["reason"] for line in lines for r in line["rejected"] if r["node"] == 101}
    assert refusals == {"client error: node config dp-epsilon = 3 pins this site's budget, but the run asks "
                        "dp-epsilon = 8: refused before training"}
    assert not [r for r in rows if r["node"] == 101]
    assert not (tmp_path / "site" / "privacy").exists() or not list((tmp_path / "site" / "privacy").iterdir())


def test_the_sites_ledger_adds_up_across_runs_whatever_run_folder_the_server_names(tmp_path):
    """Two runs of ε = 3 each (one round), in different run folders, on a site pinning ε = 3: the first spends
    up to 3, the second finds the same ledger and sits every round out; the site never reports more
    than 3."""
    site = pinned(tmp_path, **{"dp-epsilon": 3.0})
    first, first_rows = run(tmp_path, "first", site)
    second, second_rows = run(tmp_path, "second", site)
    spent = [r["train"]["dp-epsilon"] for r in first_rows + second_rows
             if r["node"] == 101 and r["train"] and "dp-epsilon" in r["train"]]
    assert spent and max(spent) <= 3.0
    trained = [r["round"] for r in first_rows if r["node"] == 101 and r["train"]
               and not r["train"].get("dp-sat-out")]
    assert trained, first_rows
    sat = [r for r in second_rows if r["node"] == 101 and r["train"]]
    assert sat and all(r["train"].get("dp-sat-out") == 1 for r in sat)
    ledgers = list((tmp_path / "site" / "privacy").glob("dp-ledger-*.safetensors"))
    assert len(ledgers) == 1
    assert not list((tmp_path / "runs").rglob("partition-2/dp-ledger*"))  # none in the server's folders


def test_every_reply_passes_one_allow_list_also_an_evaluation_with_a_loss_in_it(tmp_path, monkeypatch):
    """A training loss planted in the evaluation's metrics never leaves the site under DP; the test
    loss and accuracy do (test questions are not training examples)."""
    import client_app.app

    real = client_app.app._evaluation
    monkeypatch.setattr(client_app.app, "_evaluation", lambda setup, r: {**real(setup, r), "train_loss": 1.5})
    seen = []

    def app(msg, context):
        reply = client_app.app.app(msg, context)
        if msg.metadata.message_type == MessageType.EVALUATE and "metrics" in reply.content:
            seen.append(dict(reply.content["metrics"]))
        return reply

    config = {**RUN, "results-dir": str(tmp_path), "run-name": "run", **DP}
    grid = InProcessGrid(app, [{"partition-id": i, "num-partitions": 3} for i in range(2)], config)
    server_app(grid, Context(run_id=1, node_id=0, node_config={}, state=RecordDict(), run_config=config))
    assert len(seen) == 4
    assert all("train_loss" not in m and {"accuracy", "loss", "num-examples"} <= set(m) for m in seen)
