"""The coordinator's weightless model: a checkpoint's module tree from its config.

The server reads only layer names and initial adapters, so it builds the backbone without a single
base weight; `tasks.build.build_model` (``base_weights=False``) then injects adapters as usual.
"""

from __future__ import annotations

import torch
from torch import nn
from transformers import PreTrainedConfig, PreTrainedModel

from tasks.models.hf_common import quiet_transformers


def skeleton(auto_class: type, config: PreTrainedConfig,
             dtype: torch.dtype = torch.float32) -> PreTrainedModel:
    """``auto_class``'s model of ``config`` without its weights: built on the meta device (nothing
    allocated, no init drawn from the torch RNG), then every parameter and buffer becomes a
    zero-stride view of one ``dtype`` element on the CPU. The module tree, names and shapes are the
    checkpoint's, so layer discovery and adapter injection (peft moves LoRA to its base layer's
    device) run unchanged on real CPU tensors, while the base costs a few bytes per tensor."""
    with torch.device("meta"), quiet_transformers():
        model = auto_class.from_config(config, dtype=dtype)
    for module in model.modules():
        for name, param in module.named_parameters(recurse=False):
            module._parameters[name] = nn.Parameter(_placeholder(param.shape, dtype), requires_grad=False)
        for name, buffer in module.named_buffers(recurse=False):
            module._buffers[name] = _placeholder(buffer.shape, buffer.dtype)
    return model


def _placeholder(shape: torch.Size, dtype: torch.dtype) -> torch.Tensor:
    """A CPU tensor of ``shape`` whose entries all view one zero element: no memory per entry."""
    return torch.zeros((), dtype=dtype).expand(shape)
