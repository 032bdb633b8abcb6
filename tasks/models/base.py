"""The interface every registry model implements: `FederatedVLM`.

A model is a frozen backbone with L *selectable layers* (paper §3: the units a client may fine-tune
under its budget k_i), a personal task head (supplement §C.3: "each client has task-specific linear
classification heads", never averaged) and, where the model has one, a personal image->text
projection.

The forward pass is split in two so that per-sample gradients can be taken with `torch.func.vmap`
(see tasks/lntk.py): `embed` computes everything that does not depend on any selectable layer
(tokens -> word embeddings, the image stem, attention masks) and returns batch-first tensors only;
`forward_embedded` runs the selectable layers, pooling and the head. `forward = forward_embedded ∘
embed`, so training and scoring run exactly the same code.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

if TYPE_CHECKING:
    from tasks.data import Sample

TASKS: tuple[str, ...] = ("vqa", "multilabel")


def is_under(name: str, prefixes: Iterable[str]) -> bool:
    """Whether the parameter or module `name` is one of `prefixes` or inside one of them."""
    return any(name == p or name.startswith(p + ".") for p in prefixes)


def find_blocks(model: nn.Module) -> str:
    """Dotted path of the longest ModuleList of identical block classes (ties: the first found)."""
    best, best_len = "", 0
    for name, module in model.named_modules():
        if isinstance(module, nn.ModuleList) and len(module) > best_len:
            kinds = {type(child) for child in module}
            if len(kinds) == 1:
                best, best_len = name, len(module)
    if not best_len:
        raise ValueError(
            f"cannot find repeated transformer blocks (an nn.ModuleList of identical layers) "
            f"in {type(model).__name__}"
        )
    return best


class FederatedVLM(nn.Module):
    """A vision-language classifier with an ordered list of selectable layers.

    Subclasses fill `layer_names` / `layer_prefixes` (module-name prefixes of each layer, relative to
    this module), extend `personal_prefixes`, and implement `encode_inputs`, `embed` and `features`.
    """

    generative = False  # GenerativeVLM (tasks.models.generative): token logits, no head

    def __init__(self, num_outputs: int, task: str, hidden_size: int, head: bool = True) -> None:
        super().__init__()
        if task not in TASKS:
            raise ValueError(f"task must be one of {TASKS}, got {task!r}")
        if not isinstance(num_outputs, int) or num_outputs < 1:
            raise ValueError(f"num_outputs must be a positive int, got {num_outputs!r}")
        self.task = task
        self.num_outputs = num_outputs
        if head:
            self.head = nn.Linear(hidden_size, num_outputs)
        self.layer_names: list[str] = []
        self.layer_prefixes: list[tuple[str, ...]] = []
        self.personal_prefixes: tuple[str, ...] = ("head",) if head else ()
        self.lora_targets: tuple[str, ...] = ()  # module names LoRA keeps (last name part); () = all
        self.answers: tuple[str, ...] = ()  # the data set's answers (Partition.labels): generators
        self.shared_head = False  # head = "shared": the answer head is shared state (tasks.adapters)
        self.adapter = "none"  # set by tasks.adapters.apply_adapter
        self.gated = False  # FedMosaic/SIMA local + global branches (tasks.mosaic)
        self.wire_names: dict[str, str] = {}  # parameter name -> shared-state name (tasks.mosaic)
        self.image_size = 64  # square input side the model resizes images to
        self.provenance: dict[str, str] = {}  # what a run records of where its weights came from

    # -- inputs ---------------------------------------------------------------------------------
    def collate(self, samples: Sequence[Sample]) -> dict[str, torch.Tensor]:
        """Tokenise questions, preprocess images and stack targets into `labels`."""
        if len(samples) == 0:
            raise ValueError("samples is empty: need at least one Sample to build a batch")
        batch = self.encode_inputs(samples)
        batch["labels"] = self._labels(samples)
        return batch

    def encode_inputs(self, samples: Sequence[Sample]) -> dict[str, torch.Tensor]:
        raise NotImplementedError

    def _labels(self, samples: Sequence[Sample]) -> torch.Tensor:
        if self.task == "vqa":
            targets = np.asarray([s.target for s in samples])
            if targets.ndim != 1 or not np.issubdtype(targets.dtype, np.integer):
                raise ValueError("vqa sample targets must be int answer indices")
            bad = (targets < 0) | (targets >= self.num_outputs)
            if bad.any():
                raise ValueError(
                    f"sample target {int(targets[bad][0])} is outside the head's {self.num_outputs} outputs"
                )
            return torch.from_numpy(targets.astype(np.int64))
        targets = np.stack([np.asarray(s.target, dtype=np.float32) for s in samples])
        if targets.shape != (len(samples), self.num_outputs):
            raise ValueError(
                f"multilabel sample targets must have shape ({self.num_outputs},), got {targets.shape[1:]}"
            )
        return torch.from_numpy(targets)

    # -- forward --------------------------------------------------------------------------------
    def embed(self, batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """The part of the forward pass that no selectable layer influences (batch-first tensors)."""
        raise NotImplementedError

    def features(self, emb: dict[str, torch.Tensor]) -> torch.Tensor:
        """Selectable layers + pooling: (B, hidden_size)."""
        raise NotImplementedError

    def forward_embedded(self, emb: dict[str, torch.Tensor]) -> torch.Tensor:
        return self.head(self.features(emb))

    def forward(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        """Logits (B, num_outputs)."""
        return self.forward_embedded(self.embed(batch))

    def sample_losses(self, logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        """(B,): each example's own loss, which no other example of the batch changes (DP-SGD's
        per-example gradients, `privacy.mechanisms`); `loss` is their mean."""
        if self.task == "vqa":
            return F.cross_entropy(logits, labels, reduction="none")
        return F.binary_cross_entropy_with_logits(logits, labels.to(logits.dtype), reduction="none").mean(1)

    def loss(self, logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        """Cross-entropy (vqa) or BCE-with-logits (multilabel), mean over the batch."""
        if self.task == "vqa":
            return F.cross_entropy(logits, labels)
        return F.binary_cross_entropy_with_logits(logits, labels.to(logits.dtype))

    @property
    def dtype(self) -> torch.dtype:
        return self.head.weight.dtype

    @property
    def device(self) -> torch.device:
        return self.head.weight.device


def images_to_tensor(
    samples: Sequence[Sample],
    size: int,
    mean: float | Sequence[float],
    std: float | Sequence[float],
) -> torch.Tensor:
    """(B, 3, size, size) float32: RGB uint8 images, resized (bilinear, antialiased), normalised."""
    images = [np.asarray(s.image) for s in samples]
    for img in images:
        if img.ndim != 3 or img.shape[2] != 3 or img.dtype != np.uint8:
            raise ValueError(
                f"sample image must be an (H, W, 3) uint8 array, got shape {img.shape} {img.dtype}"
            )
    if len({img.shape for img in images}) == 1:
        groups = [np.stack(images)]
    else:
        groups = [img[None].copy() for img in images]
    out = []
    for block in groups:
        x = torch.from_numpy(block).permute(0, 3, 1, 2).float() / 255.0
        if x.shape[-2:] != (size, size):
            x = F.interpolate(x, size=(size, size), mode="bilinear", antialias=True)
        out.append(x)
    x = torch.cat(out)
    mean_t = torch.as_tensor(mean, dtype=torch.float32).reshape(-1, 1, 1)
    std_t = torch.as_tensor(std, dtype=torch.float32).reshape(-1, 1, 1)
    return (x - mean_t) / std_t


def additive_mask(mask: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """(B, T) 1/0 key mask -> (B, 1, 1, T) additive attention bias (0 or dtype min)."""
    return (1.0 - mask.to(dtype))[:, None, None, :] * torch.finfo(dtype).min
