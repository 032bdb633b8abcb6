"""The run configuration: one typed, validated view of ``[tool.flwr.app.config]``.

The defaults live only in ``pyproject.toml``; this module checks every value's type, range and
syntax (data set and model names, partitioner and its γ, device name, budgets) without touching
files or hardware, so that a bad setting stops the run before round 1 with one line naming the key
and the value. Checks that depend on the machine are in `settings.local`.

Each key has one owner: `RunConfig` owns the run-wide keys; a method's own keys (``fedpia-*``,
``sima-*``, ``optimizer-*``) belong to its settings dataclass in its `methods` registry entry, which
parses and checks them (`RunConfig.owned`); ``strategy`` and ``aggregation`` name entries, and an
entry checks what it needs of the run (e.g. SIMA's adapters, the group oracle's ``client-groups``).
"""

from __future__ import annotations

import re
import time
import tomllib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path

import methods
from metaheuristics.names import SEARCHES
from methods.base import Aggregation, MethodSettings, Selection, check_value
from privacy.settings import PrivacySettings
from settings.budgets import parse_budgets
from settings.errors import ConfigError
from settings.sections import EvaluationSettings, FederationSettings, ScoringSettings, TrainingSettings
from tasks.data import registry as data_registry
from tasks.data.mixed import PREFIX as MIXED_PREFIX
from tasks.data.mixed import parse_mixed
from tasks.data.partition import parse_partitioner
from tasks.models import registry as model_registry
from tasks.names import ADAPTERS, DTYPES, VLM_LAYERS, parse_name

PROJECT_ROOT = Path(__file__).resolve().parent.parent
OPTIMIZERS = SEARCHES  # the optimising algorithms, not the references (topk, random, last)
CHOICES = {
    "optimizer": OPTIMIZERS,
    "adapter": ADAPTERS,
    "vlm-layers": VLM_LAYERS,
    "dtype": DTYPES,
    "quantization": ("none", "4bit"),
    "head": ("private", "shared", "frozen"),
    "projection": ("trained", "frozen"),
    "eval-answers": ("generated", "closed-set"),
    "group-conflict": ("none", "answers"),
}
"""The run-wide keys' choices; ``strategy`` and ``aggregation`` are the registries' names (`methods`),
and each method's own keys are checked by its settings dataclass (in its `methods` package)."""
# (low, high) bounds; None = unbounded on that side
BOUNDS = {
    "num-server-rounds": (1, None), "lora-rank": (1, None), "max-train-samples": (0, None),
    "max-test-samples": (0, None), "min-nodes": (1, None), "fraction-train": (0.0, 1.0),
    "validation-share": (0.0, 0.95), "fraction-evaluate": (0.0, 1.0), "round-timeout": (0.0, None),
    "seed": (0, None), "num-blocks": (1, None), "max-new-tokens": (0, None),
}
STRICT_LOW = ("round-timeout", "fraction-train")
DEVICES = ("auto", "cpu", "cuda", "cuda:<i>", "mps")
_DEVICE = re.compile(r"auto|cpu|mps|cuda(:\d+)?")


def _named(value: str, names: Iterable[str]) -> bool:
    """Is `value` one of `names`, where ``"prefix:<arg>"`` stands for any non-empty argument?"""
    try:
        parse_name(value, names, "name")
    except ValueError:
        return False
    return True


def check_dataset(value: str, key: str = "dataset") -> None:
    """A known data set name; ``mixed:<a>+<b>`` needs two or more known, plain components."""
    if value.startswith(MIXED_PREFIX):
        try:
            parts = parse_mixed(value)
        except ValueError as err:
            raise ConfigError(str(err)) from None
        plain = tuple(d for d in data_registry.REGISTRY if not d.startswith(MIXED_PREFIX))
        bad = [p for p in parts if not _named(p, plain)]
        if bad:
            raise ConfigError(f"{key} = {bad[0]!r} is unknown (a component of {value!r}); choose "
                              f"among {', '.join(plain)}")
    elif not _named(value, data_registry.REGISTRY):
        raise ConfigError(f"{key} = {value!r} is unknown; choose one of {', '.join(data_registry.REGISTRY)}")


def check_device_name(value: str, key: str = "device") -> None:
    """``auto``, ``cpu``, ``cuda``, ``cuda:<i>`` or ``mps`` (whether it exists: `settings.local`)."""
    if not _DEVICE.fullmatch(value):
        raise ConfigError(f"{key} = {value!r} is unknown; choose one of {', '.join(DEVICES)}")


@dataclass(frozen=True)
class RunConfig:
    """Typed run settings (attribute = key with '-' replaced by '_')."""

    num_server_rounds: int
    strategy: str
    aggregation: str
    optimizer: str
    model: str
    adapter: str
    lora_rank: int
    dataset: str
    partitioner: str
    max_train_samples: int
    max_test_samples: int
    validation_share: float
    budgets: str
    fraction_train: float
    fraction_evaluate: float
    min_nodes: int
    round_timeout: float
    device: str
    seed: int
    run_name: str
    results_dir: str
    resume_from: str
    progress_bar: bool
    num_blocks: int
    model_sizes: str
    eval_others: bool
    lora_targets: str
    vlm_layers: str
    max_new_tokens: int
    dtype: str
    quantization: str
    gradient_checkpointing: bool
    client_groups: str
    head: str
    projection: str
    group_conflict: str
    eval_answers: str
    owned: tuple[MethodSettings, ...] = field(default=(), repr=False)
    """The settings of every registered method that has keys (`methods.owners`), each parsed by its
    own dataclass, whichever method runs (a bad value fails whether or not it is used)."""

    @classmethod
    def run_keys(cls) -> tuple[str, ...]:
        """The run-wide keys, owned by this class (every other key is a method's)."""
        return tuple(f.name.replace("_", "-") for f in fields(cls)[:-1])  # all but `owned`

    @staticmethod
    def owners() -> tuple[type[MethodSettings], ...]:
        """Every settings class beside the run-wide keys: the methods' (`methods.owners`) and
        differential privacy's (`privacy.settings`), local training's, scoring's, evaluation's and
        the federation's (`settings.sections`), each owning its keys."""
        return (*methods.owners(), PrivacySettings, TrainingSettings, ScoringSettings, EvaluationSettings,
                FederationSettings)

    @classmethod
    def keys(cls) -> tuple[str, ...]:
        return cls.run_keys() + tuple(key for owner in cls.owners() for key in owner.own_keys())

    @classmethod
    def from_mapping(cls, values: Mapping[str, object]) -> RunConfig:
        """Validate a (fused) run config: every key, type and range, and every name against its
        registry (`methods`, the model and data set registries)."""
        unknown = sorted(set(values) - set(cls.keys()))
        if unknown:
            raise ConfigError(f"unknown run-config key {unknown[0]!r} (= {values[unknown[0]]!r})")
        kwargs = {}
        for f in fields(cls)[:-1]:  # all but `owned`
            key = f.name.replace("_", "-")
            if key not in values:
                raise ConfigError(f"run-config key {key!r} is missing")
            kwargs[f.name] = _check(key, values[key], f.type)
        try:
            owned = tuple(owner.parse(values) for owner in cls.owners())
        except ValueError as err:
            raise ConfigError(str(err)) from None
        config = cls(**kwargs, owned=owned)
        config._check_names()
        parse_budgets(config.budgets)
        return config

    def default_run_name(self) -> str:
        """The run's folder name when ``run-name`` is empty: its strategy label and the start time."""
        return f"{methods.label(self.strategy, self.optimizer)}-{time.strftime('%Y%m%d-%H%M%S')}"

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

    @property
    def privacy(self) -> PrivacySettings:
        """The ``dp-*`` settings (`privacy.settings`)."""
        return self.settings_of(PrivacySettings)

    @property
    def training(self) -> TrainingSettings:
        """A client's local round (`settings.sections`)."""
        return self.settings_of(TrainingSettings)

    @property
    def scoring(self) -> ScoringSettings:
        """How clients score their layers (`settings.sections`)."""
        return self.settings_of(ScoringSettings)

    @property
    def evaluation(self) -> EvaluationSettings:
        """How much clients evaluate each round (`settings.sections`)."""
        return self.settings_of(EvaluationSettings)

    @property
    def federation(self) -> FederationSettings:
        """Who may speak for a site and how long the server waits for sites (`settings.sections`)."""
        return self.settings_of(FederationSettings)

    @property
    def groups(self) -> list[int]:
        """``client-groups`` parsed (`parse_groups`)."""
        return parse_groups(self.client_groups)

    def _check_names(self) -> None:
        check_dataset(self.dataset)
        try:
            parse_partitioner(self.partitioner)
        except ValueError as err:
            detail = str(err).removesuffix(f" in partitioner {self.partitioner!r}")
            raise ConfigError(f"partitioner = {self.partitioner!r}: {detail}") from None
        try:
            model_registry.parse_model(self.model)
        except ValueError:
            raise ConfigError(f"model = {self.model!r} is unknown; choose one of "
                              f"{', '.join(model_registry.REGISTRY)}") from None
        check_device_name(self.device)
        sizes = parse_model_sizes(self.model_sizes, self.model)
        try:
            methods.aggregation(self.aggregation).check(self.adapter, self.groups)
            methods.selection(self.strategy)
        except ValueError as err:
            raise ConfigError(str(err)) from None
        if len(set(sizes)) > 1 and self.adapter != "pq-lora":
            raise ConfigError(f"model-sizes = {self.model_sizes!r} mixes sizes, which only adapter = "
                              f"'pq-lora' can share (got {self.adapter!r})")
        if self.group_conflict != "none" and not self.groups:
            raise ConfigError(f"group-conflict = {self.group_conflict!r} needs client-groups, one group id "
                              "per partition id, e.g. client-groups = '0,0,1,1'")
        if self.run_name in (".", "..") or "/" in self.run_name or "\\" in self.run_name:
            raise ConfigError(f"run-name = {self.run_name!r} must be a plain folder name")
        try:
            self.privacy.component.check(self)
        except ValueError as err:
            raise ConfigError(str(err)) from None

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
            shared_head=self.head == "shared", frozen_head=self.head == "frozen",
            frozen_projection=self.projection == "frozen", base_weights=client)

    def to_dict(self) -> dict[str, object]:
        """The flat ``key: value`` run config (run-wide keys, then each method's)."""
        values = {key: getattr(self, key.replace("-", "_")) for key in self.run_keys()}
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


def _check(key: str, value: object, kind: str) -> object:
    """One run-wide key checked by the methods' own checker (`methods.base.check_value`)."""
    low, high = BOUNDS.get(key, (None, None))
    try:
        return check_value(key, value, kind, CHOICES.get(key, ()), low, high, key in STRICT_LOW)
    except ValueError as err:
        raise ConfigError(str(err)) from None


def default_config() -> dict[str, object]:
    """The defaults of ``[tool.flwr.app.config]`` in the project's pyproject.toml."""
    with open(PROJECT_ROOT / "pyproject.toml", "rb") as fh:
        return dict(tomllib.load(fh)["tool"]["flwr"]["app"]["config"])
