"""State shared by pytest-xdist workers of one session: running servers.

With `-n 2` every worker collects the whole suite but runs only part of it. A server config
must still start once per session, never more than `max_servers` at a time on the machine, and
two measurements must never overlap in time (they would slow each other down). Workers agree
through files in a folder of this session only (inside the run directory), behind a file lock:
`servers.json` says which servers are starting or running (URL, pid), which tests are done (so
the last user of a server, on whichever worker, stops it), and which starts failed (so a
15-minute start that failed is not retried by the next worker). Finished measurements are
shared beside it, by `measure/cache.py`.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from filelock import FileLock

from pytest_specperf.common.jsonfile import atomic_write
from pytest_specperf.errors import ServerError
from pytest_specperf.servers.teardown import pid_alive

POLL_S = 0.2


@dataclass(frozen=True)
class Claim:
    """The answer to "I need server X": attach to a running one, or start it yourself."""

    start: bool
    url: str | None = None
    pid: int | None = None
    log_path: str | None = None


class SharedRegistry:
    """Servers and finished tests of the session, in `servers.json` under a file lock."""

    def __init__(self, shared_dir: Path, worker: str, progress: Callable[[str], None] | None = None) -> None:
        shared_dir.mkdir(parents=True, exist_ok=True)
        self.path = shared_dir / "servers.json"
        self.lock = FileLock(str(shared_dir / "servers.lock"))
        self.worker = worker
        self.progress = progress

    @contextmanager
    def _state(self) -> Iterator[dict[str, Any]]:
        with self.lock:
            state = json.loads(self.path.read_text()) if self.path.exists() else {"servers": {}, "done": []}
            yield state
            atomic_write(self.path, json.dumps(state, indent=1, sort_keys=True))

    def claim(self, name: str, max_servers: int, timeout: float, before_wait: Callable[[], None]) -> Claim:
        """Attach to `name` if some worker runs it; else reserve a slot to start it (waiting for one)."""
        deadline = time.monotonic() + timeout
        waited = False
        while True:
            with self._state() as state:
                servers = state["servers"]
                _drop_dead(servers)
                entry = servers.get(name)
                if entry and entry["status"] == "failed":
                    raise ServerError(entry["error"])
                if entry and entry["status"] == "ready":
                    entry["users"] = sorted({*entry.get("users", []), self.worker})
                    return Claim(False, entry["url"], entry["pid"], entry["log_path"])
                live = [e for e in servers.values() if e["status"] in ("starting", "ready")]
                if entry is None and len(live) < max_servers:
                    servers[name] = {
                        "status": "starting",
                        "worker": self.worker,
                        "worker_pid": os.getpid(),
                        "pid": None,
                        "since": time.time(),
                        "users": [self.worker],
                    }
                    return Claim(True)
            if not waited and self.progress is not None:
                self.progress(f"{name}: waiting for a free server slot (max_servers = {max_servers})")
            waited = True
            before_wait()  # never hold a slot while waiting for one: that is how waits cycle
            if time.monotonic() > deadline:
                raise ServerError(
                    f"server {name!r}: no free server slot (max_servers = {max_servers}) in {timeout:g} s"
                )
            time.sleep(POLL_S)

    def started(self, name: str, pid: int) -> None:
        """Record the pid as soon as the process exists, so a crash of this worker orphans nothing."""
        with self._state() as state:
            entry = state["servers"].get(name)
            if entry is not None:
                entry["pid"] = pid

    def ready(self, name: str, url: str, pid: int, log_path: str) -> None:
        with self._state() as state:
            users = state["servers"].get(name, {}).get("users", [])
            state["servers"][name] = {
                "status": "ready",
                "worker": self.worker,
                "worker_pid": os.getpid(),
                "url": url,
                "pid": pid,
                "log_path": log_path,
                "users": sorted({*users, self.worker}),
            }

    def leave(self, name: str) -> None:
        """This worker stops using a server another worker started (it keeps running for others)."""
        with self._state() as state:
            entry = state["servers"].get(name)
            if entry is not None and "users" in entry:
                entry["users"] = [w for w in entry["users"] if w != self.worker]

    def retire(self, name: str, pid: int | None) -> bool:
        """Unlist this worker's server `pid` if no other worker uses it; True: the caller stops it (also
        when `pid` is no longer the server listed under `name`: nobody can attach to it any more).

        Check and removal are one locked step, so no worker can attach in between and find the
        server gone under its test.
        """
        with self._state() as state:
            entry = state["servers"].get(name)
            if entry is None or entry.get("pid") != pid:
                return True
            if set(entry.get("users", [])) - {self.worker}:
                return False
            del state["servers"][name]
            return True

    def let_go(self, name: str, pid: int | None) -> bool | None:
        """This worker stops using the server `pid` of `name`. True: no other worker uses it, it is
        unlisted and the caller stops it; False: another worker uses it and its last user stops it;
        None: `pid` is not the server listed under `name` (another worker stopped it, or is stopping it).

        Leaving and the check are one locked step: two workers letting go at once would otherwise
        each see the other still listed, both leave, and nobody stop the server. The pid ties the
        step to one server: a name is listed again for the next start of its config.
        """
        with self._state() as state:
            entry = state["servers"].get(name)
            if entry is None or entry.get("pid") != pid:
                return None
            others = set(entry.get("users", [])) - {self.worker}
            if others:
                entry["users"] = sorted(others)
                return False
            del state["servers"][name]
            return True

    def failed(self, name: str, error: str) -> None:
        with self._state() as state:
            state["servers"][name] = {"status": "failed", "worker": self.worker, "error": error, "pid": None}

    def remove(self, name: str, pid: int | None = None) -> None:
        """Unlist the server `pid` of `name` once it is stopped; without a pid, this worker's start of it
        that did not get that far. Another server listed under the name since (the next start of the
        config, by any worker) stays listed: unlisted, nobody would stop it."""
        with self._state() as state:
            entry = state["servers"].get(name)
            if not entry or entry["status"] == "failed":
                return
            if pid is not None:
                mine = entry.get("pid") == pid
            else:
                mine = entry["status"] == "starting" and entry.get("worker") == self.worker
            if mine:
                del state["servers"][name]

    def finish(self, nodeid: str) -> None:
        """Record a finished test (the last user of a server, on any worker, stops it)."""
        with self._state() as state:
            state["done"] = sorted({*state["done"], nodeid})

    def finished(self) -> set[str]:
        """Every test finished so far, on any worker."""
        with self._state() as state:
            return set(state["done"])

    def running(self) -> dict[str, dict[str, Any]]:
        """Servers with a process (starting or ready), by name."""
        with self._state() as state:
            return {name: dict(e) for name, e in state["servers"].items() if e.get("pid")}


def _drop_dead(servers: dict[str, Any]) -> None:
    """Forget servers whose process is gone (crashed, or killed by hand), and starts whose worker
    died before recording a server process: such an entry would hold a slot until the timeout."""
    for name, entry in list(servers.items()):
        if entry["status"] == "ready" and not pid_alive(entry["pid"]):
            del servers[name]
        elif entry["status"] == "starting":
            server_gone = entry.get("pid") is not None and not pid_alive(entry["pid"])
            worker_gone = entry.get("worker_pid") is not None and not pid_alive(entry["worker_pid"])
            if server_gone or (worker_gone and entry.get("pid") is None):
                del servers[name]
