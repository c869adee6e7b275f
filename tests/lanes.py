"""The test lanes that need more than Python: a Slurm cluster (tests/slurm), vLLM's CPU build (tests/vllm),
headless Chromium (tests/dashboard's browser tests) and a PostgreSQL server (tests/store's PostgreSQL store
tests). Whether each runs here, and why not.

`pytest tests` prints one header line per lane (tests/conftest.py), so a lane that is skipped is never
skipped without a word: the lanes' own conftests are not initial conftests of `pytest tests`, and a header
hook there would print nothing.
"""

from __future__ import annotations

import functools
import os
import shutil
import subprocess
from pathlib import Path

import pytest

#: the vLLM release the lane's main tests are written for
VLLM_LANE_VERSION = "0.32.0"


@functools.cache
def slurm_problem() -> str | None:
    """Why the Slurm lane cannot run here (None: two idle nodes answer)."""
    if shutil.which("srun") is None or shutil.which("sinfo") is None:
        return "no Slurm here (srun, sinfo); `bash .ci/slurm-cluster up` starts a two-node one"
    done = subprocess.run(["sinfo", "-h", "-N", "-o", "%N %t"], capture_output=True, text=True, timeout=30)
    idle = [line for line in done.stdout.splitlines() if line.split()[-1:] in (["idle"], ["mix"], ["alloc"])]
    if done.returncode != 0 or len(idle) < 2:
        return f"Slurm has no two nodes up (sinfo: {(done.stdout + done.stderr).strip() or 'nothing'})"
    return None


def vllm_python() -> str | None:
    """The interpreter with vLLM's CPU build the lane runs (`SPECPERF_VLLM_PYTHON`), or None."""
    return os.environ.get("SPECPERF_VLLM_PYTHON") or None


def chromium() -> str | None:
    """Headless Chromium for the dashboard's browser tests, or None."""
    return shutil.which("chromium") or shutil.which("chromium-browser")


def postgres_url() -> str | None:
    """The PostgreSQL server the store's tests use (`SPECPERF_POSTGRES_URL`, as `.ci/postgres up` prints), or None."""
    return os.environ.get("SPECPERF_POSTGRES_URL") or None


def vllm_problem() -> str | None:
    """Why the vLLM lane cannot run here (None: `SPECPERF_VLLM_PYTHON` names its interpreter)."""
    if vllm_python():
        return None
    return f"set SPECPERF_VLLM_PYTHON to a python with vLLM {VLLM_LANE_VERSION}; .ci/vllm-venv makes one"


def skip_lane(items: list[pytest.Item], folder: Path, problem: str) -> None:
    """Skip, with the lane's reason, the tests of `folder` that were collected anyway.

    Why: a lane that cannot run is left out of `pytest tests` by its conftest's `collect_ignore_glob`,
    but pytest collects a file named on the command line regardless; without this, such a file fails on
    the missing cluster or interpreter instead of saying why it cannot run."""
    marker = pytest.mark.skip(reason=problem)
    for item in items:
        if item.path.is_relative_to(folder):
            item.add_marker(marker)


def header_lines() -> list[str]:
    """One line per lane: ran (with what), or skipped and why."""
    slurm = slurm_problem()
    vllm = vllm_python()
    browser = chromium()
    return [
        f"Slurm lane: {'skipped: ' + slurm if slurm else 'a real two-node cluster'}",
        f"vLLM lane: {vllm}" if vllm else f"vLLM lane: skipped ({vllm_problem()})",
        f"browser lane: headless Chromium at {browser}"
        if browser
        else "browser lane: skipped (headless Chromium is not installed; Debian: apt-get install -y chromium)",
        "PostgreSQL lane: a server named by SPECPERF_POSTGRES_URL"
        if postgres_url()
        else 'PostgreSQL lane: skipped (SPECPERF_POSTGRES_URL is not set; eval "$(bash .ci/postgres up)" starts one)',
    ]
