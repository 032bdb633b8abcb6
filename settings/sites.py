"""The site registry: which site each registered key (node id) speaks for.

Where SuperNode authentication is on, a node's id is the one its public key was registered under
(``flwr supernode register``), so the coordinator that registers a site's key knows which node id is
that site. It records this in a JSON file ``{site: node id}`` (`deploy.launch` writes
``<workdir>/sites.json``, `deploy.register` appends one site), named by the run config
``site-registry``; the server then takes a node's word for its site only where it matches, so no
registered node can take another site's id or the personal model kept under it. The file is read
again whenever a node is to be identified, so a site registered during a run can join it.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

from tasks.names import CLIENT_ID

KEY = "site-registry"


def read_registry(path: str | Path) -> dict[int, str]:
    """Node id -> site of the registry file at ``path``; ValueError in one line naming
    ``site-registry`` for a relative path (the ServerApp runs in a process of its own, whose working
    folder is not where ``flwr run`` was typed), a file that cannot be read, is not
    ``{site: node id}``, or gives two sites one node id."""
    where = f"{KEY} = {str(path)!r}"
    if not Path(path).is_absolute():
        raise ValueError(f"{where} must be an absolute path: the ServerApp reads it in its own process, "
                         "whose working folder is not where flwr run was typed")
    try:
        sites = json.loads(Path(path).read_text())
    except OSError as err:
        raise ValueError(f"{where} cannot be read: {err.strerror or err}") from None
    except json.JSONDecodeError as err:
        raise ValueError(f"{where} is not JSON: {err}") from None
    if not isinstance(sites, dict):
        raise ValueError(f"{where} must hold a JSON object {{site: node id}}")
    nodes: dict[int, str] = {}
    for site, node in sites.items():
        if not CLIENT_ID.fullmatch(site):
            raise ValueError(f"{where}: site {site!r} must be 1-64 letters, digits, '.', '_' or '-'")
        if isinstance(node, bool) or not isinstance(node, int):
            raise ValueError(f"{where}: site {site!r} has node id {node!r}, not an integer")
        if node in nodes:
            raise ValueError(f"{where}: node id {node} is registered as both {nodes[node]!r} and {site!r}")
        nodes[node] = site
    return nodes


def registry_of(path: str) -> Callable[[], dict[int, str]] | None:
    """The registry the strategy reads (`read_registry` of ``path``), or None where ``path`` is ""."""
    return None if not path else lambda: read_registry(path)


def register_site(path: str | Path, site: str, node: int) -> None:
    """Record that ``node`` (the id a site's key was registered under) speaks for ``site`` in the
    registry file at ``path`` (created if missing). A site registered again (a new key) gets the new
    id; a node id another site holds is refused (ValueError naming both). Written to a temporary
    file, checked, then renamed."""
    path = Path(path)
    sites = json.loads(path.read_text()) if path.exists() else {}
    holder = next((other for other, held in sites.items() if held == node and other != site), None)
    if holder is not None:
        raise ValueError(f"{KEY} = {str(path)!r}: node id {node} is already registered as site {holder!r}, "
                         f"not {site!r}")
    sites[site] = node
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(sites, indent=2) + "\n")
    read_registry(tmp)  # what is written reads back
    tmp.replace(path)
