"""Start the simulator as a real subprocess on 127.0.0.1 and always stop it.

``launch_sim(args)`` is the reusable helper (also used by module-scoped fixtures); ``sim_factory`` is the
function-scoped fixture for tests that need their own server. Readiness is awaited by polling
``/health_generate`` while watching ``proc.poll()``, so a server that dies at startup fails the test at
once with its log.
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

import pytest
import requests

SIM_MODULE = "pytest_specperf.sim"
MODEL = "moonshotai/Kimi-K2.5"
SPEC_ARGS = [
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
]
STARTUP_TIMEOUT_S = 30.0


def clean_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    """The test process's environment without NCCL tuning variables (they change the simulated speed)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("NCCL_")}
    env.update(extra or {})
    return env


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class Sim:
    """A running simulator process and a tiny client for it."""

    proc: subprocess.Popen
    port: int
    log_path: Path
    session: requests.Session = field(default_factory=requests.Session)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def get(self, path: str, **kw) -> requests.Response:
        return self.session.get(self.url + path, timeout=kw.pop("timeout", 30), **kw)

    def post(self, path: str, **kw) -> requests.Response:
        return self.session.post(self.url + path, timeout=kw.pop("timeout", 60), **kw)

    def generate(self, text: str, max_new_tokens: int = 16, temperature: float = 0.0, **sampling) -> dict:
        body = {
            "text": text,
            "sampling_params": {"max_new_tokens": max_new_tokens, "temperature": temperature, **sampling},
        }
        r = self.post("/generate", json=body)
        assert r.status_code == 200, r.text
        return r.json()

    def stream(self, path: str, body: dict, headers: dict | None = None) -> list[dict | str]:
        """POST a streaming request; returns decoded ``data:`` payloads ("[DONE]" kept as a string)."""
        out: list[dict | str] = []
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


def launch_sim(args: list[str], *, env: dict[str, str] | None = None, wait: bool = True) -> Sim:
    """Start a simulator on a free port (stderr to a temp file, never an undrained pipe)."""
    port = free_port()
    fd, name = tempfile.mkstemp(prefix="specperf-sim-", suffix=".log")
    with os.fdopen(fd, "wb") as log_file:
        proc = subprocess.Popen(
            sim_command(args, port),
            stdout=log_file,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=clean_env(env),
        )
    sim = Sim(proc, port, Path(name))
    if wait:
        try:
            sim.wait_ready()
        except BaseException:
            sim.stop()
            raise
    return sim


@contextlib.contextmanager
def running_sim(args: list[str], **kw) -> Iterator[Sim]:
    sim = launch_sim(args, **kw)
    try:
        yield sim
    finally:
        sim.stop()
        sim.log_path.unlink(missing_ok=True)


def run_sim(args: list[str], timeout: float = 20.0, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """Run the simulator to completion (for launches it must refuse)."""
    return subprocess.run(
        sim_command(args, free_port()),
        capture_output=True,
        text=True,
        timeout=timeout,
        env=clean_env(env),
        stdin=subprocess.DEVNULL,
    )


@pytest.fixture
def sim_factory() -> Iterator:
    """``sim_factory(args, env=None, wait=True) -> Sim``; every started simulator is stopped at teardown."""
    started: list[Sim] = []

    def start(args: list[str], **kw) -> Sim:
        sim = launch_sim(args, **kw)
        started.append(sim)
        return sim

    yield start
    for sim in started:
        sim.stop()
        sim.log_path.unlink(missing_ok=True)


@pytest.fixture(scope="session")
def plain_sim() -> Iterator[Sim]:
    """A plain (reference) server running as fast as possible."""
    with running_sim(["--tp-size", "8", "--sim-time-scale", "0", "--enable-metrics"]) as sim:
        yield sim


@pytest.fixture(scope="session")
def deterministic_sim() -> Iterator[Sim]:
    """A plain server with --enable-deterministic-inference: the only mode where SGLang honours sampling_seed."""
    with running_sim(["--sim-time-scale", "0", "--enable-deterministic-inference"]) as sim:
        yield sim


@pytest.fixture(scope="session")
def spec_sim() -> Iterator[Sim]:
    """An EAGLE3 5/1/6 server running as fast as possible."""
    args = [
        "--tp-size",
        "8",
        "--sim-time-scale",
        "0",
        "--enable-metrics",
        "--attention-backend",
        "fa3",
        "--trust-remote-code",
        *SPEC_ARGS,
    ]
    with running_sim(args) as sim:
        yield sim


@pytest.fixture
def run_sim_cli():
    """``run_sim_cli(args, timeout=20, env=None) -> CompletedProcess`` for launches that must exit."""
    return run_sim


@pytest.fixture(scope="session")
def spec_args() -> list[str]:
    """EAGLE3 5 steps / topk 1 / 6 draft tokens: the story's first configuration."""
    return list(SPEC_ARGS)
