"""Flower's ClientApp processes forked from a server that imported Flower once (issue 38).

Flower 1.41-1.42 starts a new ``flwr-clientapp`` process for every message a SuperNode receives (its
SuperExec runs the executable it finds on PATH, ``supercore/superexec/executor/subprocess_executor.py``),
and importing Flower there costs about 1 s of CPU (deploy/README.md), most of a message's overhead.
`write_launcher` writes an executable ``flwr-clientapp`` into a folder; a SuperNode whose PATH starts
with it (``deploy.launch`` does this; a site adds it to its own PATH) gets its ClientApp processes so:

1. The launcher (this file run by path with ``python -I -S``: the standard library only)
   connects to the fork server of its SuperExec: an abstract Unix socket named after this file's
   text, the real executable, its entry point, the Python, the SuperExec's pid (``--parent-pid``),
   the user and the environment. It talks only to a server of its own user (``SO_PEERCRED``).
2. The server imported Flower's ``flwr-clientapp`` entry point once. It reads a launcher's request
   (its stdin, stdout and stderr as file descriptors, arguments, environment, working directory),
   says it is ready, and forks only once the launcher confirms; the child runs the entry point as
   the executable would, in a process group of its own. The child's exit status is the launcher's;
   signals sent to the launcher go to the child (once: a signal to the SuperNode's group reaches the
   child through the launcher only).
3. The launcher runs the real ``flwr-clientapp`` itself wherever the server cannot serve before it
   confirmed: no server yet (it then starts one), a server that took 30 s, refused, failed to fork,
   or could not import Flower (it then refuses every request with that one line, which the launcher
   prints). After confirming it never does, so no message runs twice; a server lost between the
   confirmation and the child's pid costs that message (exit 1, one line). A launcher whose Python or
   this file is gone runs the real executable. Without ``--parent-pid`` it runs it as well.

The server accepts only peers of its own user and lives in the SuperNode's process group. It ignores
the signals a launcher forwards (a signal to that group ends each child through its launcher, and
the server then reports the child's status) and exits once its SuperExec is gone and its children
have ended, or on SIGKILL (``deploy.launch`` sends one to the group after its grace time). It forks
from its only Python thread (numpy's OpenBLAS pool, started by Flower's imports, is fork-safe
through OpenBLAS's own hooks). A child shares with its siblings only the modules imported before the
fork, never an app's code: Flower loads the app from its bundle in every child. Python's ``random``
reseeds itself in a child; numpy's global generator, if imported, is reseeded here. In a child,
``F3OCUS_CLIENTAPP`` is ``forked`` and ``F3OCUS_CLIENTAPP_STARTED`` the launcher's start
(`process_start_time`).
Linux only (abstract sockets, ``SO_PEERCRED``); elsewhere the launcher runs the real executable.

    python -m flower_compat.forkserver write-launcher <folder>
    PATH=<folder>:$PATH flower-supernode ...
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import select
import shlex
import shutil
import signal
import socket
import struct
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path

THIS = Path(__file__).resolve()
EXECUTABLE = "flwr-clientapp"
MARKER = f"# {EXECUTABLE} through a fork server (flower_compat/forkserver.py)"
LAUNCH_ENV, START_ENV = "F3OCUS_CLIENTAPP", "F3OCUS_CLIENTAPP_STARTED"
FORWARDED = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGQUIT, signal.SIGUSR1, signal.SIGUSR2)
SHELL_VARIABLES = frozenset({"PWD", "OLDPWD", "SHLVL", "_"})  # set by the launcher's /bin/sh, not its caller
TIMEOUT = 30.0  # seconds a launcher waits for the server to be ready (its import, a busy machine)
_SIZE, _INT = struct.Struct("!I"), struct.Struct("!i")
_CRED = struct.Struct("3i")  # struct ucred: pid, uid, gid
READY, GO, REFUSED = b"R", b"G", b"X"


def write_launcher(folder: Path, real: str | None = None, entry: str | None = None) -> Path:
    """Write ``<folder>/flwr-clientapp``, the launcher of `real` (default: the ``flwr-clientapp`` on
    PATH that is not a launcher) whose fork server runs `entry` (``module:function``; default: that
    executable's console-script entry point in this environment's Flower)."""
    folder = Path(folder).expanduser().resolve()
    real = real or _real_executable()
    entry = entry or _entry_point()
    python, this, real_q = shlex.quote(_interpreter(real)), shlex.quote(str(THIS)), shlex.quote(real)
    script = (f"#!/bin/sh\n{MARKER}\n"
              f"if [ -x {python} ] && [ -r {this} ]; then\n"
              f"    exec {python} -I -S {this} launch {real_q} {shlex.quote(entry)} \"$@\"\n"
              f"fi\nexec {real_q} \"$@\"\n")
    folder.mkdir(parents=True, exist_ok=True)
    target, staged = folder / EXECUTABLE, folder / f".{EXECUTABLE}.{os.getpid()}"
    staged.write_text(script)
    staged.chmod(0o755)
    staged.replace(target)
    return target


def is_launcher(path: str | Path) -> bool:
    """Whether `path` is a launcher `write_launcher` wrote."""
    try:
        with open(path, "rb") as fh:
            return MARKER.encode() in fh.read(256)
    except OSError:
        return False


def without_launchers(path: str) -> str:
    """A PATH value without the folders whose ``flwr-clientapp`` is a launcher."""
    return os.pathsep.join(p for p in path.split(os.pathsep) if not is_launcher(Path(p) / EXECUTABLE))


def _real_executable() -> str:
    found = shutil.which(EXECUTABLE, path=without_launchers(os.environ.get("PATH", "")))
    if found is None:
        raise FileNotFoundError(f"{EXECUTABLE}: not on PATH (launchers aside); is Flower installed here?")
    return str(Path(found).resolve())


def _interpreter(real: str) -> str:
    """The Python of `real`'s ``#!`` line (so a forked child's ``sys.executable`` is the one the
    executable would have), else this one."""
    try:
        with open(real, "rb") as fh:
            line = fh.readline(512).decode(errors="replace")
    except OSError:
        return sys.executable
    words = line[2:].split() if line.startswith("#!") else []
    if words and Path(words[0]).name.startswith("python") and os.access(words[0], os.X_OK):
        return words[0]
    return sys.executable


def _entry_point() -> str:
    from importlib.metadata import entry_points

    found = entry_points(group="console_scripts", name=EXECUTABLE)
    if not found:
        raise FileNotFoundError(f"{EXECUTABLE}: no console-script entry point in this environment")
    return next(iter(found)).value


def process_start_time() -> float:
    """Wall-clock time this ClientApp process started, to a clock tick: a forked child's launcher's
    (``F3OCUS_CLIENTAPP_STARTED``), else this process's. Linux: ``/proc/self/stat`` gives it in
    ticks since boot, measured back from ``CLOCK_BOOTTIME`` (the boot time of ``/proc/stat`` is whole
    seconds and put starts up to 1 s early). Elsewhere: when this module loaded."""
    if os.environ.get(LAUNCH_ENV) == "forked" and START_ENV in os.environ:
        return float(os.environ[START_ENV])
    try:
        ticks = int(Path("/proc/self/stat").read_text().rsplit(")", 1)[1].split()[19])
        return time.time() - (time.clock_gettime(time.CLOCK_BOOTTIME) - ticks / os.sysconf("SC_CLK_TCK"))
    except (OSError, ValueError, IndexError, AttributeError):
        return _LOADED


_LOADED = time.time()


# ---------------------------------------------------------------------- the launcher
class _NotServed(Exception):
    """The server will not fork for this request; the launcher runs the real executable."""


def launch(real: str, entry: str, args: Sequence[str]) -> int:
    """Run one ``flwr-clientapp`` through the fork server; the real executable where none serves."""
    parent, conn = parent_pid(args), None
    if parent is not None:
        address = _address(real, entry, parent)
        conn = _connect(address)
        if conn is None:
            _start_server(address, entry, parent, real, args)
    if conn is None:
        os.execv(real, [real, *args])
    signal.pthread_sigmask(signal.SIG_BLOCK, FORWARDED)  # until the child's pid is known
    with conn:
        try:
            _request(conn, real, args)
        except (OSError, EOFError, _NotServed) as err:
            print(f"{EXECUTABLE}: not forked ({err}); starting {real}", file=sys.stderr, flush=True)
            signal.pthread_sigmask(signal.SIG_UNBLOCK, FORWARDED)
            os.execv(real, [real, *args])
        conn.settimeout(None)
        try:
            child = _INT.unpack(_recv_exact(conn, _INT.size))[0]
        except (OSError, EOFError):
            print(f"{EXECUTABLE}: the fork server ended after taking the request", file=sys.stderr)
            return 1
        if child < 0:  # fork failed: no child exists
            signal.pthread_sigmask(signal.SIG_UNBLOCK, FORWARDED)
            os.execv(real, [real, *args])
        for signum in FORWARDED:
            signal.signal(signum, lambda s, _frame: _kill(child, s))
        signal.pthread_sigmask(signal.SIG_UNBLOCK, FORWARDED)
        try:
            code = _INT.unpack(_recv_exact(conn, _INT.size))[0]
        except (OSError, EOFError):
            print(f"{EXECUTABLE}: the fork server ended before child {child} did", file=sys.stderr)
            return 1
    if code < 0:  # the child died of a signal: so does the launcher
        signal.signal(-code, signal.SIG_DFL)
        os.kill(os.getpid(), -code)
    return code


def _request(conn: socket.socket, real: str, args: Sequence[str]) -> None:
    """Send the request; return once the server is ready and told to fork (raise before that)."""
    socket.send_fds(conn, [b"F"], [0, 1, 2])
    payload = json.dumps({"argv": [real, *args], "env": dict(os.environ), "cwd": os.getcwd(),
                          "started": process_start_time()}).encode()
    conn.sendall(_SIZE.pack(len(payload)) + payload)
    answer = _recv_exact(conn, 1)
    if answer == REFUSED:
        raise _NotServed(conn.recv(1000).decode(errors="replace") or "refused")
    if answer != READY:
        raise _NotServed(f"unexpected answer {answer!r}")
    conn.sendall(GO)


def parent_pid(args: Sequence[str]) -> int | None:
    """The SuperExec's pid, which Flower passes a ClientApp process as ``--parent-pid``."""
    for i, arg in enumerate(args):
        name, equals, value = arg.partition("=")
        if name == "--parent-pid":
            value = value if equals else (args[i + 1] if i + 1 < len(args) else "")
            return int(value) if value.isdigit() else None
    return None


def _address(real: str, entry: str, parent: int) -> str:
    env = sorted((k, v) for k, v in os.environ.items() if k not in SHELL_VARIABLES)
    key = json.dumps([hashlib.sha256(THIS.read_bytes()).hexdigest(), real, entry, sys.executable, parent,
                      os.getuid(), env])
    return f"\0f3ocus-clientapp-{hashlib.sha256(key.encode()).hexdigest()[:24]}"


def _connect(address: str) -> socket.socket | None:
    """A connection to a server of this user at `address`, or None."""
    if not sys.platform.startswith("linux"):
        return None
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    conn.settimeout(TIMEOUT)
    try:
        conn.connect(address)
        if _peer_uid(conn) == os.getuid():
            return conn
    except OSError:
        pass
    conn.close()
    return None


def _peer_uid(conn: socket.socket) -> int:
    return _CRED.unpack(conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, _CRED.size))[1]


def _start_server(address: str, entry: str, parent: int, real: str, args: Sequence[str]) -> None:
    """Start the fork server for later messages (best effort: this one runs the real executable).
    Its command line names the Runtime API address too, so ``ps`` (and ``deploy.launch``) tell whose."""
    if not sys.platform.startswith("linux"):
        return
    api = next((args[i + 1] for i, a in enumerate(args[:-1]) if a.endswith("-api-address")), "")
    # none of the launcher's streams: a caller reading them to their end would wait for the server
    with contextlib.suppress(OSError):
        subprocess.Popen([sys.executable, str(THIS), "serve", address.replace("\0", "@"), entry, str(parent),
                          real, api], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                         stderr=subprocess.DEVNULL, close_fds=True)


def _recv_exact(conn: socket.socket, size: int) -> bytes:
    data = b""
    while len(data) < size:
        chunk = conn.recv(size - len(data))
        if not chunk:
            raise EOFError("connection closed")
        data += chunk
    return data


def _kill(pid: int, signum: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signum)


# ---------------------------------------------------------------------- the fork server
def serve(address: str, entry: str, parent: int) -> None:
    """Fork a child running `entry` for every launcher of this user, until `parent` is gone."""
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        listener.bind(address)  # first: launchers queue in the backlog while Flower is imported
    except OSError:  # another launcher's server took the address
        return
    listener.listen(64)
    try:
        run: Callable[[], object] | str = load_entry(entry)
    except Exception as err:  # refuse every request with the reason, rather than die and be restarted
        run = f"the fork server cannot import {entry}: {type(err).__name__}: {err}".splitlines()[0]
    for signum in FORWARDED:  # a signal to the SuperNode's group ends the children via their launchers
        signal.signal(signum, signal.SIG_IGN)
    children: dict[int, socket.socket] = {}
    while children or alive(parent):
        ready, _, _ = select.select([listener], [], [], 0.1 if children else 1.0)
        if ready:
            _accept(listener, run, children)
        _reap(children)
    listener.close()


def load_entry(entry: str) -> Callable[..., object]:
    """The object an entry point ``module:attr[.attr]`` names (importing its module)."""
    import importlib

    module, _, name = entry.partition(":")
    function = importlib.import_module(module)
    for attr in name.split("."):
        function = getattr(function, attr)
    return function


def alive(pid: int) -> bool:
    """Whether process `pid` exists (a zombie counts)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # alive, another user's
        pass
    return True


def _accept(listener: socket.socket, run: Callable[[], object] | str,
            children: dict[int, socket.socket]) -> None:
    try:
        conn, _ = listener.accept()
    except OSError:
        return
    fds: list[int] = []
    try:
        conn.settimeout(TIMEOUT)
        if _peer_uid(conn) != os.getuid():
            raise PermissionError("a peer of another user")
        _, fds, _, _ = socket.recv_fds(conn, 1, 3)
        if len(fds) != 3:
            raise ValueError(f"{len(fds)} file descriptors")
        request = json.loads(_recv_exact(conn, _SIZE.unpack(_recv_exact(conn, _SIZE.size))[0]))
        if isinstance(run, str):
            conn.sendall(REFUSED + run.encode())
            raise ValueError(run)
        conn.sendall(READY)
        if _recv_exact(conn, 1) != GO:  # the launcher gave up and runs the executable itself
            raise ValueError("not confirmed")
    except (OSError, EOFError, ValueError):
        _drop(conn, fds)
        return
    sys.stdout.flush()
    sys.stderr.flush()
    try:
        pid = os.fork()
    except OSError:  # no child: the launcher may run the executable itself
        with contextlib.suppress(OSError):
            conn.sendall(_INT.pack(-1))
        _drop(conn, fds)
        return
    if pid == 0:
        listener.close()
        for other in (conn, *children.values()):
            other.close()
        _child(run, fds, request)  # raises SystemExit: the interpreter exits as the executable would
    for fd in fds:
        os.close(fd)
    with contextlib.suppress(OSError):
        conn.sendall(_INT.pack(pid))
    children[pid] = conn


def _drop(conn: socket.socket, fds: list[int]) -> None:
    for fd in fds:
        os.close(fd)
    conn.close()


def _child(run: Callable[[], object], fds: list[int], request: dict) -> None:
    os.setpgid(0, 0)  # signals reach it through its launcher, once
    for signum in FORWARDED:  # as in a new Python process
        signal.signal(signum, signal.default_int_handler if signum == signal.SIGINT else signal.SIG_DFL)
    for target, fd in enumerate(fds):  # received descriptors are >= 3: the server's 0-2 are open
        os.dup2(fd, target)
        os.close(fd)
    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["env"], **{LAUNCH_ENV: "forked", START_ENV: repr(request["started"])})
    sys.argv = list(request["argv"])
    if "numpy.random" in sys.modules:
        sys.modules["numpy.random"].seed()
    raise SystemExit(run())


def _reap(children: dict[int, socket.socket]) -> None:
    for pid in list(children):
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            conn = children.pop(pid)
            with contextlib.suppress(OSError):
                conn.sendall(_INT.pack(os.waitstatus_to_exitcode(status)))
            conn.close()


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    command = argv[:1]
    if command == ["launch"] and len(argv) >= 3:
        return launch(argv[1], argv[2], argv[3:])
    if command == ["serve"] and len(argv) == 6:
        sys.path[0] = str(Path(argv[4]).parent)  # the real executable's folder, not this one's
        serve(argv[1].replace("@", "\0", 1), argv[2], int(argv[3]))
        return 0
    if command == ["write-launcher"] and len(argv) == 2:
        print(write_launcher(Path(argv[1])))
        return 0
    print("usage: python -m flower_compat.forkserver write-launcher <folder>", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
