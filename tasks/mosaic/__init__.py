"""FedMosaic's model side (shared/papers/fedmosaic-paper.md §4), no Flower here.

* `modules`: PQ-LoRA (Eq. 6/10) and the gated local + global branch pair of SIMA (Eq. 9);
* `attach`: where the modules go (block-wise attachment, Eq. 7) and their size-independent names;
* `align`: A by MSE and B by CCA of a larger model to the smaller pivot on public data (Eq. 8, A.4).

SIMA, the aggregation that uses the gated pair, is the method package `methods.sima`.
"""

import lazy_loader

__getattr__, __dir__, __all__ = lazy_loader.attach(__name__, submod_attrs={
    "modules": ["GATE", "GLOBAL", "LOCAL", "MosaicLinear", "block_layers"],
})
