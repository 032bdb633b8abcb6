"""Tests run offline: nothing may reach a model hub. Under pytest-xdist (one worker per core) each
worker runs torch on one thread, so the workers do not oversubscribe the cores."""

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

if os.environ.get("PYTEST_XDIST_WORKER"):
    import torch

    torch.set_num_threads(1)
