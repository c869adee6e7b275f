"""One simulated server over several nodes, as SGLang runs one: `--nnodes N --node-rank R
--dist-init-addr HOST:PORT`, one launch per node.

Rank 0 serves HTTP and listens at `--dist-init-addr`; every other rank connects there, says its
rank and stays connected. Rank 0 turns healthy only once all have joined; a rank that has not joined
within `--dist-timeout` seconds fails the start with a line naming it and the address; a rank that
dies takes the server down (rank 0 exits non-zero), and the other ranks exit once rank 0 is gone:
what a launcher, a scheduler and the plugin's teardown meet with a real multi-node server. Standard
library only, like the rest of the simulator.
"""

from __future__ import annotations

import logging
import socket
import threading
import time
from dataclasses import dataclass, field

log = logging.getLogger("specperf.sim")

#: SGLang's default `--dist-timeout` is none (wait for ever); the simulator waits this long
DEFAULT_JOIN_TIMEOUT_S = 120.0
RETRY_S = 0.2


@dataclass(frozen=True)
class Nodes:
    """This launch's place in the deployment."""

    count: int
    rank: int
    address: tuple[str, int] | None
    timeout_s: float = DEFAULT_JOIN_TIMEOUT_S

    @classmethod
    def of(cls, count: int, rank: int, address: str | None, timeout: int | None) -> Nodes:
        """From the launch flags (ValueError naming the flag that is wrong)."""
        if count < 1 or not 0 <= rank < count:
            raise ValueError(f"--node-rank must be in [0, --nnodes), got {rank} of {count}")
        if count == 1:
            return SINGLE_NODE
        if not address:
            raise ValueError("--nnodes > 1 needs --dist-init-addr HOST:PORT (where rank 0 waits for the others)")
        return cls(count, rank, parse_address(address), float(timeout) if timeout else DEFAULT_JOIN_TIMEOUT_S)

    @property
    def where(self) -> str:
        return f"{self.address[0]}:{self.address[1]}" if self.address else "-"


SINGLE_NODE = Nodes(1, 0, None)


def parse_address(text: str) -> tuple[str, int]:
    """`HOST:PORT` of `--dist-init-addr` (ValueError with what is wrong)."""
    host, sep, port = text.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f"--dist-init-addr must be HOST:PORT, got {text!r}")
    return host.strip("[]"), int(port)


@dataclass
class Rendezvous:
    """Rank 0's side: who has joined, and whether one has left since."""

    nodes: Nodes
    left: threading.Event = field(default_factory=threading.Event)
    _peers: dict[int, socket.socket] = field(default_factory=dict)
    _listener: socket.socket | None = None

    def wait(self, stop: threading.Event) -> bool:
        """Listen and wait until every other rank has joined, or `stop` (False: a rank never joined)."""
        assert self.nodes.address is not None
        listener = socket.create_server(self.nodes.address, reuse_port=False)
        listener.settimeout(RETRY_S)
        self._listener = listener
        missing = set(range(1, self.nodes.count))
        log.info("waiting for node rank(s) %s to join at %s", _ranks(missing), self.nodes.where)
        deadline = time.monotonic() + self.nodes.timeout_s
        while missing and not stop.is_set():
            if time.monotonic() > deadline:
                log.error(
                    "node rank(s) %s did not join at %s within %g s (--dist-timeout): is each node's launch "
                    "running, and can it reach this address?",
                    _ranks(missing),
                    self.nodes.where,
                    self.nodes.timeout_s,
                )
                return False
            rank = self._accept(listener)
            if rank is not None and rank in missing:
                missing.discard(rank)
                log.info("node rank %d joined at %s", rank, self.nodes.where)
        for rank, peer in self._peers.items():
            threading.Thread(target=self._watch, args=(rank, peer, stop), name=f"sim-rank{rank}", daemon=True).start()
        return True  # every rank joined, or the launch is being stopped: nothing failed

    def _accept(self, listener: socket.socket) -> int | None:
        try:
            peer, _ = listener.accept()
        except TimeoutError:
            return None
        peer.settimeout(5.0)
        try:
            hello = peer.recv(64).decode("ascii", "replace").split()
        except OSError:
            peer.close()
            return None
        if len(hello) != 2 or hello[0] != "rank" or not hello[1].isdigit():
            peer.close()
            return None
        peer.settimeout(None)
        self._peers[int(hello[1])] = peer
        return int(hello[1])

    def _watch(self, rank: int, peer: socket.socket, stop: threading.Event) -> None:
        """A rank whose connection closes has died: the server cannot serve without it."""
        try:
            while peer.recv(64):
                pass
        except OSError:
            pass
        if not stop.is_set():
            log.error("node rank %d left (its process exited): the server cannot serve without it", rank)
            self.left.set()
            stop.set()

    def close(self) -> None:
        for peer in self._peers.values():
            peer.close()
        if self._listener is not None:
            self._listener.close()


def follow(nodes: Nodes, stop: threading.Event) -> int:
    """A rank other than 0: join rank 0 and stay until it is gone (1) or this launch is stopped (0)."""
    assert nodes.address is not None
    deadline = time.monotonic() + nodes.timeout_s
    while not stop.is_set():
        try:
            conn = socket.create_connection(nodes.address, timeout=2.0)
            break
        except OSError:
            if time.monotonic() > deadline:
                log.error(
                    "node rank %d could not reach rank 0 at %s within %g s", nodes.rank, nodes.where, nodes.timeout_s
                )
                return 1
            stop.wait(RETRY_S)
    else:
        return 0
    conn.sendall(f"rank {nodes.rank}\n".encode())
    conn.settimeout(RETRY_S)
    log.info("node rank %d of %d joined rank 0 at %s", nodes.rank, nodes.count, nodes.where)
    while not stop.is_set():
        try:
            if not conn.recv(64):
                log.error("node rank %d: rank 0 at %s is gone; exiting", nodes.rank, nodes.where)
                return 1
        except TimeoutError:
            continue
        except OSError:
            return 1
    conn.close()
    return 0


def _ranks(ranks: set[int]) -> str:
    return ", ".join(str(r) for r in sorted(ranks))
