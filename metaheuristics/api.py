"""``optimize``: the one entry point; validates input and dispatches to an algorithm."""

from __future__ import annotations

import time
from collections.abc import Sequence
from numbers import Integral, Real

import numpy as np

from metaheuristics import aco, bee_colony, mopso, nsga2, paper_ga, reference, sa
from metaheuristics.archive import PICKS, W_IMPORTANCE, ParetoArchive
from metaheuristics.names import ALGORITHMS, SEARCHES
from metaheuristics.problem import make_instance
from metaheuristics.result import Assignment
from metaheuristics.search import Context, drive

_SEARCHES = dict(zip(SEARCHES, (nsga2, mopso, sa, aco, bee_colony, paper_ga), strict=True))

# name -> (lowest, highest, lowest is allowed); integer params are those with int defaults
_COUNT, _SHARE = (1, None, True), (0.0, 1.0, True)
_NON_NEGATIVE, _POSITIVE = (0.0, None, True), (0.0, None, False)
_RANGES = {
    **dict.fromkeys(("pop_size", "n_gen", "limit"), _COUNT),
    **dict.fromkeys(("mutation_rate", "crossover_rate", "evaporation"), _SHARE),
    **dict.fromkeys(("inertia", "cognitive", "social", "deposit", "alpha", "beta"), _NON_NEGATIVE),
    **dict.fromkeys(("t0", "t_end", "tau0"), _POSITIVE),
    "cooling": (0.0, 1.0, False),
}

_CHOICES = {"crossover": tuple(nsga2.CROSSOVERS)}


def _defaults(algorithm: str) -> dict:
    if algorithm in _SEARCHES:
        return _SEARCHES[algorithm].DEFAULTS
    return reference.DEFAULTS


def _check_params(algorithm: str, params: dict) -> dict:
    defaults = _defaults(algorithm)
    merged = dict(defaults)
    for name, value in params.items():
        if name not in defaults:
            raise ValueError(
                f"{name}: unknown parameter for algorithm {algorithm!r} "
                f"(known: {', '.join(sorted(defaults))})"
            )
        if isinstance(defaults[name], str):
            if value not in _CHOICES[name]:
                raise ValueError(f"{name}: must be one of {_CHOICES[name]}, got {value!r}")
            merged[name] = value
            continue
        is_int = isinstance(defaults[name], int)
        kind = Integral if is_int else Real
        if isinstance(value, (bool, np.bool_)) or not isinstance(value, kind):
            raise ValueError(f"{name}: expected {'an int' if is_int else 'a number'}, got {value!r}")
        low, high, low_ok = _RANGES[name]
        value = int(value) if is_int else float(value)
        bad_low = value < low if low_ok else value <= low
        if not np.isfinite(value) or bad_low or (high is not None and value > high):
            closing = f"{high}]" if high is not None else "inf)"
            raise ValueError(f"{name}: must be in {'[' if low_ok else '('}{low}, {closing}, got {value}")
        merged[name] = value
    return merged


def optimize(
    scores: np.ndarray,
    budgets: Sequence[int],
    algorithm: str = "nsga2",
    seed: int = 0,
    pick: str = "weighted",
    weight: float = W_IMPORTANCE,
    **params,
) -> Assignment:
    """Assign exactly budgets[i] layers to every client (paper Eq. 21, supplement §A).

    Args:
        scores: (N, L) non-negative finite layer importances S_i^l (rows of zeros allowed).
        budgets: N ints with 1 <= k_i <= L.
        algorithm: one of ``ALGORITHMS``.
        seed: non-negative int; the same seed gives the same result.
        pick: how the returned solution is chosen from the Pareto archive,
            "weighted" (Algorithm 34), "knee" or "least-diversity" (Algorithm 2 line 23; see
            archive.py).
        weight: the importance's weight w in [0, 1] of the "weighted" pick (diversity: 1 - w).
        **params: ``pop_size`` (50), ``n_gen`` (20) and the algorithm's own settings
            (module ``DEFAULTS``; §C.3 values).

    Raises:
        ValueError: naming the argument and the offending value.
    """
    start = time.perf_counter()
    instance = make_instance(scores, budgets)
    if algorithm not in ALGORITHMS:
        raise ValueError(f"algorithm: unknown {algorithm!r} (known: {', '.join(ALGORITHMS)})")
    if isinstance(seed, (bool, np.bool_)) or not isinstance(seed, Integral) or seed < 0:
        raise ValueError(f"seed: expected a non-negative int, got {seed!r}")
    if pick not in PICKS:
        raise ValueError(f"pick: unknown {pick!r} (known: {', '.join(PICKS)})")
    if not 0.0 <= weight <= 1.0:
        raise ValueError(f"weight: must be in [0, 1], got {weight!r}")
    settings = _check_params(algorithm, params)
    archive = ParetoArchive(instance, pick, weight)
    ctx = Context(instance, archive, int(seed), settings.pop("pop_size"), settings.pop("n_gen"))
    if algorithm in _SEARCHES:
        drive(_SEARCHES[algorithm].steps(ctx, **settings), archive)
    else:
        drive(reference.steps(ctx, algorithm), archive)
    best = archive.best()
    seconds = time.perf_counter() - start
    return Assignment(
        masks=archive.masks[best].copy(),
        importance=float(archive.importance[best]),
        diversity=float(archive.diversity[best]),
        front=archive.front(),
        history=archive.history,
        algorithm=algorithm,
        seconds=seconds,
    )
