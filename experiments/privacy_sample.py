"""The accuracy cost of per-sample DP (``dp = "sample"``), from run files only.

One sweep per ε on the same benchmark, ε = ∞ being ``dp = "none"`` (docs/results/privacy.md):

    python run_simulation.py --config conf/bench-yesno.toml --run-config "dp='sample' dp-epsilon=1" \\
        --strategies f3ocus --seeds 0,1,2,3,4 --experiment privacy-sample-eps1
    python -m experiments.privacy_sample results/privacy-sample-eps{inf,8,3,1} --csv runs.csv
    python -m experiments.privacy_sample --from-csv runs.csv   # the same tables, no run folders
    python -m experiments.privacy_sample --from-csv earlier.csv results/<new>   # an earlier baseline first
    python -m experiments.privacy_sample --per-round results/<run>   # one run's ε per client and round (CSV)

Printed: a markdown row per experiment (target ε, seeds, overall accuracy, majority-answer accuracy,
uplink MB and training seconds per round, mean ± sample std over seeds, and the largest ε any
client reported spending, `privacy.sample`, beside the largest ε of any site's own ledger by
Opacus's PRV accountant and by RDP, `ledger_epsilons`), then the per-seed paired differences of overall
accuracy against the first experiment with their 95 % t interval (`experiments.paired`; 2 or
more common seeds). ``--csv``: one line per run, the values the table summarises.
"""

from __future__ import annotations

import argparse
import csv
import json
import sys
from collections.abc import Sequence
from pathlib import Path

from client_app.personal import LEDGER
from experiments.paired import paired_row, seed_metrics
from experiments.report import Run, load_runs, mean_std, plus_minus

COLUMNS = ("experiment", "target-epsilon", "seed", "overall", "majority", "uplink_mb", "training_s",
           "epsilon-spent", "epsilon-prv", "epsilon-rdp")
LEDGERS = f"clients/partition-*/{LEDGER}.safetensors"
"""Where a simulated site keeps its ledger in the run folder (`client_app.personal`)."""


def target(run: Run) -> float:
    """The run's ``dp-epsilon`` under ``dp = "sample"``, ∞ without per-sample DP."""
    return float(run.config["dp-epsilon"]) if run.config.get("dp") == "sample" else float("inf")


def spent(run: Run) -> float:
    """The largest ε a client reported spending in any round (0 without per-sample DP)."""
    return max((float(r["train"]["dp-epsilon"]) for r in run.clients
                if r.get("train") and "dp-epsilon" in r["train"]), default=0.0)


def ledger_epsilons(run: Run) -> dict[str, float]:
    """The largest ε any site of ``run`` spent, by Opacus's PRV accountant (Gopi et al. 2021) and by
    RDP (`privacy.mechanisms.epsilon_spent`), each composing the site's own ledger (every release it made:
    a round's DP-SGD steps, a score vector) at the δ it reported; 0 without per-sample DP.
    Independent of the PLD ε the run records. NaN where it cannot be told: a site spent ε but its
    ledger is not in the run folder (a deployed site keeps it under its state-dir), or a site with a
    ledger never reported its δ."""
    from safetensors.numpy import load_file

    from privacy.mechanisms import epsilon_spent

    deltas = {int(r["partition-id"]): float(r["train"]["dp-delta"]) for r in run.clients
              if r.get("train") and "dp-delta" in r["train"]}
    ledgers = sorted(run.path.glob(LEDGERS)) if run.path else []
    if not ledgers:
        unknown = float("nan") if spent(run) > 0 else 0.0
        return {"epsilon-prv": unknown, "epsilon-rdp": unknown}
    histories = {int(p.parent.name.removeprefix("partition-")): load_file(p)["history"] for p in ledgers}
    if not set(histories) <= set(deltas):
        return {"epsilon-prv": float("nan"), "epsilon-rdp": float("nan")}
    return {f"epsilon-{accountant}": max(epsilon_spent(history, deltas[pid], accountant)
                                         for pid, history in histories.items())
            for accountant in ("prv", "rdp")}


def rows(dirs: Sequence[Path]) -> list[dict]:
    """One dict (`COLUMNS`) per complete run of each experiment."""
    out = []
    for directory in dirs:
        for run in load_runs(Path(directory))[0]:
            metrics = seed_metrics(run)
            out.append({"experiment": Path(directory).name, "target-epsilon": target(run),
                        "seed": run.seed, **{k: metrics.get(k, float("nan")) for k in COLUMNS[3:-3]},
                        "epsilon-spent": spent(run), **ledger_epsilons(run)})
    return out


PER_ROUND = ("round", "partition-id", "dp-epsilon", "dp-epsilon-rdp", "dp-delta", "dp-noise-multiplier",
             "dp-sample-rate", "dp-score-noise", "dp-sat-out", "eigenvalues")


def per_round(run_dir: Path) -> list[dict]:
    """One run's privacy record: per round and client, the ε spent and its plan, or that it sat out,
    and the (noised) λ₁ the site sent for that round."""
    rows_ = [json.loads(line) for line in (run_dir / "clients.jsonl").read_text().splitlines()]
    return [{"round": r["round"], "partition-id": r["partition-id"],
             **{k: (r["train"] or {}).get(k, 0) for k in PER_ROUND[2:-1]},
             "eigenvalues": " ".join(f"{v:.4g}" for v in r.get("eigenvalues") or [])} for r in rows_]


def read_csv(path: Path) -> list[dict]:
    """The rows a ``--csv`` file holds, typed as `rows` gives them."""
    with open(path, newline="") as fh:
        return [{k: row[k] if k == "experiment" else int(row[k]) if k == "seed" else float(row.get(k, "nan"))
                 for k in COLUMNS} for row in csv.DictReader(fh)]


def report(table: Sequence[dict]) -> str:
    """The markdown table and paired differences (module doc) of `rows`' output."""
    names = list(dict.fromkeys(r["experiment"] for r in table))
    lines = ["| experiment | target ε | seeds | overall % | majority % | uplink MB / round "
             "| training s / round | largest ε spent: PLD (recorded) / PRV / RDP |",
             "|---|---|---|---|---|---|---|---|"]
    by_name = {n: {r["seed"]: r for r in table if r["experiment"] == n} for n in names}
    for name, seeds in by_name.items():
        first = next(iter(seeds.values()))
        cells = [plus_minus(mean_std([r[k] for r in seeds.values()]), d)
                 for k, d in (("overall", 2), ("majority", 1), ("uplink_mb", 2), ("training_s", 1))]
        lines.append(f"| {name} | {first['target-epsilon']:g} | {','.join(map(str, sorted(seeds)))} | "
                     + " | ".join(cells) + " | " + " / ".join(
                         f"{max(r.get(k, float('nan')) for r in seeds.values()):.3f}"
                         for k in ("epsilon-spent", "epsilon-prv", "epsilon-rdp")) + " |")
    lines += ["", *comparisons(by_name)]
    return "\n".join(lines) + "\n"


def comparisons(groups: dict[str, dict[int, dict]], key: str = "overall") -> list[str]:
    """Markdown rows of each group's paired differences in ``key`` from the first group's
    (``groups``: name → seed → metrics), with their 95 % t interval and reading
    (`experiments.paired.paired_row`: one common seed, its difference alone)."""
    names = list(groups)
    lines = ["| comparison | metric | seeds | per-seed difference (pp) | mean | 95 % t interval | reading |",
             "|---|---|---|---|---|---|---|"]
    for name in names[1:]:
        label = f"{name} − {names[0]}"
        paired = paired_row(label, key, groups[name], groups[names[0]])
        lines.append(paired[0] if paired else f"| {label} | {key} | - | - | - | - | no common seed |")
    return lines

def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m experiments.privacy_sample",
                                     description=__doc__.split("\n")[0])
    parser.add_argument("experiments", nargs="*", type=Path,
                        help="experiment folders, the baseline (ε = ∞) first")
    parser.add_argument("--csv", type=Path, help="write one line per run here")
    parser.add_argument("--from-csv", type=Path, action="append", default=[],
                        help="rows of such a file (a column it lacks: nan), before the experiments' own; "
                             "repeatable, e.g. an earlier sweep's baseline")
    parser.add_argument("--per-round", type=Path, help="print one run's ε per client and round as CSV")
    args = parser.parse_args(argv)
    if args.per_round:
        writer = csv.DictWriter(sys.stdout, PER_ROUND, lineterminator="\n")
        writer.writeheader()
        writer.writerows(per_round(args.per_round))
        return 0
    try:
        table = [row for path in args.from_csv for row in read_csv(path)] + rows(args.experiments)
    except FileNotFoundError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    if args.csv:
        args.csv.parent.mkdir(parents=True, exist_ok=True)
        with open(args.csv, "w", newline="") as fh:
            writer = csv.DictWriter(fh, COLUMNS)
            writer.writeheader()
            writer.writerows(table)
    print(report(table), end="")
    return 0


if __name__ == "__main__":
    sys.exit(main())
