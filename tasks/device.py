"""Device names: "auto" -> "cuda" when available, else "cpu"; explicit names are validated. Model
dtypes: "auto" -> bfloat16 on a CUDA device that supports it, else float32."""

from __future__ import annotations

import torch


def resolve_device(name: str) -> str:
    """ "auto" | "cpu" | "cuda" | "cuda:<i>" | "mps" -> a torch device string that exists here."""
    if name == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if name == "cpu":
        return name
    if name == "mps" and torch.backends.mps.is_available():
        return name
    if isinstance(name, str) and (name == "cuda" or name.startswith("cuda:")):
        index = name[5:]
        if not torch.cuda.is_available():
            raise ValueError(f"device {name!r} requested but CUDA is not available")
        if index and not (index.isdigit() and int(index) < torch.cuda.device_count()):
            raise ValueError(f"device {name!r}: no such CUDA device ({torch.cuda.device_count()} available)")
        return name
    raise ValueError(f"unknown device {name!r}; use 'auto', 'cpu', 'cuda', 'cuda:<i>' or 'mps'")


def resolve_dtype(name: str, device: str) -> str:
    """Run setting ``dtype`` on ``device`` (a resolved device) -> a torch dtype name."""
    if name != "auto":
        return name
    cuda = device.startswith("cuda") and torch.cuda.is_available()
    return "bfloat16" if cuda and torch.cuda.is_bf16_supported() else "float32"
