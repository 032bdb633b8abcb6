"""Tests run offline: nothing may reach a model hub. Under pytest-xdist each worker runs torch on
one thread, so the workers do not oversubscribe the cores.

Scheduling (the suite's budget is 5 minutes on 2 cores): the longest modules (`LONGEST_FIRST`) are
handed out first (with ``--no-loadscope-reorder`` xdist keeps this collection order instead of
putting the modules with the most tests first), so no long module starts last and runs alone.
Two workers, one per core: the deployment tests are not idle while they wait on Flower, they start
processes that import torch, transformers and peft (`python -X importtime -c "import torch, peft"`:
5.5-6 s), so more workers only make them contend (``-n 4``: 341 s against 313-390 s for 2 on
the same day). The suite is CPU-bound: whole-machine busy CPU over a quiet run
(``tests/helpers/suite_cpu.sh``) was
606 of 656 core-seconds at 328 s wall, so what shortens it is fewer process starts (one federation
for the budget, refused-node and killed-node tests; two sites for FedMosaic; the resume test
without Ray): 467 core-seconds busy, 261 s wall (Flower's Control API was then called in-process; it
is now the public ``flwr`` CLI again, about 0.6 s of CPU a call, a few calls per federation).
"""

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

if os.environ.get("PYTEST_XDIST_WORKER"):
    import torch

    torch.set_num_threads(1)

LONGEST_FIRST = (  # seconds per module, setup + call + teardown of `python -m pytest -q -p no:randomly
    # --durations=80` summed over its entries among those 80 (2026-11-25, on a loaded machine, so only
    # their order counts)
    "test_deploy.py",  # 581
    "test_ray_cluster.py",  # 337 (its cluster failed to start that time; longer when it does)
    "test_simulation.py",  # 295
    "test_deploy_mosaic.py",  # 235
    "test_resume.py",  # 177
    "test_generative.py",  # 156 (it was not listed, so it could start last and run alone)
    "test_report.py",  # 42
)


def pytest_collection_modifyitems(config, items) -> None:
    rank = {name: i for i, name in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.name, len(rank)))
