"""Print the per-round accuracy / loss / train loss and every (round, client) layer mask of each run
under a results folder, oldest first, so that two trees' same-seed runs can be diffed."""

from __future__ import annotations

import json
import sys
from pathlib import Path


def rows(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def main(root: Path) -> None:
    for run in sorted(root.iterdir(), key=lambda p: p.stat().st_mtime):
        config = json.loads((run / "config.json").read_text())
        label = f"{config['model']}/{config['strategy']}/{config['aggregation']}"
        for r in rows(run / "rounds.jsonl"):
            if r["round"] > 0:
                e, t = r["evaluate"], r["train"]
                print(f"{label} r{r['round']}: {e['accuracy']:.4f} / {e['loss']:.6f} / {t['train_loss']:.6f}")
        masks = sorted((c["round"], c["partition-id"], c["mask"]) for c in rows(run / "clients.jsonl")
                       if c["round"] > 0)
        print(f"{label} masks: {masks}")


if __name__ == "__main__":
    main(Path(sys.argv[1]))
