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
On a machine others load, compare one module before and after a change by its CPU seconds with
``python tests/helpers/cpu_time.py python -m pytest -q -n 0 -p no:randomly tests/<module>`` (every process
it starts included, daemons too), not by wall time.
"""

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

if os.environ.get("PYTEST_XDIST_WORKER"):
    import torch

    torch.set_num_threads(1)

LONGEST_FIRST = (  # CPU seconds per module, all its processes included (`python tests/helpers/cpu_time.py
    # python -m pytest -q -n 0 -p no:randomly tests/<module>`, 2026-11-25, on a loaded machine, where
    # idle daemons' polling inflates them: only their order counts); the suite is CPU-bound
    "test_generative.py",  # 619 with test_report.py (torch on 2 threads there, 1 under xdist)
    "test_deploy.py",  # 374 (393 before its refused nodes overlapped its budget run)
    "test_ray_cluster.py",  # 130
    "test_deploy_mosaic.py",  # 109
    "test_resume.py",  # 64
    "test_simulation.py",  # 48
    "test_report.py",
)


def pytest_collection_modifyitems(config, items) -> None:
    rank = {name: i for i, name in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.name, len(rank)))
