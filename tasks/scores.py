"""Client-side layer scores by name: what a client computes for the server's layer selection.

``lntk`` is F3OCUS's principal LNTK eigenvalue per layer (paper §4.1); every strategy that ranks
layers on the client asks for its score here, so adding a scorer needs no new strategy class.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from tasks.data import Sample
from tasks.lntk import layer_scores
from tasks.models import FederatedVLM

BASELINE_SCORERS: tuple[str, ...] = ()
SCORERS: tuple[str, ...] = ("lntk", *BASELINE_SCORERS)


def score_layers(model: FederatedVLM, samples: Sequence[Sample], scorer: str = "lntk",
                 mode: str = "loss") -> np.ndarray:
    """Non-negative per-layer score (L,) of ``scorer`` on ``samples``; the server normalises it."""
    if scorer == "lntk":
        return layer_scores(model, samples, mode=mode).eigenvalues
    raise ValueError(f"score = {scorer!r} is unknown; choose one of {', '.join(SCORERS)}")
