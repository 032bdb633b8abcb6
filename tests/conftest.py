"""Tests run offline: nothing may reach a model hub. Under pytest-xdist each worker runs torch on
one thread, so the workers (one more than the cores, see below) do not oversubscribe the cores
with threads.

Scheduling (the suite's budget is 5 minutes on 2 cores): the longest modules (`LONGEST_FIRST`) are
handed out first (with ``--no-loadscope-reorder`` xdist keeps this collection order instead of
putting the modules with the most tests first), so no long module starts last and runs alone.
One worker more than the cores (`pytest_xdist_auto_num_workers`): the deployment and Ray modules
wait on Flower's polls and heartbeats and on Ray's starts, and with one worker per core those
waits left a core idle (a quiet run, ``tests/helpers/suite_cpu.sh``, 2026-11-27: 2 workers 308.6 s
wall, 517 core-seconds busy and 98 idle; 3 workers 282.7 s, 527 busy, 38 idle; earlier, 4 workers
gave 341 s against 313-390 s for 2). Otherwise the suite is CPU-bound, so what shortens it is fewer
process starts: one federation for the budget, refused-node, FedMosaic and killed-node tests, the
generative model on the killed-node run, the resume test without Ray, the Ray scenario's two runs
side by side.
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
    # one OpenMP/BLAS thread: with the other workers busy, a second thread mostly spins at torch's
    # barriers. test_resume's old 2-round in-process run (3 clients) took 34.5 s of CPU with torch's
    # default threads, 11.4 s with OMP_NUM_THREADS=1 (cpu_time.py, load ~45 on 2 cores, 2026-11-26).
    # A test about thread counts sets them explicitly (tests/client_app/test_site_worker.py).
    os.environ["OMP_NUM_THREADS"] = "1"
    # Ray starts its workers at nice 15: on a machine with other work (two sweeps at nice 5) the
    # simulation's one client actor got a few per cent of a core, and test_simulation.py's two-round
    # Ray run took 139 s of wall time for 20 s of work; at nice 0, 37.5 s (cpu_time.py, 2026-11-29).
    # In a quiet suite the other workers leave it idle cores: 58-60 s either way.
    os.environ["RAY_worker_niceness"] = "0"  # noqa: SIM112 (Ray reads its config names as spelled)
    import torch

    torch.set_num_threads(1)

LONGEST_FIRST = (  # the modules longest in wall time, longest first: seconds per module summed over its
    # tests in the quiet 2-worker run above (3 workers in brackets; in square brackets a quiet 3-worker run of
    # 2026-11-29, 460 s wall and 908 core-seconds busy); every other module took under 14 s (21 s)
    "test_deploy.py",  # 206 (240): a federation, three runs, Flower's 3 s polls and heartbeats
    "test_deploy_identity.py",  # [207]: two sites, an impostor, two runs; beside test_deploy.py
    "test_ray_cluster.py",  # 100 (111): a two-node Ray cluster's starts
    "test_simulation.py",  # 31 (78)
    "test_generative.py",  # 30 (45)
    "test_smol_llava.py",  # 29 (33)
)


def pytest_xdist_auto_num_workers(config) -> int:
    """``-n auto``: one worker more than the cores this process may use (see above)."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    return cores + 1


def pytest_collection_modifyitems(config, items) -> None:
    rank = {name: i for i, name in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.name, len(rank)))
