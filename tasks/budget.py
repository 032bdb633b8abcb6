"""Layer budget "auto": supplement Algorithm 46 (Compute Fine-Tunable Layers).

available = free device memory × (1 − safety_margin); walk the selectable layers in model order,
subtract each layer's fine-tuning memory while it fits, and count them. Free memory is
`torch.cuda.mem_get_info` on CUDA and MemAvailable from /proc/meminfo on CPU (sysconf elsewhere).
A layer's memory estimate = 3 × its trainable unit's bytes (gradient + AdamW's two moments; the
weights themselves are already resident) + batch_size × the bytes of the outputs of its leaf
modules for one sample (the activations autograd keeps), measured with forward hooks on a blank
sample. Deviation: the result is clamped to 1..L (a client with too little memory still trains
one layer, as every client must receive at least one layer from the server).
"""

from __future__ import annotations

import os

import numpy as np
import torch

from tasks.adapters import is_under, layer_parameter_names
from tasks.device import resolve_device
from tasks.models.base import FederatedVLM


def estimate_budget(model: FederatedVLM, batch_size: int, device: str, safety_margin: float = 0.2) -> int:
    """Number of layers k (1..L) whose fine-tuning fits the free memory of `device`."""
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
        raise ValueError(f"batch_size must be a positive int, got {batch_size!r}")
    if not 0.0 <= safety_margin < 1.0:
        raise ValueError(f"safety_margin must be in [0, 1), got {safety_margin!r}")
    available = free_memory_bytes(resolve_device(device)) * (1.0 - safety_margin)
    count = 0
    for need in layer_memory_bytes(model, batch_size):
        if need > available:
            break
        available -= need
        count += 1
    return int(min(max(count, 1), len(model.layer_names)))


def free_memory_bytes(device: str) -> int:
    """Free memory of the device in bytes."""
    if device.startswith("cuda"):
        return int(torch.cuda.mem_get_info(torch.device(device))[0])
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return int(os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE"))


def layer_memory_bytes(model: FederatedVLM, batch_size: int) -> np.ndarray:
    """(L,) estimated bytes to fine-tune each layer with this batch size (see module doc)."""
    from tasks.data import Sample

    named = dict(model.named_parameters())
    unit = np.array(
        [
            sum(named[n].numel() * named[n].element_size() for n in layer_parameter_names(model, i))
            for i in range(len(model.layer_names))
        ],
        dtype=np.float64,
    )
    activations = np.zeros(len(model.layer_names))
    hooks = []
    for name, module in model.named_modules():
        owner = [i for i, p in enumerate(model.layer_prefixes) if is_under(name, p)]
        if owner and not list(module.children()):
            hooks.append(module.register_forward_hook(_counter(activations, owner[0])))
    target = 0 if model.task == "vqa" else np.zeros(model.num_outputs, np.float32)
    blank = Sample(np.zeros((model.image_size, model.image_size, 3), np.uint8), "what", target, "")
    try:
        with torch.no_grad():
            batch = model.collate([blank])
            model({k: v.to(model.device) for k, v in batch.items()})
    finally:
        for h in hooks:
            h.remove()
    return 3.0 * unit + batch_size * activations


def _counter(totals: np.ndarray, layer: int):
    def hook(module, args, output) -> None:
        outputs = output if isinstance(output, (tuple, list)) else (output,)
        totals[layer] += sum(o.numel() * o.element_size() for o in outputs if isinstance(o, torch.Tensor))

    return hook
