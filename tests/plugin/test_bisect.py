"""`specperf bisect` on the simulator: the seed's story, a night that lost its NCCL tuning among ten
harmless differences, and the variable found by starting servers; bad input refused before any start;
every server stopped on SIGTERM."""

from __future__ import annotations

import json
import signal
import subprocess
import sys

import pytest
from test_verdict import TUNED_ENV, set_in_config, verdict_suite

from pytest_specperf.bisect.search import most_starts

KEY = "eagle3-5step/default/c1"
HARMLESS = "env = { " + ", ".join(f'SGLANG_HARMLESS_{i} = "{i}"' for i in range(10)) + " }\n"


@pytest.fixture
def lost_tuning(make_suite):
    """A history whose first night had the NCCL tuning and whose last lost it among ten harmless changes."""
    suite = verdict_suite(make_suite, extra=TUNED_ENV)
    suite.run("--specperf-update").assert_outcomes(passed=1)
    set_in_config(suite, TUNED_ENV, HARMLESS)
    suite.run("--specperf-record")  # a REGRESSION, recorded as a refused run
    return suite


def bisect(suite, *args: str) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "pytest_specperf.cli", "bisect", *args]
    return subprocess.run(command, cwd=suite.pytester.path, capture_output=True, text=True, timeout=900, check=False)


def test_bisect_names_the_lost_nccl_variable_among_ten_harmless_differences(lost_tuning) -> None:
    done = bisect(lost_tuning, KEY, "--good", "1", "--json", "bisect.json", "--run-dir", "bisect-logs")
    assert done.returncode == 0, done.stdout + done.stderr
    document = json.loads((lost_tuning.pytester.path / "bisect.json").read_text())
    applicable = [d for d in document["differences"] if d["applicable"]]
    assert len(applicable) == 13  # three NCCL variables, ten harmless ones
    [cause] = document["causes"]
    assert cause["name"].startswith("NCCL_") and cause["bad"] == "unset"
    assert document["server_starts"] <= 1 + most_starts(len(applicable))  # 6: ⌈log₂ 13⌉ + 2
    lines = done.stdout.splitlines()
    assert f"cause: {cause['name']}: {cause['good']} → unset" in lines
    assert f"restore: {cause['name']}={cause['good']}" in lines
    assert any(line.startswith("  sim.nccl_tuned: true → false  (cannot be set by a start") for line in lines)
    assert lost_tuning.processes() == []


@pytest.mark.parametrize(
    ("args", "error"),
    [
        (("eagle3-5step",), "'eagle3-5step': name one key as SERVER/WORKLOAD/cN"),
        (("nosuch/default/c1", "--good", "1"), "nosuch/default/c1: the config defines servers "),
        ((KEY, "--good", "1", "--bad", "1"), "the good and the bad run are the same run (1)"),
        ((KEY, "--good", "99"), "--good 99: the history holds runs 1 to"),
        ((KEY, "--good", "1", "--store", "elsewhere"), "elsewhere: no such store directory"),
    ],
)
def test_bad_input_is_refused_before_any_start(lost_tuning, args: tuple[str, ...], error: str) -> None:
    done = bisect(lost_tuning, *args)
    assert done.returncode == 2, done.stdout + done.stderr
    assert error in done.stderr
    assert "start 1" not in done.stdout


def test_the_dry_run_lists_the_differences_and_the_plan_and_starts_nothing(lost_tuning) -> None:
    done = bisect(lost_tuning, KEY, "--good", "1", "--dry-run")
    assert done.returncode == 0, done.stderr
    assert "  NCCL_ALGO: Ring → unset" in done.stdout.splitlines()
    assert "plan: the good setup, then at most 5 starts for one cause among 13 applicable differences" in done.stdout
    assert "start 1" not in done.stdout


def test_sigterm_stops_every_server_bisect_started(lost_tuning) -> None:
    command = [sys.executable, "-m", "pytest_specperf.cli", "bisect", KEY, "--good", "1"]
    proc = subprocess.Popen(
        command, cwd=lost_tuning.pytester.path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    seen: list[str] = []
    try:
        assert proc.stdout is not None
        for line in proc.stdout:  # the second start's server is up and measuring
            seen.append(line)
            if "eagle3-5step~2.log" in line:
                break
        proc.send_signal(signal.SIGTERM)
        code = proc.wait(timeout=120)
        seen += proc.stdout.readlines()
        assert code == 130, "".join(seen)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert lost_tuning.processes() == [], "".join(seen)
