"""``flower-supernode`` with two of Flower 1.41's fixed latencies shortened, for the deployment tests.

* It asks the SuperLink for a message every 0.5 s instead of every 3 s when it has none
  (``flwr.supernode.start_client_internal``'s ``time.sleep(3)``): each message of a round reaches
  the node about 1.5 s sooner.
* Its heartbeat interval is Flower's minimum (10 s) instead of its fixed 30 s: the SuperLink marks a
  node offline after two missed intervals (``HEARTBEAT_PATIENCE``), so a killed node is seen offline
  within about 20 s instead of 60 s (tests/test_deploy_fault.py).

Nothing else of the SuperNode changes; what the tests check does not depend on either latency.
Usage: ``python tests/fast_supernode.py <flower-supernode arguments>``.
"""

import sys
import time

import flwr.supercore.heartbeat as sender
import flwr.supernode.fleet_http_connection as connection
import flwr.supernode.start_client_internal as loop
from flwr.common.constant import HEARTBEAT_MIN_INTERVAL
from flwr.supernode.cli import flower_supernode

POLL_SECONDS = 0.5


class _ShortSleeps:
    """The `time` module, with every sleep capped at `POLL_SECONDS`."""

    def __getattr__(self, name: str):
        return getattr(time, name)

    @staticmethod
    def sleep(seconds: float) -> None:
        time.sleep(min(seconds, POLL_SECONDS))


loop.time = _ShortSleeps()
connection.HEARTBEAT_DEFAULT_INTERVAL = HEARTBEAT_MIN_INTERVAL  # declared to the SuperLink
sender.HEARTBEAT_DEFAULT_INTERVAL = HEARTBEAT_MIN_INTERVAL  # how often it is sent

if __name__ == "__main__":
    sys.argv[0] = "flower-supernode"
    sys.exit(flower_supernode())
