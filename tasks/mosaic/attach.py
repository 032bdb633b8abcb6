"""Attach FedMosaic's adapters to a `FederatedVLM` and name what travels (paper §4.2.1, Eq. 7).

* ``adapter = "pq-lora"``: PQ-LoRA on the layers I_1..I_{N_B} of Eq. 7 (over the model's selectable
  layers), on every Linear / 1x1 Conv2d of the layer's *last* block (an image stage's final MBConv
  block, a transformer block), i.e. "each block's final layer". The other layers keep no adapter, so
  only P and Q are trained and sent. Models of two sizes share P and Q through *canonical* wire
  names ``"<layer name>.<module path inside that block>.mosaic_local.P"`` that do not depend on how
  deep the block sits in either model (block-wise aggregation: same relative depth, same key).
* ``gated=True`` (SIMA): every adapted module carries a local and a frozen global branch and a gate
  (Eq. 9); with ``adapter = "lora"`` that is every module peft's LoRA would wrap.
"""

from __future__ import annotations

from torch import nn

from tasks.models.base import is_under
from tasks.mosaic.modules import LOCAL, MosaicLinear, block_layers
from tasks.names import adapter_of


def _targets(model: nn.Module, prefixes: tuple[str, ...]) -> list[str]:
    return [name for name, m in model.named_modules() if is_under(name, prefixes)
            and (isinstance(m, nn.Linear) or (isinstance(m, nn.Conv2d) and m.groups == 1))]


def pq_modules(model: nn.Module, num_blocks: int) -> dict[str, tuple[int, str]]:
    """Module name -> (layer index, canonical name) of every PQ-LoRA site (Eq. 7)."""
    sites = {}
    for layer in block_layers(len(model.layer_names), num_blocks):
        last = model.layer_prefixes[layer][-1]
        for name in _targets(model, (last,)):
            sites[name] = (layer, f"{model.layer_names[layer]}{name[len(last):]}")
    return sites


def attach(model: nn.Module, adapter: str, rank: int, *, gated: bool, num_blocks: int, seed: int) -> None:
    """Replace the adapted modules by `MosaicLinear` in place and fill ``model.wire_names``."""
    if adapter_of(adapter).blocks:
        sites = pq_modules(model, num_blocks)
        kind = "pq"
    else:
        prefixes = tuple(p for layer in model.layer_prefixes for p in layer)
        sites = {name: (-1, name) for name in _targets(model, prefixes)}
        kind = "lora"
    if not sites:
        raise ValueError(f"no Linear/Conv2d modules to adapt in {type(model).__name__}")
    wire = {}
    for name, (_, canonical) in sites.items():
        module = MosaicLinear(model.get_submodule(name), kind, rank, gated=gated, name=canonical, seed=seed)
        model.set_submodule(name, module)
        for param, _ in getattr(module, LOCAL).named_parameters():
            wire[f"{name}.{LOCAL}.{param}"] = f"{canonical}.{LOCAL}.{param}"
    model.wire_names = wire
    model.gated = gated
