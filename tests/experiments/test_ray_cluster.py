"""A simulation attached to a running Ray cluster of two nodes on this machine.

A real cluster, no mocks: tests/helpers/ray_cluster_scenario.py, in a network namespace of its own (so Ray's
multi-node mode binds loopback only), starts a head and a worker node with ``ray start`` (one CPU
each), runs a 2-round tiny-vilt job attached with ``run_simulation.py --ray-address``, sees on which
node's processes the client actors ran, attaches Flower's own Ray backend (what ``flwr run``'s
simulation process builds) through ``RAY_ADDRESS``, tries the refusals, and stops both nodes by the
ids of the processes they started (never ``ray stop``, which stops every Ray on the machine).
"""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCENARIO = ROOT / "tests" / "helpers" / "ray_cluster_scenario.py"


def one_line_error(result: dict) -> str:
    """The run's one-line error. Ray warns once that the namespace has no route out ("Failed to
    determine local IP via external connectivity", network_util.cc): the test's namespace, not
    the run, says that; on a host with a network Ray finds its address without the warning."""
    err = "\n".join(line for line in result["stderr"].strip().splitlines()
                    if "network_util.cc" not in line).strip()
    assert result["code"] == 2 and err.startswith("error: ") and "\n" not in err, result
    return err


@pytest.fixture(scope="module")
def scenario(tmp_path_factory) -> dict:
    if (shutil.which("unshare") is None or shutil.which("ip") is None
            or subprocess.run(["unshare", "--net", "true"]).returncode != 0):
        pytest.skip("needs unshare --net (root or user namespaces) and ip to keep Ray on loopback")
    out = tmp_path_factory.mktemp("ray-cluster")
    # a session of its own: the one a client actor's process is in tells which Ray hosts it, and
    # another test's Ray (pytest-xdist's other worker) is in pytest's session
    done = subprocess.run(["unshare", "--net", sys.executable, str(SCENARIO), str(out)], cwd=ROOT,
                          capture_output=True, text=True, timeout=900, start_new_session=True)
    assert (out / "scenario.json").is_file(), done.stdout[-3000:] + done.stderr[-3000:]
    record = json.loads((out / "scenario.json").read_text())
    record["out"] = out
    assert record["head"]["code"] == 0 and record["worker"]["code"] == 0, record
    return record


def test_a_run_attached_to_the_cluster_completes_with_its_results_on_the_driver(scenario):
    attached = scenario["attached"]
    assert attached["code"] == 0, attached
    assert "Ray cluster at 127.0.0.1:6380: 2 nodes, 2 CPUs, 0 GPUs" in attached["stdout"]
    run_dir = scenario["out"] / "results" / "attached"
    rounds = [json.loads(line) for line in (run_dir / "rounds.jsonl").read_text().splitlines()]
    assert [r["round"] for r in rounds] == [0, 1, 2]  # 0: the initial adapters' evaluation
    assert (run_dir / "adapters.safetensors").is_file()
    assert sorted(p.name for p in (run_dir / "clients").iterdir()) == ["partition-0", "partition-1"]


def test_client_actors_ran_on_both_nodes(scenario):
    """A node's raylet starts the workers of its actors, in the session of that node's ``ray start``."""
    assert len(scenario["node_sessions"]) == 2
    # and the run without an address (beside it) in its own session, none elsewhere: an actor in the
    # attached run's own session would mean it started a Ray of its own
    assert scenario["actor_sessions"] == sorted({*scenario["node_sessions"], scenario["local"]["session"]})


def test_flowers_ray_backend_attaches_through_ray_address(scenario):
    """What ``flwr run``'s simulation process does: Flower's RayBackend with ``RAY_ADDRESS`` set."""
    backend = scenario["flower_backend"]
    assert backend["code"] == 0, backend
    assert backend["stdout"].strip().splitlines()[-1] == "['127.0.0.1', '127.0.0.1']"


def test_a_cluster_without_room_for_one_client_is_one_line_before_any_round(scenario):
    err = one_line_error(scenario["no_room"])
    assert err.startswith("error: --ray-address '127.0.0.1:6380': no node of the cluster can host one "
                          "client with --client-cpus 2 and --client-gpus 0 (nodes: ")
    assert scenario["no_room_files"] == []


def test_a_sweep_checks_the_cluster_once_before_its_first_run(scenario):
    err = one_line_error(scenario["sweep_no_room"])
    assert err.startswith("error: --ray-address '127.0.0.1:6380': no node of the cluster can host one "
                          "client with --client-cpus 2")
    files = scenario["sweep_files"]
    assert not any("runs/" in f or f.endswith(".log") for f in files), files


def test_a_run_without_an_address_starts_its_own_ray_instead_of_joining_a_running_cluster(scenario):
    """Ray's ``ray.init()`` would join the cluster ``ray start`` recorded on this machine; the run
    completes with its client actor in a Ray it started itself (in the run's own session): joined to
    the cluster, its actor would be in a node's session, as the attached run's are."""
    assert scenario["local"]["code"] == 0, scenario["local"]
    assert "Ray cluster at" not in scenario["local"]["stdout"]
    assert scenario["local"]["session"] in scenario["actor_sessions"], scenario["actor_sessions"]


def test_both_nodes_are_stopped_by_process_id(scenario):
    assert scenario["processes"] >= 4  # GCS, two raylets, their agents and workers
    assert scenario["left"] == []


def test_cpus_cannot_be_given_when_attaching(tmp_path, capsys, monkeypatch):
    """Refused from the arguments alone, before any cluster is asked (attaching fails the test):
    ``run_simulation.main`` in this process, not a process of the scenario (1.1-1.4 s of CPU,
    cpu_time.py); the script's exit status 2 on a refusal is checked by the scenario."""
    import experiments.ray_cluster
    import run_simulation

    monkeypatch.setattr(experiments.ray_cluster, "attach", lambda *args, **kwargs: pytest.fail("attached"))
    monkeypatch.setattr(run_simulation, "simulate", lambda *args, **kwargs: pytest.fail("simulated"))
    code = run_simulation.main(["--ray-address", "127.0.0.1:6380", "--cpus", "1", "--client-cpus", "1",
                                "--num-clients", "2", "--run-config", "model='tiny-vilt' dataset='synthetic' "
                                f"budgets='2,1' results-dir='{tmp_path}'"])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1, err
    assert err.startswith("error: --cpus 1 cannot be used with --ray-address '127.0.0.1:6380'"), err
    assert not list(tmp_path.iterdir())


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def test_an_address_where_no_cluster_answers_is_one_line_within_30_s(tmp_path, capsys, monkeypatch):
    """``run_simulation.main`` in this process, timed after the imports its checks make (server_app.app:
    torch, transformers, 8.7 s of CPU, on a loaded machine more than the 30 s of wall time by
    themselves); the subject is that nothing waits for an answer (Ray's own connection retries
    take minutes). The script's exit status 2 on a refused attach is checked by the scenario."""
    import run_simulation
    import server_app.app  # noqa: F401 - imported by main's checks; see the docstring

    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    monkeypatch.setattr(run_simulation, "simulate", lambda *args, **kwargs: pytest.fail("simulated"))
    port = free_port()  # bound a moment ago, closed now: nothing listens there
    start = time.monotonic()
    code = run_simulation.main(["--ray-address", f"127.0.0.1:{port}", "--num-clients", "3", "--run-config",
                                "model='tiny-vilt' dataset='synthetic' budgets='2,1,3' num-server-rounds=1 "
                                f"results-dir='{tmp_path}'"])
    assert time.monotonic() - start < 30
    assert code == 2
    assert capsys.readouterr().err.strip() == (f"error: --ray-address '127.0.0.1:{port}': no Ray cluster "
                                               "answers there (Connection refused)")
