"""This node's own settings: node config (a site's ``--node-config``) wins over the run config.

Only the SuperNode can judge some values: whether it has the data folder, the device, a writable
``state-dir``, and a ``layer-budget`` its model can take. Each is checked here on the node itself;
a bad one raises `settings.ConfigError` naming the key and the value, which the ClientApp turns
into an error reply (`client_app.replies`), so the server logs the reason and the round goes on
with the other nodes.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import ClassVar

from methods.base import check_value
from privacy.settings import PrivacySettings
from settings import (
    Budget,
    ConfigError,
    RunConfig,
    budget_of,
    check_data_here,
    check_device_here,
    parse_budget,
    parse_budgets,
)
from settings.config import parse_model_sizes
from settings.local import FOLDER_DATASETS
from settings.sections import check_dataset, check_device_name
from tasks.names import ADAPTER_REGISTRY, CLIENT_ID, adapter_of

NODE = "node config"


@dataclass(frozen=True)
class PrivacyPin:
    """What a site pins of its privacy in its node config (None: not pinned): ``dp`` (the mode),
    ``dp-epsilon`` (its ε budget over every run on its data: its ledger's cap), ``dp-delta`` and
    ``dp-clip`` (the most it accepts). A run config that asks for less privacy is refused here, on
    the site, whatever the server sends."""

    KEYS: ClassVar[dict[str, str]] = {"dp": "mode", "dp-epsilon": "epsilon", "dp-delta": "delta",
                                      "dp-clip": "clip"}
    mode: str | None = None
    epsilon: float | None = None
    delta: float | None = None
    clip: float | None = None

    @property
    def pinned(self) -> bool:
        return any(v is not None for v in (self.mode, self.epsilon, self.delta, self.clip))

    @property
    def required_mode(self) -> str | None:
        """The mode a run must have: the pinned one, else ``sample`` where an ε, δ or clip is pinned
        (only DP-SGD on the site honours them whatever the server does), else none required."""
        return self.mode or ("sample" if self.pinned else None)

    def refusal(self, privacy: PrivacySettings, validation_share: float = 0.0) -> str:
        """Why the run's ``dp-*`` settings ask for less privacy than pinned ("" where they do not);
        δ is compared once the site knows its examples (`check_delta`)."""
        mode = self.required_mode
        if mode is not None and privacy.mode != mode:
            return (f"node config pins this site's privacy (dp = {mode!r}), but the run asks "
                    f"dp = {privacy.mode!r}")
        if privacy.mode == "none":
            return ""
        if self.epsilon is not None and privacy.epsilon > self.epsilon:
            return (f"node config dp-epsilon = {self.epsilon:g} pins this site's budget, but the run asks "
                    f"dp-epsilon = {privacy.epsilon:g}")
        if self.epsilon is not None and privacy.mode == "client" and privacy.max_epsilon > self.epsilon:
            return (f"node config dp-epsilon = {self.epsilon:g} pins this site's budget, but the run's cap "
                    f"is dp-max-epsilon = {privacy.max_epsilon:g}")
        if self.clip is not None and privacy.clip > self.clip:
            return (f"node config dp-clip = {self.clip:g} is this site's most, but the run asks "
                    f"dp-clip = {privacy.clip:g}")
        if self.pinned and validation_share > 0:
            return (f"node config pins this site's privacy, but the run asks validation-share = "
                    f"{validation_share:g}: its held-out questions are training examples whose metrics "
                    "no ε covers")
        return ""

    def check_delta(self, delta: float) -> None:
        """ConfigError where the run's δ (resolved for this site's examples) passes the pinned one."""
        if self.delta is not None and delta > self.delta:
            raise ConfigError(f"node config dp-delta = {self.delta:g} is this site's most, but the run's "
                              f"δ is {delta:.3g}: refused before training")


@dataclass(frozen=True)
class NodeSettings:
    """Checked per-node values; ``budget`` is None when neither node nor run config sets one."""

    partition_id: int
    num_partitions: int
    dataset: str
    device: str  # a torch device that exists on this node
    budget: Budget | None
    budget_source: str  # the setting the budget came from, for error messages
    model_size: str = "base"  # FedMosaic client model size: node config model-size, else model-sizes
    site: str = ""  # node config site: this site's name, its client id in a deployment
    pin: PrivacyPin = field(default_factory=lambda: PrivacyPin())  # what this site pins of its privacy
    ledger: Path | None = None  # where this site keeps its privacy ledger, where it says (`ledger_file`)

    @property
    def client_id(self) -> str:
        """The stable identity the server keys sampling, personal models and records by: the
        site's name, else ``partition-<id>`` (a simulation's partition, the same on every engine)."""
        return self.site or f"partition-{self.partition_id}"


def _int(node: Mapping, key: str, default: int, low: int) -> int:
    value = node.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        raise ConfigError(f"{NODE} {key} = {value!r} must be an int >= {low}")
    return value


def _dataset(node: Mapping, config: RunConfig) -> str:
    """The run's data set, or the node's own; ``data-dir`` points a folder data set at this site's
    copy (``medmnist-vqa:<data-dir>``, ``hf-disk:<data-dir>?<options>``)."""
    dataset, where = config.dataset, ""
    if "dataset" in node:
        dataset = node["dataset"]
        where = f"{NODE} dataset = {dataset!r}"
        if not isinstance(dataset, str):
            raise ConfigError(f"{where} must be a string")
        check_dataset(dataset, key=f"{NODE} dataset")
    if "data-dir" in node:
        folder, kind = node["data-dir"], dataset.split(":", 1)[0]
        where = f"{NODE} data-dir = {folder!r}"
        if not isinstance(folder, str) or not folder:
            raise ConfigError(f"{where} must be a folder path")
        if kind not in FOLDER_DATASETS:
            raise ConfigError(f"{where} applies to {', '.join(FOLDER_DATASETS)} data only, "
                              f"not dataset = {dataset!r}")
        options = dataset.partition(":")[2].partition("?")[1:]  # hf-disk's "?column=..." stays
        dataset = f"{kind}:{folder}{''.join(options)}"
    check_data_here(dataset, where)
    return dataset


def check_folder(node: Mapping, key: str = "state-dir") -> None:
    """Node config ``key`` (``state-dir``: where the client keeps its own head, `client_app.personal`;
    ``privacy-dir``: its privacy ledger) is a folder this node can create and write."""
    value = node.get(key)
    if value is None or value == "":
        return
    where = f"{NODE} {key} = {value!r}"
    if not isinstance(value, str):
        raise ConfigError(f"{where} must be a folder path")
    try:
        Path(value).mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise ConfigError(f"{where} cannot be created: {err.strerror or err}") from None
    if not os.access(value, os.W_OK | os.X_OK):
        raise ConfigError(f"{where} is not writable by this node")


def _site(node: Mapping) -> str:
    """Node config ``site``: letters, digits, '.', '_' and '-' (it names the site's files)."""
    site = node.get("site", "")
    if not isinstance(site, str) or (site and not CLIENT_ID.fullmatch(site)):
        raise ConfigError(f"{NODE} site = {site!r} must be 1-64 letters, digits, '.', '_' or '-'")
    return site


def _pin(node: Mapping) -> PrivacyPin:
    """The ``dp-*`` keys this node config pins (`PrivacyPin`), each checked as its run-config key is
    (`privacy.settings.PrivacySettings`'s declaration)."""
    values = {}
    for f in fields(PrivacySettings):
        key = f.metadata["key"]
        if key in PrivacyPin.KEYS and key in node:
            meta = f.metadata
            try:
                kind = f.type if isinstance(f.type, str) else f.type.__name__
                values[PrivacyPin.KEYS[key]] = check_value(key, node[key], kind, meta["choices"],
                                                           meta["low"], meta["high"], meta["strict_low"])
            except ValueError as err:
                raise ConfigError(f"{NODE} {err}") from None
    return PrivacyPin(**values)


def ledger_file(node: Mapping, dataset: str, pid: int, num: int, pin: PrivacyPin) -> Path | None:
    """Where this site keeps its privacy ledger, one file per data set it trains on: ``<privacy-dir>/``,
    else ``<state-dir>/privacy/``; None where the node says neither (a simulation: the run's folder
    keeps it, `client_app.personal`). The file is named by what the node config says of its data
    (``dataset``, ``data-dir``, ``partition-id``, ``num-partitions``), never by a value of the run
    config, so no name or option the server sends opens a fresh ledger; a site that pins its privacy
    must say where its ledger lives and which data its ε counts against. ``dataset``: the data set
    resolved, the name of a node that states neither (no pin)."""
    state = node.get("state-dir")
    folder = node.get("privacy-dir") or (Path(str(state)) / "privacy" if state else None)
    if pin.pinned and folder is None:
        raise ConfigError(f"{NODE} pins this site's privacy, so its ledger must live on the site: set {NODE} "
                          "privacy-dir (or state-dir)")
    own = {key: node[key] for key in ("dataset", "data-dir") if key in node}
    if pin.pinned and not own:
        raise ConfigError(f"{NODE} pins this site's privacy: pin the data its ε counts against too ({NODE} "
                          "dataset or data-dir)")
    if folder is None:
        return None
    check_folder(node, "privacy-dir")
    named = "|".join(f"{k}={v}" for k, v in sorted(own.items())) if own else dataset
    key = hashlib.sha256(f"{named}|{pid}|{num}".encode()).hexdigest()[:12]
    return Path(str(folder)) / f"dp-ledger-{key}.safetensors"


def node_settings(node: Mapping, config: RunConfig) -> NodeSettings:
    """Check and merge this node's config with the run config (node config wins)."""
    pid = _int(node, "partition-id", 0, 0)
    num = _int(node, "num-partitions", 1, 1)
    if pid >= num:
        raise ConfigError(f"{NODE} partition-id = {pid} must be below num-partitions = {num}")
    dataset = _dataset(node, config)
    device_key = f"{NODE} device" if "device" in node else "device"
    device = node.get("device", config.device)
    if not isinstance(device, str):
        raise ConfigError(f"{device_key} = {device!r} must be a string")
    check_device_name(device, key=device_key)
    resolved = check_device_here(device, key=device_key)
    check_folder(node)
    if "layer-budget" in node:
        source = f"{NODE} layer-budget"
        budget: Budget | None = parse_budget(node["layer-budget"], source)
    else:
        source, budget = "budgets", budget_of(parse_budgets(config.budgets), pid)
    pin = _pin(node)
    refusal = pin.refusal(config.privacy, config.validation_share)
    if refusal:
        raise ConfigError(f"{refusal}: refused before training")
    return NodeSettings(pid, num, dataset, resolved, budget, source, _model_size(node, config, pid),
                        _site(node), pin, ledger_file(node, dataset, pid, num, pin))


def _model_size(node: Mapping, config: RunConfig, pid: int) -> str:
    """Node config ``model-size`` wins; else the run config's ``model-sizes`` list, cycled by id."""
    if "model-size" not in node:
        sizes = parse_model_sizes(config.model_sizes, config.model)
        return sizes[pid % len(sizes)]
    value = node["model-size"]
    if not isinstance(value, str):
        raise ConfigError(f"{NODE} model-size = {value!r} must be a string")
    size = parse_model_sizes(value, config.model, key=f"{NODE} model-size")
    if len(size) != 1:
        raise ConfigError(f"{NODE} model-size = {value!r} must name one size")
    if size[0] != "base" and not adapter_of(config.adapter).blocks:
        spanning = " or ".join(repr(a.name) for a in ADAPTER_REGISTRY.values() if a.blocks)
        raise ConfigError(f"{NODE} model-size = {value!r} needs adapter = {spanning}, which spans model "
                          f"sizes (got {config.adapter!r})")
    return size[0]
