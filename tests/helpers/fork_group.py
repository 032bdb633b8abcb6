"""A SuperNode's process group, stood in for by ``sh``, for the tests of the fork server and of the
site worker it forks ClientApp processes for (tests/deploy/test_forkserver.py,
tests/client_app/test_site_worker.py)."""

from __future__ import annotations

import json
import shlex
import subprocess
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

from deploy.forkserver import alive


def in_a_group(launcher: Path, env: Mapping[str, str], args: Sequence[str], *more: str,
               tries: int = 150) -> tuple[subprocess.Popen, dict]:
    """A process group leading a new session, as a SuperNode's: its first launcher starts the fork
    server, and once the server forks (a launcher prints other than the real executable's
    ``started``; at most `tries` launches 0.2 s apart) its last runs with `more` arguments too.
    Returns the group's leader (that launcher, exec'd by ``sh``) and the JSON object its child
    printed on a line of its own."""
    command = " ".join(map(shlex.quote, [str(launcher), *args]))
    script = (f"i=0; until {command} | grep -qv '^started'; do i=$((i + 1)); "
              f'[ $i -lt {tries} ] || exit 9; sleep 0.2; done; exec {command} "$@"')
    group = subprocess.Popen(["sh", "-c", script, "sh", *more], env=dict(env), stdout=subprocess.PIPE,
                             text=True, start_new_session=True)
    lines = []
    for line in group.stdout:  # a ClientApp's log lines, then its JSON
        if line.startswith("{"):
            return group, json.loads(line)
        lines.append(line)
    raise AssertionError(f"no forked child answered in the group: {lines}")


def ended(pid: int, timeout: float) -> bool:
    """Wait up to `timeout` s for process `pid` to end; a zombie has ended (whoever reaps orphans
    may take seconds)."""
    deadline = time.monotonic() + timeout
    while alive(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    return not alive(pid)
