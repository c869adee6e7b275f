"""Under pytest-xdist a server one worker started may be in use by another worker when the first no
longer needs it: "no remaining test needs it" counts tests, and a reference measured again for another
worker's speculative key is a use no test count sees. The worker that lets go must not stop a server
another worker is using; the last user stops it. Two pools in this process stand for two workers
(they share a registry folder, as workers do); the server is a real process on 127.0.0.1."""

from __future__ import annotations

import contextlib
import sys
from pathlib import Path

import psutil
import pytest
import requests

from pytest_specperf.config.settings import ServerConfig, SpecperfConfig
from pytest_specperf.errors import ServerError
from pytest_specperf.servers.pool import ServerPool
from pytest_specperf.servers.registry import SharedRegistry
from pytest_specperf.servers.teardown import pid_alive

#: answers every GET with 200: ready, and alive for as long as it runs
SERVER = """
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
args = sys.argv[1:]
port = int(args[args.index("--port") + 1])

class Ready(BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200)
        self.send_header("Content-Length", "0")
        self.end_headers()
    def log_message(self, *a):
        pass

ThreadingHTTPServer(("127.0.0.1", port), Ready).serve_forever()
"""


def workers(tmp_path: Path) -> tuple[ServerPool, ServerPool]:
    """Two workers' pools, `max_servers = 1`, where no test needs any server any more (the state in
    which a worker lets go of what it holds)."""
    script = tmp_path / "standin_server.py"
    script.write_text(SERVER)
    config = SpecperfConfig(
        launcher="sglang",
        python=f"{sys.executable} {script}",
        model="m",
        max_servers=1,
        stop_timeout=10,
        startup_timeout=30,
        servers={"plain": ServerConfig(name="plain"), "eagle": ServerConfig(name="eagle", startup_timeout=1)},
    )
    shared = tmp_path / "shared"

    def pool(worker: str) -> ServerPool:
        registry = SharedRegistry(shared, worker)
        return ServerPool(config, tmp_path / worker, registry=registry, still_needed=lambda name: False)

    return pool("gw0"), pool("gw1")


def serves(url: str) -> bool:
    try:
        return requests.get(url, timeout=10).status_code == 200
    except requests.ConnectionError:
        return False


@pytest.fixture
def two_workers(tmp_path: Path):
    """Two workers' pools; afterwards, proof that they left no server of this test behind (whatever is
    left is killed first, so a failing test leaves no orphan either)."""
    owner, user = workers(tmp_path)
    try:
        yield owner, user
    finally:
        for pool in (user, owner):
            with contextlib.suppress(Exception):
                pool.shutdown()
    left = [p for p in psutil.process_iter(["cmdline"]) if str(tmp_path) in " ".join(p.info["cmdline"] or ())]
    _, alive = psutil.wait_procs(left, timeout=15)  # a log relay ends once it has read its server's last line
    for proc in alive:
        with contextlib.suppress(psutil.Error):
            proc.kill()
    assert not alive, f"server processes left behind: {[p.info['cmdline'] for p in alive]}"


def test_a_server_another_worker_uses_is_not_stopped_when_its_starter_lets_go(two_workers) -> None:
    owner, user = two_workers
    started = owner.acquire("plain")
    assert started.process is not None
    attached = user.acquire("plain")  # gw1 measures the reference on the server gw0 started
    assert attached.process is None and attached.url == started.url

    owner.release("plain")  # no test needs it, but gw1 is using it right now
    assert serves(attached.url)
    attached.check_alive()

    user.release("plain")  # the last user stops it
    assert not pid_alive(started.process.pid) and not serves(started.url)


def test_a_worker_waiting_for_a_slot_does_not_stop_a_server_another_worker_uses(two_workers) -> None:
    owner, user = two_workers
    started = owner.acquire("plain")
    user.acquire("plain")
    with pytest.raises(ServerError, match="no free server slot"):  # the one slot stays with gw1's use
        owner.acquire("eagle")
    assert serves(started.url)


def test_a_worker_that_ends_leaves_a_server_in_use_to_its_user(two_workers) -> None:
    owner, user = two_workers
    started = owner.acquire("plain")
    user.acquire("plain")
    owner.shutdown()
    assert serves(started.url)
    user.shutdown()
    assert not pid_alive(started.process.pid)


def test_two_workers_letting_go_at_once_leave_nobody_holding_it(two_workers, monkeypatch) -> None:
    """gw1 lets go right after gw0's first locked step of letting go: the worst interleaving. Were the
    check and the leaving two steps, each would see the other still listed, both leave, and the server
    would run on holding a slot that no worker would free."""
    owner, user = two_workers
    started = owner.acquire("plain")
    user.acquire("plain")
    locked_steps = owner.registry._state

    @contextlib.contextmanager
    def then_the_other_worker_lets_go():
        with locked_steps() as state:
            yield state
        monkeypatch.setattr(owner.registry, "_state", locked_steps)
        user.release("plain")

    monkeypatch.setattr(owner.registry, "_state", then_the_other_worker_lets_go)
    owner.release("plain")
    assert not pid_alive(started.process.pid) and not serves(started.url)


def test_a_server_stopped_to_free_a_slot_does_not_unlist_the_next_start_of_its_config(two_workers, monkeypatch) -> None:
    """gw0, waiting for a slot, unlists its idle `plain` and stops it; gw1 starts `plain` again in that
    moment. Once stopped, gw0's `plain` must not unlist gw1's: an unlisted server is stopped by nobody
    (neither the slot's accounting nor the controller's last sweep sees it)."""
    owner, user = two_workers
    owner.still_needed = lambda name: True  # plain is needed again: the slot's wait stops it all the same
    owner.acquire("plain")
    retire = owner.registry.retire
    started_again = []

    def then_the_other_worker_starts_it(*args: object) -> bool:
        unlisted = retire(*args)
        if not started_again:
            started_again.append(user.acquire("plain"))
        return unlisted

    monkeypatch.setattr(owner.registry, "retire", then_the_other_worker_starts_it)
    with pytest.raises(ServerError, match="no free server slot"):  # gw1's plain holds the one slot
        owner.acquire("eagle")
    (again,) = started_again
    assert again.process is not None
    assert owner.registry.running()["plain"]["pid"] == again.process.pid
