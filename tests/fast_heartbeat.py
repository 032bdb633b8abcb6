"""``flower-supernode`` whose heartbeat interval is Flower's minimum (10 s) instead of its fixed 30 s.

The SuperLink marks a node offline after two missed intervals (``HEARTBEAT_PATIENCE``), so a killed
node is seen offline within about 20 s instead of 60 s. The killed-node test
(tests/test_deploy_fault.py) runs its victim through this; nothing else of the SuperNode changes.
Usage: ``python tests/fast_heartbeat.py <flower-supernode arguments>``.
"""

import sys

import flwr.supercore.heartbeat as sender
import flwr.supernode.fleet_http_connection as connection
from flwr.common.constant import HEARTBEAT_MIN_INTERVAL
from flwr.supernode.cli import flower_supernode

connection.HEARTBEAT_DEFAULT_INTERVAL = HEARTBEAT_MIN_INTERVAL  # declared to the SuperLink
sender.HEARTBEAT_DEFAULT_INTERVAL = HEARTBEAT_MIN_INTERVAL  # how often it is sent

if __name__ == "__main__":
    sys.argv[0] = "flower-supernode"
    sys.exit(flower_supernode())
