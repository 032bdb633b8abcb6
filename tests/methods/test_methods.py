"""A method is one registry entry (issue 36 §1, §4): `methods.AGGREGATIONS` and `methods.SELECTIONS`.

Each run-config key has exactly one owner (the run-wide `RunConfig` or one method's settings
dataclass) whose defaults equal pyproject.toml's; nothing outside a registry entry compares a
method's name; and a planted new entry (a dummy aggregation with a client hook, a dummy selection
rule, each with its own setting) runs two rounds through the real ServerApp and ClientApp once it is
registered, with no other change (tiny-vilt, synthetic data, in process)."""

from __future__ import annotations

import ast
import json
import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
from flwr.app import Context, RecordDict

import methods
from client_app.app import app as client_app
from client_app.hooks import ClientHook
from flower_compat.inprocess import InProcessGrid
from methods.base import Aggregation, MethodSettings, Selection, setting
from methods.masked_fedavg.server import masked_fedavg
from server_app.app import app as server_app
from settings import ConfigError, RunConfig, default_config
from strategies.aggregation import Aggregate
from tests.client_app.test_config_node import RUN
from tests.helpers.runs import trained_rounds

ROOT = Path(__file__).resolve().parents[2]
METHOD_KEY = re.compile(r"strategy|aggregation")


def test_every_key_has_exactly_one_owner_and_the_owners_defaults_are_pyprojects():
    owned = [RunConfig.run_keys(), *(owner.own_keys() for owner in RunConfig.owners())]
    keys = [key for group in owned for key in group]
    assert len(keys) == len(set(keys)), "a key with two owners"
    defaults = default_config()
    assert set(keys) == set(defaults)
    for owner in RunConfig.owners():
        assert owner().to_dict() == {key: defaults[key] for key in owner.own_keys()}, owner.__name__
    assert RunConfig.from_mapping(defaults).to_dict() == defaults


def test_a_method_key_is_checked_by_its_owner_in_one_line_whichever_method_runs():
    with pytest.raises(ConfigError, match=r"^sima-tau = 0.0 is out of range$"):
        RunConfig.from_mapping({**default_config(), "aggregation": "fedpia", "sima-tau": 0.0})
    with pytest.raises(ConfigError, match=r"^optimizer-pick = 'best' is unknown; choose one of "
                                          r"weighted, knee$"):
        RunConfig.from_mapping({**default_config(), "strategy": "lntk", "optimizer-pick": "best"})
    with pytest.raises(ConfigError, match=r"^unknown run-config key 'fedpia-gama' \(= 2\)$"):
        RunConfig.from_mapping({**default_config(), "fedpia-gama": 2})


def test_an_entry_states_what_it_needs_of_the_run():
    with pytest.raises(ConfigError, match=r"^aggregation = 'group-oracle' needs client-groups"):
        RunConfig.from_mapping({**default_config(), "aggregation": "group-oracle"})
    config = RunConfig.from_mapping({**default_config(), "aggregation": "sima"})
    assert config.method.needs_gated_model
    assert not RunConfig.from_mapping(default_config()).method.needs_gated_model
    assert (config.method_settings.tau, config.selection_settings.pop_size) == (0.5, 50)


GENERIC = {"none", "all", "last", "random", "local"}  # registered names that are also ordinary values


def name_comparisons(source: str) -> list[str]:
    """Comparisons (==, !=, in, ...) with a registered method name: any comparison with a distinctive
    name (``scorer == "lntk"``), and one of a strategy or aggregation value with a generic name."""
    names = set(methods.AGGREGATIONS) | set(methods.SELECTIONS)
    found = []
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.Compare):
            continue
        operands = [node.left, *node.comparators]
        constants = {c.value for o in operands for c in ast.walk(o) if isinstance(c, ast.Constant)}
        named = [o for o in operands if any(isinstance(c, ast.Constant) and c.value in names
                                            for c in ast.walk(o))]
        keyed = named and any(METHOD_KEY.search(ast.unparse(o)) for o in operands if o not in named)
        if constants & (names - GENERIC) or keyed:
            found.append(ast.unparse(node))
    return found


def test_the_scan_sees_a_method_name_compared():
    planted = ('if config.aggregation == "sima": pass\nx = setup.config.strategy in ("all", "none")\n'
               'y = values["aggregation"] != "fedpia"\nz = config["score"] == "none"\n'
               'if scorer == "lntk": pass\nruns = [r for r in runs if r.group == "lntk"]\n')
    assert name_comparisons(planted) == ["config.aggregation == 'sima'",
                                         "setup.config.strategy in ('all', 'none')",
                                         "values['aggregation'] != 'fedpia'", "scorer == 'lntk'",
                                         "r.group == 'lntk'"]


def test_no_method_name_is_compared_in_product_code():
    """Nothing compares a method's name, not even its own package: the apps use the entries."""
    skip = {"tests", "docs", "results"}
    offending = {}
    for path in sorted(ROOT.rglob("*.py")):
        rel = path.relative_to(ROOT)
        if rel.parts[0] in skip or rel.parts[0].startswith("."):
            continue
        if hits := name_comparisons(path.read_text()):
            offending[rel.as_posix()] = hits
    assert not offending


# ---------------------------------------------------------------- planted entries (in process)
SEEN: dict[str, list] = {"server": [], "client": [], "batches": [], "rule": []}


@dataclass(frozen=True)
class EchoSettings(MethodSettings):
    """A planted aggregation's own setting."""

    scale: float = setting(1.0, "echo-scale", low=0.0)

    def server_keywords(self, config: object) -> dict[str, object]:
        return {"scale": self.scale}


def echo_step(global_state, updates, *, scale: float) -> Aggregate:
    """Masked FedAvg that records its bound setting and what each client hook added to its reply."""
    SEEN["server"].append((scale, sorted(u.metrics["echo"] for u in updates)))
    return masked_fedavg(global_state, updates)


class EchoHook(ClientHook):
    def __init__(self, scale: float, partition_id: int) -> None:
        self.scale, self.partition_id, self.batches = scale, partition_id, 0
        self.on_batch = self.count

    def count(self, step: int, samples: list) -> None:
        self.batches += 1

    def finish(self, upload, personal, reply):
        SEEN["batches"].append(self.batches)
        reply["echo"] = self.scale * 10 + self.partition_id
        return upload, None


def echo_client(step, settings: EchoSettings) -> EchoHook:
    SEEN["client"].append((step.server_round, step.setup.partition_id, settings.scale))
    return EchoHook(settings.scale, step.setup.partition_id)


@dataclass(frozen=True)
class StrideSettings(MethodSettings):
    """A planted selection rule's own setting: the first layer of every second one."""

    offset: int = setting(0, "stride-offset", low=0)

    def server_keywords(self, config: object) -> dict[str, object]:
        return {"offset": self.offset}


def stride_pick(scores: np.ndarray, budgets, seed: int) -> np.ndarray:
    masks = np.zeros(scores.shape, dtype=bool)
    masks[:, 1::2] = True
    return masks


def run_two_rounds(tmp_path: Path, **settings: object) -> list[dict]:
    for seen in SEEN.values():
        seen.clear()
    run = {**RUN, "budgets": "1,1", "results-dir": str(tmp_path), "run-name": "run", **settings}
    grid = InProcessGrid(client_app, [{"partition-id": i, "num-partitions": 2} for i in range(2)], run)
    server_app(grid, Context(run_id=1, node_id=0, node_config={}, state=RecordDict(), run_config=run))
    return trained_rounds(tmp_path / "run" / "rounds.jsonl")


def test_a_planted_aggregation_with_a_client_hook_runs_two_rounds(tmp_path, monkeypatch):
    entry = Aggregation("echo", lambda: echo_step, EchoSettings, client=lambda: echo_client)
    monkeypatch.setitem(methods.AGGREGATIONS, "echo", entry)
    rounds = run_two_rounds(tmp_path, **{"aggregation": "echo", "echo-scale": 0.5, "strategy": "last"})
    assert [(r["aggregated"], r["failures"]) for r in rounds] == [(True, 0)] * 2
    assert sorted(SEEN["client"]) == [(1, 0, 0.5), (1, 1, 0.5), (2, 0, 0.5), (2, 1, 0.5)]
    assert SEEN["batches"] == [1] * 4  # local-steps = 1: the hook saw the one batch of each train step
    assert SEEN["server"] == [(0.5, [5.0, 6.0])] * 2  # its own setting, and both hooks' reply entries
    assert json.loads((tmp_path / "run" / "config.json").read_text())["echo-scale"] == 0.5


def test_a_planted_selection_rule_runs_two_rounds(tmp_path, monkeypatch):
    entry = Selection("stride", pick=stride_pick, settings=StrideSettings, needs_budget=False)
    monkeypatch.setitem(methods.SELECTIONS, "stride", entry)
    rounds = run_two_rounds(tmp_path, **{"strategy": "stride", "stride-offset": 1})
    assert [(r["aggregated"], r["failures"]) for r in rounds] == [(True, 0)] * 2
    clients = trained_rounds(tmp_path / "run" / "clients.jsonl")
    # layers 1 and 3 of 4 for every client although its budget is 1: the entry needs no budget
    assert len(clients) == 4 and all(sorted(row["mask"]) == [1, 3] for row in clients)
