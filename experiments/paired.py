"""Paired comparison of sweeps that differ in one setting (e.g. `aggregation`), or of the strategies
of one sweep against reference strategies, from run files only:

    python -m experiments.paired results/<baseline> results/<other> [results/<other> ...]
    python -m experiments.paired results/<experiment> --against random,lntk

Every experiment directory is read like `experiments.report` reads it (complete runs only); a row is
``<experiment>/<strategy>``. Printed:

1. one table row per experiment and strategy: overall accuracy (weighted by test examples), the
   'Others' accuracy of FedMosaic (paper §5, each client's model on the other clients' test data;
   run config ``eval-others``) when the runs have it, uplink MB per round, seconds per round, the
   training phase's and the server aggregation's seconds per round (``phase-seconds.training`` and
   ``.aggregating``), mean ± sample std over seeds;
2. for every other experiment and every strategy it shares with the baseline (or, where the
   baseline holds one strategy only, with that one: experiments that differ in aggregation *and*
   selection, e.g. F3OCUS + FedAvg against FedAvg of every layer), the per-seed paired
   differences other − baseline of overall (and Others) accuracy and their 95 % Student-t interval
   mean(d) ± t_{0.975, n−1} · sd(d) / √n (`paired_interval`), with "not distinguishable" when the
   interval covers 0 (one common seed: its difference, marked as having no interval, not drawn). Seeds
   fix the client data split and initialisation, so pairing by seed removes that shared variation from
   the comparison. ``--figure PATH`` draws these differences with their intervals and writes beside it
   ``<stem>.csv``, the per-seed differences it was drawn from (row, base, metric, seed, difference),
   and ``<stem>-seeds.csv``, the per-seed values that were paired (experiment, strategy, seed, metric,
   value); ``--redraw <stem>.csv`` draws the figure again from that table alone, without run folders.

With ``--against``, item 2 pairs, within each experiment, every strategy with each named reference
strategy instead (``zero-shot``: the round-0 evaluation of the same seed's runs), and adds both
rows' seed standard deviations and the mean difference in units of the larger one (the
sensitivity criterion: a gap of more than 3 such units).
"""

from __future__ import annotations

import argparse
import csv
import sys
from collections.abc import Sequence
from pathlib import Path

import numpy as np
from scipy import stats

from experiments.report import (
    Run,
    load_runs,
    mean_std,
    plus_minus,
    pyplot,
    run_metrics,
    save_figure,
    score_metrics,
)


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


ZERO_SHOT = "zero-shot"
"""The reference row of the round-0 evaluation: ``--against zero-shot``."""


def by_seed(experiment_dir: Path, zero_shot: bool = False) -> dict[str, dict[int, dict[str, float]]]:
    """strategy (``f3ocus-<optimizer>`` for F3OCUS, so each optimiser is its own row) -> seed ->
    `seed_metrics` of the experiment's complete runs; with ``zero_shot``, row `ZERO_SHOT` holds each
    seed's round-0 evaluation (the same model and test questions in every run of a seed), so a
    strategy pairs with the untrained start of its own seed."""
    out: dict[str, dict[int, dict[str, float]]] = {}
    for run in load_runs(experiment_dir)[0]:
        out.setdefault(run.group, {})[run.seed] = seed_metrics(run)
        if zero_shot and run.initial:
            out.setdefault(ZERO_SHOT, {})[run.seed] = score_metrics(run.initial)
    return out


def paired_row(label: str, key: str, seeds: dict[int, dict], ref: dict[int, dict]
                ) -> tuple[str, float, float, float, dict[int, float]] | None:
    """One markdown row of paired differences, their mean, interval and the differences by seed
    (None without a common seed; one common seed: its difference, no interval, NaN bounds)."""
    common = sorted(set(seeds) & set(ref))
    if not common or key not in seeds[common[0]] or key not in ref[common[0]]:
        return None
    other, base = [seeds[s][key] for s in common], [ref[s][key] for s in common]
    if len(common) == 1:
        mean, lo, hi = other[0] - base[0], float("nan"), float("nan")
        interval, reading = "-", "one seed: no interval"
    else:
        mean, lo, hi = paired_interval(other, base)
        interval = f"[{lo:+.2f}, {hi:+.2f}]"
        reading = "not distinguishable" if lo <= 0 <= hi else ("higher" if lo > 0 else "lower")
    diffs = ", ".join(f"{o - r:+.2f}" for o, r in zip(other, base, strict=True))
    return (f"| {label} | {key} | {','.join(map(str, common))} | {diffs} | {mean:+.2f} "
            f"| {interval} | {reading} |"), mean, lo, hi, \
        {s: o - r for s, o, r in zip(common, other, base, strict=True)}


def against(data: dict[str, dict[str, dict[int, dict]]], references: Sequence[str]) -> list[str]:
    """Rows of every strategy paired with each reference strategy of the same experiment, with the
    seed stds of both and the mean difference over the larger std."""
    lines = ["| comparison | metric | seeds | per-seed difference (pp) | mean | 95 % t interval | reading "
             "| std (strategy / reference) | mean ÷ larger std |", "|---|---|---|---|---|---|---|---|---|"]
    for name, strategies in data.items():
        for reference in references:
            if reference not in strategies:
                raise ValueError(f"--against {reference!r}: experiment {name!r} has no complete runs "
                                 f"of it (it has {', '.join(strategies) or 'none'})")
            for strategy, seeds in strategies.items():
                paired = None if strategy == reference else paired_row(
                    f"{name}: {strategy} − {reference}", "overall", seeds, strategies[reference])
                if paired is None:
                    continue
                row, mean = paired[:2]
                if len(paired[4]) < 2:  # the seed stds need two seeds
                    lines.append(f"{row} - | - |")
                    continue
                spread = [mean_std([m["overall"] for m in runs.values()])[1]
                          for runs in (seeds, strategies[reference])]
                units = mean / max(spread) if max(spread) > 0 else float("inf")
                lines.append(f"{row} {spread[0]:.2f} / {spread[1]:.2f} | {units:+.1f} |")
    return lines


def _reference(strategy: str, base: dict[str, dict]) -> str | None:
    """The baseline strategy a row pairs with: the same one, else the baseline's only one."""
    if strategy in base:
        return strategy
    return next(iter(base)) if len(base) == 1 else None


DIFFERENCE_COLUMNS = ["row", "base", "metric", "seed", "difference"]


def write_differences(path: Path, drawn: Sequence[tuple[str, str, dict[int, float]]], base: str) -> Path:
    """The figure's table: one line per row, metric and seed, the paired difference other − base (pp)."""
    with open(path, "w", newline="", encoding="utf-8") as fh:
        writer = csv.writer(fh)
        writer.writerow(DIFFERENCE_COLUMNS)
        for label, key, diffs in drawn:
            writer.writerows([label, base, key, seed, f"{d:.6g}"] for seed, d in sorted(diffs.items()))
    return path


def read_differences(path: Path) -> tuple[list[tuple[str, str, dict[int, float]]], str]:
    """`write_differences`'s rows (row, metric, seed -> difference) in file order, and the base."""
    with open(path, newline="", encoding="utf-8") as fh:
        rows = list(csv.DictReader(fh))
    if not rows or list(rows[0]) != DIFFERENCE_COLUMNS:
        raise ValueError(f"{str(path)!r}: not a paired-differences table (columns {DIFFERENCE_COLUMNS})")
    drawn: dict[tuple[str, str], dict[int, float]] = {}
    for row in rows:
        drawn.setdefault((row["row"], row["metric"]), {})[int(row["seed"])] = float(row["difference"])
    return [(label, key, diffs) for (label, key), diffs in drawn.items()], rows[0]["base"]


def plot_differences(path: Path, drawn: Sequence[tuple[str, str, dict[int, float]]], base: str) -> Path:
    """Paired differences other − `base`: mean and 95 % interval (`paired_interval`) per row, one
    panel per metric."""
    plt = pyplot()
    keys = [k for k in ("overall", "others") if any(c[1] == k for c in drawn)]
    labels = list(dict.fromkeys(c[0] for c in drawn))
    fig, axes = plt.subplots(1, len(keys), figsize=(4.5 * len(keys), 0.45 * len(labels) + 1.5),
                             sharey=True, squeeze=False)
    for ax, key in zip(axes[0], keys, strict=True):
        rows = {label: paired_interval(list(diffs.values()), [0.0] * len(diffs))
                for label, k, diffs in drawn if k == key}
        y = [i for i, label in enumerate(labels) if label in rows]
        mean, lo, hi = (np.array([rows[labels[i]][j] for i in y]) for j in range(3))
        ax.errorbar(mean, y, xerr=[mean - lo, hi - mean], fmt="o", capsize=3)
        ax.axvline(0, color="gray", lw=0.8)
        name = {"overall": "Self", "others": "Others"}[key]
        ax.set_title(f"{name} accuracy (pp)\n− {base}, 95 % interval", fontsize=9)
        ax.set_yticks(range(len(labels)), labels)
    axes[0, 0].invert_yaxis()  # once: the panels share the y axis, a second call would undo it
    return save_figure(fig, path)


def redraw(table: Path) -> Path:
    """Draw ``<stem>.png`` beside a `write_differences` table from that table alone."""
    drawn, base = read_differences(table)
    return plot_differences(table.with_suffix(".png"), drawn, base)


def write_seed_values(path: Path, data: dict[str, dict[str, dict[int, dict]]],
                      keys: Sequence[str] = ("overall", "others")) -> Path:
    """Every per-seed value the paired comparison used: experiment, strategy, seed, metric, value."""
    with open(path, "w", newline="", encoding="utf-8") as fh:
        writer = csv.writer(fh)
        writer.writerow(["experiment", "strategy", "seed", "metric", "value"])
        for name, strategies in data.items():
            for strategy, seeds in strategies.items():
                writer.writerows([name, strategy, seed, key, f"{metrics[key]:.6g}"]
                                 for seed, metrics in sorted(seeds.items()) for key in keys if key in metrics)
    return path


def report(dirs: Sequence[Path], references: Sequence[str] = (), figure: Path | None = None) -> str:
    """The table and the paired intervals (module doc) as markdown; with `figure`, the intervals
    against the baseline drawn there."""
    data = {Path(d).name: by_seed(Path(d), zero_shot=ZERO_SHOT in references) for d in dirs}
    cols = [("overall", "overall", 2), ("majority", "majority answer", 1), ("others", "Others", 2),
            ("uplink_mb", "uplink MB / round", 2),
            ("seconds", "s / round", 1), ("training_s", "training s / round", 1),
            ("aggregating_s", "aggregation s / round", 3)]
    lines = ["| run | seeds | " + " | ".join(c[1] for c in cols) + " |", "|---|---|" + "---|" * len(cols)]
    for name, strategies in data.items():
        for strategy, seeds in strategies.items():
            first = next(iter(seeds.values()))
            cells = [plus_minus(mean_std([m[k] for m in seeds.values()]), d) if k in first else "-"
                     for k, _, d in cols]
            seed_list = ",".join(map(str, sorted(seeds)))
            lines.append(f"| {name}/{strategy} | {seed_list} | " + " | ".join(cells) + " |")
    if references:
        return "\n".join([*lines, "", *against(data, references)]) + "\n"
    base_name, base = next(iter(data.items()))
    lines += ["", "| comparison | metric | seeds | per-seed difference (pp) | mean | 95 % t interval "
              "| reading |", "|---|---|---|---|---|---|---|"]
    drawn = []
    for name, strategies in list(data.items())[1:]:
        for strategy, seeds in strategies.items():
            reference = _reference(strategy, base)
            for key in ("overall", "others"):
                row = None if reference is None else paired_row(
                    f"{name}/{strategy} − {base_name}/{reference}", key, seeds, base[reference])
                if row is not None:
                    lines.append(row[0])
                if row is not None and len(row[4]) > 1:  # the figure draws intervals
                    drawn.append((f"{name}/{strategy}", key, row[4]))
    if figure is not None and drawn:
        label = f"{base_name}/{next(iter(base))}" if len(base) == 1 else base_name
        plot_differences(figure, drawn, label)
        write_differences(figure.with_suffix(".csv"), drawn, label)
        write_seed_values(figure.with_name(f"{figure.stem}-seeds.csv"), data)
    return "\n".join(lines) + "\n"


USAGE = ("usage: python -m experiments.paired results/<baseline> results/<other> [...] [--figure PATH]\n"
         "       python -m experiments.paired results/<experiment> [...] --against <strategy>[,...]\n"
         "       python -m experiments.paired --redraw <figure>.csv [...]")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m experiments.paired", usage=USAGE)
    parser.add_argument("experiments", nargs="*", type=Path)
    parser.add_argument("--against", default="", help="reference strategies of the same experiment")
    parser.add_argument("--figure", type=Path, help="draw the paired intervals against the baseline here")
    parser.add_argument("--redraw", type=Path, nargs="+", default=[],
                        help="figure tables (<stem>.csv of --figure) to draw <stem>.png from, no runs")
    args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    if args.redraw:
        try:
            print("\n".join(str(redraw(t)) for t in args.redraw))
        except (ValueError, FileNotFoundError) as err:
            print(f"error: {err}", file=sys.stderr)
            return 2
        return 0
    references = [r for r in args.against.split(",") if r]
    if len(args.experiments) < 2 and not references:
        print(USAGE, file=sys.stderr)
        return 2
    try:
        print(report(args.experiments, references, args.figure), end="")
    except (ValueError, FileNotFoundError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
