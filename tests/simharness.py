"""The simulator as a real subprocess on 127.0.0.1, for every test folder that talks to one.

`launch_sim(args)` starts `python -m pytest_specperf.sim` on a free port and returns once
`/health_generate` answers 200, watching `proc.poll()` meanwhile, so a simulator that dies at startup
fails the test at once with its log instead of after a timeout. `running_sim` always stops it,
`run_sim` runs a launch the simulator must refuse to completion, and the `sim_factory` fixture
(tests/conftest.py) stops whatever a test started.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import requests

from pytest_specperf.measure.http import ServerClient

SIM_MODULE = "pytest_specperf.sim"
MODEL = "moonshotai/Kimi-K2.5"
#: EAGLE3 5 steps / topk 1 / 6 draft tokens: the story's first configuration
SPEC_ARGS = (
    "--speculative-algorithm",
    "EAGLE3",
    "--speculative-draft-model-path",
    "org/kimi-k2.5-eagle3",
    "--speculative-num-steps",
    "5",
    "--speculative-eagle-topk",
    "1",
    "--speculative-num-draft-tokens",
    "6",
)
STARTUP_TIMEOUT_S = 30.0
#: a tenth of the profile's time: streams long enough to overlap and to be cut, short enough for a test
TENTH_TIME = ("--sim-time-scale", "0.1")


def clean_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    """The test process's environment without NCCL tuning variables (they change the simulated speed)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("NCCL_")}
    env.update(extra or {})
    return env


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class Sim:
    """A running simulator process, a tiny HTTP client for it and the plugin's own client."""

    proc: subprocess.Popen[bytes]
    port: int
    log_path: Path
    api_key: str | None = None
    session: requests.Session = field(default_factory=requests.Session)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def client(self, api_key: str | None = None, request_timeout: float = 30.0) -> ServerClient:
        """The plugin's HTTP client for this server, with its API key unless another is given."""
        return ServerClient(self.url, api_key if api_key is not None else self.api_key, request_timeout)

    def get(self, path: str, **kw: Any) -> requests.Response:
        return self.session.get(self.url + path, timeout=kw.pop("timeout", 30), **kw)

    def post(self, path: str, **kw: Any) -> requests.Response:
        return self.session.post(self.url + path, timeout=kw.pop("timeout", 60), **kw)

    def generate(self, text: str, max_new_tokens: int = 16, temperature: float = 0.0, **sampling: Any) -> Any:
        body = {
            "text": text,
            "sampling_params": {"max_new_tokens": max_new_tokens, "temperature": temperature, **sampling},
        }
        r = self.post("/generate", json=body)
        assert r.status_code == 200, r.text
        return r.json()

    def stream(self, path: str, body: dict[str, Any], headers: dict[str, str] | None = None) -> list[Any]:
        """POST a streaming request; returns decoded ``data:`` payloads ("[DONE]" kept as a string)."""
        out: list[Any] = []
        with self.session.post(self.url + path, json=body, stream=True, timeout=60, headers=headers) as r:
            assert r.status_code == 200, r.text
            assert r.headers["Content-Type"].startswith("text/event-stream")
            for line in r.iter_lines():
                if line.startswith(b"data: "):
                    data = line[len(b"data: ") :].decode()
                    out.append(data if data == "[DONE]" else json.loads(data))
        return out

    def wait_ready(self, timeout: float = STARTUP_TIMEOUT_S, path: str = "/health_generate") -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"simulator exited with code {self.proc.returncode}:\n{self.log()}")
            with contextlib.suppress(requests.RequestException):
                if requests.get(self.url + path, timeout=2).status_code == 200:
                    return
            time.sleep(0.02)  # poll interval only; readiness is decided by the response above
        raise TimeoutError(f"simulator not ready after {timeout} s:\n{self.log()}")

    def stop(self) -> None:
        """TERM, then KILL if it has not exited within 5 s."""
        self.session.close()
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)


def sim_command(args: list[str], port: int | None = None) -> list[str]:
    cmd = [sys.executable, "-m", SIM_MODULE]
    if "--model-path" not in args and "--model" not in args:
        cmd += ["--model-path", MODEL]
    if port is not None:
        cmd += ["--port", str(port)]
    return cmd + list(args)


def launch_sim(
    args: list[str], *, env: dict[str, str] | None = None, wait: bool = True, api_key: str | None = None
) -> Sim:
    """Start a simulator on a free port (its output to a temp file, never an undrained pipe)."""
    port = free_port()
    argv = sim_command([*args, *(["--api-key", api_key] if api_key else [])], port)
    fd, name = tempfile.mkstemp(prefix="specperf-sim-", suffix=".log")
    with os.fdopen(fd, "wb") as log_file:
        proc = subprocess.Popen(
            argv, stdout=log_file, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=clean_env(env)
        )
    sim = Sim(proc, port, Path(name), api_key)
    if wait:
        try:
            sim.wait_ready()
        except BaseException:
            sim.stop()
            raise
    return sim


@contextlib.contextmanager
def running_sim(args: list[str], **kw: Any) -> Iterator[Sim]:
    sim = launch_sim(args, **kw)
    try:
        yield sim
    finally:
        sim.stop()
        sim.log_path.unlink(missing_ok=True)


def run_sim(
    args: list[str], timeout: float = 20.0, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """Run the simulator to completion (for launches it must refuse)."""
    return subprocess.run(
        sim_command(args, free_port()),
        capture_output=True,
        text=True,
        timeout=timeout,
        env=clean_env(env),
        stdin=subprocess.DEVNULL,
    )
