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
``python tests/helpers/cpu_time.py python -m pytest -q -n 1 -p no:randomly tests/<module>`` (every process
it starts included, daemons too), not by wall time. ``-n 1``, not ``-n 0``: only an xdist worker runs
torch on one thread, as in the suite; with two threads on a loaded machine torch's barriers spin, and
a forced-answer generation test took 5.9 s of CPU instead of 0.4 s (load 20-28, 2026-11-26), which
once put test_generative.py first in `LONGEST_FIRST` (619 s "with test_report.py": 30 s with ``-n 1``).
"""

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

if os.environ.get("PYTEST_XDIST_WORKER"):
    # and every process a test starts (runs, site workers, Ray drivers, subprocess checks) inherits
    # one OpenMP/BLAS thread: with the other worker busy, a second thread mostly spins at torch's
    # barriers. test_resume's old 2-round in-process run (3 clients) took 34.5 s of CPU with torch's
    # default threads, 11.4 s with OMP_NUM_THREADS=1 (cpu_time.py, load ~45 on 2 cores, 2026-11-26).
    # A test about thread counts sets them explicitly (tests/client_app/test_site_worker.py).
    os.environ["OMP_NUM_THREADS"] = "1"
    import torch

    torch.set_num_threads(1)

LONGEST_FIRST = (  # the modules longest in wall time, longest first: one run of the suite on a machine at
    # load 10-28 (`--junitxml`, 2026-11-26), seconds per module summed over its tests: every other
    # module took under 40 s there. CPU seconds (tests/helpers/cpu_time.py, see above; the process
    # modules with -n 0, where the pytest process itself runs little torch) in brackets.
    "test_deploy.py",  # 396 (179 CPU): a federation, three runs, Flower's 3 s polls and heartbeats
    "test_ray_cluster.py",  # 302 (57 CPU): a two-node Ray cluster's starts
    "test_resume.py",  # 80 (39 CPU, before its run was made smaller)
    "test_simulation.py",  # 79
    "test_generative.py",  # 70 (26 CPU)
)


def pytest_collection_modifyitems(config, items) -> None:
    rank = {name: i for i, name in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.name, len(rank)))
