"""A session cut short (Ctrl-C, SIGTERM, a time limit) under `--specperf-update` or `--specperf-record`
stores every key whose measurement completed and whose checks all ran, names the ones it did not store,
and shows a key cut mid-measurement as "interrupted after k of n rounds".

On a real H200 night (vLLM 0.26.0) a `--specperf-update` session cut by its time limit (Slurm sends
SIGTERM) stored nothing, not even the keys whose checks had all passed, and the key being measured (2
of 3 rounds done) vanished from the table and the JSON. Here the signal comes from the session itself,
at a fixed point: a conftest hook sends SIGTERM to its own process once the second round of a key is
measured, or a test body raises KeyboardInterrupt (Ctrl-C) after its key was measured.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pytest_specperf.measure.records import MeasurementKey
from pytest_specperf.report.jsonreport import load_report

#: three servers' tests, the reference's first (the plugin orders them so)
THREE_TESTS = """
import pytest

@pytest.mark.specperf(server="plain")
def test_plain(specperf):
    pass

@pytest.mark.specperf(server="eagle3-5step")
def test_five_steps(specperf):
    pass

@pytest.mark.specperf(server="eagle3-2step")
def test_two_steps(specperf):
    pass
"""

#: a time limit at a fixed point: SIGTERM to this very process once eagle3-2step's second round is measured
TIME_LIMIT_CONFTEST = """
import signal

from pytest_specperf.measure import rounds

_say = rounds.Measurer._say


def _say_then_time_limit(self, message, *, detail=False):
    _say(self, message, detail=detail)
    if message.startswith("eagle3-2step/default/c1: round 2/"):
        signal.raise_signal(signal.SIGTERM)  # what Slurm sends when the job's time is up


rounds.Measurer._say = _say_then_time_limit
"""

#: Ctrl-C in the body of eagle3-5step's test: its measurement is complete, its checks never ran
CTRL_C_TESTS = """
import pytest

@pytest.mark.specperf(server="plain")
def test_plain(specperf):
    pass

@pytest.mark.specperf(server="eagle3-5step")
def test_five_steps(specperf):
    raise KeyboardInterrupt
"""


def _stored(suite) -> list[str]:
    store = suite.pytester.path / ".specperf" / "sim"
    return sorted(p.name for p in store.iterdir() if p.is_dir()) if store.is_dir() else []


def test_a_time_limit_stores_the_keys_whose_checks_ran(make_suite) -> None:
    suite = make_suite({"test_suite": THREE_TESTS, "conftest": TIME_LIMIT_CONFTEST})
    report_path = suite.pytester.path / "report.json"
    result = suite.run(f"--specperf-json={report_path}", "--specperf-update", "--specperf-rounds=3", subprocess=True)
    assert result.ret == pytest.ExitCode.INTERRUPTED
    assert _stored(suite) == ["eagle3-5step", "plain"]  # both checked and passed; eagle3-2step was cut
    result.stdout.fnmatch_lines(
        [
            "*eagle3-2step*default*1*2 of 3*INTERRUPTED*",
            "*eagle3-2step/default/c1: interrupted after 2 of 3 rounds: the session was cut short*",
            "*not stored eagle3-2step/default/c1: interrupted after 2 of 3 rounds: the session was cut short",
        ]
    )
    assert "not stored eagle3-2step/default/c1: interrupted after 2 of 3 rounds: the session was cut short (" not in (
        result.stdout.str()
    )  # --specperf-update-force would not store it either: no hint that it would

    document = json.loads(report_path.read_text())
    rows = {m["server"]: m for m in document["measurements"]}
    assert set(rows) == {"plain", "eagle3-5step", "eagle3-2step"}
    cut = rows["eagle3-2step"]
    assert cut["interrupted"] == {"rounds": 2, "planned": 3, "text": "interrupted after 2 of 3 rounds"}
    assert len(cut["rounds"]) == 2 and cut["verdict"] == "INCONCLUSIVE"
    assert cut["not_stored"] == "interrupted after 2 of 3 rounds: the session was cut short"
    assert rows["plain"]["interrupted"] is None and rows["eagle3-5step"]["not_stored"] is None
    assert [e["label"] for e in document["interrupted"]] == ["eagle3-2step/default/c1"]
    assert sorted(s["server"] for s in document["saved_baselines"]) == ["eagle3-5step", "plain"]
    from pytest_specperf.measure.rounds import Cut

    loaded = load_report(report_path).report  # valid against the schema, and read back as written
    key = MeasurementKey("eagle3-2step", "default", 1)
    assert loaded.interrupted == {key: Cut(2, 3)}
    assert next(r for r in loaded.rows if r.key == key).interrupted == Cut(2, 3)


def test_under_xdist_the_controller_stores_what_the_workers_checked(make_suite) -> None:
    """The time limit reaches the worker measuring eagle3-2step; the controller, which plans no test of its
    own, stores from what the worker handed in (its plan's tests per key, its verdicts, the cut key and
    its rounds). One worker: the order of the tests, and so where the time limit lands, is fixed."""
    suite = make_suite({"test_suite": THREE_TESTS, "conftest": TIME_LIMIT_CONFTEST})
    report_path = suite.pytester.path / "report.json"
    result = suite.run(
        f"--specperf-json={report_path}", "--specperf-update", "--specperf-rounds=3", "-n", "1", subprocess=True
    )
    assert result.ret == pytest.ExitCode.INTERRUPTED
    assert _stored(suite) == ["eagle3-5step", "plain"]
    result.stdout.fnmatch_lines(["*not stored eagle3-2step/default/c1: interrupted after 2 of 3 rounds*"])
    document = json.loads(report_path.read_text())
    assert [(e["label"], e["rounds"], e["planned"]) for e in document["interrupted"]] == [
        ("eagle3-2step/default/c1", 2, 3)
    ]
    assert len(next(m for m in document["measurements"] if m["server"] == "eagle3-2step")["rounds"]) == 2


def test_a_time_limit_during_a_warm_up_names_the_key(make_suite) -> None:
    """Cut in eagle3-2step's warm-up: no round to show, yet a row of its own, `0 of 3` INTERRUPTED."""
    conftest = TIME_LIMIT_CONFTEST.replace('"eagle3-2step/default/c1: round 2/"', '"eagle3-2step/default/c1: warmup,"')
    suite = make_suite({"test_suite": THREE_TESTS, "conftest": conftest})
    report_path = suite.pytester.path / "report.json"
    result = suite.run(f"--specperf-json={report_path}", "--specperf-update", "--specperf-rounds=3", subprocess=True)
    assert result.ret == pytest.ExitCode.INTERRUPTED
    assert _stored(suite) == ["eagle3-5step", "plain"]
    result.stdout.fnmatch_lines(["*eagle3-2step*default*1*0 of 3*INTERRUPTED*"])
    document = json.loads(report_path.read_text())
    assert {m["server"] for m in document["measurements"]} == {"plain", "eagle3-5step"}
    assert [(e["label"], e["rounds"], e["planned"]) for e in document["interrupted"]] == [
        ("eagle3-2step/default/c1", 0, 3)
    ]


def test_ctrl_c_in_a_test_leaves_its_key_unstored_and_named(make_suite) -> None:
    """Under --specperf-record: the reference (its test passed) is stored; the key whose test was cut
    before its checks is named, and its measured rounds stay in the report."""
    suite = make_suite(CTRL_C_TESTS)
    report_path = suite.pytester.path / "report.json"
    result = suite.run(f"--specperf-json={report_path}", "--specperf-record", subprocess=True)
    assert result.ret == pytest.ExitCode.INTERRUPTED
    assert _stored(suite) == ["plain"]
    result.stdout.fnmatch_lines(
        ["*not stored eagle3-5step/default/c1: the session was cut short before its checks ran"]
    )
    document = json.loads(Path(report_path).read_text())
    rows = {m["server"]: m for m in document["measurements"]}
    assert rows["eagle3-5step"]["interrupted"] is None and len(rows["eagle3-5step"]["rounds"]) == 2
    assert document["interrupted"] == []
