"""The Slurm lane: suites whose server is one simulated SGLang server over two Slurm nodes, started by
the manual's `srun` template, against a real two-node Slurm cluster on this machine.

`.ci/slurm-cluster up` starts one (CI does, and sets SPECPERF_REQUIRE_SLURM=1, so that a lane skipped
there fails); elsewhere the lane is skipped, and `pytest tests` says why in its header (tests/lanes.py).
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import psutil
import pytest
from lanes import skip_lane, slurm_problem

from pytest_specperf.servers.launch import free_port

PROBLEM = slurm_problem()
if PROBLEM is not None:
    if os.environ.get("SPECPERF_REQUIRE_SLURM") == "1":
        raise pytest.UsageError(f"the Slurm lane is required here (SPECPERF_REQUIRE_SLURM=1), but {PROBLEM}")
    collect_ignore_glob = ["test_*.py"]


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """A file of the lane named on the command line is collected anyway: skipped, with the reason."""
    if PROBLEM is not None:
        skip_lane(items, Path(__file__).parent, f"Slurm lane: {PROBLEM}")


#: the manual's wrapper (docs/recipes.md, "One server over two nodes"), as written
NODE_RANK = (
    "#!/bin/sh\n# node-rank.sh: the launch command, with this task's node rank\n"
    'exec "$@" --node-rank "$SLURM_NODEID"\n'
)


@dataclass
class SlurmSuite:
    pytester: pytest.Pytester
    token: str

    def run(self, *args: str) -> pytest.RunResult:
        return self.pytester.runpytest_subprocess("-p", "no:cacheprovider", *args, timeout=300)

    def processes(self) -> list[psutil.Process]:
        """Live simulator processes of this suite's server, on either node."""
        found = []
        for proc in psutil.process_iter(["cmdline", "status"]):
            try:
                if self.token in " ".join(proc.info["cmdline"] or ()) and proc.info["status"] != psutil.STATUS_ZOMBIE:
                    found.append(proc)
            except psutil.Error:
                continue
        return found

    def steps(self) -> list[str]:
        """This suite's jobs Slurm still knows (`squeue`): nothing once a server is stopped."""
        done = subprocess.run(["squeue", "-h", "-o", "%i %j %T"], capture_output=True, text=True, timeout=30)
        return [line for line in done.stdout.splitlines() if self.token[:8] in line]

    def steps_once_slurm_cleaned_up(self, timeout: float = 60.0) -> list[str]:
        """This suite's jobs once Slurm has finished a job that ended without the plugin stopping it
        (`scancel`, the time limit, a task that failed): the job stays COMPLETING while slurmd ends its
        step (its processes already gone), longer on a busy machine. Polled until the queue holds none
        of them or `timeout` passes; what is left then."""
        deadline = time.monotonic() + timeout
        while (left := self.steps()) and time.monotonic() < deadline:
            time.sleep(0.5)  # a poll of squeue, not a wait for an event we could be told of
        return left


@pytest.fixture
def slurm_suite(pytester: pytest.Pytester) -> Iterator:
    """Write a suite whose `plain` server is `command = "srun -N2 ... ./node-rank.sh ..."`; after the test,
    prove nothing of it is left on either node or in Slurm's queue."""
    suites: list[SlurmSuite] = []

    def make(tests: str, *, nodes: int = 2, join_timeout: int = 20, srun: str = "", sim: str = "") -> SlurmSuite:
        token = uuid.uuid4().hex
        (pytester.path / "node-rank.sh").write_text(NODE_RANK)
        (pytester.path / "node-rank.sh").chmod(0o755)
        command = (
            f"srun -N2 --ntasks-per-node=1 --job-name=specperf-{token[:8]} {srun} ./node-rank.sh {{python}} "
            f"-m pytest_specperf.sim {{args}} --sim-time-scale 0.02 --nnodes {nodes} "
            f"--dist-init-addr 127.0.0.1:{free_port()} --dist-timeout {join_timeout} {sim}"
        )
        pytester.makefile(
            ".toml",
            specperf=textwrap.dedent(f"""
                [specperf]
                launcher = "sglang"
                python = "{sys.executable}"
                model = "sim/{token}"
                rounds = 2
                startup_timeout = 300
                stop_timeout = 10

                [specperf.servers.plain]
                command = "{command}"

                [specperf.workloads.default]
                prompts = "builtin:qa"
                num_requests = 4
                max_new_tokens = 24
                warmup = 1
                """),
        )
        pytester.makepyfile(test_suite=textwrap.dedent(tests))
        suite = SlurmSuite(pytester, token)
        suites.append(suite)
        return suite

    yield make
    for suite in suites:
        _, alive = psutil.wait_procs(suite.processes(), timeout=15)
        for proc in alive:
            proc.kill()
        assert not alive, f"server processes left behind on the nodes: {[p.pid for p in alive]}"
