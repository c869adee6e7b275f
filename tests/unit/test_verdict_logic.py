"""The checks of one test and the verdict they add up to, on hand-built measurements."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
from report_samples import CONFIG, baseline_of, fingerprint, measurement

from pytest_specperf.config.settings import SpecperfConfig
from pytest_specperf.fixtures import SpecperfResult
from pytest_specperf.report.analysis import build_report
from pytest_specperf.verdict.checks import REPORTED_METRICS, Limits, evaluate
from pytest_specperf.verdict.markers import SpecperfMarker
from pytest_specperf.verdict.outcome import Outcome, failure_message, outcome_of
from pytest_specperf.verdict.stats import Decision
from pytest_specperf.verdict.verdicts import Verdict, verdict_of

LIMITS = Limits(max_regression=0.05, max_regression_accept_length=0.02, max_error_rate=0.0)
STEADY = [1.59] * 5


def spec(tok_s: list[float], **kw):
    return measurement("eagle3-5step", tok_s, [2.1] * len(tok_s), [1.4] * len(tok_s), **kw)


def plain(tok_s: list[float], **kw):
    return measurement("plain", tok_s, None, STEADY[: len(tok_s)], **kw)


def marker(**kw) -> SpecperfMarker:
    return SpecperfMarker(servers=("eagle3-5step",), workloads=("chat",), **kw)


def test_met_speedup_and_no_baseline_is_new() -> None:
    steady = dataclasses.replace(LIMITS, run_to_run_cv=0.0)  # starts that do not differ (the plain simulator)
    result = evaluate(
        spec([700, 701, 699, 700, 700]),
        plain([610, 611, 609, 610, 610]),
        marker(min_speedup=1.1),
        steady,
        None,
        updating=False,
    )
    assert [c.decision for c in result.checks] == [Decision.MET, Decision.MET]  # errors, speedup
    assert result.verdict is Verdict.NEW


def test_speedup_interval_includes_both_start_offsets() -> None:
    """1.148x against a minimum of 1.1 with 2% start-to-start spread on each of the two servers: the
    interval widens by ~±4.7% and reaches below 1.1. No credible miss and the estimate above the
    minimum: MET; the strict reading wants the whole interval above it: INCONCLUSIVE."""
    args = (spec([700, 701, 699, 700, 700]), plain([610, 611, 609, 610, 610]), marker(min_speedup=1.1), LIMITS, None)
    (speedup,) = [c for c in evaluate(*args, updating=False).checks if c.name == "min_speedup"]
    assert speedup.decision is Decision.MET
    assert speedup.estimate is not None and speedup.estimate.low == pytest.approx(1.0955, abs=0.001)
    (strict,) = [c for c in evaluate(*args, updating=False, strict=True).checks if c.name == "min_speedup"]
    assert strict.decision is Decision.INCONCLUSIVE


def paired_history(server_runs: list[list[float]], path: Path, sessions: list[str | None], make=None):
    """A one-segment history of `make` (spec by default) runs, each stored by the session in `sessions`."""
    from pytest_specperf.store.records import Provenance, StoredRun

    make = make or spec
    runs = tuple(
        StoredRun(
            make(r),
            baseline_of(make(r), path).summary,
            Provenance(f"2026-11-{10 + i:02d}T01:00:00+00:00", f"c{i}aaaaaaaa", "gpu", "0", session),
            0,
        )
        for i, (r, session) in enumerate(zip(server_runs, sessions, strict=True))
    )
    return dataclasses.replace(baseline_of(make(server_runs[-1]), path), runs=runs)


def test_speedup_uses_the_recorded_speedups_spread_once_three_pairs_exist(tmp_path: Path) -> None:
    """The same 1.148x against 1.1: the 2% prior per start leaves it INCONCLUSIVE; four nights whose
    speedups stayed within ±0.3% of each other (runs of both servers stored by the same sessions)
    make it MET, and the message says where the start-to-start spread came from."""
    nights = ["n1", "n2", "n3", "n4"]
    spec_runs = [[700.0 * (1 + 0.003 * ((i % 3) - 1))] * 5 for i in range(4)]
    stored = paired_history(spec_runs, tmp_path / "s.json", nights)
    ref_stored = paired_history([[610.0] * 5] * 4, tmp_path / "r.json", nights, make=plain)
    tonight, reference = spec([700, 701, 699, 700, 700]), plain([610, 611, 609, 610, 610])
    result = evaluate(
        tonight,
        reference,
        marker(min_speedup=1.1),
        LIMITS,
        stored,
        updating=False,
        reference_baseline=ref_stored,
        strict=True,
    )
    (check,) = [c for c in result.checks if c.name == "min_speedup"]
    assert check.decision is Decision.MET
    assert "start-to-start CV 0.3% from 4 recorded speedups" in check.message

    # the same histories, but only two runs of each were stored by the same session: the prior decides
    unpaired = paired_history([[610.0] * 5] * 4, tmp_path / "r.json", ["n1", "n2", "x3", None], make=plain)
    result = evaluate(
        tonight,
        reference,
        marker(min_speedup=1.1),
        LIMITS,
        stored,
        updating=False,
        reference_baseline=unpaired,
        strict=True,
    )
    (check,) = [c for c in result.checks if c.name == "min_speedup"]
    assert check.decision is Decision.INCONCLUSIVE
    assert "prior run-to-run CV 2.0% per start (config run_to_run_cv; 2 recorded speedups, 1 more replaces it)" in (
        check.message
    )

    # --specperf-update ("this is the new normal") does not lean on the old speedups either
    result = evaluate(
        tonight, reference, marker(min_speedup=1.1), LIMITS, stored, updating=True, reference_baseline=ref_stored
    )
    (check,) = [c for c in result.checks if c.name == "min_speedup"]
    assert "prior run-to-run CV 2.0% per start" in check.message


def test_a_speedup_that_moves_forms_a_change_point_of_its_own(tmp_path: Path) -> None:
    """The speculative server and the reference both drift by the same step (a slower node): throughput
    changes, the speedup series does not; then the reference alone speeds up: only the speedup moves."""
    from pytest_specperf.verdict.trends import history_changes

    nights = [f"n{i}" for i in range(8)]
    spec_runs = [[700.0 * (1 + 0.002 * ((i % 3) - 1))] * 5 for i in range(8)]
    ref_runs = [[610.0 * (1 + 0.002 * ((i % 3) - 1))] * 5 for i in range(5)] + [[660.0] * 5] * 3
    stored = paired_history(spec_runs, tmp_path / "s.json", nights)
    ref_stored = paired_history(ref_runs, tmp_path / "r.json", nights, make=plain)
    changes = history_changes(
        spec([700.0] * 5), stored, REPORTED_METRICS, reference=plain([660.0] * 5), reference_baseline=ref_stored
    )
    assert [c.metric for c in changes] == ["speedup"]
    assert changes[0].index == 5 and changes[0].sentence.startswith("eagle3-5step chat c1 speedup -7.")
    assert changes[0].sentence.endswith("since the run of 2026-11-15 (commit c5aaaaa)")


def test_a_tpot_step_is_a_change_point(tmp_path: Path) -> None:
    from pytest_specperf.verdict.trends import history_changes

    def slow(tpot: float):
        return lambda r: measurement("eagle3-5step", r, [2.1] * len(r), [tpot] * len(r))

    runs = [[700.0] * 5] * 8
    stored = paired_history(runs, tmp_path / "s.json", [None] * 8)
    stored = dataclasses.replace(
        stored,
        runs=tuple(
            dataclasses.replace(run, measurement=(slow(1.4) if i < 5 else slow(1.55))([700.0] * 5))
            for i, run in enumerate(stored.runs)
        ),
    )
    [change] = history_changes(slow(1.55)([700.0] * 5), stored, REPORTED_METRICS)
    assert change.metric == "mean_tpot_ms" and change.index == 5
    assert change.sentence.startswith("eagle3-5step chat c1 TPOT +10.7%")


def test_missed_speedup_is_a_regression_naming_the_numbers() -> None:
    current = spec([600, 601, 599, 600, 600])
    result = evaluate(current, plain([610, 611, 609, 610, 610]), marker(min_speedup=1.1), LIMITS, None, updating=False)
    assert result.verdict is Verdict.REGRESSION
    text = failure_message(current, result, result.missed)
    assert "REGRESSION eagle3-5step/chat/c1:" in text
    assert "min_speedup: speedup 0.984 [" in text and "must be >= 1.1: missed" in text
    assert (
        "(5 rounds vs 5 rounds; prior run-to-run CV 2.0% per start (config run_to_run_cv; 0 recorded speedups" in text
    )


def test_an_estimate_outside_a_range_without_credibility_is_suspect() -> None:
    current = spec([700, 708, 693, 701, 699])  # 700.2 +- 5: the estimate above 699, the interval across it
    met = evaluate(current, None, marker(ranges={"throughput": (699.0, None)}), LIMITS, None, updating=False)
    assert met.verdict is Verdict.NEW and [c.decision for c in met.checks][-1] is Decision.MET
    below = spec([696, 704, 689, 697, 695])
    result = evaluate(below, None, marker(ranges={"throughput": (699.0, None)}), LIMITS, None, updating=False)
    (check,) = [c for c in result.checks if c.name == "throughput"]
    assert check.decision is Decision.SUSPECT and result.verdict is Verdict.SUSPECT
    assert check.start_sensitive and result.confirmable


def test_regression_against_the_baseline_shows_the_environment_drift(tmp_path: Path) -> None:
    stored = history_of(
        [[700, 701, 699, 700, 700], [702, 703, 701, 702, 702], [698, 699, 697, 698, 698]], tmp_path / "b.json"
    )
    current = spec([600, 601, 599, 600, 600], nccl="Tree")
    result = evaluate(current, None, None, LIMITS, stored, updating=False)
    assert result.verdict is Verdict.REGRESSION
    text = failure_message(current, result, result.missed)
    assert "ratio 0.857 [" in text and "allowed -5%: REGRESSION" in text
    assert "NCCL_ALGO: Ring → Tree" in text


def test_identity_change_is_incomparable_and_skips_the_comparison(tmp_path: Path) -> None:
    stored = baseline_of(spec([700] * 5), tmp_path / "b.json")
    current = spec([600] * 5)
    other = fingerprint("eagle3-5step")
    current.fingerprint = type(other)({**other.identity, "model": "another/model"}, other.environment)
    result = evaluate(current, None, None, LIMITS, stored, updating=False)
    assert result.verdict is Verdict.INCOMPARABLE
    assert [c.name for c in result.checks] == ["errors"]


def test_a_plain_server_accepts_one_token_per_step() -> None:
    result = evaluate(
        plain([610] * 3), None, marker(ranges={"accept_length": (1.0, 1.0)}), LIMITS, None, updating=False
    )
    assert [c.decision for c in result.checks] == [Decision.MET, Decision.MET]


def test_update_skips_the_baseline_and_says_pass(tmp_path: Path) -> None:
    stored = baseline_of(spec([700] * 5), tmp_path / "b.json")
    result = evaluate(spec([600] * 5), None, None, LIMITS, stored, updating=True)
    assert result.verdict is Verdict.PASS


@pytest.mark.parametrize(
    ("flags", "expected"),
    [
        ({"missed": True, "incomparable": True}, Verdict.REGRESSION),  # a failed same-session check stays one
        ({"incomparable": True, "suspect": True}, Verdict.INCOMPARABLE),
        ({"suspect": True, "inconclusive": True}, Verdict.SUSPECT),
        ({"incomparable": True, "inconclusive": True}, Verdict.INCOMPARABLE),
        ({"inconclusive": True, "improved": True}, Verdict.INCONCLUSIVE),
        ({"improved": True, "new": True}, Verdict.IMPROVED),
        ({"new": True}, Verdict.NEW),
        ({}, Verdict.PASS),
    ],
)
def test_one_verdict_precedence(flags: dict[str, bool], expected: Verdict) -> None:
    base = dict.fromkeys(("missed", "incomparable", "suspect", "inconclusive", "improved", "new"), False)
    assert verdict_of(**{**base, **flags}) is expected


def test_a_row_no_test_asked_for_keeps_the_workloads_error_tolerance() -> None:
    """A reference measured only for speedups used to show PASS whatever its error rate."""
    failing = plain([610, 611, 609])
    failing.rounds[0] = dataclasses.replace(failing.rounds[0], error_count=2)
    config = SpecperfConfig(model="m", reference="plain", servers=CONFIG.servers)
    report = build_report(config, {failing.key: failing}, {}, {}, {}, updating=False)
    assert report.rows[0].verdict is Verdict.REGRESSION


def history_of(runs: list[list[float]], path: Path):
    """A stored history of one segment, one run per list of round throughputs."""
    from pytest_specperf.store.records import StoredRun

    stored = [baseline_of(spec(r), path) for r in runs]
    entries = tuple(StoredRun(b.measurement, b.summary, b.provenance, 0) for b in stored)
    return dataclasses.replace(stored[-1], runs=entries)


def test_one_stored_run_uses_the_prior_and_says_so(tmp_path: Path) -> None:
    """4% slower with a single stored run: inside what two server starts differ by (prior 2%): the
    estimate is within the tolerance (MET), though not credibly so (the strict reading)."""
    stored = baseline_of(spec([700, 701, 699, 700, 700]), tmp_path / "b.json")
    result = evaluate(spec([672, 673, 671, 672, 672]), None, None, LIMITS, stored, updating=False)
    [check] = [c for c in result.checks if c.name == "regression:output_throughput"]
    assert check.decision is Decision.MET
    assert "1 recorded run, prior run-to-run CV 2.0% (config run_to_run_cv; 2 more recorded runs replace it)" in (
        check.message
    )
    strict = evaluate(spec([672, 673, 671, 672, 672]), None, None, LIMITS, stored, updating=False, strict=True)
    assert strict.verdict is Verdict.INCONCLUSIVE


def test_a_prior_alone_makes_no_regression(tmp_path: Path) -> None:
    """-14% against one stored run, on one server start, is SUSPECT, not REGRESSION: the spread between
    server starts is then the configured prior, a guess. Real CI keys spread 20% from run to run where
    the prior says 2%; a gate that failed on the prior failed them on their second night. (A second
    start tonight that is as slow on its own proves it: tests/plugin/test_verdict.py.)"""
    stored = baseline_of(spec([700, 701, 699, 700, 700]), tmp_path / "b.json")
    result = evaluate(spec([600, 601, 599, 600, 600]), None, None, LIMITS, stored, updating=False)
    [check] = [c for c in result.checks if c.name == "regression:output_throughput"]
    assert check.decision is Decision.SUSPECT and "prior run-to-run CV 2.0%" in check.message


def test_a_steady_history_decides_what_one_run_cannot(tmp_path: Path) -> None:
    """Ten recorded nights within ±0.5% of each other: the same -4% is now a credible PASS-side
    result (within tolerance), and -10% is a REGRESSION."""
    nights = [[700 * (1 + 0.005 * ((i % 3) - 1))] * 5 for i in range(10)]
    stored = history_of(nights, tmp_path / "b.json")
    met = evaluate(spec([672, 673, 671, 672, 672]), None, None, LIMITS, stored, updating=False)
    [check] = [c for c in met.checks if c.name == "regression:output_throughput"]
    assert check.decision is Decision.MET and "10 recorded runs, run-to-run CV 0.4%" in check.message
    missed = evaluate(spec([630, 631, 629, 630, 630]), None, None, LIMITS, stored, updating=False)
    assert missed.verdict is Verdict.REGRESSION


def test_a_step_in_the_history_is_named_with_its_first_run(tmp_path: Path) -> None:
    """Six nights at 700, then three at 644 (-8%, each stored as suspect), tonight at 644: a change
    beyond the tolerance is in force, a REGRESSION naming the run it started with by date and commit."""
    from pytest_specperf.store.records import Provenance, StoredRun

    nights = [[700.0 * (1 + 0.003 * ((i % 3) - 1))] * 5 for i in range(6)] + [[644.0] * 5] * 3
    runs = tuple(
        StoredRun(
            spec(r),
            baseline_of(spec(r), tmp_path).summary,
            Provenance(f"2026-11-{10 + i:02d}T01:00:00+00:00", f"c{i}aaaaaaaa", "gpu", "0"),
            0,
            "accepted" if i < 6 else "suspect",
        )
        for i, r in enumerate(nights)
    )
    stored = dataclasses.replace(baseline_of(spec(nights[-1]), tmp_path / "b.json"), runs=runs)
    tonight = spec([644.0] * 5)
    result = evaluate(tonight, None, None, LIMITS, stored, updating=False)
    assert result.verdict is Verdict.REGRESSION
    [change] = result.changes  # TPOT and accept length did not move
    sentence = change.sentence
    assert sentence.startswith("eagle3-5step chat c1 throughput -8.")
    assert sentence.endswith("since the run of 2026-11-16 (commit c6aaaaa)")
    assert (change.metric, change.index, change.runs, change.created[:10]) == ("output_throughput", 6, 10, "2026-11-16")
    assert change.change.low < change.change.value < change.change.high < 1.0
    assert f"change point: {sentence}" in failure_message(tonight, result, result.missed)


def test_a_night_beyond_the_tolerance_is_recorded_as_suspect(tmp_path: Path) -> None:
    """-8% with one stored run (prior 2%): a change, not a credible regression. It is stored, marked
    suspect, out of the level and the spread (so a real change cannot blind the gate), and change points see it."""
    from pytest_specperf.session.storing import status_of, unfit_to_store

    stored = baseline_of(spec([700, 701, 699, 700, 700]), tmp_path / "b.json")
    tonight = spec([644, 645, 643, 644, 644])
    evaluation = evaluate(tonight, None, None, LIMITS, stored, updating=False)
    assert evaluation.verdict is Verdict.SUSPECT
    verdicts = [evaluation.verdict]
    assert unfit_to_store(tonight, verdicts, updating=False) is None
    assert status_of(verdicts, updating=False) == "suspect"
    assert status_of([Verdict.REGRESSION], updating=False) == "refused"
    assert status_of([Verdict.PASS], updating=False) == "accepted"


# --- the verdict-to-outcome policy (verdict/outcome.py) -----------------------------------------


def test_a_missed_check_fails_the_test_with_the_evidence(tmp_path: Path) -> None:
    stored = history_of(
        [[700, 701, 699, 700, 700], [702, 703, 701, 702, 702], [698, 699, 697, 698, 698]], tmp_path / "b.json"
    )
    current = spec([600, 601, 599, 600, 600])
    evaluation = evaluate(current, None, None, LIMITS, stored, updating=False)
    outcome = outcome_of(current, evaluation, on_incomparable="fail", strict=False)
    assert outcome.action == "fail" and outcome.message is not None
    assert outcome.message.startswith("REGRESSION eagle3-5step/chat/c1:") and not outcome.warnings


def test_a_failing_test_names_its_suspect_checks_too(tmp_path: Path) -> None:
    """A REGRESSION that fails the test, and a min_speedup below its threshold but not credibly: the
    failure's text names both, the suspect one as suspect, so nothing tonight's numbers say is hidden."""
    stored = history_of(
        [[700, 701, 699, 700, 700], [702, 703, 701, 702, 702], [698, 699, 697, 698, 698]], tmp_path / "b.json"
    )
    current = spec([600, 601, 599, 600, 600])
    evaluation = evaluate(
        current, plain([520, 521, 519, 520, 520]), marker(min_speedup=1.18), LIMITS, stored, updating=False
    )
    assert [c.name for c in evaluation.missed] == ["regression:output_throughput"]
    assert [c.name for c in evaluation.suspect] == ["min_speedup"]
    outcome = outcome_of(current, evaluation, on_incomparable="fail", strict=False)
    assert outcome.action == "fail" and outcome.message is not None
    lines = outcome.message.splitlines()
    assert lines[0] == "REGRESSION eagle3-5step/chat/c1:"
    assert lines[1].startswith("  output_throughput: ") and lines[1].endswith("REGRESSION")
    assert lines[2].startswith("  min_speedup: speedup 1.15") and ">= 1.18: suspect; why: τ " in lines[2]


@pytest.mark.parametrize(("policy", "action"), [("fail", "fail"), ("skip", "skip"), ("warn", "pass")])
def test_an_incomparable_baseline_follows_the_policy(tmp_path: Path, policy: str, action: str) -> None:
    stored = baseline_of(spec([700] * 5), tmp_path / "b.json")
    current = spec([600] * 5)
    other = fingerprint("eagle3-5step")
    current.fingerprint = type(other)({**other.identity, "model": "another/model"}, other.environment)
    outcome = outcome_of(
        current, evaluate(current, None, None, LIMITS, stored, updating=False), on_incomparable=policy, strict=False
    )
    assert outcome.action == action
    text = outcome.message if action != "pass" else outcome.warnings[0]
    assert text is not None and text.startswith("INCOMPARABLE") and "model" in text


@pytest.mark.parametrize(("strict", "action"), [(False, "pass"), (True, "fail")])
def test_a_suspect_check_warns_or_fails_under_strict(strict: bool, action: str) -> None:
    current = spec([700, 640, 760, 660, 730])  # 1.16x against 1.2: below, but too noisy to be sure
    evaluation = evaluate(
        current, plain([600, 601, 599, 600, 600]), marker(min_speedup=1.2), LIMITS, None, updating=False
    )
    assert evaluation.suspect
    outcome = outcome_of(current, evaluation, on_incomparable="fail", strict=strict)
    assert outcome.action == action
    text = outcome.message if strict else outcome.warnings[0]
    assert text is not None and text.startswith("SUSPECT eagle3-5step/chat/c1:")
    assert "beyond its threshold, not credibly" in text
    assert text.endswith("--specperf-strict fails it") == strict


@pytest.mark.parametrize("policy", ["fail", "skip", "warn"])
def test_a_missed_check_fails_whatever_the_incomparable_policy(tmp_path: Path, policy: str) -> None:
    """A missed min_speedup with a baseline from another model: the row says REGRESSION, so the test
    fails under every --specperf-on-incomparable mode (skip used to skip it), and says both."""
    stored = baseline_of(spec([700] * 5), tmp_path / "b.json")
    current = spec([600, 601, 599, 600, 600])
    other = fingerprint("eagle3-5step")
    current.fingerprint = type(other)({**other.identity, "model": "another/model"}, other.environment)
    evaluation = evaluate(current, plain([610] * 5), marker(min_speedup=1.1), LIMITS, stored, updating=False)
    assert evaluation.verdict is Verdict.REGRESSION
    outcome = outcome_of(current, evaluation, on_incomparable=policy, strict=False)
    assert outcome.action == "fail" and outcome.message is not None
    assert outcome.message.startswith("REGRESSION") and outcome.warnings[0].startswith("INCOMPARABLE")


def test_a_met_check_passes_without_warnings() -> None:
    current = spec([700] * 5)
    evaluation = evaluate(current, plain([600] * 5), marker(min_speedup=1.1), LIMITS, None, updating=False)
    assert outcome_of(current, evaluation, on_incomparable="fail", strict=True) == Outcome("pass")


def test_the_fixtures_speedup_is_the_one_the_check_and_the_table_use() -> None:
    """One formula: a test body's `specperf.speedup` is the point value of the interval `min_speedup`
    decides on (verdict/history.py `speedup_estimate`), whatever the rounds' spread."""
    current, reference = spec([500, 900, 600, 800, 700]), plain([610, 611, 609, 610, 610])
    evaluation = evaluate(current, reference, marker(min_speedup=1.1), LIMITS, None, updating=False)
    assert evaluation.speedup is not None
    in_the_body = SpecperfResult(None, current.key, current, reference).speedup  # type: ignore[arg-type]
    assert in_the_body == pytest.approx(evaluation.speedup.estimate.value, rel=1e-12)
