"""Attach a simulation to a running Ray cluster (``run_simulation.py --ray-address``).

Flower's Simulation Engine runs the ClientApps as Ray actors. A lab that outgrows one machine
already runs a Ray cluster (``ray start --head`` on one host, ``ray start --address <head>`` on the
others); `attach` connects this process to it before Flower starts, so Flower's Ray backend finds
Ray initialised and places its actors on the cluster's nodes instead of starting a Ray of its own.
Each check fails with one line (`settings.ConfigError`) before any round:

1. something answers at the address (a TCP probe, then ``ray.init``) within ``timeout`` seconds;
2. some node can host one client (``--client-cpus``/``--client-gpus`` against its resources);
3. every node imports the project and sees the results folder: a client may run on any node from
   round to round and keeps its own head in ``<run dir>/clients/`` (the simulation default), so the
   folder must be one every node mounts at the same path.

CPU and GPU counts are never passed to ``ray.init`` here: Ray refuses them when attaching, since
each node declared its own (``ray start --num-cpus/--num-gpus``).
"""

from __future__ import annotations

import logging
import os
import socket
import sys
import uuid
import warnings
from dataclasses import dataclass
from pathlib import Path

from settings import ConfigError

PROBE_TIMEOUT = 5.0  # seconds for the TCP probe of host:port


@dataclass(frozen=True)
class Cluster:
    """The attached cluster: its address and each live node's IP and resources."""

    address: str
    nodes: list[tuple[str, dict[str, float]]]

    def describe(self) -> str:
        cpus = sum(r.get("CPU", 0) for _, r in self.nodes)
        gpus = sum(r.get("GPU", 0) for _, r in self.nodes)
        return f"Ray cluster at {self.address}: {len(self.nodes)} nodes, {cpus:g} CPUs, {gpus:g} GPUs"


def _probe(address: str) -> None:
    """One line if nothing listens at ``host:port`` (``auto`` is resolved by Ray itself)."""
    if address == "auto":
        return
    host, sep, port = address.rpartition(":")
    if not sep or not host or not port.isdigit():
        raise ConfigError(f"--ray-address {address!r}: expected 'auto' or host:port")
    try:
        socket.create_connection((host, int(port)), timeout=PROBE_TIMEOUT).close()
    except OSError as err:
        raise ConfigError(f"--ray-address {address!r}: no Ray cluster answers there "
                          f"({err.strerror or type(err).__name__})") from None


def _sees(path: str) -> tuple[str, bool]:
    """Run on one node: its IP and whether it sees ``path``."""
    import ray

    return ray.util.get_node_ip_address(), Path(path).exists()


def attach(address: str, client_cpus: float, client_gpus: float, shared: Path,
           timeout: float = 30.0) -> Cluster:
    """Connect this process to the Ray cluster at ``address`` after the checks of the module doc."""
    _probe(address)
    import ray
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    # the project's modules on every worker, as Flower's own ray.init passes them
    pythonpath = os.pathsep.join([*sys.path, *filter(None, [os.environ.get("PYTHONPATH")])])
    try:
        with warnings.catch_warnings():  # Ray's tip on a future default for GPU-less actors
            warnings.simplefilter("ignore", FutureWarning)
            ray.init(address=address, runtime_env={"env_vars": {"PYTHONPATH": pythonpath}},
                     logging_level=logging.ERROR, log_to_driver=True)
    except (ConnectionError, RuntimeError, ValueError) as err:
        raise ConfigError(f"--ray-address {address!r}: {str(err).strip().splitlines()[0]}") from None
    try:
        live = [n for n in ray.nodes() if n.get("Alive") and n.get("Resources")]
        cluster = Cluster(address, [(n["NodeManagerAddress"], dict(n["Resources"])) for n in live])
        if not any(r.get("CPU", 0) >= client_cpus and r.get("GPU", 0) >= client_gpus
                   for _, r in cluster.nodes):
            raise ConfigError(
                f"--ray-address {address!r}: no node of the cluster can host one client with "
                f"--client-cpus {client_cpus:g} and --client-gpus {client_gpus:g} (nodes: "
                + "; ".join(f"{ip} {r.get('CPU', 0):g} CPUs {r.get('GPU', 0):g} GPUs"
                            for ip, r in cluster.nodes) + ")")
        shared.mkdir(parents=True, exist_ok=True)
        marker = shared / f".ray-visible-{uuid.uuid4().hex}"
        marker.touch()
        try:
            task = ray.remote(num_cpus=0)(_sees)
            calls = [task.options(scheduling_strategy=NodeAffinitySchedulingStrategy(n["NodeID"], soft=False))
                     .remote(str(marker)) for n in live]
            try:
                seen = ray.get(calls, timeout=timeout)
            except Exception as err:  # noqa: BLE001 - a node without the project, or one too slow
                raise ConfigError(f"--ray-address {address!r}: a node could not run the project "
                                  f"({type(err).__name__}: {str(err).strip().splitlines()[-1]})") from None
        finally:
            marker.unlink()
        blind = [ip for ip, visible in seen if not visible]
        if blind:
            raise ConfigError(f"results-dir {str(shared)!r} is not visible on Ray node(s) "
                              f"{', '.join(blind)}: on a cluster it must be a folder every node mounts "
                              "at the same path (clients keep their own state in the run directory)")
    except BaseException:
        ray.shutdown()  # disconnect; the cluster itself keeps running
        raise
    return cluster
