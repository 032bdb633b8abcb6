"""A deployed site's warm worker: the model, data and imports survive from one message to the next.

Flower 1.41 starts a fresh ``flwr-clientapp`` process for every message and ends it after the reply,
in both isolation modes (``flwr/supernode/runtime/run_clientapp.py``). Done in that process, every
query, train and evaluate message of a site would import torch, transformers and peft, build the
model and load the data again: about 10 s of CPU before the handler's own work (deploy/README.md,
"Cost of a message"). `site_mod`, a Flower mod on the ClientApp, therefore forwards each message
of a site that has a ``state-dir`` to one long-lived worker process of that site (started by the
first message, ``python -m client_app.worker``), which runs the handler in memory that persists,
as a Ray actor does in simulation. The ClientApp process itself then only imports Flower and numpy.

* One worker per (state-dir, installed app, SuperExec, thread count): a new run of changed code, or
  a restarted SuperNode, gets its own. It listens on a Unix socket (Linux: abstract namespace) and
  accepts only peers that know ``<state-dir>/worker/authkey`` (0600, HMAC challenge of
  `multiprocessing.connection`). It exits after ``worker-idle`` seconds without a message, and
  within `WATCH_S` of its SuperExec's end, during a message too.
* It runs in the process group its SuperExec started the ClientApp processes in
  (`deploy.forkserver.launch_group`): the SuperNode's under ``--isolation subprocess``, so a
  signal to that group (a site's Ctrl-C, ``deploy.launch`` stopping a site) reaches it directly.
  A forked ClientApp process has a group of its own, which the fork server ends when that
  process's launcher is killed; the worker is not in it, as it serves the site's later messages.
* It handles one message at a time and sets torch's thread count once: node setting
  ``num-threads`` (default: the cores this process may run on, ``os.sched_getaffinity``).
* Node setting ``worker-idle = 0`` runs every message in its own process, as Flower does (with the
  partition cache of `tasks.data.cache` and the thread setting still applied).
* Every message of a site appends one line to ``<state-dir>/timings.jsonl``: seconds from the
  server creating the message to this process's start (``delivery``: the SuperNode's pull and the
  process spawn), from process start to the mod (``start-to-handler``), the handler's setup (data
  and model, `client_setup`), its own work, and ``overhead`` = everything from process start to
  the reply except that work, and ``process``: ``forked`` where `deploy.forkserver` forked the
  ClientApp process, ``started`` where Flower started it.
Nodes without a ``state-dir`` (simulation) run the handler directly, untouched.
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import hashlib
import json
import os
import pickle
import secrets
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from collections.abc import Callable
from multiprocessing.connection import Client, Connection, answer_challenge, deliver_challenge
from pathlib import Path

from flwr.app import Context, Message

from client_app.node import check_folder
from deploy.forkserver import (
    LAUNCH_ENV,
    alive,
    launch_group,
    load_entry,
    parent_pid,
    process_start_time,
)
from flower_compat import set_task_identity, task_identity
from settings.errors import ConfigError
from settings.local import available_cores

APP_DIR = Path(__file__).resolve().parent.parent  # the installed app (FAB) this module came from
APP = "client_app.app:app"  # the ClientApp a worker serves (module:attribute)
DEFAULT_IDLE = 600.0  # seconds a worker waits for its site's next message
WATCH_S = 0.2  # seconds between the worker's looks at its SuperExec
CONNECT_TIMEOUT = 120.0  # seconds a ClientApp waits for a worker it started to listen
HANDSHAKE_TIMEOUT = 60  # seconds the worker waits for a connected peer's key and message
_IN_WORKER = False  # True in the worker process: the mod runs the handler here
_LAST: dict[str, float] = {}  # setup/work seconds of the last handler run in this process


def num_threads(context: Context) -> int:
    """Node setting ``num-threads``, default (0) the number of cores this process may run on."""
    value = context.node_config.get("num-threads", 0)
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ConfigError(f"node config num-threads = {value!r}: must be a positive int (0 = all cores)")
    return value or available_cores()


def worker_idle(context: Context) -> float:
    """Node setting ``worker-idle``: seconds a warm worker waits; 0 = a process per message."""
    value = context.node_config.get("worker-idle", DEFAULT_IDLE)
    if isinstance(value, bool) or not isinstance(value, int | float) or value < 0:
        raise ConfigError(f"node config worker-idle = {value!r}: must be a number of seconds >= 0")
    return float(value)


def site_mod(msg: Message, context: Context, call_next: Callable[[Message, Context], Message]) -> Message:
    """Flower mod: run the handler in this site's warm worker (or here; see the module doc)."""
    entered, cpu = time.time(), time.process_time()
    _LAST.clear()
    state_dir = context.node_config.get("state-dir")
    if not state_dir:
        return call_next(msg, context)
    if _IN_WORKER:
        return _run_here(msg, context, call_next)
    check_folder(context.node_config)  # the worker's key and socket lock live there
    if worker_idle(context) == 0:
        import torch

        torch.set_num_threads(num_threads(context))
        reply, where = _run_here(msg, context, call_next), "process"
    else:
        reply, where = _forward(msg, context, Path(str(state_dir)).resolve()), "worker"
    _record(Path(str(state_dir)), msg, context, (entered, cpu), where)
    return reply


def _run_here(msg: Message, context: Context, call_next: Callable[[Message, Context], Message]) -> Message:
    """The handler, its setup (data, model) timed apart from its own work."""
    from client_app.runtime import client_setup

    start = time.perf_counter()
    with contextlib.suppress(Exception):  # a bad setting fails again in the handler, which reports it
        client_setup(context)
    setup = time.perf_counter()
    reply = call_next(msg, context)
    _LAST.update(setup=setup - start, work=time.perf_counter() - setup)
    return reply


def _record(state_dir: Path, msg: Message, context: Context, entered: tuple[float, float],
            where: str) -> None:
    """One line of ``<state-dir>/timings.jsonl`` and of the site's log for this message."""
    done, started, (entered, cpu) = time.time(), process_start_time(), entered
    config = msg.content["config"] if msg.has_content() and "config" in msg.content else {}
    row = {"run-id": context.run_id, "message": msg.metadata.message_type,
           "round": config.get("server-round"), "where": where,
           "process": os.environ.get(LAUNCH_ENV, "started"), "process-start": started,
           "delivery": started - msg.metadata.created_at, "start-to-handler": entered - started,
           "cpu-to-handler": cpu, "setup": _LAST.get("setup", 0.0),
           "work": _LAST.get("work", 0.0), "overhead": done - started - _LAST.get("work", 0.0)}
    state_dir.mkdir(parents=True, exist_ok=True)
    with open(state_dir / "timings.jsonl", "a", encoding="utf-8") as fh:
        fh.write(json.dumps(row) + "\n")
    print(f"[{where}] {row['message']} round {row['round']}: overhead {row['overhead']:.2f} s "
          f"(start to handler {row['start-to-handler']:.2f} s, setup {row['setup']:.2f} s), "
          f"work {row['work']:.2f} s", flush=True)


# ---------------------------------------------------------------------- the ClientApp's side
def superexec_pid() -> int:
    """The SuperExec that started this ClientApp process: its worker's key and lifetime, the same
    whether Flower started the process or `deploy.forkserver` forked it."""
    return parent_pid(sys.argv[1:]) or os.getppid()


def _endpoint(state_dir: Path, threads: int) -> tuple[str, bytes, Path]:
    """Socket address, auth key and lock file of this site's worker for this app and SuperExec."""
    folder = state_dir / "worker"
    folder.mkdir(parents=True, exist_ok=True)
    key_file = folder / "authkey"
    if not key_file.exists():
        mine = folder / f"authkey.{os.getpid()}"
        with os.fdopen(os.open(mine, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), "wb") as fh:
            fh.write(secrets.token_bytes(32))
        with contextlib.suppress(FileExistsError):
            os.link(mine, key_file)  # atomic: the first ClientApp's key is everyone's
        mine.unlink()
    digest = hashlib.sha256("\0".join(map(str, (state_dir, APP_DIR, APP, sys.prefix, superexec_pid(),
                                                threads))).encode()).hexdigest()[:24]
    address = (f"\0f3ocus-worker-{digest}" if sys.platform.startswith("linux")
               else str(Path(tempfile.gettempdir()) / f"f3ocus-worker-{digest}.sock"))
    return address, key_file.read_bytes(), folder / f"{digest}.lock"


def _connect(address: str, key: bytes) -> Connection | None:
    """An authenticated connection to the worker, or None if no worker answers there."""
    try:
        return Client(address, family="AF_UNIX", authkey=key)
    except (OSError, EOFError):  # none listening, or one closing down in the meantime
        return None


def _forward(msg: Message, context: Context, state_dir: Path) -> Message:
    """Send the message to the site's worker (starting it if needed); rebuild its reply here."""
    threads = num_threads(context)
    address, key, lock = _endpoint(state_dir, threads)
    conn = _connect(address, key)
    if conn is None:
        with open(lock, "w") as fh:  # one ClientApp starts the worker, the others connect to it
            fcntl.flock(fh, fcntl.LOCK_EX)
            conn = _connect(address, key) or _start_worker(address, key, state_dir, threads,
                                                           worker_idle(context))
    identity = task_identity()
    with conn:
        conn.send_bytes(pickle.dumps((msg, context, identity)))
        try:
            status, payload, state, timings = pickle.loads(conn.recv_bytes())
        except (EOFError, OSError) as err:
            raise RuntimeError(f"the site worker ended during a {msg.metadata.message_type} message "
                               f"({type(err).__name__}); see the SuperNode's log") from None
    if status == "raised":
        raise payload
    context.state = state
    _LAST.update(timings)
    return Message(payload, reply_to=msg)


def _start_worker(address: str, key: bytes, state_dir: Path, threads: int, idle: float) -> Connection:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(APP_DIR),
                                                                     os.environ.get("PYTHONPATH")]))}
    subprocess.Popen([sys.executable, "-m", "client_app.worker", "--address", address.replace("\0", "@"),
                      "--state-dir", str(state_dir), "--parent-pid", str(superexec_pid()),
                      "--threads", str(threads), "--idle", str(idle), "--app", APP],
                     env=env, stdin=subprocess.DEVNULL, close_fds=True, process_group=launch_group())
    deadline = time.monotonic() + CONNECT_TIMEOUT
    while time.monotonic() < deadline:
        conn = _connect(address, key)
        if conn is not None:
            return conn
        time.sleep(0.05)
    raise RuntimeError(f"the site worker did not start within {CONNECT_TIMEOUT:.0f} s; "
                       "see the SuperNode's log")


# ---------------------------------------------------------------------- the worker's side
def serve(address: str, key: bytes, parent_pid: int, idle: float, threads: int, app_ref: str = APP) -> None:
    """Accept one authenticated ClientApp at a time and run its message through the ClientApp,
    until `idle` seconds pass without one; end the process once `parent_pid` has ended."""
    global _IN_WORKER
    _IN_WORKER = True
    threading.Thread(target=_end_with, args=(parent_pid,), daemon=True).start()
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    if not address.startswith("\0"):
        with contextlib.suppress(FileNotFoundError):
            os.unlink(address)
    server.bind(address)  # first, so the ClientApp that started this worker can connect at once
    server.listen()
    server.settimeout(1.0)
    import torch

    torch.set_num_threads(threads)
    app = load_entry(app_ref)  # the heavy imports, once

    last = time.monotonic()
    try:
        while time.monotonic() - last < idle:
            try:
                sock, _ = server.accept()
            except TimeoutError:
                continue
            sock.settimeout(None)  # blocking, as Connection expects, but a silent peer times out:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVTIMEO, struct.pack("ll", HANDSHAKE_TIMEOUT, 0))
            with Connection(sock.detach()) as conn:
                _handle(conn, key, app)
            last = time.monotonic()
    finally:
        server.close()
        if not address.startswith("\0"):
            with contextlib.suppress(FileNotFoundError):
                os.unlink(address)


def _end_with(pid: int) -> None:
    """Exit this process once `pid` has ended, whatever its main thread is doing (a message's
    handler may run for minutes)."""
    while alive(pid):
        time.sleep(WATCH_S)
    os._exit(0)


def _handle(conn: Connection, key: bytes, app: Callable[[Message, Context], Message]) -> None:
    try:  # the same HMAC challenge, in the same order, as multiprocessing's Listener.accept
        deliver_challenge(conn, key)
        answer_challenge(conn, key)
        msg, context, identity = pickle.loads(conn.recv_bytes())
    except Exception:  # noqa: BLE001 - a peer without the key, or one that went away
        return
    set_task_identity(identity)
    _LAST.clear()
    try:
        reply = app(msg, context)
        payload = reply.error if reply.has_error() else reply.content
        answer = ("replied", payload, context.state, dict(_LAST))
    except Exception as err:  # noqa: BLE001 - the ClientApp process raises it in Flower's handler
        err.add_note(f"in the site worker (pid {os.getpid()}):\n{traceback.format_exc()}")
        answer = ("raised", _picklable(err), context.state, dict(_LAST))
    conn.send_bytes(pickle.dumps(answer))


def _picklable(err: Exception) -> Exception:
    try:
        pickle.loads(pickle.dumps(err))
        return err
    except Exception:  # noqa: BLE001
        return RuntimeError(f"{type(err).__name__}: {err}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="a deployed site's warm ClientApp worker")
    parser.add_argument("--address", required=True, help="socket address ('@' = abstract namespace)")
    parser.add_argument("--state-dir", required=True, type=Path)
    parser.add_argument("--parent-pid", required=True, type=int, help="exit when this process ends")
    parser.add_argument("--threads", required=True, type=int)
    parser.add_argument("--idle", required=True, type=float, help="exit after this many idle seconds")
    parser.add_argument("--app", default=APP, help=f"the ClientApp, module:attribute (default {APP})")
    args = parser.parse_args(argv)
    key = (args.state_dir / "worker" / "authkey").read_bytes()
    with contextlib.suppress(KeyboardInterrupt):
        serve(args.address.replace("@", "\0", 1) if args.address.startswith("@") else args.address,
              key, args.parent_pid, args.idle, args.threads, args.app)
    return 0


if __name__ == "__main__":  # run as client_app.worker, the module the ClientApp's mod lives in
    from client_app.worker import main as run_worker

    sys.exit(run_worker())
