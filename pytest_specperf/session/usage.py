"""Which planned tests are done, so each server stops when no remaining test needs it.

Without xdist this process counts its own finished tests; under xdist the session's registry knows
every worker's (servers/registry.py), so a server another worker still needs is not stopped.
"""

from __future__ import annotations

from collections import Counter

from pytest_specperf.servers.registry import SharedRegistry
from pytest_specperf.session.plan import Plan


class ServerUse:
    """Finished tests per server, here or (under xdist) on any worker of the session."""

    def __init__(self, plan: Plan, registry: SharedRegistry | None = None) -> None:
        self.plan = plan
        self.registry = registry
        self._done: Counter[str] = Counter()

    def finished(self, nodeid: str) -> str | None:
        """A test is done; the server it used (None: not a planned test)."""
        server = self.plan.server_of(nodeid)
        if server is None:
            return None
        if self.registry is not None:
            self.registry.finish(nodeid)
        else:
            self._done[server] += 1
        return server

    def still_needed(self, server: str) -> bool:
        """Whether a test not yet finished (on any xdist worker) uses this server."""
        if self.registry is not None:
            done = self.registry.finished()
            self._done = Counter(s for n in done if (s := self.plan.server_of(n)) is not None)
        return self._done[server] < self.plan.uses(server)
