"""Run the F3OCUS Flower app in-process with Flower's Simulation Engine (Ray backend), or without Ray.

    python run_simulation.py [--config conf/x.toml] [--run-config "key=value ..."] [--num-clients N]
        [--engine ray|in-process]
    python run_simulation.py --config conf/task1-hetero.toml --strategies all,lntk,f3ocus --seeds 0,1,2 \
        [--optimizers nsga2,mopso,sa,aco,abc] [--experiment NAME]

Settings come from pyproject.toml's [tool.flwr.app.config], then the --config file, then
--run-config; every value is validated before Ray starts, including what the clients, which share
this machine, would judge (data folder, device) and what the server settles before round 1 (the
model builds, budgets fit it, the run directory); a bad one ends the command with one line naming
the key and exit status 2. One run shows a progress bar over rounds,
prints a per-client table at the end and exits non-zero if the run failed. With --strategies,
--seeds or --optimizers it runs the comparison sweep of `experiments.sweep` into
``<results-dir>/<experiment>/`` (every run validated first, finished runs skipped) and writes its
tables and figures with `experiments.report`. With --ray-address (or $RAY_ADDRESS) the clients run
on an existing Ray cluster (`experiments.ray_cluster`) instead of a Ray started on this machine.
With --engine in-process the same ServerApp and ClientApp run in this process without Ray
(`flower_compat.inprocess`), one client at a time: for many simulated clients (e.g. 50 sites), where
Ray's cost per message dominates the round. Ray's resource options (--client-cpus, --client-gpus,
--cpus) then mean nothing and --ray-address is refused; a sweep passes the engine to every run.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import sys
import tomllib
from pathlib import Path

import methods
from experiments.sweep import incomplete
from flower_compat import check_version
from settings import (
    PROJECT_ROOT,
    ConfigError,
    RunConfig,
    check_here,
    default_config,
    describe_budgets,
    parse_budgets,
)
from settings.local import available_cores

SERVER_APP = "server_app.app:app"
CLIENT_APP = "client_app.app:app"
ENGINES = ("ray", "in-process")


def settings_help() -> str:
    """The registered methods and every key a method or a section owns, from their declarations."""
    lines = [f"strategies: {', '.join(methods.SELECTIONS)}",
             f"aggregations: {', '.join(methods.AGGREGATIONS)}"]
    for owner in RunConfig.owners():
        lines += [f"  {line}" for line in owner.describe()]
    return "\n".join(["run-config keys owned by a method or a section:", *lines])


def load_overrides(config_files: list[str], run_config: list[str]) -> dict[str, object]:
    """--config files' values in order (a later file's key wins, so a recipe file can go on top of a
    benchmark's), then --run-config values (Flower's own "k=v" syntax)."""
    from flower_compat import parse_config_args

    overrides: dict[str, object] = {}
    for config_file in config_files:
        path = Path(config_file)
        if not path.is_file():
            raise ConfigError(f"--config {config_file!r}: no such file")
        with open(path, "rb") as fh:
            try:
                overrides.update(tomllib.load(fh))
            except tomllib.TOMLDecodeError as err:
                raise ConfigError(f"--config {config_file!r} is not valid TOML: {err}") from None
    try:
        overrides.update(parse_config_args(run_config))
    except (Exception, SystemExit) as err:  # flwr reports TOML errors in several ways
        raise ConfigError(f"--run-config {' '.join(run_config)!r} is malformed: {err}") from None
    return overrides


def resolve(overrides: dict[str, object]) -> RunConfig:
    """Fuse defaults and overrides, validate, and fix a run name so the results can be found."""
    values = {**default_config(), **overrides}
    config = RunConfig.from_mapping(values)
    if not config.run_name and not config.resume_from:
        values["run-name"] = config.default_run_name()
    values["progress-bar"] = True
    return RunConfig.from_mapping(values)


DEFAULT_CLIENTS = 5


def client_count(config: RunConfig, requested: int | None) -> int:
    """--num-clients, else one client per listed budget when two or more are listed, else 5 (a
    single budget k means every client trains k layers, as in a budget sweep, not one client);
    at least min-nodes."""
    listed = len(parse_budgets(config.budgets))
    num_clients = requested if requested is not None else listed if listed > 1 else DEFAULT_CLIENTS
    if num_clients < 1:
        raise ConfigError(f"--num-clients {num_clients} must be >= 1")
    if config.min_nodes > num_clients:
        raise ConfigError(f"min-nodes = {config.min_nodes} exceeds the {num_clients} simulated clients "
                          "(--num-clients); the first round would wait for nodes forever")
    return num_clients


def preflight(config: RunConfig, num_clients: int, client_cpus: float, client_gpus: float,
              cpus: int | None = None, ray_address: str | None = None, engine: str = "ray") -> None:
    """The checks the clients (on this machine) and the server would make, before the run starts;
    Ray's resources only on Ray (in-process clients share this process and its device)."""
    from server_app.app import plan_run

    on_ray = engine == "ray"
    if on_ray:
        if client_cpus <= 0 or client_gpus < 0:
            raise ConfigError(f"--client-cpus {client_cpus} / --client-gpus {client_gpus}: CPUs must be "
                              "> 0, GPUs >= 0")
        check_cpus(cpus, client_cpus, ray_address)
    check_here(config, device=not ray_address)  # on a cluster, each node judges its own device
    if on_ray and config.device.startswith("cuda") and client_gpus == 0:
        raise ConfigError(f"device = {config.device!r} needs --client-gpus > 0: Ray hides the GPUs "
                          "from clients without a GPU share")
    plan_run(config)
    print(describe_budgets(config.budgets, num_clients), flush=True)


def check_cpus(cpus: int | None, client_cpus: float, ray_address: str | None = None) -> None:
    """--cpus (the CPUs Ray may use for this run; None: all of the machine's) must hold one client;
    with a Ray cluster the nodes declare their own CPUs, and Ray refuses a count when attaching."""
    if cpus is not None and ray_address:
        raise ConfigError(f"--cpus {cpus} cannot be used with --ray-address {ray_address!r}: each node of "
                          "the cluster declares its own CPUs (ray start --num-cpus)")
    if cpus is not None and not 0 < client_cpus <= cpus:
        raise ConfigError(f"--cpus {cpus} must be >= --client-cpus {client_cpus}, or no client can run")


def check_engine(engine: str, ray_address: str | None) -> None:
    """In-process clients never touch Ray, so a Ray cluster to attach to is a mistake, not a no-op."""
    if engine == "in-process" and ray_address:
        raise ConfigError(f"--ray-address {ray_address!r} cannot be used with --engine in-process: its "
                          "clients run in this process, without Ray")


def simulate(config: RunConfig, num_clients: int, client_cpus: float, client_gpus: float,
             cpus: int | None = None, engine: str = "ray") -> None:
    """Run the app on ``engine``: ``in-process``, the ServerApp and ClientApp on
    `flower_compat.inprocess.run_in_process`, one client at a time; ``ray`` (the default), exactly
    as ``flwr run`` does in its simulation process, but in this process;
    ``cpus`` caps the CPUs Ray hands out (so several runs can share a machine without
    oversubscribing it: `experiments.sweep` with ``--jobs``). Unless this process is already
    attached to a cluster (`experiments.ray_cluster.attach`, in which case Flower's backend uses that
    connection), Ray starts afresh on this machine (``address = "local"``): a plain ``ray.init()``
    would join any cluster someone started here with ``ray start`` (it reads Ray's current-cluster
    file), skipping the attach checks, and hang on a stale file of a cluster that was killed."""
    if engine == "in-process":
        from client_app.app import app as client_app
        from flower_compat.inprocess import run_in_process
        from server_app.app import app as server_app

        run_in_process(server_app, client_app, config.to_dict(), num_clients)
        return
    os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")  # Ray binds 127.0.0.1 only
    from flower_compat import simulate as simulate_app

    simulate_app(SERVER_APP, CLIENT_APP, PROJECT_ROOT, config.to_dict(), num_clients,
                 {"client_resources": {"num_cpus": client_cpus, "num_gpus": client_gpus},
                  "init_args": {"address": "local", "logging_level": "ERROR", "log_to_driver": True,
                                **({} if cpus is None else {"num_cpus": cpus})}})


def client_table(run_dir: Path) -> str:
    """Final per-client table from the last round of ``clients.jsonl``."""
    rows = [json.loads(line) for line in (run_dir / "clients.jsonl").read_text().splitlines()]
    last = max(r["round"] for r in rows)
    lines = [f"{'client':>6} {'budget':>6} {'layers':<24} {'score':>7} {'majority':>8} {'MB up':>7}"]
    for row in sorted((r for r in rows if r["round"] == last), key=lambda r: r["partition-id"]):
        ev = row["evaluate"] or {}
        score = ev.get("accuracy", ev.get("f1_micro", float("nan")))
        lines.append(f"{row['partition-id']:>6} {row['budget'] or '-':>6} "
                     f"{','.join(map(str, row['mask'] or [])):<24} {score:7.4f} "
                     f"{ev.get('majority-accuracy', float('nan')):8.4f} "
                     f"{row['bytes-up'] / 1e6:7.2f}")
    return "\n".join(lines)


def run_dir_of(config: RunConfig) -> Path:
    from server_app.app import run_directory

    return run_directory(config)


def run_experiment(args: argparse.Namespace, overrides: dict[str, object], argv: list[str]) -> int:
    """The strategy × seed (× optimiser) sweep, then its report."""
    from experiments import report, sweep

    base = {**default_config(), **overrides}
    first = RunConfig.from_mapping(base)
    strategies = (sweep.parse_list("--strategies", args.strategies) if args.strategies is not None
                  else [first.strategy])
    seeds = (sweep.parse_list("--seeds", args.seeds, int) if args.seeds is not None
             else [first.seed])
    optimizers = (sweep.parse_list("--optimizers", args.optimizers) if args.optimizers is not None
                  else [])
    name = args.experiment or "-".join(Path(c).stem for c in args.config) or "experiment"
    if not name or "/" in name:
        raise ConfigError(f"--experiment {name!r} must be a plain directory name")
    experiment_dir = (Path(first.results_dir) / name).expanduser().resolve()
    specs = sweep.plan(strategies, seeds, optimizers, first.optimizer)
    sweep.validate(base, specs, experiment_dir)
    num_clients = client_count(first, args.num_clients)
    if args.jobs < 1:
        raise ConfigError(f"--jobs {args.jobs} must be >= 1")
    if args.engine == "in-process":
        cpus = None
    elif args.ray_address:  # checked once here; every run then attaches too (its $RAY_ADDRESS)
        check_cpus(args.cpus, args.client_cpus, args.ray_address)
        attach_once(args.ray_address, args.client_cpus, args.client_gpus, experiment_dir)
        os.environ["RAY_ADDRESS"], cpus = args.ray_address, None
    else:
        cpus = (args.cpus if args.cpus is not None or args.jobs == 1
                else max(1, available_cores() // args.jobs))
        check_cpus(cpus, args.client_cpus)
    check_here(first, device=not args.ray_address)
    sweep.write_experiment(experiment_dir, {
        "commands": [shlex.join(["python", "run_simulation.py", *argv])],
        "config-files": args.config, "strategies": strategies, "seeds": seeds,
        "optimizers": optimizers, "optimizer": first.optimizer, "num-clients": num_clients,
        "engine": args.engine, "client-cpus": args.client_cpus, "jobs": args.jobs, "cpus": cpus,
        "settings": {k: v for k, v in base.items() if k not in ("strategy", "seed", "run-name")},
    })
    print(f"Experiment {experiment_dir}: {len(specs)} runs; {describe_budgets(first.budgets, num_clients)}",
          flush=True)
    outcomes = sweep.run_sweep(base, specs, experiment_dir, num_clients, args.client_cpus,
                                     args.client_gpus, echo=lambda line: print(line, flush=True),
                                     jobs=args.jobs, cpus=cpus, engine=args.engine)
    written = report.write_report(experiment_dir)
    print(f"\nReport: {', '.join(str(p.relative_to(experiment_dir)) for p in written)}")
    print((experiment_dir / "table.md").read_text())
    failed = [o.spec.name for o in outcomes if o.status == "failed"]
    if failed:
        print(f"error: {len(failed)} runs failed: {', '.join(failed)}", file=sys.stderr)
        return 1
    return 0


def attach_once(address: str, client_cpus: float, client_gpus: float, shared: Path) -> None:
    """The attach checks of `experiments.ray_cluster` (a ConfigError names what fails), then
    disconnect: a sweep's runs are processes of their own that attach again."""
    import ray

    from experiments.ray_cluster import attach

    print(attach(address, client_cpus, client_gpus, shared).describe(), flush=True)
    ray.shutdown()


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], epilog=settings_help(),
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config", action="append", default=[],
                        help="TOML file of run-config keys (e.g. conf/task1-hetero.toml); several: in "
                             "order, a later file's keys win (e.g. a benchmark, then conf/dp-sample.toml)")
    parser.add_argument("--run-config", action="append", default=[],
                        help='overrides, e.g. "strategy=\'lntk\' num-server-rounds=3"')
    parser.add_argument("--num-clients", type=int, default=None,
                        help="virtual SuperNodes (default: number of budgets if two or more are "
                             "listed, else 5)")
    parser.add_argument("--client-cpus", type=float, default=2.0, help="CPUs per ClientApp")
    parser.add_argument("--client-gpus", type=float, default=0.0,
                        help="GPU share per ClientApp (0.25 lets four clients share one GPU)")
    parser.add_argument("--cpus", type=int, default=None,
                        help="CPUs Ray may use for a run (default: all; with --jobs J, cores // J)")
    parser.add_argument("--engine", choices=ENGINES, default="ray",
                        help="ray: Flower's Simulation Engine; in-process: the same apps in this process "
                             "without Ray, one client at a time (for many clients, where Ray's cost per "
                             "message dominates; --client-cpus and --cpus unused, --ray-address refused)")
    parser.add_argument("--ray-address", default=None,
                        help="attach to a running Ray cluster ('auto' or host:port of its head; default: "
                             "$RAY_ADDRESS, with --engine ray) instead of starting Ray on this machine")
    parser.add_argument("--jobs", type=int, default=1,
                        help="sweep: runs at once, each on --cpus CPUs (2 on 2 cores: one client "
                             "process per run, no core idle while a round's last client trains)")
    parser.add_argument("--strategies", help="sweep: comma-separated strategies, e.g. all,lntk,f3ocus")
    parser.add_argument("--seeds", help="sweep: comma-separated seeds, e.g. 0,1,2")
    parser.add_argument("--optimizers", help="sweep: also run F3OCUS with each optimiser, e.g. nsga2,sa")
    parser.add_argument("--experiment", help="sweep: results/<experiment> (default: the config file's name)")
    args = parser.parse_args(argv)
    try:
        check_version()
        check_engine(args.engine, args.ray_address)
        if args.engine == "ray" and args.ray_address is None:
            args.ray_address = os.environ.get("RAY_ADDRESS") or None
        overrides = load_overrides(args.config, args.run_config)
        if any(v is not None for v in (args.strategies, args.seeds, args.optimizers)):
            return run_experiment(args, overrides, argv)
        config = resolve(overrides)
        num_clients = client_count(config, args.num_clients)
        preflight(config, num_clients, args.client_cpus, args.client_gpus, args.cpus, args.ray_address,
                  args.engine)
        run_dir = run_dir_of(config)
        if args.ray_address:
            from experiments.ray_cluster import attach

            print(attach(args.ray_address, args.client_cpus, args.client_gpus, run_dir.parent).describe(),
                  flush=True)
    except (ConfigError, ValueError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    try:
        simulate(config, num_clients, args.client_cpus, args.client_gpus, args.cpus, args.engine)
    except (Exception, SystemExit) as err:  # noqa: BLE001 - report any failure as an exit code
        print(f"error: the run failed: {err}", file=sys.stderr)
        return 1
    reason = incomplete(run_dir, config.num_server_rounds)
    if reason is not None:
        print(f"error: {reason} ({run_dir})", file=sys.stderr)
        return 1
    print(f"\nResults: {run_dir}\n{client_table(run_dir)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
