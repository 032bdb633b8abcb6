"""Tests run offline: nothing may reach a model hub.

Under pytest-xdist several workers share the machine's cores, so each worker and every process it
starts (Ray clients, SuperNodes, run_simulation sweeps) runs torch on one thread: more threads than
cores make OpenMP's spinning threads wait on each other and every test slower. No test compares
numbers across thread counts.
"""

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
if os.environ.get("PYTEST_XDIST_WORKER"):
    for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ.setdefault(var, "1")
