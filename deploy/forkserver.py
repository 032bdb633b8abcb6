"""Flower's ClientApp processes forked from a server that imported Flower once.

Flower 1.41-1.42 starts a new ``flwr-clientapp`` process for every message a SuperNode receives (its
SuperExec runs the executable it finds on PATH, ``supercore/superexec/executor/subprocess_executor.py``),
and importing Flower there costs about 1 s of CPU (deploy/README.md), most of a message's overhead.
`write_launcher` writes an executable ``flwr-clientapp`` into a folder; a SuperNode whose PATH starts
with it (``deploy.launch`` does this; a site adds it to its own PATH) gets its ClientApp processes so:

1. The launcher (this file run by path with ``python -I -S``: the standard library only)
   connects to the fork server of its SuperExec: an abstract Unix socket named after this file's
   text, the real executable, its entry point, the Python, the SuperExec's pid (``--parent-pid``),
   the user and the environment. It talks only to a server of its own user (``SO_PEERCRED``).
   Finding none, it binds that name itself and starts the server with the listening socket, so one
   server starts however many launchers find none at once: the others wait in its backlog, or run
   the real executable where the name was already taken.
2. The server imported Flower's ``flwr-clientapp`` entry point once. It reads a launcher's request
   (its stdin, stdout and stderr as file descriptors, arguments, environment, working directory,
   process group), says it is ready, and forks only once the launcher confirms; the child runs the
   entry point as the executable would, in a process group of its own (its guard's, see 3). The
   child's exit status is the launcher's; signals sent to the launcher go to the child (once: a
   signal to the SuperNode's group reaches the child through the launcher only). The server serves
   every launcher at once from its one thread (`selectors`): a peer that sends nothing, or half a
   request, waits out its 30 s without holding up any other launcher.
3. A child ends with those it serves, and so does every process it started in its process group:
   the kernel SIGKILLs the child when the server ends (``PR_SET_PDEATHSIG``, which watches the
   thread that forked it: the server's only one, so the whole server); the server SIGKILLs the
   child's group when the child ends, when its launcher's connection closes first (a killed
   launcher), and once the SuperExec has ended (a zombie counts as ended). That group's leader is
   the child's guard, forked by the server just before it: outside the SuperNode's group, holding
   nothing of the server's and blocking every signal but SIGKILL, it SIGKILLs the group once the
   server has ended (its own ``PR_SET_PDEATHSIG``), as the child's processes inherit none and a
   SIGKILL to the SuperNode's group leaves no server or launcher to end them. A process that leaves
   the group escapes it: a child's site worker joins the launcher's process group
   (``F3OCUS_CLIENTAPP_GROUP``, `launch_group`, see client_app/worker.py), so a signal to the
   SuperNode's group reaches it directly.
4. The launcher runs the real ``flwr-clientapp`` itself wherever the server cannot serve before it
   confirmed: no server yet (it then starts one), a server that took 30 s, refused, failed to fork,
   or could not import Flower (it then refuses every request with that one line, which the launcher
   prints). After confirming it never does, so no message runs twice; a server lost between the
   confirmation and the child's pid costs that message (exit 1, one line). A launcher whose Python or
   this file is gone runs the real executable. Without ``--parent-pid`` it runs it as well.

The server accepts only peers of its own user and lives in the SuperNode's process group. It ignores
the signals a launcher forwards (a signal to that group ends each child through its launcher, and
the server then reports the child's status) and exits once its SuperExec has ended, or on SIGKILL
(``deploy.launch`` sends one to the group after its grace time), its children's groups with it. Forking
from its only Python thread is safe (numpy's OpenBLAS pool, started by Flower's imports, is
fork-safe through OpenBLAS's own hooks). A child shares with its siblings only the modules imported
before the fork, never an app's code: Flower loads the app from its bundle in every child. Python's
``random`` reseeds itself in a child; numpy's global generator, if imported, is reseeded here. In a
child, ``F3OCUS_CLIENTAPP`` is ``forked``, ``F3OCUS_CLIENTAPP_STARTED`` the launcher's start
(`process_start_time`) and ``F3OCUS_CLIENTAPP_GROUP`` the launcher's process group.
Linux only (abstract sockets, ``SO_PEERCRED``, ``prctl``); elsewhere the launcher runs the real executable.

    python -m deploy.forkserver write-launcher <folder>
    PATH=<folder>:$PATH flower-supernode ...
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import selectors
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
from typing import NoReturn

THIS = Path(__file__).resolve()
EXECUTABLE = "flwr-clientapp"
MARKER = f"# {EXECUTABLE} through a fork server (deploy/forkserver.py)"
LAUNCH_ENV, START_ENV, GROUP_ENV = "F3OCUS_CLIENTAPP", "F3OCUS_CLIENTAPP_STARTED", "F3OCUS_CLIENTAPP_GROUP"
FORWARDED = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGQUIT, signal.SIGUSR1, signal.SIGUSR2)
SHELL_VARIABLES = frozenset({"PWD", "OLDPWD", "SHLVL", "_"})  # set by the launcher's /bin/sh, not its caller
TIMEOUT = 30.0  # seconds a launcher waits for the server to be ready (its import, a busy machine)
TICK, IDLE_TICK = 0.05, 0.5  # seconds between the server's looks for ended children and SuperExec
MAX_REQUEST = 1 << 24  # bytes of a request (arguments, environment)
PR_SET_PDEATHSIG = 1  # prctl(2)
GUARD_SIGNAL = signal.SIGUSR1  # a guard's parent-death signal, blocked and waited for
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


def launch_group() -> int:
    """The process group its SuperExec started this ClientApp process in, the one a signal to the
    SuperNode's group reaches: a forked child's launcher's (the child has a group of its own),
    else this process's."""
    if os.environ.get(LAUNCH_ENV) == "forked" and GROUP_ENV in os.environ:
        return int(os.environ[GROUP_ENV])
    return os.getpgrp()


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
        if -code != signal.SIGKILL:  # forwarded or ignored here (SIGPIPE); SIGKILL takes no handler
            signal.signal(-code, signal.SIG_DFL)
        os.kill(os.getpid(), -code)
    return code


def _request(conn: socket.socket, real: str, args: Sequence[str]) -> None:
    """Send the request; return once the server is ready and told to fork (raise before that)."""
    socket.send_fds(conn, [b"F"], [0, 1, 2])
    payload = json.dumps({"argv": [real, *args], "env": dict(os.environ), "cwd": os.getcwd(),
                          "started": process_start_time(), "group": os.getpgrp()}).encode()
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
    The launcher binds the address and hands the listening socket to the server, so of launchers
    that find no server at once one starts it and the others wait in its backlog (or, past a
    refused bind, run the real executable). The command line names the Runtime API address too,
    so ``ps`` (and ``deploy.launch``) tell whose."""
    if not sys.platform.startswith("linux"):
        return
    api = next((args[i + 1] for i, a in enumerate(args[:-1]) if a.endswith("-api-address")), "")
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as listener:
        try:
            listener.bind(address)
        except OSError:  # another launcher is starting the server
            return
        listener.listen(64)
        fd = listener.fileno()
        # none of the launcher's streams: a caller reading them to their end would wait for the server
        with contextlib.suppress(OSError):
            subprocess.Popen([sys.executable, str(THIS), "serve", address.replace("\0", "@"), entry,
                              str(parent), real, api, str(fd)], pass_fds=[fd], stdin=subprocess.DEVNULL,
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, close_fds=True)


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
def serve(listener: socket.socket, entry: str, parent: int) -> None:
    """Fork a child running `entry` for every launcher of this user on `listener` (bound and
    listening), until `parent` has ended; then end the children left."""
    try:
        run: Callable[[], object] | str = load_entry(entry)
    except Exception as err:  # refuse every request with the reason, rather than die and be restarted
        run = f"the fork server cannot import {entry}: {type(err).__name__}: {err}".splitlines()[0]
    for signum in FORWARDED:  # a signal to the SuperNode's group ends the children via their launchers
        signal.signal(signum, signal.SIG_IGN)
    server = _Server(listener, run)
    while alive(parent):
        for peer in server.poll():  # forked here, outside the server's handlers: see `_Server.fork`
            server.fork(peer)
    server.close()


def load_entry(entry: str) -> Callable[..., object]:
    """The object an entry point ``module:attr[.attr]`` names (importing its module)."""
    import importlib

    module, _, name = entry.partition(":")
    function = importlib.import_module(module)
    for attr in name.split("."):
        function = getattr(function, attr)
    return function


def alive(pid: int) -> bool:
    """Whether process `pid` is running: it exists and (Linux) is not a zombie, which no one may
    have reaped (Flower's SuperNode does not wait for its SuperExec)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False
    except (OSError, IndexError):  # no /proc: ask the kernel whether the pid exists
        pass
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # alive, another user's
        pass
    return True


class _Peer:
    """A launcher's connection: its request while it arrives, then the child forked for it."""

    def __init__(self, conn: socket.socket) -> None:
        self.conn = conn
        self.fds: list[int] = []  # the launcher's stdin, stdout and stderr, until the fork
        self.data = b""
        self.request: dict | None = None
        self.child: int | None = None
        self.guard: int | None = None  # the child's guard, the leader of its process group
        self.deadline = time.monotonic() + TIMEOUT  # to confirm its request

    def close(self) -> None:
        for fd in self.fds:
            os.close(fd)
        self.fds = []
        self.conn.close()


class _Server:
    """Every launcher's connection at once, in the server's one thread (`selectors`): a peer that
    stalls holds up no other, and each child is forked from the thread that lives as long as the
    server, which is the thread its ``PR_SET_PDEATHSIG`` watches."""

    def __init__(self, listener: socket.socket, run: Callable[[], object] | str) -> None:
        import ctypes

        self.prctl = ctypes.CDLL(None, use_errno=True).prctl
        self.listener, self.run = listener, run
        listener.setblocking(False)
        self.selector = selectors.DefaultSelector()
        self.selector.register(listener, selectors.EVENT_READ)
        self.peers: set[_Peer] = set()
        self.children: dict[int, _Peer] = {}
        self.guards: set[int] = set()  # those of ended children, until reaped

    def poll(self) -> list[_Peer]:
        """Wait up to `TICK` (`IDLE_TICK` without children) for launchers, answer them, drop those
        past their deadline, report ended children; return the peers that confirmed a request."""
        waiting = [peer for peer in self.peers if peer.child is None]
        now = time.monotonic()
        timeout = min([TICK if self.children else IDLE_TICK, *(peer.deadline - now for peer in waiting)])
        confirmed = []
        for key, _ in self.selector.select(max(timeout, 0.0)):
            if key.fileobj is self.listener:
                self._accept()
            elif self._read(key.data):
                confirmed.append(key.data)
        now = time.monotonic()
        for peer in waiting:
            if peer.deadline < now and peer not in confirmed:
                self._drop(peer)
        for pid in list(self.children):
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                self._ended(pid, status)
        for pid in list(self.guards):
            if os.waitpid(pid, os.WNOHANG)[0]:
                self.guards.discard(pid)
        return confirmed

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.listener.accept()
                if _peer_uid(conn) != os.getuid():  # abstract socket names are public
                    conn.close()
                    continue
            except OSError:  # BlockingIOError: none left
                return
            conn.setblocking(False)
            peer = _Peer(conn)
            self.peers.add(peer)
            self.selector.register(conn, selectors.EVENT_READ, peer)

    def _read(self, peer: _Peer) -> bool:
        """Take what `peer` sent; True once its launcher confirmed its request."""
        if peer.child is not None:  # a launcher sends nothing after confirming: this is its end
            try:
                gone = not peer.conn.recv(1)
            except BlockingIOError:
                return False
            except OSError:  # ECONNRESET: it ended with the child's pid unread
                gone = True
            if gone:
                self._abandon(peer)
            return False
        try:
            if not peer.fds:  # first the launcher's streams, on one byte
                message, peer.fds, _, _ = socket.recv_fds(peer.conn, 1, 3)
                if message != b"F" or len(peer.fds) != 3:
                    raise ValueError(f"{len(peer.fds)} file descriptors")
                return False
            chunk = peer.conn.recv(1 << 16)
            if not chunk:
                raise EOFError("connection closed")
            peer.data += chunk
            return self._answer(peer)
        except BlockingIOError:
            return False
        except (OSError, EOFError, ValueError):
            self._drop(peer)
            return False

    def _answer(self, peer: _Peer) -> bool:
        """Once the request is whole, say ready (or refuse); True once the launcher confirmed."""
        if peer.request is None:
            if len(peer.data) < _SIZE.size:
                return False
            end = _SIZE.size + _SIZE.unpack_from(peer.data)[0]
            if end > MAX_REQUEST:
                raise ValueError(f"a request of {end} bytes")
            if len(peer.data) < end:
                return False
            peer.request, peer.data = json.loads(peer.data[_SIZE.size:end]), peer.data[end:]
            if isinstance(self.run, str):
                peer.conn.sendall(REFUSED + self.run.encode())
                raise ValueError(self.run)
            peer.conn.sendall(READY)
        if not peer.data:
            return False
        if peer.data[:1] != GO:
            raise ValueError("not confirmed")
        return True

    def fork(self, peer: _Peer) -> None:
        """Fork `peer`'s guard, then its child into the guard's process group, and send the launcher
        the child's pid. The child leaves through this call with its entry point's `SystemExit`, so
        no handler of the server's may enclose it."""
        server = os.getpid()
        sys.stdout.flush()
        sys.stderr.flush()
        guard = -1
        try:
            guard = os.fork()
            if guard == 0:
                self._guard(server)
            os.setpgid(guard, guard)  # before the child joins it
            pid = os.fork()
        except OSError:  # no child: the launcher may run the executable itself
            if guard > 0:
                os.kill(guard, signal.SIGKILL)
                os.waitpid(guard, 0)
            with contextlib.suppress(OSError):
                peer.conn.sendall(_INT.pack(-1))
            self._drop(peer)
            return
        if pid == 0:
            self._leave(peer, server)
            _child(self.run, peer.fds, peer.request, guard)  # type: ignore[arg-type]  # refused if a str
        with contextlib.suppress(OSError):  # as the child does, so it is in the group `_abandon` ends
            os.setpgid(pid, guard)
        for fd in peer.fds:
            os.close(fd)
        peer.fds, peer.child, peer.guard = [], pid, guard
        self.children[pid] = peer
        with contextlib.suppress(OSError):
            peer.conn.sendall(_INT.pack(pid))

    def _close_inherited(self, keep: _Peer | None) -> None:
        """In a forked process: close the server's sockets and the launchers' connections and
        streams, but `keep`'s streams."""
        self.selector.close()
        self.listener.close()
        for peer in self.peers:
            if peer is keep:
                peer.conn.close()
            else:
                peer.close()

    def _set(self, option: int, value: int) -> None:
        if self.prctl(option, value, 0, 0, 0) != 0:
            import ctypes

            raise OSError(ctypes.get_errno(), f"prctl({option}, {value})")

    def _leave(self, peer: _Peer, server: int) -> None:
        """In a child: close what the server holds but its launcher's streams; have the kernel
        SIGKILL it when the server ends (a launcher's connection ends with the server too)."""
        self._close_inherited(peer)
        self._set(PR_SET_PDEATHSIG, int(signal.SIGKILL))
        if os.getppid() != server:  # the server ended before that took effect
            os.kill(os.getpid(), signal.SIGKILL)

    def _guard(self, server: int) -> NoReturn:
        """In a guard: lead a process group, hold nothing of the server's, take no signal but
        SIGKILL, and once the server has ended, SIGKILL that group: the child and what it started."""
        try:
            os.setpgid(0, 0)  # first: a group signal from here must never reach the SuperNode's
            self._close_inherited(None)
            signal.pthread_sigmask(signal.SIG_BLOCK, signal.valid_signals())
            signal.signal(GUARD_SIGNAL, signal.SIG_DFL)  # the server ignores it: it could be discarded
            self._set(PR_SET_PDEATHSIG, int(GUARD_SIGNAL))  # blocked: `sigwait` takes it
            while os.getppid() == server:
                signal.sigwait({GUARD_SIGNAL})
            os.killpg(os.getpid(), signal.SIGKILL)
        finally:
            os._exit(0)

    def _end_group(self, peer: _Peer) -> None:
        """SIGKILL `peer`'s child's process group: the child, its guard and what the child started."""
        with contextlib.suppress(ProcessLookupError):
            os.killpg(peer.guard, signal.SIGKILL)  # type: ignore[arg-type]  # set with the child

    def _abandon(self, peer: _Peer) -> None:
        """The launcher ended before its child (it was killed): end the child's process group."""
        self._end_group(peer)
        self._drop(peer)

    def _ended(self, pid: int, status: int) -> None:
        """The child ended: end its process group, tell its launcher. Its guard is reaped from now
        on, never before the child, so the group's id is not reused while the server may signal it."""
        peer = self.children.pop(pid)
        self._end_group(peer)
        self.guards.add(peer.guard)  # type: ignore[arg-type]  # set with the child
        if peer in self.peers:  # its launcher is still there
            with contextlib.suppress(OSError):
                peer.conn.sendall(_INT.pack(os.waitstatus_to_exitcode(status)))
            self._drop(peer)

    def _drop(self, peer: _Peer) -> None:
        if peer in self.peers:
            self.peers.discard(peer)
            self.selector.unregister(peer.conn)
            peer.close()

    def close(self) -> None:
        """The SuperExec ended: end every child's process group, tell their launchers, stop."""
        self.selector.unregister(self.listener)
        self.listener.close()
        for peer in self.children.values():
            self._end_group(peer)
        for pid in list(self.children):
            self._ended(pid, os.waitpid(pid, 0)[1])
        for pid in self.guards:
            os.waitpid(pid, 0)
        for peer in list(self.peers):
            self._drop(peer)
        self.selector.close()


def _child(run: Callable[[], object], fds: list[int], request: dict, group: int) -> None:
    os.setpgid(0, group)  # signals reach it through its launcher, once; its guard ends the group
    for signum in FORWARDED:  # as in a new Python process
        signal.signal(signum, signal.default_int_handler if signum == signal.SIGINT else signal.SIG_DFL)
    for target, fd in enumerate(fds):  # received descriptors are >= 3: the server's 0-2 are open
        os.dup2(fd, target)
        os.close(fd)
    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["env"], **{LAUNCH_ENV: "forked", START_ENV: repr(request["started"]),
                                         GROUP_ENV: str(request["group"])})
    sys.argv = list(request["argv"])
    if "numpy.random" in sys.modules:
        sys.modules["numpy.random"].seed()
    raise SystemExit(run())


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    command = argv[:1]
    if command == ["launch"] and len(argv) >= 3:
        return launch(argv[1], argv[2], argv[3:])
    if command == ["serve"] and len(argv) == 7:  # address, entry, parent, real, api, listening fd
        sys.path[0] = str(Path(argv[4]).parent)  # the real executable's folder, not this one's
        serve(socket.socket(fileno=int(argv[6])), argv[2], int(argv[3]))
        return 0
    if command == ["write-launcher"] and len(argv) == 2:
        print(write_launcher(Path(argv[1])))
        return 0
    print("usage: python -m deploy.forkserver write-launcher <folder>", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
