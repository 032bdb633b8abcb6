"""What a client needs for every message: its data partition, its model, its budget and device.

Partitions and models are built once per process and reused across rounds (a Ray actor or a
SuperNode serves many messages); every message then loads the current global adapters and the
client's own personal state into the cached model, so no state leaks between clients or rounds.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import numpy as np
from flwr.app import Context

import tasks
from client_app.personal import load_personal
from server_app.config import RunConfig, parse_budgets


@dataclass(frozen=True)
class ClientSetup:
    """One client's resolved settings, data and (cached) model."""

    config: RunConfig
    partition_id: int
    num_partitions: int
    partition: tasks.Partition
    model: tasks.FederatedVLM
    initial_personal: dict[str, np.ndarray]
    device: str


def _node_setting(context: Context, key: str, default: object) -> object:
    """Node config wins over run config (per-site settings of a real deployment)."""
    return context.node_config.get(key, default)


@lru_cache(maxsize=4)
def _partition(dataset: str, pid: int, num: int, partitioner: str, seed: int, max_train: int,
               max_test: int, state_dir: str = "") -> tasks.Partition:
    if state_dir:  # a deployed site: its prepared partition, memory-mapped from its state-dir
        from tasks.data.cache import cached_partition

        return cached_partition(Path(state_dir) / "cache" / "partitions", dataset, pid, num,
                                partitioner, seed, max_train or None, max_test or None)
    return tasks.load_partition(dataset, pid, num, partitioner, seed=seed,
                                max_train=max_train or None, max_test=max_test or None)


@lru_cache(maxsize=2)
def _model(name: str, num_outputs: int, task: str, adapter: str, rank: int, seed: int,
           device: str) -> tuple[tasks.FederatedVLM, dict[str, np.ndarray]]:
    model = tasks.build_model(name, num_outputs, task=task, adapter=adapter, lora_rank=rank,
                              seed=seed).to(device)
    return model, tasks.get_personal_state(model)


def client_setup(context: Context) -> ClientSetup:
    """Resolve this node's data, model and device from node and run config."""
    config = RunConfig.from_mapping(context.run_config)
    pid = int(_node_setting(context, "partition-id", 0))
    num = int(_node_setting(context, "num-partitions", 1))
    dataset = str(_node_setting(context, "dataset", config.dataset))
    if "data-dir" in context.node_config:
        dataset = f"{dataset.split(':', 1)[0]}:{context.node_config['data-dir']}"
    partition = _partition(dataset, pid, num, config.partitioner, config.seed, config.max_train_samples,
                           config.max_test_samples, str(_node_setting(context, "state-dir", "")))
    device = tasks.resolve_device(str(_node_setting(context, "device", config.device)))
    model, initial = _model(config.model, len(partition.labels), partition.task, config.adapter,
                            config.lora_rank, config.seed, device)
    return ClientSetup(config, pid, num, partition, model, initial, device)


def load_global(
    setup: ClientSetup, context: Context, state: dict[str, np.ndarray], run_dir: str, *, before: int
) -> None:
    """Load the global adapters and this client's own newest personal state from a round < `before`."""
    tasks.set_layer_state(setup.model, state)
    personal = load_personal(context, run_dir, before=before)
    tasks.set_personal_state(setup.model, personal or setup.initial_personal)


def resolve_budget(setup: ClientSetup, context: Context) -> int:
    """This client's layer budget k_i.

    Node config ``layer-budget`` (int or ``auto``) wins; otherwise the run config ``budgets`` list
    indexed by partition id (cycled when there are more clients than entries); with neither, every
    layer. ``auto`` estimates k from free device memory (supplement Algorithm 46).
    """
    num_layers = len(setup.model.layer_names)
    budgets = parse_budgets(setup.config.budgets)
    value: object = budgets[setup.partition_id % len(budgets)] if budgets else num_layers
    if "layer-budget" in context.node_config:
        value = context.node_config["layer-budget"]
        if isinstance(value, str) and value != "auto":
            value = parse_budgets(value, key="node config layer-budget")[0]
    if value == "auto":
        return tasks.estimate_budget(setup.model, setup.config.batch_size, setup.device)
    return int(value)
