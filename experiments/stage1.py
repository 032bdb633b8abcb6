"""The stage-1 projector of `smol-llava-aligned` (LLaVA's feature alignment, `tasks.stage1`):

    python -m experiments.stage1              # install the committed projector into the cache (seconds)
    python -m experiments.stage1 --rebuild    # run the recipe here (about 15 minutes on one core)

The projector every committed generative table starts from is in the repo (``SHIPPED``: the
safetensors file and its record, the recipe, loss curve and SHA-256), so every machine starts from the
same bytes: a CPU's sums depend on its instruction set and threads, and a rebuild elsewhere may not
reproduce them. The default copies it into the cache after checking its SHA-256 and its recipe
against `tasks.stage1.RECIPE`. ``--rebuild`` runs the recipe instead (float32, one thread, so the
same machine makes the same bytes) and prints whether the result equals the committed projector and,
if not, its largest difference; ``--ship`` copies a rebuilt entry into ``SHIPPED``. Each run
records the projector's SHA-256 in its ``config.json`` (``stage1-projector-sha256``).
"""

from __future__ import annotations

import argparse
import json
import shutil
from dataclasses import asdict
from pathlib import Path

from tasks import stage1
from tasks.stage1 import PROJECTOR_FILE, checksum

SHIPPED = Path(__file__).resolve().parent / "stage1"
"""The committed projector (``projector.safetensors``) and its record (``stage1.json``)."""


def shipped_record() -> dict:
    """The committed record, checked: its recipe is `RECIPE` and the file's SHA-256 its own;
    ValueError in one line otherwise."""
    record = json.loads((SHIPPED / "stage1.json").read_text())
    if record["recipe"] != asdict(stage1.RECIPE):
        raise ValueError(f"{SHIPPED / 'stage1.json'} was made by recipe {record['recipe']}, not "
                         f"tasks.stage1.RECIPE {asdict(stage1.RECIPE)}: rebuild it with --rebuild --ship")
    if checksum(SHIPPED / PROJECTOR_FILE) != record["sha256"]:
        raise ValueError(f"{SHIPPED / PROJECTOR_FILE} does not match the SHA-256 {record['sha256']} of "
                         f"{SHIPPED / 'stage1.json'}")
    return record


def install_shipped() -> Path:
    """Copy the committed projector into the cache (the entry of `RECIPE`); an entry already there
    must hold the same bytes (ValueError otherwise: delete it, or compare with --rebuild)."""
    from safetensors.torch import load_file

    record = shipped_record()
    entry = stage1.entry_of(stage1.RECIPE)
    if (entry / PROJECTOR_FILE).is_file():
        if checksum(entry / PROJECTOR_FILE) != record["sha256"]:
            raise ValueError(f"{entry} holds another projector than the committed one ({record['sha256']}): "
                             f"delete it to install the committed one")
        return entry
    return stage1.install(stage1.RECIPE, load_file(SHIPPED / PROJECTOR_FILE), record)


def compare(entry: Path) -> str:
    """One line: whether the projector of ``entry`` equals the committed one, or by how much not."""
    from safetensors.torch import load_file

    mine, shipped = checksum(entry / PROJECTOR_FILE), checksum(SHIPPED / PROJECTOR_FILE)
    if mine == shipped:
        return f"the rebuilt projector equals the committed one bit for bit (SHA-256 {mine})"
    a, b = load_file(entry / PROJECTOR_FILE), load_file(SHIPPED / PROJECTOR_FILE)
    worst = max(float((a[k] - b[k]).abs().max()) for k in a)
    return (f"the rebuilt projector differs from the committed one (largest difference {worst:.3g}; "
            f"SHA-256 {mine} against {shipped}); the committed tables start from the committed one")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rebuild", action="store_true", help="run the recipe here instead of installing "
                                                               "the committed projector")
    parser.add_argument("--ship", action="store_true", help="with --rebuild: copy the result into the repo")
    args = parser.parse_args(argv)
    if args.ship and not args.rebuild:
        parser.error("--ship needs --rebuild")
    if not args.rebuild:
        print(f"stage-1 projector installed: {install_shipped()}")
        return
    entry = stage1.entry_of(stage1.RECIPE)
    if entry.exists():
        shutil.rmtree(entry)
    entry = stage1.align()
    print(f"stage-1 projector: {entry}")
    print((entry / "stage1.json").read_text())
    if args.ship:
        SHIPPED.mkdir(exist_ok=True)
        for name in (PROJECTOR_FILE, "stage1.json"):
            shutil.copyfile(entry / name, SHIPPED / name)
        print(f"copied into {SHIPPED}")
    elif (SHIPPED / PROJECTOR_FILE).is_file():
        print(compare(entry))


if __name__ == "__main__":
    main()
