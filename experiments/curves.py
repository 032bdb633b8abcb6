"""Rules compared over the whole run, from committed raw rows (`experiments.rows`) alone:

    python -m experiments.curves docs/results/<page>/runs.csv --reference f3ocus-nsga2 --against all,random \
        [--experiment NAME] [--figure docs/results/<page>/curves.png]

Per rule, seed and round the overall accuracy is the clients' accuracy weighted by their questions
(%). Printed, as markdown: the last round per rule (mean ± sample std over seeds, the uplink per
round and its share of `all`'s); the paired differences reference − each rule over their common
seeds, of the last round and of the mean over rounds 1..N (the area under the curve, a second
reading), each with its 95 % Student-t interval (`experiments.paired.paired_interval`), its half
width and a reading ("higher", "lower", "not distinguishable"); the same last-round difference per
client, to show which clients carry it; the same difference in every round, to show where along
the run the rules separate; and every round's mean with its 95 % t interval per rule.
``--figure`` draws the per-round means and intervals and writes beside it ``<stem>.csv``, the table
it drew.
"""

from __future__ import annotations

import argparse
import csv
import sys
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path

import numpy as np
from scipy import stats

from experiments.paired import paired_interval
from experiments.report import pyplot, save_figure


def read(path: Path, experiment: str | None = None) -> list[dict]:
    with open(path, newline="") as fh:
        found = [r for r in csv.DictReader(fh) if experiment is None or r["experiment"] == experiment]
    if not found:
        raise ValueError(f"{path}: no rows" + (f" of experiment {experiment!r}" if experiment else ""))
    return found


def overall(rows: Sequence[dict]) -> dict[str, dict[int, dict[int, float]]]:
    """Rule -> seed -> round -> overall accuracy (%), weighted by each client's questions."""
    sums: dict[tuple[str, int, int], list[float]] = defaultdict(lambda: [0.0, 0.0])
    for r in rows:
        key = (r["rule"], int(r["seed"]), int(r["round"]))
        sums[key][0] += float(r["accuracy"]) * float(r["num_examples"])
        sums[key][1] += float(r["num_examples"])
    out: dict[str, dict[int, dict[int, float]]] = defaultdict(lambda: defaultdict(dict))
    for (rule, seed, rnd), (hits, n) in sums.items():
        out[rule][seed][rnd] = 100 * hits / n
    return out


def uplink(rows: Sequence[dict]) -> dict[str, float]:
    """Rule -> mean uplink bytes per trained round (all clients, all seeds)."""
    per: dict[tuple[str, int, int], float] = defaultdict(float)
    for r in rows:
        if int(r["round"]) > 0:
            per[(r["rule"], int(r["seed"]), int(r["round"]))] += float(r["bytes_up"])
    rules: dict[str, list[float]] = defaultdict(list)
    for (rule, _, _), value in per.items():
        rules[rule].append(value)
    return {rule: float(np.mean(values)) for rule, values in rules.items()}


def last(curve: dict[int, float]) -> float:
    return curve[max(curve)]


def auc(curve: dict[int, float]) -> float:
    """Mean over rounds 1..N (round 0, the start, left out)."""
    return float(np.mean([v for r, v in curve.items() if r > 0]))


def reading(low: float, high: float) -> str:
    return "higher" if low > 0 else "lower" if high < 0 else "not distinguishable"


def difference(a: Sequence[float], b: Sequence[float]) -> dict:
    """Mean of a − b over paired seeds, with its 95 % t interval and reading from two seeds on; on
    one seed the difference alone."""
    if len(a) >= 2:
        mean, low, high = paired_interval(a, b)
        return {"mean": mean, "low": low, "high": high, "reading": reading(low, high)}
    return {"mean": a[0] - b[0] if a else float("nan"), "reading": "one seed: no interval"}


def _bounds(row: dict, spec: str = "+.2f") -> str:
    """A row's interval as printed; "-" where it has none (no bounds, or NaN ones on one seed)."""
    has = "low" in row and not np.isnan(row["low"])
    return f"[{row['low']:{spec}}, {row['high']:{spec}}]" if has else "-"


def pairs(data: dict, reference: str, others: Sequence[str]) -> list[dict]:
    """Reference − each other rule, last round and mean over rounds, over their common seeds."""
    out = []
    for other in others:
        if other not in data:
            raise ValueError(f"--against {other!r}: no runs of it; rules present: {', '.join(sorted(data))}")
        seeds = sorted(set(data[reference]) & set(data[other]))
        for name, measure in (("last round", last), ("mean over rounds", auc)):
            a, b = [measure(data[reference][s]) for s in seeds], [measure(data[other][s]) for s in seeds]
            row = {"comparison": f"{reference} − {other}", "reading of": name, "seeds": seeds,
                   "diffs": [x - y for x, y in zip(a, b, strict=True)], **difference(a, b)}
            if "low" in row:
                row["width"] = (row["high"] - row["low"]) / 2
            out.append(row)
    return out


def per_client(rows: Sequence[dict], reference: str, others: Sequence[str]) -> list[dict]:
    """Per client and other rule: reference − other in the client's last-round accuracy (%), over
    their common seeds, with its 95 % t interval where there are two seeds or more."""
    ends: dict[tuple[str, str], dict[int, tuple[int, float]]] = defaultdict(dict)
    for r in rows:
        seen = ends[(r["rule"], r["client"])].get(int(r["seed"]))
        if seen is None or int(r["round"]) > seen[0]:
            ends[(r["rule"], r["client"])][int(r["seed"])] = (int(r["round"]), 100 * float(r["accuracy"]))
    out = []
    for other in others:
        for client in sorted({c for rule, c in ends if rule == reference}, key=_natural):
            mine, theirs = ends[(reference, client)], ends.get((other, client), {})
            seeds = sorted(set(mine) & set(theirs))
            if not seeds:
                continue
            a, b = [mine[s][1] for s in seeds], [theirs[s][1] for s in seeds]
            out.append({"comparison": f"{reference} − {other}", "client": client, "seeds": len(seeds),
                        "reference": float(np.mean(a)), "other": float(np.mean(b)), **difference(a, b)})
    return out


def _natural(name: str) -> tuple:
    """``partition-2`` before ``partition-10``."""
    head, _, tail = name.rpartition("-")
    return (head, int(tail)) if tail.isdigit() else (name, -1)


def per_round(data: dict) -> list[dict]:
    """Rule, round, seeds, mean and 95 % t interval of the overall accuracy."""
    out = []
    for rule in sorted(data):
        rounds = sorted(set.intersection(*(set(c) for c in data[rule].values())))
        for rnd in rounds:
            values = np.array([data[rule][s][rnd] for s in sorted(data[rule])])
            half = (stats.t.ppf(0.975, len(values) - 1) * values.std(ddof=1) / np.sqrt(len(values))
                    if len(values) > 1 else float("nan"))
            out.append({"rule": rule, "round": rnd, "seeds": len(values), "mean": float(values.mean()),
                        "low": float(values.mean() - half), "high": float(values.mean() + half)})
    return out


def paired_rounds(data: dict, reference: str, others: Sequence[str]) -> list[dict]:
    """Reference − each other rule in every round both ran on all their common seeds: the mean
    difference (pp) and its 95 % t interval, to show where along the run two rules separate. On one
    common seed, the difference alone: where a ranking flips is still seen, but not whether it holds."""
    out = []
    for other in others:
        seeds = sorted(set(data[reference]) & set(data[other]))
        if not seeds:
            continue
        curves = [data[rule][s] for rule in (reference, other) for s in seeds]
        for rnd in sorted(set.intersection(*(set(c) for c in curves))):
            out.append({"comparison": f"{reference} − {other}", "round": rnd, "seeds": len(seeds),
                        **difference([data[reference][s][rnd] for s in seeds],
                                     [data[other][s][rnd] for s in seeds])})
    return out


def _mean_std(values: Sequence[float]) -> str:
    return f"{np.mean(values):.2f} ± {np.std(values, ddof=1) if len(values) > 1 else 0.0:.2f}"


def report(rows: Sequence[dict], reference: str, others: Sequence[str]) -> str:
    data = overall(rows)
    if reference not in data:
        raise ValueError(f"--reference {reference!r}: no runs of it; rules present: "
                         f"{', '.join(sorted(data))}")
    sent = uplink(rows)
    lines = ["| rule | seeds | last round % | mean over rounds % | uplink MB / round | of `all`'s |",
             "|---|---|---|---|---|---|"]
    for rule in sorted(data):
        ends = [last(c) for c in data[rule].values()]
        areas = [auc(c) for c in data[rule].values()]
        share = f"{100 * sent[rule] / sent['all']:.1f} %" if "all" in sent else "-"
        lines.append(f"| {rule} | {len(ends)} | {_mean_std(ends)} | {_mean_std(areas)} | "
                     f"{sent.get(rule, 0) / 1e6:.2f} | {share} |")
    lines += ["", "| comparison | reading of | seeds | per-seed difference (pp) | mean | 95 % t interval "
              "| ± | reading |", "|---|---|---|---|---|---|---|---|"]
    for row in pairs(data, reference, others):
        head = (f"| {row['comparison']} | {row['reading of']} | {','.join(map(str, row['seeds']))} | "
                f"{', '.join(f'{d:+.2f}' for d in row['diffs'])} | {row['mean']:+.2f} |")
        width = f"{row['width']:.2f}" if "width" in row else "-"
        tail = f"{_bounds(row)} | {width} | {row['reading']} |"
        lines.append(f"{head} {tail}")
    lines += ["", "| comparison | client | seeds | reference, last round % | other % | difference (pp) "
              "| 95 % t interval |", "|---|---|---|---|---|---|---|"]
    for row in per_client(rows, reference, others):
        lines.append(f"| {row['comparison']} | {row['client']} | {row['seeds']} | {row['reference']:.2f} | "
                     f"{row['other']:.2f} | {row['mean']:+.2f} | {_bounds(row)} |")
    lines += ["", "| comparison | round | seeds | difference (pp) | 95 % t interval | reading |",
              "|---|---|---|---|---|---|"]
    for row in paired_rounds(data, reference, others):
        lines.append(f"| {row['comparison']} | {row['round']} | {row['seeds']} | {row['mean']:+.2f} | "
                     f"{_bounds(row)} | {row['reading']} |")
    lines += ["", "| rule | round | seeds | mean % | 95 % t interval |", "|---|---|---|---|---|"]
    for row in per_round(data):
        lines.append(f"| {row['rule']} | {row['round']} | {row['seeds']} | {row['mean']:.2f} | "
                     f"{_bounds(row, '.2f')} |")
    return "\n".join(lines)


def figure(rows: Sequence[dict], path: Path) -> Path:
    """Per-round means and 95 % intervals per rule; their table beside the figure."""
    table = per_round(overall(rows))
    with open(path.with_suffix(".csv"), "w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=list(table[0]))
        writer.writeheader()
        writer.writerows(table)
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(7, 4))
    for rule in dict.fromkeys(r["rule"] for r in table):
        mine = [r for r in table if r["rule"] == rule]
        rounds, seeds = [r["round"] for r in mine], mine[0]["seeds"]
        ax.plot(rounds, [r["mean"] for r in mine], marker="o",
                label=f"{rule} ({seeds} seed{'s' * (seeds > 1)})")
        ax.fill_between(rounds, [r["low"] for r in mine], [r["high"] for r in mine], alpha=0.2)
    ax.set_xlabel("round")
    ax.set_ylabel("overall accuracy % (95 % t interval)")
    ax.legend()
    return save_figure(fig, path)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("rows", type=Path, help="a raw-rows CSV of experiments.rows")
    parser.add_argument("--reference", required=True, help="the rule every other is paired against")
    parser.add_argument("--against", required=True, help="comma-separated rules")
    parser.add_argument("--experiment", help="only the rows of this experiment")
    parser.add_argument("--figure", type=Path, help="draw the per-round curves here (.png)")
    args = parser.parse_args(argv)
    try:
        rows = read(args.rows, args.experiment)
        print(report(rows, args.reference, [a.strip() for a in args.against.split(",") if a.strip()]))
        if args.figure:
            print(f"\nfigure: {figure(rows, args.figure)}")
    except (ValueError, KeyError, FileNotFoundError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
