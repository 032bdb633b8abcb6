"""The newcomer's test: a method package planted in a temporary folder (its settings with one key, a
server step, a client hook and a selection rule) runs two rounds through the real ServerApp and
ClientApp once it is on `methods`' path, with no other file edited. CONTRIBUTING.md's "Adding a
method" is this package's recipe."""

from __future__ import annotations

import sys

import pytest
from flwr.app import Context, RecordDict

import methods
from client_app.app import app as client_app
from flower_compat.inprocess import InProcessGrid
from server_app.app import app as server_app
from settings import RunConfig
from tests.client_app.test_config_node import RUN
from tests.helpers.runs import trained_rounds

PACKAGE = {
    "__init__.py": '''
"""Echo: masked FedAvg whose clients report `echo-scale` * 10 + their partition id, and the rule
`odd` (every odd layer, whatever the budget)."""

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from methods.base import Aggregation, MethodSettings, Selection, register, setting

SEEN: dict[str, list] = {"server": [], "client": []}


@dataclass(frozen=True)
class EchoSettings(MethodSettings):
    scale: float = setting(1.0, "echo-scale", low=0.0)

    def server_keywords(self, config: Any) -> dict[str, object]:
        return {"scale": self.scale}


def odd_layers(scores: np.ndarray, budgets, seed: int) -> np.ndarray:
    masks = np.zeros(scores.shape, dtype=bool)
    masks[:, 1::2] = True
    return masks


register(Aggregation("echo", "methods.echo.server:echo", EchoSettings, client="methods.echo.client:start"),
         Selection("odd", pick=odd_layers, needs_budget=False))
''',
    "server.py": '''
from methods.echo import SEEN
from strategies.aggregation.masked import masked_fedavg


def echo(global_state, updates, *, scale: float):
    SEEN["server"].append((scale, sorted(u.metrics["echo"] for u in updates)))
    return masked_fedavg(global_state, updates)
''',
    "client.py": '''
from methods.hooks import ClientHook
from methods.echo import SEEN


class EchoHook(ClientHook):
    def __init__(self, value: float) -> None:
        self.value = value

    def finish(self, upload, personal, reply):
        reply["echo"] = self.value
        return upload, None


def start(step, settings) -> EchoHook:
    SEEN["client"].append((step.server_round, step.setup.partition_id, settings.scale))
    return EchoHook(settings.scale * 10 + step.setup.partition_id)
''',
}


@pytest.fixture
def planted(tmp_path, monkeypatch):
    """`methods.echo` written under a temporary folder on `methods`' path, registered by discovery;
    the registries and modules are restored afterwards."""
    folder = tmp_path / "more_methods" / "echo"
    folder.mkdir(parents=True)
    for name, text in PACKAGE.items():
        (folder / name).write_text(text.lstrip())
    saved = dict(methods.AGGREGATIONS), dict(methods.SELECTIONS)
    monkeypatch.setattr(methods, "__path__", [*methods.__path__, str(folder.parent)])
    methods.discover()
    yield sys.modules["methods.echo"]
    for table, before in zip((methods.AGGREGATIONS, methods.SELECTIONS), saved, strict=True):
        table.clear()
        table.update(before)
    for name in [m for m in sys.modules if m == "methods.echo" or m.startswith("methods.echo.")]:
        del sys.modules[name]


def test_a_planted_method_package_runs_two_rounds(planted, tmp_path):
    run = {**RUN, "aggregation": "echo", "strategy": "odd", "echo-scale": 0.5, "budgets": "1,1",
           "results-dir": str(tmp_path), "run-name": "run"}
    assert RunConfig.from_mapping(run).method_settings.scale == 0.5
    grid = InProcessGrid(client_app, [{"partition-id": i, "num-partitions": 2} for i in range(2)], run)
    server_app(grid, Context(run_id=1, node_id=0, node_config={}, state=RecordDict(), run_config=run))
    rounds = trained_rounds(tmp_path / "run" / "rounds.jsonl")
    assert [(r["aggregated"], r["failures"]) for r in rounds] == [(True, 0)] * 2
    assert sorted(planted.SEEN["client"]) == [(1, 0, 0.5), (1, 1, 0.5), (2, 0, 0.5), (2, 1, 0.5)]
    assert planted.SEEN["server"] == [(0.5, [5.0, 6.0])] * 2  # its setting, and both hooks' replies
    clients = trained_rounds(tmp_path / "run" / "clients.jsonl")
    # layers 1 and 3 of 4 for every client although its budget is 1: the rule needs no budget
    assert len(clients) == 4 and all(sorted(row["mask"]) == [1, 3] for row in clients)


def test_its_key_is_needed_only_where_it_is_used_and_the_one_command_writes_it(planted, tmp_path):
    """Before pyproject.toml holds `echo-scale`: a run of another method is unaffected (RUN has no
    such key), a run of `echo` without it names pyproject.toml and the command in one line; the
    command writes the key with its declared default into a copy of pyproject.toml and of
    docs/reference.md, after which the checked files equal what it writes."""
    import shutil

    from experiments import reference
    from settings import ConfigError
    from settings.config import WRITE

    assert "echo-scale" not in RUN
    assert RunConfig.from_mapping(RUN).method_settings.to_dict() == {}
    with pytest.raises(ConfigError) as err:
        RunConfig.from_mapping({**RUN, "aggregation": "echo"})
    assert str(err.value) == ("run-config key 'echo-scale' is missing: pyproject.toml's "
                              f"[tool.flwr.app.config] lacks it; write the table again with `{WRITE}`")
    (tmp_path / "docs").mkdir()
    for name in ("pyproject.toml", "docs/reference.md"):
        shutil.copyfile(reference.PROJECT_ROOT / name, tmp_path / name)
    written = [str(tmp_path / "pyproject.toml"), str(tmp_path / "docs/reference.md")]
    assert reference.stale(tmp_path) == written
    reference.write(tmp_path)
    assert reference.stale(tmp_path) == []
    assert "\necho-scale = 1.0" in (tmp_path / "pyproject.toml").read_text()
    assert "| `echo-scale` | `1.0` |" in (tmp_path / "docs/reference.md").read_text()
