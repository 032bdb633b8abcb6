"""client_app.worker: a deployed site's messages run in one warm worker process, or here."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from multiprocessing import AuthenticationError
from pathlib import Path

import pytest
import torch
from flwr.supercore.task_identity import TaskIdentity

from client_app import worker
from deploy import forkserver
from tests.helpers.fork_group import ended, in_a_group
from tests.helpers.worker_app import APP, app, context, message

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(autouse=True)
def identity():
    TaskIdentity.run_id, TaskIdentity.task_id, TaskIdentity.node_id = 11, 12, 13


def timings(state_dir) -> list[dict]:
    return [json.loads(line) for line in (state_dir / "timings.jsonl").read_text().splitlines()]


def reap(pid: int, timeout: float) -> bool:
    """Wait for our child `pid` to end and collect it; True if it ended."""
    deadline = time.monotonic() + timeout
    while os.waitpid(pid, os.WNOHANG)[0] != pid:
        if time.monotonic() > deadline:
            return False
        time.sleep(0.2)
    return True


def test_a_site_without_state_dir_runs_the_handler_here_untouched(tmp_path):
    reply = app(message(3), context(**{"partition-id": 0}))
    assert reply.content["echo"]["pid"] == os.getpid() and reply.content["echo"]["x"] == 3
    assert not list(tmp_path.iterdir())


def test_worker_idle_0_runs_here_with_the_sites_threads_and_records_the_message(tmp_path):
    """Two threads: the suite runs torch on one (tests/conftest.py), so one would prove nothing."""
    threads = torch.get_num_threads()
    try:
        ctx = context(**{"state-dir": str(tmp_path), "worker-idle": 0, "num-threads": 2})
        reply = app(message(4, sleep=0.2), ctx)
        assert reply.content["echo"]["pid"] == os.getpid()
        assert reply.content["echo"]["threads"] == 2
    finally:
        torch.set_num_threads(threads)
    (row,) = timings(tmp_path)
    assert row["where"] == "process" and row["run-id"] == 7 and row["message"] == "query.echo"
    assert row["round"] == 1 and row["work"] >= 0.2  # the handler's own sleep
    assert row["overhead"] >= row["start-to-handler"] > 0


def test_messages_share_one_warm_worker_that_keeps_state_raises_and_idles_out(tmp_path, monkeypatch):
    monkeypatch.setattr(worker, "APP", APP)
    # two threads: the worker inherits the suite's OMP_NUM_THREADS=1 (tests/conftest.py)
    ctx = context(**{"state-dir": str(tmp_path), "num-threads": 2, "worker-idle": 5})
    first = app(message(1), ctx).content["echo"]
    ended = False
    try:
        assert first["pid"] != os.getpid() and first["threads"] == 2 and first["x"] == 1
        second = app(message(2), ctx).content["echo"]
        assert second["pid"] == first["pid"] and second["calls"] == 2  # context.state came back
        with pytest.raises(KeyError, match="boom") as raised:  # the handler's own exception, here
            app(message(3, fail=True), ctx)
        assert f"site worker (pid {first['pid']})" in "".join(raised.value.__notes__)
        address, key, _ = worker._endpoint(tmp_path.resolve(), 2)
        assert (tmp_path / "worker" / "authkey").stat().st_mode & 0o077 == 0
        with pytest.raises(AuthenticationError):
            worker._connect(address, b"not the site's key")
        assert app(message(4), ctx).content["echo"]["pid"] == first["pid"]  # still serving
        rows = timings(tmp_path)
        assert [r["where"] for r in rows] == ["worker"] * 3 and all(r["overhead"] > 0 for r in rows)
        ended = reap(int(first["pid"]), timeout=60)
        assert ended, "the worker did not exit after worker-idle"
    finally:
        if not ended:
            os.kill(int(first["pid"]), 9)
            reap(int(first["pid"]), timeout=10)


def test_the_worker_ends_with_its_superexec_even_during_a_message(tmp_path, monkeypatch):
    monkeypatch.setattr(worker, "APP", APP)
    superexec = subprocess.Popen(["sleep", "600"])
    monkeypatch.setattr(sys, "argv", ["flwr-clientapp", "--parent-pid", str(superexec.pid)])
    ctx = context(**{"state-dir": str(tmp_path), "num-threads": 1, "worker-idle": 60})
    mark, failures = tmp_path / "handler-started", []

    def long_message() -> None:
        try:
            app(message(1, sleep=60, mark=str(mark)), ctx)
        except RuntimeError as err:
            failures.append(str(err))

    thread = threading.Thread(target=long_message)
    thread.start()
    pid, ended = None, False
    try:
        deadline = time.monotonic() + 60  # the worker's start: its imports
        while not (mark.exists() and mark.read_text()) and time.monotonic() < deadline:
            time.sleep(0.05)
        pid = int(mark.read_text())
        superexec.kill()
        superexec.wait()
        ended = reap(pid, timeout=5)
        assert ended, "the worker went on with its message after its SuperExec ended"
        thread.join(timeout=10)
        assert failures == ["the site worker ended during a query.echo message (EOFError); "
                            "see the SuperNode's log"]
    finally:
        superexec.kill()
        superexec.wait()
        if pid and not ended:
            os.kill(pid, signal.SIGKILL)
            reap(pid, timeout=10)
        thread.join(timeout=10)


def test_a_signal_to_the_supernodes_group_reaches_the_worker_of_a_forked_clientapp(tmp_path):
    """A forked ClientApp process has a process group of its own; the worker it starts joins its
    launcher's, the SuperNode's, so a site's Ctrl-C there reaches the worker, not only through
    its SuperExec's end (which this SuperExec, outside the group, does not give it)."""
    real = tmp_path / "real-flwr-clientapp"
    real.write_text("#!/bin/sh\necho started\n")
    real.chmod(0o755)
    launcher = forkserver.write_launcher(tmp_path / "bin", real=str(real),
                                         entry="tests.helpers.worker_app:forked_clientapp")
    env = {"PATH": os.environ["PATH"], "PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1"}
    superexec = subprocess.Popen(["sleep", "600"])
    group, pid = None, None
    try:
        group, echo = in_a_group(launcher, env, ["--parent-pid", str(superexec.pid),
                                                 f"--state-dir={tmp_path / 'state'}"])
        pid = int(echo["pid"])  # the worker's: forked_clientapp sent its message there
        assert os.getpgid(pid) == group.pid
        os.killpg(group.pid, signal.SIGINT)
        assert ended(pid, timeout=10), "the worker missed a signal to its SuperNode's group"
    finally:
        if pid and forkserver.alive(pid):
            os.kill(pid, signal.SIGKILL)
        superexec.kill()
        superexec.wait()
        if group is not None:
            group.wait(timeout=30)


@pytest.mark.parametrize("key, value, match", [
    ("num-threads", -1, "num-threads = -1"),
    ("num-threads", "4", "num-threads = '4'"),
    ("worker-idle", -2.0, "worker-idle = -2.0"),
    ("worker-idle", "long", "worker-idle = 'long'"),
])
def test_bad_node_settings_name_the_setting_and_value(key, value, match):
    check = worker.num_threads if key == "num-threads" else worker.worker_idle
    with pytest.raises(ValueError, match=match):
        check(context(**{key: value}))


def test_default_threads_are_the_cores_this_process_may_use():
    assert worker.num_threads(context()) == len(os.sched_getaffinity(0))
    assert worker.num_threads(context(**{"num-threads": 3})) == 3


def test_process_start_time_is_when_the_process_began_to_a_clock_tick():
    """A forked child dates its own start; the boot time of /proc/stat is whole seconds, which put
    starts up to 1 s early (0.77 s seen on one machine)."""
    read, write = os.pipe()
    before = time.time()
    pid = os.fork()
    if pid == 0:
        os.write(write, repr(worker.process_start_time()).encode())
        os._exit(0)
    after = time.time()
    os.close(write)
    started = float(os.read(read, 64))
    os.close(read)
    os.waitpid(pid, 0)
    tick = 1 / os.sysconf("SC_CLK_TCK")
    assert before - 2 * tick <= started <= after + 2 * tick, (before, started, after)
