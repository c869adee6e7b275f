"""An out-of-memory start while the GPUs still hold the previous server's memory waits for the release
and retries once (the driver frees a killed server's memory late on a busy host). Real processes: a
stand-in engine launcher and a stand-in nvidia-smi that share one "GPU" (a state file)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from pytest_specperf.config.settings import ServerConfig, SpecperfConfig
from pytest_specperf.errors import ServerError
from pytest_specperf.servers import pool as pool_module
from pytest_specperf.servers import teardown
from pytest_specperf.servers.pool import ServerPool

#: GPU 0 as the stand-ins see it: "running" while a server holds it, or the time its memory comes free.
HELD = """
import os, time
def held(path):
    text = open(path).read().strip()
    return text == "running" or (text != "" and float(text) > time.time())
"""

SERVER = (
    HELD
    + """
import signal, sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
state = os.environ["STANDIN_GPU_STATE"]
args = sys.argv[1:]
port = int(args[args.index("--port") + 1])
if held(state):
    print("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 70.00 GiB. GPU 0 has 9.12 GiB free.")
    sys.exit(1)
open(state, "w").write("running")

class Ready(BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200)
        self.send_header("Content-Length", "0")
        self.end_headers()
    def log_message(self, *a):
        pass

def stop(*_):
    open(state, "w").write(str(time.time() + float(os.environ["STANDIN_RELEASE_S"])))  # the driver frees it later
    os._exit(0)

signal.signal(signal.SIGTERM, stop)
ThreadingHTTPServer(("127.0.0.1", port), Ready).serve_forever()
"""
)

NVIDIA_SMI = (
    HELD
    + """
print(f"0, {70500 if held(os.environ['STANDIN_GPU_STATE']) else 500}")
"""
)


@pytest.fixture
def gpu(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    state = tmp_path / "gpu0"
    state.write_text("")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    tool = bin_dir / "nvidia-smi"
    tool.write_text(f"#!{sys.executable}\n{NVIDIA_SMI}")
    tool.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    monkeypatch.setenv("STANDIN_GPU_STATE", str(state))
    monkeypatch.setattr(teardown, "GPU_RELEASE_TIMEOUT_S", 0.2)  # the stop gives up before the slow release
    monkeypatch.setattr(pool_module, "OOM_RELEASE_WAIT_S", 30.0)
    return state


def pool(tmp_path: Path, release_s: float) -> ServerPool:
    script = tmp_path / "standin_server.py"
    script.write_text(SERVER)
    config = SpecperfConfig(
        launcher="sglang",
        python=f"{sys.executable} {script}",
        model="m",
        max_servers=1,
        stop_timeout=10,
        startup_timeout=30,
        env={"STANDIN_RELEASE_S": str(release_s)},
        servers={"a": ServerConfig(name="a"), "b": ServerConfig(name="b")},
    )
    return ServerPool(config, tmp_path / "run")


def test_an_oom_start_after_a_slow_release_waits_and_retries_once(tmp_path: Path, gpu: Path) -> None:
    # a's memory comes free 8 s after its stop: long after b's first start failed and the pool looked at the
    # GPU, however slowly a busy machine starts two Python processes (at 2 s a loaded CI machine missed it)
    servers = pool(tmp_path, release_s=8.0)
    try:
        servers.acquire("a")
        b = servers.acquire("b")  # stops a (its memory outlives the stop's wait), b fails with OOM, then retries
        assert b.process is not None and b.process.exit_code() is None
    finally:
        servers.shutdown()
    assert servers.starts == ["a", "b", "b"]
    assert any("GPU 0 not released after 0.2 s" in t.line() for t in servers.teardowns)
    [notice] = servers.notices
    assert notice.startswith("b: the start failed with out of memory while the GPUs still held a's memory (GPU 0 ")
    assert "waited" in notice and "for the release and restarted once" in notice
    assert any("restarted once" in line for line in servers.report_lines)


def test_an_oom_start_with_nothing_of_ours_held_is_not_retried(tmp_path: Path, gpu: Path) -> None:
    gpu.write_text("running")  # another tenant holds the GPU: waiting would not help
    servers = pool(tmp_path, release_s=0.0)
    with pytest.raises(ServerError, match="GPU out of memory"):
        servers.acquire("a")
    assert servers.starts == ["a"] and not servers.notices
