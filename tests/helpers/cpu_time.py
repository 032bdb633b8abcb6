"""CPU seconds of a command and of every process it starts, on a machine others are using too.

    python tests/helpers/cpu_time.py python -m pytest -q -n 1 -p no:randomly tests/deploy/test_deploy.py

`/usr/bin/time` counts only the descendants that their parents wait for; a federation's or a Ray
cluster's daemons are orphaned (``ray start`` exits, SuperExec processes outlive their parents) and
their CPU would be lost. Here this process becomes their child subreaper (Linux ``prctl``
PR_SET_CHILD_SUBREAPER), so every orphan is re-parented to it and reaped by it, and
``RUSAGE_CHILDREN`` ends up holding the user + system time of the whole tree. Unlike
tests/helpers/suite_cpu.sh (whole-machine /proc/stat), other users' work does not count, so before/after
comparisons of one test file hold on a loaded machine. ``-n 1`` runs the file in one xdist worker, with
torch on one thread as in the suite (tests/conftest.py).
"""

from __future__ import annotations

import ctypes
import os
import resource
import subprocess
import sys
import time

PR_SET_CHILD_SUBREAPER = 36


def main(command: list[str]) -> int:
    if not command:
        raise SystemExit("usage: python tests/helpers/cpu_time.py COMMAND [ARGS...]")
    if ctypes.CDLL(None, use_errno=True).prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:
        raise SystemExit(f"prctl(PR_SET_CHILD_SUBREAPER) failed: {os.strerror(ctypes.get_errno())}")
    start = time.monotonic()
    proc = subprocess.Popen(command)
    status = None
    while True:  # reap the command and every orphan handed to us until no child is left
        try:
            pid, code = os.wait()
        except ChildProcessError:
            break
        if pid == proc.pid:
            status = os.waitstatus_to_exitcode(code)
            proc.returncode = status  # already reaped: keep Popen from waiting again
    used = resource.getrusage(resource.RUSAGE_CHILDREN)
    print(f"cpu_time: {used.ru_utime + used.ru_stime:.1f} s CPU (user {used.ru_utime:.1f}, "
          f"sys {used.ru_stime:.1f}), {time.monotonic() - start:.1f} s wall: {' '.join(command)}",
          file=sys.stderr, flush=True)
    return 1 if status is None else status


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
