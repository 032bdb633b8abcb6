"""How long sweeps took, from their files only (whether a whole sweep fits within 3 h on 2 cores):

    python -m experiments.sweep_time results/bench-yesno results/bench-yesno-k1 ...

A run starts when its sweep writes ``configs/<run>.toml`` (just before it starts the run's process)
and ends with the last line of ``logs/<run>.log`` (file mtimes; for a resumed run, its last
attempt). A wall time is how long at least one of the runs was going (the length of the union of
their intervals): with ``--jobs 2`` two runs share it, so it is less than the sum of their own
times, and a pause between sweeps, or a later sweep adding seeds, is not counted. Printed, one
markdown row per experiment and one for all of them: complete runs, seconds per run (min, median,
max), the runs' summed seconds and the wall time. ``--csv PATH`` also writes every run's interval
(experiment, run, start, end, in epoch seconds), and ``--from-csv PATH`` prints the table from such
a file alone, so a committed sweep time can be recomputed without the run folders.
"""

from __future__ import annotations

import csv
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from experiments.report import load_runs
from experiments.sweep import CONFIGS, LOGS


@dataclass(frozen=True)
class Timing:
    """Start and end (epoch seconds) of every complete run of one experiment."""

    name: str
    runs: tuple[str, ...]
    starts: np.ndarray
    ends: np.ndarray

    @property
    def seconds(self) -> np.ndarray:
        return self.ends - self.starts

    @property
    def wall(self) -> float:
        return busy(self.starts, self.ends)


def busy(starts: np.ndarray, ends: np.ndarray) -> float:
    """Length of the union of the intervals [start, end]: the time some run was going."""
    total, reach = 0.0, -np.inf
    for start, end in sorted(zip(starts.tolist(), ends.tolist(), strict=True)):
        total += max(0.0, end - max(start, reach))
        reach = max(reach, end)
    return total


def timing(experiment_dir: Path) -> Timing:
    """The complete runs' start and end times; ValueError if one lacks its config or log file."""
    runs, _ = load_runs(experiment_dir)
    if not runs:
        raise ValueError(f"experiment {str(experiment_dir)!r}: no complete runs")
    starts, ends = [], []
    for run in runs:
        config = experiment_dir / CONFIGS / f"{run.name}.toml"
        log = experiment_dir / LOGS / f"{run.name}.log"
        for path in (config, log):
            if not path.is_file():
                raise ValueError(f"run {run.name!r} of {str(experiment_dir)!r}: no {path.name} to time it by")
        starts.append(config.stat().st_mtime)
        ends.append(log.stat().st_mtime)
    return Timing(experiment_dir.name, tuple(r.name for r in runs), np.array(starts), np.array(ends))


CSV_COLUMNS = ["experiment", "run", "start", "end"]


def write_csv(path: Path, timings: Sequence[Timing]) -> Path:
    with open(path, "w", newline="", encoding="utf-8") as fh:
        writer = csv.writer(fh)
        writer.writerow(CSV_COLUMNS)
        for t in timings:
            writer.writerows([t.name, run, f"{a:.3f}", f"{b:.3f}"]
                             for run, a, b in zip(t.runs, t.starts, t.ends, strict=True))
    return path


def read_csv(path: Path) -> list[Timing]:
    """`write_csv`'s timings, experiments in file order."""
    with open(path, newline="", encoding="utf-8") as fh:
        rows = list(csv.DictReader(fh))
    if not rows or list(rows[0]) != CSV_COLUMNS:
        raise ValueError(f"{str(path)!r}: not a sweep-time table (columns {', '.join(CSV_COLUMNS)})")
    names = list(dict.fromkeys(r["experiment"] for r in rows))
    out = []
    for name in names:
        mine = [r for r in rows if r["experiment"] == name]
        out.append(Timing(name, tuple(r["run"] for r in mine), np.array([float(r["start"]) for r in mine]),
                          np.array([float(r["end"]) for r in mine])))
    return out


def table(timings: Sequence[Timing]) -> str:
    """Markdown: per experiment and for all, runs, s per run (min / median / max), summed s, wall."""
    def row(name: str, seconds: np.ndarray, wall: float) -> str:
        return (f"| {name} | {seconds.size} | {seconds.min():.0f} / {np.median(seconds):.0f} / "
                f"{seconds.max():.0f} | {seconds.sum():.0f} | {wall:.0f} s ({wall / 3600:.2f} h) |")

    lines = ["| experiment | runs | s per run (min / median / max) | summed s | wall |",
             "|---|---|---|---|---|"]
    lines += [row(t.name, t.seconds, t.wall) for t in timings]
    if len(timings) > 1:
        starts, ends = (np.concatenate([getattr(t, k) for t in timings]) for k in ("starts", "ends"))
        lines.append(row("**all**", ends - starts, busy(starts, ends)))
    return "\n".join(lines)


USAGE = ("usage: python -m experiments.sweep_time results/<experiment> [...] [--csv PATH]\n"
         "       python -m experiments.sweep_time --from-csv PATH")


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    options = {}
    for flag in ("--csv", "--from-csv"):
        if flag in args and args.index(flag) + 1 < len(args):
            at = args.index(flag)
            options[flag] = Path(args.pop(at + 1))
            args.pop(at)
    if ("--from-csv" in options) == bool(args) or any(a.startswith("-") for a in args):
        print(USAGE, file=sys.stderr)
        return 2
    try:
        if "--from-csv" in options:
            timings = read_csv(options["--from-csv"])
        else:
            timings = [timing(Path(a)) for a in args]
        if "--csv" in options:
            write_csv(options["--csv"], timings)
        print(table(timings))
    except (OSError, ValueError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
