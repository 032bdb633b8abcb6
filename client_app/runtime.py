"""What a client needs for every message: its data partition, its model, its budget and device.

Partitions and models are built once per process and reused across rounds (a Ray actor or a
SuperNode serves many messages); every message then loads the current global adapters and the
client's own personal state into the cached model, so no state leaks between clients or rounds.
Settings are checked first (`client_app.node`); a bad one raises `settings.ConfigError`.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import numpy as np
from flwr.app import ConfigRecord, Context

import tasks
from client_app.node import NodeSettings, node_settings
from client_app.personal import load_personal
from flower_compat import check_version
from settings import ConfigError, RunConfig, check_fits
from tasks.data.partition import group_of

BUDGET_KEY = "layer-budget"  # context.state record: the budget this node last reported


@dataclass(frozen=True)
class ClientSetup:
    """One client's resolved settings, data and (cached) model."""

    config: RunConfig
    node: NodeSettings
    partition: tasks.Partition
    model: tasks.FederatedVLM
    initial_personal: dict[str, np.ndarray]

    @property
    def partition_id(self) -> int:
        return self.node.partition_id

    @property
    def device(self) -> str:
        return self.node.device


@lru_cache(maxsize=8)  # a validation split holds two entries: the partition and its split
def _partition(dataset: str, pid: int, num: int, partitioner: str, seed: int, max_train: int,
               max_test: int, validation: float = 0.0, state_dir: str = "") -> tasks.Partition:
    if validation:
        from tasks.data.validation import hold_out

        return hold_out(_partition(dataset, pid, num, partitioner, seed, max_train, max_test, 0.0, state_dir),
                        validation, seed * 1_000_003 + pid, max_test)
    if state_dir:  # a deployed site: its prepared partition, memory-mapped from its state-dir
        from tasks.data.cache import cached_partition

        return cached_partition(Path(state_dir) / "cache" / "partitions", dataset, pid, num,
                                partitioner, seed, max_train or None, max_test or None)
    return tasks.load_partition(dataset, pid, num, partitioner, seed=seed,
                                max_train=max_train or None, max_test=max_test or None)


def client_partition(config: RunConfig, dataset: str, pid: int, num: int, state_dir: str = ""
                     ) -> tasks.Partition:
    """Partition `pid` of `num` as its client sees it: with ``validation-share`` its evaluation split
    is that share of its training samples (`tasks.data.validation.hold_out`); with
    ``group-conflict = "answers"`` a
    client of an odd group (``client-groups``) sees the answers rotated (a planted conflict,
    `tasks.data.conflict`)."""
    partition = _partition(dataset, pid, num, config.partitioner, config.seed, config.max_train_samples,
                           config.max_test_samples, config.validation_share, state_dir)
    if config.group_conflict == "answers" and group_of(pid, config.groups) % 2:
        from tasks.data import answers_by_type
        from tasks.data.conflict import rotate_answers

        partition = rotate_answers(partition, answers_by_type(dataset, config.seed))
    return partition


@lru_cache(maxsize=2)
def _model(spec: tasks.ModelSpec, num_outputs: int, task: str
           ) -> tuple[tasks.FederatedVLM, dict[str, np.ndarray]]:
    model = tasks.build_model(spec, num_outputs, task).to(spec.device)
    return model, tasks.get_personal_state(model)


def client_setup(context: Context) -> ClientSetup:
    """Check this node's Flower, node and run config, then resolve its data, model and device."""
    check_version(what="installed for this ClientApp")
    config = RunConfig.from_mapping(context.run_config)
    node = node_settings(context.node_config, config)
    try:
        partition = client_partition(config, node.dataset, node.partition_id, node.num_partitions,
                                     str(context.node_config.get("state-dir", "")))
    except (ValueError, OSError) as err:  # e.g. a partition left without samples, a bad file
        raise ConfigError(f"dataset = {node.dataset!r} cannot be loaded on this node: {err}") from None
    try:
        model, initial = _model(config.model_spec(node.device, size=node.model_size), len(partition.labels),
                                partition.task)
    except (ValueError, OSError) as err:
        raise ConfigError(f"model = {config.model!r} cannot be built on this node: {err}") from None
    model.answers = tuple(partition.labels)  # a generator writes and scores answers as text
    return ClientSetup(config, node, partition, model, initial)


def load_global(
    setup: ClientSetup, context: Context, state: dict[str, np.ndarray], run_dir: str, *, before: int
) -> dict[str, np.ndarray]:
    """Load the global adapters and this client's own newest personal state from a round < `before`;
    return that stored state (with the entries that are no model parameter, which a method's client
    hook or `privacy.sample` keep there)."""
    tasks.set_layer_state(setup.model, state)
    personal = load_personal(context, run_dir, before=before) or setup.initial_personal
    parameters = set(tasks.personal_parameter_names(setup.model))
    tasks.set_personal_state(setup.model, {k: v for k, v in personal.items() if k in parameters})
    return personal


def resolve_budget(setup: ClientSetup, context: Context) -> int:
    """This client's layer budget k_i, remembered in ``context.state`` for the train step.

    Node config ``layer-budget`` (int or ``auto``) wins; otherwise the run config ``budgets`` list
    indexed by partition id (cycled when there are more clients than entries); with neither, every
    layer. ``auto`` estimates k from free device memory (supplement Algorithm 46).
    """
    num_layers = len(setup.model.layer_names)
    value = setup.node.budget if setup.node.budget is not None else num_layers
    check_fits(value, num_layers, f"{setup.node.budget_source} = {value!r}")
    if value == "auto":
        value = tasks.estimate_budget(setup.model, setup.config.training.pass_size, setup.device)
    context.state[BUDGET_KEY] = ConfigRecord({"budget": int(value)})
    return int(value)


def reported_budget(setup: ClientSetup, context: Context) -> int:
    """The budget this node last reported with its scores (resolved afresh if it has none)."""
    record = context.state.config_records.get(BUDGET_KEY)
    return int(record["budget"]) if record is not None else resolve_budget(setup, context)
