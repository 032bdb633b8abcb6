"""What a registry entry is made of: a method's own settings (a frozen dataclass parsed from the flat
run config) and the two kinds of entry, `Aggregation` and `Selection`, whose heavy parts are named
lazily as ``"module:attr"`` strings (as transformers' Auto maps) and loaded on first use by `resolve`.

This module imports nothing of the project but `tasks.names` (its ``"module:attr"`` loader `resolve`,
the models' and data sets' too), so `settings` (read by both apps, also in a deployed
ClientApp that must stay light) can parse every method's keys; the strings point up to
`strategies` and `client_app` by name only. A bad value raises ValueError with one line naming the
key and the value; `settings.config` turns it into a `settings.ConfigError`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, fields
from typing import Any

from tasks.names import load_attr as resolve

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
            high: float | None = None, strict_low: bool = False) -> Any:
    """A settings field: its run-config `key`, default (pyproject.toml holds the same) and checks."""
    return field(default=default, metadata={"key": key, "choices": tuple(choices), "low": low,
                                            "high": high, "strict_low": strict_low})


@dataclass(frozen=True)
class MethodSettings:
    """A method's own run-config keys (fields made with `setting`); the base has none."""

    @classmethod
    def own_keys(cls) -> tuple[str, ...]:
        """The run-config keys this class owns."""
        return tuple(f.metadata["key"] for f in fields(cls))

    @classmethod
    def parse(cls, values: Mapping[str, object]) -> MethodSettings:
        """The settings from a (fused) run config: every key present and valid, else ValueError."""
        kwargs = {}
        for f in fields(cls):
            key = f.metadata["key"]
            if key not in values:
                raise ValueError(f"run-config key {key!r} is missing")
            kwargs[f.name] = check_value(key, values[key], str(f.type), f.metadata["choices"],
                                         f.metadata["low"], f.metadata["high"], f.metadata["strict_low"])
        return cls(**kwargs)

    def to_dict(self) -> dict[str, object]:
        return {f.metadata["key"]: getattr(self, f.name) for f in fields(self)}

    def server_keywords(self, config: Any) -> dict[str, object]:
        """Keywords the method's server step is bound with (none); `config` is the `RunConfig`."""
        return {}

    def extra_release(self) -> str:
        """What the method does with a client's data beyond training the adapters it sends, which a
        differential-privacy guarantee of those adapters does not cover ("" = nothing; issue 39)."""
        return ""


@dataclass(frozen=True)
class Aggregation:
    """One aggregation method: its run-config name, its server step (an `Aggregator`,
    `strategies.aggregation.types`, bound with ``settings.server_keywords``), its settings, its
    client hook factory (``(client_app.hooks.TrainStep, settings) -> ClientHook | None``; None: plain
    local training) and what it needs of the model and the run config."""

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
    client_dp_refusal: str = "its server step is not declared a per-array mean of the updates"
    """Why ``dp = "client"`` cannot wrap its server step, one line; empty: it can, the step returning
    each array's example-weighted mean over the clients that sent it and no per-client models
    (`strategies.aggregation.dp`)."""

    def check(self, adapter: str, groups: Sequence[int]) -> None:
        """ValueError naming the setting the run lacks for this method."""
        if self.adapters and adapter not in self.adapters:
            raise ValueError(f"adapter = {adapter!r} does not work with aggregation = {self.name!r}; "
                             f"use {' or '.join(self.adapters)}")
        if self.needs_groups and not groups:
            raise ValueError(f"aggregation = {self.name!r} needs client-groups, one group id per "
                             "partition id, e.g. client-groups = '0,0,1,1'")

    def server_step(self, settings: MethodSettings, config: Any) -> Callable[..., Any]:
        """The server step with this run's settings bound (the bare function when it has none)."""
        from functools import partial, update_wrapper

        step = resolve(self.server)
        keywords = settings.server_keywords(config)
        return update_wrapper(partial(step, **keywords), step) if keywords else step


@dataclass(frozen=True)
class Selection:
    """One selection rule: its run-config name, its builder (``(name, optimizer, settings mapping)
    -> strategies.selection.rule.SelectionRule``; the rule says which score clients compute), its
    settings and how clients treat its masks."""

    name: str
    rule: str
    settings: type[MethodSettings] = MethodSettings
    needs_budget: bool = True
    """False: every client trains every layer whatever its budget (the budget-free reference)."""
    trains_adapter: bool = True
    """False: every mask is empty, only the clients' heads train (the lower reference)."""
    optimises: bool = False
    """True: the server runs the ``optimizer`` search (F3OCUS §5), so a run and its table row are
    labelled with the optimiser too (``f3ocus-nsga2``)."""


def registry(entries: Iterable[Aggregation | Selection]) -> dict[str, Any]:
    """Name -> entry, refusing a name twice."""
    out: dict[str, Any] = {}
    for entry in entries:
        if entry.name in out:
            raise ValueError(f"registry name {entry.name!r} is given twice")
        out[entry.name] = entry
    return out


def lookup(table: Mapping[str, Any], key: str, name: str) -> Any:
    """The entry of `name` in `table` (run-config `key`), or one line naming it and the choices."""
    if name not in table:
        raise ValueError(f"{key} = {name!r} is unknown; choose one of {', '.join(table)}")
    return table[name]

