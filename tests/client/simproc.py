"""Start and stop a real simulator subprocess on 127.0.0.1 (used by the client tests and fixtures).

Readiness is decided by polling ``/health_generate`` while watching ``proc.poll()``, so a simulator
that dies at startup fails the test at once with its output instead of after a timeout.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from pytest_specperf.common.transport import probe
from pytest_specperf.measure.http import ServerClient

STARTUP_TIMEOUT = 30.0
SPEC_ARGS = (
    "--speculative-algorithm",
    "EAGLE3",
    "--speculative-draft-model-path",
    "sim/draft-eagle3",
    "--speculative-num-steps",
    "5",
    "--speculative-eagle-topk",
    "1",
    "--speculative-num-draft-tokens",
    "6",
)


@dataclass
class SimServer:
    """One running simulator: its URL, process and log file."""

    url: str
    proc: subprocess.Popen[bytes]
    log: Path
    api_key: str | None = None

    def client(self, api_key: str | None = None, request_timeout: float = 30.0) -> ServerClient:
        return ServerClient(self.url, api_key if api_key is not None else self.api_key, request_timeout)

    def output(self) -> str:
        return self.log.read_text(errors="replace")[-4000:]

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=5)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def start_sim(*args: str, api_key: str | None = None, time_scale: float = 0.1) -> SimServer:
    """Start `python -m pytest_specperf.sim` and return once /health_generate answers 200."""
    port = free_port()
    log = Path(tempfile.mkstemp(prefix="specperf-sim-", suffix=".log")[1])
    argv = [
        sys.executable,
        "-m",
        "pytest_specperf.sim",
        "--model-path",
        "sim/test-model",
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--sim-time-scale",
        str(time_scale),
        *args,
    ]
    if api_key:
        argv += ["--api-key", api_key]
    with log.open("wb") as out:
        proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, env=dict(os.environ))
    server = SimServer(f"http://127.0.0.1:{port}", proc, log, api_key)
    deadline = time.monotonic() + STARTUP_TIMEOUT
    while not probe(server.url, "/health_generate", 2.0):
        if proc.poll() is not None:
            raise RuntimeError(f"simulator exited with code {proc.returncode}:\n{server.output()}")
        if time.monotonic() > deadline:
            server.stop()
            raise RuntimeError(f"simulator not healthy after {STARTUP_TIMEOUT} s:\n{server.output()}")
        time.sleep(0.05)  # poll interval, not synchronisation: the loop waits for the condition
    return server
