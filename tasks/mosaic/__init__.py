"""FedMosaic (shared/papers/fedmosaic-paper.md §4): the client side, no Flower here.

* `modules`: PQ-LoRA (Eq. 6/10) and the gated local + global branch pair of SIMA (Eq. 9);
* `attach`: where the modules go (block-wise attachment, Eq. 7) and their size-independent names;
* `align`: A by MSE and B by CCA of a larger model to the smaller pivot on public data (Eq. 8, A.4);
* `sima`: the client-wise decayed last-layer gradient of a frozen shared model (Eq. 3-4).

The server side (similarity matrix and per-client weights, Eq. 5) is `strategies.aggregation.sima`.
"""

import lazy_loader

__getattr__, __dir__, __all__ = lazy_loader.attach(__name__, submod_attrs={
    "modules": ["GATE", "GLOBAL", "LOCAL", "MosaicLinear", "block_layers"],
    "sima": ["SimaTracker", "last_layer_gradient"],
})
