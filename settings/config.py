"""The run configuration: one typed, validated view of ``[tool.flwr.app.config]``.

Every key is declared once, with its default, choices or bounds and help, in the settings class
that owns it (`methods.base.setting`): the run-wide sections (`settings.sections`), privacy's
(`privacy.settings`) and each method's (its `methods` package). `RunConfig` fuses them: it checks
every key's type, range and syntax and every name against its registry, without touching files or
hardware, so that a bad setting stops the run before round 1 with one line naming the key and the
value (checks that depend on the machine are in `settings.local`). pyproject.toml's table, which
Flower reads, is written from the declarations (``python -m experiments.reference``; a test fails when
it is stale). A method's keys are required only when a run uses the method; another method's keys
take their declared defaults when absent, so a method added since pyproject.toml was written does
not stop runs that do not use it.
"""

from __future__ import annotations

import time
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

import methods
from methods.base import Aggregation, MethodSettings, Selection
from privacy.settings import PrivacySettings
from settings.budgets import parse_budgets
from settings.errors import ConfigError
from settings.sections import (
    RUN_WIDE,
    EvaluationSettings,
    FederationSettings,
    ScoringSettings,
    TrainingSettings,
)
from tasks.models import registry as model_registry
from tasks.names import ADAPTER_REGISTRY, adapter_of, head_of

PROJECT_ROOT = Path(__file__).resolve().parent.parent
WRITE = "python -m experiments.reference"
"""The command that writes pyproject.toml's run-config table from the declarations."""


@dataclass(frozen=True)
class RunConfig:
    """The parsed settings of a run, one object per settings class (`owners`); the run-wide sections'
    fields read as the config's own attributes (``config.model``, `settings.sections.RUN_WIDE`)."""

    owned: tuple[MethodSettings, ...] = field(repr=False)

    def __getattr__(self, name: str) -> object:
        if name.startswith("_") or name == "owned":  # copy/pickle probe before ``owned`` is set
            raise AttributeError(name)
        for section in self.owned[: len(RUN_WIDE)]:
            if name in section.__dataclass_fields__:
                return getattr(section, name)
        raise AttributeError(f"{type(self).__name__} has no setting {name!r}")

    @staticmethod
    def owners() -> tuple[type[MethodSettings], ...]:
        """Every settings class, each owning its keys: the run-wide sections first (`RUN_WIDE`), then
        local training's, scoring's and differential privacy's, then every registered method's."""
        return (*RUN_WIDE, TrainingSettings, ScoringSettings, PrivacySettings, *methods.owners())

    @classmethod
    def keys(cls) -> tuple[str, ...]:
        return tuple(key for owner in cls.owners() for key in owner.own_keys())

    @classmethod
    def from_mapping(cls, values: Mapping[str, object]) -> RunConfig:
        """Validate a (fused) run config: every key, type and range, and every name against its
        registry (`methods`, the model and data set registries). A key of a method the run does not
        use may be absent (its declared default); any other absent key is one line naming it,
        pyproject.toml and `WRITE`."""
        unknown = sorted(set(values) - set(cls.keys()))
        if unknown:
            raise ConfigError(f"unknown run-config key {unknown[0]!r} (= {values[unknown[0]]!r})")
        try:
            federation = FederationSettings.parse(values, missing=_missing)
            entries = (methods.selection(federation.strategy), methods.aggregation(federation.aggregation))
            used = {entry.settings for entry in entries}
            owned = tuple(owner.parse(values, missing=_missing if owner in used or owner in _RUN else None)
                          for owner in cls.owners())
            config = cls(owned)
            for section in owned:
                section.check()
            config._check_across()
            parse_budgets(config.budgets)
        except ConfigError:
            raise
        except ValueError as err:
            raise ConfigError(str(err)) from None
        return config

    def default_run_name(self) -> str:
        """The run's folder name when ``run-name`` is empty: its two axes (the selection's label and
        the aggregation) and the start time."""
        return (f"{methods.label(self.strategy, self.optimizer)}-{self.aggregation}-"
                f"{time.strftime('%Y%m%d-%H%M%S')}")

    @property
    def method(self) -> Aggregation:
        """The registry entry of ``aggregation`` (`methods.AGGREGATIONS`)."""
        return methods.AGGREGATIONS[self.aggregation]

    @property
    def selection(self) -> Selection:
        """The registry entry of ``strategy`` (`methods.SELECTIONS`)."""
        return methods.SELECTIONS[self.strategy]

    def settings_of(self, owner: type[MethodSettings]) -> MethodSettings:
        """The parsed settings of `owner` (the keyless base for an entry without settings)."""
        return next((s for s in self.owned if type(s) is owner), owner())

    @property
    def method_settings(self) -> MethodSettings:
        return self.settings_of(self.method.settings)

    @property
    def selection_settings(self) -> MethodSettings:
        return self.settings_of(self.selection.settings)

    privacy = property(lambda self: self.settings_of(PrivacySettings),
                       doc="The ``dp-*`` settings (`privacy.settings.PrivacySettings`).")
    training = property(lambda self: self.settings_of(TrainingSettings),
                        doc="A client's local round (`settings.sections.TrainingSettings`).")
    scoring = property(lambda self: self.settings_of(ScoringSettings),
                       doc="How clients score their layers (`settings.sections.ScoringSettings`).")
    evaluation = property(lambda self: self.settings_of(EvaluationSettings),
                          doc="How clients evaluate (`settings.sections.EvaluationSettings`).")
    federation = property(lambda self: self.settings_of(FederationSettings),
                          doc="The rounds, axes, budgets, sampling, sites (`settings.sections`).")

    @property
    def groups(self) -> list[int]:
        """``client-groups`` parsed (`parse_groups`)."""
        return parse_groups(self.client_groups)

    def _check_across(self) -> None:
        """What one key asks of another: the model's sizes of the adapter, the aggregation of the
        adapter and groups, a planted conflict of groups, the privacy mode of the rest."""
        sizes = parse_model_sizes(self.model_sizes, self.model)
        methods.aggregation(self.aggregation).check(self.adapter, self.groups)
        if len(set(sizes)) > 1 and not adapter_of(self.adapter).blocks:
            sharing = " or ".join(repr(a.name) for a in ADAPTER_REGISTRY.values() if a.blocks)
            raise ConfigError(f"model-sizes = {self.model_sizes!r} mixes sizes, which only adapter = "
                              f"{sharing} can share (got {self.adapter!r})")
        if self.group_conflict != "none" and not self.groups:
            raise ConfigError(f"group-conflict = {self.group_conflict!r} needs client-groups, one group id "
                              "per partition id, e.g. client-groups = '0,0,1,1'")
        self.privacy.component.check(self)

    def model_spec(self, device: str = "cpu", client: bool = True, size: str = "base"
                   ) -> model_registry.ModelSpec:
        """This run's model settings (`tasks.build.build_model`) for a client of model ``size`` on
        ``device`` (resolved). The server's model (``client=False``) is float32, unquantised and
        without base weights (``base_weights=False``): it only reads the layer names and the
        initial adapters, which are float32 whatever the clients' base dtype, so an ``hf:<dir>``
        needs only its config.json there. ``gated``: SIMA's global branch (FedMosaic Eq. 9)."""
        from tasks.device import resolve_dtype  # torch: only where a model is built

        return model_registry.ModelSpec(
            self.model, self.adapter, self.lora_rank, self.seed, size=size,
            gated=self.method.needs_gated_model, num_blocks=self.num_blocks,
            lora_targets=tuple(t.strip() for t in self.lora_targets.split(",") if t.strip()),
            vlm_layers=self.vlm_layers, max_new_tokens=self.max_new_tokens,
            dtype=resolve_dtype(self.dtype, device) if client else "float32",
            quantization=self.quantization if client else "none",
            gradient_checkpointing=self.gradient_checkpointing, device=device,
            shared_head=head_of(self.head).shared, frozen_head=head_of(self.head).frozen,
            frozen_projection=self.projection == "frozen", base_weights=client)

    def to_dict(self) -> dict[str, object]:
        """The flat ``key: value`` run config, every owner's keys in `owners` order."""
        values: dict[str, object] = {}
        for settings in self.owned:
            values.update(settings.to_dict())
        return values


def parse_groups(value: str, key: str = "client-groups") -> list[int]:
    """Group id per partition id (cycled like ``budgets``): comma-separated ints >= 0; "" = none."""
    parts = [p.strip() for p in value.split(",")] if value.strip() else []
    if not all(p.isdigit() for p in parts):
        raise ConfigError(f"{key} = {value!r} must list group ids (ints >= 0), comma-separated")
    return [int(p) for p in parts]


def parse_model_sizes(value: str, model: str, key: str = "model-sizes") -> list[str]:
    """FedMosaic client sizes per partition id (cycled like ``budgets``): ``base`` or ``large``;
    a model of one size (the registry entry's ``sizes``: hf:<dir>, tiny-llava) refuses ``large``
    instead of dropping it."""
    sizes = [s.strip() for s in value.split(",")] if value.strip() else []
    allowed = model_registry.parse_model(model)[0].sizes
    bad = [s for s in sizes if s not in allowed]
    if not sizes or bad:
        raise ConfigError(f"{key} = {value!r} must list sizes among {', '.join(allowed)} "
                          f"(model = {model!r}), comma-separated")
    return sizes


_RUN = (*RUN_WIDE, TrainingSettings, ScoringSettings, PrivacySettings)
"""The owners whose keys every run needs."""


def _missing(key: str) -> str:
    """Why a needed key absent from the run config stops the run, in one line."""
    return (f"run-config key {key!r} is missing: pyproject.toml's [tool.flwr.app.config] lacks it; "
            f"write the table again with `{WRITE}`")


def default_config() -> dict[str, object]:
    """The defaults of ``[tool.flwr.app.config]`` in the project's pyproject.toml."""
    with open(PROJECT_ROOT / "pyproject.toml", "rb") as fh:
        return dict(tomllib.load(fh)["tool"]["flwr"]["app"]["config"])
