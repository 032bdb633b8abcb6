"""Multi-modal federated data: named data sets split into heterogeneous client partitions.

Data sets (`DATASETS`, one `registry` entry each): easy-vqa (PyPI ``easy-vqa``),
easy-vqa-modalities (client i sees its images through modality transform i mod 8,
`tasks.data.transforms`), easy-vqa-yes-no (its yes/no questions only, `tasks.data.easyvqa`),
synthetic and synthetic-multilabel (generated from the seed, `tasks.data.synthetic`),
medmnist-vqa:<dir> (Ultra-MedVQA construction on MedMNIST files, `tasks.data.medmnist`),
hf-disk:<dir>[?<option>=<value>&...] (your own VQA set saved with Hugging Face ``datasets``,
`tasks.data.hfdisk`), mixed:<a>+<b> (client i holds component i mod 2, `tasks.data.mixed`).
Partitioners (`PARTITIONERS`): iid, dirichlet:<gamma>,
by-question-type[:<gamma>] (`tasks.data.partition`).

The public names load on first use (`lazy_loader`, SPEC 1): the settings' checks import
`tasks.data.partition` and `tasks.data.mixed` without the loaders (PIL, easy-vqa, datasets)."""

import lazy_loader

__getattr__, __dir__, __all__ = lazy_loader.attach(__name__, submod_attrs={
    "load": ["answers_by_type", "load_partition"],
    "partition": ["PARTITIONERS"],
    "registry": ["DATASETS", "REGISTRY", "DatasetEntry", "parse_dataset"],
    "types": ["Partition", "Sample", "majority_accuracy"],
})
