"""Simulated and real-engine baselines in one store: switching a suite from `launcher = "sim"` to a GPU
node gives NEW (no baseline yet), never INCOMPARABLE, and a store from before the sim/ level still reads.

A real engine cannot run here; the suite's conftest stands in for one by fingerprinting the simulator
as SGLang (launcher sglang, no simulator block in /server_info), which is all the store looks at.
"""

from __future__ import annotations

from pytest_specperf.store.file import FileStore
from pytest_specperf.store.records import document, dumps

REAL_ENGINE_CONFTEST = """
import os
import pytest_specperf.measure.rounds as rounds

_capture = rounds.capture


def _as_real_engine(*, launch_identity, server_info=None, **kwargs):
    info = {k: v for k, v in (server_info or {}).items() if k != "simulator"}
    return _capture(launch_identity={**launch_identity, "launcher": "sglang"}, server_info=info, **kwargs)


def pytest_configure(config):
    if os.environ.get("AS_REAL_ENGINE"):
        rounds.capture = _as_real_engine


def pytest_unconfigure(config):
    rounds.capture = _capture
"""

#: a row compared with a stored baseline ("vs baseline" has a ratio): any verdict but NEW/INCOMPARABLE
COMPARED = r"plain \(ref\) +default +1 .*%.* (PASS|IMPROVED|SUSPECT|INCONCLUSIVE|REGRESSION)$"

#: which layer a run is compared with is what these tests are about, not the comparison's outcome: a
#: busy machine's speed cannot fail them
LENIENT = "max_regression = 0.9\nmax_regression_accept_length = 0.9\n"

ONE_TEST = """
import pytest

@pytest.mark.specperf(server="plain", throughput=(1, None))
def test_perf(specperf):
    pass
"""


def test_switching_to_a_real_engine_gives_new_not_incomparable(make_suite, monkeypatch) -> None:
    files = {"test_suite": ONE_TEST, "conftest": REAL_ENGINE_CONFTEST}
    suite = make_suite(files, servers="[specperf.servers.plain]\n", extra=LENIENT)
    store = suite.pytester.path / ".specperf"
    suite.run("--specperf-update").assert_outcomes(passed=1)
    assert (store / "sim" / "plain" / "default-c1.jsonl").is_file()
    assert not (store / "plain").exists()

    monkeypatch.setenv("AS_REAL_ENGINE", "1")  # the first night on the GPU node
    first_night = suite.run()
    first_night.assert_outcomes(passed=1)
    first_night.stdout.re_match_lines([r"plain \(ref\) +default +1 .* NEW"])
    assert "INCOMPARABLE" not in first_night.stdout.str()
    stored = suite.run("--specperf-update", "-v")  # -v lists each stored key
    stored.stdout.fnmatch_lines(["*plain/default/c1: none → *"])
    assert (store / "plain" / "default-c1.jsonl").is_file()

    second_night = suite.run("--specperf-record")
    second_night.assert_outcomes(passed=1)
    second_night.stdout.re_match_lines([COMPARED])

    monkeypatch.delenv("AS_REAL_ENGINE")  # back on the simulator: its own baseline is still there
    dry_run = suite.run()
    dry_run.assert_outcomes(passed=1)
    dry_run.stdout.re_match_lines([COMPARED])


def test_a_simulated_store_from_before_the_sim_level_still_compares(make_suite) -> None:
    suite = make_suite({"test_suite": ONE_TEST}, servers="[specperf.servers.plain]\n", extra=LENIENT)
    store = suite.pytester.path / ".specperf"
    suite.run("--specperf-update").assert_outcomes(passed=1)
    (store / "plain").mkdir()
    history = FileStore(store).read(store / "sim" / "plain" / "default-c1.jsonl")
    (store / "plain" / "default-c1.json").write_text(dumps(document(list(history.runs))))  # the old layout
    (store / "sim" / "plain" / "default-c1.jsonl").unlink()

    result = suite.run("--specperf-update-force", "-v")  # stored whatever a loaded machine's noise says; -v lists it
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["*plain/default/c1: * → *(plain/default-c1.jsonl; segment 1, 2 runs)"])
    assert not (store / "plain" / "default-c1.json").exists()  # moved under sim/ by the save, history kept
    assert len((store / "sim" / "plain" / "default-c1.jsonl").read_text().splitlines()) == 2
    assert suite.run().stdout.re_match_lines([COMPARED]) is None  # and compared from its new place
