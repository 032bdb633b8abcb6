"""deploy.forkserver: ClientApp processes forked from a server, the executable where none serves.

The launcher runs a stand-in entry point (`ENTRY`, written to tmp_path) and a stand-in "real"
executable (a shell script); tests/deploy/test_deploy.py runs Flower's own through it.
Each test's server watches a `sleep` process of its own as its SuperExec, and ends with it.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import struct
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from deploy import forkserver
from tests.helpers.fork_group import ended, in_a_group

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux only")

ENTRY = '''
import json, os, signal, subprocess, sys, time
def main():
    if os.environ.get("MARK"):
        open(os.environ["MARK"], "w").close()
    record = next((a.split("=", 1)[1] for a in sys.argv if a.startswith("--grandchild=")), None)
    if record:  # a process of the app's own, as a subprocess or a multiprocessing worker is
        with open(record, "w") as fh:
            quiet = {"stdout": subprocess.DEVNULL, "stderr": subprocess.DEVNULL}  # so a reader sees EOF
            fh.write(str(subprocess.Popen(["sleep", "300"], **quiet).pid))
    log = next((a.split("=", 1)[1] for a in sys.argv if a.startswith("--term-log=")), None)
    if log:
        signal.signal(signal.SIGTERM, lambda *_: open(log, "a").write("TERM\\n"))
    print(json.dumps({"argv": sys.argv, "cwd": os.getcwd(), "env": os.environ.get("SITE_VALUE"),
                      "launch": os.environ.get("F3OCUS_CLIENTAPP"), "ppid": os.getppid(), "pid": os.getpid(),
                      "started": os.environ.get("F3OCUS_CLIENTAPP_STARTED"),
                      "executable": sys.executable}), flush=True)
    if log:  # count the SIGTERMs that arrive within 2 s of the first, then end normally
        end = time.monotonic() + 60
        while time.monotonic() < end:
            time.sleep(0.1)
            if os.path.exists(log):
                end = min(end, time.monotonic() + 2)
    time.sleep(60 if "--sleep" in sys.argv else 0)
    sys.exit(int(sys.argv[-1][len("--code="):]) if sys.argv[-1].startswith("--code=") else 0)
'''
REAL = "#!/bin/sh\necho \"started $*\"\nexit 5\n"


def standin_launcher(tmp_path, entry: str = "standin:main"):
    (tmp_path / "standin.py").write_text(ENTRY)
    real = tmp_path / "real-flwr-clientapp"
    real.write_text(REAL)
    real.chmod(0o755)
    return forkserver.write_launcher(tmp_path / "bin", real=str(real), entry=entry)


@pytest.fixture()
def superexec():
    """A SuperExec stand-in: the servers of a test watch it and end with it."""
    proc = subprocess.Popen(["sleep", "600"])
    yield proc
    proc.kill()
    proc.wait()


@pytest.fixture()
def site(tmp_path, superexec):
    """A launcher of the stand-ins, the environment it runs in, its arguments and SuperExec."""
    env = {"PATH": os.environ["PATH"], "PYTHONPATH": str(tmp_path), "SITE_VALUE": "a"}
    return standin_launcher(tmp_path), env, ["--token", "t", "--parent-pid", str(superexec.pid)], superexec


def run(launcher, env, args, **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run([str(launcher), *args], env=env, capture_output=True, text=True, timeout=60,
                          **kwargs)


def served(launcher, env, args, timeout: float = 30) -> subprocess.CompletedProcess:
    """The first launch execs the real executable and starts the server; wait until it forks."""
    deadline = time.monotonic() + timeout
    while True:
        done = run(launcher, env, args)
        if not done.stdout.startswith("started") or time.monotonic() > deadline:
            return done
        time.sleep(0.2)


def sleeping(launcher, env, args) -> tuple[subprocess.Popen, dict]:
    """Once the server forks, a launcher whose child sleeps (60 s), and what the child printed."""
    served(launcher, env, args)
    proc = subprocess.Popen([str(launcher), *args, "--sleep"], env=env, stdout=subprocess.PIPE, text=True)
    child = json.loads(proc.stdout.readline())
    assert child["launch"] == "forked"
    return proc, child


def servers(real: Path) -> list[int]:
    """Fork servers of `real` now running (forked children have the same command line: they are
    told apart by their parent being a server too)."""
    found = {}
    for proc in Path("/proc").glob("[0-9]*"):
        with contextlib.suppress(OSError):
            cmdline = (proc / "cmdline").read_bytes().split(b"\0")
            if b"serve" in cmdline and str(real).encode() in cmdline:
                found[int(proc.name)] = int((proc / "stat").read_text().rsplit(")", 1)[1].split()[1])
    return sorted(pid for pid, parent in found.items() if parent not in found)


def test_without_a_server_the_launcher_execs_the_real_executable_and_starts_one(site, tmp_path):
    launcher, env, args, _ = site
    first = run(launcher, env, args)
    assert (first.stdout, first.returncode) == ("started --token t --parent-pid "
                                                 f"{args[-1]}\n", 5)
    assert json.loads(served(launcher, env, args).stdout)["launch"] == "forked"


def test_a_forked_child_runs_with_the_launchers_arguments_environment_folder_and_exit_code(site, tmp_path):
    launcher, env, args, _ = site
    served(launcher, env, args)
    (tmp_path / "elsewhere").mkdir()
    before = time.time()
    done = run(launcher, env, [*args, "--more"], cwd=tmp_path / "elsewhere")
    child = json.loads(done.stdout)
    assert child["argv"] == [str(tmp_path / "real-flwr-clientapp"), *args, "--more"]
    assert child["cwd"] == str(tmp_path / "elsewhere") and child["env"] == "a"
    assert child["executable"] == sys.executable  # the real executable's (a shell script: ours)
    assert child["launch"] == "forked" and child["ppid"] != os.getpid()  # the server's child
    assert before - 0.1 <= float(child["started"]) <= time.time()  # the launcher's start
    assert done.returncode == 0
    assert run(launcher, env, [*args, "--code=7"]).returncode == 7
    # an environment of its own gets a server of its own
    assert run(launcher, {**env, "SITE_VALUE": "b"}, args).stdout.startswith("started")
    assert json.loads(served(launcher, {**env, "SITE_VALUE": "b"}, args).stdout)["env"] == "b"


def test_a_signal_to_the_launcher_ends_the_forked_child_and_the_launcher_with_it(site):
    proc, child = sleeping(*site[:3])
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=30) == -signal.SIGTERM
    assert ended(child["pid"], timeout=10)


def test_a_signal_to_the_supernodes_process_group_reaches_the_child_once(site, tmp_path):
    """The server and the launchers are in the SuperNode's process group, the child is not, and
    gets only the launcher's copy of a signal to that group."""
    launcher, env, args, _ = site
    log = tmp_path / "terms"
    group, child = in_a_group(launcher, env, args, f"--term-log={log}")
    assert child["launch"] == "forked"
    os.killpg(group.pid, signal.SIGTERM)
    assert group.wait(timeout=30) == 0  # the launcher: the child handled it and ended normally
    assert log.read_text() == "TERM\n"


def test_a_killed_launchers_child_is_ended(site):
    """The server ends the child's process group when its launcher's connection closes first."""
    proc, child = sleeping(*site[:3])
    proc.kill()
    proc.wait()
    assert ended(child["pid"], timeout=5)
    assert forkserver.alive(child["ppid"])  # the server goes on


def test_a_killed_supernode_group_ends_the_children(site):
    """SIGKILL to the SuperNode's group (``deploy.launch`` after its grace time) ends the server and
    the launchers at once, so no one is left to end the children: the kernel does
    (``PR_SET_PDEATHSIG``)."""
    launcher, env, args, _ = site
    group, child = in_a_group(launcher, env, args, "--sleep")
    assert child["launch"] == "forked"
    os.killpg(group.pid, signal.SIGKILL)
    assert group.wait(timeout=30) == -signal.SIGKILL
    assert ended(child["ppid"], timeout=5)  # the server
    assert ended(child["pid"], timeout=5)


@contextlib.contextmanager
def grandchild(record: Path) -> Iterator[int]:
    """The pid an app's own process wrote to `record`; SIGKILLed afterwards if a test left it."""
    pid = int(record.read_text())
    try:
        yield pid
    finally:
        if forkserver.alive(pid):
            os.kill(pid, signal.SIGKILL)


def test_a_killed_supernode_group_ends_the_processes_the_children_started(site, tmp_path):
    """A child's own processes do not inherit ``PR_SET_PDEATHSIG`` and outlive the server and the
    launchers, killed at once: the child's guard, outside the SuperNode's group, ends them."""
    launcher, env, args, _ = site
    group, child = in_a_group(launcher, env, args, f"--grandchild={tmp_path / 'pid'}", "--sleep")
    with grandchild(tmp_path / "pid") as pid:
        os.killpg(group.pid, signal.SIGKILL)
        assert group.wait(timeout=30) == -signal.SIGKILL
        assert ended(child["pid"], timeout=5)
        assert ended(pid, timeout=5), f"process {pid}, started by the killed child, still runs"


def test_the_processes_a_child_started_end_with_it(site, tmp_path):
    launcher, env, args, _ = site
    served(launcher, env, args)
    done = run(launcher, env, [*args, f"--grandchild={tmp_path / 'pid'}"])
    with grandchild(tmp_path / "pid") as pid:
        assert json.loads(done.stdout)["launch"] == "forked" and done.returncode == 0
        assert ended(pid, timeout=5), f"process {pid}, started by the ended child, still runs"


def test_the_server_and_its_children_end_with_their_superexec(site):
    """Even with the SuperExec left a zombie (Flower's SuperNode does not reap it)."""
    launcher, env, args, superexec = site
    proc, child = sleeping(launcher, env, args)
    superexec.kill()  # not reaped (the fixture does): a zombie
    assert ended(child["pid"], timeout=5) and ended(child["ppid"], timeout=5)  # and the server
    assert proc.wait(timeout=10) == -signal.SIGKILL  # the launcher mirrors its child
    assert run(launcher, env, args).stdout.startswith("started")  # and the launcher execs again


def test_a_stalled_peer_holds_up_no_other_launcher(site):
    """The server serves every connection at once: peers that send nothing, or half a request,
    wait out the server's 30 s alone."""
    launcher, env, args, _ = site
    server = json.loads(served(launcher, env, args).stdout)["ppid"]
    address = Path(f"/proc/{server}/cmdline").read_text().split("\0")[3].replace("@", "\0", 1)
    silent, halfway = (socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) for _ in range(2))
    with silent, halfway:
        for peer in (silent, halfway):
            peer.connect(address)
        socket.send_fds(halfway, [b"F"], [0, 1, 2])
        halfway.sendall(struct.pack("!I", 100) + b"{")
        start = time.monotonic()
        done = run(launcher, env, args)
        took = time.monotonic() - start
        assert json.loads(done.stdout)["launch"] == "forked"
        assert took < 5, f"a launch took {took:.1f} s beside stalled peers"  # 30 s if served in turn


def test_launchers_started_together_all_run_and_start_one_server(site, tmp_path):
    launcher, env, args, _ = site
    procs = [subprocess.Popen([str(launcher), *args], env=env, stdout=subprocess.PIPE, text=True)
             for _ in range(4)]
    assert sorted(p.wait(timeout=60) for p in procs) in ([0] * k + [5] * (4 - k) for k in range(4))
    for p in procs:
        p.stdout.close()
    served(launcher, env, args)
    assert len(servers(tmp_path / "real-flwr-clientapp")) == 1


def test_a_server_that_cannot_import_flower_refuses_with_the_reason_and_stays(tmp_path, superexec):
    launcher = standin_launcher(tmp_path, entry="no_such_module:main")
    env = {"PATH": os.environ["PATH"], "PYTHONPATH": str(tmp_path)}
    args = ["--parent-pid", str(superexec.pid)]
    assert run(launcher, env, args).stdout.startswith("started")  # starts the server
    deadline = time.monotonic() + 30
    while not (done := run(launcher, env, args)).stderr and time.monotonic() < deadline:
        time.sleep(0.2)
    assert done.stdout.startswith("started") and done.returncode == 5
    assert "cannot import no_such_module:main: ModuleNotFoundError" in done.stderr
    run(launcher, env, args)
    assert len(servers(tmp_path / "real-flwr-clientapp")) == 1  # not one per message


def test_a_launcher_without_parent_pid_or_without_this_module_runs_the_real_executable(tmp_path):
    launcher = standin_launcher(tmp_path)
    env = {"PATH": os.environ["PATH"], "PYTHONPATH": str(tmp_path)}
    assert run(launcher, env, ["--token", "t"]).stdout == "started --token t\n"
    time.sleep(0.5)
    assert servers(tmp_path / "real-flwr-clientapp") == []  # none tied to an unknown parent
    launcher.write_text(launcher.read_text().replace(str(forkserver.THIS), str(tmp_path / "moved.py")))
    assert run(launcher, env, ["--parent-pid", "1"]).stdout == "started --parent-pid 1\n"


def test_the_peers_check_each_others_user(tmp_path, monkeypatch):
    """Abstract socket names are public (/proc/net/unix): the server forks nothing for a peer of
    another user, and the launcher sends nothing to a server of another user."""
    address = f"\0f3ocus-test-{os.getpid()}"
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(address)
    listener.listen(4)
    with listener:
        assert forkserver._connect(address) is not None
        monkeypatch.setattr(forkserver.os, "getuid", lambda: os.geteuid() + 4242)
        assert forkserver._connect(address) is None
        for _ in range(2):  # the two connections above wait in the backlog: drop them
            listener.accept()[0].close()
        peer = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        peer.connect(address)
        socket.send_fds(peer, [b"F"], [0, 1, 2])
        request = json.dumps({"argv": ["x"], "env": {}, "cwd": "/", "started": 0.0}).encode()
        peer.sendall(struct.pack("!I", len(request)) + request + forkserver.GO)
        monkeypatch.setattr(forkserver.os, "fork", lambda: pytest.fail("forked for another user"))
        server = forkserver._Server(listener, lambda: None)
        assert server.poll() == [] and not server.peers
        with peer, contextlib.suppress(ConnectionResetError):  # closed with the request unread
            assert peer.recv(8) == b""  # nothing sent


def request_as(uid: int, address: str, env: dict[str, str]) -> bytes:
    """What the server answers a launcher's request made by a process of user `uid` (a forked
    child of this test, so no executable of /root is needed): ``answer:`` and the child's pid, or
    nothing after it where the server closed the connection."""
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            os.setuid(uid)
            conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            conn.connect(address.replace("@", "\0", 1))
            socket.send_fds(conn, [b"F"], [0, 1, 2])
            request = json.dumps({"argv": ["x"], "env": env, "cwd": "/", "started": 0.0}).encode()
            conn.sendall(struct.pack("!I", len(request)) + request)
            os.write(write, b"answer:" + conn.recv(4))
        except (BrokenPipeError, ConnectionResetError):  # closed while the request was sent
            os.write(write, b"answer:")
        except BaseException as err:
            os.write(write, repr(err).encode()[:60])
        finally:
            os._exit(0)
    os.close(write)
    answer = os.read(read, 64)
    os.close(read)
    os.waitpid(pid, 0)
    return answer


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to connect as another user")
def test_the_server_forks_nothing_for_another_user(site, tmp_path):
    """Abstract socket names are public (/proc/net/unix): a peer of another uid is refused."""
    launcher, env, args, _ = site
    server = json.loads(served(launcher, env, args).stdout)["ppid"]
    address = Path(f"/proc/{server}/cmdline").read_text().split("\0")[3]
    assert address.startswith("@f3ocus-clientapp-")
    mark = tmp_path / "forked-for-a-stranger"
    assert request_as(65534, address, {**env, "MARK": str(mark)}) == b"answer:"  # closed, no pid
    assert not mark.exists()
    assert json.loads(run(launcher, env, args).stdout)["launch"] == "forked"  # still serving us


def test_the_launcher_runs_flowers_executable_even_with_its_folder_first_on_path(tmp_path, monkeypatch):
    folder = tmp_path / "bin"
    subprocess.run([sys.executable, "-m", "deploy.forkserver", "write-launcher", str(folder)],
                   check=True, capture_output=True)
    monkeypatch.setenv("PATH", f"{folder}{os.pathsep}{os.environ['PATH']}")  # then written again
    script = forkserver.write_launcher(folder).read_text()
    real = shutil.which("flwr-clientapp", path=os.environ["PATH"].split(os.pathsep, 1)[1])
    assert f" launch {Path(real).resolve()} flwr.supernode.cli:flwr_clientapp " in script
    assert os.access(folder / "flwr-clientapp", os.X_OK)
