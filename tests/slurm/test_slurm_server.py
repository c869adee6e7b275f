"""One simulated server over two Slurm nodes, started by the manual's template (`srun -N2
--ntasks-per-node=1 ./node-rank.sh ... --nnodes 2 --dist-init-addr ...`): a measured test on it, a
failing one, Ctrl-C and SIGTERM to pytest, a rank that never joins, the job's time limit, and a `scancel` once the
server serves. After each, no task of the step is left on either node and Slurm's queue holds nothing of it."""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
import threading

import pytest

MEASURED = """
import pytest

@pytest.mark.specperf(server="plain", throughput=(1.0, None))
def test_measured(specperf):
    assert specperf.result.samples("output_throughput")

@pytest.mark.specperf(server="plain", throughput=(1e9, None))
def test_too_slow(specperf):
    pass
"""

BLOCKING = """
import pytest, time

@pytest.mark.parametrize("specperf_server", ["plain"], indirect=True)
def test_block(specperf_server):
    print("SERVER-UP", flush=True)
    for _ in range(6000):
        time.sleep(0.1)
"""

#: pytest as a terminal's foreground job: SIGINT raises KeyboardInterrupt (a background job ignores it)
FOREGROUND_PYTEST = (
    "import signal, sys, pytest; signal.signal(signal.SIGINT, signal.default_int_handler); "
    "sys.argv[0] = 'pytest'; sys.exit(pytest.console_main())"
)


def test_a_two_node_server_is_measured_and_judged_and_leaves_nothing(slurm_suite, tmp_path) -> None:
    suite = slurm_suite(MEASURED)
    report = tmp_path / "report.json"
    result = suite.run(f"--specperf-json={report}")
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(["*throughput: output_throughput * must lie in [[]1e+09, inf]: missed*"])
    (row,) = [m for m in json.loads(report.read_text())["measurements"]]
    assert row["estimates"]["output_throughput"]["value"] > 0
    deployment = {k: v for k, v in row["fingerprint"]["environment"].items() if k.startswith("server.flag --n")}
    assert deployment == {"server.flag --nnodes": "2", "server.flag --node-rank": "0"}  # rank 0's, which serves
    assert suite.processes() == [] and suite.steps() == []


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_a_signal_to_pytest_ends_the_step_on_both_nodes(slurm_suite, sig: signal.Signals) -> None:
    suite = slurm_suite(BLOCKING)
    proc = suite.pytester.popen(
        [sys.executable, "-c", FOREGROUND_PYTEST, "-s", "-p", "no:cacheprovider", str(suite.pytester.path)],
        stdout=-1,
        stderr=-2,
    )
    try:
        assert proc.stdout is not None
        for line in proc.stdout:  # the body runs once rank 0 is ready, so both ranks have joined
            if b"SERVER-UP" in line:
                break
        assert len(suite.processes()) >= 2 and len(suite.steps()) == 1  # one task per node, one job
        threading.Thread(target=proc.stdout.read, daemon=True).start()  # a full pipe would block pytest
        proc.send_signal(sig)
        proc.wait(timeout=180)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert suite.processes() == [] and suite.steps() == []


def test_a_rank_that_never_joins_fails_the_start_naming_it_and_the_address(slurm_suite) -> None:
    """Three ranks asked of two nodes: rank 2 never starts, rank 0 gives up after --dist-timeout."""
    suite = slurm_suite(MEASURED, nodes=3, join_timeout=5)
    result = suite.run("-k", "test_measured")
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines(["*node rank(s) 2 did not join at 127.0.0.1:* within 5 s*"])
    assert suite.processes() == [] and suite.steps_once_slurm_cleaned_up() == []  # the step ended itself


def test_a_time_limit_that_ends_the_start_is_named_not_taken_for_a_crash(slurm_suite) -> None:
    """`srun --time=1` (Slurm's least, a minute) on a server whose start takes four: the step is
    cancelled while it loads, and the failure says so."""
    suite = slurm_suite(MEASURED, srun="--time=1", sim="--sim-startup-seconds 240")
    result = suite.run("-k", "test_measured")
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines(["*Slurm's time limit ended the step while the server was starting (not a crash)*"])
    assert suite.processes() == [] and suite.steps_once_slurm_cleaned_up() == []  # Slurm ended it: its cleanup


#: a body that holds the server until it is gone, so whatever ends it is reported as a server that died after ready
HELD_UNTIL_GONE = """
import time

import pytest

@pytest.mark.parametrize("specperf_server", ["plain"], indirect=True)
def test_held(specperf_server):
    print("SERVER-UP", flush=True)
    for _ in range(1200):
        specperf_server.check_alive(grace=1.0)
        time.sleep(0.1)
"""


def test_a_scancel_after_the_server_was_ready_is_named_as_slurms_cancellation(slurm_suite) -> None:
    """`scancel` of the server's job once it serves: the error names Slurm's cancellation and quotes
    slurmstepd's `*** STEP ... CANCELLED AT ... ***` line, instead of "died during the session (it exited
    with code 0)"."""
    suite = slurm_suite(HELD_UNTIL_GONE)
    proc = suite.pytester.popen(
        [sys.executable, "-m", "pytest", "-s", "-p", "no:cacheprovider", "-rE", str(suite.pytester.path)],
        stdout=-1,
        stderr=-2,
    )
    try:
        assert proc.stdout is not None
        for line in proc.stdout:
            if b"SERVER-UP" in line:
                break
        (job,) = suite.steps()
        subprocess.run(["scancel", job.split()[0]], check=True, timeout=30)
        output = proc.stdout.read().decode(errors="replace")
        proc.wait(timeout=180)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert "server 'plain' was cancelled by Slurm after it was ready (scancel, or the allocation ended)" in output
    assert re.search(r"\*\*\* STEP \d+\.\d+ ON n[12] CANCELLED AT \S+ \*\*\*", output), output[-3000:]
    assert suite.processes() == [] and suite.steps_once_slurm_cleaned_up() == []  # Slurm cancelled it: its cleanup
