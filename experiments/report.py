"""Tables and figures of a sweep, from its run files only (no training):

    python -m experiments.report results/<experiment>

Writes into the experiment directory (see `experiments.sweep`):
- ``table.md`` / ``table.csv``: one row per strategy (paper Tables 2 and 5): the final round's score
  of every client and the overall mean weighted by test examples (accuracy for VQA clients, micro-F1
  for multi-label clients, in %), uplink MB per round, seconds per round and the server step's
  seconds per round (the layer assignment; paper supplement Table 5), each as mean ± sample
  standard deviation (ddof = 1) over seeds; F3OCUS is the run with the config's optimiser; a last
  row, ``zero-shot (round 0)``, scores the initial model (no training) from the round-0 evaluation;
- ``optimizers.md``: F3OCUS with each optimiser the sweep ran (paper Tables 4 and 6);
- ``convergence.png`` (Fig. 2): training loss per round per strategy, mean ± sample std over seeds;
- ``accuracy.png``: test accuracy per round per strategy (VQA clients), mean ± sample std over seeds;
- ``eigenvalues.png`` (Fig. 3): principal LNTK eigenvalue per layer per client, round 1;
- ``layer_ranks.png`` (Figs. 5 and 6): per client and round, the rank of every layer by the client's
  own LNTK score, its own top-k (before the server step) and the F3OCUS mask (after it);
- ``selection_histogram.png`` (Fig. 7): how often each layer is selected, ``lntk`` (else a rule
  that picks without scores, as ``random``) vs ``f3ocus``, or ``f3ocus`` alone where neither ran;
- ``pareto_front.png``: the optimiser's Pareto front of the last round, the picked solution marked.
Figures whose runs are missing (e.g. no ``lntk`` run) are skipped. Every figure is written with
``<stem>.csv``, exactly the values it plots, and ``python -m experiments.report --from-tables <dir>``
redraws the figures from those tables alone, without run folders.
"""

from __future__ import annotations

import csv
import json
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

import methods
from experiments.sweep import EXPERIMENT_FILE, RUNS, is_complete
from methods import SELECTIONS, optimises
from settings import parse_budgets
from tasks.names import LNTK

MB = 1e6


def _lines(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


@dataclass(frozen=True)
class Run:
    """One finished run's files; ``rounds`` and ``clients`` hold its trained rounds (1..N), not
    round 0 (the initial adapters' evaluation), whose client rows are ``initial``."""

    name: str
    config: dict
    rounds: list[dict]
    clients: list[dict]
    fronts: list[dict]
    initial: list[dict] = field(default_factory=list)
    path: Path | None = None
    """The run's folder (None: a run not read from one)."""

    @property
    def strategy(self) -> str:
        return self.config["strategy"]

    @property
    def seed(self) -> int:
        return int(self.config["seed"])

    @property
    def group(self) -> str:
        """Table row: the strategy, or ``f3ocus-<optimizer>``."""
        return methods.label(self.strategy, self.config["optimizer"])

    def final_clients(self) -> list[dict]:
        last = max(r["round"] for r in self.clients)
        return sorted((r for r in self.clients if r["round"] == last and r["evaluate"]),
                      key=lambda r: r["partition-id"])


def client_score(row: dict) -> float:
    """Accuracy for a VQA client, micro-F1 for a multi-label client (fraction)."""
    ev = row["evaluate"]
    return float(ev["accuracy"] if "accuracy" in ev else ev["f1_micro"])


def score_metrics(rows: Sequence[dict]) -> dict[str, float]:
    """Per-client scores (%), their overall mean weighted by test examples (%) and the
    majority-answer accuracy (%, VQA clients) of one round's evaluated client rows."""
    scores = np.array([client_score(r) for r in rows])
    weights = np.array([r["evaluate"]["num-examples"] for r in rows], dtype=float)
    out = {f"c{r['partition-id']}": 100 * s for r, s in zip(rows, scores, strict=True)}
    out["overall"] = 100 * float(scores @ weights / weights.sum())
    majority = [r["evaluate"].get("majority-accuracy") for r in rows]
    if all(m is not None for m in majority):  # always answering each client's most frequent answer
        out["majority"] = 100 * float(np.array(majority, dtype=float) @ weights / weights.sum())
    return out


def run_metrics(run: Run) -> dict[str, float]:
    """`score_metrics` of the final round, uplink MB, seconds and server-step seconds per round."""
    out = score_metrics(run.final_clients())
    out["uplink_mb"] = float(np.mean([r["bytes-up"] for r in run.rounds])) / MB
    out["seconds"] = float(np.mean([r["seconds"] for r in run.rounds]))
    server = [r.get("phase-seconds", {}).get("optimising", np.nan) for r in run.rounds]
    out["server_s"] = float(np.mean(server))
    return out


def load_runs(experiment_dir: Path) -> tuple[list[Run], list[str]]:
    """Complete runs under ``runs/`` and the names of incomplete ones."""
    runs_dir = experiment_dir / RUNS
    if not runs_dir.is_dir():
        raise FileNotFoundError(f"experiment {str(experiment_dir)!r}: no {RUNS}/ directory")
    runs, incomplete = [], []
    for run_dir in sorted(p for p in runs_dir.iterdir() if p.is_dir()):
        config_file = run_dir / "config.json"
        config = json.loads(config_file.read_text()) if config_file.exists() else None
        if config is None or not is_complete(run_dir, int(config["num-server-rounds"])):
            incomplete.append(run_dir.name)
            continue
        rounds, clients = (_lines(run_dir / name) for name in ("rounds.jsonl", "clients.jsonl"))
        initial = sorted((r for r in clients if r["round"] == 0 and r["evaluate"]),
                         key=lambda r: r["partition-id"])
        runs.append(Run(run_dir.name, config, [r for r in rounds if r["round"] > 0],
                        [r for r in clients if r["round"] > 0], _lines(run_dir / "fronts.jsonl"), initial,
                        run_dir))
    return runs, incomplete


def mean_std(values: Sequence[float]) -> tuple[float, float]:
    """Mean and sample standard deviation (ddof = 1; NaN, shown as no spread, for a single value)."""
    arr = np.asarray(values, dtype=float)
    return float(arr.mean()), float(arr.std(ddof=1)) if arr.size > 1 else float("nan")


def summarise(runs: Sequence[Run], groups: Sequence[str]) -> list[dict]:
    """One row per group: seeds and mean/std of every metric of `run_metrics`."""
    rows = []
    for group in groups:
        members = sorted((r for r in runs if r.group == group), key=lambda r: r.seed)
        if not members:
            continue
        metrics = [run_metrics(r) for r in members]
        keys = sorted({k for m in metrics for k in m if k.startswith("c")}, key=lambda k: int(k[1:]))
        row: dict = {"strategy": group, "seeds": [r.seed for r in members]}
        for key in [*keys, "overall", "majority", "uplink_mb", "seconds", "server_s"]:
            if any(key in m for m in metrics):
                row[key] = mean_std([m[key] for m in metrics if key in m])
        rows.append(row)
    return rows


ZERO_SHOT = "zero-shot (round 0)"


def zero_shot(runs: Sequence[Run]) -> dict | None:
    """The `summarise` row of the initial model (the zero-shot row): per seed, the scores of
    the round-0 evaluation, which every run of a seed makes of the same model before any strategy
    acts (averaged over those runs); no uplink, no seconds. None where no run evaluated round 0."""
    by_seed: dict[int, list[dict]] = {}
    for run in runs:
        if run.initial:
            by_seed.setdefault(run.seed, []).append(score_metrics(run.initial))
    if not by_seed:
        return None
    seeds = sorted(by_seed)
    per_seed = [{k: float(np.mean([m[k] for m in by_seed[s]])) for k in by_seed[s][0]} for s in seeds]
    row: dict = {"strategy": ZERO_SHOT, "seeds": seeds}
    for key in per_seed[0]:
        row[key] = mean_std([m[key] for m in per_seed])
    row["uplink_mb"] = (0.0, 0.0)
    return row


def _metric_name(runs: Sequence[Run]) -> str:
    kinds = {"accuracy" in r["evaluate"] for run in runs for r in run.final_clients()}
    return {frozenset({True}): "accuracy", frozenset({False}): "micro-F1"}.get(
        frozenset(kinds), "accuracy (VQA clients) / micro-F1 (multi-label clients)")


def _client_label(key: str, budgets: list) -> str:
    return f"client {key[1:]} (k={budgets[int(key[1:]) % len(budgets)]})" if budgets else f"client {key[1:]}"


def plus_minus(value: tuple[float, float], digits: int) -> str:
    """'mean ± std' of a `mean_std` pair (the mean alone where the std is NaN: one seed)."""
    mean, std = value
    return f"{mean:.{digits}f}" if np.isnan(std) else f"{mean:.{digits}f} ± {std:.{digits}f}"


def markdown_table(rows: Sequence[dict], budgets: list) -> str:
    clients = [k for k in rows[0] if k.startswith("c") and k[1:].isdigit()]
    majority = any("majority" in row for row in rows)
    head = ["strategy", "seeds", *[_client_label(k, budgets) for k in clients], "overall",
            *(["majority answer"] if majority else []), "uplink MB / round", "s / round",
            "server step s / round"]
    lines = ["| " + " | ".join(head) + " |", "|" + "|".join(["---"] * len(head)) + "|"]
    for row in rows:
        cells = [row["strategy"], ",".join(map(str, row["seeds"]))]
        cells += [plus_minus(row[k], 1) if k in row else "-" for k in clients]
        cells.append(f"**{plus_minus(row['overall'], 2)}**")
        if majority:
            cells.append(plus_minus(row["majority"], 1) if "majority" in row else "-")
        cells += [plus_minus(row[k], d) if k in row else "-"
                  for k, d in (("uplink_mb", 2), ("seconds", 1), ("server_s", 3))]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def write_csv(path: Path, rows: Sequence[dict]) -> None:
    keys = [k for k in rows[0] if k not in ("strategy", "seeds")]
    with open(path, "w", newline="", encoding="utf-8") as fh:
        writer = csv.writer(fh)
        writer.writerow(["strategy", "seeds", *[f"{k}_{s}" for k in keys for s in ("mean", "std")]])
        for row in rows:
            writer.writerow([row["strategy"], " ".join(map(str, row["seeds"])),
                             *[f"{v:.6g}" for k in keys for v in row.get(k, (np.nan, np.nan))]])


def _main_groups(runs: Sequence[Run], info: dict) -> list[str]:
    """Strategies in sweep order; F3OCUS with the config's own optimiser."""
    opt = info.get("optimizer") or next((r.config["optimizer"] for r in runs if optimises(r.strategy)), "")
    order = info.get("strategies") or sorted({r.strategy for r in runs})
    return [methods.label(s, opt) for s in order]


def _header(experiment_dir: Path, info: dict, runs: Sequence[Run], incomplete: Sequence[str]) -> str:
    text = f"# {experiment_dir.name}\n\n"
    for command in info.get("commands", []):
        text += f"Command: `{command}`\n\n"
    text += (f"Scores: {_metric_name(runs)} in % after the last round, per client and overall "
             "(weighted by test examples); mean ± sample std over seeds.\n\n")
    if incomplete:
        text += f"Incomplete runs left out: {', '.join(incomplete)}.\n\n"
    return text


def write_report(experiment_dir: Path) -> list[Path]:
    """Write the tables and figures; returns the files written."""
    experiment_dir = Path(experiment_dir)
    runs, incomplete = load_runs(experiment_dir)
    if not runs:
        raise ValueError(f"experiment {str(experiment_dir)!r} has no complete run yet")
    info_file = experiment_dir / EXPERIMENT_FILE
    info = json.loads(info_file.read_text()) if info_file.exists() else {}
    budgets = parse_budgets(runs[0].config["budgets"])
    rows = summarise(runs, _main_groups(runs, info))
    for row in rows:
        row["strategy"] = "f3ocus" if row["strategy"].startswith("f3ocus-") else row["strategy"]
    written = []
    header = _header(experiment_dir, info, runs, incomplete)
    if rows:
        rows += [row for row in [zero_shot(runs)] if row is not None]
        (experiment_dir / "table.md").write_text(header + markdown_table(rows, budgets))
        write_csv(experiment_dir / "table.csv", rows)
        written += [experiment_dir / "table.md", experiment_dir / "table.csv"]
    opt_groups = sorted({r.group for r in runs if optimises(r.strategy)})
    if len(opt_groups) > 1 or info.get("optimizers"):
        opt_rows = summarise(runs, opt_groups)
        (experiment_dir / "optimizers.md").write_text(
            header.replace(f"# {experiment_dir.name}", f"# {experiment_dir.name}: F3OCUS optimisers")
            + markdown_table(opt_rows, budgets))
        written.append(experiment_dir / "optimizers.md")
    written += draw_figures(experiment_dir, runs, _main_groups(runs, info))
    return written


# -- figures ---------------------------------------------------------------------------------------
def pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _first(runs: Sequence[Run], group: str) -> Run | None:
    """The lowest-seed run of a group (figures that show one run)."""
    members = sorted((r for r in runs if r.group == group), key=lambda r: r.seed)
    return members[0] if members else None


def save_figure(fig, path: Path) -> Path:
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    pyplot().close(fig)
    return path


def round_curves(runs: Sequence[Run], group: str, stage: str, key: str) -> np.ndarray:
    """(seeds, rounds) values of ``rounds.jsonl`` ``<stage>.<key>`` for a group's runs (NaN where a
    round has none)."""
    return np.array([[r.get(stage, {}).get(key, np.nan) for r in run.rounds]
                     for run in runs if run.group == group], dtype=float)


# Each figure is drawn from a table (list of dicts) that is also written as ``<stem>.csv`` beside it,
# so a committed figure can be checked and redrawn (`redraw`) without the run folders.
Table = list[dict]


def per_round_table(runs: Sequence[Run], groups: Sequence[str], stage: str, key: str,
                    scale: float = 1.0) -> Table:
    """Per group and round: mean and sample std over seeds (ddof = 1, as `mean_std`; NaN for one
    seed) of `round_curves` × `scale`."""
    rows = []
    for group in groups:
        arr = scale * round_curves(runs, group, stage, key)
        if arr.size == 0:
            continue
        label = "f3ocus" if group.startswith("f3ocus-") else group
        mean = np.nanmean(arr, 0)
        std = np.nanstd(arr, 0, ddof=1) if arr.shape[0] > 1 else np.full(arr.shape[1], np.nan)
        rows += [{"series": label, "round": i + 1, "mean": m, "std": d, "seeds": arr.shape[0]}
                 for i, (m, d) in enumerate(zip(mean, std, strict=True))]
    return rows


def draw_per_round(path: Path, rows: Table, ylabel: str, title: str) -> Path:
    """One curve per series, mean ± sample std band (Fig. 2 for the training loss)."""
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    for series in dict.fromkeys(r["series"] for r in rows):
        x, mean, std = (np.array([float(r[k]) for r in rows if r["series"] == series])
                        for k in ("round", "mean", "std"))
        ax.plot(x, mean, marker="o", label=series)
        ax.fill_between(x, mean - std, mean + std, alpha=0.15)
    ax.set(xlabel="round", ylabel=ylabel, title=title)
    ax.xaxis.get_major_locator().set_params(integer=True)
    ax.legend(fontsize=8, ncol=2, title="mean ± sample std over seeds", title_fontsize=8)
    return save_figure(fig, path)


def eigenvalue_table(run: Run, layer_names: list[str]) -> Table:
    """Fig. 3's values: principal LNTK eigenvalue of every layer for every client, first round."""
    first = min(r["round"] for r in run.clients)
    return [{"run": run.name, "round": first, "client": row["partition-id"], "layer": i, "name": name,
             "eigenvalue": value}
            for row in sorted((r for r in run.clients if r["round"] == first and r["eigenvalues"]),
                              key=lambda r: r["partition-id"])
            for i, (name, value) in enumerate(zip(layer_names, row["eigenvalues"], strict=True))]


def draw_eigenvalues(path: Path, rows: Table) -> Path:
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(7.5, 4.2))
    for client in dict.fromkeys(r["client"] for r in rows):
        ax.plot([float(r["eigenvalue"]) for r in rows if r["client"] == client], marker="o",
                label=f"client {client}")
    names = list(dict.fromkeys(r["name"] for r in rows))
    ax.set_yscale("log")
    ax.set_xticks(range(len(names)), names, rotation=60, ha="right", fontsize=7)
    ax.set(ylabel="principal eigenvalue λ₁ of the LNTK",
           title=f"LNTK eigenvalues per layer, round {rows[0]['round']} ({rows[0]['run']}; Fig. 3)")
    ax.legend(fontsize=8)
    return save_figure(fig, path)


def layer_ranks(scores: Sequence[float]) -> np.ndarray:
    """Rank of every layer by score, 1 = highest (ties by layer index)."""
    order = np.argsort(-np.asarray(scores, dtype=float), kind="stable")
    ranks = np.empty(len(order), dtype=int)
    ranks[order] = np.arange(1, len(order) + 1)
    return ranks


def layer_rank_table(run: Run) -> Table:
    """Figs. 5 and 6's values: per client, round and layer, the rank by the client's own LNTK score,
    whether it is in the client's own top-k (before the server step) and in the F3OCUS mask (after)."""
    rows = []
    for r in sorted((r for r in run.clients if r["scores"] is not None),
                    key=lambda r: (r["partition-id"], r["round"])):
        ranks, mask = layer_ranks(r["scores"]), set(r["mask"] or [])
        rows += [{"run": run.name, "client": r["partition-id"], "budget": r["budget"], "round": r["round"],
                  "layer": layer, "rank": int(rank), "own_top_k": int(rank <= (r["budget"] or 0)),
                  "assigned": int(layer in mask)} for layer, rank in enumerate(ranks)]
    return rows


def draw_layer_ranks(path: Path, rows: Table) -> Path:
    """Per client, rank of each layer in every round (colour), own top-k (o) and assignment (x)."""
    plt = pyplot()
    clients = list(dict.fromkeys(int(r["client"]) for r in rows))
    rounds = sorted({int(r["round"]) for r in rows})
    num_layers = max(int(r["layer"]) for r in rows) + 1
    cols = min(4, len(clients))
    nrows = -(-len(clients) // cols)
    fig, axes = plt.subplots(nrows, cols, figsize=(3.4 * cols, 0.5 * len(rounds) * nrows + 2.6 * nrows),
                             squeeze=False, layout="constrained")
    image = None
    for ax, client in zip(axes.flat, clients, strict=False):
        mine = [r for r in rows if int(r["client"]) == client]
        own = sorted({int(r["round"]) for r in mine})
        ranks = np.zeros((len(own), num_layers))
        for r in mine:
            ranks[own.index(int(r["round"])), int(r["layer"])] = float(r["rank"])
        image = ax.imshow(ranks, cmap="viridis_r", aspect="auto", vmin=1, vmax=num_layers,
                          extent=(-0.5, num_layers - 0.5, own[-1] + 0.5, own[0] - 0.5))
        for key, style in (("own_top_k", {"facecolors": "none", "edgecolors": "white", "s": 60}),
                           ("assigned", {"marker": "x", "c": "red", "s": 25})):
            marked = [r for r in mine if int(r[key])]
            ax.scatter([int(r["layer"]) for r in marked], [int(r["round"]) for r in marked], **style)
        ax.set(title=f"client {client} (k={mine[0]['budget']})", xlabel="layer", ylabel="round")
        ax.set_yticks(own)
    for ax in list(axes.flat)[len(clients):]:
        ax.axis("off")
    if image is not None:
        fig.colorbar(image, ax=axes, shrink=0.8, label="rank by own LNTK score (1 = highest)")
    fig.suptitle(f"{rows[0]['run']}: own top-k (o, before) vs F3OCUS mask (x, after) — Figs. 5, 6",
                 fontsize=9)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def selection_counts(runs: Sequence[Run], num_layers: int) -> np.ndarray:
    """Selections of each layer per run (summed over clients and rounds, averaged over runs)."""
    counts = np.zeros(num_layers)
    for run in runs:
        for row in run.clients:
            counts[row["mask"] or []] += 1
    return counts / max(len(runs), 1)


def histogram_table(series: Sequence[tuple[str, Sequence[Run]]], num_layers: int) -> Table:
    """Fig. 7's values: selections per run of every layer, for each (label, runs) of ``series``."""
    return [{"series": label, "runs": len(group), "layer": layer, "selections_per_run": count}
            for label, group in series for layer, count in enumerate(selection_counts(group, num_layers))]


def draw_histogram(path: Path, rows: Table) -> Path:
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(7, 3.8))
    series = list(dict.fromkeys(r["series"] for r in rows))
    width = 0.8 / len(series)
    for i, label in enumerate(series):
        mine = [r for r in rows if r["series"] == label]
        ax.bar(np.array([int(r["layer"]) for r in mine]) + (i - (len(series) - 1) / 2) * width,
               [float(r["selections_per_run"]) for r in mine], width=width,
               label=f"{label} ({mine[0]['runs']} runs)")
    ax.set(xlabel="layer", ylabel="selections per run (clients × rounds)",
           title="Layer-selection histogram (Fig. 7)")
    ax.set_xticks(sorted({int(r["layer"]) for r in rows}))
    ax.legend()
    return save_figure(fig, path)


def front_table(run: Run) -> Table:
    """The last round's Pareto front (importance, diversity objective) and which point was picked."""
    front = run.fronts[-1]
    points = zip(front["front"]["importance"], front["front"]["diversity"], strict=True)
    rows = [{"run": run.name, "round": front["round"], "algorithm": front["algorithm"], "importance": i,
             "diversity": d, "picked": 0} for i, d in points]
    return [*rows, {**rows[0], "importance": front["importance"], "diversity": front["diversity"],
                    "picked": 1}] if rows else rows


def draw_front(path: Path, rows: Table) -> Path:
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(5.6, 4.2))
    for picked, style in ((0, {"label": "Pareto front"}),
                          (1, {"marker": "*", "s": 250, "c": "red", "label": "picked", "zorder": 3})):
        mine = [r for r in rows if int(r["picked"]) == picked]
        ax.scatter([float(r["importance"]) for r in mine], [float(r["diversity"]) for r in mine], **style)
    ax.set(xlabel="importance (maximised)", ylabel="selection-count spread (minimised)",
           title=f"{rows[0]['run']}, round {rows[0]['round']} ({rows[0]['algorithm']})")
    ax.legend()
    return save_figure(fig, path)


# figure stem -> how to draw it from its table
DRAW: dict[str, Callable[[Path, Table], Path]] = {
    "convergence": lambda path, rows: draw_per_round(path, rows, "training loss (mean over clients)",
                                                     "Convergence (Fig. 2)"),
    "accuracy": lambda path, rows: draw_per_round(path, rows, "test accuracy (%, weighted over clients)",
                                                  "Accuracy per round"),
    "eigenvalues": draw_eigenvalues,
    "layer_ranks": draw_layer_ranks,
    "selection_histogram": draw_histogram,
    "pareto_front": draw_front,
}


def write_table(path: Path, rows: Table) -> Path:
    with open(path, "w", newline="", encoding="utf-8") as fh:
        writer = csv.DictWriter(fh, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows({k: f"{v:.6g}" if isinstance(v, float) else v for k, v in row.items()}
                         for row in rows)
    return path


def own_lntk_top_k(strategy: str) -> bool:
    """Does ``strategy`` give each client the top-k of its own LNTK scores (F3OCUS without the server
    step, the histogram's other side)?"""
    entry = SELECTIONS.get(strategy)
    return bool(entry and entry.scorer == LNTK and not entry.optimises)


def budgeted_without_scores(strategy: str) -> bool:
    """Does ``strategy`` train a budget's worth of layers chosen without scores (as ``random``, the
    histogram's other side when no LNTK top-k run exists)?"""
    entry = SELECTIONS.get(strategy)
    return bool(entry and entry.scorer is None and entry.needs_budget and entry.trains_adapter
                and not entry.optimises)


def figure_tables(runs: Sequence[Run], groups: Sequence[str]) -> dict[str, Table]:
    """The table of every figure whose runs exist, by figure stem."""
    tables = {"convergence": per_round_table(runs, groups, "train", "train_loss")}
    if any("accuracy" in r.get("evaluate", {}) for run in runs for r in run.rounds):  # VQA clients
        tables["accuracy"] = per_round_table(runs, groups, "evaluate", "accuracy", 100.0)
    f3 = [g for g in groups if g in {r.group for r in runs if optimises(r.strategy)}]
    own = [g for g in groups if g in {r.group for r in runs if own_lntk_top_k(r.strategy)}]
    f3_run = _first(runs, f3[0]) if f3 else None
    lntk_run = f3_run or (_first(runs, own[0]) if own else None)
    if lntk_run is not None:
        tables["eigenvalues"] = eigenvalue_table(lntk_run, lntk_run.config["layer-names"])
    if f3_run is not None:
        tables["layer_ranks"] = layer_rank_table(f3_run)
        if f3_run.fronts:
            tables["pareto_front"] = front_table(f3_run)
    lntk_runs = [r for r in runs if own and r.group == own[0]]
    plain = next((g for g in groups for r in runs
                  if r.group == g and budgeted_without_scores(r.strategy)), None)
    other = ("lntk", lntk_runs) if lntk_runs else (plain, [r for r in runs if plain and r.group == plain])
    f3_runs = [r for r in runs if f3 and r.group == f3[0]]
    if f3_runs:  # alone where no rule to set beside it ran (e.g. another Pareto pick's experiment)
        tables["selection_histogram"] = histogram_table([*([other] if other[1] else []), ("f3ocus", f3_runs)],
                                                        len(f3_runs[0].config["layer-names"]))
    return {stem: rows for stem, rows in tables.items() if rows}


def draw_figures(experiment_dir: Path, runs: Sequence[Run], groups: Sequence[str]) -> list[Path]:
    """Every figure whose runs exist, each with its table ``<stem>.csv``."""
    written = []
    for stem, rows in figure_tables(runs, groups).items():
        written += [write_table(experiment_dir / f"{stem}.csv", rows),
                    DRAW[stem](experiment_dir / f"{stem}.png", rows)]
    return written


def redraw(directory: Path) -> list[Path]:
    """Draw every figure of `DRAW` whose ``<stem>.csv`` is in `directory`, from that table alone."""
    directory = Path(directory)
    written = []
    for stem, draw in DRAW.items():
        table = directory / f"{stem}.csv"
        if table.exists():
            with open(table, newline="", encoding="utf-8") as fh:
                written.append(draw(directory / f"{stem}.png", list(csv.DictReader(fh))))
    if not written:
        names = ", ".join(f"{stem}.csv" for stem in DRAW)
        raise FileNotFoundError(f"{str(directory)!r}: no figure table ({names})")
    return written


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    from_tables = argv[:1] == ["--from-tables"]
    if from_tables:
        argv = argv[1:]
    if len(argv) != 1 or argv[0].startswith("-"):
        print("usage: python -m experiments.report [--from-tables] results/<experiment>", file=sys.stderr)
        return 2
    try:
        written = redraw(Path(argv[0])) if from_tables else write_report(Path(argv[0]))
    except (FileNotFoundError, ValueError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    print("\n".join(str(p) for p in written))
    return 0


if __name__ == "__main__":
    sys.exit(main())
