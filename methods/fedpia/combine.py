"""FedPIA client-level PIA (paper, "Methodology: FedPIA", Client-level PIA), the torch side.

The client keeps its own adapter from its last round (`methods.fedpia.client` stores it). On receiving the
global adapter it aligns the global to its own, LoRA module by LoRA module, with the OT of
`methods.fedpia.alignment`, the supports being (``cost = "activation"``, the paper's choice) each neuron's
activations: neuron i's support is (ψ(A x_1)_i, ..., ψ(A x_m)_i) over a seeded random batch of m of
the client's samples, ψ the mean over a sample's positions (tokens, pixels) — the paper's "mean
neuron activation" kept per sample, so a support is an m-vector rather than one number. x is the
module's input in the model as received (global adapters everywhere), so the local and the global
neurons are compared on the same inputs. ``cost = "weight"`` (Table 5 "w/ weight-based PIA") uses
the server's weight supports instead.

Combination (the project's choice: the paper's Algorithm 1 that fixes it is in its supplement,
which our copy lacks). While training, every aligned LoRA module computes
    base(x) + ½ s B_L A_L x + ½ s B̃_G Ã_G x,
the mean of the trainable local adapter's (L) and the frozen aligned global adapter's (G̃) outputs,
s = lora_alpha / r. When the local adapter equals the global (a client's first round) the model is
exactly the global one. The client uploads the neuron-wise mean ½(Ã_G + A_L), ½(B̃_G + B_L):
alignment is what makes neuron i of both adapters the same unit, so that averaging their weights
approximates averaging their outputs. peft scales the local branch (`LoraLayer.set_scale`); the
frozen branch is a forward hook that runs the module's own ``lora_A``/``lora_B`` with the global
weights (`torch.func.functional_call`), so the model gains no parameter and no second peft adapter
(peft's multi-adapter injection switches the active adapter of a model that, in simulation, is
cached and shared by the clients of one process); leaving `combined` restores the model.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING

import numpy as np
import torch
from torch import nn
from torch.func import functional_call

from methods.fedpia.alignment import LORA_A, lora_pairs, match_neurons, neuron_supports, permute_pair
from tasks.models.base import FederatedVLM

if TYPE_CHECKING:
    from tasks.data import Sample

COSTS = ("activation", "weight")
ADAPTER = "default"  # the peft adapter name `tasks.adapters.apply_adapter` injects
HALF = 0.5


def lora_modules(keys: Sequence[str] | Mapping[str, object]) -> dict[str, tuple[str, str]]:
    """Module name -> (A key, B key) for every LoRA pair among shared-state keys
    f"{layer}:{module}.lora_A.default.weight"."""
    return {a.partition(":")[2].rpartition(LORA_A)[0]: (a, b) for a, b in lora_pairs(keys)}


def _reduce(act: torch.Tensor, module: nn.Module, num_samples: int) -> torch.Tensor:
    """(num_samples, r): a LoRA A output's mean over each sample's positions."""
    if isinstance(module, nn.Conv2d):
        act = act.movedim(1, -1)
    return act.reshape(num_samples, -1, act.shape[-1]).mean(1)


@torch.no_grad()
def activation_supports(model: FederatedVLM, samples: Sequence[Sample],
                        weights: Mapping[str, Sequence[np.ndarray]]) -> dict[str, list[np.ndarray]]:
    """For every LoRA module name in `weights` and every A matrix listed for it, the (r, m)
    activation supports ψ(A x) of its neurons on the module's inputs x from one forward pass of
    `samples` (module docstring)."""
    modules = dict(model.named_modules())
    found: dict[str, list[list[torch.Tensor]]] = {name: [[] for _ in ws] for name, ws in weights.items()}

    def hook(name: str):
        lora_a = modules[name].lora_A[ADAPTER]

        def record(module: nn.Module, args: tuple, output: torch.Tensor) -> None:
            x = args[0].to(lora_a.weight.dtype)  # the adapter's dtype (float32 under a bfloat16 base)
            for chunks, w in zip(found[name], weights[name], strict=True):
                w = torch.as_tensor(w, dtype=x.dtype, device=x.device)
                chunks.append(_reduce(functional_call(lora_a, {"weight": w}, (x,)), lora_a, len(samples)))
        return record

    handles = [modules[name].register_forward_hook(hook(name)) for name in weights]
    try:
        model.eval()
        batch = model.collate(list(samples))
        model({k: v.to(model.device) for k, v in batch.items()})
    finally:
        for handle in handles:
            handle.remove()
    return {name: [torch.cat(c).T.double().cpu().numpy() for c in chunks]
            for name, chunks in found.items()}


def align_global(model: FederatedVLM, global_state: Mapping[str, np.ndarray],
                 local_state: Mapping[str, np.ndarray], samples: Sequence[Sample],
                 cost: str = "activation") -> dict[str, np.ndarray]:
    """The global adapters of `local_state`'s LoRA modules, each permuted onto the local one's
    neurons (OT with activation or weight supports); same keys as `local_state`. Arrays that are
    not LoRA pairs are returned as the global has them. Activations need `model` to hold the
    global adapters (the inputs x are the received model's)."""
    if cost not in COSTS:
        raise ValueError(f"fedpia-client-cost = {cost!r} is unknown; choose one of {', '.join(COSTS)}")
    pairs = lora_modules(local_state)
    aligned = {key: global_state[key] for key in local_state}
    if cost == "activation" and pairs:
        acts = activation_supports(model, samples, {n: (global_state[a], local_state[a])
                                                    for n, (a, _) in pairs.items()})
    for name, (a, b) in pairs.items():
        if cost == "activation":
            source, target = acts[name]
        else:
            source = neuron_supports(global_state[a], global_state[b])
            target = neuron_supports(local_state[a], local_state[b])
        aligned[a], aligned[b] = permute_pair(global_state[a], global_state[b],
                                              match_neurons(source, target))
    return aligned


def integrate(aligned_global: Mapping[str, np.ndarray], local: Mapping[str, np.ndarray]
              ) -> dict[str, np.ndarray]:
    """What the client uploads: the neuron-wise mean of the aligned global and the local adapter;
    arrays without an aligned global (a shared head) as trained."""
    return {key: ((aligned_global[key] + value) * HALF).astype(value.dtype) if key in aligned_global
            else value for key, value in local.items()}


@contextmanager
def combined(model: FederatedVLM, frozen: Mapping[str, np.ndarray]) -> Iterator[None]:
    """Within the block every LoRA module of `frozen` computes base + ½ local + ½ frozen (module
    docstring); the local adapter is the model's own (trainable), `frozen` gets no gradient."""
    modules = dict(model.named_modules())
    handles, scaled = [], []

    def hook(a: torch.Tensor, b: torch.Tensor, scale: float):
        def add(module: nn.Module, args: tuple, output: torch.Tensor) -> torch.Tensor:
            # peft's rule: the adapter computes in its dtype (float32 under a bfloat16 base)
            hidden = functional_call(module.lora_A[ADAPTER], {"weight": a}, (args[0].to(a.dtype),))
            delta = scale * functional_call(module.lora_B[ADAPTER], {"weight": b}, (hidden,))
            return output + delta.to(output.dtype)
        return add

    try:
        for name, (a_key, b_key) in lora_modules(frozen).items():
            module = modules[name]
            param = module.lora_A[ADAPTER].weight
            a, b = (torch.as_tensor(frozen[k], dtype=param.dtype, device=param.device)
                    for k in (a_key, b_key))
            scale = HALF * module.lora_alpha[ADAPTER] / module.r[ADAPTER]
            handles.append(module.register_forward_hook(hook(a, b, scale)))
            module.set_scale(ADAPTER, HALF)
            scaled.append(module)
        yield
    finally:
        for handle in handles:
            handle.remove()
        for module in scaled:
            module.set_scale(ADAPTER, 1.0)
