"""The git store against real bare repositories on local disk: a branch shared by every recorder.

Each test makes a bare repository (the remote) and clones of a suite repository whose `origin` is
that remote, the way CI machines check a suite out. Concurrent recorders are separate processes
that meet at a barrier after fetching, so their pushes really do collide.
"""

from __future__ import annotations

import dataclasses
import json
import multiprocessing
import os
import tempfile
from pathlib import Path
from typing import Any

import pytest
from gitrepos import git
from test_store import measurement

from pytest_specperf.config.location import StoreLocation
from pytest_specperf.errors import StoreError
from pytest_specperf.measure.records import MeasurementKey
from pytest_specperf.store import GitStore, Store, open_store
from pytest_specperf.store.file import FileStore

BRANCH = "specperf-history"
SHARED = MeasurementKey("plain", "chat", 1)


@pytest.fixture
def remote(tmp_path: Path) -> Path:
    """A bare repository holding the suite's code on `main`."""
    bare = tmp_path / "remote.git"
    git(tmp_path, "init", "--quiet", "--bare", str(bare))
    seed = tmp_path / "seed"
    git(tmp_path, "init", "--quiet", str(seed))
    (seed / "specperf.toml").write_text("[specperf]\n")
    git(seed, "add", "specperf.toml")
    git(seed, "commit", "--quiet", "-m", "the suite")
    git(seed, "push", "--quiet", str(bare), "HEAD:refs/heads/main")
    return bare


def checkout(remote: Path, where: Path) -> Path:
    """A machine's checkout of the suite (origin = the remote)."""
    git(where.parent, "clone", "--quiet", "--branch", "main", str(remote), str(where))
    return where


def store_of(suite: Path, work: Path) -> GitStore:
    store = open_store(StoreLocation.parse(f"git:{BRANCH}", base=suite, where="store"), work_dir=work)
    assert isinstance(store, GitStore)
    return store


def branch_runs(remote: Path, path: str) -> list[dict]:
    """The runs of one history file as the branch on the remote holds it."""
    text = git(remote, "show", f"{BRANCH}:{path}")
    return [json.loads(line)["run"] for line in text.splitlines()]


def test_records_into_a_new_branch_and_leaves_the_checkout_alone(remote: Path, tmp_path: Path) -> None:
    suite = checkout(remote, tmp_path / "machine-a")
    head, status = git(suite, "rev-parse", "HEAD"), git(suite, "status", "--porcelain")
    store = store_of(suite, tmp_path / "work-a")
    assert isinstance(store, Store)
    assert store.prepare() == [] and store.entries() == []  # the branch does not exist yet
    store.save(measurement(key=SHARED), suite_dir=suite, session="s1")
    store.save(measurement(), suite_dir=suite, session="s1", new_segment=False)
    lines = store.publish()
    assert lines == [f"git:{BRANCH}: pushed 2 runs as commit {git(remote, 'rev-parse', BRANCH)[:7]}"]
    store.close()

    assert not (tmp_path / "work-a").exists()  # the work tree is gone after close
    message = git(remote, "log", "-1", "--format=%B", BRANCH)
    day = branch_runs(remote, "plain/chat-c1.jsonl")[0]["provenance"]["created"][:10]
    assert message.startswith(f"specperf: record 2 runs of machine-a {day}")
    assert f", commit {head[:7]}" in message.splitlines()[0]
    assert "plain/chat/c1" in message and "session s1 on " in message
    assert [len(branch_runs(remote, p)) for p in ("plain/chat-c1.jsonl", "eagle3-5step/chat-c1.jsonl")] == [1, 1]
    assert git(remote, "show", f"{BRANCH}:.gitignore").splitlines()[1:] == [".specperf.lock", ".*.tmp"]
    # the user's checkout: same commit, nothing changed, no branch of ours, no work tree left
    assert git(suite, "rev-parse", "HEAD") == head and git(suite, "status", "--porcelain") == status
    assert git(suite, "for-each-ref", "--format=%(refname)", "refs/heads").splitlines() == ["refs/heads/main"]
    assert len(git(suite, "worktree", "list").splitlines()) == 1

    reader = store_of(suite, tmp_path / "work-b")
    reader.prepare()
    assert [e.measurement.key.label for e in reader.entries()] == ["eagle3-5step/chat/c1", "plain/chat/c1"]
    assert reader.load(SHARED).provenance.session == "s1"
    reader.close()


def test_a_rejected_push_merges_runs_and_is_retried(remote: Path, tmp_path: Path) -> None:
    """Two machines fetch the same branch, both append to one key; the second push is rejected,
    fetches the first one's commit, appends its run on top and pushes: both runs, once each."""
    first, second = (store_of(checkout(remote, tmp_path / m), tmp_path / f"work-{m}") for m in ("a", "b"))
    for number, store in enumerate((first, second)):
        store.prepare()
        store.save(measurement(key=SHARED, throughputs=(60.0 + number,)), suite_dir=None, session=f"s{number}")
        store.save(measurement(key=MeasurementKey(f"spec-{number}", "chat", 1)), suite_dir=None, session=f"s{number}")
    assert first.publish()[0].startswith(f"git:{BRANCH}: pushed 2 runs as commit ")
    pushed = second.publish()
    assert pushed[0].endswith("after 1 push(es) by other jobs came first (their runs are kept)"), pushed

    runs = branch_runs(remote, "plain/chat-c1.jsonl")
    assert [r["provenance"]["session"] for r in runs] == ["s0", "s1"]  # the first push's run, then ours
    assert [r["segment"] for r in runs] == [0, 1]  # each save was --specperf-update (new_segment)
    assert len({r["provenance"]["run_id"] for r in runs}) == 2
    assert git(remote, "ls-tree", "--name-only", BRANCH).splitlines() == [
        ".gitignore",
        "fingerprints",
        "plain",
        "setups",
        "spec-0",
        "spec-1",
    ]
    log = git(remote, "log", "--format=%s", BRANCH).splitlines()
    assert len(log) == 2 and all(s.startswith("specperf: update 2 runs of ") for s in log)
    first.close()
    second.close()


def test_a_push_that_reached_the_remote_is_not_applied_twice(remote: Path, tmp_path: Path) -> None:
    """A push whose answer was lost, then another job pushed on top: the retry is rejected, finds its own
    runs on the branch (by run id) and adds nothing."""
    store = store_of(checkout(remote, tmp_path / "a"), tmp_path / "work")
    store.prepare()
    store.save(measurement(key=SHARED), suite_dir=None, session="s1")
    store.publish()
    other = store_of(checkout(remote, tmp_path / "b"), tmp_path / "work-b")
    other.prepare()
    other.save(measurement(key=SHARED), suite_dir=None, session="s2", new_segment=False)
    other.publish()
    other.close()
    tip = git(remote, "rev-parse", BRANCH)
    store._base = None  # as if the push had failed: the session still holds the branch as it fetched it
    assert store.publish() == [f"git:{BRANCH}: the 1 run were on the branch already (an earlier push reached it)"]
    assert git(remote, "rev-parse", BRANCH) == tip
    assert [r["provenance"]["session"] for r in branch_runs(remote, "plain/chat-c1.jsonl")] == ["s1", "s2"]
    store.close()


def test_appending_a_run_twice_keeps_it_once(tmp_path: Path) -> None:
    store = FileStore(tmp_path / "store")
    result = store.save(measurement(), suite_dir=None, session="s")
    run = store.load(measurement().key).runs[0]
    again = store.append(run, new_segment=False)
    assert again.runs == 1 and again.segment == result.segment
    assert len(store.load(measurement().key).runs) == 1


def _recorder(suite: str, work: str, number: int, barrier: Any) -> None:
    """One machine: fetch, wait until every machine has fetched the same branch, record 3 runs, push."""
    store = store_of(Path(suite), Path(work))
    store.prepare()
    barrier.wait(timeout=60)
    for night in range(3):
        store.save(
            measurement(key=SHARED, throughputs=(float(number * 10 + night),)),
            suite_dir=None,
            session=f"m{number}-n{night}",
            new_segment=False,
        )
    store.save(measurement(key=MeasurementKey(f"spec-{number}", "chat", 1)), suite_dir=None, session=f"m{number}")
    store.publish()
    store.close()


def test_concurrent_recorders_lose_nothing_and_duplicate_nothing(remote: Path, tmp_path: Path) -> None:
    machines = 3
    context = multiprocessing.get_context("fork" if "fork" in multiprocessing.get_all_start_methods() else "spawn")
    barrier = context.Barrier(machines)
    suites = [checkout(remote, tmp_path / f"machine-{m}") for m in range(machines)]
    processes = [
        context.Process(target=_recorder, args=(str(suites[m]), str(tmp_path / f"work-{m}"), m, barrier))
        for m in range(machines)
    ]
    for process in processes:
        process.start()
    for process in processes:
        process.join(timeout=120)
    assert [p.exitcode for p in processes] == [0] * machines

    runs = branch_runs(remote, "plain/chat-c1.jsonl")
    sessions = [r["provenance"]["session"] for r in runs]
    assert sorted(sessions) == sorted(f"m{m}-n{n}" for m in range(machines) for n in range(3))  # each once
    for m in range(machines):  # a machine's runs stay in its order, whoever pushed first
        mine = [s for s in sessions if s.startswith(f"m{m}-")]
        assert mine == [f"m{m}-n{n}" for n in range(3)]
    assert {r["segment"] for r in runs} == {0}
    assert len(git(remote, "log", "--format=%H", BRANCH).splitlines()) == machines
    for m in range(machines):
        assert len(branch_runs(remote, f"spec-{m}/chat-c1.jsonl")) == 1


def test_an_unreachable_remote_fails_in_prepare_and_leaves_nothing(tmp_path: Path) -> None:
    location = StoreLocation.parse(f"git:{tmp_path / 'nowhere.git'}#{BRANCH}", base=tmp_path, where="store")
    store = open_store(location, work_dir=tmp_path / "work")
    with pytest.raises(StoreError) as info:
        store.prepare()
    message = str(info.value)
    assert message.startswith(f"git:{tmp_path / 'nowhere.git'}#{BRANCH}: cannot reach the remote (")
    assert "nothing was measured" in message and "offline_store" in message
    assert not (tmp_path / "work").exists()


def test_a_credential_in_the_origin_url_never_reaches_a_message(remote: Path, tmp_path: Path) -> None:
    """GitLab CI puts its job token in the checkout's origin URL; git repeats URLs in its errors."""
    suite = checkout(remote, tmp_path / "a")
    git(suite, "remote", "set-url", "origin", "http://gitlab-ci-token:glcbt-s3cr3t-t0ken@127.0.0.1:9/suite.git")
    with pytest.raises(StoreError) as info:
        store_of(suite, tmp_path / "work").prepare()
    assert "cannot reach the remote" in str(info.value)
    assert "s3cr3t" not in str(info.value) and "gitlab-ci-token" not in str(info.value)


def test_offline_store_records_locally_and_says_so(tmp_path: Path) -> None:
    location = StoreLocation.parse(f"git:{tmp_path / 'nowhere.git'}#{BRANCH}", base=tmp_path, where="store")
    location = dataclasses.replace(location, offline=tmp_path / "local")
    store = open_store(location, work_dir=tmp_path / "work")
    warnings = store.prepare()
    assert len(warnings) == 1 and "the remote cannot be reached" in warnings[0]
    assert f"recorded in the local store {tmp_path / 'local'} (offline_store), not in the shared history" in warnings[0]
    store.save(measurement(), suite_dir=None)
    assert store.publish() == []
    assert store.root == tmp_path / "local" and FileStore(tmp_path / "local").load(measurement().key) is not None
    follower = open_store(location, work_dir=tmp_path / "work", follower=True)
    assert follower.root == tmp_path / "local"  # an xdist worker reads what its controller fell back to
    store.close()


def test_an_xdist_worker_reads_the_controllers_work_tree(remote: Path, tmp_path: Path) -> None:
    suite = checkout(remote, tmp_path / "a")
    writer = store_of(suite, tmp_path / "first")
    writer.prepare()
    writer.save(measurement(), suite_dir=None)
    writer.publish()
    writer.close()
    controller = store_of(suite, tmp_path / "work")
    controller.prepare()
    worker = open_store(controller.spec, work_dir=tmp_path / "work", follower=True)
    assert worker.prepare() == [] and worker.root == tmp_path / "work"
    assert worker.load(measurement().key) is not None
    worker.save(measurement(throughputs=(1.0,)), suite_dir=None)  # a worker never saves; if it did, nothing is pushed
    assert worker.publish() == []
    worker.close()
    assert (tmp_path / "work" / ".git").exists()  # only the controller removes its work tree
    controller.close()
    assert not (tmp_path / "work").exists()


def test_a_refused_push_keeps_the_runs_and_names_the_reason(remote: Path, tmp_path: Path) -> None:
    hook = remote / "hooks" / "pre-receive"
    hook.write_text("#!/bin/sh\necho 'protected branch' >&2\nexit 1\n")
    hook.chmod(0o755)
    store = store_of(checkout(remote, tmp_path / "a"), tmp_path / "work")
    store.prepare()
    store.save(measurement(), suite_dir=None)
    with pytest.raises(StoreError) as info:
        store.publish()
    message = str(info.value)
    assert "the push was refused ([remote rejected] (pre-receive hook declined))" in message
    assert f"committed in {tmp_path / 'work'}" in message
    store.close()
    assert (tmp_path / "work" / "eagle3-5step" / "chat-c1.jsonl").is_file()  # kept: nothing is lost
    assert "specperf: update 1 run" in git(tmp_path / "work", "log", "-1", "--format=%s")


def test_a_suite_outside_git_needs_a_url_and_works_with_one(remote: Path, tmp_path: Path) -> None:
    loose = tmp_path / "loose"
    loose.mkdir()
    with pytest.raises(StoreError, match="is not in a git repository, so it has no origin"):
        store_of(loose, tmp_path / "w1").prepare()
    location = StoreLocation.parse(f"git:{remote}#{BRANCH}", base=loose, where="store")
    store = open_store(location, work_dir=tmp_path / "w2")
    store.prepare()
    store.save(measurement(), suite_dir=None)
    assert store.publish()[0].startswith(f"git:{remote}#{BRANCH}: pushed 1 run as commit ")
    store.close()
    assert not (tmp_path / "w2").exists()


def test_a_repository_without_origin_is_named(tmp_path: Path) -> None:
    suite = tmp_path / "suite"
    git(tmp_path, "init", "--quiet", str(suite))
    with pytest.raises(StoreError, match=r"has no remote named origin; add one, or name the repository"):
        store_of(suite, tmp_path / "work").prepare()


def test_git_hook_variables_never_point_at_the_users_repository(
    remote: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """pytest run from a git hook inherits GIT_DIR and GIT_INDEX_FILE; the store must not write there."""
    suite = checkout(remote, tmp_path / "a")
    monkeypatch.setenv("GIT_DIR", str(suite / ".git"))
    monkeypatch.setenv("GIT_INDEX_FILE", str(suite / ".git" / "index"))
    before = (suite / ".git" / "index").read_bytes()
    store = store_of(suite, tmp_path / "work")
    store.prepare()
    store.save(measurement(), suite_dir=None)
    store.publish()
    store.close()
    monkeypatch.delenv("GIT_DIR")
    monkeypatch.delenv("GIT_INDEX_FILE")
    assert (suite / ".git" / "index").read_bytes() == before
    assert len(branch_runs(remote, "eagle3-5step/chat-c1.jsonl")) == 1
    assert os.environ.get("GIT_DIR") is None


def test_the_specperf_command_reads_a_branch(
    remote: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from pytest_specperf.cli import main

    store = store_of(checkout(remote, tmp_path / "a"), tmp_path / "work")
    store.prepare()
    store.save(measurement(key=SHARED), suite_dir=None, session="s1")
    store.save(measurement(key=SHARED, throughputs=(80.0, 82.0)), suite_dir=None, session="s2", new_segment=False)
    store.publish()
    store.close()
    temporary = tmp_path / "tmp"
    temporary.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(temporary))
    where = f"git:{remote}#{BRANCH}"
    assert main(["history", "plain", "--store", where]) == 0
    out = capsys.readouterr().out
    # where the history lives on the branch, not in the temporary work tree it was read from (gone now)
    assert out.startswith(f"plain/chat/c1: 2 runs, {where}, file plain/chat-c1.jsonl\n"), out
    assert [line.split()[5] for line in out.splitlines()[3:5]] == ["72.0±3.4", "81.0±6.3"]  # tok/s of both runs
    assert main(["show", where]) == 0
    assert capsys.readouterr().out.startswith(f"stored baselines in {where}:")
    assert main(["diff", where, where]) == 0  # a store against itself: nothing regressed
    assert main(["show", f"git:{tmp_path / 'nowhere.git'}#{BRANCH}"]) == 2
    assert "cannot reach the remote" in capsys.readouterr().err
    assert list(temporary.iterdir()) == []  # every temporary work tree is gone


def test_accept_on_a_branch_pushes_the_new_level(
    remote: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from pytest_specperf.cli import main

    store = store_of(checkout(remote, tmp_path / "a"), tmp_path / "work")
    for night, level in enumerate((100.0, 100.0, 90.0, 90.0)):
        store.save(
            measurement(key=SHARED, throughputs=(level, level)),
            suite_dir=None,
            session=f"s{night}",
            new_segment=night == 0,
        )
    store.publish()
    store.close()
    where = f"git:{remote}#{BRANCH}"
    note = "a slower kernel, on purpose"
    assert main(["accept", "plain/chat/c1", "--since", "3", "--note", note, "--store", where]) == 0
    out = capsys.readouterr().out
    assert "the accepted level is now the 2 runs from run 3 on" in out and "pushed the acceptance as commit" in out
    runs = branch_runs(remote, "plain/chat-c1.jsonl")
    assert [r["segment"] for r in runs] == [0, 0, 1, 1]
    assert runs[2]["acceptance"].endswith("with specperf accept: a slower kernel, on purpose")
    assert (
        git(remote, "log", "-1", "--format=%s", BRANCH)
        == "specperf: accept plain/chat-c1.jsonl from the run of " + (runs[2]["provenance"]["created"][:10])
    )
