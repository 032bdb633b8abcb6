"""Choose a setting per selection rule on validation questions, never on test questions:

    python -m experiments.validation results/val-lr3e-4 results/val-lr1e-3 results/val-lr3e-3 --key lr \
        [--csv record.csv] [--json choice.json]

Each experiment holds runs made with ``validation-share > 0`` (each client evaluates on held-out
questions of its own training data, `tasks.data.validation.hold_out`); a run with
``validation-share = 0`` scored test questions and is refused in one line. For every rule
(`methods.label`) and value of ``--key`` it reads the last round's accuracy over all clients
(weighted by their questions, `experiments.report.score_metrics`) and the mean over rounds 1..N (the
area under the curve, a second reading), and chooses per rule the value with the highest last-round
accuracy (ties: the smaller value). Prints the record as a markdown table and the choice; ``--csv``
writes the record (one row per run, with its seed and commit-free settings), ``--json`` the choice
(rule -> value).
"""

from __future__ import annotations

import argparse
import csv
import json
import sys
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from experiments.report import load_runs, score_metrics
from methods import label


def records(dirs: Sequence[Path], key: str) -> list[dict]:
    """One row per complete run: rule, value of ``key``, seed, last-round and mean-over-rounds
    validation accuracy (%); ValueError naming a run that did not evaluate on validation questions."""
    rows = []
    for directory in dirs:
        runs, _ = load_runs(directory)
        for run in runs:
            share = float(run.config.get("validation-share", 0.0))
            if share <= 0:
                raise ValueError(f"{run.path}: validation-share = {share!r}, so it scored test questions; "
                                 "choose settings on runs with validation-share > 0")
            if key not in run.config:
                raise ValueError(f"{run.path}: its config has no key {key!r}")
            by_round = [[r for r in run.clients if r["round"] == n and r.get("evaluate")]
                        for n in sorted({r["round"] for r in run.clients})]
            curve = [score_metrics(rows_of_round)["overall"] for rows_of_round in by_round]
            rows.append({"rule": label(run.strategy, run.config["optimizer"]), key: run.config[key],
                         "seed": run.seed, "validation-share": share,
                         "last": round(curve[-1], 4), "mean-over-rounds": round(float(np.mean(curve)), 4),
                         "experiment": directory.name})
    return rows


def choose(rows: Sequence[dict], key: str) -> dict[str, object]:
    """Rule -> the value of ``key`` with the highest mean last-round accuracy over its runs (ties:
    the smaller value)."""
    best: dict[str, tuple[float, object]] = {}
    for rule in dict.fromkeys(r["rule"] for r in rows):
        values = sorted({r[key] for r in rows if r["rule"] == rule})
        scored = [(float(np.mean([r["last"] for r in rows if r["rule"] == rule and r[key] == v])), v)
                  for v in values]
        best[rule] = max(scored, key=lambda pair: (pair[0], -values.index(pair[1])))
    return {rule: value for rule, (_, value) in best.items()}


def table(rows: Sequence[dict], key: str, chosen: dict[str, object]) -> str:
    """Markdown: one row per rule and value, the chosen value marked."""
    lines = [f"| rule | {key} | seeds | validation accuracy, last round (%) | mean over rounds (%) "
             "| chosen |",
             "|---|---|---|---|---|---|"]
    for rule in dict.fromkeys(r["rule"] for r in rows):
        for value in sorted({r[key] for r in rows if r["rule"] == rule}):
            mine = [r for r in rows if r["rule"] == rule and r[key] == value]
            lines.append(f"| {rule} | {value:g} | {', '.join(str(r['seed']) for r in mine)} | "
                         f"{np.mean([r['last'] for r in mine]):.2f} | "
                         f"{np.mean([r['mean-over-rounds'] for r in mine]):.2f} | "
                         f"{'yes' if chosen[rule] == value else ''} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("experiments", nargs="+", type=Path, help="experiment folders of validation runs")
    parser.add_argument("--key", required=True, help="the run-config key the experiments differ in, e.g. lr")
    parser.add_argument("--csv", type=Path, help="write the record, one row per run")
    parser.add_argument("--json", type=Path, help="write the choice, rule -> value")
    args = parser.parse_args(argv)
    try:
        rows = records(args.experiments, args.key)
    except (ValueError, FileNotFoundError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    if not rows:
        print("error: no complete run in " + ", ".join(map(str, args.experiments)), file=sys.stderr)
        return 2
    chosen = choose(rows, args.key)
    print(table(rows, args.key, chosen))
    print("chosen: " + ", ".join(f"{rule} {args.key} = {value:g}" for rule, value in chosen.items()))
    if args.csv:
        with open(args.csv, "w", newline="") as fh:
            writer = csv.DictWriter(fh, fieldnames=list(rows[0]))
            writer.writeheader()
            writer.writerows(rows)
    if args.json:
        args.json.write_text(json.dumps(chosen, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
