"""Flower's ClientApp processes forked from a server that imported Flower once (issue 38).

Flower 1.41-1.42 starts a new ``flwr-clientapp`` process for every message a SuperNode receives (its
SuperExec runs the executable it finds on PATH, ``supercore/superexec/executor/subprocess_executor.py``),
and importing Flower there costs about 1 s of CPU (deploy/README.md), most of a message's overhead.
`write_launcher` writes an executable ``flwr-clientapp`` into a folder; a SuperNode whose PATH starts
with it (``deploy.launch`` does this; a site adds it to its own PATH) gets its ClientApp processes so:

1. The launcher (this file run by path with ``python -I -S``: the standard library only, ~20 ms)
   connects to the fork server of its SuperExec: an abstract Unix socket named after the real
   executable, its entry point, the Python, the SuperExec's pid, the user and the environment.
2. The server imported Flower's ``flwr-clientapp`` entry point once. For each launcher it forks a
   child that takes the launcher's stdin, stdout and stderr (passed as file descriptors), arguments,
   environment and working directory, and runs the entry point as the executable would; the child's
   exit status becomes the launcher's, and signals sent to the launcher go to the child.
3. If no server answers, the launcher starts one and execs the real ``flwr-clientapp``: that message
   runs exactly as without the launcher, and so does any message whose request cannot be delivered.

The server accepts only peers of its own user (``SO_PEERCRED``), is single-threaded (so forking it is
safe), and exits when its SuperExec is gone; it is in the SuperNode's process group, so stopping that
group stops it and its children. A child shares with its siblings only the Flower modules imported
before the fork, never an app's code: Flower loads the app from its bundle in every child. Python's
``random`` reseeds itself in a child; numpy's global generator, if imported, is reseeded here. In a
child the environment variable ``F3OCUS_CLIENTAPP`` is ``forked`` (``client_app.worker`` records it).
Linux only (abstract sockets, ``SO_PEERCRED``); elsewhere the launcher always execs the real executable.

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
from collections.abc import Callable, Sequence
from pathlib import Path

THIS = Path(__file__).resolve()
EXECUTABLE = "flwr-clientapp"
LAUNCH_ENV = "F3OCUS_CLIENTAPP"  # "forked" in a child of the fork server
FORWARDED = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGQUIT, signal.SIGUSR1, signal.SIGUSR2)
SHELL_VARIABLES = frozenset({"PWD", "OLDPWD", "SHLVL", "_"})  # set by the launcher's /bin/sh, not its caller
_SIZE, _INT = struct.Struct("!I"), struct.Struct("!i")
_CRED = struct.Struct("3i")  # struct ucred: pid, uid, gid


def write_launcher(folder: Path, real: str | None = None, entry: str | None = None) -> Path:
    """Write ``<folder>/flwr-clientapp``, the launcher of `real` (default: the ``flwr-clientapp`` on
    PATH outside `folder`) whose fork server runs `entry` (``module:function``; default: that
    executable's console-script entry point in this environment's Flower)."""
    folder = Path(folder).expanduser().resolve()
    real = real or _real_executable(folder)
    entry = entry or _entry_point()
    folder.mkdir(parents=True, exist_ok=True)
    script = (f"#!/bin/sh\n# {EXECUTABLE} through a fork server (flower_compat/forkserver.py)\n"
              f"exec {shlex.quote(_interpreter(real))} -I -S {shlex.quote(str(THIS))} launch "
              f"{shlex.quote(real)} {shlex.quote(entry)} \"$@\"\n")
    target, staged = folder / EXECUTABLE, folder / f".{EXECUTABLE}.{os.getpid()}"
    staged.write_text(script)
    staged.chmod(0o755)
    staged.replace(target)
    return target


def _real_executable(folder: Path) -> str:
    path = os.pathsep.join(p for p in os.environ.get("PATH", "").split(os.pathsep)
                           if p and Path(p).expanduser().resolve() != folder)
    found = shutil.which(EXECUTABLE, path=path)
    if found is None:
        raise FileNotFoundError(f"{EXECUTABLE}: not on PATH (outside {folder}); is Flower installed here?")
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


# ---------------------------------------------------------------------- the launcher
def launch(real: str, entry: str, args: Sequence[str]) -> int:
    """Run one ``flwr-clientapp`` through the fork server; exec `real` where none serves."""
    parent = parent_pid(args)
    address = _address(real, entry, parent)
    conn = _connect(address)
    if conn is None:
        _start_server(address, entry, parent, real)
        os.execv(real, [real, *args])
    with conn:
        try:
            socket.send_fds(conn, [b"F"], [0, 1, 2])
            payload = json.dumps({"argv": [real, *args], "env": dict(os.environ),
                                  "cwd": os.getcwd()}).encode()
            conn.sendall(_SIZE.pack(len(payload)) + payload)
            child = _INT.unpack(_recv_exact(conn, _INT.size))[0]
        except (OSError, EOFError) as err:  # not delivered: the server forks only after a whole request
            print(f"{EXECUTABLE}: the fork server took no request ({err!r}); starting {real}",
                  file=sys.stderr, flush=True)
            os.execv(real, [real, *args])
        for signum in FORWARDED:
            signal.signal(signum, lambda s, _frame: _kill(child, s))
        try:
            return _INT.unpack(_recv_exact(conn, _INT.size))[0]
        except (OSError, EOFError):
            print(f"{EXECUTABLE}: fork server ended before child {child} did", file=sys.stderr)
            return 1


def parent_pid(args: Sequence[str]) -> int:
    """The SuperExec's pid, which Flower passes a ClientApp process as ``--parent-pid`` (a forked
    child's parent is the fork server), else this process's parent."""
    for i, arg in enumerate(args):
        if arg == "--parent-pid" and i + 1 < len(args) and args[i + 1].isdigit():
            return int(args[i + 1])
        if arg.startswith("--parent-pid=") and arg.split("=", 1)[1].isdigit():
            return int(arg.split("=", 1)[1])
    return os.getppid()


def _address(real: str, entry: str, parent: int) -> str:
    env = sorted((k, v) for k, v in os.environ.items() if k not in SHELL_VARIABLES)
    key = json.dumps([real, entry, sys.executable, parent, os.getuid(), env])
    return f"\0f3ocus-clientapp-{hashlib.sha256(key.encode()).hexdigest()[:24]}"


def _connect(address: str) -> socket.socket | None:
    if not sys.platform.startswith("linux"):
        return None
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        conn.connect(address)
    except OSError:
        conn.close()
        return None
    return conn


def _start_server(address: str, entry: str, parent: int, real: str) -> None:
    """Start the fork server for later messages (best effort: this one execs the real executable)."""
    if not sys.platform.startswith("linux"):
        return
    # none of the launcher's streams: a caller reading them to their end would wait for the server
    with contextlib.suppress(OSError):
        subprocess.Popen([sys.executable, str(THIS), "serve", address.replace("\0", "@"), entry, str(parent),
                          real], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
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
    run = _load(entry)
    children: dict[int, socket.socket] = {}
    while _alive(parent):
        ready, _, _ = select.select([listener], [], [], 0.1 if children else 1.0)
        if ready:
            _accept(listener, run, children)
        _reap(children)
    listener.close()


def _load(entry: str) -> Callable[[], object]:
    import importlib

    module, _, name = entry.partition(":")
    function = importlib.import_module(module)
    for attr in name.split("."):
        function = getattr(function, attr)
    return function


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # alive, another user's
        pass
    return True


def _accept(listener: socket.socket, run: Callable[[], object], children: dict[int, socket.socket]) -> None:
    conn, _ = listener.accept()
    fds: list[int] = []
    try:
        conn.settimeout(10)
        _, uid, _ = _CRED.unpack(conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, _CRED.size))
        if uid != os.getuid():
            raise PermissionError(f"peer of uid {uid}")
        _, fds, _, _ = socket.recv_fds(conn, 1, 3)
        if len(fds) != 3:
            raise ValueError(f"{len(fds)} file descriptors")
        request = json.loads(_recv_exact(conn, _SIZE.unpack(_recv_exact(conn, _SIZE.size))[0]))
    except (OSError, EOFError, ValueError):  # the launcher says so and starts the executable
        for fd in fds:
            os.close(fd)
        conn.close()
        return
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
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


def _child(run: Callable[[], object], fds: list[int], request: dict) -> None:
    for target, fd in enumerate(fds):  # received descriptors are >= 3: the server's 0-2 are open
        os.dup2(fd, target)
        os.close(fd)
    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["env"], **{LAUNCH_ENV: "forked"})
    sys.argv = list(request["argv"])
    if "numpy" in sys.modules:
        sys.modules["numpy"].random.seed()
    run()
    raise SystemExit(0)


def _reap(children: dict[int, socket.socket]) -> None:
    for pid in list(children):
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            code = os.waitstatus_to_exitcode(status)
            conn = children.pop(pid)
            with contextlib.suppress(OSError):
                conn.sendall(_INT.pack(code if code >= 0 else 128 - code))
            conn.close()


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    command = argv[:1]
    if command == ["launch"] and len(argv) >= 3:
        return launch(argv[1], argv[2], argv[3:])
    if command == ["serve"] and len(argv) == 5:
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
