"""The fault campaign as tests: each fault, end to end, asserts the error text, pytest's exit code, the
report row (JSON), the stored files and an empty process table afterwards (`make_suite` checks that)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

SPEC_TEST = """
import pytest

@pytest.mark.specperf(server="eagle3-5step", min_speedup=0.5)
def test_speedup(specperf):
    pass
"""

TWO_LEVELS = """
[specperf.workloads.default]
prompts = "builtin:chat"
num_requests = 4
max_new_tokens = 24
warmup = 1
concurrency = [1, 2]
"""


def report_rows(path: Path) -> dict[str, dict]:
    """The JSON report's measurement entries and errors, by `server/workload/cLEVEL`."""
    document = json.loads(path.read_text())
    rows = {f"{m['server']}/{m['workload']}/c{m['concurrency']}": m for m in document["measurements"]}
    for error in document.get("errors", []):
        rows.setdefault(f"{error['server']}/{error['workload']}/c{error['concurrency']}", error)
    return rows


def test_many_failed_measurements_are_all_reported(make_suite, one_spec_server) -> None:
    """Two or more failed measurements used to crash the session end ('<' between MeasurementKeys)."""
    suite = make_suite(SPEC_TEST, servers=one_spec_server('sim_args = ["--sim-fail-at-startup"]'),
                       workloads=TWO_LEVELS)
    report = suite.pytester.path / "report.json"
    result = suite.run(f"--specperf-json={report}")
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.assert_outcomes(errors=2)
    text = result.stdout.str()
    assert "TypeError" not in text and "INTERNALERROR" not in text
    result.stdout.fnmatch_lines(["*ERROR eagle3-5step/default/c1: *exited with code 1*",
                                 "*ERROR eagle3-5step/default/c2: *exited with code 1*"])
    rows = report_rows(report)
    assert rows["eagle3-5step/default/c1"]["verdict"] == "ERROR"
    assert rows["eagle3-5step/default/c2"]["verdict"] == "ERROR"


PLAIN_TEST = """
import pytest

@pytest.mark.specperf(server="plain")
def test_plain(specperf):
    pass
"""


def stored_baseline(suite) -> Path:
    """Measure and store the plain baseline once; the path of the stored file."""
    suite.run("--specperf-update").assert_outcomes(passed=1)
    (path,) = (suite.pytester.path / ".specperf" / "plain").glob("*.json")
    return path


@pytest.mark.parametrize(
    ("damage", "reason"),
    [
        (lambda text: text[: len(text) // 2], "corrupt stored baseline: not valid JSON"),
        (lambda text: text.replace('"schema_version": 1', '"schema_version": 99'), "schema_version 99 is newer"),
    ],
    ids=["truncated", "newer-schema"],
)
def test_unreadable_baseline_errors_the_test_and_its_row(make_suite, damage, reason: str) -> None:
    suite = make_suite(PLAIN_TEST)
    path = stored_baseline(suite)
    path.write_text(damage(path.read_text()))
    report = suite.pytester.path / "report.json"
    result = suite.run(f"--specperf-json={report}")
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.assert_outcomes(errors=1)
    assert reason in result.stdout.str()
    assert "Traceback" not in result.stdout.str()
    rows = report_rows(report)
    assert rows["plain/default/c1"]["verdict"] == "ERROR"
    assert reason in rows["plain/default/c1"]["reason"]
    assert any(line.startswith("plain (ref)") and line.rstrip().endswith("ERROR") for line in result.outlines)


def test_update_keeps_a_corrupt_baseline_aside_and_says_so(make_suite) -> None:
    suite = make_suite(PLAIN_TEST)
    path = stored_baseline(suite)
    path.write_text("{ truncated")
    result = suite.run("--specperf-update")
    result.assert_outcomes(passed=1)
    (kept,) = path.parent.glob(f"{path.name}.unreadable-*")
    assert kept.read_text() == "{ truncated"
    assert f"the previous file was unreadable, kept as {kept.name}" in " ".join(result.stdout.str().split())
    assert "none →" in result.stdout.str()


def test_unwritable_store_is_one_line_and_the_row_says_error(make_suite) -> None:
    suite = make_suite(PLAIN_TEST, extra='store = "not-a-directory"\n')
    (suite.pytester.path / "not-a-directory").write_text("a file where the store should be")
    report = suite.pytester.path / "report.json"
    result = suite.run("--specperf-update", f"--specperf-json={report}")
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.assert_outcomes(errors=1)
    text = " ".join(result.stdout.str().split())  # the summary wraps long lines
    assert "cannot write the baseline (File exists); make the store" in text
    assert text.count("cannot write the baseline") == 2  # the test error and the ERROR line of the summary
    assert "Traceback" not in text and "PermissionError" not in text and "NotADirectoryError" not in text
    assert report_rows(report)["plain/default/c1"]["verdict"] == "ERROR"
