"""Seconds per round of one job on the Deployment Engine and on the Simulation Engine, side by side.

    python -m experiments.bench_deploy [--budgets 2,4,6] [--dataset easy-vqa] [--rounds 2]
                                       [--run-config "..."] [--worker-idle S] [--repeat N] [--json]
                                       [--engines deployed,simulated]

Runs the same job twice on this machine, one after the other in the same invocation (so both see
the same machine load; the ratio is the figure to compare between invocations):
1. ``deployed``: `deploy.launch.Federation` on 127.0.0.1 (TLS, SuperNode authentication), one
   SuperNode per budget, each with its share of the cores (``num-threads``) and its ``state-dir``;
2. ``simulated``: ``python run_simulation.py --num-clients N`` (Ray, its default client resources).
Both use the app's run config plus ``budgets``, ``dataset`` and ``num-server-rounds``; seconds per
round are the mean of ``rounds.jsonl``'s ``seconds`` (the ServerApp's wall time of each round), with
round 0's (the initial evaluation and round 1's scores) counted in round 1's, where a
three-exchange round spends it, so runs of either order compare. Their difference,
``fixed_s_per_round``, is what deployment itself costs a round (Flower's polling, process starts,
TLS), the figure that fewer exchanges a round cut.
Per-message overhead is read from the sites' ``timings.jsonl`` (`client_app.worker`): seconds from
the ClientApp process's start to its reply, less the handler's own work; ``overhead_s`` is the
median over all messages of the run. ``cat /proc/loadavg`` is printed before and after each engine.
With ``--json`` the last line is one JSON object with ``deployed_s_per_round``,
``simulated_s_per_round``, ``fixed_s_per_round``, ``ratio`` (deployed / simulated), ``overhead_s``,
``exchanges_per_round`` and the details; ``--repeat N`` runs N such pairs in turn (each in its own
work directory) and adds the median and max of each of those figures (``<figure>_median``,
``<figure>_max``; ``runs`` holds each pair's object). ``--engines deployed`` runs the Deployment
Engine alone, for a machine too loaded for the simulation to finish (its one client at a time with
2 torch threads stalls on busy cores); the simulated figures, the fixed cost and the ratio are then
null.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

from deploy.launch import (
    CLIENTAPPS,
    PROJECT_ROOT,
    Federation,
    LaunchError,
    free_port_block,
    site_nodes,
    with_node_budgets,
)


def loadavg() -> str:
    """``/proc/loadavg`` (1, 5, 15 minute load, runnable/total tasks), or "" where there is none."""
    try:
        return Path("/proc/loadavg").read_text().strip()
    except OSError:
        return ""


def seconds_per_round(run_dir: Path) -> list[float]:
    """The ServerApp's wall seconds of every trained round of a finished run, round 0's added to
    round 1's (module doc)."""
    rows = [json.loads(line) for line in (run_dir / "rounds.jsonl").read_text().splitlines()]
    initial = sum(float(row["seconds"]) for row in rows if row["round"] == 0)
    seconds = [float(row["seconds"]) for row in rows if row["round"] > 0]
    return [seconds[0] + initial, *seconds[1:]]


def exchanges_per_round(run_dir: Path) -> float | None:
    """Message exchanges of the whole run per trained round (None for a run that did not record
    them, such as a three-exchange run: three a round)."""
    rows = [json.loads(line) for line in (run_dir / "rounds.jsonl").read_text().splitlines()]
    if not all("exchanges" in row for row in rows):
        return None
    return sum(row["exchanges"] for row in rows) / sum(row["round"] > 0 for row in rows)


def message_timings(state_dirs: list[Path], run_id: int | None) -> list[dict]:
    """Every message of run `run_id` that the sites recorded in their ``timings.jsonl``."""
    rows = []
    for folder in state_dirs:
        path = folder / "timings.jsonl"
        if path.is_file():
            rows += [row for line in path.read_text().splitlines()
                     if (row := json.loads(line))["run-id"] == run_id]
    return rows


def run_deployed(args: argparse.Namespace, workdir: Path, run_config: str) -> dict:
    budgets = [b.strip() for b in args.budgets.split(",")]
    nodes = site_nodes(budgets, args.dataset, args.device, workdir / "federation")
    for node in nodes:
        if args.worker_idle is not None:
            node.config["worker-idle"] = args.worker_idle
    with Federation(workdir / "federation", nodes, port=free_port_block(len(nodes) + 2),
                    app_dir=args.app_dir, forked_clientapps=args.clientapps == "forked") as fed:
        fed.start()
        start = time.monotonic()
        result = fed.run(with_node_budgets(run_config, nodes), timeout=args.timeout)
        wall = time.monotonic() - start
    if not result.ok:
        raise LaunchError(f"deployed run ended {result.status}; see {fed.logs}")
    messages = message_timings([Path(str(n.config["state-dir"])) for n in nodes], result.run_id)
    return {"wall_s": wall, "messages": messages, "nodes": [n.config for n in nodes]}


def run_simulated(args: argparse.Namespace, workdir: Path, run_config: str) -> dict:
    command = [sys.executable, "run_simulation.py", "--num-clients", str(len(args.budgets.split(","))),
               "--run-config", run_config]
    if args.client_cpus is not None:
        command += ["--client-cpus", str(args.client_cpus)]
    env = {**os.environ, "PYTHONPATH": str(args.app_dir)}  # that checkout's modules, also in Ray
    start = time.monotonic()
    with open(workdir / "simulation.log", "w") as log:
        done = subprocess.run(command, cwd=args.app_dir, env=env, stdout=log, stderr=subprocess.STDOUT,
                              timeout=args.timeout)
    if done.returncode != 0:
        raise LaunchError(f"simulated run exited {done.returncode}; see {workdir / 'simulation.log'}")
    return {"wall_s": time.monotonic() - start, "command": command[1:]}


def summary(deployed: dict, simulated: dict | None) -> dict:
    """The figures: seconds per round of each engine, their difference and ratio (None without a
    simulated run), per-message overhead medians."""
    dep = statistics.fmean(deployed["rounds"])
    sim = statistics.fmean(simulated["rounds"]) if simulated else None
    messages = deployed["messages"]

    def median(key: str, kind: str | None = None) -> float | None:
        values = [m[key] for m in messages if key in m and (kind is None or m["message"] == kind)]
        return statistics.median(values) if values else None

    kinds = sorted({m["message"] for m in messages})
    return {
        "deployed_s_per_round": dep, "simulated_s_per_round": sim,
        "fixed_s_per_round": None if sim is None else dep - sim, "ratio": None if sim is None else dep / sim,
        "overhead_s": median("overhead"), "messages": len(messages),
        "exchanges_per_round": deployed["exchanges"],
        "overhead_by_message": {k: median("overhead", k) for k in kinds},
        "medians": {k: median(k) for k in ("delivery", "start-to-handler", "cpu-to-handler", "setup",
                                            "work")},
        "deployed_rounds_s": deployed["rounds"], "simulated_rounds_s": simulated and simulated["rounds"],
        "where": sorted({m["where"] for m in messages}),
        "processes": {kind: sum(m.get("process", "started") == kind for m in messages)
                      for kind in ("forked", "started")},
        "loadavg": {"deployed": deployed["loadavg"], "simulated": simulated and simulated["loadavg"]},
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--budgets", default="2,4,6", help="one layer budget per site (default 2,4,6)")
    parser.add_argument("--dataset", default="easy-vqa", help="data set the sites split (default easy-vqa)")
    parser.add_argument("--rounds", type=int, default=2, help="federated rounds (default 2)")
    parser.add_argument("--run-config", default="", help='further run settings, "key=value ..."')
    parser.add_argument("--device", default="cpu", help="device of every site (default cpu)")
    parser.add_argument("--worker-idle", type=float, default=None,
                        help="node setting worker-idle (0: a fresh process per message, as Flower does)")
    parser.add_argument("--client-cpus", type=float, default=None,
                        help="run_simulation.py --client-cpus (default: its own default)")
    parser.add_argument("--workdir", type=Path, default=PROJECT_ROOT / "results" / "bench",
                        help="federation, logs and results (default results/bench)")
    parser.add_argument("--timeout", type=float, default=3600, help="seconds per engine before giving up")
    parser.add_argument("--app-dir", type=Path, default=PROJECT_ROOT,
                        help="checkout whose app both engines run (default: this one; an older "
                             "checkout gives the 'before' figures, without per-message timings)")
    parser.add_argument("--clientapps", choices=CLIENTAPPS, default="forked",
                        help="deploy.launch --clientapps: forked (default) from a fork server, or "
                             "started by Flower, one fresh process per message")
    parser.add_argument("--repeat", type=int, default=1,
                        help="pairs of runs, one after the other; prints each and the median and max")
    parser.add_argument("--json", action="store_true", help="end with one JSON line of the figures")
    parser.add_argument("--engines", default="deployed,simulated",
                        help="engines to run, comma-separated: deployed,simulated (default) or deployed")
    args = parser.parse_args(argv)
    if args.rounds < 1:
        parser.error(f"--rounds {args.rounds}: must be >= 1")
    if args.repeat < 1:
        parser.error(f"--repeat {args.repeat}: must be >= 1")
    if args.engines not in ("deployed,simulated", "deployed"):
        parser.error(f"--engines {args.engines!r}: must be 'deployed,simulated' or 'deployed'")
    args.app_dir = args.app_dir.expanduser().resolve()
    os.environ.setdefault("FLWR_DISABLE_RUNTIME_DEPENDENCY_INSTALLATION", "1")
    runs = []
    try:
        for repeat in range(args.repeat):
            runs.append(bench_once(args, repeat))
    except (LaunchError, subprocess.TimeoutExpired, OSError) as err:
        print(f"bench failed: {err}", file=sys.stderr)
        return 1
    result = runs[0] if len(runs) == 1 else {"runs": runs, **spread(runs)}
    if len(runs) > 1:
        figures = (f"{f} {result[f'{f}_median']:.2f} ({result[f'{f}_max']:.2f})" for f in FIGURES)
        print(f"{len(runs)} runs, median (max): {', '.join(figures)}", flush=True)
    if args.json:
        print(json.dumps(result))
    return 0


def bench_once(args: argparse.Namespace, repeat: int) -> dict:
    """One invocation's pair of runs (deployed, then simulated) in a fresh work directory."""
    workdir = (args.workdir / f"{time.strftime('%Y%m%d-%H%M%S')}-{repeat}").expanduser().resolve()
    workdir.mkdir(parents=True, exist_ok=True)
    base = (f"num-server-rounds={args.rounds} budgets='{args.budgets}' dataset='{args.dataset}' "
            f"results-dir='{workdir / 'results'}' {args.run_config}").strip()
    engines = {}
    for name, run in (("deployed", run_deployed), ("simulated", run_simulated)):
        if name not in args.engines.split(","):
            continue
        before = loadavg()
        print(f"[{repeat + 1}/{args.repeat}] {name}: starting (loadavg {before})", flush=True)
        engines[name] = run(args, workdir, f"{base} run-name='{name}'")
        engines[name]["rounds"] = seconds_per_round(workdir / "results" / name)
        engines[name]["exchanges"] = exchanges_per_round(workdir / "results" / name)
        engines[name]["loadavg"] = [before, loadavg()]
        print(f"[{repeat + 1}/{args.repeat}] {name}: {statistics.fmean(engines[name]['rounds']):.1f} s per "
              f"round {[round(s, 1) for s in engines[name]['rounds']]} (loadavg {loadavg()})", flush=True)
    figures = summary(engines["deployed"], engines.get("simulated"))
    shown = {k: "n/a" if figures[k] is None else f"{figures[k]:.2f}" for k in FIGURES}
    print(f"[{repeat + 1}/{args.repeat}] deployed {shown['deployed_s_per_round']} s/round, simulated "
          f"{shown['simulated_s_per_round']} s/round, fixed cost {shown['fixed_s_per_round']} s/round, "
          f"ratio {shown['ratio']}; per-message overhead median {shown['overhead_s']} s over "
          f"{figures['messages']} messages, {figures['exchanges_per_round']} exchanges per round "
          f"(loadavg {loadavg()})", flush=True)
    return figures


FIGURES = ("deployed_s_per_round", "simulated_s_per_round", "fixed_s_per_round", "ratio", "overhead_s")


def spread(runs: list[dict]) -> dict:
    """Median and max over repeated runs of each figure (NaN where no run has it)."""
    out = {}
    for figure in FIGURES:
        values = [r[figure] for r in runs if r[figure] is not None] or [float("nan")]
        out[f"{figure}_median"], out[f"{figure}_max"] = statistics.median(values), max(values)
    return out


if __name__ == "__main__":
    sys.exit(main())
