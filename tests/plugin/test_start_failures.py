"""Starts that fail the way a real SGLang 0.5.23 start failed, replayed by stand-in launchers (real
processes, the real log lines): a failed bind after which the launcher neither exits nor heeds SIGTERM,
a death by SIGILL, a native abort."""

from __future__ import annotations

import sys
from pathlib import Path

import psutil
import pytest

from pytest_specperf.config.settings import ServerConfig, SpecperfConfig
from pytest_specperf.errors import ServerError
from pytest_specperf.servers.pool import ServerPool

#: What SGLang logged when its port was taken; then it waited for ever and ignored SIGTERM.
BIND_FAILURE = """\
[2026-11-30 22:41:07] INFO:     Started server process [90211]
[2026-11-30 22:41:07] INFO:     Waiting for application startup.
[2026-11-30 22:41:07] INFO:     Application startup complete.
[2026-11-30 22:41:07] ERROR:    [Errno 98] error while attempting to bind on address ('127.0.0.1', {port}): \
address already in use
[2026-11-30 22:41:07] INFO:     Waiting for application shutdown.
"""

#: The first start replays the bind failure and hangs; a later one serves its readiness path.
HANGING_BIND = f"""
import os, signal, sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
args = sys.argv[1:]
port = int(args[args.index("--port") + 1])
first = not os.path.exists(__file__ + ".started")  # the first start of this stand-in
open(__file__ + ".started", "w").close()
if first:
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    print({BIND_FAILURE!r}.format(port=port), end="", flush=True)
    while True:
        signal.pause()

class Ready(BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200)
        self.send_header("Content-Length", "0")
        self.end_headers()
    def log_message(self, *a):
        pass

ThreadingHTTPServer(("127.0.0.1", port), Ready).serve_forever()
"""

#: SIGILL at start-up: a kernel built for instructions this CPU lacks (no line of its own in the log).
SIGILL = """
import os, signal
print("[2026-11-30 22:50:01] Load weight begin. avail mem=40.00 GB", flush=True)
os.kill(os.getpid(), signal.SIGILL)
"""

#: A native abort: the telling line is the first of the block, not `Fatal Python error: Aborted`.
ABORT = """
import sys
print('''[2026-11-30 22:52:10] Load weight begin. avail mem=40.00 GB
terminate called after throwing an instance of 'c10::Error'
  what():  Unsupported data type for the AMX kernel: Float8_e4m3fn
Exception raised from cpu_kernel at /sgl-kernel/csrc/cpu/gemm.cpp:311 (most recent call first):
Fatal Python error: Aborted
''', end="", flush=True)
sys.exit(1)
"""


def pool(tmp_path: Path, script: str, startup_timeout: float = 600) -> ServerPool:
    path = tmp_path / "standin_launcher.py"
    path.write_text(script)
    config = SpecperfConfig(
        launcher="sglang",
        python=f"{sys.executable} {path}",
        model="m",
        stop_timeout=10,
        startup_timeout=startup_timeout,
        servers={"plain": ServerConfig(name="plain")},
    )
    return ServerPool(config, tmp_path / "run")


def test_a_bind_failure_that_hangs_is_stopped_and_retried_on_a_fresh_port_at_once(tmp_path: Path) -> None:
    servers = pool(tmp_path, HANGING_BIND)  # an hour of GPU node would pass before the startup_timeout
    try:
        server = servers.acquire("plain")
        assert server.process is not None and server.process.exit_code() is None
    finally:
        servers.shutdown()
    assert servers.starts == ["plain", "plain"]
    [notice] = servers.notices
    assert "was taken by another process" in notice
    assert "it did not exit by itself and was stopped at once" in notice
    [first, _] = servers.teardowns
    assert not first.graceful and not first.stuck  # it ignored SIGTERM: its group was killed


def test_a_hanging_fatal_start_is_stopped_with_its_error_not_at_the_startup_timeout(tmp_path: Path) -> None:
    script = HANGING_BIND.replace("if first:", "if True:")  # every start fails to bind
    servers = pool(tmp_path, script)
    with pytest.raises(ServerError) as failure:
        servers.acquire("plain")
    message = str(failure.value)
    assert message.startswith("server 'plain' logged a fatal error")
    assert "it ignored SIGTERM and was killed" in message
    assert "address already in use" in message and "startup_timeout" not in message
    assert servers.starts == ["plain", "plain"]  # the fresh port was tried once
    assert _processes_of(tmp_path / "standin_launcher.py") == []


def test_a_death_by_sigill_is_named_with_what_it_usually_means(tmp_path: Path) -> None:
    servers = pool(tmp_path, SIGILL)
    with pytest.raises(ServerError) as failure:
        servers.acquire("plain")
    first_line = str(failure.value).splitlines()[0]
    assert first_line.startswith("server 'plain' was killed by SIGILL (signal 4) after ")
    assert "an instruction this CPU lacks" in first_line


def test_an_abort_quotes_the_first_line_of_its_failure_block(tmp_path: Path) -> None:
    servers = pool(tmp_path, ABORT)
    with pytest.raises(ServerError) as failure:
        servers.acquire("plain")
    first_line = str(failure.value).splitlines()[0]
    assert "an abort in native code during start-up" in first_line
    assert "first error: terminate called after throwing an instance of 'c10::Error'" in first_line


def test_the_progress_line_of_a_start_shows_its_newest_error(tmp_path: Path) -> None:
    shown: list[str] = []
    script = HANGING_BIND.replace("if first:", "if True:")
    servers = pool(tmp_path, script)
    servers.progress = shown.append
    with pytest.raises(ServerError):
        servers.acquire("plain")
    starting = [line for line in shown if line.startswith("starting plain:")]
    assert any("newest error: " in line and "address already in use" in line for line in starting), shown


def _processes_of(script: Path) -> list[psutil.Process]:
    """Live processes running `script` (none may outlive a failed start)."""
    found = []
    for proc in psutil.process_iter(["cmdline", "status"]):
        if str(script) in (proc.info["cmdline"] or []) and proc.info["status"] != psutil.STATUS_ZOMBIE:
            found.append(proc)
    return found


def test_an_interrupt_between_a_start_and_its_hand_over_leaves_no_server(tmp_path: Path) -> None:
    """Ctrl-C or SIGTERM right after a server became ready, before the pool handed it out: shutdown still
    stops it (it used to know only the servers it had handed out)."""
    servers = pool(tmp_path, HANGING_BIND.replace("if first:", "if False:"))

    def interrupted(line: str) -> None:
        if "ready after" in line:
            raise KeyboardInterrupt("signal 15")

    servers.progress = interrupted
    with pytest.raises(KeyboardInterrupt):
        servers.acquire("plain")
    assert _processes_of(tmp_path / "standin_launcher.py") != []  # running, and handed to nobody
    servers.shutdown()
    assert _processes_of(tmp_path / "standin_launcher.py") == []
