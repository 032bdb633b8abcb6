"""The lab: everything that runs, reads or times the Flower apps, none of it part of them.

The apps (`server_app`, `client_app`) and their floors (`strategies`, `tasks`, `metaheuristics`,
`settings`, `flower_compat`) never import this package; `run_simulation.py` and the tests do. It
may import every floor, as a Flower baseline keeps its experiments beside its app.

- sweeps and reports, from run files only: `sweep` (strategy x seed x optimiser runs of
  ``run_simulation.py``), `report` (tables and figures of one sweep), `paired` (per-seed paired
  intervals between sweeps), `budget_sweep` (accuracy against the layer budget), `sweep_time` (how
  long sweeps took), `headlines` (README's numbers recomputed from docs/results);
- `ray_cluster`: attach a simulation to a running Ray cluster (``run_simulation.py --ray-address``);
- benchmarks, one module each, named ``bench_<what it measures>``, run as ``python -m
  experiments.bench_<what>``: `bench_client` (a client's local round: LNTK overhead, seconds per
  step, memory per budget), `bench_optimizers` (the layer-assignment optimisers: time and
  hypervolume), `bench_pia` (server PIA passes: planted alignments recovered and cost),
  `bench_deploy` (seconds per round deployed against simulated);
- `sensitivity`: a centralised screening of settings where layer choice matters.
"""
