"""Checks of one marked test, and the verdict they add up to.

A check is met, missed, or inconclusive (stats.Decision). A test fails only on evidence: a
missed check, or an incomparable baseline (by default). Every message names the metric, the
current value with its interval, what it was held against, the rounds, and any environment
drift since the baseline: a number shown without its environment is how phantom baselines
happen.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from enum import Enum

from pytest_specperf.config.settings import SpecperfConfig
from pytest_specperf.measure.records import METRICS, Measurement, RequestRecord
from pytest_specperf.verdict.fingerprint import Change, FingerprintDiff, diff, speedup_differences
from pytest_specperf.verdict.history import (
    MIN_RUNS,
    HistoryComparison,
    SpeedupSpread,
    advise_history,
    compare_with_history,
    speedup_estimate,
)
from pytest_specperf.verdict.markers import RANGE_METRICS, SpecperfMarker
from pytest_specperf.verdict.stats import (
    DEFAULT_MAX_ROUNDS,
    Decision,
    Direction,
    Estimate,
    RoundsAdvice,
    advise_rounds,
    classify_ratio,
    coefficient_of_variation,
    decide_range,
    decide_threshold,
    mean_estimate,
    ratio_estimate,
)
from pytest_specperf.verdict.store import StoredBaseline
from pytest_specperf.verdict.trends import HistoryChange, history_changes, speedup_spread


class Verdict(Enum):
    PASS = "PASS"
    REGRESSION = "REGRESSION"
    IMPROVED = "IMPROVED"
    INCONCLUSIVE = "INCONCLUSIVE"
    INCOMPARABLE = "INCOMPARABLE"
    NEW = "NEW"
    ERROR = "ERROR"


@dataclass(frozen=True)
class CheckResult:
    """One check of one test: what was checked, the decision, and a sentence saying why."""

    name: str
    decision: Decision
    message: str
    estimate: Estimate | None = None
    improved: bool = False
    advice: RoundsAdvice | None = None  # for an INCONCLUSIVE check: would more rounds decide it?

    @property
    def more_rounds_help(self) -> bool:
        return self.decision is Decision.INCONCLUSIVE and (self.advice is None or self.advice.helps)


@dataclass
class Evaluation:
    """All checks of a test plus the baseline comparison's context."""

    checks: list[CheckResult] = field(default_factory=list)
    baseline: StoredBaseline | None = None
    drift: FingerprintDiff | None = None
    updating: bool = False
    changes: list[HistoryChange] = field(default_factory=list)  # change points in the history, tonight appended
    #: what the reference and this server differ in besides speculation (for a test that checks against it)
    unlike_reference: list[Change] = field(default_factory=list)

    @property
    def incomparable(self) -> bool:
        return self.drift is not None and not self.drift.comparable

    @property
    def inconclusive(self) -> list[CheckResult]:
        return [c for c in self.checks if c.decision is Decision.INCONCLUSIVE]

    @property
    def more_rounds_help(self) -> bool:
        """Whether adding rounds is expected to decide an inconclusive check (else stop early)."""
        return any(c.more_rounds_help for c in self.checks)

    @property
    def missed(self) -> list[CheckResult]:
        return [c for c in self.checks if c.decision is Decision.MISSED]

    @property
    def verdict(self) -> Verdict:
        return verdict_of(
            missed=bool(self.missed),
            incomparable=self.incomparable,
            inconclusive=bool(self.inconclusive),
            improved=any(c.improved for c in self.checks),
            new=self.baseline is None and not self.updating,
        )


def verdict_of(*, missed: bool, incomparable: bool, inconclusive: bool, improved: bool, new: bool) -> Verdict:
    """The one precedence of verdicts, for tests, report rows and `specperf diff` alike.

    A check that failed is a REGRESSION even when the baseline is incomparable: checks against a
    stored baseline are not made across setups (see `evaluate`), so what failed is valid on its own
    (a speedup, a range, the error rate). Then INCOMPARABLE, INCONCLUSIVE, IMPROVED, NEW, PASS.
    """
    if missed:
        return Verdict.REGRESSION
    if incomparable:
        return Verdict.INCOMPARABLE
    if inconclusive:
        return Verdict.INCONCLUSIVE
    if improved:
        return Verdict.IMPROVED
    return Verdict.NEW if new else Verdict.PASS


def fmt(estimate: Estimate, digits: int = 2) -> str:
    """'71.02 [70.10, 71.90]': a value with its interval (or 'n=1, no interval')."""
    value = f"{estimate.value:.{digits}f}"
    if not estimate.bounded:
        return f"{value} (n={estimate.n}, no interval yet)"
    return f"{value} [{estimate.low:.{digits}f}, {estimate.high:.{digits}f}]"


def _direction(metric: str) -> Direction:
    return Direction.HIGHER_IS_BETTER if METRICS[metric].higher_is_better else Direction.LOWER_IS_BETTER


# ---- absolute checks --------------------------------------------------------------------------


def check_errors(result: Measurement, allowed: float) -> CheckResult:
    total, errors = result.request_count, result.error_count
    share = errors / total if total else 0.0
    decision = Decision.MET if share <= allowed else Decision.MISSED
    first = next((r.error for r in result.records if r.error), None)
    message = f"errors: {errors} of {total} requests failed ({share:.1%}), allowed {allowed:.1%}"
    if first:
        message += f"; first error: {first}"
    return CheckResult("errors", decision, message)


def check_speedup(
    result: Measurement,
    reference: Measurement | None,
    minimum: float,
    max_rounds: int = DEFAULT_MAX_ROUNDS,
    run_cv: float = 0.0,
    spread: SpeedupSpread | None = None,
    pairs: int = 0,
) -> CheckResult:
    """Speedup over the reference, measured in the same session on two server starts: the interval
    carries the start-to-start variance of a speedup besides round noise. It is the recorded
    speedups' own (`spread`, from >= 3 runs of both servers stored by the same sessions) when there
    is one, else the prior `run_cv` per start (config run_to_run_cv); the message says which."""
    if reference is None:
        return CheckResult("min_speedup", Decision.MISSED, "min_speedup: no reference measurement to compare with")
    current, ref = result.samples("output_throughput"), reference.samples("output_throughput")
    if spread is not None:
        ratio = speedup_estimate(current, ref, run_cv, spread=spread)
        between = spread.variance
        basis = f"start-to-start CV {spread.cv:.1%} from {spread.runs} recorded speedups"
    else:
        ratio = speedup_estimate(current, ref, run_cv) if run_cv > 0.0 else ratio_estimate(current, ref)
        between = 2.0 * run_cv * run_cv
        more = MIN_RUNS - pairs
        basis = (
            f"prior run-to-run CV {run_cv:.1%} per start (config run_to_run_cv; {pairs} recorded "
            f"speedup{'s' if pairs != 1 else ''}, {more} more replace{'s' if more == 1 else ''} it)"
        )
    decision = decide_threshold(ratio, minimum, Direction.HIGHER_IS_BETTER)
    ref_cv = coefficient_of_variation(ref) or 0.0
    fixed_cv = math.sqrt(ref_cv * ref_cv + between * len(ref))  # start offsets do not shrink
    advice = advise_rounds(  # only this server's rounds can grow: the reference was measured once
        ratio, [minimum], decision, max_rounds=max_rounds,
        cv=coefficient_of_variation(current), fixed_n=len(ref), fixed_cv=fixed_cv,
    )  # fmt: skip
    message = (
        f"min_speedup: speedup {fmt(ratio, 3)} over {reference.key.server} "
        f"({len(result.rounds)} vs {len(reference.rounds)} rounds; {basis}) must be >= {minimum:g}: {decision.value}"
    )
    return CheckResult("min_speedup", decision, message, ratio, advice=advice)


def check_range(
    result: Measurement, key: str, low: float | None, high: float | None, max_rounds: int = DEFAULT_MAX_ROUNDS
) -> CheckResult:
    metric = RANGE_METRICS[key]
    samples = result.samples(metric)
    if not samples and metric == "accept_length" and result.algorithm is None:
        samples = [1.0] * len(result.rounds)  # a plain server accepts exactly the one token it decodes
    if not samples:
        return CheckResult(key, Decision.MISSED, f"{key}: {metric} was not measured (no successful round reports it)")
    estimate = mean_estimate(samples)
    decision = decide_range(estimate, low, high)
    bounds = f"[{'-inf' if low is None else f'{low:g}'}, {'inf' if high is None else f'{high:g}'}]"
    message = (
        f"{key}: {metric} {fmt(estimate)} {METRICS[metric].unit} over {len(samples)} rounds "
        f"must lie in {bounds}: {decision.value}"
    )
    advice = advise_rounds(estimate, [low, high], decision, max_rounds=max_rounds)
    return CheckResult(key, decision, message, estimate, advice=advice)


def check_lossless(result: Measurement, reference: Measurement | None, required: float = 1.0) -> CheckResult:
    """At temperature 0, speculation must not change outputs: at least `required` of them equal the
    reference server's for the same prompt in the same round slot; the first mismatch is shown."""
    if reference is None:
        return CheckResult("lossless", Decision.MISSED, "lossless: no reference measurement to compare with")
    expected = {(r.index, rec.index): rec for r in reference.rounds for rec in r.records if rec.ok}
    pairs = [
        (r.index, rec, expected[(r.index, rec.index)])
        for r in result.rounds
        for rec in r.records
        if rec.ok and (r.index, rec.index) in expected
    ]
    if not pairs:
        return CheckResult("lossless", Decision.MISSED, "lossless: no successful request pairs to compare")
    mismatches = [(i, ours, theirs) for i, ours, theirs in pairs if ours.output_hash != theirs.output_hash]
    rate = 1 - len(mismatches) / len(pairs)
    decision = Decision.MET if rate >= required else Decision.MISSED
    message = (
        f"lossless: {len(pairs) - len(mismatches)} of {len(pairs)} outputs ({rate:.1%}) equal the reference "
        f"server's ({reference.key.server}) output for the same prompt; required {required:.0%}"
    )
    if mismatches:
        message += "; " + _first_divergence(*mismatches[0])
    return CheckResult("lossless", decision, message, Estimate.exact(rate))


def _first_divergence(round_index: int, ours: RequestRecord, theirs: RequestRecord) -> str:
    """Where the first differing output leaves the reference's: token position (words where the
    engine gives no token ids), with a few words of context."""
    where = f"first mismatch: round {round_index + 1}, request {ours.index}"
    if ours.output is None or theirs.output is None:
        return where  # outputs are kept in memory only (not in reports, baselines or xdist's cache)
    a, b = ours.output, theirs.output
    at = next((k for k, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), min(len(a), len(b)))
    word = len(a[:at].split())
    return (
        f"{where} differs from word {word + 1} (character {at}): "
        f"{b[max(0, at - 20) : at + 20]!r} (reference) vs {a[max(0, at - 20) : at + 20]!r}"
    )


# ---- stored-baseline comparison ---------------------------------------------------------------


def history_comparison(
    result: Measurement, baseline: StoredBaseline, metric: str, prior_cv: float
) -> HistoryComparison | None:
    """Tonight's `metric` against the current segment of the stored history (verdict/history.py);
    None when either side lacks the metric (or has a non-positive sample, e.g. a broken round)."""
    current = result.samples(metric)
    runs = [r.measurement.samples(metric) for r in baseline.current_segment] or [baseline.measurement.samples(metric)]
    runs = [r for r in runs if r]
    if not current or not runs or min(current + [x for r in runs for x in r]) <= 0.0:
        return None
    return compare_with_history(current, runs, prior_cv)


def check_regression(
    result: Measurement,
    baseline: StoredBaseline,
    metric: str,
    max_regression: float,
    max_rounds: int = DEFAULT_MAX_ROUNDS,
    prior_cv: float = 0.0,
) -> CheckResult | None:
    """Is tonight credibly worse than the segment's level by more than `max_regression`?

    The interval for tonight's ratio includes run-to-run variance (the segment's own, or the prior
    `prior_cv` while the segment has fewer than 3 recorded runs): tonight is one more server start.
    """
    comparison = history_comparison(result, baseline, metric, prior_cv)
    if comparison is None:
        return None
    outcome = classify_ratio(comparison.ratio, max_regression, _direction(metric))
    change = "improved" if outcome.improved else outcome.decision.value
    if outcome.decision is Decision.MISSED:
        change = "REGRESSION"
    current = mean_estimate(result.samples(metric))
    message = (
        f"{metric}: {fmt(current)} {METRICS[metric].unit} ({current.n} rounds) vs baseline "
        f"{comparison.level:.2f} ({comparison.describe()}): ratio {fmt(outcome.ratio, 3)}, "
        f"allowed {_allowed(max_regression, metric)}: {change}"
    )
    advice = advise_history(comparison, outcome.regression_bound, outcome.decision, max_rounds=max_rounds)
    return CheckResult(f"regression:{metric}", outcome.decision, message, outcome.ratio, outcome.improved, advice)


def _allowed(max_regression: float, metric: str) -> str:
    sign = "-" if METRICS[metric].higher_is_better else "+"
    return f"{sign}{max_regression:.0%}"


# ---- all checks of a test ---------------------------------------------------------------------


@dataclass(frozen=True)
class Limits:
    """Tolerances in force for a test (marker > config > defaults), and how far rounds may grow."""

    max_regression: float
    max_regression_accept_length: float
    max_error_rate: float
    max_rounds: int = DEFAULT_MAX_ROUNDS
    run_to_run_cv: float = 0.02
    run_to_run_cv_accept_length: float = 0.005

    @classmethod
    def of(cls, config: SpecperfConfig, workload: str, marker: SpecperfMarker | None = None) -> Limits:
        """Tolerances for a measurement of `workload`: the marker's, else the config's (with its defaults)."""
        m = marker or SpecperfMarker(servers=(), workloads=())
        return cls(
            max_regression=config.max_regression if m.max_regression is None else m.max_regression,
            max_regression_accept_length=(
                config.max_regression_accept_length
                if m.max_regression_accept_length is None
                else m.max_regression_accept_length
            ),
            max_error_rate=_workload_error_rate(config, workload) if m.max_error_rate is None else m.max_error_rate,
            max_rounds=config.effective_max_rounds,
            run_to_run_cv=config.run_to_run_cv,
            run_to_run_cv_accept_length=config.run_to_run_cv_accept_length,
        )


def _workload_error_rate(config: SpecperfConfig, workload: str) -> float:
    """The workload's tolerated error share; a workload this config does not define (a report read
    back by `specperf`) tolerates none, like a workload that does not set it."""
    found = config.workloads.get(workload)
    return found.max_error_rate if found is not None else 0.0


def evaluate(
    result: Measurement,
    reference: Measurement | None,
    marker: SpecperfMarker | None,
    limits: Limits,
    baseline: StoredBaseline | None,
    *,
    updating: bool,
    reference_baseline: StoredBaseline | None = None,
) -> Evaluation:
    """Every check of a test on its current measurement. `reference_baseline` is the reference's
    stored history of the same workload and level: with this one's it gives the recorded speedups."""
    level = result.key.concurrency
    evaluation = Evaluation(baseline=baseline, updating=updating)
    checks = evaluation.checks
    checks.append(check_errors(result, limits.max_error_rate))
    usable = not updating and reference is not None and _comparable(baseline, result)
    if not usable or reference is None or not _comparable(reference_baseline, reference):
        reference_baseline = None  # recorded speedups need both histories, of this setup
    if marker is not None:
        minimum = marker.min_speedup_at(level)
        if (minimum is not None or marker.lossless is not None) and reference is not None:
            evaluation.unlike_reference = speedup_differences(reference.fingerprint, result.fingerprint)
        if minimum is not None:
            spread, pairs = speedup_spread(baseline, reference_baseline)
            speedup = check_speedup(result, reference, minimum, limits.max_rounds, limits.run_to_run_cv, spread, pairs)
            if evaluation.unlike_reference:
                speedup = replace(speedup, message=f"{speedup.message}; {unlike_message(evaluation)}")
            checks.append(speedup)
        for key in RANGE_METRICS:
            bounds = marker.range_at(key, level)
            if bounds is not None:
                checks.append(check_range(result, key, *bounds, limits.max_rounds))
        if marker.lossless is not None:
            checks.append(check_lossless(result, reference, marker.lossless))
    if baseline is not None and not updating:
        evaluation.drift = drift(baseline, result)
        if evaluation.drift is None or evaluation.drift.comparable:
            for metric, tolerance, prior in (
                ("output_throughput", limits.max_regression, limits.run_to_run_cv),
                ("accept_length", limits.max_regression_accept_length, limits.run_to_run_cv_accept_length),
            ):
                check = check_regression(result, baseline, metric, tolerance, limits.max_rounds, prior)
                if check is not None:
                    checks.append(check)
            evaluation.changes = history_changes(
                result, baseline, reference=reference, reference_baseline=reference_baseline
            )
    return evaluation


def _comparable(baseline: StoredBaseline | None, measurement: Measurement) -> bool:
    """A stored history measured on the same setup (environment drift allowed): its runs may be used."""
    if baseline is None:
        return False
    found = drift(baseline, measurement)
    return found is None or found.comparable


def drift(baseline: StoredBaseline, result: Measurement) -> FingerprintDiff | None:
    if result.fingerprint is None or baseline.measurement.fingerprint is None:
        return None
    return diff(baseline.measurement.fingerprint, result.fingerprint)


def failure_message(result: Measurement, evaluation: Evaluation, checks: Sequence[CheckResult]) -> str:
    """The text a failing test shows: verdict, the checks that decided it, and the drift."""
    lines = [f"{evaluation.verdict.value} {result.key.label}:"]
    lines += [f"  {c.message}" for c in checks]
    if evaluation.drift is not None and evaluation.drift.environment:
        lines.append("  environment drift since the baseline (the comparison was still made):")
        lines += [f"    {change}" for change in evaluation.drift.environment]
    lines += [f"  change point: {change.sentence}" for change in evaluation.changes]
    if evaluation.baseline is not None:
        newest = evaluation.baseline.provenance
        commit = f"commit {newest.git_commit[:7]}" if newest.git_commit else "no git commit"
        lines.append(f"  baseline: {evaluation.baseline.path} (newest run {newest.created[:10]}, {commit})")
    return "\n".join(lines)


def unlike_message(evaluation: Evaluation) -> str:
    """The sentence a speedup that compares more than speculation carries, naming each difference."""
    changes = "; ".join(str(change) for change in evaluation.unlike_reference)
    return f"the reference and this server differ besides speculation (reference → this server): {changes}"


def incomparable_message(result: Measurement, evaluation: Evaluation) -> str:
    assert evaluation.drift is not None and evaluation.baseline is not None
    lines = [
        f"INCOMPARABLE {result.key.label}: the stored baseline was measured on a different setup, "
        "so no comparison was made:",
        *[f"  {change}" for change in evaluation.drift.identity],
    ]
    if evaluation.drift.environment:
        lines.append("  environment drift as well:")
        lines += [f"    {change}" for change in evaluation.drift.environment]
    lines.append(f"  baseline: {evaluation.baseline.path}")
    lines.append("  store a new one with --specperf-update once this setup is the intended one")
    return "\n".join(lines)
