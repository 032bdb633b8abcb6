"""How a run's selections cover the layers: per run, the selections of every layer summed over its
clients and trained rounds, the layers it never trained, and the fewest and most selections of a
layer (F3OCUS's diversity objective is the spread of these counts within a round, paper §4.2; over
a run it shows whether the server step spread the layers or piled them onto a client's top-k).

    python -m experiments.coverage results/<experiment> [...] [--csv PATH]
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from experiments.report import Run, load_runs, selection_counts, write_table


def coverage_rows(experiment: str, runs: Sequence[Run]) -> list[dict]:
    """One row per run and layer: its selections over the run."""
    return [{"experiment": experiment, "run": run.name, "layer": layer, "selections": int(count)}
            for run in runs
            for layer, count in enumerate(selection_counts([run], len(run.config["layer-names"])))]


def summary(rows: Sequence[dict]) -> list[str]:
    """Per run: the layers never trained and the fewest and most selections of a layer."""
    by_run: dict[tuple[str, str], list[int]] = {}
    for r in rows:
        by_run.setdefault((r["experiment"], r["run"]), []).append(r["selections"])
    lines = []
    for key, counts in by_run.items():
        never = [layer for layer, count in enumerate(counts) if count == 0]
        lines.append(f"{key[0]}/{key[1]}: {len(never)} layers never trained {never}, "
                     f"selections of a layer {min(counts)}-{max(counts)}")
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m experiments.coverage",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("experiments", nargs="+", type=Path)
    parser.add_argument("--csv", type=Path, help="write every run's selections per layer here")
    args = parser.parse_args(argv)
    rows = []
    for experiment in args.experiments:
        try:
            runs, _ = load_runs(experiment)
        except FileNotFoundError as err:
            print(f"error: {err}", file=sys.stderr)
            return 2
        if not runs:
            print(f"error: experiment {str(experiment)!r}: no complete run", file=sys.stderr)
            return 2
        rows += coverage_rows(experiment.name, runs)
    print("\n".join(summary(rows)))
    if args.csv:
        write_table(args.csv, rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
