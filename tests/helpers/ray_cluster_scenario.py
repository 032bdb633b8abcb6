"""A two-node Ray cluster on loopback, a simulation attached to it, and both nodes stopped by PID.

Run by tests/experiments/test_ray_cluster.py as
``unshare --net python tests/helpers/ray_cluster_scenario.py <out>``: in
a network namespace of its own whose only interface is ``lo``. Ray, in multi-node mode, resolves
127.0.0.1 to the host's outward address (``resolve_ip_for_localhost``), and in single-node mode
refuses a second node; inside the namespace that address is 127.0.0.1, so every Ray process binds
and connects to loopback only. Steps, each recorded in ``<out>/scenario.json``:

1. ``ray start --head`` and ``ray start --address`` (one CPU each, no dashboard), each in a session
   of its own (``setsid``), so every process they start is found by session id;
2. the 2-round job attached with ``run_simulation.py --ray-address`` (one client actor per node),
   and beside it step 5's run, each in a session of its own, with the sessions of the processes that
   host a client actor seen while they run: a node's raylet starts its actors' workers, so the
   session tells the node (or the run whose own Ray hosts the actor);
3. Flower's own Ray backend, as ``flwr run``'s simulation process builds it, with ``RAY_ADDRESS``;
4. the refusals that ask the cluster: a client larger than any node, and the same client in a sweep
   (``--seeds``), which checks once before its first run (``--cpus`` while attaching is refused
   before any cluster is asked: tests/experiments/test_ray_cluster.py checks it in its own process);
5. a run with no address (and no ``RAY_ADDRESS``) while the cluster runs: it starts a Ray of its own
   rather than joining the cluster that ``ray start`` left in Ray's current-cluster file (its client
   actor is seen in its own session: an actor on the cluster would be in a node's);
6. every process of the nodes' sessions (and of the runs', if their Ray left any) stopped by its PID (never
   ``ray stop``), and what is left.

The scenario leads a session of its own (tests/experiments/test_ray_cluster.py starts it so), apart
from the test's; each run of steps 2 and 5 leads one too, which a Ray that the run starts inherits,
so the session a client actor's process is in tells which Ray hosts it.

The actors are found by their process title (``ray::ClientAppActor...``) rather than through Ray's
state API: that API needs the full dashboard, nine module processes whose start, on a loaded machine
(load 10-20 on 2 cores), failed Ray's fixed 30 s timeout ("Module MetricsHead failed to start") in 2
of 3 tries, failing the head's start or the state API. Without it the scenario's CPU did not change
measurably (131 s before, 130 s after, `python tests/helpers/cpu_time.py python -m pytest -q -n 0
tests/experiments/test_ray_cluster.py`).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
JOB = ("model='tiny-vilt' dataset='synthetic' partitioner='iid' budgets='2,1' num-server-rounds=2 "
       "local-steps=2 batch-size=8 max-test-samples=16 optimizer-pop-size=10 optimizer-generations=4")
PORT = 6380  # a namespace of our own: nothing else listens there
ACTOR = b"ray::ClientAppActor"  # the process title of a Ray worker that hosts a client actor


def session_of(stat: str) -> int:
    """The session id in a ``/proc/<pid>/stat`` line (field 6)."""
    return int(stat.rsplit(")", 1)[1].split()[3])


def actor_sessions(among: frozenset[int]) -> set[int]:
    """Those of the sessions ``among`` that hold a live process hosting a Flower client actor (the
    namespace has a network of its own, not processes: other users' actors are seen too)."""
    found = set()
    for proc in Path("/proc").glob("[0-9]*"):
        with contextlib.suppress(OSError, ValueError, IndexError):
            if (proc / "cmdline").read_bytes().startswith(ACTOR):
                found.add(session_of((proc / "stat").read_text()))
    return found & among


def run(command: list[str], env: dict[str, str], timeout: float = 600) -> dict:
    """Run ``command``: its exit code and the ends of its output."""
    done = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout)
    return {"code": done.returncode, "stdout": done.stdout[-4000:], "stderr": done.stderr[-4000:]}


def run_side_by_side(commands: dict[str, list[str]], env: dict[str, str], watch: frozenset[int],
                     timeout: float = 600) -> tuple[dict[str, dict], list[int]]:
    """Run ``commands`` at once, each leading a session of its own (its pid); per command its exit
    code, output and session, and the sessions among ``watch`` and theirs seen hosting a client
    actor while they ran (every 0.5 s: an actor lives for the whole run). Side by side, since each
    mostly waits for its Ray to start and its actors to import torch."""
    procs = {name: subprocess.Popen(command, cwd=ROOT, env=env, stdout=subprocess.PIPE,
                                    stderr=subprocess.PIPE, text=True, start_new_session=True)
             for name, command in commands.items()}
    watched = watch | {proc.pid for proc in procs.values()}
    outputs = {name: {} for name in procs}

    def drain(name: str) -> None:  # a thread per run, so a full pipe never blocks it; ends with it
        outputs[name]["out"], outputs[name]["err"] = procs[name].communicate()

    readers = [threading.Thread(target=drain, args=(name,), daemon=True) for name in procs]
    for reader in readers:
        reader.start()
    deadline = time.monotonic() + timeout
    sessions: set[int] = set()
    late: set[str] = set()
    while any(reader.is_alive() for reader in readers):
        sessions |= actor_sessions(watched)
        if time.monotonic() > deadline:  # each leads its session: stop its Ray and actors too (even
            for name, reader in zip(procs, readers, strict=True):  # a child holding an ended run's pipe)
                if reader.is_alive():
                    late.add(name)
                    for pid in sessions_processes({procs[name].pid}):
                        with contextlib.suppress(ProcessLookupError):
                            os.kill(pid, signal.SIGKILL)
        time.sleep(0.5)
    results = {name: {"code": f"killed after {timeout} s" if name in late else proc.returncode,
                      "session": proc.pid, "stdout": outputs[name]["out"][-4000:],
                      "stderr": outputs[name]["err"][-4000:]} for name, proc in procs.items()}
    return results, sorted(sessions)


def sessions_processes(sessions: set[int]) -> list[int]:
    """Live processes whose session id is one of ``sessions`` (field 6 of ``/proc/<pid>/stat``)."""
    found = []
    for proc in Path("/proc").glob("[0-9]*"):
        with contextlib.suppress(OSError, ValueError, IndexError):
            fields = (proc / "stat").read_text().rsplit(")", 1)[1].split()
            if int(fields[3]) in sessions and fields[0] != "Z":
                found.append(int(proc.name))
    return found


def main(out: Path) -> None:
    subprocess.run(["ip", "link", "set", "lo", "up"], check=True)
    ray = str(Path(sys.executable).with_name("ray"))
    env = {**os.environ, "RAY_USAGE_STATS_ENABLED": "0", "PYTHONUNBUFFERED": "1"}
    for key in ("RAY_ADDRESS", "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"):
        env.pop(key, None)
    # Ray's temp folder (sessions, and the current-cluster file `ray.init()` reads) in a short folder
    # of our own: Ray's socket paths are limited, and the machine's /tmp/ray stays untouched
    env["RAY_TMPDIR"] = tempfile.mkdtemp(prefix="ray", dir="/tmp")
    address = f"127.0.0.1:{PORT}"
    record: dict = {"address": address}
    starters: list[subprocess.Popen] = []
    run_sessions: set[int] = set()  # what a run's own Ray left, if anything, goes with the nodes

    def start(*args: str) -> dict:
        proc = subprocess.Popen([ray, "start", *args, "--node-ip-address", "127.0.0.1", "--num-cpus", "1",
                                 "--num-gpus", "0", "--disable-usage-stats"], env=env, text=True,
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True)
        starters.append(proc)
        output = proc.communicate(timeout=180)[0]
        return {"code": proc.returncode, "output": output[-3000:]}

    try:
        record["head"] = start("--head", "--port", str(PORT), "--include-dashboard", "false")
        record["worker"] = start("--address", address)
        record["node_sessions"] = sorted(p.pid for p in starters)  # one node per `ray start`
        simulate = [sys.executable, "run_simulation.py", "--num-clients", "2"]
        results = out / "results"
        # step 5 beside step 2: one round on one CPU (one client actor, not two), what is checked is
        # where the run's Ray is
        local_job = JOB.replace("num-server-rounds=2", "num-server-rounds=1")
        runs, record["actor_sessions"] = run_side_by_side({
            "attached": [*simulate, "--ray-address", address, "--client-cpus", "1", "--run-config",
                         f"{JOB} results-dir='{results}' run-name='attached'"],
            "local": [*simulate, "--cpus", "1", "--client-cpus", "1", "--run-config",
                      f"{local_job} results-dir='{results}' run-name='local'"]},
            env, watch=frozenset(record["node_sessions"]))
        record.update(runs)
        run_sessions |= {run["session"] for run in runs.values()}
        record["flower_backend"] = run([sys.executable, "-c",
            "import ray; from flwr.server.superlink.fleet.vce.backend.raybackend import RayBackend; "
            "RayBackend({'init_args': {'logging_level': 40}, 'client_resources': {'num_cpus': 1}}); "
            "print(sorted(n['NodeManagerAddress'] for n in ray.nodes() if n['Alive']))"],
            {**env, "RAY_ADDRESS": address}, timeout=180)
        record["no_room"] = run([*simulate, "--ray-address", address, "--client-cpus", "2", "--run-config",
                                 f"{JOB} results-dir='{out / 'no-room'}'"], env)
        record["no_room_files"] = sorted(p.name for p in (out / "no-room").glob("*"))
        record["sweep_no_room"] = run([*simulate, "--seeds", "0,1", "--experiment", "sweep", "--ray-address",
                                       address, "--client-cpus", "2", "--run-config",
                                       f"{JOB} results-dir='{out / 'sweep'}'"], env)
        record["sweep_files"] = sorted(str(p.relative_to(out)) for p in (out / "sweep").rglob("*"))
    finally:
        sessions = {p.pid for p in starters} | run_sessions  # each `ray start` and run led its own
        record["processes"] = len(sessions_processes(sessions))
        for sig in (signal.SIGTERM, signal.SIGKILL):
            for pid in sessions_processes(sessions):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, sig)
            for _ in range(30):  # up to 3 s for them to go
                if not sessions_processes(sessions):
                    break
                time.sleep(0.1)
        record["left"] = sessions_processes(sessions)
        (out / "scenario.json").write_text(json.dumps(record, indent=1))


if __name__ == "__main__":
    main(Path(sys.argv[1]))
