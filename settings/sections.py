"""The run-wide settings, in sections: the federation, the model, the data, local training, layer
scoring, evaluation and a run's output. Each is a frozen dataclass that declares its keys once (key,
default, choices or bounds, one line of help: `methods.base.setting`) and parses and checks them, as
a method's settings do; `settings.config.RunConfig` fuses them with privacy's and the methods'.
``python -m experiments.reference`` writes pyproject.toml's ``[tool.flwr.app.config]`` and the key table
of docs/reference.md from these declarations. A section's ``check`` judges what a choice list or a
bound cannot (a registry name, a pattern); checks across sections are `RunConfig`'s."""

from __future__ import annotations

import re
from dataclasses import dataclass

from metaheuristics.names import SEARCHES
from methods.base import MethodSettings, setting
from settings.errors import ConfigError
from tasks.data import registry as data_registry
from tasks.data.mixed import PREFIX as MIXED_PREFIX
from tasks.data.mixed import parse_mixed
from tasks.data.partition import parse_partitioner
from tasks.models import registry as model_registry
from tasks.names import ADAPTERS, DTYPES, HEADS, SCORE_MODES, VLM_LAYERS, parse_name

DEVICES = ("auto", "cpu", "cuda", "cuda:<i>", "mps")
_DEVICE = re.compile(r"auto|cpu|mps|cuda(:\d+)?")


@dataclass(frozen=True)
class FederationSettings(MethodSettings):
    """The federation: its rounds, its two axes (which layers each client trains, how updates
    combine), the clients' budgets and sampling, and who may speak for a site."""

    num_server_rounds: int = setting(5, "num-server-rounds", low=1, help="communication rounds")
    strategy: str = setting("f3ocus", "strategy",
                            help="which layers each client trains: a registered selection rule "
                                 "(methods.SELECTIONS)")
    aggregation: str = setting("masked-fedavg", "aggregation",
                               help="how updates are combined: a registered aggregation "
                                    "(methods.AGGREGATIONS)")
    optimizer: str = setting("nsga2", "optimizer", choices=SEARCHES,
                             help="the search of a rule that optimises (f3ocus), paper §5")
    budgets: str = setting("6,6,4,4,2", "budgets",
                           help="layer budget per partition id (cycled); node config layer-budget wins")
    fraction_train: float = setting(1.0, "fraction-train", low=0.0, high=1.0, strict_low=True,
                                    help="share of the clients sampled to train each round")
    fraction_evaluate: float = setting(1.0, "fraction-evaluate", low=0.0, high=1.0,
                                       help="share of the clients sampled to evaluate each round")
    min_nodes: int = setting(1, "min-nodes", low=1, help="fewest valid replies a round needs to aggregate")
    round_timeout: float = setting(3600.0, "round-timeout", low=0.0, strict_low=True,
                                   help="seconds an exchange waits for its replies")
    node_wait: float = setting(600.0, "node-wait", low=0.0, strict_low=True,
                               help="seconds the server waits for min-nodes identified sites before it stops "
                                    "the run, naming the sites missing")
    site_registry: str = setting("", "site-registry",
                                 help="absolute path of the JSON file {site: node id} written where each "
                                      "site's key is registered (deploy.launch, deploy.register): a node "
                                      "speaks only for the site its "
                                      "key is registered as; '' = the node's own word (simulation)")
    seed: int = setting(0, "seed", low=0, help="data split, initialisation, batches and sampling")


@dataclass(frozen=True)
class ModelSettings(MethodSettings):
    """The model every client builds, its adapters and what of it trains."""

    model: str = setting("minilm-effnet", "model",
                         help="a registered model (tasks.models.registry), e.g. hf:<local checkpoint dir>")
    adapter: str = setting("lora", "adapter", choices=ADAPTERS,
                           help="lora | layer (the layer's own weights) | pq-lora (FedMosaic)")
    lora_rank: int = setting(8, "lora-rank", low=1, help="rank r of LoRA and PQ-LoRA")
    lora_targets: str = setting("", "lora-targets",
                                help="LoRA only on these Linear modules of a layer (e.g. 'q_proj,v_proj'); "
                                     "'' = all")
    num_blocks: int = setting(4, "num-blocks", low=1, help="N_B: layers carrying PQ-LoRA (FedMosaic Eq. 7)")
    model_sizes: str = setting("base", "model-sizes",
                               help="client model size per partition id (cycled): base | large; node config "
                                    "model-size wins")
    head: str = setting("private", "head", choices=HEADS,
                        help="private: each client's own; shared: aggregated; frozen: a projector as loaded")
    projection: str = setting("trained", "projection", choices=("trained", "frozen"),
                              help="minilm-effnet's image->text projection: trained with the head | frozen "
                                   "(as drawn from the seed)")
    vlm_layers: str = setting("language", "vlm-layers", choices=VLM_LAYERS,
                              help="a generator's selectable layers: language (decoder blocks) | vision "
                                   "(vision blocks + projector) | both")
    max_new_tokens: int = setting(0, "max-new-tokens", low=0,
                                  help="greedy answer length; 0 = the data set's longest answer in tokens, "
                                       "plus the stop token")
    dtype: str = setting("auto", "dtype", choices=DTYPES,
                         help="of the frozen weights; auto: bfloat16 on CUDA where supported, else float32")
    quantization: str = setting("none", "quantization", choices=("none", "4bit"),
                                help="none | 4bit (QLoRA base on CUDA; pip install -e '.[qlora]')")
    gradient_checkpointing: bool = setting(False, "gradient-checkpointing",
                                           help="recompute block activations in the backward pass (less "
                                                "memory, more time)")
    device: str = setting("auto", "device",
                          help="auto | cpu | cuda | cuda:<i> | mps; node config device wins")

    def check(self) -> None:
        try:
            model_registry.parse_model(self.model)
        except ValueError:
            raise ValueError(f"model = {self.model!r} is unknown; choose one of "
                             f"{', '.join(model_registry.REGISTRY)}") from None
        check_device_name(self.device)


@dataclass(frozen=True)
class DataSettings(MethodSettings):
    """Each client's data: the data set, how it is split among the clients, how much of it is used."""

    dataset: str = setting("easy-vqa", "dataset",
                           help="a registered data set (tasks.data.registry), e.g. medmnist-vqa:<dir>, "
                                "mixed:<a>+<b>")
    partitioner: str = setting("by-question-type:0.5", "partitioner",
                               help="iid | dirichlet:<gamma> | by-question-type[:<gamma>]")
    max_train_samples: int = setting(0, "max-train-samples", low=0, help="per client, 0 = all")
    max_test_samples: int = setting(200, "max-test-samples", low=0, help="per client, 0 = all")
    validation_share: float = setting(0.0, "validation-share", low=0.0, high=0.95,
                                      help="share of each client's training data held out (at most "
                                           "max-test-samples) and evaluated in place of its test questions, "
                                           "for choosing settings; 0 = the test questions")
    client_groups: str = setting("", "client-groups",
                                 help="group id per partition id (cycled), e.g. '0,0,1,1' (group-oracle, "
                                      "group-conflict)")
    group_conflict: str = setting("none", "group-conflict", choices=("none", "answers"),
                                  help="none | answers: clients of odd groups see each question type's "
                                       "answers rotated")

    def check(self) -> None:
        check_dataset(self.dataset)
        try:
            parse_partitioner(self.partitioner)
        except ValueError as err:
            detail = str(err).removesuffix(f" in partitioner {self.partitioner!r}")
            raise ValueError(f"partitioner = {self.partitioner!r}: {detail}") from None


@dataclass(frozen=True)
class TrainingSettings(MethodSettings):
    """A client's local round (AdamW, supplement §C.3): steps and batch size, the adapters' and the
    client's own head's learning rates, weight decay and the share of rounds of linear warm-up."""

    local_steps: int = setting(20, "local-steps", low=1,
                               help="local optimisation steps per round")
    batch_size: int = setting(16, "batch-size", low=1,
                              help="local batch size (dp = 'sample': the expected Poisson batch)")
    physical_batch: int = setting(0, "physical-batch", low=0,
                                  help="most examples one forward and backward pass holds; a larger batch "
                                       "accumulates its gradients over chunks for one step (0 = whole batch)")
    lr: float = setting(1e-4, "lr", low=0.0, strict_low=True,
                        help="AdamW learning rate of the adapters (§C.3)")
    head_lr: float = setting(3e-3, "head-lr", low=0.0, strict_low=True,
                             help="AdamW learning rate of the client's own head and projection")
    weight_decay: float = setting(0.01, "weight-decay", low=0.0,
                                  help="AdamW weight decay")
    warmup_fraction: float = setting(0.1, "warmup-fraction", low=0.0, high=1.0,
                                     help="share of rounds with linear warm-up, then linear decay (§C.3)")

    @property
    def pass_size(self) -> int:
        """The most examples one forward and backward pass holds: what sizes a client's memory (its
        automatic budget, LNTK's pieces, evaluation batches)."""
        return self.physical_batch or self.batch_size


@dataclass(frozen=True)
class ScoringSettings(MethodSettings):
    """How a client scores its layers' importance: the LNTK Jacobian's mode and the batch it uses."""

    mode: str = setting("loss", "score-mode", choices=SCORE_MODES,
                        help="LNTK Jacobian: loss, logit, or paper (supplement Algorithm 1 as printed)")
    batch_size: int = setting(8, "score-batch-size", low=1,
                              help="samples a client scores its layers on")


@dataclass(frozen=True)
class EvaluationSettings(MethodSettings):
    """How a client evaluates: how a generator's answers are scored, how many questions before the
    last round, where the curve only needs to be followed, and the others' test data at the end."""

    eval_answers: str = setting("generated", "eval-answers", choices=("generated", "closed-set"),
                                help="generated (greedy answers, exact match) | closed-set (every round: the "
                                     "vocabulary's best-scored answer)")
    eval_exact_match: bool = setting(True, "eval-exact-match",
                                     help="eval-answers = 'closed-set': the last round also generates the "
                                          "answers and scores their exact match")
    eval_subset: int = setting(0, "eval-subset", low=0,
                               help="rounds before the last (round 0 too) score only the first N of each "
                                    "client's evaluation questions, a seeded sample fixed for the run; "
                                    "0 = all")
    eval_others: bool = setting(False, "eval-others",
                                help="last round: also evaluate on the other clients' test data ('Others' "
                                     "accuracy)")

    def questions(self, samples: list, last: bool) -> list:
        """A round's evaluation questions: all of them in the last round, else the first
        ``eval-subset``."""
        return samples if last or not self.eval_subset else samples[:self.eval_subset]


@dataclass(frozen=True)
class OutputSettings(MethodSettings):
    """Where a run writes its files, under which name, and whether it continues an earlier run."""

    run_name: str = setting("", "run-name",
                            help="results/<run-name>; '' = <strategy>-<optimizer>-<timestamp>")
    results_dir: str = setting("results", "results-dir", help="relative to the ServerApp's working directory")
    resume_from: str = setting("", "resume-from",
                               help="results/<run> to continue from its last completed round")
    progress_bar: bool = setting(False, "progress-bar",
                                 help="a progress bar over rounds instead of one line per round")

    def check(self) -> None:
        if self.run_name in (".", "..") or "/" in self.run_name or "\\" in self.run_name:
            raise ValueError(f"run-name = {self.run_name!r} must be a plain folder name")


def _named(value: str, names) -> bool:
    """Is `value` one of `names`, where ``"prefix:<arg>"`` stands for any non-empty argument?"""
    try:
        parse_name(value, names, "name")
    except ValueError:
        return False
    return True


def check_dataset(value: str, key: str = "dataset") -> None:
    """A known data set name; ``mixed:<a>+<b>`` needs two or more known, plain components
    (`ConfigError` in one line naming ``key`` otherwise)."""
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


RUN_WIDE: tuple[type[MethodSettings], ...] = (FederationSettings, ModelSettings, DataSettings,
                                              EvaluationSettings, OutputSettings)
"""The sections whose fields a run config reads as its own attributes (``config.model``); their field
names are unique across them (training's and scoring's are not: ``config.training.batch_size``)."""
