"""A server that Slurm ended after it was ready is named as Slurm's doing, not as a crash.

The log tails below are what a real two-node Slurm 22.05 cluster wrote (Debian's slurm-wlm,
`.ci/slurm-cluster`): `scancel` of a running `srun` step (the STEP form), of a batch job (the JOB
form, after the step's; the output file holds a line `started` the script echoed first), and a job's
time limit (`sbatch -t 1`, which ends the job and then its step). Without the Slurm line, a server
that exits after it was ready still "died during the session".
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import pytest

from pytest_specperf.engines import engine_for
from pytest_specperf.servers.diagnosis import SlurmEnd, diagnose, slurm_end
from pytest_specperf.servers.pool import RunningServer

READY = """\
# specperf: srun -N2 --ntasks-per-node=1 --job-name=specperf-e8f9a279 ./node-rank.sh python -m pytest_specperf.sim
[2026-12-04 19:22:32] node rank 1 of 2 joined rank 0 at 127.0.0.1:58385
[2026-12-04 19:22:32] Uvicorn running on http://127.0.0.1:41131 (Press CTRL+C to quit)
[2026-12-04 19:22:32] The server is fired up and ready to roll!
"""

#: `scancel` of the server's job while it served (the srun step's own output)
STEP_CANCELLED = """\
srun: Job step aborted: Waiting up to 7 seconds for job step to finish.
slurmstepd-n1: error: *** STEP 2.0 ON n1 CANCELLED AT 2026-12-04T19:22:32 ***
[2026-12-04 19:22:32] Shutting down the simulator
"""

#: `scancel` of a batch job whose script ran the server under srun
JOB_CANCELLED = """\
started
srun: Job step aborted: Waiting up to 7 seconds for job step to finish.
srun: got SIGCONT
slurmstepd-n1: error: *** STEP 3.0 ON n1 CANCELLED AT 2026-12-04T19:22:54 ***
slurmstepd-n1: error: *** JOB 3 ON n1 CANCELLED AT 2026-12-04T19:22:54 ***
srun: forcing job termination
srun: error: n1: task 0: Terminated
"""

#: the job's time limit (`sbatch -t 1`) ending the step
TIME_LIMIT = """\
started
slurmstepd-n1: error: *** JOB 4 ON n1 CANCELLED AT 2026-12-04T19:24:23 DUE TO TIME LIMIT ***
srun: Job step aborted: Waiting up to 7 seconds for job step to finish.
slurmstepd-n1: error: *** STEP 4.0 ON n1 CANCELLED AT 2026-12-04T19:24:23 DUE TO TIME LIMIT ***
srun: got SIGCONT
srun: error: n1: task 0: Terminated
"""


@dataclass
class _Plan:
    log_path: Path


@dataclass
class _ExitedProcess:
    """What `RunningServer.check_alive` asks of a launched server's process, for one that has exited."""

    plan: _Plan
    code: int
    proc: Any = None

    def exit_code(self) -> int:
        return self.code

    def drain_log(self) -> None:
        """The relay has written everything already."""

    def describe(self) -> str:
        return f"  log: {self.plan.log_path}"


def _server(log: Path, code: int) -> RunningServer:
    return RunningServer(
        name="plain",
        url="http://127.0.0.1:41131",
        config=cast(Any, None),
        engine=engine_for("sglang"),
        log_path=log,
        process=cast(Any, _ExitedProcess(_Plan(log), code)),
    )


def _death(tmp_path: Path, tail: str, code: int) -> str:
    log = tmp_path / "plain.log"
    log.write_text(READY + tail)
    with pytest.raises(Exception) as raised:
        _server(log, code).check_alive()
    return str(raised.value).splitlines()[0]


@pytest.mark.parametrize(
    ("tail", "line"),
    [
        (STEP_CANCELLED, "slurmstepd-n1: error: *** STEP 2.0 ON n1 CANCELLED AT 2026-12-04T19:22:32 ***"),
        (JOB_CANCELLED, "slurmstepd-n1: error: *** STEP 3.0 ON n1 CANCELLED AT 2026-12-04T19:22:54 ***"),
    ],
    ids=["step", "job"],
)
def test_a_scancel_after_ready_is_named_as_slurms_cancellation(tmp_path: Path, tail: str, line: str) -> None:
    message = _death(tmp_path, tail, 0)
    assert message == (
        "server 'plain' was cancelled by Slurm after it was ready (scancel, or the allocation ended): not a crash "
        f"(it exited with code 0); Slurm: {line}."
    )


def test_a_time_limit_after_ready_is_named_as_slurms_time_limit(tmp_path: Path) -> None:
    message = _death(tmp_path, TIME_LIMIT, 1)
    assert message.startswith(
        "server 'plain' was ended by Slurm's time limit after it was ready (not a crash): give the job more --time "
        "(it exited with code 1); Slurm: slurmstepd-n1: error: *** JOB 4 ON n1 CANCELLED AT 2026-12-04T19:24:23 "
        "DUE TO TIME LIMIT ***"
    )


def test_a_death_without_slurms_line_still_died(tmp_path: Path) -> None:
    message = _death(tmp_path, "[2026-12-04 19:22:40] Shutting down the simulator\n", 1)
    assert message == "server 'plain' died during the session (it exited with code 1)."


@pytest.mark.parametrize(
    ("line", "reason"),
    [
        ("slurmstepd-n1: error: *** STEP 2.0 ON n1 CANCELLED AT 2026-12-04T19:22:32 ***", None),
        ("slurmstepd-n1: error: *** JOB 3 ON n1 CANCELLED AT 2026-12-04T19:22:54 ***", None),
        ("slurmstepd-n1: error: *** JOB 4 ON n1 CANCELLED AT 2026-12-04T19:24:23 DUE TO TIME LIMIT ***", "TIME LIMIT"),
        ("slurmstepd: error: *** JOB 12 ON node1 CANCELLED AT 2026-12-04T10:00:00 DUE TO PREEMPTION ***", "PREEMPTION"),
        (
            "slurmstepd: error: *** JOB 12 ON node1 CANCELLED AT 2026-12-04T10:00:00 DUE TO NODE FAILURE, SEE "
            "SLURMCTLD LOG FOR DETAILS ***",
            "NODE FAILURE",
        ),
        # srun's own time-limit line, and releases before 17.11, name no node
        ("srun: error: *** STEP 12.0 CANCELLED AT 2026-12-04T10:00:00 DUE TO TIME LIMIT ***", "TIME LIMIT"),
    ],
)
def test_every_form_of_slurms_line_is_read(tmp_path: Path, line: str, reason: str | None) -> None:
    log = tmp_path / "plain.log"
    log.write_text(READY + line + "\n")
    assert slurm_end(log) == SlurmEnd(line, reason)


def test_an_echo_of_the_launch_is_not_slurms_line(tmp_path: Path) -> None:
    log = tmp_path / "plain.log"
    log.write_text(READY)
    assert slurm_end(log) is None and slurm_end(tmp_path / "missing.log") is None


def test_a_time_limit_during_the_start_is_still_named_for_the_start(tmp_path: Path) -> None:
    log = tmp_path / "plain.log"
    log.write_text(READY.replace("The server is fired up", "Loading") + TIME_LIMIT)
    cause = diagnose(log, engine_for("sglang")).cause
    assert cause.startswith("Slurm's time limit ended the step while the server was starting (not a crash)")
