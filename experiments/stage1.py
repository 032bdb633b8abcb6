"""Make the stage-1 projector of `smol-llava-aligned` (LLaVA's feature alignment, `tasks.stage1`):

    python -m experiments.stage1        # about 10 minutes on 2 CPU cores, once per machine

An existing cache entry of the same recipe is kept. Prints the entry's folder and its record (the
recipe, the loss per 25 steps, the seconds taken).
"""

from __future__ import annotations

import argparse

from tasks.stage1 import align


def main(argv: list[str] | None = None) -> None:
    argparse.ArgumentParser(description=__doc__.splitlines()[0]).parse_args(argv)
    entry = align()
    print(f"stage-1 projector: {entry}")
    print((entry / "stage1.json").read_text())


if __name__ == "__main__":
    main()
