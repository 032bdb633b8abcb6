"""A two-node Ray cluster on loopback, a simulation attached to it, and both nodes stopped by PID.

Run by tests/experiments/test_ray_cluster.py as
``unshare --net python tests/helpers/ray_cluster_scenario.py <out>``: in
a network namespace of its own whose only interface is ``lo``. Ray, in multi-node mode, resolves
127.0.0.1 to the host's outward address (``resolve_ip_for_localhost``), and in single-node mode
refuses a second node; inside the namespace that address is 127.0.0.1, so every Ray process binds
and connects to loopback only. Steps, each recorded in ``<out>/scenario.json``:

1. ``ray start --head`` and ``ray start --address`` (one CPU each, dashboard for the state API),
   each in a session of its own (``setsid``), so every process they start is found by session id;
2. the 2-round job attached with ``run_simulation.py --ray-address`` (one client actor per node),
   then Ray's state API for nodes and client actors;
3. Flower's own Ray backend, as ``flwr run``'s simulation process builds it, with ``RAY_ADDRESS``;
4. the refusals: a client larger than any node, ``--cpus`` while attaching, and the same client in a
   sweep (``--seeds``), which checks once before its first run;
5. a run with no address (and no ``RAY_ADDRESS``) while the cluster runs: it starts a Ray of its own
   rather than joining the cluster that ``ray start`` left in Ray's current-cluster file;
6. every process of both sessions stopped by its PID (never ``ray stop``), and what is left.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
JOB = ("model='tiny-vilt' dataset='synthetic' partitioner='iid' budgets='2,1' num-server-rounds=2 "
       "local-steps=2 batch-size=8 max-test-samples=16 optimizer-pop-size=10 optimizer-generations=4")
PORT, DASHBOARD = 6380, 8266  # a namespace of our own: nothing else listens there


def run(command: list[str], env: dict[str, str], timeout: float = 600) -> dict:
    done = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout)
    return {"code": done.returncode, "stdout": done.stdout[-4000:], "stderr": done.stderr[-4000:]}


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

    def start(*args: str) -> dict:
        proc = subprocess.Popen([ray, "start", *args, "--node-ip-address", "127.0.0.1", "--num-cpus", "1",
                                 "--num-gpus", "0", "--disable-usage-stats"], env=env, text=True,
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True)
        starters.append(proc)
        output = proc.communicate(timeout=180)[0]
        return {"code": proc.returncode, "output": output[-3000:]}

    try:
        record["head"] = start("--head", "--port", str(PORT), "--include-dashboard",
                               "true", "--dashboard-host", "127.0.0.1", "--dashboard-port", str(DASHBOARD))
        record["worker"] = start("--address", address)
        simulate = [sys.executable, "run_simulation.py", "--num-clients", "2"]
        results = out / "results"
        record["attached"] = run([*simulate, "--ray-address", address, "--client-cpus", "1", "--run-config",
                                  f"{JOB} results-dir='{results}' run-name='attached'"], env)
        from ray.util.state import list_actors, list_nodes

        record["nodes"] = sorted(n.node_id for n in list_nodes(address=address) if n.state == "ALIVE")
        record["actor_nodes"] = sorted({a.node_id for a in list_actors(
            address=address, filters=[("class_name", "=", "ClientAppActor")], limit=1000)})
        record["flower_backend"] = run([sys.executable, "-c",
            "import ray; from flwr.server.superlink.fleet.vce.backend.raybackend import RayBackend; "
            "RayBackend({'init_args': {'logging_level': 40}, 'client_resources': {'num_cpus': 1}}); "
            "print(sorted(n['NodeManagerAddress'] for n in ray.nodes() if n['Alive']))"],
            {**env, "RAY_ADDRESS": address}, timeout=180)
        record["no_room"] = run([*simulate, "--ray-address", address, "--client-cpus", "2", "--run-config",
                                 f"{JOB} results-dir='{out / 'no-room'}'"], env)
        record["no_room_files"] = sorted(p.name for p in (out / "no-room").glob("*"))
        record["with_cpus"] = run([*simulate, "--ray-address", address, "--cpus", "1", "--client-cpus", "1",
                                   "--run-config", f"{JOB} results-dir='{out / 'with-cpus'}'"], env)
        record["sweep_no_room"] = run([*simulate, "--seeds", "0,1", "--experiment", "sweep", "--ray-address",
                                       address, "--client-cpus", "2", "--run-config",
                                       f"{JOB} results-dir='{out / 'sweep'}'"], env)
        record["sweep_files"] = sorted(str(p.relative_to(out)) for p in (out / "sweep").rglob("*"))

        def client_actors() -> int:
            return len(list_actors(address=address, filters=[("class_name", "=", "ClientAppActor")],
                                   limit=1000))

        record["actors_before_local"] = client_actors()
        # one round on one CPU (one client actor, not two): what is checked is where the run's Ray is
        local_job = JOB.replace("num-server-rounds=2", "num-server-rounds=1")
        record["local"] = run([*simulate, "--cpus", "1", "--client-cpus", "1", "--run-config",
                               f"{local_job} results-dir='{results}' run-name='local'"], env)
        record["actors_after_local"] = client_actors()
    finally:
        sessions = {p.pid for p in starters}  # each `ray start` led its own session
        record["processes"] = len(sessions_processes(sessions))
        for sig in (signal.SIGTERM, signal.SIGKILL):
            for pid in sessions_processes(sessions):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, sig)
            time.sleep(3)
        record["left"] = sessions_processes(sessions)
        (out / "scenario.json").write_text(json.dumps(record, indent=1))


if __name__ == "__main__":
    main(Path(sys.argv[1]))
