"""Multi-modal federated data: named data sets split into heterogeneous client partitions.

Data sets: easy-vqa, easy-vqa-modalities, synthetic, synthetic-multilabel, medmnist-vqa:<dir>.
Partitioners: iid, dirichlet:<gamma>, by-question-type[:<gamma>] (see `tasks.data.partition`).
"""

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
