"""The nightly history on a git branch, end to end: real pytest sessions on the simulator, a real bare
repository as the remote, two machines recording shards of one suite at once.

This is the recipe of docs/recipes.md: `store = "git:specperf-history"` in the suite's config, and every night
`pytest --specperf-record --specperf-json=...` on each machine (`--specperf-servers` picks its shard).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import uuid
from pathlib import Path

import psutil
import pytest
from gitrepos import git
from plugin_suites import ONE_MEASURED_TEST, SPEC_SERVERS, config_text

from pytest_specperf.cli import main as specperf
from pytest_specperf.store.compact import rounded
from pytest_specperf.verdict.stats import ratio_estimate

BRANCH = "specperf-history"
#: the stored-history checks cannot fail a night here: this is about where runs go, not what they say
LENIENT = f'store = "git:{BRANCH}"\nmax_regression = 0.9\nmax_regression_accept_length = 0.9\n'

SHARDED_TESTS = """
import pytest

@pytest.mark.specperf()  # every speculative config; --specperf-servers picks this machine's shard
def test_speedup(specperf):
    pass
"""

#: both machines have fetched the history before either measures, so their pushes collide every night
RENDEZVOUS_CONFTEST = """
import os
import time
from pathlib import Path


def pytest_collection_finish(session):
    meeting = Path(os.environ["RENDEZVOUS"])
    (meeting / os.environ["MACHINE"]).touch()
    deadline = time.monotonic() + 120
    while len(list(meeting.iterdir())) < 2:
        assert time.monotonic() < deadline, "the other machine never fetched"
        time.sleep(0.05)
"""


def simulators(token: str) -> list[psutil.Process]:
    found = []
    for proc in psutil.process_iter(["cmdline", "status"]):
        try:
            if proc.info["status"] != psutil.STATUS_ZOMBIE and any(token in p for p in proc.info["cmdline"] or []):
                found.append(proc)
        except psutil.Error:
            continue
    return found


def test_an_unreachable_remote_fails_before_any_server_starts(make_suite, tmp_path: Path) -> None:
    nowhere = tmp_path / "nowhere.git"
    suite = make_suite(ONE_MEASURED_TEST, extra=f'store = "git:{nowhere}#{BRANCH}"\n')
    result = suite.run("--specperf-record")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    text = result.stdout.str() + result.stderr.str()
    assert f"pytest-specperf: store: git:{nowhere}#{BRANCH}: cannot reach the remote (" in text, text
    assert "nothing was measured" in text and "Traceback" not in text
    assert suite.starts() == []  # no server was started: the night is not lost after an hour of measuring


def test_a_suite_outside_git_is_told_to_name_the_repository(make_suite) -> None:
    suite = make_suite(ONE_MEASURED_TEST, extra=f'store = "git:{BRANCH}"\n')
    result = suite.run()
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert "is not in a git repository, so it has no origin" in result.stderr.str()
    assert suite.starts() == []


def test_offline_store_records_locally_and_says_so(make_suite, tmp_path: Path) -> None:
    extra = f'store = "git:{tmp_path / "nowhere.git"}#{BRANCH}"\noffline_store = "local-history"\n'
    suite = make_suite(ONE_MEASURED_TEST, extra=extra)
    report = suite.pytester.path / "report.json"
    result = suite.run("--specperf-record", f"--specperf-json={report}")
    result.assert_outcomes(passed=1)
    said = "(offline_store), not in the shared history"
    assert said in result.stdout.str()
    assert any(said in w for w in json.loads(report.read_text())["warnings"])
    local = suite.pytester.path / "local-history" / "sim"
    assert sorted(p.relative_to(local).as_posix() for p in local.rglob("*.jsonl")) == [
        "eagle3-5step/default-c1.jsonl",
        "plain/default-c1.jsonl",
    ]


def test_a_refused_push_fails_the_night_and_says_where_the_runs_are(make_suite, tmp_path: Path) -> None:
    remote = tmp_path / "remote.git"
    git(tmp_path, "init", "--quiet", "--bare", str(remote))
    hook = remote / "hooks" / "pre-receive"
    hook.write_text("#!/bin/sh\nexit 1\n")  # a protected branch, a token that may not write
    hook.chmod(0o755)
    suite = make_suite(ONE_MEASURED_TEST, extra=LENIENT)
    git(suite.pytester.path, "init", "--quiet")
    git(suite.pytester.path, "commit", "--quiet", "--allow-empty", "-m", "the suite")
    git(suite.pytester.path, "remote", "add", "origin", str(remote))
    report = suite.pytester.path / "report.json"
    result = suite.run("--specperf-record", f"--specperf-json={report}")
    assert result.ret == pytest.ExitCode.TESTS_FAILED  # the test passed; its night was not kept
    assert result.parseoutcomes() == {"passed": 1}
    rows = json.loads(report.read_text())["measurements"]
    assert {m["label"]: m["verdict"] for m in rows} == {"plain/default/c1": "ERROR", "eagle3-5step/default/c1": "ERROR"}
    reason = rows[0]["reason"]
    assert reason.startswith(f"git:{BRANCH}: the push was refused ([remote rejected] (pre-receive hook declined))")
    work = next(suite.run_dir.glob("history-*"))
    assert f"committed in {work} (HEAD)" in reason
    assert (work / "sim" / "eagle3-5step" / "default-c1.jsonl").is_file()  # kept: nothing is lost
    assert "recorded runs (--specperf-record)" not in result.stdout.str()  # nothing claims they were stored
    assert git(remote, "for-each-ref") == ""


class Machine:
    """One CI machine: its own checkout of the suite, its shard, its own measurement lock."""

    def __init__(self, name: str, remote: Path, root: Path, shard: str, *args: str) -> None:
        self.name = name
        self.checkout = root / name
        git(root, "clone", "--quiet", "--branch", "main", str(remote), str(self.checkout))
        self.shard = shard
        self.args = args
        self.env = {**os.environ, "SPECPERF_LOCK_DIR": str(root / f"locks-{name}"), "MACHINE": name}

    def start(self, night: int, meeting: Path, reports: Path) -> subprocess.Popen[str]:
        command = [
            sys.executable,
            "-m",
            "pytest",
            "-p",
            "no:randomly",
            "-p",
            "no:cacheprovider",
            "--specperf-record",
            f"--specperf-servers=plain,{self.shard}",
            f"--specperf-json={reports / f'{self.name}-{night}.json'}",
            f"--specperf-run-dir={reports / f'run-{self.name}-{night}'}",
            *self.args,
        ]
        env = {**self.env, "RENDEZVOUS": str(meeting)}
        return subprocess.Popen(
            command, cwd=self.checkout, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
        )


def test_three_nights_of_two_machines_record_every_run_exactly_once(tmp_path: Path) -> None:
    """The done-criterion: shards of one suite on two machines, three nights, one shared branch.

    Every night both machines fetch the branch, measure their shard (each with the reference), and
    push at the same time: one push is rejected and retried on top of the other. The branch ends up
    with each run exactly once, the reference's history with one run per machine and night, each
    speculative run paired with its own machine's reference run by session; `specperf merge` of the
    shards' reports agrees with the history."""
    pytest.importorskip("xdist")
    token = uuid.uuid4().hex[:12]
    remote = tmp_path / "remote.git"
    git(tmp_path, "init", "--quiet", "--bare", str(remote))
    suite = tmp_path / "suite"
    git(tmp_path, "init", "--quiet", str(suite))
    (suite / "specperf.toml").write_text(config_text(token, extra=LENIENT, servers=SPEC_SERVERS))
    (suite / "test_perf.py").write_text(textwrap.dedent(SHARDED_TESTS))
    (suite / "conftest.py").write_text(textwrap.dedent(RENDEZVOUS_CONFTEST))
    git(suite, "add", ".")
    git(suite, "commit", "--quiet", "-m", "the suite")
    git(suite, "push", "--quiet", str(remote), "HEAD:refs/heads/main")
    machines = [
        Machine("gpu-a", remote, tmp_path, "eagle3-5step", "-n", "2"),  # xdist workers read the fetched branch
        Machine("gpu-b", remote, tmp_path, "eagle3-2step"),
    ]
    reports = tmp_path / "reports"
    reports.mkdir()
    try:
        for night in range(3):
            meeting = tmp_path / f"meeting-{night}"
            meeting.mkdir()
            running = [machine.start(night, meeting, reports) for machine in machines]
            outputs = [process.communicate(timeout=600)[0] for process in running]
            for machine, process, output in zip(machines, running, outputs, strict=True):
                assert process.returncode == 0, f"{machine.name}, night {night}:\n{output}"
                assert f"git:{BRANCH}: pushed 2 runs as commit " in output, output
            retried = [o for o in outputs if "after 1 push(es) by other jobs came first" in o]
            assert len(retried) == 1, outputs  # both fetched the same branch: the second push was rejected
            for machine in machines:
                rows = json.loads((reports / f"{machine.name}-{night}.json").read_text())["measurements"]
                verdicts = {m["label"]: m["verdict"] for m in rows}
                assert len(verdicts) == 2 and ("NEW" in verdicts.values()) == (night == 0), verdicts
    finally:
        leftovers = [p.pid for p in simulators(token)]
        for pid in leftovers:
            psutil.Process(pid).kill()
    assert not leftovers

    def history(path: str) -> list[dict]:
        return [json.loads(line)["run"] for line in git(remote, "show", f"{BRANCH}:sim/{path}").splitlines()]

    def stored_samples(run: dict) -> tuple[float, ...]:
        """A stored run's throughputs (store/compact.py: its setup names the columns of its rounds)."""
        setup = json.loads(git(remote, "show", f"{BRANCH}:setups/{run['setup']}.json"))
        return tuple(run["rounds"][setup["columns"].index("output_throughput")])

    plain, five, two = (history(f"{s}/default-c1.jsonl") for s in ("plain", "eagle3-5step", "eagle3-2step"))
    assert len(plain) == 6 and len(five) == 3 and len(two) == 3  # one reference run per machine and night
    everything = plain + five + two
    assert len({r["provenance"]["run_id"] for r in everything}) == len(everything) == 12  # no run twice
    assert {r["provenance"]["host"] for r in plain} == {five[0]["provenance"]["host"]}  # one real host here
    sessions = [r["provenance"]["session"] for r in plain]
    assert len(set(sessions)) == 6  # each shard's session recorded its own reference run
    assert {r["provenance"]["session"] for r in five + two} == set(sessions)  # and pairs with it
    assert {r["segment"] for r in everything} == {0}
    assert len(git(remote, "log", "--format=%H", BRANCH).splitlines()) == 6  # one commit per machine and night

    # specperf merge of the last night's shards agrees with the shared history
    merged = reports / "merged.json"
    assert specperf(["merge", str(reports / "gpu-a-2.json"), str(reports / "gpu-b-2.json"), "-o", str(merged)]) == 0
    rows = json.loads(merged.read_text())["measurements"]
    by_samples = {stored_samples(r): r for r in everything}
    reference_sessions = set()
    for row in rows:
        stored = by_samples[_samples(row["rounds"])]  # the merged report's measurement is a stored run
        assert json.loads(git(remote, "show", f"{BRANCH}:setups/{stored['setup']}.json"))["server"] == row["server"]
        if row["is_reference"]:
            reference_sessions.add(stored["provenance"]["session"])
            continue
        partner = next(r for r in plain if r["provenance"]["session"] == stored["provenance"]["session"])
        expected = ratio_estimate(list(_samples(row["rounds"])), list(stored_samples(partner)))
        assert row["estimates"]["speedup"]["value"] == pytest.approx(expected.value, rel=1e-5)  # stored: 6 digits
    assert len(reference_sessions) == 2  # both shards' reference runs, each from its own session
    assert len(rows) == 4


def _samples(rounds: list[dict]) -> tuple[float, ...]:
    """A report's rounds' throughputs as the store keeps them (6 significant digits)."""
    return tuple(rounded(r["output_throughput"]) for r in rounds)


def test_the_store_work_tree_is_gone_when_pytest_returns(make_suite, tmp_path: Path) -> None:
    """A session closes its store at the end, not only at the process's exit: pytest run in-process (an
    IDE, `pytest.main` in a script) leaves no work tree and no registered worktree behind."""
    remote = tmp_path / "remote.git"
    git(tmp_path, "init", "--quiet", "--bare", str(remote))
    suite = make_suite(ONE_MEASURED_TEST, extra=LENIENT)
    git(suite.pytester.path, "init", "--quiet")
    git(suite.pytester.path, "commit", "--quiet", "--allow-empty", "-m", "the suite")
    git(suite.pytester.path, "remote", "add", "origin", str(remote))
    result = suite.run("--specperf-record")  # in this process: its atexit handlers have not run
    result.assert_outcomes(passed=1)
    assert "sim/plain/default-c1.jsonl" in git(remote, "ls-tree", "-r", "--name-only", BRANCH)
    assert list(suite.run_dir.glob("history-*")) == []
    assert len(git(suite.pytester.path, "worktree", "list").splitlines()) == 1  # the checkout only
