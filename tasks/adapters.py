"""Adapters and the federated / personal state of a `FederatedVLM`.

* adapter="lora" (default): peft LoRA (`inject_adapter_in_model`, the model stays a plain module)
  on every nn.Linear and every groups=1 nn.Conv2d inside every selectable layer; rank r,
  lora_alpha = 2r, no LoRA dropout. A layer's trainable unit is its lora_A / lora_B weights.
* adapter="layer": no adapter; a layer's trainable unit is all of its own parameters (the paper's
  full-layer fine-tuning, Table 5).
* adapter="pq-lora" (FedMosaic, `tasks.mosaic`): PQ-LoRA on the N_B block layers; a layer's
  trainable unit is its P and Q. With ``gated=True`` (SIMA) every adapted module has a trainable
  local branch, a frozen global branch and a gate (Eq. 9): the unit is the local branch, the
  received shared state is written into the global branch, and the local branches and gates are
  personal (kept on the client, `client_app.personal`).

Shared state travels as {f"{layer_index}:{parameter_name}": np.ndarray}; personal state (head,
image->text projection) as {parameter_name: np.ndarray} and is never averaged (supplement §C.3).
With a shared head (run config ``head = "shared"``) the answer head is shared state
instead: unit L (one past the L selectable layers), trained and sent by every client each round.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager

import numpy as np
import torch
from torch import nn

from tasks.models.base import FederatedVLM, is_under
from tasks.mosaic.modules import GATE, GLOBAL, LOCAL
from tasks.names import ADAPTERS, adapter_of


def lora_targets(model: FederatedVLM) -> list[str]:
    """Full names of the nn.Linear and groups=1 nn.Conv2d modules inside the selectable layers."""
    prefixes = [p for layer in model.layer_prefixes for p in layer]
    return [
        name
        for name, m in model.named_modules()
        if is_under(name, prefixes)
        and (isinstance(m, nn.Linear) or (isinstance(m, nn.Conv2d) and m.groups == 1))
        and (not model.lora_targets or name.rpartition(".")[2] in model.lora_targets)
    ]


def apply_adapter(model: FederatedVLM, adapter: str, lora_rank: int = 8, *, gated: bool = False,
                  num_blocks: int = 4, seed: int = 0) -> None:
    """Inject the adapter in place and freeze the backbone (trainable unit + personal stay on)."""
    entry = adapter_of(adapter)
    if entry.blocks or (gated and entry.peft):
        from tasks.mosaic.attach import attach

        attach(model, adapter, lora_rank, gated=gated, num_blocks=num_blocks, seed=seed)
    elif gated:
        raise ValueError(f"adapter = {adapter!r} has no global branch for SIMA; use lora or pq-lora")
    elif entry.peft:
        from peft import LoraConfig, inject_adapter_in_model  # only where adapters are injected

        if not isinstance(lora_rank, int) or lora_rank < 1:
            raise ValueError(f"lora_rank must be a positive int, got {lora_rank!r}")
        targets = lora_targets(model)
        if not targets:
            named = f" named {', '.join(model.lora_targets)}" if model.lora_targets else ""
            raise ValueError(f"no Linear/Conv2d modules{named} to adapt in {type(model).__name__}'s "
                             "selectable layers")
        config = LoraConfig(
            r=lora_rank, lora_alpha=2 * lora_rank, lora_dropout=0.0, target_modules=targets
        )
        inject_adapter_in_model(config, model)
        for name, param in model.named_parameters():  # float32 adapters over any base dtype:
            if "lora_" in name:  # the wire format is the same on every client
                param.data = param.data.float()
    model.adapter = adapter
    freeze_except(model, np.ones(len(model.layer_names), dtype=bool))


def shared_units(model: FederatedVLM) -> list[int]:
    """Indices of the shared units every client trains whatever its mask: the answer head
    (`FederatedVLM.shared_head`, run config ``head = "shared"``) as unit L, past the L layers."""
    return [len(model.layer_names)] if model.shared_head else []


def shared_head_prefixes(model: FederatedVLM) -> tuple[str, ...]:
    """What unit L of a shared head holds: the head and every other part a client would keep
    private (`personal_prefixes`, e.g. minilm-effnet's image->text projection). Sharing the head
    alone left each client its own projection between the averaged encoder and the averaged head,
    and FedAvg then learnt no more than local training (docs/results/sensitivity-aggregation.md)."""
    return model.personal_prefixes if model.shared_head else ()


def layer_parameter_names(model: FederatedVLM, layer: int) -> list[str]:
    """Names of the trainable unit of selectable layer `layer` (LoRA A/B, or the layer's weights);
    unit L of a shared head is the head with the model's other private parts
    (`shared_head_prefixes`)."""
    _check_layer(model, layer)
    if layer in shared_units(model):
        return [name for name, _ in model.named_parameters() if is_under(name, shared_head_prefixes(model))]
    prefixes = model.layer_prefixes[layer]
    if model.wire_names:  # FedMosaic modules: the local branch (P, Q or LoRA A, B)
        return [name for name, _ in model.named_parameters()
                if is_under(name, prefixes) and name in model.wire_names]
    lora = model.adapter in ADAPTERS and adapter_of(model.adapter).peft
    return [
        name
        for prefix in model.layer_prefixes[layer]
        for name, _ in model.get_submodule(prefix).named_parameters(prefix=prefix)
        if ("lora_" in name) == lora
    ]


def personal_parameter_names(model: FederatedVLM) -> list[str]:
    """Names of the personal parameters: the task head (+ image->text projection); for a gated
    (SIMA) model also every local branch and gate (Eq. 9: the client's own model)."""
    prefixes = () if model.shared_head else model.personal_prefixes
    return [n for n, _ in model.named_parameters() if is_under(n, prefixes)
            or (model.gated and (n in model.wire_names or n.endswith(GATE)))]


def layer_of_key(key: str) -> int:
    """The layer index of a shared-state key f"{layer_index}:{parameter_name}"."""
    head, sep, name = key.partition(":") if isinstance(key, str) else ("", "", "")
    if not sep or not name or not head.isdigit():
        raise ValueError(f"layer state key must look like '<layer>:<parameter>', got {key!r}")
    return int(head)


def get_layer_state(model: FederatedVLM, layers: Iterable[int]) -> dict[str, np.ndarray]:
    """Copies of the trainable unit of the chosen layers, keyed f"{layer}:{parameter_name}", and
    of the shared units every client trains (a shared head, `shared_units`)."""
    params = dict(model.named_parameters())
    return {
        f"{layer}:{model.wire_names.get(name, name)}": params[name].detach().cpu().numpy().copy()
        for layer in sorted(set(int(x) for x in layers) | set(shared_units(model)))
        for name in layer_parameter_names(model, layer)
    }


def set_layer_state(model: FederatedVLM, state: dict[str, np.ndarray]) -> None:
    """Write shared arrays into the model; validates every key/shape/dtype before writing any.

    Keys use the wire names of `get_layer_state`; a gated (SIMA) model writes them into its frozen
    global branch (Eq. 9), leaving the client's own local branch as it is."""
    params = dict(model.named_parameters())
    from_wire = {wire: name for name, wire in model.wire_names.items()}
    units: dict[int, set[str]] = {}
    checked = []
    for key, value in state.items():
        layer = layer_of_key(key)
        last = len(model.layer_names) - 1 + len(shared_units(model))
        if not 0 <= layer <= last:
            raise ValueError(f"layer state key {key!r}: layer {layer} out of range 0..{last}")
        if layer not in units:
            units[layer] = set(layer_parameter_names(model, layer))
        name = key.partition(":")[2]
        name = from_wire.get(name, name)
        if name not in units[layer]:
            raise ValueError(
                f"layer state key {key!r} is not a trainable parameter of layer {layer}"
            )
        if model.gated:
            name = name.replace(f".{LOCAL}.", f".{GLOBAL}.")
        checked.append((params[name], _checked_array(key, value, params[name])))
    _copy(checked)


def get_personal_state(model: FederatedVLM) -> dict[str, np.ndarray]:
    """Copies of the personal parameters (never averaged)."""
    params = dict(model.named_parameters())
    return {n: params[n].detach().cpu().numpy().copy() for n in personal_parameter_names(model)}


def set_personal_state(model: FederatedVLM, state: dict[str, np.ndarray]) -> None:
    """Write personal arrays; validates every key/shape/dtype before writing any."""
    params = dict(model.named_parameters())
    personal = set(personal_parameter_names(model))
    checked = []
    for name, value in state.items():
        if name not in personal:
            raise ValueError(f"personal state key {name!r} is not a personal parameter")
        checked.append((params[name], _checked_array(name, value, params[name])))
    _copy(checked)


@contextmanager
def gradient_flags(params: Mapping[str, nn.Parameter], on: bool = False) -> Iterator[None]:
    """Within the block ``params`` require gradients where ``on`` (else as they were, for the block to
    set); afterwards every one's ``requires_grad`` is what it was before."""
    flags = {name: p.requires_grad for name, p in params.items()}
    try:
        if on:
            for p in params.values():
                p.requires_grad_(True)
        yield
    finally:
        for name, p in params.items():
            p.requires_grad_(flags[name])


def freeze_except(model: FederatedVLM, mask: np.ndarray) -> None:
    """requires_grad only for the masked layers' trainable unit and the personal parameters."""
    keep = set(personal_parameter_names(model)) - set(model.wire_names)  # unmasked local branches off
    for layer in [*np.flatnonzero(check_mask(model, mask)), *shared_units(model)]:
        keep.update(layer_parameter_names(model, int(layer)))
    for name, p in model.named_parameters():
        p.requires_grad_(name in keep)


def check_mask(model: FederatedVLM, mask: np.ndarray) -> np.ndarray:
    """A boolean (L,) layer mask; ValueError on a wrong type, length or values."""
    arr = np.asarray(mask) if isinstance(mask, (np.ndarray, list, tuple)) else None
    n = len(model.layer_names)
    if arr is None or arr.shape != (n,):
        shape = getattr(arr, "shape", type(mask).__name__)
        raise ValueError(f"mask must be a length-{n} array (one entry per layer), got {shape}")
    if arr.dtype == bool:
        return arr
    if np.issubdtype(arr.dtype, np.integer) and np.isin(arr, (0, 1)).all():
        return arr.astype(bool)
    raise ValueError(f"mask must be boolean (or 0/1 integers), got dtype {arr.dtype}")


def _check_layer(model: FederatedVLM, layer: int) -> None:
    last = len(model.layer_names) - 1 + len(shared_units(model))
    if not isinstance(layer, (int, np.integer)) or not 0 <= layer <= last:
        raise ValueError(f"layer must be an int in 0..{last}, got {layer!r}")


def _checked_array(key: str, value: np.ndarray, param: torch.Tensor) -> np.ndarray:
    expected = torch.empty((), dtype=param.dtype).numpy().dtype
    if not isinstance(value, np.ndarray):
        raise ValueError(f"state[{key!r}] must be a numpy array, got {type(value).__name__}")
    if value.shape != tuple(param.shape):
        raise ValueError(f"state[{key!r}] has shape {value.shape}, expected {tuple(param.shape)}")
    if value.dtype != expected:
        raise ValueError(f"state[{key!r}] has dtype {value.dtype}, expected {expected}")
    return value


@torch.no_grad()
def _copy(pairs: list[tuple[torch.Tensor, np.ndarray]]) -> None:
    for param, value in pairs:
        param.copy_(torch.from_numpy(value))
