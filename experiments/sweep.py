"""The comparison sweep: every strategy × seed (× F3OCUS optimiser) through the same simulation.

    python run_simulation.py --config conf/task1-hetero.toml --strategies all,lntk,f3ocus --seeds 0,1,2

Layout of ``<results-dir>/<experiment>/``: ``experiment.json`` (the sweep's settings and command),
``configs/<run>.toml`` (each run's overrides), ``logs/<run>.log`` (its output), ``runs/<run>/``
(the run's own files, `server_app.results`) and ``ledger.jsonl``, a line per finished attempt of a
run: its status, seconds, command and the commit it ran at (``+dirty`` with uncommitted changes), so
every table names the code each of its rows came from. A run is ``<strategy>-s<seed>``, or
``f3ocus-<optimizer>-s<seed>`` for F3OCUS, so the optimiser comparison (paper Tables 4 and 6) reuses
the main table's F3OCUS runs. Each run is its own ``python run_simulation.py`` process, so Ray and
all memory are released between runs.

Resuming: a run whose ``rounds.jsonl`` holds every round (the last one evaluated) and whose final
adapters exist is skipped;
a run interrupted after a checkpoint of an earlier round continues from it (``resume-from``); any
other leftover (e.g. a run whose clients all failed) is started afresh. The tables and figures are
then written by `experiments.report`.
"""

from __future__ import annotations

import json
import shlex
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from methods import label
from settings import PROJECT_ROOT, ConfigError, RunConfig

RUNS, CONFIGS, LOGS = "runs", "configs", "logs"
EXPERIMENT_FILE = "experiment.json"
LEDGER_FILE = "ledger.jsonl"


def commit() -> str:
    """The checkout's commit, with ``+dirty`` where tracked files differ from it; "" outside git."""
    def git(*args: str) -> str:
        done = subprocess.run(["git", *args], cwd=PROJECT_ROOT, capture_output=True, text=True)
        return done.stdout.strip() if done.returncode == 0 else ""

    head = git("rev-parse", "HEAD")
    return head + ("+dirty" if head and git("status", "--porcelain", "--untracked-files=no") else "")


@dataclass(frozen=True)
class RunSpec:
    """One run of the sweep."""

    strategy: str
    seed: int
    optimizer: str

    @property
    def name(self) -> str:
        return f"{label(self.strategy, self.optimizer)}-s{self.seed}"


def parse_list(option: str, text: str, kind: type = str) -> list:
    """``"a,b"`` -> ``["a", "b"]`` (or ints); ConfigError for an empty list, a bad item or a repeat."""
    items = [item.strip() for item in text.split(",")] if text.strip() else []
    if not items or not all(items):
        raise ConfigError(f"{option} {text!r} is empty or has an empty item; give a comma-separated list")
    if kind is int:
        bad = [item for item in items if not item.isdigit()]
        if bad:
            raise ConfigError(f"{option} {text!r}: {bad[0]!r} is not a non-negative integer")
        items = [int(item) for item in items]
    repeated = [item for i, item in enumerate(items) if item in items[:i]]
    if repeated:
        raise ConfigError(f"{option} {text!r} lists {repeated[0]!r} twice")
    return items


def plan(strategies: Sequence[str], seeds: Sequence[int], optimizers: Sequence[str],
         default_optimizer: str) -> list[RunSpec]:
    """Seed-major run list (every strategy of seed 0 first, so an interrupted sweep still compares
    all strategies); then F3OCUS once per further optimiser."""
    specs = [RunSpec(s, seed, default_optimizer) for seed in seeds for s in strategies]
    specs += [RunSpec("f3ocus", seed, opt) for seed in seeds for opt in optimizers]
    return list(dict.fromkeys(specs))


def run_values(base: dict[str, object], spec: RunSpec, experiment_dir: Path) -> dict[str, object]:
    """The fused run config of one run (validated by the caller)."""
    return {**base, "strategy": spec.strategy, "seed": spec.seed, "optimizer": spec.optimizer,
            "run-name": spec.name, "results-dir": str(experiment_dir / RUNS), "resume-from": ""}


def validate(base: dict[str, object], specs: Sequence[RunSpec], experiment_dir: Path) -> None:
    """Every run's config is checked before the first run starts (ConfigError names the key)."""
    for spec in specs:
        RunConfig.from_mapping(run_values(base, spec, experiment_dir))


def incomplete(run_dir: Path, num_rounds: int) -> str | None:
    """Why the run in `run_dir` is not a finished result, or None when it is: every trained round
    logged (round 0, the initial evaluation, is not one), the last one evaluated by at least one
    client (a run whose every client failed is run again), final adapters written; a run that its
    privacy budget stopped early (``stopped.json``, `server_app.results`) is finished with the
    rounds it ran."""
    rounds = run_dir / "rounds.jsonl"
    logged = []
    for line in rounds.read_text().splitlines() if rounds.exists() else []:
        try:
            row = json.loads(line)
        except json.JSONDecodeError:  # cut short by a kill during its append
            break
        if row.get("round", 1) > 0:
            logged.append(row)
    if len(logged) < num_rounds and not (run_dir / "stopped.json").exists():
        return f"only {len(logged)} of {num_rounds} rounds completed"
    if not logged[-1].get("evaluate"):
        return "no client evaluated the last round; see the log above"
    if not (run_dir / "adapters.safetensors").exists():
        return "no final adapters were written"
    return None


def is_complete(run_dir: Path, num_rounds: int) -> bool:
    return incomplete(run_dir, num_rounds) is None


def _toml(values: dict[str, object]) -> str:
    """A flat TOML table of str/int/float/bool values (JSON scalars are valid TOML scalars)."""
    return "".join(f"{key} = {json.dumps(value)}\n" for key, value in values.items())


@dataclass(frozen=True)
class Outcome:
    spec: RunSpec
    status: str  # "done" | "skipped" | "failed"
    seconds: float


def run_sweep(base: dict[str, object], specs: Sequence[RunSpec], experiment_dir: Path, num_clients: int,
              client_cpus: float, client_gpus: float, echo: Callable[[str], None] = print,
              jobs: int = 1, cpus: int | None = None, engine: str = "ray") -> list[Outcome]:
    """Run every spec not yet complete, one subprocess each, `jobs` at a time (each on `cpus` CPUs,
    ``run_simulation.py --cpus``, and on `engine`, ``--engine``); a failed run does not stop the
    sweep. Outcomes in spec order."""
    for sub in (RUNS, CONFIGS, LOGS):
        (experiment_dir / sub).mkdir(parents=True, exist_ok=True)
    code_version = commit()
    lock = threading.Lock()
    resources = ["--num-clients", str(num_clients), "--client-cpus", str(client_cpus),
                 "--client-gpus", str(client_gpus), *([] if cpus is None else ["--cpus", str(cpus)]),
                 "--engine", engine]

    def one(numbered: tuple[int, RunSpec]) -> Outcome:
        i, spec = numbered
        values = run_values(base, spec, experiment_dir)
        run_dir = experiment_dir / RUNS / spec.name
        tag = f"[{i}/{len(specs)}] {spec.name}"
        if is_complete(run_dir, int(values["num-server-rounds"])):
            echo(f"{tag}: complete, skipped")
            return Outcome(spec, "skipped", 0.0)
        state = run_dir / "checkpoint" / "state.json"
        if state.exists() and json.loads(state.read_text())["round"] < int(values["num-server-rounds"]):
            values["resume-from"] = str(run_dir)
        elif run_dir.exists():
            shutil.rmtree(run_dir)
        config_file = experiment_dir / CONFIGS / f"{spec.name}.toml"
        config_file.write_text(_toml(values))
        command = [sys.executable, str(PROJECT_ROOT / "run_simulation.py"), "--config", str(config_file),
                   *resources]
        start = time.perf_counter()
        with open(experiment_dir / LOGS / f"{spec.name}.log", "a", encoding="utf-8") as log:
            code = subprocess.call(command, stdout=log, stderr=subprocess.STDOUT, cwd=PROJECT_ROOT)
        seconds = time.perf_counter() - start
        ok = code == 0 and is_complete(run_dir, int(values["num-server-rounds"]))
        with lock, open(experiment_dir / LEDGER_FILE, "a", encoding="utf-8") as ledger:
            ledger.write(json.dumps({"run": spec.name, "status": "done" if ok else "failed",
                                     "seconds": round(seconds, 1), "commit": code_version,
                                     "resumed": bool(values["resume-from"]),
                                     "command": shlex.join(command)}) + "\n")
        resumed = " (resumed)" if values["resume-from"] else ""
        echo(f"{tag}: {'done' if ok else f'FAILED (exit {code}), see logs/{spec.name}.log'}"
             f"{resumed} in {seconds:.0f} s")
        return Outcome(spec, "done" if ok else "failed", seconds)

    with ThreadPoolExecutor(max_workers=jobs) as pool:  # each thread waits on its run's process
        return list(pool.map(one, enumerate(specs, 1)))


def write_experiment(experiment_dir: Path, info: dict[str, object]) -> None:
    """Record the sweep; a later sweep into the same directory adds its strategies, seeds,
    optimisers and command to the earlier ones (e.g. the optimiser runs after the main table)."""
    experiment_dir.mkdir(parents=True, exist_ok=True)
    path = experiment_dir / EXPERIMENT_FILE
    old = json.loads(path.read_text()) if path.exists() else {}
    merged = dict(info)
    for key in ("strategies", "seeds", "optimizers", "commands"):
        merged[key] = list(dict.fromkeys([*old.get(key, []), *info.get(key, [])]))
    path.write_text(json.dumps(merged, indent=2) + "\n")
