"""A Deployment Engine federation on 127.0.0.1 for the deployment tests: a TLS SuperLink with
SuperNode authentication and three SuperNodes (or fewer) with their own budgets (deploy.launch.Federation,
its SuperNodes started through tests/helpers/fast_supernode.py).

Each test module starts its own (so pytest-xdist can run them side by side); every process it
starts is stopped by its PID at the end, and the teardown fails if any process naming its folder
or ports is left.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from unittest import mock

from deploy.launch import Federation, free_port_block, site_nodes

BUDGETS = {"site-0": 1, "site-1": 2, "site-2": 3}  # tiny-vilt has 4 selectable layers
SETTINGS = ("model='tiny-vilt' dataset='synthetic' partitioner='iid' budgets='' local-steps=4 "
            "batch-size=8 max-test-samples=40 optimizer-pop-size=20 optimizer-generations=10")
RUN_TIMEOUT = 1200  # generous: other work may share the 2 cores
FAST_SUPERNODE = Path(__file__).with_name("fast_supernode.py")


class FastFederation(Federation):
    """A `Federation` whose SuperNodes heartbeat more often (tests/helpers/fast_supernode.py)."""

    def spawn(self, name: str, command: list[str], home: Path, pipe: bool = False, supernode: bool = False):
        if command[0] == "flower-supernode":
            command = [sys.executable, str(FAST_SUPERNODE), *command[1:]]
        return super().spawn(name, command, home, pipe, supernode)


def start_federation(workdir: Path, extra_keys: tuple[str, ...] = (),
                     node_config: dict[str, dict[str, object]] | None = None,
                     sites: int = len(BUDGETS), check_flower: bool = True) -> Iterator[Federation]:
    """Start the federation of the first `sites` sites (credentials for `extra_keys` too,
    unregistered; `node_config` adds to or overrides a site's node config), yield it, stop it.

    ``check_flower=False`` skips `deploy.launch.check_components` (a ``--version`` process per
    Flower executable, 7 s of CPU together) for a federation whose module is not about it: the
    same executables are checked by tests/deploy/test_deploy.py's federation in the same suite."""
    nodes = site_nodes([str(b) for b in list(BUDGETS.values())[:sites]], "synthetic", "cpu", workdir)
    for node in nodes:
        node.config.update((node_config or {}).get(node.name, {}))
    fed = FastFederation(workdir, nodes, port=free_port_block(16))
    fed.credentials(extra=list(extra_keys))
    try:
        with mock.patch("deploy.launch.check_components") if not check_flower else contextlib.nullcontext():
            fed.start(timeout=600)
        yield fed
    finally:
        fed.stop_all()  # every process by its PID, then any SuperExec/App process left of them
        time.sleep(2)
        left = fed.strays()
        for pid in left:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        assert not left, f"processes left running: {left}"


def run_config(tmp: Path, name: str, **extra: object) -> str:
    settings = {"results-dir": f"'{tmp}'", "run-name": f"'{name}'", **extra}
    return SETTINGS + " " + " ".join(f"{k}={v}" for k, v in settings.items())

