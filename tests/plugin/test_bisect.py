"""`specperf bisect` on the simulator: the seed's story, a night that lost its NCCL tuning among ten
harmless differences, and the variable found by starting servers; bad input refused before any start;
every server stopped on SIGTERM."""

from __future__ import annotations

import json
import signal
import subprocess
import sys

import pytest
from plugin_suites import ONE_MEASURED_TEST, SPEC_SERVERS, STEADY_WORKLOAD, config_text
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
        ((KEY, "--good", "1", "--builds", "python3"), "--builds: name at least two builds, oldest first"),
        ((KEY, "--good", "1", "--builds", "nosuch-python", "python3"), "--builds: 'nosuch-python' is not an"),
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


#: a stand-in engine build: `-m sglang.launch_server ARGS` runs the simulator (slower by its EXTRA flags),
#: anything else is the interpreter itself (so the flag probe finds no SGLang and uses the shipped list)
BUILD = """#!/bin/sh
if [ "$1" = "-m" ] && [ "$2" = "sglang.launch_server" ]; then
    shift 2
    exec {python} -m pytest_specperf.sim "$@" --sim-time-scale 0.1 --sim-seed 1 {extra}
fi
exec {python} "$@"
"""


def test_bisect_finds_the_first_slow_engine_build_oldest_first(pytester: pytest.Pytester) -> None:
    """Five builds, the fourth and fifth with a draft eight times slower: the fourth is named, the third
    kept as the one to go back to, in the good setup, the newest and ⌈log₂ 3⌉ = 2 starts more (each
    repeated at most once when a busy machine leaves it unclear). The tolerance is 15%, so that a busy
    machine's scheduler cannot make a fast build look slow."""
    builds = []
    for number in range(1, 6):
        path = pytester.path / f"build-{number}"
        extra = "--sim-draft-slowdown 8" if number >= 4 else ""
        path.write_text(BUILD.format(python=sys.executable, extra=extra))
        path.chmod(0o755)
        builds.append(str(path))
    config = config_text(
        pytester.path.name[-8:], servers=SPEC_SERVERS, workloads=STEADY_WORKLOAD, extra="max_regression = 0.15\n"
    )
    config = config.replace('launcher = "sim"', f'launcher = "sglang"\npython = "{builds[0]}"')
    pytester.makefile(".toml", specperf=config)
    pytester.makepyfile(test_suite=ONE_MEASURED_TEST)
    pytester.runpytest_subprocess("--specperf-update", "-p", "no:cacheprovider").assert_outcomes(passed=1)
    (pytester.path / "specperf.toml").write_text(config.replace(builds[0], builds[-1]))
    pytester.runpytest_subprocess("--specperf-record", "-p", "no:cacheprovider")  # the slow night
    command = [sys.executable, "-m", "pytest_specperf.cli", "bisect", KEY, "--good", "1", "--builds", *builds]
    done = subprocess.run(
        [*command, "--json", "bisect.json"], cwd=pytester.path, capture_output=True, text=True, timeout=900
    )
    assert done.returncode == 0, done.stdout + done.stderr
    document = json.loads((pytester.path / "bisect.json").read_text())
    assert document["builds"] == {"first_slow": builds[3], "last_good": builds[2]}
    assert document["server_starts"] <= 1 + 2 * (1 + 2)
    ratios = {start["build"]: start["ratio"] for start in document["starts"]}
    assert ratios[builds[-1]] < 0.85 and all(r > 0.85 for b, r in ratios.items() if b in builds[:3])
    assert f"restore: python = {builds[2]!r}" in done.stdout
