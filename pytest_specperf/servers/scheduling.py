"""pytest-xdist scheduling that keeps each server config's tests on one worker.

Only imported when pytest-xdist is installed. xdist's own `--dist loadgroup` relies on a node-id
rewrite that newer pytest releases no longer honour, so the grouping is done here, from the test
ids the plugin itself gives (`test_x[eagle3-5step]`, `test_x[eagle3-5step-chat-c16]`) or the
`specperf_server` parameter a user gives (`test_y[plain]`).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from xdist.scheduler import LoadScopeScheduling


def server_of(nodeid: str, servers: Iterable[str]) -> str | None:
    """The server config a test id names, if any (longest name first: `eagle3` vs `eagle3-5step`)."""
    if not nodeid.endswith("]") or "[" not in nodeid:
        return None
    params = nodeid[nodeid.index("[") + 1 : -1]
    for name in sorted(servers, key=len, reverse=True):
        if params == name or params.startswith(name + "-") or f"-{name}-" in f"-{params}-":
            return name
    return None


class ServerScheduling(LoadScopeScheduling):
    """Whole servers are the unit of work: each server's tests go to one worker, the rest load-balance."""

    def __init__(self, config: Any, log: Any = None, *, servers: Iterable[str]) -> None:
        super().__init__(config, log)
        self.servers = tuple(servers)
        # Hand out servers in the plan's order (the reference's tests first), not largest group
        # first: speculative tests need the reference's measurements, and with few server slots a
        # reference queued behind them means waiting, or restarting servers.
        self.config.option.loadscopereorder = False

    def _split_scope(self, nodeid: str) -> str:
        server = server_of(nodeid, self.servers)
        return f"specperf-server::{server}" if server else nodeid
