"""Test stand-ins that run ``run_simulation.main`` on `flower_compat.inprocess` (no Ray).

`Simulator` stands in for ``run_simulation.simulate`` so that ``run_simulation.main`` (config
resolution, run directories, sweeps, resume) runs the real ServerApp and ClientApp in-process and
keeps every run's grid, so a test can inspect the messages sent; `call_in_process` stands in for
the sweep's subprocess of a run. ``--engine in-process`` runs the same grid without keeping it; the
Ray path itself is tested by tests/project/test_simulation.py.
"""

from __future__ import annotations

from flower_compat.inprocess import InProcessGrid


class Simulator:
    """Stands in for ``run_simulation.simulate``: same arguments, the real ServerApp and ClientApp
    on one in-process grid per run whatever the engine (kept in ``grids`` for inspection, also
    when the run raises)."""

    def __init__(self) -> None:
        self.grids: list[InProcessGrid] = []

    def __call__(self, config, num_clients: int, client_cpus: float, client_gpus: float,
                 cpus: int | None = None, engine: str = "ray") -> None:
        from client_app.app import app as client_app
        from server_app.app import app as server_app

        grid = InProcessGrid.federation(client_app, config.to_dict(), num_clients)
        self.grids.append(grid)
        grid.serve(server_app)


def call_in_process(command: list[str], stdout, stderr=None, cwd=None) -> int:
    """Stands in for the sweep's ``subprocess.call(["python", "run_simulation.py", ...])``: the
    same ``run_simulation.main`` in this process, its output to the run's log file."""
    import contextlib
    import sys

    import experiments.sweep
    import run_simulation

    assert command[:2] == [sys.executable, str(experiments.sweep.PROJECT_ROOT / "run_simulation.py")]
    with contextlib.redirect_stdout(stdout), contextlib.redirect_stderr(stdout):
        return run_simulation.main(command[2:])
