"""FedMosaic's adapter modules: PQ-LoRA (paper §4.2, Eq. 6/10) and the gated local + global pair
of SIMA (§4.2 last paragraph, Eq. 9).

`MosaicLinear` wraps a frozen nn.Linear (or a 1x1 nn.Conv2d, a linear map over channels) and adds

* kind ``"pq"``: ΔW x = s·B (P A x + Q) with A ∈ R^{r×d_in}, B ∈ R^{d_out×r} frozen buffers with
  orthonormal rows / columns (A.4, Eq. 20) and only P ∈ R^{r×r}, Q ∈ R^r trainable. P and Q start at
  zero (official code, fedmosaic-code.md TU:262-263), so the adapter starts as the identity map.
* kind ``"lora"``: conventional LoRA ΔW x = s·B A x (A Kaiming-uniform, B zero, both trainable), used
  for SIMA with ``adapter = "lora"``.

With ``gated=True`` it holds two branches of the same kind, ``mosaic_local`` (trainable, the client's
own) and ``mosaic_global`` (the customised global module from the server, frozen), and a learnable
gate β (one per wrapped module) with β̃ = σ(β):  h = W x + (1 − β̃)·local(x) + β̃·global(x) (Eq. 9).
β starts at 0, i.e. β̃ = 0.5 (official code). In PQ-LoRA both branches share A and B (official
code: B1 = copy of B2, A1 = A2), so only their P, Q differ. s = lora_alpha / r = 2, as the project's
peft LoRA (lora_alpha = 2r) and the official code (256/128).
"""

from __future__ import annotations

import zlib

import torch
from torch import nn

LOCAL = "mosaic_local"
GLOBAL = "mosaic_global"
GATE = "mosaic_gate"
KINDS = ("pq", "lora")
SCALE = 2.0


def orthonormal(rows: int, cols: int, generator: torch.Generator) -> torch.Tensor:
    """A (rows, cols) matrix with orthonormal rows (rows <= cols) or columns (rows > cols): the SVD
    factor of a Kaiming-uniform draw (official code's orthonormal_kaiming_uniform_init, TU:529-554)."""
    bound = (6.0 / cols) ** 0.5 / (1 + 5) ** 0.5  # kaiming_uniform(a=sqrt(5)) on fan_in = cols
    draw = (torch.rand(rows, cols, generator=generator, dtype=torch.float64) * 2 - 1) * bound
    u, _, vt = torch.linalg.svd(draw, full_matrices=False)
    return (u @ vt).float()


def seeded_generator(seed: int, name: str) -> torch.Generator:
    """A generator seeded by the run seed and a module's canonical name (same on every client)."""
    return torch.Generator().manual_seed(seed * 1_000_003 + zlib.crc32(name.encode()))


class Branch(nn.Module):
    """One adapter branch: P, Q (kind "pq", applied between the shared A and B) or A, B ("lora")."""

    def __init__(self, kind: str, rank: int, d_in: int, d_out: int, generator: torch.Generator) -> None:
        super().__init__()
        self.kind = kind
        if kind == "pq":
            self.P = nn.Parameter(torch.zeros(rank, rank))
            self.Q = nn.Parameter(torch.zeros(rank))
        else:
            bound = (6.0 / d_in) ** 0.5 / (1 + 5) ** 0.5
            self.lora_A = nn.Parameter((torch.rand(rank, d_in, generator=generator) * 2 - 1) * bound)
            self.lora_B = nn.Parameter(torch.zeros(d_out, rank))

    def forward(self, x: torch.Tensor, a: torch.Tensor | None, b: torch.Tensor | None) -> torch.Tensor:
        if self.kind == "pq":
            return ((x @ a.T) @ self.P.T + self.Q) @ b.T * SCALE
        return (x @ self.lora_A.T) @ self.lora_B.T * SCALE


class MosaicLinear(nn.Module):
    """A frozen Linear / 1x1 Conv2d plus a PQ-LoRA or LoRA branch, or a gated local/global pair."""

    def __init__(self, base: nn.Module, kind: str, rank: int, *, gated: bool, name: str, seed: int) -> None:
        super().__init__()
        if kind not in KINDS:
            raise ValueError(f"kind must be one of {KINDS}, got {kind!r}")
        if isinstance(base, nn.Conv2d):
            if base.kernel_size != (1, 1) or base.groups != 1:
                raise ValueError(f"{name}: only 1x1 convolutions with groups=1 can be adapted")
            d_in, d_out = base.in_channels, base.out_channels
        elif isinstance(base, nn.Linear):
            d_in, d_out = base.in_features, base.out_features
        else:
            raise ValueError(f"{name}: cannot adapt a {type(base).__name__}")
        if not isinstance(rank, int) or not 1 <= rank <= min(d_in, d_out):
            raise ValueError(f"lora_rank must be an int in 1..{min(d_in, d_out)} for {name}, got {rank!r}")
        self.base = base
        self.kind, self.rank, self.gated, self.canonical = kind, rank, gated, name
        gen = seeded_generator(seed, name)
        if kind == "pq":
            self.register_buffer("pq_A", orthonormal(rank, d_in, gen))
            self.register_buffer("pq_B", orthonormal(d_out, rank, gen))
        else:
            self.pq_A = self.pq_B = None
        setattr(self, LOCAL, Branch(kind, rank, d_in, d_out, gen))
        if gated:
            setattr(self, GLOBAL, Branch(kind, rank, d_in, d_out, seeded_generator(seed, name)))
            getattr(self, GLOBAL).load_state_dict(getattr(self, LOCAL).state_dict())
            setattr(self, GATE, nn.Parameter(torch.zeros(1)))

    def delta(self, x: torch.Tensor) -> torch.Tensor:
        """The adapter's output on channel-last input x (Eq. 6, or Eq. 9 without W x)."""
        local = getattr(self, LOCAL)(x, self.pq_A, self.pq_B)
        if not self.gated:
            return local
        beta = torch.sigmoid(getattr(self, GATE))
        return (1 - beta) * local + beta * getattr(self, GLOBAL)(x, self.pq_A, self.pq_B)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """W x + the adapter's output. As in peft's LoRA, the adapter computes in its own dtype
        (float32 under a bfloat16 base) and its output joins W x in the base's dtype."""
        out = self.base(x)
        x = x.to(next(getattr(self, LOCAL).parameters()).dtype)
        if isinstance(self.base, nn.Conv2d):
            return out + self.delta(x.movedim(1, -1)).movedim(-1, 1).to(out.dtype)
        return out + self.delta(x).to(out.dtype)


def block_layers(num_layers: int, num_blocks: int) -> list[int]:
    """0-based indices of the layers that carry PQ-LoRA (paper Eq. 7): I_k = k·⌊|W|/N_B⌋ for
    k < N_B and |W| for k = N_B (1-based in the paper), i.e. the last layer of each of N_B blocks."""
    if not isinstance(num_blocks, int) or not 1 <= num_blocks <= num_layers:
        raise ValueError(f"num-blocks = {num_blocks!r} must be an int in 1..{num_layers} "
                         "(the model's layers)")
    step = num_layers // num_blocks
    return [k * step - 1 for k in range(1, num_blocks)] + [num_layers - 1]
