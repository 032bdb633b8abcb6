"""Who the connected nodes are: each node's client id (its site), asked once and checked against the
site registry where there is one, and the wait for enough identified sites."""

from __future__ import annotations

import time
from collections.abc import Iterable, Sequence
from logging import INFO, getLogger

from flwr.app import MessageType
from flwr.serverapp import Grid

from strategies.records import REGISTERED_SITE
from strategies.validation import Rejected, check_identity

log = getLogger("flwr").log

REASK_S = 10.0  # seconds before a node whose identity query failed is asked again


class NodesMissing(RuntimeError):
    """The run cannot go on: fewer than ``min-nodes`` sites identified within ``node-wait``."""


class Identities:
    """`LayerSelectionStrategy`'s part that learns which client each node is."""

    def identify(self, grid: Grid, nodes: Iterable[int], timeout: float | None = None) -> None:
        """Ask every connected node not yet known for its client id (its site name, else
        ``partition-<id>``): one ``query`` exchange, timed as "identifying"; a node whose answer
        failed is asked again in the next round or `REASK_S` seconds later, whichever is first.
        With a site registry (``site-registry``: node id -> the site its key is registered as) the
        query names that site, the site refuses to answer for another, and the server takes a
        node's word only where it is that site. Without one a node's word is its id, refused while
        another connected node holds it. Every refusal is logged with its reason. ``timeout``: the
        most seconds to wait for the answers (also bounded by the round timeout)."""
        nodes, now, server_round = list(nodes), time.monotonic(), self.round_log.server_round
        unknown = [n for n in nodes if n not in self.clients and self._due(n, server_round, now)]
        if not unknown:
            return
        registered = self.registry() if self.registry is not None else None
        messages = [self._message(n, MessageType.QUERY, {"server-round": server_round} if registered is None
                                  else {"server-round": server_round, REGISTERED_SITE: registered.get(n, "")},
                                  None)
                    for n in unknown]
        replies = self._send(grid, messages, "identifying", self._refused, timeout)
        self.asked.update(dict.fromkeys(unknown, (server_round, time.monotonic())))
        held = {self.clients[n]: n for n in nodes if n in self.clients}
        for msg in sorted(replies, key=lambda m: m.metadata.src_node_id):
            node = msg.metadata.src_node_id
            try:
                client = check_identity(msg)
                if registered is not None and client != registered.get(node):
                    raise Rejected(_not_registered(node, client, registered.get(node)))
                if client in held:
                    raise Rejected(f"client id {client!r} is already node {held[client]}'s: give every "
                                   "site its own node config site (or partition-id)")
            except Rejected as err:
                self._refused(node, str(err))
                continue
            self.clients[node] = held[client] = client
            self.refusals.pop(node, None)

    def _due(self, node: int, server_round: int, now: float) -> bool:
        """Is an unidentified ``node`` to be asked now: never asked, asked in an earlier round, or
        `REASK_S` seconds ago?"""
        asked = self.asked.get(node)
        return asked is None or asked[0] != server_round or now - asked[1] >= REASK_S

    def _refused(self, node: int, reason: str) -> None:
        self.refusals[node] = reason
        self.round_log.reject(node, "identify", reason)

    def client_ids(self, grid: Grid) -> dict[str, int]:
        """Client id -> node id of every connected, identified node, waiting up to ``node_wait``
        seconds for ``min_nodes`` of them (no identity query waits past that); then `NodesMissing`
        names the sites missing. A node that is no longer connected loses its id (a reconnected
        site is asked again)."""
        deadline = time.monotonic() + self.node_wait
        while True:
            nodes = sorted(grid.get_node_ids())
            for gone in set(self.clients) - set(nodes):
                del self.clients[gone]
            self.identify(grid, nodes, max(1.0, deadline - time.monotonic()))
            by_client = {self.clients[n]: n for n in nodes if n in self.clients}
            if len(by_client) >= self.min_nodes:
                return by_client
            if time.monotonic() >= deadline:
                raise NodesMissing(self._missing(nodes, by_client))
            log(INFO, "Waiting for nodes: %d identified, %d needed", len(by_client), self.min_nodes)
            time.sleep(1)

    def _missing(self, nodes: Sequence[int], by_client: dict[str, int]) -> str:
        """One line: how many sites were identified, the registered sites that were not, and each
        connected node that could not be identified with its last refusal."""
        parts = [f"min-nodes = {self.min_nodes} not met after node-wait = {self.node_wait:g} s: "
                 f"{len(by_client)} identified ({', '.join(sorted(by_client)) or 'none'})"]
        if self.registry is not None:
            absent = sorted(set(self.registry().values()) - set(by_client))
            parts.append(f"registered sites missing: {', '.join(absent) or 'none'}")
        unknown = [n for n in nodes if n not in self.clients]
        if unknown:
            parts.append("connected nodes not identified: " + ", ".join(
                f"{n} ({self.refusals.get(n, 'no answer yet')})" for n in unknown))
        return "; ".join(parts)


def _not_registered(node: int, client: str, site: str | None) -> str:
    if not site:
        return f"node {node} claims site {client!r}, but its key is registered as no site (site-registry)"
    return f"node {node} claims site {client!r}, but its key is registered as site {site!r} (site-registry)"
