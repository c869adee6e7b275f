"""Histories end to end: the speedup check's start-to-start spread from recorded speedups (runs of
both servers paired by the session that stored them), and the history plots."""

from __future__ import annotations

import pytest
from plugin_suites import ONE_MEASURED_TEST, ONE_SPEC_SERVER, STEADY_WORKLOAD

from pytest_specperf.store import read_history

SPEEDUP_TEST = """
import pathlib

import pytest

# both checks far from their thresholds: what a busy machine does to these small rounds never asks for
# a second server start, so each night stores one run per server
@pytest.mark.specperf(server="eagle3-5step", min_speedup=0.5, max_regression=0.9)
def test_speedup(specperf, request):
    # the checks are filled after the body: keep their messages for the test to read
    out = pathlib.Path("checks.txt")
    request.addfinalizer(lambda: out.write_text("\\n".join(c.message for c in specperf.checks)))
"""


def test_speedup_interval_comes_from_recorded_speedups_after_three_paired_nights(make_suite) -> None:
    """Both servers' runs are stored by the same sessions: from the third recorded pair on, the
    speedup's start-to-start spread is the recorded speedups' own, not the prior."""
    suite = make_suite(SPEEDUP_TEST, servers=ONE_SPEC_SERVER, workloads=STEADY_WORKLOAD)
    toml = suite.pytester.path / "specperf.toml"
    toml.write_text(toml.read_text().replace("run_to_run_cv = 0\n", "run_to_run_cv = 0.02\n"))
    checks = suite.pytester.path / "checks.txt"

    suite.run("--specperf-update").assert_outcomes(passed=1)
    assert "prior run-to-run CV 2.0% per start (config run_to_run_cv; 0 recorded speedups" in checks.read_text()
    for night in (1, 2):
        suite.run("--specperf-record").assert_outcomes(passed=1)
        assert f"{night} recorded speedup" in checks.read_text(), checks.read_text()
    sessions = [
        [r.provenance.session for r in read_history(path).runs]
        for path in (
            suite.pytester.path / ".specperf" / "sim" / name / "default-c1.jsonl" for name in ("eagle3-5step", "plain")
        )
    ]
    assert sessions[0] == sessions[1] and len(set(sessions[0])) == 3  # one pair per session

    suite.run().assert_outcomes(passed=1)
    text = checks.read_text()
    assert "from 3 recorded speedups" in text and "start-to-start CV" in text, text
    assert "prior run-to-run CV 2.0% per start" not in text


def test_plot_draws_each_history(make_suite) -> None:
    pytest.importorskip("matplotlib")
    suite = make_suite(ONE_MEASURED_TEST, servers=ONE_SPEC_SERVER, workloads=STEADY_WORKLOAD)
    suite.run("--specperf-update").assert_outcomes(passed=1)
    plots = suite.pytester.path / "plots"
    night = suite.run("--specperf-record", f"--specperf-plot={plots}")
    outcomes = night.parseoutcomes()  # whatever a busy machine makes of the night's verdict, it is drawn
    assert outcomes.get("passed", 0) + outcomes.get("failed", 0) == 1, outcomes
    names = sorted(p.name for p in plots.glob("history-*.png"))
    assert names == ["history-eagle3-5step-default-c1.png", "history-plain-default-c1.png"]
