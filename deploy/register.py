"""Register a site's SuperNode key with the SuperLink and record which site it speaks for:

    python -m deploy.register --key hospital-a.pub --site hospital-a --registry sites.json \
        [--connection <flwr connection name>]

What a coordinator runs once per site, on the machine it runs ``flwr`` from: ``flwr supernode
register <key>`` (only registered keys may connect; it gives the node id the key will connect as),
then the pair site -> node id into the registry file (`settings.sites`). Runs name that file as
``site-registry``, so the server takes a node's word for its site only where the site's key was
registered as it: no registered partner can take another site's id or its personal model.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

from settings.sites import register_site
from tasks.names import CLIENT_ID


def registered_node(key: Path, connection: str | None) -> int:
    """``flwr supernode register <key> [<connection>] --format json``: the node id it gives, or
    RuntimeError in one line with what ``flwr`` said."""
    done = subprocess.run(["flwr", "supernode", "register", str(key), *([connection] if connection else []),
                           "--format", "json"], capture_output=True, text=True, timeout=120)
    try:
        answer = json.loads(done.stdout)
    except json.JSONDecodeError:
        answer = {}
    if done.returncode != 0 or not answer.get("success") or "node-id" not in answer:
        said = (answer.get("error-message") or done.stderr or done.stdout).strip().splitlines()
        raise RuntimeError(f"flwr supernode register {key} failed (exit {done.returncode}): "
                           f"{said[-1] if said else 'no output'}")
    return int(answer["node-id"])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--key", type=Path, required=True, help="the site's SuperNode public key (.pub)")
    parser.add_argument("--site", required=True, help="the site's name, its node config site")
    parser.add_argument("--registry", type=Path, required=True, help="the site registry file (JSON)")
    parser.add_argument("--connection", help="the flwr connection of the SuperLink (default: flwr's default)")
    args = parser.parse_args(argv)
    if not CLIENT_ID.fullmatch(args.site):
        parser.error(f"--site {args.site!r}: 1-64 letters, digits, '.', '_' or '-'")
    if not args.key.is_file():
        parser.error(f"--key {str(args.key)!r}: no such file")
    try:
        node = registered_node(args.key, args.connection)
        register_site(args.registry, args.site, node)
    except (RuntimeError, ValueError, subprocess.TimeoutExpired) as err:
        parser.exit(1, f"error: {err}\n")
    print(f"site {args.site}: node id {node}, recorded in {args.registry}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
