"""SIMA's similarity matrix and client weights per round, recomputed from the vectors the clients
sent (``sima-grad`` in ``clients.jsonl``, column-normalised: `tasks.mosaic.sima`), for a run with
planted ``client-groups`` (from the run's config.json: 0,0,1,1 in `conf/bench-agg-conflict.toml`,
0,1,2,0,1,2 in `conf/bench-agg-types.toml`).

Usage: python docs/results/bench-agg/sima_weights.py results/bench-aggc-sima [out.csv]
Prints seed 0's matrices and the same-group weight (the weight client i gives the other members of
its group; with no preference, (group size - 1)/(clients - 1)) over seeds × rounds × clients; writes
one row per seed and round. Runs without a clients.jsonl yet are skipped.
"""

from __future__ import annotations

import csv
import json
import sys
from pathlib import Path

import numpy as np
from strategies.aggregation.sima import TAU, client_weights, similarity_matrix

from settings.config import parse_groups
from tasks.data.partition import group_of


def _accuracy(replies: list[dict], prefix: str) -> float | str:
    """Accuracy in % over the clients' test examples ('Others' only in the last round, else '')."""
    ev = [r["evaluate"] for r in replies]
    if any(f"{prefix}accuracy" not in e for e in ev):
        return ""
    n = np.array([e[f"{prefix}num-examples"] for e in ev], dtype=float)
    return round(float(np.dot([e[f"{prefix}accuracy"] for e in ev], n) / n.sum() * 100), 2)


def main(experiment: str, out: str | None = None) -> None:
    rows, same = [], []
    np.set_printoptions(precision=3, suppress=True)
    for run in sorted(p.parent for p in Path(experiment, "runs").glob("all-s*/clients.jsonl")):
        seed = int(run.name.removeprefix("all-s"))
        replies = [json.loads(line) for line in (run / "clients.jsonl").read_text().splitlines()]
        groups = parse_groups(json.loads((run / "config.json").read_text())["client-groups"])
        for rnd in sorted({r["round"] for r in replies} - {0}):  # round 0 evaluates, trains nothing
            got = sorted((r for r in replies if r["round"] == rnd), key=lambda r: r["partition-id"])
            sim = similarity_matrix(np.array([r["train"]["sima-grad"] for r in got]))
            w = client_weights(sim, TAU)
            group = np.array([group_of(r["partition-id"], groups) for r in got])
            block = (group[:, None] == group[None, :]) & ~np.eye(len(got), dtype=bool)
            pair = (w * block).sum(axis=1)
            same += list(pair)
            if seed == 0:
                print(f"seed 0 round {rnd}: similarity\n{sim}\nweights (tau {TAU})\n{w}")
            cross = (group[:, None] != group[None, :])
            rows.append({"seed": seed, "round": rnd, "same-group-weight": round(float(np.mean(pair)), 4),
                         "per-client": " ".join(f"{v:.3f}" for v in pair),
                         "same-group-cos": round(float(sim[block].mean()), 4),
                         "cross-group-cos": round(float(sim[cross].mean()), 4),
                         "self-accuracy": _accuracy(got, ""), "others-accuracy": _accuracy(got, "others-")})
    print(f"same-group weight over {len(same)} (seed, round, client): mean {np.mean(same):.3f}, "
          f"min {np.min(same):.3f}, max {np.max(same):.3f}")
    if out:
        with open(out, "w", newline="") as f:
            writer = csv.DictWriter(f, fieldnames=list(rows[0]))
            writer.writeheader()
            writer.writerows(rows)


if __name__ == "__main__":
    main(*sys.argv[1:3])
