"""LLaVA's stage 1 for `smol-llava`: the projector aligned once, centrally, then cached on disk.

LLaVA-1.5 (Liu et al. 2024, §3.2; LLaVA, Liu et al. 2023, §4.2 "Stage 1: pre-training for feature
alignment") trains only the projector, the vision encoder and the language model frozen, on
image-caption pairs; every later fine-tuning (the paper's federated runs, F3OCUS §6.1) starts from
that aligned projector. Here the pairs are easy-VQA's *train* images with the caption
"<colour> <shape>" read off each image's own colour and shape questions (`captions`), so the
alignment never sees a test image or any question of a client's test set, and it teaches the
projector what the image shows without the VQA answer format. The recipe (`Recipe`) is fixed and
seeded, dtype and threads included; `align` runs it with `tasks.train.train` (no layer selected:
the projector is the model's one trainable part, as ``strategy = "none"`` trains it).

The result, the projector's four float32 tensors and a record (the recipe, its loss curve, the
file's SHA-256), is one cache entry beside the decoder's (`tasks.models.smol_llava.cache_dir`),
named by the recipe's hash, so a changed recipe never reads an older projector; `install` writes
one from given tensors (`experiments.stage1` installs the committed projector the tables start
from), to a temporary folder renamed into place. `aligned_projector` reads it (about 4 MB),
checked against its recorded SHA-256, or refuses in one line naming the command that makes it
(`COMMAND`); `build_aligned` is the registry's builder of ``smol-llava-aligned`` and sets the
model's `provenance` to that checksum, which every run records.
"""

from __future__ import annotations

import hashlib
import json
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

COMMAND = "python -m experiments.stage1"
PROJECTOR_FILE = "projector.safetensors"
QUESTION = "Describe the image briefly."


@dataclass(frozen=True)
class Recipe:
    """Stage 1's settings: AdamW ``steps`` of ``batch_size`` captions at ``lr`` (LLaVA's stage-1
    learning rate, 1e-3), ``seed`` for the projector's initialisation and the batches; ``dtype``
    of the frozen decoder and ``threads``, torch's CPU threads while it runs: a CPU's sums depend on
    the thread count (bfloat16 most), so the recipe fixes both, float32 and one thread, and one
    machine makes the same bytes whatever its caller's threads; ``blocks`` keeps the first decoder
    blocks (tests)."""

    steps: int = 300
    batch_size: int = 8
    lr: float = 1e-3
    seed: int = 0
    dtype: str = "float32"
    threads: int = 1
    blocks: int | None = None

    @property
    def key(self) -> str:
        """A short hash of the recipe: the cache entry's name."""
        return hashlib.sha256(json.dumps(asdict(self), sort_keys=True).encode()).hexdigest()[:12]


RECIPE = Recipe()
"""The recipe `smol-llava-aligned` reads."""


def captions() -> tuple[list, list[str]]:
    """Stage 1's pairs: one `Sample` per easy-VQA train image whose colour and shape questions both
    have an answer (2,435 of 4,000), asking `QUESTION`, and the caption vocabulary the samples'
    targets index ("red circle", ...)."""
    from tasks.data import Sample
    from tasks.data.easyvqa import load_easy_vqa

    source = load_easy_vqa()
    split = source.train
    seen: dict[str, dict[int, str]] = {"color": {}, "shape": {}}
    for row, target, qtype in zip(split.rows.tolist(), split.targets.tolist(), split.qtypes.tolist(),
                                  strict=True):
        if qtype in seen:
            seen[qtype][row] = source.labels[target]
    rows = sorted(set(seen["color"]) & set(seen["shape"]))
    text = [f"{seen['color'][r]} {seen['shape'][r]}" for r in rows]
    vocabulary = sorted(set(text))
    index = {c: i for i, c in enumerate(vocabulary)}
    images = split.blocks[0]
    samples = [Sample(images[r], QUESTION, index[c], "caption") for r, c in zip(rows, text, strict=True)]
    return samples, vocabulary


def entry_of(recipe: Recipe) -> Path:
    """The cache entry of ``recipe``."""
    import importlib.metadata

    from tasks.models.smol_llava import FORMAT, WHEEL, cache_dir

    return cache_dir() / f"smol-llava-stage1-{importlib.metadata.version(WHEEL)}-f{FORMAT}-{recipe.key}"


def align(recipe: Recipe | None = None, log=print) -> Path:
    """Run stage 1 under the recipe's dtype and thread count and write its cache entry (module
    doc); returns the entry. An existing entry is kept: the recipe fixes seed, dtype and threads,
    so it would be made again bit for bit on the same machine."""
    import torch

    from tasks.models.smol_llava import PROJECTOR, build_smol_llava
    from tasks.train import train

    recipe = recipe or RECIPE
    entry = entry_of(recipe)
    if (entry / PROJECTOR_FILE).is_file():
        return entry
    samples, vocabulary = captions()
    start = time.perf_counter()
    threads = torch.get_num_threads()
    torch.set_num_threads(recipe.threads)
    try:
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(recipe.seed)  # the projector's initialisation, as `build_model` seeds it
            model = build_smol_llava(dtype=getattr(torch, recipe.dtype), blocks=recipe.blocks)
        model.answers = vocabulary
        mask = np.zeros(len(model.layer_names), dtype=bool)
        losses = []
        chunk = 25
        for first in range(0, recipe.steps, chunk):
            steps = min(chunk, recipe.steps - first)
            stats = train(model, samples, mask, steps=steps, batch_size=recipe.batch_size, lr=recipe.lr,
                          seed=recipe.seed + first)
            losses.append(stats["train_loss"])
            log(f"stage 1: steps {first + 1}-{first + steps} of {recipe.steps}, "
                f"mean loss {stats['train_loss']:.4f}, {time.perf_counter() - start:.0f} s")
    finally:
        torch.set_num_threads(threads)
    state = {name[len(PROJECTOR) + 1:]: p.detach().float().contiguous()
             for name, p in model.named_parameters() if name.startswith(PROJECTOR + ".")}
    install(recipe, state, {"recipe": asdict(recipe), "captions": len(samples), "vocabulary": vocabulary,
                            "loss_per_25_steps": losses, "seconds": time.perf_counter() - start})
    return entry


def install(recipe: Recipe, state: dict, record: dict) -> Path:
    """Write ``state`` (the projector's tensors) and ``record`` as the cache entry of ``recipe``, the
    record with the projector file's SHA-256 (``sha256``), which `provenance` reports to every run."""
    from safetensors.torch import save, save_file

    from tasks.models.smol_llava import cache_entry

    entry = entry_of(recipe)
    record = {**record, "sha256": hashlib.sha256(save(state)).hexdigest()}
    with cache_entry(entry, PROJECTOR_FILE) as tmp:
        save_file(state, tmp / PROJECTOR_FILE)
        (tmp / "stage1.json").write_text(json.dumps(record, indent=2))
    return entry


def checksum(path: Path) -> str:
    """The SHA-256 of a file's bytes."""
    return hashlib.sha256(path.read_bytes()).hexdigest()


def aligned_projector(recipe: Recipe | None = None) -> dict:
    """The aligned projector's tensors (``linear_1.weight``, ...) of ``recipe`` (default `RECIPE`),
    or FileNotFoundError in one line with the command that makes them; ValueError where the file's
    bytes are not those its record names (a damaged or hand-edited entry)."""
    from safetensors.torch import load

    entry = entry_of(recipe or RECIPE)
    path = entry / PROJECTOR_FILE
    if not path.is_file():
        raise FileNotFoundError(f"model 'smol-llava-aligned' needs its stage-1 projector, not cached at "
                                f"{entry}: make it once with `{COMMAND}`")
    data = path.read_bytes()
    expected = json.loads((entry / "stage1.json").read_text()).get("sha256")
    if hashlib.sha256(data).hexdigest() != expected:
        raise ValueError(f"the stage-1 projector {path} does not match the SHA-256 its stage1.json records "
                         f"({expected}); delete {entry} and run `{COMMAND}` again")
    return load(data)


def provenance(recipe: Recipe | None = None) -> dict[str, str]:
    """What a run records of its start (``config.json``): the stage-1 projector's SHA-256, so two
    runs can be checked to have started from the same aligned model."""
    entry = entry_of(recipe or RECIPE)
    return {"stage1-projector-sha256": json.loads((entry / "stage1.json").read_text())["sha256"]}


def build_aligned(spec, num_outputs: int, task: str):
    """Registry builder of ``smol-llava-aligned`` (`tasks.models.registry`): ``smol-llava`` with the
    stage-1 projector, the paper's starting point for fine-tuning; one line naming `COMMAND` where
    the projector is not cached."""
    from tasks.models.smol_llava import PROJECTOR, build

    state = aligned_projector()
    model = build(spec, num_outputs, task)
    model.get_submodule(PROJECTOR).load_state_dict(state, strict=True)
    model.provenance = provenance()
    return model
