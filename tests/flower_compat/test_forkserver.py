"""flower_compat.forkserver: ClientApp processes forked from a server, the executable where none serves.

The launcher runs a stand-in entry point (`ENTRY`, written to tmp_path) and a stand-in "real"
executable (a shell script); tests/deploy/test_deploy.py runs Flower's own through it.
Each test's server watches a `sleep` process of its own as its SuperExec, and ends with it.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import struct
import subprocess
import sys
import time
from pathlib import Path

import pytest

from flower_compat import forkserver

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux only")

ENTRY = '''
import json, os, sys, time
def main():
    if os.environ.get("MARK"):
        open(os.environ["MARK"], "w").close()
    print(json.dumps({"argv": sys.argv, "cwd": os.getcwd(), "env": os.environ.get("SITE_VALUE"),
                      "launch": os.environ.get("F3OCUS_CLIENTAPP"), "ppid": os.getppid(),
                      "executable": sys.executable}), flush=True)
    time.sleep(60 if "--sleep" in sys.argv else 0)
    sys.exit(int(sys.argv[-1][len("--code="):]) if sys.argv[-1].startswith("--code=") else 0)
'''
REAL = "#!/bin/sh\necho \"started $*\"\nexit 5\n"


@pytest.fixture()
def site(tmp_path):
    """A launcher of the stand-ins, the environment it runs in, and a SuperExec stand-in."""
    (tmp_path / "standin.py").write_text(ENTRY)
    real = tmp_path / "real-flwr-clientapp"
    real.write_text(REAL)
    real.chmod(0o755)
    launcher = forkserver.write_launcher(tmp_path / "bin", real=str(real), entry="standin:main")
    superexec = subprocess.Popen(["sleep", "600"])
    env = {"PATH": os.environ["PATH"], "PYTHONPATH": str(tmp_path), "SITE_VALUE": "a"}
    args = ["--token", "t", "--parent-pid", str(superexec.pid)]
    yield launcher, env, args, superexec
    superexec.kill()
    superexec.wait()


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
    done = run(launcher, env, [*args, "--more"], cwd=tmp_path / "elsewhere")
    child = json.loads(done.stdout)
    assert child["argv"] == [str(tmp_path / "real-flwr-clientapp"), *args, "--more"]
    assert child["cwd"] == str(tmp_path / "elsewhere") and child["env"] == "a"
    assert child["launch"] == "forked" and child["ppid"] != os.getpid()  # the server's child
    assert done.returncode == 0
    assert run(launcher, env, [*args, "--code=7"]).returncode == 7
    # an environment of its own gets a server of its own
    assert run(launcher, {**env, "SITE_VALUE": "b"}, args).stdout.startswith("started")
    assert json.loads(served(launcher, {**env, "SITE_VALUE": "b"}, args).stdout)["env"] == "b"


def test_a_signal_to_the_launcher_reaches_the_forked_child(site):
    launcher, env, args, _ = site
    served(launcher, env, args)
    proc = subprocess.Popen([str(launcher), *args, "--sleep"], env=env, stdout=subprocess.PIPE, text=True)
    child = json.loads(proc.stdout.readline())
    assert child["launch"] == "forked"
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=30) == 128 + signal.SIGTERM


def test_the_server_ends_with_its_superexec(site):
    launcher, env, args, superexec = site
    server = json.loads(served(launcher, env, args).stdout)["ppid"]
    superexec.kill()
    superexec.wait()
    deadline = time.monotonic() + 30
    while os.path.exists(f"/proc/{server}") and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not os.path.exists(f"/proc/{server}")
    assert run(launcher, env, args).stdout.startswith("started")  # and the launcher execs again


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
            request = json.dumps({"argv": ["x"], "env": env, "cwd": "/"}).encode()
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
    subprocess.run([sys.executable, "-m", "flower_compat.forkserver", "write-launcher", str(folder)],
                   check=True, capture_output=True)
    monkeypatch.setenv("PATH", f"{folder}{os.pathsep}{os.environ['PATH']}")  # then written again
    script = forkserver.write_launcher(folder).read_text()
    real = shutil.which("flwr-clientapp", path=os.environ["PATH"].split(os.pathsep, 1)[1])
    assert f" launch {Path(real).resolve()} flwr.supernode.cli:flwr_clientapp " in script
    assert os.access(folder / "flwr-clientapp", os.X_OK)
