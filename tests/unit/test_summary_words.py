"""The default summary fits a screen, a capped verdict says why in its row, a test of the accept length is
judged on the accept length, a failure message says each sentence once, and a stored run is marked with
the verdict its row showed (what the dashboard reads back)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from report_samples import CONFIG, baseline_of, measurement, story_report, sweep_report

from pytest_specperf.report.analysis import build_report
from pytest_specperf.report.terminal import render_text, row_cells, summary_blocks
from pytest_specperf.session.baselines import Baselines
from pytest_specperf.session.outcomes import Outcomes
from pytest_specperf.session.storing import Recorder
from pytest_specperf.store.file import FileStore
from pytest_specperf.verdict.checks import Limits, accept_length_only, evaluate
from pytest_specperf.verdict.drift import Change, FingerprintDiff
from pytest_specperf.verdict.explain import Explanation
from pytest_specperf.verdict.markers import SpecperfMarker
from pytest_specperf.verdict.outcome import failure_message
from pytest_specperf.verdict.stats import Estimate
from pytest_specperf.verdict.verdicts import Verdict

LIMITS = Limits(max_regression=0.05, max_regression_accept_length=0.02, max_error_rate=0.0)
DETAILS = ("cost model", "verify-cost fit", "concurrency sweep", "acceptance by draft position", "latency percentiles")


def spec(tok_s: list[float], tau: float = 2.1):
    return measurement("eagle3-5step", tok_s, [tau] * len(tok_s), [1.4] * len(tok_s))


def test_the_default_summary_is_the_table_and_what_needs_attention() -> None:
    for report in (story_report(), sweep_report()):
        short = "\n".join(render_text(summary_blocks(report, store=".specperf", detail=False)))
        assert not [title for title in DETAILS if title in short], short
        assert "add a config differing only in draft tokens" not in short
        full = "\n".join(render_text(summary_blocks(report, store=".specperf", detail=True, full=True)))
        assert "cost model" in full and "latency percentiles" in full
        assert "add a config differing only in draft tokens" not in full  # advice nobody can act on
    sweep = "\n".join(render_text(summary_blocks(sweep_report(), detail=True)))
    assert "concurrency sweep" in sweep


def test_a_suspect_capped_by_one_start_on_a_short_history_says_so_in_its_row(tmp_path: Path) -> None:
    """-14% against one stored run on one server start: at most SUSPECT (the spread is the prior), and the
    row says why, so a larger drop reading SUSPECT beside a smaller REGRESSION explains itself."""
    stored = baseline_of(spec([700, 701, 699, 700, 700]), tmp_path / "b.json")
    tonight = spec([600, 601, 599, 600, 600])
    report = build_report(CONFIG, {tonight.key: tonight}, {}, {tonight.key: stored}, {}, updating=False)
    [row] = report.rows
    assert row.verdict is Verdict.SUSPECT
    assert row_cells(row)[-1] == "SUSPECT (1 start, < 3 runs)"


def test_a_test_of_the_accept_length_alone_is_judged_on_the_accept_length(tmp_path: Path) -> None:
    """Throughput -14% with τ unchanged (3.60 → 3.60 on the node in question): the test that checks only
    the accept length passes, its row still says what the throughput's history says."""
    marker = SpecperfMarker(servers=("eagle3-5step",), workloads=("chat",), ranges={"accept_length": (1.8, 2.6)})
    assert accept_length_only(marker)
    assert not accept_length_only(dataclasses.replace(marker, min_speedup=1.1))
    assert not accept_length_only(SpecperfMarker(servers=("eagle3-5step",), workloads=("chat",)))
    stored = baseline_of(spec([700, 701, 699, 700, 700]), tmp_path / "b.json")
    tonight = spec([600, 601, 599, 600, 600])
    evaluation = evaluate(tonight, None, marker, LIMITS, stored, updating=False)
    assert evaluation.verdict is Verdict.PASS, [c.message for c in evaluation.checks]
    assert [c.name for c in evaluation.checks] == ["errors", "accept_length", "regression:accept_length"]
    report = build_report(
        CONFIG, {tonight.key: tonight}, {tonight.key: [evaluation.verdict]}, {tonight.key: stored}, {}, updating=False
    )
    assert report.rows[0].verdict is Verdict.SUSPECT  # the row keeps the throughput's verdict
    moved = evaluate(spec([700, 701, 699, 700, 700], tau=1.7), None, marker, LIMITS, stored, updating=False)
    assert moved.verdict is not Verdict.PASS  # the accept length left its range: the test says so


def test_a_failure_message_names_the_drift_once() -> None:
    """The drift lines give old and new values; the `why:` names the causes among them, not again."""
    causes = (Change("NCCL_ALGO", "Ring", "unset"), Change("NCCL_PROTO", "LL128", "unset"))
    tonight = spec([600, 601, 599, 600, 600])
    ratio = Estimate(0.74, 0.73, 0.75, 5, 0.9)
    evaluation = dataclasses.replace(
        evaluate(tonight, None, None, LIMITS, None, updating=False),
        drift=FingerprintDiff(identity=[], environment=list(causes)),
        explanation=Explanation(ratio, None, ratio, ratio, None, (1.99, 1.99), "target", causes),
    )
    message = failure_message(tonight, evaluation, evaluation.checks)
    assert message.count("Ring → unset") == 1 and message.count("LL128 → unset") == 1, message
    assert "able to act on it: NCCL_ALGO, NCCL_PROTO" in message
    sentences = [s.strip() for line in message.splitlines() for s in line.split(";") if len(s.strip()) > 20]
    assert len(sentences) == len(set(sentences)), message
    assert len(message.splitlines()) <= 25


def test_a_stored_run_is_marked_with_the_verdict_its_row_showed(tmp_path: Path) -> None:
    """A reference no test checks reads SUSPECT in the table: its run is stored `suspect`, not `accepted`,
    so the dashboard's Suspect card lists the night the summary called SUSPECT."""
    store = FileStore(tmp_path / "store")
    plain = measurement("plain", [600, 601, 599, 600, 600], None, [1.5] * 5)
    recorder = Recorder(store, session_id="s1", history=30, suite_dir=None, updating=False, forced=False)
    baselines = Baselines(CONFIG, store, {plain.key: plain})
    recorder.store_all({plain.key: plain}, Outcomes(), baselines, rows={plain.key: Verdict.SUSPECT})
    [run] = store.load(plain.key, simulated=True).runs
    assert run.status == "suspect"
