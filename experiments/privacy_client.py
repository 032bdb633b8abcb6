"""Accuracy, uplink and ε per round of client-level DP (``dp = "client"``) on a
federation large enough for a site to be one of many:

    python -m experiments.privacy_client --epsilons inf,1,8,3 --seeds 0,1,2,3,4

Each (target ε, seed) is one run of the real ServerApp and ClientApp, ε = inf being ``dp = "none"``
(example-weighted masked FedAvg, no clipping, no noise). The clients run on the in-process grid
(`flower_compat.inprocess`, as ``run_simulation.py --engine in-process``), not Ray: 50 clients × 3
messages a round cost Ray several seconds a message on a shared 2-core machine, the in-process grid a
fraction of one; the round, the apps and the files they write are the same. The default setting:
``tiny-vilt`` on ``synthetic`` (450 training questions, 9 per client), 50 clients with budgets 1-4
layers of 4, ``strategy = "last"`` (masks that depend on no site's data, so the ε covers everything the
model reveals), a shared head (so the whole model goes through the noise), every site trained and
evaluated every round (no sampling, so no amplification is claimed), z derived from the target ε over
the planned rounds (``dp-noise = 0``); `SETTING` says why its sizes.

Run folders go to ``--runs`` (finished runs are skipped, so the command resumes); written to ``--out``:
``runs.csv`` (one row per run: sites, target ε, seed, noise multiplier, δ, ε spent by PLD, PRV and RDP,
accuracy before training and after the last round, uplink MB), ``table.md`` (`summary`: per ε, mean ± std
over seeds and the paired differences from ε = ∞, also printed), ``rounds.csv`` (one row per run and
round: ε spent, accuracy) and ``epsilon.png`` (ε and accuracy per round, one line per target;
``--redraw`` draws it again from ``rounds.csv`` alone; ``--report`` runs nothing and writes them from the
run folders as they are, an unfinished run with the rounds it logged). ``--sites RUNS_CSV ...`` runs
nothing either: it reads the ``runs.csv`` of sweeps at several federation sizes (``--clients``) and
writes ``sites.md`` (`sites_table`: per size, the cost of ``--target``'s ε against no DP, paired by seed,
read against 5 points).
"""

from __future__ import annotations

import argparse
import csv
import json
import math
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from experiments.privacy_sample import comparisons
from experiments.report import mean_std, plus_minus, pyplot, save_figure

if TYPE_CHECKING:
    from privacy.client import ClientAccountant

SETTING = {
    "model": "tiny-vilt", "dataset": "synthetic", "partitioner": "iid", "strategy": "last",
    "head": "shared", "budgets": "1,2,3,4", "num-server-rounds": 10, "local-steps": 10, "batch-size": 8,
    "lr": 0.01, "head-lr": 0.01, "fraction-train": 1.0, "fraction-evaluate": 1.0, "max-test-samples": 0,
    "dp-clip": 0.5,
}
"""The run config of every run (beside the defaults); ``dp``, ``dp-epsilon`` and ``seed`` vary.
Every site trains and is evaluated every round (150 test questions, 3 a site): the most sites per
layer the federation has, the least noise per mean. 10 rounds of 10 steps at lr 0.01: the shortest
schedule found in which the model without DP leaves chance level (14.7 % before training, 39.3 %
after round 10 on seed 0; 3 rounds of 3 steps at lr 0.003 stayed at 13-17 %). ``dp-clip = 0.5``
clips every update (their norms were 2.7-5.5, median 4.2, in round 1 at ε = 8): the noise scales
with the clip as the signal does, and at ε = 8 on seed 0 the median clip 4.0 left accuracy at
4.0-19.3 % over rounds 1-10 against 14.7-20.0 % for 0.5."""


def run_name(epsilon: float, seed: int) -> str:
    return f"eps-{epsilon:g}-s{seed}"


def run_config(epsilon: float, seed: int, runs_dir: Path, overrides: dict[str, object]) -> dict[str, object]:
    """The full, validated run config of one run (`settings.RunConfig`)."""
    from settings import RunConfig, default_config

    privacy = {"dp": "none"} if math.isinf(epsilon) else {"dp": "client", "dp-epsilon": epsilon}
    values = {**default_config(), **SETTING, **overrides, **privacy, "seed": seed,
              "results-dir": str(runs_dir), "run-name": run_name(epsilon, seed)}
    return RunConfig.from_mapping(values).to_dict()


def run_once(config: dict[str, object], num_clients: int) -> None:
    """One federation on the in-process grid (module doc)."""
    from client_app.app import app as client_app
    from flower_compat.inprocess import run_in_process
    from server_app.app import app as server_app

    run_in_process(server_app, client_app, config, num_clients)


def read_run(run_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "rounds.jsonl").read_text().splitlines()]


def accountant_of(config: dict[str, object], num_clients: int) -> ClientAccountant | None:
    """The accountant a run's server settles before round 1 (its privacy mode's,
    `privacy.client.ClientAccountant`: z, δ and ε per round); None where it accounts nothing."""
    from settings import RunConfig

    parsed = RunConfig.from_mapping(config)
    return parsed.privacy.component.accountant(parsed, num_clients)


def tables(results: dict[tuple[float, int], tuple[ClientAccountant | None, list[dict]]], sites: int
           ) -> tuple[list[dict], list[dict]]:
    """(one row per run, one row per run and round) from each run's accountant (or None) and
    ``rounds.jsonl``; round 0 (the untrained model's evaluation) gives ``initial_accuracy`` and no ε.
    ε spent is the run's own record (PLD) beside RDP's (recorded too) and Opacus's PRV accountant's
    for the rounds it trained: three accountants of the same mechanism."""
    per_run, per_round = [], []
    for (epsilon, seed), (accountant, rounds) in sorted(results.items()):
        last, trained = rounds[-1], [r for r in rounds if r["round"] > 0]
        initial = next((r["evaluate"]["accuracy"] for r in rounds if r["round"] == 0), math.nan)
        per_run.append({"sites": sites, "target_epsilon": epsilon, "seed": seed,
                        "noise_multiplier": 0.0 if accountant is None else accountant.noise,
                        "delta": math.nan if accountant is None else accountant.delta,
                        "rounds": len(trained),
                        "epsilon_spent": last.get("epsilon", math.inf),
                        "epsilon_rdp": last.get("epsilon-rdp", math.inf if accountant is None else math.nan),
                        "epsilon_prv": math.inf if accountant is None else _prv(accountant, len(trained)),
                        "initial_accuracy": initial,
                        "accuracy": last["evaluate"]["accuracy"],
                        "uplink_mb": sum(r["bytes-up"] for r in rounds) / 1e6})
        per_round += [{"target_epsilon": epsilon, "seed": seed, "round": r["round"],
                       "epsilon": r.get("epsilon", math.inf), "accuracy": r["evaluate"]["accuracy"]}
                      for r in rounds]
    return per_run, per_round


def _prv(accountant: ClientAccountant, rounds: int) -> float:
    with np.errstate(divide="ignore", invalid="ignore"):  # Opacus's PRV takes log(1 - q) at q = 1
        return accountant.epsilon(rounds, "prv")


def summary(per_run: Sequence[dict]) -> str:
    """Markdown: per target ε (∞ first) the seeds, z, ε spent, accuracy before training and after the
    last round (mean ± std over seeds) and uplink per round; then each ε's paired differences in
    final accuracy from ε = ∞ (`experiments.privacy_sample.comparisons`)."""
    groups: dict[str, dict[int, dict]] = {}
    for row in sorted(per_run, key=lambda r: (-r["target_epsilon"], r["seed"])):
        name = "ε = ∞ (no DP)" if math.isinf(row["target_epsilon"]) else f"ε = {row['target_epsilon']:g}"
        groups.setdefault(name, {})[row["seed"]] = {
            **row, "overall": 100 * row["accuracy"], "initial": 100 * row["initial_accuracy"],
            "uplink_per_round": row["uplink_mb"] / max(row["rounds"], 1)}
    lines = ["| target | z | seeds | rounds | ε spent: PLD (recorded) / PRV / RDP "
             "| accuracy before training % | final accuracy % | uplink MB / round |",
             "|---|---|---|---|---|---|---|---|"]
    for name, seeds in groups.items():
        rows = list(seeds.values())
        cells = [plus_minus(mean_std([r[k] for r in rows]), d)
                 for k, d in (("initial", 1), ("overall", 1), ("uplink_per_round", 2))]
        lines.append(f"| {name} | {rows[0]['noise_multiplier']:.3f} | {','.join(map(str, seeds))} | "
                     f"{'/'.join(sorted({str(r['rounds']) for r in rows}))} | "
                     f"{_spent(rows)} | " + " | ".join(cells) + " |")
    return "\n".join([*lines, "", *comparisons(groups)]) + "\n"


def _spent(rows: Sequence[dict]) -> str:
    """The largest ε any run of a row spent, by each accountant (`tables`); one figure without DP."""
    spent = [max(float(r[k]) for r in rows) for k in ("epsilon_spent", "epsilon_prv", "epsilon_rdp")]
    return "inf" if math.isinf(spent[0]) else " / ".join(f"{e:.3f}" for e in spent)


def sites_table(per_run: Sequence[dict], target: float, cost: float = 5.0) -> str:
    """Markdown: per federation size (``sites``, from several sweeps' ``runs.csv``), z and δ at the
    target ε, the final accuracy without DP and at the target (mean ± std over seeds), and the paired
    difference with its 95 % t interval (`experiments.paired.paired_row`), read against ``cost``
    points: at most ``cost`` where the whole interval lies above −cost, more where it lies below."""
    from experiments.paired import paired_row

    lines = [f"| sites | δ | z | seeds | no DP % | ε = {target:g} % | ε = {target:g} − no DP (pp) "
             f"| 95 % t interval | costs at most {cost:g} points? |", "|---|---|---|---|---|---|---|---|---|"]
    for sites in sorted({int(r["sites"]) for r in per_run}):
        runs = [r for r in per_run if int(r["sites"]) == sites]
        base = {int(r["seed"]): {"overall": 100 * float(r["accuracy"])}
                for r in runs if math.isinf(float(r["target_epsilon"]))}
        private = {int(r["seed"]): {"overall": 100 * float(r["accuracy"]), "z": float(r["noise_multiplier"]),
                                    "delta": float(r["delta"])}
                   for r in runs if float(r["target_epsilon"]) == target}
        paired = paired_row("", "overall", private, base)
        if not paired:
            lines.append(f"| {sites} | - | - | - | - | - | - | - | no common seed |")
            continue
        _, mean, lo, hi, by_seed = paired
        first = private[min(private)]
        if math.isnan(lo):
            reading = "one seed: no interval"
        else:
            reading = "yes" if lo >= -cost else ("no" if hi < -cost else f"not resolved: −{cost:g} is inside")
        interval = "-" if math.isnan(lo) else f"[{lo:+.2f}, {hi:+.2f}]"
        accuracy = [plus_minus(mean_std([v["overall"] for s, v in group.items() if s in by_seed]), 1)
                    for group in (base, private)]
        lines.append(f"| {sites} | {first['delta']:.2g} | {first['z']:.3f} | {','.join(map(str, by_seed))} | "
                     f"{accuracy[0]} | {accuracy[1]} | {mean:+.2f} | {interval} | {reading} |")
    return "\n".join(lines) + "\n"


def write_csv(path: Path, rows: Sequence[dict]) -> Path:
    with open(path, "w", newline="", encoding="utf-8") as fh:
        writer = csv.DictWriter(fh, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    return path


def draw(path: Path, per_round: Sequence[dict]) -> Path:
    """ε spent and accuracy against the round, one line per target ε (mean over seeds)."""
    plt = pyplot()
    fig, (left, right) = plt.subplots(1, 2, figsize=(9, 3.4))
    for target in sorted({float(r["target_epsilon"]) for r in per_round}):
        rows = [r for r in per_round if float(r["target_epsilon"]) == target]
        rounds = sorted({int(r["round"]) for r in rows})
        label = "ε = ∞ (no DP)" if math.isinf(target) else f"target ε = {target:g}"
        mean = [sum(float(r["accuracy"]) for r in rows if int(r["round"]) == k)
                / sum(1 for r in rows if int(r["round"]) == k) for k in rounds]
        right.plot(rounds, mean, marker="o", label=label)
        if not math.isinf(target):
            spent = [next(float(r["epsilon"]) for r in rows if int(r["round"]) == k) for k in rounds]
            left.plot(rounds, spent, marker="o", label=label)
    left.set(xlabel="round", ylabel="ε spent (every site)", title="ε per round")
    right.set(xlabel="round", ylabel="accuracy (evaluated sites)", title="accuracy")
    left.legend(fontsize=8)
    right.legend(fontsize=8)
    return save_figure(fig, path)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epsilons", default="1,3,8,inf", help="target ε per site; inf = dp none")
    parser.add_argument("--seeds", default="0")
    parser.add_argument("--clients", type=int, default=50)
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                        help="override a run-config key (a TOML value), e.g. --set num-server-rounds=5")
    parser.add_argument("--runs", default="results/privacy-client", help="run folders")
    parser.add_argument("--out", default="docs/results/privacy-client", help="tables and figure")
    parser.add_argument("--redraw", action="store_true", help="draw epsilon.png from --out's rounds.csv")
    parser.add_argument("--report", action="store_true",
                        help="run nothing: tables and figure from the run folders as they are (an "
                             "unfinished run with the rounds it logged)")
    parser.add_argument("--sites", nargs="+", type=Path, metavar="RUNS_CSV",
                        help="run nothing: compare the runs.csv of sweeps at several federation sizes "
                             "(--target's cost against no DP per size); writes --out/sites.md")
    parser.add_argument("--target", type=float, default=8.0, help="with --sites: the target ε compared")
    args = parser.parse_args(argv)
    out = Path(args.out)
    if args.sites:
        rows = []
        for path in args.sites:
            with open(path, encoding="utf-8") as fh:
                rows += list(csv.DictReader(fh))
        out.mkdir(parents=True, exist_ok=True)
        (out / "sites.md").write_text(text := sites_table(rows, args.target), encoding="utf-8")
        print(out / "sites.md")
        print(text, end="")
        return 0
    if args.redraw:
        with open(out / "rounds.csv", encoding="utf-8") as fh:
            print(draw(out / "epsilon.png", list(csv.DictReader(fh))))
        return 0
    import tomllib

    overrides = {k: v for item in args.set for k, v in tomllib.loads(item.replace("=", " = ", 1)).items()}
    runs_dir = Path(args.runs).resolve()
    results = {}
    for epsilon in (float(e) for e in args.epsilons.split(",")):
        for seed in (int(s) for s in args.seeds.split(",")):
            config = run_config(epsilon, seed, runs_dir, overrides)
            run_dir = runs_dir / run_name(epsilon, seed)
            if not args.report and not (run_dir / "adapters.safetensors").exists():
                if run_dir.exists():  # an unfinished run starts afresh
                    import shutil

                    shutil.rmtree(run_dir)
                run_once(config, args.clients)
            results[(epsilon, seed)] = (accountant_of(config, args.clients), read_run(run_dir))
    per_run, per_round = tables(results, args.clients)
    out.mkdir(parents=True, exist_ok=True)
    table = summary(per_run)
    (out / "table.md").write_text(table, encoding="utf-8")
    for path in (write_csv(out / "runs.csv", per_run), write_csv(out / "rounds.csv", per_round),
                 draw(out / "epsilon.png", per_round), out / "table.md"):
        print(path)
    print(table, end="")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
