"""Multi-modal federated data: named data sets split into heterogeneous client partitions.

Data sets (`DATASETS`): easy-vqa (PyPI ``easy-vqa``), easy-vqa-modalities (client i sees its images
through modality transform i mod 8, `tasks.data.transforms`), synthetic and synthetic-multilabel
(generated from the seed, `tasks.data.synthetic`), medmnist-vqa:<dir> (Ultra-MedVQA construction
on MedMNIST files, `tasks.data.medmnist`), hf-disk:<dir>[?<option>=<value>&...] (your own VQA
set saved with Hugging Face ``datasets``, `tasks.data.hfdisk`), mixed:<a>+<b> (client i holds
component i mod 2, `tasks.data.mixed`). Partitioners (`PARTITIONERS`): iid, dirichlet:<gamma>,
by-question-type[:<gamma>] (`tasks.data.partition`)."""

from tasks.data.load import DATASETS, load_partition
from tasks.data.partition import PARTITIONERS
from tasks.data.types import Partition, Sample, majority_accuracy

__all__ = [
    "DATASETS",
    "PARTITIONERS",
    "Partition",
    "Sample",
    "load_partition",
    "majority_accuracy",
]
