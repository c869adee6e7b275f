"""`pytest tests` names every lane that needs more than Python in its header: ran, or skipped and why."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _pytest(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """`pytest ARGS` from the repository's root, as the README runs it (one process: no xdist)."""
    command = [sys.executable, "-m", "pytest", *args, "-p", "no:cacheprovider", "-p", "no:xdist"]
    return subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)


def test_pytest_tests_prints_one_header_line_per_lane() -> None:
    """Run as the README runs them (`pytest tests`, here one pure module of it, to collect quickly), the
    Slurm, vLLM, browser and PostgreSQL lanes each say whether they run: the lanes' own conftests are not initial
    conftests of such a run, so a header hook there said nothing."""
    env = {**os.environ, "SPECPERF_VLLM_PYTHON": ""}  # the vLLM lane skipped: its line must say why
    env.pop("SPECPERF_REQUIRE_SLURM", None)
    done = _pytest("tests/unit/test_stats.py", "--collect-only", env=env)
    header = done.stdout.split("collected", 1)[0].splitlines()
    names = ["Slurm lane", "vLLM lane", "browser lane", "PostgreSQL lane"]
    lanes = [line for line in header if line.split(":", 1)[0] in names]
    assert [line.split(":", 1)[0] for line in lanes] == names, done.stdout[:2000]
    assert lanes[1].startswith("vLLM lane: skipped (set SPECPERF_VLLM_PYTHON")


def test_a_lane_file_named_on_the_command_line_is_skipped_with_the_lane_reason() -> None:
    """pytest collects a file named on the command line although its folder's conftest ignores it: the vLLM
    lane's tests, named so without `SPECPERF_VLLM_PYTHON`, failed on the missing interpreter instead of
    saying why they cannot run here."""
    env = {**os.environ, "SPECPERF_VLLM_PYTHON": ""}
    done = _pytest("tests/vllm/test_vllm_range.py", "-rs", env=env)
    assert done.returncode == 0, done.stdout[-2000:]
    assert "SKIPPED" in done.stdout and "vLLM lane: set SPECPERF_VLLM_PYTHON" in done.stdout, done.stdout[-2000:]
    assert " failed" not in done.stdout and " passed" not in done.stdout, done.stdout[-2000:]
