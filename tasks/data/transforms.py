"""Image "modalities" for easy-vqa-modalities: the paper's modality gap (§6.1, Task 2) on easy-VQA.

In Task 2 every client holds one imaging modality (CT, ultrasound, X-ray, ...), so the same kind of
question comes with images that look different per client. Here client i sees its images through
transform i mod 8. All transforms work on a batch (N, H, W, 3) uint8 with numpy and return a new
uint8 batch; only "noisy" is random, drawn from the seed. Grayscale keeps colours distinguishable
only by brightness, as an X-ray client cannot see colour either.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

_LUMA = np.array([0.299, 0.587, 0.114], dtype=np.float32)


def _grayscale(x: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    luma = x.astype(np.float32) @ _LUMA
    return np.repeat(luma[..., None], 3, axis=-1)


def _inverted(x: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    return 255.0 - x.astype(np.float32)


def _blurred(x: np.ndarray, rng: np.random.Generator, sigma: float = 1.5) -> np.ndarray:
    radius = 3
    kernel = np.exp(-0.5 * (np.arange(-radius, radius + 1) / sigma) ** 2).astype(np.float32)
    kernel /= kernel.sum()
    out = x.astype(np.float32)
    for axis in (1, 2):  # separable Gaussian, edge-padded
        pad = [(0, 0)] * 4
        pad[axis] = (radius, radius)
        padded = np.pad(out, pad, mode="edge")
        size = out.shape[axis]
        out = sum(
            w * np.take(padded, np.arange(i, i + size), axis=axis) for i, w in enumerate(kernel)
        )
    return out


def _noisy(x: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    return x.astype(np.float32) + rng.normal(0.0, 25.0, size=x.shape).astype(np.float32)


def _rotated(x: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    return np.rot90(x, k=1, axes=(1, 2))


def _colour_shifted(x: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    return x.astype(np.float32) * np.array([1.25, 1.0, 0.75], dtype=np.float32) + 20.0


def _low_resolution(x: np.ndarray, rng: np.random.Generator, factor: int = 4) -> np.ndarray:
    n, h, w, c = x.shape
    hh, ww = max(h // factor, 1), max(w // factor, 1)
    fh, fw = h // hh, w // ww
    pooled = x[:, : hh * fh, : ww * fw].astype(np.float32).reshape(n, hh, fh, ww, fw, c)
    up = pooled.mean(axis=(2, 4)).repeat(fh, axis=1).repeat(fw, axis=2)
    return np.pad(up, [(0, 0), (0, h - up.shape[1]), (0, w - up.shape[2]), (0, 0)], mode="edge")


def _contrast_changed(x: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    return (x.astype(np.float32) - 128.0) * 0.4 + 128.0


_TRANSFORMS: dict[str, Callable[[np.ndarray, np.random.Generator], np.ndarray]] = {
    "grayscale": _grayscale,
    "inverted": _inverted,
    "blurred": _blurred,
    "noisy": _noisy,
    "rotated": _rotated,
    "colour-shifted": _colour_shifted,
    "low-resolution": _low_resolution,
    "contrast-changed": _contrast_changed,
}

MODALITY_TRANSFORMS: tuple[str, ...] = tuple(_TRANSFORMS)


def apply_modality(images: np.ndarray, client: int, seed: int) -> np.ndarray:
    """Images (N, H, W, 3) uint8 as client `client` sees them: transform number client mod 8."""
    index = client % len(MODALITY_TRANSFORMS)
    rng = np.random.default_rng([seed, client])
    out = _TRANSFORMS[MODALITY_TRANSFORMS[index]](images, rng)
    return np.ascontiguousarray(np.clip(np.rint(out), 0, 255).astype(np.uint8))
