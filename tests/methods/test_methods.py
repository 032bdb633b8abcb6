"""The registries' rules: each run-config key has exactly one owner (the run-wide `RunConfig` or one
method's settings dataclass) whose defaults equal pyproject.toml's (where Flower reads them), each
key is checked by its owner, an entry states what it needs of the run, and nothing compares a
method's name. A planted method package is `tests/methods/test_newcomer.py`; every registered one
runs in `tests/methods/test_contract.py`."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

import methods
from settings import ConfigError, RunConfig, default_config

ROOT = Path(__file__).resolve().parents[2]
METHOD_KEY = re.compile(r"strategy|aggregation")


def test_every_key_has_exactly_one_owner_and_the_owners_defaults_are_pyprojects():
    owned = [owner.own_keys() for owner in RunConfig.owners()]
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
                                          r"weighted, knee, least-diversity$"):
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
