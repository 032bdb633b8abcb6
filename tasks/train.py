"""Local training and evaluation of a client (paper §C.3 training details).

`train` runs AdamW (weight decay 0.01) for a fixed number of steps on mini-batches drawn from a
seeded permutation of the client's samples (re-shuffled at each pass). Only the masked layers'
trainable unit and the personal parameters (head, image->text projection) receive gradients and
are in the optimiser, so every other parameter stays bit-for-bit unchanged.

head_lr: the personal parameters are freshly initialised per client while the adapters start from
the federated state; at the paper's lr 1e-4 a random linear head moves too little in a few dozen
local steps to fit the client's answers, so it may get its own (larger) learning rate. None uses
`lr` for everything (the paper's setting).

privacy: with a DP-SGD plan (``dp = "sample"``, `privacy.mechanisms.SamplePlan`: it draws the
batches and makes the optimiser, so this module imports nothing of privacy) the same parameters
train by DP-SGD: Poisson batches of rate q instead of the permutation batches, Opacus's per-example
gradients of `FederatedVLM.sample_losses`, clipped and noised by its `DPOptimizer`.

`round_lr` is §C.3's schedule per communication round: linear warm-up over the first
ceil(warmup_frac · num_rounds) rounds, then linear decay (following [11]'s linear schedule).
Deviation: HF's step schedule starts warm-up at 0 and ends decay at 0, which would waste the first
and last rounds; here round r <= W gets r/W · base_lr, round W+1 gets base_lr, and the decay
reaches base_lr/(N-W) in the last round N.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from contextlib import nullcontext
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from tasks.adapters import (
    check_mask,
    freeze_except,
    layer_parameter_names,
    personal_parameter_names,
    shared_units,
)
from tasks.device import resolve_device
from tasks.models.base import FederatedVLM
from tasks.names import ADAPTERS, adapter_of

if TYPE_CHECKING:
    from tasks.data import Sample

EVAL_ANSWERS = ("generated", "closed-set", "both")
"""How `evaluate` scores a generative model's answers."""


def train(
    model: FederatedVLM,
    samples: Sequence[Sample],
    mask: np.ndarray,
    *,
    steps: int,
    batch_size: int,
    lr: float,
    head_lr: float | None = None,
    weight_decay: float = 0.01,
    seed: int = 0,
    device: str = "cpu",
    on_batch: Callable[[int, list[Sample]], None] | None = None,
    privacy: Any = None,
    physical_batch: int = 0,
    master_weights: bool = True,
) -> dict[str, float]:
    """`steps` AdamW steps on the masked layers + personal params; returns loss statistics.

    ``on_batch(step, samples)`` sees every training batch before its step (FedMosaic's SIMA
    gradient, `methods.sima.tracker`); ``privacy``: DP-SGD steps (module doc); ``physical_batch``:
    the most examples one forward and backward pass holds (`_step`; 0 = the whole batch);
    ``master_weights``: LoRA adapters over a bfloat16 or float16 base compute in the base's dtype
    with float32 master weights (`MasterWeights`; False: in float32, every call casting its input)."""
    if len(samples) == 0:
        raise ValueError("samples is empty: cannot train on zero samples")
    _positive_int("steps", steps)
    _positive_int("batch_size", batch_size)
    _positive_float("lr", lr)
    if head_lr is not None:
        _positive_float("head_lr", head_lr)
    if physical_batch != 0:
        _positive_int("physical_batch", physical_batch)
    if not (isinstance(weight_decay, (int, float)) and weight_decay >= 0):
        raise ValueError(f"weight_decay must be a number >= 0, got {weight_decay!r}")
    model.to(resolve_device(device))
    chosen = np.flatnonzero(check_mask(model, mask))
    freeze_except(model, mask)
    named = dict(model.named_parameters())
    unit_names = [n for layer in chosen for n in layer_parameter_names(model, int(layer))]
    unit = [named[n] for n in unit_names]
    heads = [n for layer in shared_units(model) for n in layer_parameter_names(model, layer)]
    personal = [named[n] for n in [*personal_parameter_names(model), *heads]  # a shared head: head-lr
                if n not in unit_names and named[n].requires_grad]
    master = (MasterWeights.of(model, unit) if master_weights and privacy is None and on_batch is None
              else None)
    groups = [{"params": personal, "lr": lr if head_lr is None else head_lr}]
    if unit:
        groups.append({"params": master.masters if master else unit, "lr": lr})
    # nothing to train (a generator without adapters to train: no head): the losses, no steps
    optimizer = torch.optim.AdamW(groups, lr=lr, weight_decay=weight_decay) if personal or unit else None
    if privacy is None:
        order = _batches(len(samples), steps, batch_size, seed)
        private = nullcontext(optimizer)
    else:
        order = privacy.batches(len(samples), steps)
        private = privacy.optimizer(model, optimizer, len(samples)) if optimizer else nullcontext()
    losses = []
    model.train()
    cuda = [model.device.index or 0] if model.device.type == "cuda" else []
    with torch.random.fork_rng(devices=cuda), private as optimizer, master or nullcontext():
        torch.manual_seed(seed)  # dropout masks (DP noise has its own generator); restored afterwards
        for step, idx in enumerate(order):
            if len(idx) == 0:  # an empty Poisson batch (privacy only): a step of noise alone
                if optimizer is not None:
                    privacy.empty_step(optimizer)
                continue
            chosen_samples = [samples[i] for i in idx]
            if on_batch is not None:
                on_batch(step, chosen_samples)
            losses.append(_step(model, optimizer, chosen_samples, privacy is not None, physical_batch,
                                master))
    model.eval()
    stats = {"samples_seen": float(sum(len(i) for i in order)), "steps": float(steps)}
    if privacy is not None and optimizer is not None:
        stats["dp-noise-norm"] = float(np.sqrt(optimizer.noise_sq))
    if losses:  # none when every Poisson batch was empty (privacy only): no loss to report
        stats.update(train_loss=float(np.mean(losses)), train_loss_first=losses[0],
                     train_loss_last=losses[-1])
    return stats


class MasterWeights:
    """LoRA adapters trained in the base's compute dtype, from float32 master weights.

    The adapters are float32 (the wire format is the same on every client), and peft casts a
    layer's input to their dtype on every call over a bfloat16 base, then the product back: on
    LLaVA-1.5-7B's shape, copies and element-wise kernels took 0.49 s of a 0.98 s step
    (docs/results/lntk-memory). Here, within the block, the trained adapters hold a copy in the
    base's dtype, so their products run in it without casts; after each backward pass their
    gradients go to the float32 masters, AdamW steps those, and the working copies are refreshed
    (mixed precision with master weights, Micikevicius et al. 2018; bfloat16 needs no loss scale).
    The adapters are float32 again, the masters' values, when the block ends."""

    def __init__(self, params: list[torch.nn.Parameter], dtype: torch.dtype) -> None:
        self.params, self.dtype = params, dtype
        self.masters = [p.detach().clone().requires_grad_(True) for p in params]

    @classmethod
    def of(cls, model: FederatedVLM, unit: list[torch.nn.Parameter]) -> MasterWeights | None:
        """For plain LoRA (`tasks.adapters`) over a bfloat16 or float16 base; None otherwise."""
        dtype = getattr(model, "dtype", torch.float32)
        plain = model.adapter in ADAPTERS and adapter_of(model.adapter).peft and not model.gated
        if not unit or not plain or dtype not in (torch.bfloat16, torch.float16):
            return None
        return cls(unit, dtype) if all(p.dtype == torch.float32 for p in unit) else None

    def __enter__(self) -> MasterWeights:
        for p in self.params:
            p.data = p.data.to(self.dtype)
        return self

    def to_masters(self) -> None:
        """The working copies' gradients onto the masters (float32), before the optimiser's step."""
        for p, m in zip(self.params, self.masters, strict=True):
            m.grad = None if p.grad is None else p.grad.float()
            p.grad = None

    def from_masters(self) -> None:
        """The working copies refreshed from the masters, after the optimiser's step."""
        with torch.no_grad():
            for p, m in zip(self.params, self.masters, strict=True):
                p.copy_(m)

    def __exit__(self, *exc: object) -> None:
        for p, m in zip(self.params, self.masters, strict=True):
            p.data, p.grad = m.detach().clone(), None


def _step(model: FederatedVLM, optimizer: torch.optim.Optimizer | None, samples: list[Sample],
          private: bool, physical_batch: int, master: MasterWeights | None = None) -> float:
    """One optimiser step on ``samples`` (no step without an optimiser), their forward and backward
    passes in chunks of at most ``physical_batch`` (0: one chunk), so a large (expected) batch fits
    in memory; returns the batch's loss. Plain training weighs each chunk's mean loss by its share of
    the batch's loss terms (`_loss_weight`: examples, or a generator's answer tokens), so the
    gradients add up to the whole batch's exactly. DP-SGD (Opacus's virtual steps, what its
    ``BatchMemoryManager`` does for a DataLoader): every chunk but the last only clips its
    per-example gradients into the running sum (``signal_skip_step``); the last adds the noise once
    and divides by the expected batch, so the step is the one the accountant counts."""
    size = physical_batch or len(samples)
    batches = [model.collate(samples[i : i + size]) for i in range(0, len(samples), size)]
    weights = np.array([len(b["labels"]) if private else _loss_weight(model, b) for b in batches], float)
    if optimizer is not None:
        optimizer.zero_grad(set_to_none=True)
    total = 0.0
    for j, (batch, share) in enumerate(zip(batches, weights / weights.sum(), strict=True)):
        batch = {k: v.to(model.device) for k, v in batch.items()}
        with torch.set_grad_enabled(optimizer is not None):
            out = model(batch)
            labels = batch["labels"]
            loss = model.sample_losses(out, labels).mean() if private else model.loss(out, labels)
        total += loss.item() * share
        if optimizer is None:
            continue
        if private:
            loss.backward()
            last = j == len(batches) - 1
            optimizer.signal_skip_step(do_skip=not last)
            optimizer.step()
            if not last:
                optimizer.zero_grad(set_to_none=True)  # the per-example gradients go; their clipped sum stays
        else:
            (loss * share).backward()
    if optimizer is not None and not private:
        if master is not None:
            master.to_masters()
        optimizer.step()
        if master is not None:
            master.from_masters()
    return total


def _loss_weight(model: FederatedVLM, batch: dict[str, torch.Tensor]) -> int:
    """How many terms ``model.loss`` averages over in ``batch``: a generator's answer tokens (the
    labels after the first position that are not -100), else its examples."""
    labels = batch["labels"]
    return int((labels[:, 1:] != -100).sum()) if model.generative else len(labels)


@torch.no_grad()
def evaluate(
    model: FederatedVLM, samples: Sequence[Sample], *, batch_size: int = 64, device: str = "cpu",
    answers: str = "generated",
) -> dict[str, float]:
    """vqa: accuracy, loss; multilabel: micro/macro F1 (threshold 0.5), loss; + num_examples. A
    generative model is scored by ``answers`` (`EVAL_ANSWERS`): on the answers it generates
    (``"generated"``, `_evaluate_generated`), on the best-scored answer of the vocabulary
    (``"closed-set"``, `_evaluate_closed_set`), or both (``"both"``: closed-set ``accuracy`` and
    ``loss``, generated ``exact-match``).

    Macro F1 averages over the classes present in the labels or the predictions (a class absent
    from both has no defined F1 and is left out).
    """
    if len(samples) == 0:
        raise ValueError("samples is empty: cannot evaluate on zero samples")
    _positive_int("batch_size", batch_size)
    model.to(resolve_device(device))
    model.eval()
    if answers not in EVAL_ANSWERS:
        raise ValueError(f"answers must be one of {', '.join(EVAL_ANSWERS)}, got {answers!r}")
    if model.generative:
        if answers == "generated":
            return _evaluate_generated(model, samples, batch_size)
        result = _evaluate_closed_set(model, samples, batch_size)
        if answers == "both":
            said = _evaluate_generated(model, samples, batch_size)
            result.update({k.replace("accuracy", "exact-match"): v for k, v in said.items()
                           if k.startswith("accuracy")})
        return result
    logits, labels = [], []
    for start in range(0, len(samples), batch_size):
        batch = model.collate(samples[start : start + batch_size])
        logits.append(model({k: v.to(model.device) for k, v in batch.items()}).float().cpu())
        labels.append(batch["labels"])
    out, y = torch.cat(logits), torch.cat(labels)
    n = float(len(samples))
    loss = float(model.loss(out, y))
    if model.task == "vqa":
        accuracy = float((out.argmax(1) == y).double().mean())
        return {"accuracy": accuracy, "loss": loss, "num_examples": n}
    pred, truth = out > 0, y > 0.5
    tp = (pred & truth).sum(0).double()
    fp = (pred & ~truth).sum(0).double()
    fn = (~pred & truth).sum(0).double()
    denom = 2 * tp + fp + fn
    f1_micro = float(2 * tp.sum() / denom.sum()) if denom.sum() > 0 else 0.0
    present = denom > 0
    f1_macro = float((2 * tp[present] / denom[present]).mean()) if present.any() else 0.0
    return {"f1_micro": f1_micro, "f1_macro": f1_macro, "loss": loss, "num_examples": n}


def _evaluate_generated(model: FederatedVLM, samples: Sequence[Sample], batch_size: int) -> dict[str, float]:
    """A generative model's accuracy: greedy answers, normalised exact match with the true answer
    (`tasks.models.generative.normalize_answer`), overall and per question type
    (``accuracy-<qtype>``); ``loss``: the answer tokens' mean cross-entropy."""
    from tasks.models.generative import normalize_answer

    hits, losses, weights = [], [], []
    for start in range(0, len(samples), batch_size):
        chunk = samples[start : start + batch_size]
        said = model.generate_answers(chunk)
        hits += [normalize_answer(a) == normalize_answer(model.answer_of(s))
                 for a, s in zip(said, chunk, strict=True)]
        batch = {k: v.to(model.device) for k, v in model.collate(chunk).items()}
        losses.append(float(model.loss(model(batch), batch["labels"])))
        weights.append(_loss_weight(model, batch))
    result = {"accuracy": float(np.mean(hits)), "loss": float(np.average(losses, weights=weights)),
              "num_examples": float(len(samples))}
    return result | _per_qtype(samples, np.array(hits))


def _evaluate_closed_set(model: FederatedVLM, samples: Sequence[Sample], batch_size: int) -> dict[str, float]:
    """A generative model's closed-set accuracy: the answer of the data set's vocabulary with the
    highest log-likelihood (`GenerativeVLM.answer_scores`) is the right one, overall and per question
    type (``accuracy-<qtype>``); ``loss``: the right answers' tokens' mean cross-entropy (stop token
    excluded). Ties go to the answer listed first, so a model that scores every answer alike gets
    what always answering that one gets."""
    hits, nll = closed_set_answers(model, samples, batch_size)
    lengths = np.array([len(model.answer_ids(a)) - 1 for a in model.answers])
    truth = np.array([int(s.target) for s in samples])
    result = {"accuracy": float(hits.mean()), "loss": float(nll.sum() / lengths[truth].sum()),
              "num_examples": float(len(samples))}
    return result | _per_qtype(samples, hits)


def closed_set_answers(model: FederatedVLM, samples: Sequence[Sample], batch_size: int = 64
                       ) -> tuple[np.ndarray, np.ndarray]:
    """Per question: whether the best-scored answer of the vocabulary is the right one, and the
    right answer's negative log-likelihood (its tokens', stop token excluded)."""
    score = np.concatenate([model.answer_scores(samples[i : i + batch_size]).numpy()
                            for i in range(0, len(samples), batch_size)])
    truth = np.array([int(s.target) for s in samples])
    return score.argmax(1) == truth, -score[np.arange(len(samples)), truth]


def _per_qtype(samples: Sequence[Sample], hits: np.ndarray) -> dict[str, float]:
    qtypes = np.array([s.qtype for s in samples])
    return {f"accuracy-{q}": float(hits[qtypes == q].mean()) for q in sorted(set(qtypes.tolist()))}


def round_lr(base_lr: float, server_round: int, num_rounds: int, warmup_frac: float = 0.1) -> float:
    """§C.3: linear warm-up over the first 10% of rounds, then linear decay (rounds 1-based)."""
    _positive_float("base_lr", base_lr)
    _positive_int("num_rounds", num_rounds)
    if not isinstance(server_round, int) or not 1 <= server_round <= num_rounds:
        raise ValueError(f"server_round must be an int in 1..{num_rounds}, got {server_round!r}")
    if not 0.0 <= warmup_frac < 1.0:
        raise ValueError(f"warmup_frac must be in [0, 1), got {warmup_frac!r}")
    warmup = math.ceil(warmup_frac * num_rounds)
    if server_round <= warmup:
        return base_lr * server_round / warmup
    return base_lr * (num_rounds - server_round + 1) / (num_rounds - warmup)


def _batches(n: int, steps: int, batch_size: int, seed: int) -> list[np.ndarray]:
    """`steps` index batches from seeded permutations of range(n), re-shuffled at each pass."""
    rng = np.random.default_rng(seed)
    need = steps * min(batch_size, n)
    perms = np.concatenate([rng.permutation(n) for _ in range(-(-need // n))])
    size = min(batch_size, n)
    return [perms[i * size : (i + 1) * size] for i in range(steps)]


def _positive_int(name: str, value: int) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
        raise ValueError(f"{name} must be a positive int, got {value!r}")


def _positive_float(name: str, value: float) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
        raise ValueError(f"{name} must be a positive number, got {value!r}")
