"""README's headline numbers, recomputed from the committed tables of ``docs/results`` so that
README cannot drift from them:

    python -m experiments.headlines              # every check: README text, recomputed text, source
    python -m experiments.headlines extract docs/results/bench-agg.md docs/results/bench-agg/vs-fedavg.csv \\
        --section "Paired against FedAvg"       # every table: docs/results/tables.sh

``extract`` copies a markdown table that a lab tool printed into a committed CSV: a paired table
(one with a "per-seed difference (pp)" column, printed by `experiments.paired`) becomes the long
table of `experiments.paired.write_differences` (row, base, metric, seed, difference), from which
every mean and 95 % interval is recomputed (`paired_interval`) and a figure redrawn
(``python -m experiments.paired --redraw``); any other table is copied cell by cell (``**`` dropped).

The checks (`CHECKS`) are a table of (README phrase with its numbers left open, the CSVs they come
from, how they are computed): the phrase is found in README (whitespace and the minus sign "−"
normalised) and each number README prints must lie within its rounding of the recomputed one, so
README and the tables cannot drift apart.
"""

from __future__ import annotations

import argparse
import csv
import re
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import numpy as np

from experiments.curves import last, overall, pairs, read, uplink
from experiments.paired import DIFFERENCE_COLUMNS, paired_interval
from experiments.report import mean_std

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "docs" / "results"
DIFFERENCE_HEADER = "per-seed difference (pp)"


# -- markdown tables -> CSV -------------------------------------------------------------------------
def markdown_tables(text: str, section: str = "") -> list[list[list[str]]]:
    """Every table (header row first, the |---| row dropped) of the markdown `text`, or of the part
    from the heading containing `section` to the next heading."""
    if section:
        parts = re.split(r"^#+ ", text, flags=re.M)
        matches = [p for p in parts if p.split("\n", 1)[0].find(section) >= 0]
        if len(matches) != 1:
            raise ValueError(f"--section {section!r}: {len(matches)} headings contain it (need 1)")
        text = matches[0]
    tables, current = [], []
    for line in [*text.splitlines(), ""]:
        if line.startswith("|"):
            cells = [c.strip().replace("**", "") for c in line.strip().strip("|").split("|")]
            if not all(set(c) <= set("-: ") for c in cells):
                current.append(cells)
        elif current:
            tables.append(current)
            current = []
    return tables


def differences(table: list[list[str]]) -> list[list[str]]:
    """A printed paired table as `DIFFERENCE_COLUMNS` rows: comparison "A − B" -> row A, base B; the
    metric (``overall`` where the table has none) and the seeds (0, 1, ... where it has none)."""
    head = table[0]
    col = {name: head.index(name) for name in ("comparison", "metric", "seeds", DIFFERENCE_HEADER)
           if name in head}
    if "comparison" not in col:
        raise ValueError(f"a paired table needs a 'comparison' column; its columns are {head}")
    out = []
    for cells in table[1:]:
        parts = cells[col["comparison"]].split(" − ")
        if len(parts) != 2:
            raise ValueError(f"comparison {cells[col['comparison']]!r} is not 'row − base'")
        row, base = (part.strip() for part in parts)
        diffs = [float(d.replace("−", "-")) for d in cells[col[DIFFERENCE_HEADER]].split(",")]
        seeds = cells[col["seeds"]].split(",") if "seeds" in col else range(len(diffs))
        metric = cells[col["metric"]] if "metric" in col else "overall"
        out += [[row, base, metric, str(seed), f"{d:g}"] for seed, d in zip(seeds, diffs, strict=True)]
    return out


def extract(source: Path, out: Path, section: str = "", index: int | None = None) -> Path:
    """Table `index` of `source` (or of its `section`; without an index, the only one) as CSV at
    `out` (module doc)."""
    tables = markdown_tables(Path(source).read_text(encoding="utf-8"), section)
    if not tables:
        raise ValueError(f"{str(source)!r} section {section!r}: no markdown table")
    if index is None and len(tables) != 1:
        raise ValueError(f"{str(source)!r} section {section!r}: {len(tables)} tables; name one with --table")
    if index is not None and not 0 <= index < len(tables):
        raise ValueError(f"--table {index}: {str(source)!r} section {section!r} has {len(tables)} tables")
    table = tables[index or 0]
    paired = DIFFERENCE_HEADER in table[0]
    with open(out, "w", newline="", encoding="utf-8") as fh:
        csv.writer(fh).writerows([DIFFERENCE_COLUMNS, *differences(table)] if paired else table)
    return out


# -- reading the committed tables -------------------------------------------------------------------
def rows(name: str) -> list[dict[str, str]]:
    with open(RESULTS / name, newline="", encoding="utf-8") as fh:
        return list(csv.DictReader(fh))


def number(cell: str) -> float:
    """The mean of a 'mean ± std' cell or a plain number."""
    return float(cell.split("±")[0].replace("−", "-"))


def interval(name: str, row: str, base: str, metric: str = "overall") -> tuple[float, float, float]:
    """Mean and 95 % t interval of the paired differences `row` − `base` of a differences CSV."""
    diffs = [float(r["difference"]) for r in rows(name)
             if (r["row"], r["base"], r["metric"]) == (row, base, metric)]
    if not diffs:
        raise ValueError(f"{name}: no differences {row!r} − {base!r} ({metric})")
    return paired_interval(diffs, [0.0] * len(diffs))


def value_cell(name: str, key: str, column: str, key_column: str = "strategy") -> str:
    """The cell of `column` in the one row of CSV `name` whose `key_column` is `key`."""
    match = [r[column] for r in rows(name) if r[key_column] == key]
    if len(match) != 1:
        raise ValueError(f"{name}: {len(match)} rows with {key_column} = {key!r} (need 1)")
    return match[0]


def value(name: str, key: str, column: str, key_column: str = "strategy") -> float:
    return number(value_cell(name, key, column, key_column))


def column(name: str, col: str) -> list[float]:
    return [number(r[col]) for r in rows(name)]


# -- the checks -------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Check:
    """One phrase of `document` (README.md, or a page under docs/results): `template` with a ``{}``
    for every number, `values` computes those numbers from `sources` (files under docs/results)."""

    template: str
    sources: tuple[str, ...]
    values: Callable[[], Sequence[float]]
    document: str = "README.md"


AGC = "bench-aggc-{}/all"
YN = "bench-yesno: f3ocus-nsga2"
K2 = "bench-yesno-k2/table.csv"
NO_CONFLICT = ("bench-agg/no-conflict.csv", "bench-agg-fedavg/all", "bench-agg-local/all")


def _vs_fedavg(method: str) -> tuple[float, float, float]:
    return interval("bench-agg/vs-fedavg.csv", AGC.format(method), AGC.format("fedavg"))


TYPES = "bench-agg/types-vs-fedavg.csv"


def _types() -> list[float]:
    """SIMA on conf/bench-agg-types.toml: mean same-group weight, SIMA − FedAvg, oracle − SIMA."""
    weights = column("bench-agg/sima-types-weights.csv", "same-group-weight")

    def diffs(method: str) -> list[float]:
        return [float(r["difference"]) for r in rows(TYPES)
                if (r["row"], r["metric"]) == (f"bench-aggt-{method}/all", "overall")]

    mean, low, high = paired_interval(diffs("oracle"), diffs("sima"))
    gain = interval(TYPES, "bench-aggt-sima/all", "bench-aggt-fedavg/all")
    return [sum(weights) / len(weights), *gain, mean, -high, -low]


def _range(*names: str) -> list[float]:
    values = [v for name in names
              for v in column(name, "overall" if "optimizers" in name else "overall_mean")]
    return [min(values), max(values)]


def _wall_hours(name: str) -> float:
    """The wall time of a `experiments.sweep_time` table's ``all`` row ('5588 s (1.55 h)'), in hours."""
    return number(next(r["wall"] for r in rows(name) if r["experiment"] == "all").split(" s")[0]) / 3600


def _k2_wall() -> list[float]:
    """bench-yesno-k2's wall seconds and wall seconds per run."""
    name = "bench-yesno/sweep_time.csv"
    wall = number(value_cell(name, "bench-yesno-k2", "wall", "experiment").split(" s")[0])
    return [wall, wall / value(name, "bench-yesno-k2", "runs", "experiment")]


def _optimiser_batch() -> tuple[int, float]:
    """Runs and wall seconds of bench-yesno's last batch (the four other optimisers), timed on its own
    after a pause and printed in docs/results/README.md ('opt runs 12 wall 1043.1...')."""
    found = re.search(r"opt runs (\d+) wall ([\d.]+)", (RESULTS / "README.md").read_text(encoding="utf-8"))
    if found is None:
        raise ValueError("docs/results/README.md: the optimiser batch's timing line is gone")
    return int(found[1]), float(found[2])


GEN = "bench-gen/selection-paired.csv"


def _gen_uplink_share() -> float:
    """F3OCUS's uplink per round on bench-gen as % of `all`'s."""
    name = "bench-gen/selection.csv"
    return 100 * value(name, "f3ocus", "uplink_mb_mean") / value(name, "all", "uplink_mb_mean")


def _gen_f3ocus_under_all() -> list[float]:
    """How far F3OCUS ends under `all` on bench-gen (README prints the gap), with the interval of
    F3OCUS − all."""
    mean, low, high = interval(GEN, "bench-gen: f3ocus-nsga2", "all")
    return [-mean, low, high]


def _gen_fedavg_minus_local() -> list[float]:
    """FedAvg − local on bench-gen and its interval, from the committed local − FedAvg differences."""
    mean, low, high = interval("bench-gen/vs-fedavg.csv", "bench-gen-local/all", "bench-gen")
    return [-mean, -high, -low]


def _screening(*cells: tuple[str, str]) -> list[float]:
    return [value("sensitivity/screening.csv", row, col, "#") for row, col in cells]


NEWCOMER = "bench-gen/newcomer-seeds/rounds.csv"


def _newcomer(seed: int | None = None) -> list[float]:
    """The newcomer run's accuracy: of one seed each round, or over the seeds the last round's
    count, mean, min, max and sample std."""
    table = rows(NEWCOMER)
    if seed is not None:
        return [float(r["accuracy"]) for r in table if int(r["seed"]) == seed]
    last = max(int(r["round"]) for r in table)
    final = {int(r["seed"]): float(r["accuracy"]) for r in table if int(r["round"]) == last}
    mean, std = mean_std(list(final.values()))
    return [len(final), mean, min(final.values()), max(final.values()), std]


def _privacy_no_dp_seed0() -> list[float]:
    """bench-privacy-client without DP (target ε inf), seed 0: accuracy before training and after."""
    row = [r for r in rows("privacy-client/runs.csv") if (r["target_epsilon"], r["seed"]) == ("inf", "0")]
    if len(row) != 1:
        raise ValueError(f"privacy-client/runs.csv: {len(row)} rows for ε inf, seed 0 (need 1)")
    return [100 * float(row[0]["initial_accuracy"]), 100 * float(row[0]["accuracy"])]


def _client_dp_cost(sites: int) -> list[float]:
    """ε = 8 − no DP at ``sites`` sites (privacy-client-<sites>/runs.csv), paired by seed: mean and
    95 % t interval."""
    by = {(r["target_epsilon"], r["seed"]): 100 * float(r["accuracy"])
          for r in rows(f"privacy-client-{sites}/runs.csv")}
    seeds = sorted(s for e, s in by if e == "8.0" and ("inf", s) in by)
    return list(paired_interval([by["8.0", s] for s in seeds], [by["inf", s] for s in seeds]))


EQUAL, EQUAL_30 = "bench-gen-equal/runs.csv", "bench-gen-equal/runs-30.csv"


@cache
def _equal_rows(name: str = EQUAL) -> tuple[dict, dict]:
    """A raw-rows CSV of bench-gen-equal, read once (the checks below parse the same CSVs): the
    overall accuracy per rule, seed and round, and the uplink per rule."""
    table = read(RESULTS / name)
    return overall(table), uplink(table)


def _equal(other: str, reading: str = "last round", reference: str = "f3ocus-nsga2",
           name: str = EQUAL, seeds: set[int] | None = None) -> tuple[float, ...]:
    """bench-gen-equal from its raw rows `name` (`experiments.curves`), over the seeds `reference`
    and `other` both ran (of `seeds`, where given): their count, `reference`'s uplink as % of
    `all`'s, the two last-round accuracies, and `reference` − `other` (mean, and its 95 % t interval
    from two seeds) in `reading` (the last round, or the mean over rounds)."""
    data, sent = _equal_rows(name)
    common = set(data[reference]) & set(data[other])
    seeds = common if seeds is None else common & seeds
    data = {rule: {s: data[rule][s] for s in seeds} for rule in (reference, other)}
    row = next(r for r in pairs(data, reference, [other]) if r["reading of"] == reading)
    ends = [float(np.mean([last(c) for c in data[rule].values()])) for rule in data]
    return (len(seeds), 100 * sent[reference] / sent["all"], *ends, row["mean"],
            *((row["low"], row["high"]) if "low" in row else ()))


def _lntk_under_all() -> list[float]:
    """How far LNTK top-k ends under `all` in bench-gen-equal, and the 95 % interval of that gap."""
    gap = _equal("all", reference="lntk")
    return [-gap[4], gap[5], gap[6]]


def _thirty_rounds() -> list[float]:
    """The paper's 30 rounds: F3OCUS − `all` at the end (mean, interval, seeds), the two accuracies
    and F3OCUS's uplink share; then F3OCUS − `all` after 10 rounds on the same seeds, and over the
    whole 30-round run (the mean over rounds)."""
    end, thirty = _equal("all", name=EQUAL_30), _equal_rows(EQUAL_30)[0]
    seeds = set(thirty["f3ocus-nsga2"]) & set(thirty["all"])
    return [*end[4:], end[0], end[2], end[3], end[1], *_equal("all", seeds=seeds)[4:],
            *_equal("all", "mean over rounds", name=EQUAL_30)[4:]]


def _equal_verdict() -> list[float]:
    """F3OCUS − `all` (gap under it, interval, seeds), then F3OCUS − `random` (interval, seeds)."""
    a, r = _equal("all"), _equal("random")
    return [-a[4], a[5], a[6], a[0], r[4], r[5], r[6], r[0]]


CHECKS: tuple[Check, ...] = (
    Check("`all` {} %, heads only {} %, majority answer {} %", (K2,),
          lambda: [value(K2, "all", "overall_mean"), value(K2, "none", "overall_mean"),
                   value(K2, "all", "majority_mean")], document="docs/compare.md"),
    Check("F3OCUS beats LNTK top-k by {} pp (paired 95 % interval [{}, {}])", ("bench-yesno/paired.csv",),
          lambda: interval("bench-yesno/paired.csv", YN, "lntk"), document="docs/compare.md"),
    Check("random layers by {} pp ([{}, {}],", ("bench-yesno/paired.csv",),
          lambda: interval("bench-yesno/paired.csv", YN, "random"), document="docs/compare.md"),
    Check("at k = 2 ({} pp, [{}, {}]) and k = 4 ({} pp, [{}, {}])", ("bench-yesno-budget/paired.csv",),
          lambda: [*(v for k in (2, 4) for v in interval("bench-yesno-budget/paired.csv",
                                                          f"bench-yesno-k{k}: f3ocus-nsga2", "lntk"))],
          document="docs/compare.md"),
    Check("(task1 {}–{} %, task2 {}–{} %)",
          ("task1-hetero/table.csv", "task2-hetero/table.csv", "task2-hetero/optimizers.csv"),
          lambda: [*_range("task1-hetero/table.csv"),
                   *_range("task2-hetero/table.csv", "task2-hetero/optimizers.csv")],
          document="docs/compare.md"),
    Check("server step costs {}–{} s per round", ("task1-hetero/table.csv", "task2-hetero/table.csv"),
          lambda: sorted(value(f"{t}-hetero/table.csv", "f3ocus", "server_s_mean")
                         for t in ("task2", "task1")), document="docs/compare.md"),
    Check("where sharing helps (FedAvg − local {} pp, [{}, {}], 5 seeds)", NO_CONFLICT[:1],
          lambda: interval(*NO_CONFLICT), document="docs/compare.md"),
    Check("FedAvg falls {} pp below local training", ("bench-agg/vs-local.csv",),
          lambda: [-interval("bench-agg/vs-local.csv", AGC.format("fedavg"), AGC.format("local"))[0]],
          document="docs/compare.md"),
    Check("(the group oracle) gains {} pp [{}, {}] over FedAvg", ("bench-agg/vs-fedavg.csv",),
          lambda: _vs_fedavg("oracle"), document="docs/compare.md"),
    Check("SIMA is not distinguishable from FedAvg ({}, [{}, {}],", ("bench-agg/vs-fedavg.csv",),
          lambda: _vs_fedavg("sima"), document="docs/compare.md"),
    Check("is below it ({}, [{}, {}]) at half the uplink", ("bench-agg/vs-fedavg.csv",),
          lambda: _vs_fedavg("sima-pq"), document="docs/compare.md"),
    Check("SIMA gives a client's group partner {} of the weight (uniform: 0.2) and gains {} pp [{}, {}] "
          "over FedAvg, {} pp [{}, {}] below the group oracle", (TYPES, "bench-agg/sima-types-weights.csv"),
          _types, document="docs/compare.md"),
    Check("bench-agg.md, 5 seeds: FedAvg − local {} pp with it", NO_CONFLICT[:1],
          lambda: interval(*NO_CONFLICT)[:1], document="docs/reference.md"),
    Check("The whole sweep, {} runs, took {} h on 2 cores", ("bench-yesno/sweep_time.csv", "README.md"),
          lambda: [value("bench-yesno/sweep_time.csv", "all", "runs", "experiment") + _optimiser_batch()[0],
                   _wall_hours("bench-yesno/sweep_time.csv") + _optimiser_batch()[1] / 3600],
          document="docs/compare.md"),
    Check("the 30 runs of `bench-yesno-k2` with `--jobs 2` took {} s wall, {} s a run",
          ("bench-yesno/sweep_time.csv",), _k2_wall, document="docs/compare.md"),
    Check("`docs/results/bench-agg/sweep.sh`, {} runs in {} h with `--jobs 2`", ("bench-agg/sweep_time.csv",),
          lambda: [sum(column("bench-agg/sweep_time.csv", "runs")[:-1]),  # every row but "all"
                   _wall_hours("bench-agg/sweep_time.csv")], document="docs/compare.md"),
    Check("F3OCUS, at {} % of `all`'s uplink, ends at {} % against {} % for `all` ({} points [{}, {}], "
          "{} seeds) and at {} % against {} % for `random` ({} [{}, {}], {} seeds)", (EQUAL,),
          lambda: [*(a := _equal("all"))[1:], a[0], *(r := _equal("random"))[2:], r[0]],
          document="docs/compare.md"),
    Check("F3OCUS at {} % of `all`'s uplink ends {} points under `all` ([{}, {}], {} seeds) and {} points "
          "above random layers ([{}, {}], {} seeds), though over the whole run (the mean over rounds: {} "
          "[{}, {}]) it is not distinguishable from them", (EQUAL,),
          lambda: [_equal("all")[1], *_equal_verdict(), *_equal("random", "mean over rounds")[4:]]),
    Check("of `all`'s uplink it ends {} points under `all` ([{}, {}], {} seeds,", (EQUAL,),
          lambda: _equal_verdict()[:4], document="docs/results/bench-gen-equal.md"),
    Check("F3OCUS ends {} points under `all` ([{}, {}], {} seeds) and {} [{}, {}] over `random` ({} seeds)",
          (EQUAL,), _equal_verdict, document="docs/results/bench-gen-paper.md"),
    Check("ends above F3OCUS (F3OCUS − LNTK top-k {} points [{}, {}], {} seeds) and {} points under `all` "
          "([{}, {}])", (EQUAL,), lambda: [*(f := _equal("lntk"))[4:], f[0], *_lntk_under_all()]),
    Check("- **F3OCUS − LNTK top-k:** lower, {} [{}, {}] ({} seeds, ±{};", (EQUAL,),
          lambda: [*(f := _equal("lntk"))[4:], f[0], (f[6] - f[5]) / 2], document="docs/compare.md"),
    Check("no server step, ends {} points under `all` ([{}, {}]) and {} above `random` ([{}, {}])", (EQUAL,),
          lambda: [*_lntk_under_all(), *_equal("random", reference="lntk")[4:]], document="docs/compare.md"),
    Check("**F3OCUS − LNTK top-k: lower.** {} [{}, {}] on {} seeds (±{}); the mean over rounds {} [{}, {}]",
          (EQUAL,), lambda: [*(f := _equal("lntk"))[4:], f[0], (f[6] - f[5]) / 2,
                             *_equal("lntk", "mean over rounds")[4:]],
          document="docs/results/bench-gen-equal.md"),
    Check("Over the paper's 30 rounds ({} seeds) F3OCUS ends level with `all` (F3OCUS − `all` {} points "
          "[{}, {}], within the paper's 2 points), though over the whole run it trails (the mean over "
          "rounds: {} [{}, {}])", (EQUAL_30,), lambda: [(t := _thirty_rounds())[3], *t[:3], *t[10:]]),
    Check("Over the paper's 30 rounds F3OCUS − `all` ends at {} [{}, {}] ({} seeds)", (EQUAL_30,),
          lambda: _thirty_rounds()[:4], document="docs/results/bench-gen-paper.md"),
    Check("F3OCUS − `all` ends at {} points [{}, {}], within the paper's 2 points at {} % of the uplink, "
          "against {} [{}, {}] on the same seeds after 10 rounds; over the whole run {} [{}, {}]",
          (EQUAL_30, EQUAL), lambda: [*(t := _thirty_rounds())[:3], *t[6:]], document="docs/compare.md"),
    Check("F3OCUS − `all` ends at {} points [{}, {}] over {} seeds ({} against {} %, at {} % of the uplink), "
          "against {} [{}, {}] on the same seeds after 10 rounds (section 3); over the whole run (the mean "
          "over rounds) {} [{}, {}]", (EQUAL_30, EQUAL),
          _thirty_rounds, document="docs/results/bench-gen-equal.md"),
    Check("all − none = {} points, interval [{}, {}]", (GEN,),
          lambda: interval(GEN, "bench-gen: all", "none"), document="docs/compare.md"),
    Check("It uplinks {} % of `all`'s bytes", ("bench-gen/selection.csv",), lambda: [_gen_uplink_share()],
          document="docs/compare.md"),
    Check("ends {} points under `all` ([{}, {}])", (GEN,), _gen_f3ocus_under_all, document="docs/compare.md"),
    Check("It is not distinguishable from `random` ({} points, [{}, {}])", (GEN,),
          lambda: interval(GEN, "bench-gen: f3ocus-nsga2", "random"), document="docs/compare.md"),
    Check("FedAvg beats training each client alone by {} points ([{}, {}] against local)",
          ("bench-gen/vs-fedavg.csv",), _gen_fedavg_minus_local, document="docs/compare.md"),
    Check("heads alone {} % at head-lr 3e-3 against {} % at 1e-4, all adapters {} % against {} %, and {} % "
          "at 1e-4 after 160 steps", ("sensitivity/screening.csv",),
          lambda: _screening(("1", "none"), ("6", "none"), ("1", "all"), ("6", "all"), ("5", "all")),
          document="docs/reference.md"),
    Check("answered {} % → {} % → {} % of the 96 test questions", (NEWCOMER,), lambda: _newcomer(0),
          document="docs/compare.md"),
    Check("over {} seeds (0-4) the same command ends at {} % on average (range {}-{} %, sample std {} "
          "points", (NEWCOMER,), _newcomer, document="docs/compare.md"),
    Check("(seed 0: {} % before training, {} % after round 10)", ("privacy-client/runs.csv",),
          _privacy_no_dp_seed0, document="docs/results/privacy.md"),
    Check("{} points at 50 sites (95 % interval [{}, {}], 5 seeds), {} at 200 ([{}, {}],",
          ("privacy-client-50/runs.csv", "privacy-client-200/runs.csv"),
          lambda: _client_dp_cost(50) + _client_dp_cost(200), document="docs/privacy.md"),
)

NUMBER = r"([+-]?\d+(?:\.\d+)?)"


def normalise(text: str) -> str:
    return " ".join(text.replace("−", "-").split())


def tolerance(printed: str) -> float:
    """How far a printed number may lie from the recomputed one: half a unit of its last digit
    (README rounds) plus 0.01 (the CSVs hold the lab tools' two-decimal prints)."""
    decimals = len(printed.split(".")[1]) if "." in printed else 0
    return 0.5 * 10 ** -decimals + 0.01


def check(root: Path = ROOT) -> list[tuple[Check, list[str] | None, list[float], bool]]:
    """Every check: its document's printed numbers (None where the phrase is not found), the
    recomputed ones, and whether each printed number is within its `tolerance` of the recomputed
    one."""
    texts = {name: normalise((root / name).read_text(encoding="utf-8"))
             for name in dict.fromkeys(item.document for item in CHECKS)}
    out = []
    for item in CHECKS:
        pattern = NUMBER.join(re.escape(part) for part in normalise(item.template).split("{}"))
        found = re.search(pattern, texts[item.document])
        values = [float(v) for v in item.values()]
        printed = list(found.groups()) if found else None
        ok = printed is not None and all(abs(float(p) - v) <= tolerance(p)
                                         for p, v in zip(printed, values, strict=True))
        out.append((item, printed, values, ok))
    return out


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if args[:1] == ["extract"]:
        parser = argparse.ArgumentParser(prog="python -m experiments.headlines extract")
        parser.add_argument("source", type=Path)
        parser.add_argument("out", type=Path)
        parser.add_argument("--section", default="", help="the part under the heading containing this")
        parser.add_argument("--table", type=int, help="which table (0 = the first) where there are several")
        ns = parser.parse_args(args[1:])
        try:
            print(extract(ns.source, ns.out, ns.section, ns.table))
        except (ValueError, FileNotFoundError) as err:
            print(f"error: {err}", file=sys.stderr)
            return 2
        return 0
    if args:
        print("usage: python -m experiments.headlines "
              "[extract <source.md> <out.csv> [--section H] [--table N]]", file=sys.stderr)
        return 2
    results = check()
    for item, printed, values, ok in results:
        status = "ok  " if ok else ("DIFF" if printed else "GONE")
        shown = ", ".join(printed) if printed else f"phrase not in {item.document}"
        print(f"{status} \"{item.template}\"\n     {item.document}: {shown}\n     recomputed: "
              + ", ".join(f"{v:.3f}" for v in values) + f"  <- docs/results/{', '.join(item.sources)}")
    bad = sum(not ok for *_, ok in results)
    print(f"{len(results) - bad} of {len(results)} phrases of README and docs/results agree with "
          "docs/results' tables")
    return 1 if bad else 0


if __name__ == "__main__":
    raise SystemExit(main())
