"""Accuracy against the layer budget (paper §6.2's budget study), from run files only:

    python -m experiments.budget_sweep results/bench-yesno-k1 results/bench-yesno-k2 results/bench-yesno-k4

Each experiment is a sweep whose runs give every client the same budget k (run config ``budgets``,
one value). Printed: one markdown row per strategy, one column per k, the overall accuracy (%,
weighted by test examples, final round) as mean ± sample std over seeds. ``all`` and ``none`` do
not depend on k (they train every layer or none), so they get one column of their own wherever an
experiment holds them. Written: ``budget_sweep.png`` (``--figure``): accuracy against k per
strategy, ± one std, with ``all`` and ``none`` as horizontal bands, and beside it ``<stem>.csv``, the
printed table (the values the figure plots); ``--redraw <stem>.csv`` draws the figure again from that
table alone, without run folders. Paired intervals at each k come from
``python -m experiments.paired <experiments> --against random,lntk``.
"""

from __future__ import annotations

import argparse
import csv
import sys
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from experiments.report import load_runs, mean_std, plus_minus, pyplot, run_metrics, save_figure
from methods import SELECTIONS
from settings import parse_budgets

# strategies whose layers do not depend on k: budget-free (every layer) and adapter-free (none)
BAND_STYLES = {name: "--" if entry.trains_adapter else ":" for name, entry in SELECTIONS.items()
               if not (entry.needs_budget and entry.trains_adapter)}


def uniform_budget(experiment_dir: Path) -> tuple[int, dict[str, list[float]]]:
    """The experiment's common budget k and, per strategy (``f3ocus-<optimizer>`` for F3OCUS), the
    overall accuracies (%) of its complete runs, in seed order."""
    runs, _ = load_runs(experiment_dir)
    if not runs:
        raise ValueError(f"experiment {str(experiment_dir)!r}: no complete runs")
    budgets = {run.config["budgets"] for run in runs}
    values = {b for text in budgets for b in parse_budgets(text)}
    if len(values) != 1 or not isinstance(next(iter(values)), int):
        raise ValueError(f"experiment {str(experiment_dir)!r}: budgets = {sorted(budgets)!r} is not one "
                         "value k shared by every client and run")
    accuracy: dict[str, list[float]] = {}
    for run in sorted(runs, key=lambda r: r.seed):
        accuracy.setdefault(run.group, []).append(run_metrics(run)["overall"])
    return int(next(iter(values))), accuracy


def sweep(dirs: Sequence[Path]) -> dict[str, dict[int | str, list[float]]]:
    """strategy -> k (or ``"any"`` for the strategies of `BAND_STYLES`) -> overall accuracies (%)."""
    out: dict[str, dict[int | str, list[float]]] = {}
    for experiment in dirs:
        k, accuracy = uniform_budget(Path(experiment))
        for strategy, values in accuracy.items():
            column = "any" if strategy in BAND_STYLES else k
            if column in out.get(strategy, {}):
                raise ValueError(f"{strategy} at budget {column} appears in two experiments "
                                 f"(the second: {str(experiment)!r})")
            out.setdefault(strategy, {})[column] = values
    return out


def _budgets(data: dict[str, dict[int | str, list[float]]]) -> list[int]:
    """The budgets k that some strategy ran with, ascending."""
    return sorted({k for cells in data.values() for k in cells if k != "any"})


ANY = "any k (all / none)"
Stats = dict[str, dict[int | str, tuple[float, float]]]  # strategy -> k or "any" -> (mean, std)


def table(data: dict[str, dict[int | str, list[float]]]) -> list[list[str]]:
    """The module doc's table: header, then one row per strategy of 'mean ± std' cells."""
    columns: list[int | str] = [*_budgets(data), "any"]
    out = [["strategy", *(f"k = {k}" if k != "any" else ANY for k in columns), "seeds"]]
    for strategy, cells in sorted(data.items()):
        seeds = sorted({len(v) for v in cells.values()})
        out.append([strategy, *(plus_minus(mean_std(cells[k]), 2) if k in cells else "-" for k in columns),
                    "/".join(map(str, seeds))])
    return out


def markdown(data: dict[str, dict[int | str, list[float]]]) -> str:
    """The table of the module doc."""
    head, *body = table(data)
    lines = ["| " + " | ".join(head) + " |", "|---|" + "---|" * (len(head) - 1)]
    return "\n".join([*lines, *("| " + " | ".join(row) + " |" for row in body)]) + "\n"


def stats_of(rows: list[list[str]]) -> Stats:
    """(mean, std) per strategy and k of `table`'s rows (std NaN where a cell has one seed)."""
    head, *body = rows
    keys: list[int | str] = [int(h.removeprefix("k = ")) if h.startswith("k = ") else "any"
                             for h in head[1:-1]]
    out: Stats = {}
    for row in body:
        for key, cell in zip(keys, row[1:-1], strict=True):
            if cell != "-":
                mean, _, std = cell.partition("±")
                out.setdefault(row[0], {})[key] = (float(mean), float(std) if std else float("nan"))
    return out


def read_table(path: Path) -> Stats:
    """`stats_of` a ``<stem>.csv`` written with the figure (or copied from the printed table)."""
    with open(path, newline="", encoding="utf-8") as fh:
        rows = list(csv.reader(fh))
    if not rows or rows[0][0] != "strategy" or rows[0][-1] != "seeds":
        raise ValueError(f"{str(path)!r}: not a budget-sweep table (columns strategy, k = ..., seeds)")
    return stats_of(rows)


def plot(path: Path, stats: Stats) -> Path:
    """Accuracy against k, mean ± std over seeds; budget-free strategies as horizontal bands."""
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    budgets = sorted({k for cells in stats.values() for k in cells if k != "any"})
    for strategy, cells in sorted(stats.items()):
        if "any" in cells:  # grey bands, told apart by line style, not taken from the colour cycle
            mean, std = cells["any"]
            ax.axhline(mean, color="0.35", linestyle=BAND_STYLES[strategy], label=f"{strategy} (any k)")
            ax.axhspan(mean - np.nan_to_num(std), mean + np.nan_to_num(std), alpha=0.1, color="0.35")
        ks = [k for k in budgets if k in cells]
        if ks:
            values = np.array([cells[k] for k in ks])
            ax.errorbar(ks, values[:, 0], yerr=np.nan_to_num(values[:, 1]), marker="o", capsize=3,
                        label=strategy)
    ax.set_xticks(budgets)
    ax.set_xlabel("layer budget k (every client)")
    ax.set_ylabel("overall accuracy, final round (%)")
    ax.legend(fontsize=8)
    return save_figure(fig, path)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m experiments.budget_sweep")
    parser.add_argument("experiments", nargs="*", type=Path, help="results/<experiment>, one per k")
    parser.add_argument("--figure", type=Path, default=None,
                        help="where to write the figure (default: budget_sweep.png beside the "
                             "first experiment)")
    parser.add_argument("--redraw", type=Path, default=None,
                        help="a figure's table (<stem>.csv) to draw <stem>.png from, no runs")
    args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    if not args.experiments and args.redraw is None:
        parser.error("give results/<experiment> directories or --redraw <table>.csv")
    try:
        if args.redraw is not None:
            print(f"figure: {plot(args.redraw.with_suffix('.png'), read_table(args.redraw))}")
            return 0
        data = sweep(args.experiments)
    except (ValueError, FileNotFoundError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    print(markdown(data), end="")
    figure = args.figure or args.experiments[0].parent / "budget_sweep.png"
    rows = table(data)
    with open(figure.with_suffix(".csv"), "w", newline="", encoding="utf-8") as fh:
        csv.writer(fh).writerows(rows)
    print(f"figure: {plot(figure, stats_of(rows))}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
