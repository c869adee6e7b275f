"""Runs a session could not store are kept where they last: beside the store, else in the user's cache.

pytest's temporary folder keeps its last three sessions only (and a `--basetemp` none), so a file of
unstored runs kept there was gone after a few more runs; the night it held was lost for good.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from pytest_specperf.cli import main as specperf

BREAKS_ITS_STORE = """
import os
import shutil
from pathlib import Path

import pytest

@pytest.mark.specperf(server="plain")
def test_plain(specperf):
    # the store fails after the servers started (a disk filled, a mount went): its histories' folder,
    # or the whole store's folder, becomes a file
    broken = os.environ.get("BREAK_STORE")
    if broken == "histories":
        Path("history").mkdir(exist_ok=True)
        Path("history", "sim").write_text("a file where the simulator's histories should be")
    elif broken == "store":
        shutil.rmtree("history", ignore_errors=True)
        Path("history").write_text("a file where the store's folder should be")
"""


def _kept_file(result: pytest.RunResult) -> Path:
    """The file the session's last line names, and that line's promise of how to store it."""
    last = result.outlines[-1]
    assert last.startswith("pytest-specperf: tonight's runs were NOT stored: "), result.outlines[-3:]
    tail = last.partition(" is kept in ")[2]
    path = Path(tail.split(" (it outlasts later sessions)")[0])
    assert tail.endswith(f"once the store is fixed, `specperf store {path}` stores it"), last
    return path


def test_kept_runs_outlast_later_sessions_and_store_once_fixed(make_suite, monkeypatch, capsys) -> None:
    suite = make_suite(BREAKS_ITS_STORE, extra='store = "history"\n')
    path = suite.pytester.path
    monkeypatch.setenv("XDG_CACHE_HOME", str(path / "cache"))
    monkeypatch.setenv("BREAK_STORE", "histories")
    first = suite.pytester.runpytest("-p", "no:randomly", "--specperf-update")  # pytest's own temporary folder
    first.assert_outcomes(passed=1)
    kept = _kept_file(first)
    assert kept.parent.parent == path / "history" / "unstored", kept  # beside the store that failed
    assert kept.name == "runs.json" and kept.parent.name.endswith(tuple("0123456789abcdef"))

    monkeypatch.delenv("BREAK_STORE")
    (path / "history" / "sim").unlink()  # the store is fixed
    for _ in range(3):  # pytest keeps its last three temporary folders; the kept runs are not in one
        suite.pytester.runpytest("-p", "no:randomly").assert_outcomes(passed=1)
        assert kept.is_file()

    assert specperf(["store", str(kept)]) == 0
    assert "stored the 1 run of" in capsys.readouterr().out
    assert specperf(["history", "--store", str(path / "history")]) == 0
    history = capsys.readouterr().out
    assert "plain/default/c1: 1 run, " in history, history  # the kept file is not read as a history


def test_a_store_folder_that_cannot_hold_them_keeps_them_in_the_user_cache(make_suite, monkeypatch) -> None:
    suite = make_suite(BREAKS_ITS_STORE, extra='store = "history"\n')
    path = suite.pytester.path
    monkeypatch.setenv("XDG_CACHE_HOME", str(path / "cache"))
    monkeypatch.setenv("BREAK_STORE", "store")
    result = suite.run("--specperf-update")
    result.assert_outcomes(passed=1)
    kept = _kept_file(result)
    assert kept.is_file() and kept.is_relative_to(path / "cache" / "pytest-specperf" / "unstored"), kept
