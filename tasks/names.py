"""Names of the models and data sets `tasks` builds, importable without building anything (no torch,
transformers, PIL): the run settings (`settings.config`) check ``model`` and ``dataset`` in every
process, also in a deployed ClientApp that only forwards messages to its site's worker.
`tasks.models.build_model` and `tasks.data.load_partition` accept exactly these.
"""

MODELS: tuple[str, ...] = ("minilm-effnet", "tiny-vilt", "hf:<local dir>")
"""``hf:<local dir>``: any transformers checkpoint on disk."""
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
