"""What a method package declares: its own settings (a frozen dataclass parsed from the flat run
config) and its registry entry, an `Aggregation` or a `Selection`.

This module imports nothing of the project at module level but `tasks.names` (`metaheuristics` only
when a rule selects), so `settings` (read by both apps, also in a deployed ClientApp that must stay
light) can parse every method's keys. An entry names its heavy parts (server step, client hook) as
``"module:attr"``, as the model and data set registries name their builders, so nothing heavy loads
until a run uses the method. A bad value raises ValueError with one line naming the key and the
value; `settings.config` turns it into a `settings.ConfigError`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, fields
from typing import Any

import numpy as np

from tasks.names import load_attr

KINDS = {"int": int, "float": float, "str": str, "bool": bool}

def check_value(key: str, value: object, kind: str, choices: Sequence[object] = (),
                low: float | None = None, high: float | None = None, strict_low: bool = False) -> object:
    """`value` of run-config `key` checked for its type (an int is a float), choices and range."""
    if kind == "float" and isinstance(value, int) and not isinstance(value, bool):
        value = float(value)
    if isinstance(value, bool) != (kind == "bool") or not isinstance(value, KINDS[kind]):
        raise ValueError(f"{key} = {value!r} must be of type {kind}")
    if choices and value not in choices:
        raise ValueError(f"{key} = {value!r} is unknown; choose one of {', '.join(map(str, choices))}")
    below = low is not None and (value < low or (strict_low and value == low))
    if below or (high is not None and value > high):
        raise ValueError(f"{key} = {value!r} is out of range")
    return value


def setting(default: object, key: str, *, choices: Sequence[object] = (), low: float | None = None,
            high: float | None = None, strict_low: bool = False, help: str = "") -> Any:
    """A settings field, declared once: its run-config `key`, default (pyproject.toml holds the same,
    where Flower reads it), checks and one line of help (``--help``)."""
    return field(default=default, metadata={"key": key, "choices": tuple(choices), "low": low,
                                            "high": high, "strict_low": strict_low, "help": help})


@dataclass(frozen=True)
class MethodSettings:
    """A method's own run-config keys (fields made with `setting`); the base has none."""

    @classmethod
    def own_keys(cls) -> tuple[str, ...]:
        """The run-config keys this class owns."""
        return tuple(f.metadata["key"] for f in fields(cls))

    @classmethod
    def parse(cls, values: Mapping[str, object], missing: Callable[[str], str] | None = None
              ) -> MethodSettings:
        """The settings from a (fused) run config, every key present checked (ValueError naming it);
        an absent key takes its declared default, or, with ``missing``, is a ValueError of the line
        ``missing(key)``."""
        kwargs = {}
        for f in fields(cls):
            key = f.metadata["key"]
            if key not in values:
                if missing is not None:
                    raise ValueError(missing(key))
                continue
            kind = f.type if isinstance(f.type, str) else f.type.__name__  # postponed annotations or not
            kwargs[f.name] = check_value(key, values[key], kind, f.metadata["choices"],
                                         f.metadata["low"], f.metadata["high"], f.metadata["strict_low"])
        return cls(**kwargs)

    def check(self) -> None:
        """ValueError in one line for a value its declaration cannot judge (a registry name, a
        pattern); none here."""

    @classmethod
    def describe(cls) -> list[str]:
        """One line per key: ``key = default (choices or range): help``."""
        lines = []
        for f in fields(cls):
            meta = f.metadata
            low = "" if meta["low"] is None else f"{meta['low']} {'<' if meta['strict_low'] else '<='} "
            high = "" if meta["high"] is None else f" <= {meta['high']}"
            limits = " | ".join(map(str, meta["choices"])) or (f"{low}x{high}" if low or high else "")
            lines.append(f"{meta['key']} = {f.default!r}" + (f" ({limits})" if limits else "")
                         + f": {meta['help']}")
        return lines

    def to_dict(self) -> dict[str, object]:
        return {f.metadata["key"]: getattr(self, f.name) for f in fields(self)}

    def server_keywords(self, config: Any) -> dict[str, object]:
        """Keywords the method's server step is bound with (none); `config` is the `RunConfig`."""
        return {}

    def extra_release(self) -> str:
        """What the method does with a client's data beyond training the adapters it sends, which a
        differential-privacy guarantee of those adapters does not cover ("" = nothing)."""
        return ""


Pick = Callable[[np.ndarray, Sequence[int], int], np.ndarray]
"""(scores (N, L), budgets (N,), seed) -> masks (N, L) bool: a rule's own choice of layers."""


@dataclass(frozen=True)
class Aggregation:
    """One aggregation method: its run-config name, its server step (``"module:attr"`` of an
    `Aggregator`, `strategies.aggregation.types`, bound with ``settings.server_keywords``), its
    settings, its client hook factory (``"module:attr"`` of ``(methods.hooks.TrainStep, settings) ->
    ClientHook | None``; None: plain local training) and what it needs of the model and the run config.
    The step and the hook are named as the model and data set registries name their builders
    (`tasks.names.load_attr`): their modules load when a run uses the method."""

    name: str
    server: str
    settings: type[MethodSettings] = MethodSettings
    client: str | None = None
    needs_gated_model: bool = False
    """The model carries a frozen global branch beside the local one (FedMosaic's gate, Eq. 9)."""
    adapters: tuple[str, ...] = ()
    """The adapters it works with (empty: any)."""
    needs_groups: bool = False
    """It reads ``client-groups`` (one group id per partition id)."""
    client_dp_refusal: str | None = "its server step is not declared a per-array mean of the updates"
    """Why ``dp = "client"`` cannot wrap its server step, one line; None: it can, the step returning
    each array's example-weighted mean over the clients that sent it and no per-client models
    (`privacy.dp_fedavg`)."""

    def check(self, adapter: str, groups: Sequence[int]) -> None:
        """ValueError naming the setting the run lacks for this method."""
        if self.adapters and adapter not in self.adapters:
            raise ValueError(f"adapter = {adapter!r} does not work with aggregation = {self.name!r}; "
                             f"use {' or '.join(self.adapters)}")
        if self.needs_groups and not groups:
            raise ValueError(f"aggregation = {self.name!r} needs client-groups, one group id per "
                             "partition id, e.g. client-groups = '0,0,1,1'")

    def server_step(self) -> Callable[..., Any]:
        """The server step (its module imported here)."""
        return load_attr(self.server)

    def bound_step(self, settings: MethodSettings, config: Any) -> Callable[..., Any]:
        """The server step with this run's settings bound (the bare function when it has none)."""
        from functools import partial, update_wrapper

        step = self.server_step()
        keywords = settings.server_keywords(config)
        return update_wrapper(partial(step, **keywords), step) if keywords else step

    def client_factory(self) -> Callable[..., Any] | None:
        """The client hook factory (its module imported here), None for plain local training."""
        return None if self.client is None else load_attr(self.client)


@dataclass(frozen=True)
class Selection:
    """One selection rule as data: which score the clients compute (``scorer``, a `tasks.scores`
    name; None: none, the clients only report their budgets) and how the server turns scores and
    budgets into masks: its own ``pick``, a fixed `metaheuristics.optimize` ``algorithm``, or
    (``optimises``) the run's ``optimizer`` with the settings' ``server_keywords``."""

    name: str
    scorer: str | None = None
    pick: Pick | None = None
    algorithm: str | None = None
    settings: type[MethodSettings] = MethodSettings
    optimises: bool = False
    """The server runs the ``optimizer`` search (F3OCUS §5), so a run and its table row are labelled
    with the optimiser too (``f3ocus-nsga2``)."""
    needs_budget: bool = True
    """False: every client trains its mask whatever its budget (the budget-free reference)."""
    trains_adapter: bool = True
    """False: every mask is empty, only the clients' heads train (the lower reference)."""

    def __post_init__(self) -> None:
        if (self.pick is not None) + (self.algorithm is not None) + self.optimises != 1:
            raise ValueError(f"selection {self.name!r} needs exactly one of pick, algorithm, optimises")

    def select(self, scores: np.ndarray, budgets: Sequence[int], seed: int, optimizer: str = "nsga2",
               params: Mapping[str, object] | None = None) -> tuple[np.ndarray, Any]:
        """Masks (N, L) for this round's clients, and the optimiser's `metaheuristics.Assignment`
        (None when the rule picks by itself)."""
        if self.pick is not None:
            return self.pick(scores, budgets, seed), None
        from metaheuristics import optimize

        algorithm = optimizer if self.optimises else self.algorithm
        assignment = optimize(scores, budgets, algorithm=algorithm, seed=seed,
                              **(dict(params or {}) if self.optimises else {}))
        return assignment.masks, assignment


AGGREGATIONS: dict[str, Aggregation] = {}
"""``aggregation``: how the updates of a round are combined; filled by the method packages."""
SELECTIONS: dict[str, Selection] = {}
"""``strategy``: which layers each client trains; filled by the method packages."""


def register(*entries: Aggregation | Selection) -> None:
    """Add a method package's entries to their registry, refusing a name given twice."""
    for entry in entries:
        table: dict[str, Any] = AGGREGATIONS if isinstance(entry, Aggregation) else SELECTIONS
        if table.get(entry.name, entry) is not entry:
            raise ValueError(f"registry name {entry.name!r} is given twice")
        table[entry.name] = entry


def lookup(table: Mapping[str, Any], key: str, name: str) -> Any:
    """The entry of `name` in `table` (run-config `key`), or one line naming it and the choices."""
    if name not in table:
        raise ValueError(f"{key} = {name!r} is unknown; choose one of {', '.join(table)}")
    return table[name]
