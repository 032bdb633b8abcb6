"""Names of the models and data sets `tasks` builds, importable without building anything (no torch,
transformers, PIL): the run settings (`settings.config`) check ``model`` and ``dataset`` in every
process, also in a deployed ClientApp that only forwards messages to its site's worker.
`tasks.models.build_model` and `tasks.data.load_partition` accept exactly these.
"""

MODELS: tuple[str, ...] = ("minilm-effnet", "tiny-vilt", "tiny-llava", "smol-llava", "hf:<local dir>")
"""``hf:<local dir>``: any transformers checkpoint on disk; ``tiny-llava``: a random generative LLaVA;
``smol-llava``: a pretrained generative LLaVA (SmolLM2-135M-Instruct + EfficientNet-Lite0, issue 37)."""
DTYPES: tuple[str, ...] = ("auto", "float32", "bfloat16", "float16")
"""Run setting ``dtype`` of a generative model's frozen weights (``auto``: bfloat16 on a CUDA device
that supports it, else float32); adapters are float32 whatever it is."""
DATASETS: tuple[str, ...] = (
    "easy-vqa",
    "easy-vqa-modalities",
    "easy-vqa-yes-no",
    "synthetic",
    "synthetic-multilabel",
    "medmnist-vqa:<dir>",
    "hf-disk:<dir>[?<option>=<value>&...]",
    "mixed:<dataset>+<dataset>[+...]",
)
MODEL_SIZES: tuple[str, ...] = ("base", "large")
"""FedMosaic's two client sizes of one family: ``large`` is minilm-effnet with EfficientNet-Lite2
(deeper, wider image tower) or tiny-vilt 48 wide instead of 32; hf:<dir> has only ``base``."""
SIMA_VECTOR: str = "sima-grad"
"""Key of a client's SIMA gradient vector in its train reply and its stored state (FedMosaic Eq. 4);
`strategies.aggregation.sima` reads it under the same name."""
