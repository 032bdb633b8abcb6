"""The run configuration: one typed, validated view of ``[tool.flwr.app.config]``.

The defaults live only in ``pyproject.toml``; this module checks types and values so that a bad
setting stops the run before round 1 with one line naming the key and the value.
"""

from __future__ import annotations

import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, fields
from pathlib import Path

from metaheuristics import ALGORITHMS
from tasks import DATASETS, PARTITIONERS

PROJECT_ROOT = Path(__file__).resolve().parent.parent
OPTIMIZERS = tuple(a for a in ALGORITHMS if a not in ("topk", "random", "last"))
CHOICES = {
    "optimizer": OPTIMIZERS,
    "optimizer-pick": ("weighted", "knee"),
    "adapter": ("lora", "layer"),
    "score-mode": ("loss", "logit", "paper"),
}
# (low, high) bounds; None = unbounded on that side
BOUNDS = {
    "num-server-rounds": (1, None), "optimizer-pop-size": (2, None),
    "optimizer-generations": (1, None), "lora-rank": (1, None), "max-train-samples": (0, None),
    "max-test-samples": (0, None), "local-steps": (1, None), "batch-size": (1, None),
    "score-batch-size": (1, None), "min-nodes": (1, None), "lr": (0.0, None),
    "head-lr": (0.0, None), "weight-decay": (0.0, None), "warmup-fraction": (0.0, 1.0),
    "fraction-train": (0.0, 1.0), "fraction-evaluate": (0.0, 1.0), "round-timeout": (0.0, None),
}


class ConfigError(ValueError):
    """A run-config key with a bad value; the message is one line naming both."""


def _base(name: str) -> str:
    """``"dirichlet:0.5"`` -> ``"dirichlet"``; ``"by-question-type[:<gamma>]"`` -> ``"by-question-type"``."""
    return name.split(":", 1)[0].split("[", 1)[0]


def parse_budgets(text: str, key: str = "budgets") -> list[int | str]:
    """``"6,6,4,4,2"`` -> ``[6, 6, 4, 4, 2]``; entries may be ``auto``; ``""`` -> ``[]``."""
    if not text.strip():
        return []
    budgets: list[int | str] = []
    for item in text.split(","):
        item = item.strip()
        if item == "auto":
            budgets.append(item)
        elif item.isdigit() and int(item) >= 1:
            budgets.append(int(item))
        else:
            raise ConfigError(f"{key} = {text!r}: {item!r} is not a positive int or 'auto'")
    return budgets


@dataclass(frozen=True)
class RunConfig:
    """Typed run settings (attribute = key with '-' replaced by '_')."""

    num_server_rounds: int
    strategy: str
    optimizer: str
    optimizer_pop_size: int
    optimizer_generations: int
    optimizer_pick: str
    model: str
    adapter: str
    lora_rank: int
    dataset: str
    partitioner: str
    max_train_samples: int
    max_test_samples: int
    budgets: str
    local_steps: int
    batch_size: int
    lr: float
    head_lr: float
    weight_decay: float
    warmup_fraction: float
    score_mode: str
    score_batch_size: int
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

    @classmethod
    def keys(cls) -> tuple[str, ...]:
        return tuple(f.name.replace("_", "-") for f in fields(cls))

    @classmethod
    def from_mapping(cls, values: Mapping[str, object], strategies: tuple[str, ...] = ()
                     ) -> RunConfig:
        """Validate a (fused) run config; ``strategies`` are the valid strategy names."""
        unknown = sorted(set(values) - set(cls.keys()))
        if unknown:
            raise ConfigError(f"unknown run-config key {unknown[0]!r} (= {values[unknown[0]]!r})")
        kwargs = {}
        for f in fields(cls):
            key = f.name.replace("_", "-")
            if key not in values:
                raise ConfigError(f"run-config key {key!r} is missing")
            kwargs[f.name] = _check(key, values[key], f.type)
        config = cls(**kwargs)
        config._check_names(strategies)
        parse_budgets(config.budgets)
        return config

    def _check_names(self, strategies: tuple[str, ...]) -> None:
        for key, value in (("dataset", self.dataset), ("partitioner", self.partitioner)):
            valid = DATASETS if key == "dataset" else PARTITIONERS
            if _base(value) not in {_base(v) for v in valid}:
                raise ConfigError(f"{key} = {value!r} is unknown; choose one of {', '.join(valid)}")
        if strategies and self.strategy not in strategies:
            raise ConfigError(
                f"strategy = {self.strategy!r} is unknown; choose one of {', '.join(strategies)}")

    def to_dict(self) -> dict[str, object]:
        return {f.name.replace("_", "-"): getattr(self, f.name) for f in fields(self)}


def _check(key: str, value: object, kind: str) -> object:
    if kind == "float" and isinstance(value, int) and not isinstance(value, bool):
        value = float(value)
    expected = {"int": int, "float": float, "str": str, "bool": bool}[kind]
    if isinstance(value, bool) != (kind == "bool") or not isinstance(value, expected):
        raise ConfigError(f"{key} = {value!r} must be of type {kind}")
    if key in CHOICES and value not in CHOICES[key]:
        raise ConfigError(f"{key} = {value!r} is unknown; choose one of {', '.join(CHOICES[key])}")
    if key in BOUNDS:
        low, high = BOUNDS[key]
        strict_low = key in ("lr", "head-lr", "round-timeout", "fraction-train")
        if value < low or (strict_low and value == low) or (high is not None and value > high):
            raise ConfigError(f"{key} = {value!r} is out of range")
    return value


def default_config() -> dict[str, object]:
    """The defaults of ``[tool.flwr.app.config]`` in the project's pyproject.toml."""
    with open(PROJECT_ROOT / "pyproject.toml", "rb") as fh:
        return dict(tomllib.load(fh)["tool"]["flwr"]["app"]["config"])
