"""Paired comparison of sweeps that differ in one setting (e.g. `aggregation`), from run files only:

    python -m server_app.paired results/<baseline> results/<other> [results/<other> ...]

Every experiment directory is read like `server_app.report` reads it (complete runs only); a row is
``<experiment>/<strategy>``. Printed:

1. one table row per experiment and strategy: overall accuracy (weighted by test examples), the
   'Others' accuracy of FedMosaic (paper §5, each client's model on the other clients' test data;
   run config ``eval-others``) when the runs have it, uplink MB per round, seconds per round, the
   training phase's and the server aggregation's seconds per round (``phase-seconds.training`` and
   ``.aggregating``), mean ± sample std over seeds;
2. for every other experiment and every strategy it shares with the baseline, the per-seed paired
   differences other − baseline of overall (and Others) accuracy and their 95 % Student-t interval
   mean(d) ± t_{0.975, n−1} · sd(d) / √n (`paired_interval`), with "not distinguishable" when the
   interval covers 0. Seeds fix the client data split and initialisation, so pairing by seed removes
   that shared variation from the comparison.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path

import numpy as np
from scipy import stats

from server_app.report import Run, load_runs, mean_std, run_metrics


def paired_interval(other: Sequence[float], base: Sequence[float], confidence: float = 0.95
                    ) -> tuple[float, float, float]:
    """Mean of the paired differences other − base and its two-sided Student-t interval
    (needs >= 2 pairs)."""
    diff = np.asarray(other, dtype=float) - np.asarray(base, dtype=float)
    if diff.size < 2:
        raise ValueError(f"paired_interval: {diff.size} pair(s); a t interval needs at least 2")
    if not 0 < confidence < 1:
        raise ValueError(f"paired_interval: confidence = {confidence!r} must lie in (0, 1)")
    half = stats.t.ppf(0.5 + confidence / 2, diff.size - 1) * diff.std(ddof=1) / np.sqrt(diff.size)
    return float(diff.mean()), float(diff.mean() - half), float(diff.mean() + half)


def seed_metrics(run: Run) -> dict[str, float]:
    """`report.run_metrics` plus 'Others' accuracy (%, weighted by examples) and the seconds per round
    of the training phase (sending masks to receiving every update) and of the server aggregation."""
    out = run_metrics(run)
    rows = [r["evaluate"] for r in run.final_clients() if "others-accuracy" in r["evaluate"]]
    if rows:
        weights = np.array([r["others-num-examples"] for r in rows], dtype=float)
        out["others"] = 100 * float(np.array([r["others-accuracy"] for r in rows]) @ weights / weights.sum())
    for phase in ("training", "aggregating"):
        out[f"{phase}_s"] = float(np.mean([r["phase-seconds"][phase] for r in run.rounds]))
    return out


def by_seed(experiment_dir: Path) -> dict[str, dict[int, dict[str, float]]]:
    """strategy -> seed -> `seed_metrics` of the experiment's complete runs."""
    out: dict[str, dict[int, dict[str, float]]] = {}
    for run in load_runs(experiment_dir)[0]:
        out.setdefault(run.strategy, {})[run.seed] = seed_metrics(run)
    return out


def _pm(values: Sequence[float], digits: int) -> str:
    mean, std = mean_std(values)
    return f"{mean:.{digits}f}" if np.isnan(std) else f"{mean:.{digits}f} ± {std:.{digits}f}"


def report(dirs: Sequence[Path]) -> str:
    """The table and the paired intervals (module doc) as markdown."""
    data = {Path(d).name: by_seed(Path(d)) for d in dirs}
    cols = [("overall", "overall", 2), ("others", "Others", 2), ("uplink_mb", "uplink MB / round", 2),
            ("seconds", "s / round", 1), ("training_s", "training s / round", 1),
            ("aggregating_s", "aggregation s / round", 3)]
    lines = ["| run | seeds | " + " | ".join(c[1] for c in cols) + " |", "|---|---|" + "---|" * len(cols)]
    for name, strategies in data.items():
        for strategy, seeds in strategies.items():
            cells = [_pm([m[k] for m in seeds.values()], d) if k in next(iter(seeds.values())) else "-"
                     for k, _, d in cols]
            seed_list = ",".join(map(str, sorted(seeds)))
            lines.append(f"| {name}/{strategy} | {seed_list} | " + " | ".join(cells) + " |")
    base_name, base = next(iter(data.items()))
    lines += ["", "| comparison | metric | seeds | per-seed difference (pp) | mean | 95 % t interval "
              "| reading |", "|---|---|---|---|---|---|---|"]
    for name, strategies in list(data.items())[1:]:
        for strategy, seeds in strategies.items():
            common = sorted(set(seeds) & set(base.get(strategy, {})))
            for key in ("overall", "others"):
                if len(common) < 2 or key not in seeds[common[0]] or key not in base[strategy][common[0]]:
                    continue
                other, ref = [seeds[s][key] for s in common], [base[strategy][s][key] for s in common]
                mean, lo, hi = paired_interval(other, ref)
                reading = "not distinguishable" if lo <= 0 <= hi else ("higher" if lo > 0 else "lower")
                diffs = ", ".join(f"{o - r:+.2f}" for o, r in zip(other, ref, strict=True))
                lines.append(f"| {name}/{strategy} − {base_name}/{strategy} | {key} "
                             f"| {','.join(map(str, common))} | {diffs} | {mean:+.2f} "
                             f"| [{lo:+.2f}, {hi:+.2f}] | {reading} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) < 2:
        print("usage: python -m server_app.paired results/<baseline> results/<other> [...]", file=sys.stderr)
        return 2
    print(report([Path(a) for a in args]), end="")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
