"""The checks against a key's stored history: tonight's throughput and accept length against the
level of the current segment (verdict/nightly.py `judge_night`), with the lines a check's message adds
(a confirmation, a change nobody accepted, rejected runs), and each draft position's acceptance
against the level's (`accept_per_position=True`)."""

from __future__ import annotations

from collections.abc import Sequence

from pytest_specperf.measure.records import METRICS, Measurement
from pytest_specperf.store.records import StoredBaseline, StoredRun
from pytest_specperf.verdict.changes import ChangePoint, change_size
from pytest_specperf.verdict.history import Rejection
from pytest_specperf.verdict.nightly import NightVerdict, PastRun, RunStatus, judge_night
from pytest_specperf.verdict.results import CheckResult, fmt, rounds_text
from pytest_specperf.verdict.stats import (
    Decision,
    Direction,
    Estimate,
    Tolerance,
    decide_threshold,
    mean_estimate,
    ratio_estimate,
    worst_decision,
)
from pytest_specperf.verdict.trends import HistoryChange, Point

ACKNOWLEDGE = "`specperf accept` makes it the level from its first run, --specperf-update from tonight"


def past_runs(baseline: StoredBaseline, metric: str) -> tuple[list[StoredRun], list[PastRun]]:
    """The current segment's runs that measured `metric` (every status), as the verdict engine sees them."""
    runs, past = [], []
    segment = baseline.current_segment or (StoredRun(baseline.measurement, baseline.summary, baseline.provenance, 0),)
    for run in segment:
        samples = run.measurement.samples(metric)
        if samples and min(samples) > 0.0:
            runs.append(run)
            past.append(PastRun(tuple(samples), RunStatus(run.status), run.provenance.session))
    return runs, past


def check_regression(
    result: Measurement,
    baseline: StoredBaseline,
    metric: str,
    tolerance: Tolerance,
    *,
    strict: bool = False,
    searches: int = 1,
    rounds: int | None = None,
    floors: Sequence[tuple[float, str]] = (),
    keys: int = 1,
) -> CheckResult | None:
    """Is tonight credibly worse than the segment's level by more than the tolerance, or is a change
    beyond it in force? (verdict/nightly.py). None when either side lacks the metric. `floors`: what
    tonight shows of the spread besides its rounds (the reference's movement, verdict/control.py);
    `keys`: the keys the server measures tonight (`nightly.judge_night`)."""
    current = result.start_samples(metric)
    runs, past = past_runs(baseline, metric)
    if not current or not any(r.status.counted for r in past) or min(min(s) for s in current) <= 0.0:
        return None
    night = judge_night(
        current, past, tolerance, strict=strict, searches=searches, rounds=rounds, floors=floors, keys=keys
    )
    assert night.comparison is not None
    comparison = night.comparison
    change = "improved" if night.improved else night.decision.value
    if night.decision is Decision.MISSED:
        change = "REGRESSION"
    estimate = mean_estimate(result.samples(metric))
    sign = "-" if tolerance.direction is Direction.HIGHER_IS_BETTER else "+"
    message = (
        f"{metric}: {fmt(estimate)} {METRICS[metric].unit} ({rounds_text(result)}) vs baseline "
        f"{comparison.level:.2f} ({comparison.describe()}): ratio {fmt(comparison.ratio, 3)}, "
        f"allowed {sign}{tolerance.max_regression:.0%}: {change}"
    )
    message += "".join(f"\n    {line}" for line in night_lines(night, runs))
    return CheckResult(f"regression:{metric}", night.decision, message, comparison.ratio, night.improved, night, True)


def night_lines(night: NightVerdict, runs: Sequence[StoredRun]) -> list[str]:
    """What else a history check rests on: a second start, earlier nights, rejected runs, a change."""
    lines = []
    if night.confirmed is not None and night.first_start is not None:
        first = f"the first start alone: {night.first_start - 1:+.1%}"
        lines.append(
            f"confirmed on a second server start ({first})"
            if night.confirmed
            else f"not confirmed on a second server start: the first start was slow ({first})"
        )
    if night.change is not None and night.decision is not Decision.MET:
        nights = len(night.level.change_runs) + 1 if night.level is not None else 1
        lines.append(
            f"a change nobody accepted: {_since(night.change, runs)}, {nights} runs, not acknowledged ({ACKNOWLEDGE})"
        )
    elif night.change is not None and night.improved:
        lines.append(f"IMPROVED: {_since(night.change, runs)}, not acknowledged (the level stays the accepted one)")
    if night.by_change:
        lines.append("REGRESSION: the change's runs together, tonight's with them, are credibly beyond the tolerance")
    if night.back_since is not None and night.decision is Decision.MET:
        lines.append(f"back to the accepted level (since {_run_name(night.back_since, runs)})")
    for run, rejection in rejected_runs(night, runs):
        lines.append(
            f"run of {run.provenance.created[:10]} rejected as an outlier: {rejection.describe()}; kept in the file, "
            "left out of the level and the spread"
        )
    return lines


def rejected_runs(night: NightVerdict, runs: Sequence[StoredRun]) -> list[tuple[StoredRun, Rejection]]:
    """The stored runs the history check left out as outliers (`runs`: those it was handed, `past_runs`)."""
    counted = [r for r in runs if RunStatus(r.status).counted]
    return [(counted[r.index], r) for r in (night.comparison.rejected if night.comparison else ())]


def _since(change: ChangePoint, runs: Sequence[StoredRun]) -> str:
    return f"{change_size(change.change, change.kind, change.per_run)} since {_run_name(change.index, runs)}"


def _run_name(index: int, runs: Sequence[StoredRun]) -> str:
    """'the run of 2026-11-30 (commit abc1234)', or 'tonight' past the stored runs."""
    if index >= len(runs):
        return "tonight"
    p = runs[index].provenance
    commit = f"commit {p.git_commit[:7]}" if p.git_commit else "no git commit"
    return f"the run of {p.created[:10]} ({commit})"


def night_changes(
    result: Measurement, metric: str, check: CheckResult, baseline: StoredBaseline
) -> list[HistoryChange]:
    """The change a history check names: the one in force, else (for a night beyond the tolerance)
    where it began."""
    night = check.night
    if night is None:
        return []
    point = night.change if night.change is not None else night.since
    if point is None:
        return []
    runs, _ = past_runs(baseline, metric)
    points = [
        Point(Estimate.exact(v), r.provenance.created, r.provenance.git_commit, r.segment)
        for v, r in zip(night.values, runs, strict=False)
    ]
    points.append(Point(Estimate.exact(night.values[-1]), None, None, None, tonight=True))
    return [HistoryChange.of(result.key, metric, point, points)]


def check_positions_history(
    result: Measurement, baseline: StoredBaseline, tolerance: float, *, strict: bool = False
) -> CheckResult | None:
    """Has the acceptance at any draft position fallen credibly beyond the accept-length tolerance of the
    level (the current segment's counted runs)? Per position, tonight's rounds over the level's rounds
    (a Fieller interval: acceptance does not move with a server start), each round's acceptance by
    draft position as docs/metrics.md defines it (zeros where no step reached a drafted position); a
    position the level never accepted a draft at has nothing to lose and is not judged. None when the
    history has no acceptance by position."""
    runs, past = past_runs(baseline, "accept_length")
    level = [
        s
        for run, p in zip(runs, past, strict=True)
        if p.status.counted
        for s in run.measurement.round_position_shares()
    ]
    tonight = result.round_position_shares()
    if not level or not tonight:
        return None
    parts, decisions = [], []
    for i in range(min(max(map(len, level)), max(map(len, tonight)))):
        then, now = [s[i] if i < len(s) else 0.0 for s in level], [s[i] if i < len(s) else 0.0 for s in tonight]
        if not any(then):
            continue
        ratio = ratio_estimate(now, then)
        decision = decide_threshold(
            ratio, Tolerance(tolerance).regression_bound, Direction.HIGHER_IS_BETTER, strict=strict
        )
        decisions.append(decision)
        verdict = "" if decision is Decision.MET else f" ({decision.value})"
        parts.append(f"position {i + 1} {_mean(now):.2f} vs {_mean(then):.2f}: x{fmt(ratio, 3)}{verdict}")
    if not decisions:
        return None
    decision = worst_decision(decisions)
    message = (
        f"accept_per_position vs the history's level ({len(level)} rounds), allowed -{tolerance:.0%}: "
        f"{'; '.join(parts)}: {decision.value}"
    )
    return CheckResult("accept_per_position", decision, message)


def _mean(values: Sequence[float]) -> float:
    return sum(values) / len(values)
