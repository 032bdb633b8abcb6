"""A TLS + SuperNode-authenticated federation on this machine, and a run of the app on it.

    python -m deploy.launch --budgets 2,4,6 --run-config "num-server-rounds=3" [--dataset easy-vqa]
    python -m deploy.launch --node-config "layer-budget=2 data-dir='/data/a'" --node-config "..."

What it does (the same steps a coordinator and its sites take on separate machines, see
deploy/README.md), with every address on 127.0.0.1:
1. credentials (:mod:`deploy.make_certs`): a private CA, the SuperLink's certificate, one key pair
   per SuperNode;
2. ``flower-superlink`` with ``--ssl-*`` and ``--enable-supernode-auth``;
3. registration of every node's public key (only registered keys may connect): what
   ``flwr supernode register <node>.pub`` does, through the ``flwr`` CLI, each node id it is given
   recorded as that node's site in ``<workdir>/sites.json`` (`settings.sites`), which every run
   gets as ``site-registry``: a node speaks only for the site its key is registered as;
4. one ``flower-supernode`` per node with its own ``--node-config`` (layer-budget, dataset or
   data-dir, partition-id/num-partitions, device, state-dir), ``--root-certificates`` and
   ``--auth-supernode-private-key``;
5. ``flwr run . <connection> --stream`` and a check of the run's final status.
Every process is started in its own process group and stopped by its PID (the group it leads,
so its SuperExec and App processes go with it) on exit, error, Ctrl-C or SIGTERM. POSIX only.
``flwr`` talks to the SuperLink through a Flower configuration file in the work directory
(``FLWR_HOME``), so the user's ``~/.flwr/config.toml`` is left alone.

Registering, listing nodes and reading a run's status are ``flwr`` CLI calls with ``--format json``,
Flower's public interface to the Control API; the Flower versions it was checked on and the
supported range are `flower_compat`'s, checked before anything starts.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import re
import signal
import socket
import ssl
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path

from deploy.forkserver import without_launchers, write_launcher
from deploy.make_certs import Credentials, make_credentials
from flower_compat import FlowerVersionError, check_version, release_mismatch, supported
from settings.local import available_cores
from settings.sites import register_site

PROJECT_ROOT = Path(__file__).resolve().parent.parent
CONNECTION = "f3ocus-local"
HOST = "127.0.0.1"
RUN_STARTED = re.compile(r"Successfully started run (\d+)")
COMPLETED = "finished:completed"
CLIENTAPPS = ("forked", "started")  # --clientapps: forked by deploy.forkserver, or started by Flower
COMPONENTS = ("flower-superlink", "flower-supernode", "flwr")  # the executables a federation runs
FLOWER_VERSION = re.compile(r"Flower version:\s*(\S+)")
# offline operation: no `uv sync` of the app's dependencies, no update check, no telemetry
QUIET_ENV = {"FLWR_DISABLE_RUNTIME_DEPENDENCY_INSTALLATION": "1", "FLWR_DISABLE_UPDATE_CHECK": "1",
             "FLWR_TELEMETRY_ENABLED": "0"}


class LaunchError(RuntimeError):
    """A step of the launch failed; the message names the step and where its log is."""


def check_components(executables: Sequence[str] = COMPONENTS) -> str:
    """The launcher's Flower, once it is in the supported range and every executable it starts
    (found on PATH, so possibly another environment's) is the same major.minor release; else
    `FlowerVersionError` naming both versions. The ``--version`` calls run side by side."""
    local = check_version(what="installed for the launcher")
    calls = {}
    for exe in executables:
        try:
            calls[exe] = subprocess.Popen([exe, "--version"], stdout=subprocess.PIPE,
                                          stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                          text=True, env={**os.environ, **QUIET_ENV})
        except FileNotFoundError:
            raise FlowerVersionError(f"{exe} is not on PATH: pip install 'flwr[simulation]{supported()}' "
                                     "in this environment") from None
    for exe, call in calls.items():
        printed = call.communicate(timeout=120)[0]
        found = FLOWER_VERSION.search(printed)
        if found is None:
            raise FlowerVersionError(f"{exe} --version printed no Flower version: {printed.strip()[-200:]!r}")
        problem = release_mismatch(local, found.group(1), "the launcher", exe)
        if problem:
            raise FlowerVersionError(problem)
    return local


@dataclass(frozen=True)
class Node:
    """One site: a name (its key pair is ``keys/<name>``) and its SuperNode's node config."""

    name: str
    config: dict[str, object]


@dataclass
class RunResult:
    """Outcome of ``flwr run``: the run id, its final status and the streamed log."""

    run_id: int | None
    status: str
    output: str

    @property
    def ok(self) -> bool:
        return self.status == COMPLETED


def toml_value(value: object) -> str:
    """A node-config value in Flower's ``key=value`` (TOML) syntax."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, str | Path):
        return json.dumps(str(value))  # a JSON string is a valid TOML basic string
    raise ValueError(f"node config value {value!r}: must be a str, int, float or bool")


def node_config_arg(config: dict[str, object]) -> str:
    """``--node-config`` argument for a dict, e.g. ``layer-budget=2 dataset="synthetic"``."""
    return " ".join(f"{key}={toml_value(value)}" for key, value in config.items())


def core_shares(num_sites: int, cores: int | None = None) -> list[int]:
    """Torch threads per site when ``num_sites`` sites share this machine's ``cores`` (default: the
    cores this process may use): an even split, the remainder to the first sites, at least 1 each,
    as if every site had its own host with that many cores."""
    cores = available_cores() if cores is None else cores
    return [max(1, cores // num_sites + (i < cores % num_sites)) for i in range(num_sites)]


def site_nodes(budgets: Sequence[str], dataset: str, device: str, workdir: Path) -> list[Node]:
    """Nodes ``site-0..N-1`` sharing one data set split N ways, each with its own budget, its
    share of this machine's cores (``num-threads``) and its name as its ``site``."""
    nodes = []
    threads = core_shares(len(budgets))
    for pid, budget in enumerate(budgets):
        value: object = budget if budget == "auto" else int(budget)
        if value != "auto" and int(value) < 1:
            raise ValueError(f"--budgets: budget {budget!r} must be a positive int or 'auto'")
        name = f"site-{pid}"
        nodes.append(Node(name, {"site": name, "layer-budget": value, "dataset": dataset, "partition-id": pid,
                                 "num-partitions": len(budgets), "device": device,
                                 "num-threads": threads[pid],
                                 "state-dir": str(workdir / "sites" / name / "state")}))
    return nodes


def free_port_block(size: int, tries: int = 200) -> int:
    """A port p with p..p+size-1 all free on 127.0.0.1, below the OS's ephemeral range: a block
    taken from that range can lose a port to any outgoing connection's source port between this
    check and the bind of the SuperNode that uses it (seen in CI: "address already in use")."""
    low = 32768
    with contextlib.suppress(OSError, ValueError):
        low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    rng = random.Random()
    for _ in range(tries):
        base = rng.randrange(10000, max(10001, low - size))
        if all(_port_free(port) for port in range(base, base + size)):
            return base
    raise LaunchError(f"no block of {size} free ports on {HOST} below {low}")


def _port_free(port: int) -> bool:
    with socket.socket() as probe:
        try:
            probe.bind((HOST, port))
        except OSError:
            return False
    return True


def _wait(check: Callable[[], bool], timeout: float, what: str, interval: float = 0.5) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(interval)
    raise LaunchError(f"timed out after {timeout:.0f} s waiting for {what}")


@dataclass
class Federation:
    """SuperLink + SuperNodes on 127.0.0.1 under ``workdir``; a context manager that stops them.

    ``port`` is the SuperLink's (Fleet, Control and Runtime APIs share it in Flower 1.41);
    SuperNode ``i`` serves its local Runtime API on ``port + 1 + i``.
    """

    workdir: Path
    nodes: list[Node]
    port: int = 9093
    app_dir: Path = PROJECT_ROOT
    forked_clientapps: bool = True
    processes: dict[str, subprocess.Popen] = field(default_factory=dict)
    node_ids: dict[str, int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.workdir = self.workdir.expanduser().resolve()
        self.logs = self.workdir / "logs"
        self.logs.mkdir(parents=True, exist_ok=True)
        self.creds: Credentials | None = None
        self._next_runtime_port = self.port + 1

    # ------------------------------------------------------------------ plumbing
    def credentials(self, extra: Sequence[str] = ()) -> Credentials:
        """Make (once) the CA, server certificate and a key pair for every node and ``extra`` name."""
        if self.creds is None:
            names = [n.name for n in self.nodes] + list(extra)
            self.creds = make_credentials(self.workdir / "credentials", names)
        return self.creds

    def env(self, home: Path, supernode: bool = False) -> dict[str, str]:
        """Flower's environment for a process with home ``home``; a `supernode`'s
        ``flwr-clientapp`` is `deploy.forkserver`'s launcher if `forked_clientapps`, else
        Flower's own."""
        home.mkdir(parents=True, exist_ok=True)
        env = {**os.environ, **QUIET_ENV, "FLWR_HOME": str(home)}
        if supernode and self.forked_clientapps:
            env["PATH"] = os.pathsep.join(filter(None, [str(self.launcher_folder), env.get("PATH")]))
        elif supernode:  # Flower's own, even where the caller's PATH holds a launcher
            env["PATH"] = without_launchers(env.get("PATH", ""))
        return env

    @cached_property
    def launcher_folder(self) -> Path:
        """``<workdir>/bin``, holding `deploy.forkserver`'s ``flwr-clientapp`` (written once)."""
        return write_launcher(self.workdir / "bin").parent

    def log_path(self, name: str) -> Path:
        return self.logs / f"{name}.log"

    def spawn(self, name: str, command: list[str], home: Path, pipe: bool = False,
              supernode: bool = False) -> subprocess.Popen:
        """Start ``command`` in its own process group; output to ``logs/<name>.log`` (or a pipe)."""
        if name in self.processes and self.processes[name].poll() is None:
            raise LaunchError(f"{name} is already running (pid {self.processes[name].pid})")
        with open(self.log_path(name), "ab") as log:
            proc = subprocess.Popen(command, cwd=self.app_dir, env=self.env(home, supernode),
                                    stdout=subprocess.PIPE if pipe else log, stderr=subprocess.STDOUT,
                                    stdin=subprocess.DEVNULL, start_new_session=True, text=pipe)
        self.processes[name] = proc
        return proc

    def flwr(self, *args: str, timeout: float = 120) -> subprocess.CompletedProcess:
        """The ``flwr`` CLI against this federation's connection, with a private ``FLWR_HOME``."""
        return subprocess.run(["flwr", *args], cwd=self.app_dir, env=self.env(self.cli_home),
                              capture_output=True, text=True, timeout=timeout)

    @property
    def cli_home(self) -> Path:
        return self.workdir / "flwr-cli"

    def flwr_json(self, *args: str, timeout: float = 120) -> dict:
        """A ``flwr`` CLI call with ``--format json`` against this federation; its JSON answer, or
        RuntimeError naming the call and what it printed."""
        done = self.flwr(*args, CONNECTION, "--format", "json", timeout=timeout)
        try:
            answer = json.loads(done.stdout)
        except json.JSONDecodeError:
            answer = {}
        if done.returncode != 0 or not answer.get("success"):
            said = (answer.get("error-message") or done.stderr or done.stdout).strip().splitlines()
            raise RuntimeError(f"flwr {' '.join(args)} failed (exit {done.returncode}): "
                               f"{said[-1] if said else 'no output'}")
        return answer

    # ------------------------------------------------------------------ SuperLink
    def start_superlink(self, timeout: float = 120) -> None:
        """TLS SuperLink with SuperNode authentication; waits until it answers on /health."""
        creds = self.credentials()
        self.spawn("superlink", [
            "flower-superlink", "--ssl-ca-certfile", str(creds.ca_cert),
            "--ssl-certfile", str(creds.server_cert), "--ssl-keyfile", str(creds.server_key),
            "--enable-supernode-auth", "--host", HOST, "--port", str(self.port),
            "--disable-runtime-dependency-installation",
            "--database", str(self.workdir / "superlink" / "state.db"),
        ], self.workdir / "superlink")
        context = ssl.create_default_context(cafile=str(creds.ca_cert))

        def healthy() -> bool:
            if self.processes["superlink"].poll() is not None:
                raise LaunchError(f"flower-superlink exited; see {self.log_path('superlink')}")
            try:
                with urllib.request.urlopen(f"https://{HOST}:{self.port}/health", context=context,
                                            timeout=5) as response:
                    return response.status == 200
            except OSError:
                return False

        _wait(healthy, timeout, f"the SuperLink on {HOST}:{self.port}")
        self.cli_home.mkdir(parents=True, exist_ok=True)
        (self.cli_home / "config.toml").write_text(
            f'[superlink]\ndefault = "{CONNECTION}"\n\n[superlink.{CONNECTION}]\n'
            f'address = "{HOST}:{self.port}"\nroot-certificates = "{creds.ca_cert}"\n')

    @property
    def registry(self) -> Path:
        """The site registry (`settings.sites`): which site each registered key speaks for."""
        return self.workdir / "sites.json"

    def register(self, name: str, site: str | None = None) -> int:
        """Register ``keys/<name>.pub`` (``flwr supernode register``) and record the node id it is
        given as ``site`` (default: the node's configured ``site``, else ``name``) in `registry`;
        returns the node id."""
        public = self.credentials().node_keys[name][1]
        try:
            self.node_ids[name] = int(self.flwr_json("supernode", "register", str(public))["node-id"])
        except (RuntimeError, KeyError, ValueError, subprocess.TimeoutExpired) as err:
            raise LaunchError(f"registering {name} ({public}) failed: {err}") from err
        configured = next((str(n.config.get("site", n.name)) for n in self.nodes if n.name == name), name)
        register_site(self.registry, site or configured, self.node_ids[name])
        return self.node_ids[name]

    def online_nodes(self) -> set[int]:
        """Ids of the nodes the SuperLink sees online (none while it cannot be asked)."""
        try:
            nodes = self.flwr_json("supernode", "list")["nodes"]
        except (RuntimeError, KeyError, subprocess.TimeoutExpired):  # unreachable: none online
            return set()
        return {int(n["node-id"]) for n in nodes if n.get("status") == "online"}

    def wait_online(self, names: Sequence[str], timeout: float = 180) -> None:
        wanted = {self.node_ids[n] for n in names}

        def online() -> bool:
            for name in names:
                if self.processes[name].poll() is not None:
                    raise LaunchError(f"SuperNode {name} exited; see {self.log_path(name)}")
            return wanted <= self.online_nodes()

        _wait(online, timeout, f"SuperNodes {', '.join(names)} to come online", interval=2)

    # ------------------------------------------------------------------ SuperNodes
    def start_supernode(self, node: Node, *, key: str | None = None, tls: bool = True,
                        root_certificates: Path | None = None,
                        max_retries: int | None = None) -> subprocess.Popen:
        """A SuperNode with ``node.config``. How a refused node is tried: ``key`` names another
        key pair (``""``: none), ``root_certificates`` trusts another CA, ``tls=False`` drops TLS
        and with it authentication (Flower refuses a key without TLS)."""
        creds = self.credentials()
        site = self.workdir / "sites" / node.name
        command = ["flower-supernode", "--superlink", f"{HOST}:{self.port}",
                   "--host", HOST, "--port", str(self._next_runtime_port),
                   "--node-config", node_config_arg(node.config)]
        self._next_runtime_port += 1
        if tls:
            command += ["--root-certificates", str(root_certificates or creds.ca_cert)]
            if key != "":
                command += ["--auth-supernode-private-key", str(creds.node_keys[key or node.name][0])]
        else:
            command += ["--insecure"]
        if max_retries is not None:
            command += ["--max-retries", str(max_retries)]
        return self.spawn(node.name, command, site / "home", supernode=True)

    def start(self, timeout: float = 180) -> None:
        """Flower's executables checked (`check_components`), then SuperLink, registration of every
        node, every SuperNode, and wait until all are online."""
        check_components()
        self.start_superlink(timeout)
        for node in self.nodes:
            self.register(node.name)
        for node in self.nodes:
            self.start_supernode(node)
        self.wait_online([n.name for n in self.nodes], timeout)

    # ------------------------------------------------------------------ runs
    def run(self, run_config: str = "", timeout: float | None = None, echo: bool = False) -> RunResult:
        """``flwr run <app> <connection> --stream`` with the federation's site registry (unless the
        run config names one); then the run's final status from the SuperLink.

        ``flwr run --stream`` only shows the log and exits 0 even when the run failed, so the
        outcome is read with ``flwr list``; if the CLI dies early, the run goes on and is waited
        for. On ``timeout`` the run is stopped (``flwr stop``) and reported as ``"timeout"``.
        """
        deadline = None if timeout is None else time.monotonic() + timeout
        command = ["flwr", "run", str(self.app_dir), CONNECTION, "--stream", "--run-config",
                   with_registry(run_config, self.registry)]
        proc = self.spawn("flwr-run", command, self.cli_home, pipe=True)
        lines: list[str] = []

        def pump() -> None:
            with open(self.log_path("flwr-run"), "a", encoding="utf-8") as log:
                for line in proc.stdout:
                    lines.append(line)
                    log.write(line)
                    log.flush()
                    if echo:
                        print(line, end="", flush=True)

        reader = threading.Thread(target=pump, daemon=True)
        reader.start()
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.stop("flwr-run")
        reader.join(timeout=10)
        output = "".join(lines)
        found = RUN_STARTED.search(output)
        if found is None:
            return RunResult(None, "not started", output)
        run_id = int(found.group(1))
        if proc.returncode != 0:
            output += f"\n[launcher] flwr run ended with code {proc.returncode}; polling the run\n"
        remaining = 24 * 3600.0 if deadline is None else max(deadline - time.monotonic(), 60.0)
        status = self.run_status(run_id, timeout=remaining)
        if not status.startswith("finished"):
            self.flwr("stop", str(run_id), CONNECTION)
            status = "timeout"
        return RunResult(run_id, status, output)

    def run_status(self, run_id: int, timeout: float = 60) -> str:
        """The run's status as ``flwr list`` reports it, once it is final (``finished:...``)."""
        status = "unknown"

        def final() -> bool:
            nonlocal status
            with contextlib.suppress(RuntimeError, KeyError, IndexError, subprocess.TimeoutExpired):
                status = self.flwr_json("list", "--run-id", str(run_id))["runs"][0]["status"]
            return status.startswith("finished")

        with contextlib.suppress(LaunchError):
            _wait(final, timeout, f"run {run_id} to finish", interval=5)
        return status

    # ------------------------------------------------------------------ stopping
    def stop(self, name: str, sig: int = signal.SIGTERM, grace: float = 15) -> None:
        """Stop the process group led by ``name``'s process (its PID); SIGKILL after ``grace`` s."""
        proc = self.processes.get(name)
        if proc is None:
            return

        def signal_group(signum: int) -> None:
            # once our leader is reaped its PID is free: a live /proc/<pid> is someone else's
            if proc.returncode is not None and Path(f"/proc/{proc.pid}").exists():
                return
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signum)

        if proc.poll() is None:
            signal_group(sig)
        try:
            proc.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            signal_group(signal.SIGKILL)
            proc.wait(timeout=grace)
        signal_group(signal.SIGKILL)  # helpers (SuperExec, App processes) of a finished leader

    def strays(self) -> dict[int, str]:
        """Live processes whose command line names this federation's folder or ports (Linux).

        SuperExec and ServerApp/ClientApp processes watch their parent's PID, but a parent left
        as an unreaped zombie still "exists", so they can outlive it; these are found here.
        """
        ports = "|".join(str(p) for p in range(self.port, self._next_runtime_port))
        mark = re.compile(rf"{re.escape(str(self.workdir) + os.sep)}|{re.escape(HOST)}:({ports})(?!\d)")
        found = {}
        for proc in Path("/proc").glob("[0-9]*"):
            try:
                cmdline = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            except OSError:
                continue
            if int(proc.name) not in (os.getpid(), os.getppid()) and mark.search(cmdline):
                found[int(proc.name)] = cmdline
        return found

    def stop_all(self) -> None:
        """Stop everything this federation started, newest first, then any process left of it."""
        for name in reversed(list(self.processes)):
            self.stop(name)
        for pid in self.strays():
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)

    def __enter__(self) -> Federation:
        return self

    def __exit__(self, *exc) -> None:
        self.stop_all()


# ---------------------------------------------------------------------- command line
def parse_nodes(args: argparse.Namespace, workdir: Path) -> list[Node]:
    """Nodes from repeated ``--node-config`` strings, or ``site-i`` nodes from ``--budgets``."""
    from flower_compat import parse_config_args

    if args.node_config:
        nodes = []
        threads = core_shares(len(args.node_config))
        for i, text in enumerate(args.node_config):
            try:
                config = dict(parse_config_args([text]))
            except (Exception, SystemExit) as err:  # flwr reports TOML errors in several ways
                raise ValueError(f"--node-config {text!r} is malformed: {err}") from None
            if not config:
                raise ValueError(f"--node-config {text!r} sets no key=value")
            name = f"site-{i}"
            config.setdefault("site", name)  # the server keys sampling and records by it
            config.setdefault("state-dir", str(workdir / "sites" / name / "state"))
            config.setdefault("num-threads", threads[i])
            nodes.append(Node(name, config))
        return nodes
    budgets = [b.strip() for b in args.budgets.split(",") if b.strip()]
    if not budgets:
        raise ValueError(f"--budgets {args.budgets!r}: give one budget per node, e.g. 2,4,6")
    try:
        return site_nodes(budgets, args.dataset, args.device, workdir)
    except ValueError as err:
        raise ValueError(f"--budgets {args.budgets!r}: {err}") from None


def with_node_budgets(run_config: str, nodes: Sequence[Node]) -> str:
    """Add ``budgets`` (the nodes' layer budgets by partition) unless the run config sets it.

    The ServerApp checks run-config budgets against the model's layer count before round 1, so a
    node budget above L stops the run with a clear message instead of that node's every reply
    being rejected; nodes still send their own budget with their scores.
    """
    budgets = [n.config.get("layer-budget") for n in nodes]
    if re.search(r"(^|\s)budgets\s*=", run_config) or None in budgets:
        return run_config
    return f"budgets='{','.join(str(b) for b in budgets)}' {run_config}".strip()


def with_registry(run_config: str, registry: Path) -> str:
    """Add ``site-registry`` (the federation's, where its sites' keys were registered) unless the
    run config sets it: a node then speaks only for the site its key is registered as."""
    if re.search(r"(^|\s)site-registry\s*=", run_config):
        return run_config
    return f"site-registry={json.dumps(str(registry.resolve()))} {run_config}".strip()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--budgets", default="2,4,6",
                        help="one layer budget (int or 'auto') per SuperNode; the data set is split "
                             "among them (default: 2,4,6)")
    parser.add_argument("--dataset", default="synthetic", help="data set every node splits")
    parser.add_argument("--device", default="auto", help="device of every SuperNode")
    parser.add_argument("--node-config", action="append", default=[],
                        help="a SuperNode's full --node-config; repeat once per node (overrides "
                             "--budgets/--dataset/--device)")
    parser.add_argument("--run-config", default="", help='run settings, "key=value ..."')
    parser.add_argument("--workdir", type=Path, default=PROJECT_ROOT / "results" / "federation",
                        help="credentials, logs, Flower homes and node state (default: "
                             "results/federation)")
    parser.add_argument("--port", type=int, default=9093, help="SuperLink port on 127.0.0.1")
    parser.add_argument("--timeout", type=float, default=None, help="seconds before the run is stopped")
    parser.add_argument("--clientapps", choices=CLIENTAPPS, default="forked",
                        help="forked (default): each message's flwr-clientapp process is forked from a "
                             "server that imported Flower once (deploy/forkserver.py); started: "
                             "Flower starts a fresh one")
    args = parser.parse_args(argv)
    if not 1 <= args.port <= 65535 - 64:
        parser.error(f"--port {args.port}: must be in 1..{65535 - 64}")
    try:
        nodes = parse_nodes(args, args.workdir.expanduser().resolve())
    except ValueError as err:
        parser.error(str(err))

    def terminate(signum, frame):  # SIGTERM: unwind like Ctrl-C so every process is stopped
        raise SystemExit(128 + signum)

    signal.signal(signal.SIGTERM, terminate)
    with Federation(args.workdir, nodes, port=args.port,
                    forked_clientapps=args.clientapps == "forked") as federation:
        try:
            federation.start()
            for node in nodes:
                print(f"SuperNode {node.name}: node id {federation.node_ids[node.name]}, "
                      f"--node-config '{node_config_arg(node.config)}'", flush=True)
            result = federation.run(with_node_budgets(args.run_config, nodes), timeout=args.timeout,
                                    echo=True)
        except FlowerVersionError as err:
            print(f"error: {err}", file=sys.stderr)
            return 2
        except LaunchError as err:
            print(f"launch failed: {err}", file=sys.stderr)
            return 1
        except KeyboardInterrupt:
            print("interrupted; stopping every process", file=sys.stderr)
            return 130
    print(f"run {result.run_id}: {result.status} (logs in {federation.logs})", flush=True)
    return 0 if result.ok else 1


if __name__ == "__main__":
    sys.exit(main())
