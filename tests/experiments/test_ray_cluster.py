"""A simulation attached to a running Ray cluster of two nodes on this machine (issue 30).

A real cluster, no mocks: tests/helpers/ray_cluster_scenario.py, in a network namespace of its own (so Ray's
multi-node mode binds loopback only), starts a head and a worker node with ``ray start`` (one CPU
each), runs a 2-round tiny-vilt job attached with ``run_simulation.py --ray-address``, asks Ray's
state API where the client actors ran, attaches Flower's own Ray backend (what ``flwr run``'s
simulation process builds) through ``RAY_ADDRESS``, tries the refusals, and stops both nodes by the
ids of the processes they started (never ``ray stop``, which stops every Ray on the machine).
"""

from __future__ import annotations

import json
import os
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
    done = subprocess.run(["unshare", "--net", sys.executable, str(SCENARIO), str(out)], cwd=ROOT,
                          capture_output=True, text=True, timeout=900)
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
    assert [r["round"] for r in rounds] == [1, 2]
    assert (run_dir / "adapters.safetensors").is_file()
    assert sorted(p.name for p in (run_dir / "clients").iterdir()) == ["partition-0", "partition-1"]


def test_client_actors_ran_on_both_nodes_by_rays_state_api(scenario):
    assert len(scenario["nodes"]) == 2
    assert scenario["actor_nodes"] == scenario["nodes"]


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


def test_cpus_cannot_be_given_when_attaching(scenario):
    assert "cannot be used with --ray-address" in one_line_error(scenario["with_cpus"])


def test_a_sweep_checks_the_cluster_once_before_its_first_run(scenario):
    err = one_line_error(scenario["sweep_no_room"])
    assert err.startswith("error: --ray-address '127.0.0.1:6380': no node of the cluster can host one "
                          "client with --client-cpus 2")
    files = scenario["sweep_files"]
    assert not any("runs/" in f or f.endswith(".log") for f in files), files


def test_a_run_without_an_address_starts_its_own_ray_instead_of_joining_a_running_cluster(scenario):
    """Ray's ``ray.init()`` would join the cluster ``ray start`` recorded on this machine; the run
    completes without one client actor on that cluster."""
    assert scenario["local"]["code"] == 0, scenario["local"]
    assert "Ray cluster at" not in scenario["local"]["stdout"]
    assert scenario["actors_before_local"] == scenario["actors_after_local"] > 0


def test_both_nodes_are_stopped_by_process_id(scenario):
    assert scenario["processes"] >= 4  # GCS, two raylets, their agents and workers
    assert scenario["left"] == []


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def test_an_address_where_no_cluster_answers_exits_2_with_one_line_within_30_s(tmp_path):
    port = free_port()  # bound a moment ago, closed now: nothing listens there
    start = time.monotonic()
    done = subprocess.run([sys.executable, "run_simulation.py", "--ray-address", f"127.0.0.1:{port}",
                           "--num-clients", "3", "--run-config",
                           "model='tiny-vilt' dataset='synthetic' budgets='2,1,3' num-server-rounds=1 "
                           f"results-dir='{tmp_path}'"], cwd=ROOT, capture_output=True, text=True,
                          timeout=60, env={k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"})
    assert time.monotonic() - start < 30
    assert done.returncode == 2
    assert done.stderr.strip() == (f"error: --ray-address '127.0.0.1:{port}': no Ray cluster answers there "
                                   "(Connection refused)")
