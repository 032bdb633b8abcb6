"""The exact privacy curve of the Gaussian mechanism (Balle and Wang 2018, Theorem 8), an oracle
for the accountants: k compositions with noise multiplier z (sensitivity 1) are one Gaussian
mechanism with multiplier z / sqrt(k)."""

from __future__ import annotations

import math

from scipy.optimize import brentq
from scipy.stats import norm


def exact_gaussian_epsilon(noise: float, compositions: int, delta: float) -> float:
    """The smallest ε with δ(ε) = Φ(1/(2s) − ε s) − e^ε Φ(−1/(2s) − ε s) <= ``delta``, s = z / √k."""
    s = noise / math.sqrt(compositions)

    def excess(eps: float) -> float:
        return norm.cdf(1 / (2 * s) - eps * s) - math.exp(eps) * norm.cdf(-1 / (2 * s) - eps * s) - delta

    return 0.0 if excess(0.0) <= 0 else float(brentq(excess, 0.0, 500.0, xtol=1e-12))
