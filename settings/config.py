"""The run configuration: one typed, validated view of ``[tool.flwr.app.config]``.

The defaults live only in ``pyproject.toml``; this module checks every value's type, range and
syntax (data set and model names, partitioner and its γ, device name, budgets) without touching
files or hardware, so that a bad setting stops the run before round 1 with one line naming the key
and the value. Checks that depend on the machine are in `settings.local`.
"""

from __future__ import annotations

import re
import tomllib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, fields
from pathlib import Path

from metaheuristics.names import SEARCHES
from settings.budgets import parse_budgets
from settings.errors import ConfigError
from tasks.data.mixed import PREFIX as MIXED_PREFIX
from tasks.data.mixed import parse_mixed
from tasks.data.partition import parse_partitioner
from tasks.names import DATASETS, DTYPES, MODEL_SIZES, MODELS

PROJECT_ROOT = Path(__file__).resolve().parent.parent
OPTIMIZERS = SEARCHES  # the optimising algorithms, not the references (topk, random, last)
AGGREGATIONS = ("masked-fedavg", "fedpia", "sima", "local", "group-oracle")
"""Names of `strategies.aggregation.AGGREGATIONS`, kept here so that settings (read by both apps)
need not import the server's strategies; tests/test_selection_registry.py keeps the two equal."""
HEADS_ONLY = "none"
"""The strategy that trains no adapter (only the clients' heads): its train masks are empty."""
ALL_LAYERS = "all"
"""The budget-free upper reference: every client trains every layer, whatever its budget."""
CHOICES = {
    "aggregation": AGGREGATIONS,
    "fedpia-integration": ("normalised", "paper"),
    "fedpia-level": ("both", "server", "client"),
    "fedpia-client-cost": ("activation", "weight"),
    "optimizer": OPTIMIZERS,
    "optimizer-pick": ("weighted", "knee"),
    "adapter": ("lora", "layer", "pq-lora"),
    "score-mode": ("loss", "logit", "paper"),
    "vlm-layers": ("language", "vision", "both"),
    "dtype": DTYPES,
    "quantization": ("none", "4bit"),
    "head": ("private", "shared"),
    "group-conflict": ("none", "answers"),
}
# (low, high) bounds; None = unbounded on that side
BOUNDS = {
    "num-server-rounds": (1, None), "optimizer-pop-size": (2, None),
    "optimizer-generations": (1, None), "lora-rank": (1, None), "max-train-samples": (0, None),
    "max-test-samples": (0, None), "local-steps": (1, None), "batch-size": (1, None),
    "score-batch-size": (1, None), "min-nodes": (1, None), "lr": (0.0, None),
    "head-lr": (0.0, None), "weight-decay": (0.0, None), "warmup-fraction": (0.0, 1.0),
    "fraction-train": (0.0, 1.0), "fraction-evaluate": (0.0, 1.0), "round-timeout": (0.0, None),
    "seed": (0, None), "fedpia-gamma": (0.0, None), "fedpia-samples": (1, None),
    "sima-tau": (0.0, None), "sima-ema": (0.0, 1.0), "sima-freq": (1, None), "num-blocks": (1, None),
    "max-new-tokens": (0, None), "fedpia-iterations": (1, None),
}
STRICT_LOW = ("lr", "head-lr", "round-timeout", "fraction-train", "sima-tau", "sima-ema")
DEVICES = ("auto", "cpu", "cuda", "cuda:<i>", "mps")
_DEVICE = re.compile(r"auto|cpu|mps|cuda(:\d+)?")


def _named(value: str, names: tuple[str, ...]) -> bool:
    """Is `value` one of `names`, where ``"prefix:<arg>"`` stands for any non-empty argument?"""
    for name in names:
        prefix, sep, _ = name.partition("<")
        if value == name if not sep else (value.startswith(prefix) and len(value) > len(prefix)):
            return True
    return False


def check_dataset(value: str, key: str = "dataset") -> None:
    """A known data set name; ``mixed:<a>+<b>`` needs two or more known, plain components."""
    if value.startswith(MIXED_PREFIX):
        try:
            parts = parse_mixed(value)
        except ValueError as err:
            raise ConfigError(str(err)) from None
        plain = tuple(d for d in DATASETS if not d.startswith(MIXED_PREFIX))
        bad = [p for p in parts if not _named(p, plain)]
        if bad:
            raise ConfigError(f"{key} = {bad[0]!r} is unknown (a component of {value!r}); choose "
                              f"among {', '.join(plain)}")
    elif not _named(value, DATASETS):
        raise ConfigError(f"{key} = {value!r} is unknown; choose one of {', '.join(DATASETS)}")


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
    fedpia_gamma: float
    fedpia_integration: str
    fedpia_level: str
    fedpia_client_cost: str
    fedpia_samples: int
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
    sima_tau: float
    sima_ema: float
    sima_freq: int
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
    fedpia_iterations: int
    head: str
    group_conflict: str

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
        check_dataset(self.dataset)
        try:
            parse_partitioner(self.partitioner)
        except ValueError as err:
            detail = str(err).removesuffix(f" in partitioner {self.partitioner!r}")
            raise ConfigError(f"partitioner = {self.partitioner!r}: {detail}") from None
        if not _named(self.model, MODELS):
            raise ConfigError(f"model = {self.model!r} is unknown; choose one of {', '.join(MODELS)}")
        check_device_name(self.device)
        sizes = parse_model_sizes(self.model_sizes, self.model)
        if self.aggregation == "sima" and self.adapter not in ("lora", "pq-lora"):
            raise ConfigError(f"adapter = {self.adapter!r} has no global branch for aggregation = 'sima'; "
                              "use lora or pq-lora")
        if len(set(sizes)) > 1 and self.adapter != "pq-lora":
            raise ConfigError(f"model-sizes = {self.model_sizes!r} mixes sizes, which only adapter = "
                              f"'pq-lora' can share (got {self.adapter!r})")
        groups = parse_groups(self.client_groups)
        if (self.aggregation == "group-oracle" or self.group_conflict != "none") and not groups:
            raise ConfigError(f"aggregation = {self.aggregation!r} / group-conflict = "
                              f"{self.group_conflict!r} needs client-groups, one group id per partition "
                              "id, e.g. client-groups = '0,0,1,1'")
        if self.run_name in (".", "..") or "/" in self.run_name or "\\" in self.run_name:
            raise ConfigError(f"run-name = {self.run_name!r} must be a plain folder name")
        if strategies and self.strategy not in strategies:
            raise ConfigError(
                f"strategy = {self.strategy!r} is unknown; choose one of {', '.join(strategies)}")

    def model_kwargs(self, device: str = "cpu", client: bool = True) -> dict[str, object]:
        """`tasks.build_model` keywords of this run's model settings on ``device`` (resolved).
        The server's model (``client=False``) is float32, unquantised and without base weights
        (``base_weights=False``): it only reads the layer names and the initial adapters, which are
        float32 whatever the clients' base dtype, so an ``hf:<dir>`` needs only its config.json there."""
        from tasks.device import resolve_dtype  # torch: only where a model is built

        return {"lora_targets": tuple(t.strip() for t in self.lora_targets.split(",") if t.strip()),
                "vlm_layers": self.vlm_layers, "max_new_tokens": self.max_new_tokens,
                "dtype": resolve_dtype(self.dtype, device) if client else "float32",
                "quantization": self.quantization if client else "none",
                "gradient_checkpointing": self.gradient_checkpointing, "device": device,
                "shared_head": self.head == "shared", "base_weights": client}

    def to_dict(self) -> dict[str, object]:
        return {f.name.replace("_", "-"): getattr(self, f.name) for f in fields(self)}


def parse_groups(value: str, key: str = "client-groups") -> list[int]:
    """Group id per partition id (cycled like ``budgets``): comma-separated ints >= 0; "" = none."""
    parts = [p.strip() for p in value.split(",")] if value.strip() else []
    if not all(p.isdigit() for p in parts):
        raise ConfigError(f"{key} = {value!r} must list group ids (ints >= 0), comma-separated")
    return [int(p) for p in parts]


def group_of(partition_id: int, groups: Sequence[int]) -> int:
    """The group of a partition: ``client-groups`` (`parse_groups`) cycled like ``budgets``; 0
    where none is set."""
    return int(groups[partition_id % len(groups)]) if groups else 0


def parse_model_sizes(value: str, model: str, key: str = "model-sizes") -> list[str]:
    """FedMosaic client sizes per partition id (cycled like ``budgets``): ``base`` or ``large``;
    hf:<dir> and tiny-llava have one size only, so ``large`` there is refused, not dropped."""
    sizes = [s.strip() for s in value.split(",")] if value.strip() else []
    allowed = ("base",) if model.startswith("hf:") or model in ("tiny-llava", "smol-llava") else MODEL_SIZES
    bad = [s for s in sizes if s not in allowed]
    if not sizes or bad:
        raise ConfigError(f"{key} = {value!r} must list sizes among {', '.join(allowed)} "
                          f"(model = {model!r}), comma-separated")
    return sizes


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
        strict_low = key in STRICT_LOW
        if value < low or (strict_low and value == low) or (high is not None and value > high):
            raise ConfigError(f"{key} = {value!r} is out of range")
    return value


def default_config() -> dict[str, object]:
    """The defaults of ``[tool.flwr.app.config]`` in the project's pyproject.toml."""
    with open(PROJECT_ROOT / "pyproject.toml", "rb") as fh:
        return dict(tomllib.load(fh)["tool"]["flwr"]["app"]["config"])
