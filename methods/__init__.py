"""The methods: one package per aggregation (``aggregation``) and per family of selection rules
(``strategy``), each holding its settings, its server step, its client hook and its own maths, and
registering its entries (`methods.base.Aggregation`, `methods.base.Selection`) when imported.

Importing this package imports every method package's ``__init__`` (settings and entries only, no
torch), so `settings` can parse and check each method's keys in every process; a method's heavy
parts load when a run uses it. Nothing outside a method's package compares its name: the apps use
the entry, its parsed settings and its hook (CONTRIBUTING.md, "Adding a method").
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Mapping
from typing import Any

from methods.base import AGGREGATIONS, SELECTIONS, Aggregation, MethodSettings, Selection, lookup, register


def discover() -> None:
    """Import every method package on this package's path (each registers its entries)."""
    for found in pkgutil.iter_modules(__path__):
        if found.ispkg:
            importlib.import_module(f"{__name__}.{found.name}")


def aggregation(name: str) -> Aggregation:
    """The entry of ``aggregation = name`` (ValueError naming it if unknown)."""
    return lookup(AGGREGATIONS, "aggregation", name)


def selection(name: str) -> Selection:
    """The entry of ``strategy = name`` (ValueError naming it if unknown)."""
    return lookup(SELECTIONS, "strategy", name)


def make_rule(strategy: str, optimizer: str = "nsga2",
              optimizer_params: Mapping[str, object] | None = None) -> Any:
    """The rule of a strategy name bound to the optimiser and its settings
    (`strategies.selection.SelectionRule`);
    ValueError naming it if unknown."""
    from strategies.selection import SelectionRule  # the server's: it loads the optimisers

    params = tuple(sorted((optimizer_params or {}).items()))
    return SelectionRule(selection(strategy), optimizer, params)


def optimises(strategy: str) -> bool:
    """Does ``strategy`` run the ``optimizer`` search (`Selection.optimises`)? False for a name no
    entry has (e.g. a finished run's strategy that has since been removed)."""
    entry = SELECTIONS.get(strategy)
    return bool(entry and entry.optimises)


def label(strategy: str, optimizer: str) -> str:
    """A run's strategy as tables and run names show it: ``f3ocus-nsga2`` for a rule that runs the
    optimiser, the bare name otherwise."""
    return f"{strategy}-{optimizer}" if optimises(strategy) else strategy


def owners() -> tuple[type[MethodSettings], ...]:
    """Every settings dataclass of the registered entries, once each (each owns its keys)."""
    found = [e.settings for e in (*AGGREGATIONS.values(), *SELECTIONS.values())]
    return tuple(dict.fromkeys(s for s in found if s.own_keys()))


discover()

__all__ = ["AGGREGATIONS", "SELECTIONS", "Aggregation", "MethodSettings", "Selection", "aggregation",
           "discover", "label", "make_rule", "optimises", "owners", "register", "selection"]
