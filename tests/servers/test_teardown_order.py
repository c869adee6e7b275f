"""Teardown in the engine's own order, with real processes: a stand-in launcher whose children (like
SGLang's schedulers) install no SIGTERM handler and leave only when the launcher tells them to."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import psutil
import pytest

from pytest_specperf.servers.launch import LaunchPlan, ServerProcess

#: A scheduler: no SIGTERM handler (the default action kills it); it releases its "GPU memory" and
#: exits when the launcher sends it a shutdown request on its stdin.
CHILD = """
import os, sys
record = sys.argv[1]
sys.stdin.readline()  # the launcher's ShutdownReq
open(record, "w").write("released in userspace")
"""

#: A launcher that, on SIGTERM, asks its children to shut down, waits for them, then exits.
LAUNCHER = """
import os, signal, subprocess, sys, time
records, child = sys.argv[1], sys.argv[2]
children = [
    subprocess.Popen([sys.executable, "-c", child, os.path.join(records, f"scheduler-{i}")], stdin=subprocess.PIPE)
    for i in range(2)
]

def shutdown(signum, frame):
    open(os.path.join(records, "launcher"), "w").write(signal.Signals(signum).name)
    for proc in children:
        proc.stdin.write(b"shutdown\\n")
        proc.stdin.flush()
    for proc in children:
        proc.wait()
    sys.exit(0)

signal.signal(signal.SIGTERM, shutdown)
print("children:", *(p.pid for p in children), flush=True)
while True:
    time.sleep(0.05)
"""

#: A launcher that never exits on SIGTERM (hung shutdown): the group is killed after stop_timeout.
DEAF = LAUNCHER.replace("signal.signal(signal.SIGTERM, shutdown)", "signal.signal(signal.SIGTERM, signal.SIG_IGN)")


def start(tmp_path: Path, launcher: str) -> tuple[ServerProcess, list[psutil.Process]]:
    records = tmp_path / "records"
    records.mkdir()
    plan = LaunchPlan(
        server="standin",
        argv=(sys.executable, "-c", launcher, str(records), CHILD),
        env_overrides={},
        host="127.0.0.1",
        port=1,
        log_path=tmp_path / "standin.log",
        startup_timeout=10,
        launcher="sim",
    )
    process = ServerProcess(plan)
    process.start()
    assert process.pid is not None
    deadline = time.monotonic() + 30
    while not (lines := [x for x in plan.log_path.read_text().splitlines() if x.startswith("children: ")]):
        assert time.monotonic() < deadline and process.exit_code() is None, plan.log_path.read_text()
        time.sleep(0.05)
    line = lines[0]
    return process, [psutil.Process(int(pid)) for pid in line.split()[1:]]


def test_the_launcher_gets_sigterm_and_stops_its_children_itself(tmp_path: Path, monkeypatch) -> None:
    """A SIGTERM to the whole group would kill the schedulers before the launcher could ask them to
    release their GPU memory (`terminate_and_kill_process_tree` in SGLang's tests SIGTERMs the launcher only)."""
    monkeypatch.setenv("PATH", "/nonexistent")  # no nvidia-smi: no GPU wait
    process, children = start(tmp_path, LAUNCHER)
    result = process.stop(timeout=20)
    records = tmp_path / "records"
    assert (records / "launcher").read_text() == "SIGTERM"
    for i in range(2):  # stopped by the launcher's shutdown request, not by a signal of their own
        assert (records / f"scheduler-{i}").read_text() == "released in userspace"
    assert result.ok and result.graceful and result.killed == 0, result
    assert not [c for c in children if c.is_running() and c.status() != psutil.STATUS_ZOMBIE]


def test_a_launcher_that_does_not_exit_in_time_is_killed_with_its_tree(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("PATH", "/nonexistent")
    process, children = start(tmp_path, DEAF)
    result = process.stop(timeout=1)  # the launcher ignores SIGTERM: only the kill after 1 s ends the stop
    assert not result.graceful and result.killed == 3 and not result.stuck, result
    assert "did not exit within stop_timeout after SIGTERM and was killed" in result.line()
    assert not (tmp_path / "records" / "scheduler-0").exists()  # they never got the request: killed
    _, alive = psutil.wait_procs(children, timeout=5)
    assert not alive
    with pytest.raises(ProcessLookupError):
        os.kill(process.pid or 0, 0)
