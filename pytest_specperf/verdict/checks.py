"""Checks of one marked test, and the verdict they add up to.

A check is met, suspect or missed (stats.Decision; inconclusive too under the strict reading).
A test fails only on evidence: a missed check, or an incomparable baseline (by default); a
suspect check passes with a warning. Every message names the metric, the
current value with its interval, what it was held against, the rounds, and any environment
drift since the baseline: a number shown without its environment is how phantom baselines
happen.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field, replace

from pytest_specperf.config.settings import SpecperfConfig
from pytest_specperf.measure.records import METRICS, Measurement, RequestRecord
from pytest_specperf.store.records import StoredBaseline
from pytest_specperf.verdict.control import held_to, judge_speedup, reference_floor
from pytest_specperf.verdict.drift import Change, FingerprintDiff, diff, speedup_differences
from pytest_specperf.verdict.explain import Explanation, explain, speedup_shortfall
from pytest_specperf.verdict.history import MIN_RUNS, SpeedupSpread, speedup_estimate
from pytest_specperf.verdict.markers import AGAINST_HISTORY, RANGE_METRICS, SpecperfMarker
from pytest_specperf.verdict.nightly import NightVerdict, Tolerance
from pytest_specperf.verdict.regression import (
    ACKNOWLEDGE,
    check_positions_history,
    check_regression,
    night_changes,
    night_lines,
    past_runs,
    rejected_runs,
)
from pytest_specperf.verdict.results import CheckResult, fmt, rounds_text
from pytest_specperf.verdict.stats import (
    Decision,
    Direction,
    Estimate,
    decide_range,
    decide_threshold,
    mean_estimate,
    ratio_estimate,
    worst_decision,
)
from pytest_specperf.verdict.trends import HistoryChange, history_changes, speedup_spread
from pytest_specperf.verdict.verdicts import Verdict, verdict_of

__all__ = [
    "ACKNOWLEDGE",
    "CheckResult",
    "Evaluation",
    "Limits",
    "check_regression",
    "evaluate",
    "fmt",
    "night_lines",
    "past_runs",
    "rejected_runs",
]


@dataclass
class Evaluation:
    """All checks of a test plus the baseline comparison's context."""

    checks: list[CheckResult] = field(default_factory=list)
    baseline: StoredBaseline | None = None
    drift: FingerprintDiff | None = None
    updating: bool = False
    changes: list[HistoryChange] = field(default_factory=list)  # changes in force in the history, tonight included
    #: tonight's speedup over the reference as `min_speedup` decides on it (None: no reference, or it is one)
    speedup: SpeedupInterval | None = None
    #: what the reference and this server differ in besides speculation (for a test that checks against it)
    unlike_reference: list[Change] = field(default_factory=list)
    #: why the key moved, part by part, when a history check lies beyond its tolerance (verdict/explain.py)
    explanation: Explanation | None = None

    @property
    def incomparable(self) -> bool:
        return self.drift is not None and not self.drift.comparable

    def having(self, decision: Decision) -> list[CheckResult]:
        return [c for c in self.checks if c.decision is decision]

    @property
    def missed(self) -> list[CheckResult]:
        return self.having(Decision.MISSED)

    @property
    def suspect(self) -> list[CheckResult]:
        return self.having(Decision.SUSPECT)

    @property
    def inconclusive(self) -> list[CheckResult]:
        return self.having(Decision.INCONCLUSIVE)

    @property
    def settled(self) -> bool:
        """No second look could change the verdict: every check MET, or missed for a reason more rounds or
        another server start cannot explain (failed requests, outputs that differ, an accept length)."""
        return all(c.decision is Decision.MET or (c.decision.settled and not c.start_sensitive) for c in self.checks)

    @property
    def confirmable(self) -> bool:
        """A check a server start's offset can explain lies beyond its threshold: a second start may tell."""
        return any(c.beyond and c.start_sensitive for c in self.checks)

    @property
    def nights(self) -> list[NightVerdict]:
        return [c.night for c in self.checks if c.night is not None]

    @property
    def verdict(self) -> Verdict:
        return verdict_of(
            missed=bool(self.missed),
            incomparable=self.incomparable,
            suspect=bool(self.suspect),
            inconclusive=bool(self.inconclusive),
            improved=any(c.improved for c in self.checks),
            new=self.baseline is None and not self.updating,
        )


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


@dataclass(frozen=True)
class SpeedupInterval:
    """Tonight's speedup over the reference, with the interval `min_speedup` decides on and the table
    shows (one interval per check), and the words for what its start-to-start part rests on."""

    estimate: Estimate
    basis: str


def speedup_interval(
    result: Measurement,
    reference: Measurement,
    run_cv: float = 0.0,
    spread: SpeedupSpread | None = None,
    pairs: int = 0,
) -> SpeedupInterval:
    """Speedup over the reference, measured in the same session on two server starts (or more, after
    a confirmation): the interval carries the start-to-start variance of a speedup besides round
    noise. It is the recorded speedups' own (`spread`, from >= 3 runs of both servers stored by the
    same sessions) when there is one, else the prior `run_cv` per start (config run_to_run_cv)."""
    current, ref = result.start_samples("output_throughput"), reference.start_samples("output_throughput")
    if spread is not None:
        ratio = speedup_estimate(current, ref, run_cv, spread=spread)
        return SpeedupInterval(ratio, f"start-to-start CV {spread.cv:.1%} from {spread.runs} recorded speedups")
    single = len(current) == 1 and len(ref) == 1
    ratio = speedup_estimate(current, ref, run_cv) if run_cv > 0.0 or not single else ratio_estimate(current[0], ref[0])
    more = MIN_RUNS - pairs
    basis = (
        f"prior run-to-run CV {run_cv:.1%} per start (config run_to_run_cv; {pairs} recorded "
        f"speedup{'s' if pairs != 1 else ''}, {more} more replace{'s' if more == 1 else ''} it)"
    )
    return SpeedupInterval(ratio, basis)


def check_speedup(
    result: Measurement,
    reference: Measurement | None,
    minimum: float,
    interval: SpeedupInterval | None,
    *,
    strict: bool = False,
) -> CheckResult:
    """Is the speedup (`speedup_interval`) credibly at least `minimum`?"""
    if reference is None or interval is None:
        return CheckResult("min_speedup", Decision.MISSED, "min_speedup: no reference measurement to compare with")
    ratio = interval.estimate
    decision = decide_threshold(ratio, minimum, Direction.HIGHER_IS_BETTER, strict=strict)
    message = (
        f"min_speedup: speedup {fmt(ratio, 3)} over {reference.key.server} "
        f"({rounds_text(result)} vs {rounds_text(reference)}; {interval.basis}) "
        f"must be >= {minimum:g}: {decision.value}"
    )
    return CheckResult("min_speedup", decision, message, ratio, start_sensitive=True)


def check_range(
    result: Measurement, key: str, low: float | None, high: float | None, *, strict: bool = False
) -> CheckResult:
    metric = RANGE_METRICS[key]
    samples = result.samples(metric)
    if not samples and metric == "accept_length" and result.algorithm is None:
        samples = [1.0] * len(result.rounds)  # a plain server accepts exactly the one token it decodes
    if not samples:
        return CheckResult(key, Decision.MISSED, f"{key}: {metric} was not measured (no successful round reports it)")
    estimate = mean_estimate(samples)
    decision = decide_range(estimate, low, high, strict=strict)
    bounds = f"[{'-inf' if low is None else f'{low:g}'}, {'inf' if high is None else f'{high:g}'}]"
    message = (
        f"{key}: {metric} {fmt(estimate)} {METRICS[metric].unit} over {rounds_text(result)} "
        f"must lie in {bounds}: {decision.value}"
    )
    return CheckResult(key, decision, message, estimate, start_sensitive=metric != "accept_length")


def check_positions(result: Measurement, floors: Sequence[float], *, strict: bool = False) -> CheckResult:
    """Is the acceptance at each draft position credibly at least its floor? One sample per round (a
    round's verify steps pooled), as vLLM's per-position test asks, but judged with an interval."""
    shares = result.round_position_shares()
    if not shares:
        return CheckResult(
            "accept_per_position",
            Decision.MISSED,
            "accept_per_position: the server reported no acceptance by draft position (no histogram, no counters)",
        )
    parts, decisions = [], []
    for i, floor in enumerate(floors):
        estimate = mean_estimate([s[i] if i < len(s) else 0.0 for s in shares])
        decision = decide_threshold(estimate, floor, Direction.HIGHER_IS_BETTER, strict=strict)
        decisions.append(decision)
        verdict = "" if decision is Decision.MET else f" ({decision.value})"
        parts.append(f"position {i + 1} {fmt(estimate)} >= {floor:g}{verdict}")
    decision = worst_decision(decisions)
    message = f"accept_per_position over {rounds_text(result)}: {'; '.join(parts)}: {decision.value}"
    return CheckResult("accept_per_position", decision, message)


@dataclass(frozen=True)
class LosslessMatch:
    """How many outputs equal the reference server's for the same prompt in the same round slot: the
    lossless check's figure, reported whether the check passes or not (and where no test checks it)."""

    equal: int
    compared: int
    #: where the first differing output leaves the reference's, None when every output is equal
    first_mismatch: str | None = None

    @property
    def share(self) -> float:
        return self.equal / self.compared

    def __str__(self) -> str:
        """'48 of 48 outputs (100.0%) equal the reference's'."""
        return f"{self.equal} of {self.compared} outputs ({self.share:.1%}) equal the reference's"


def lossless_match(result: Measurement, reference: Measurement) -> LosslessMatch | None:
    """Each successful output against the reference's for the same prompt in the same round slot; None
    when no pair of successful requests exists."""
    expected = {(r.index, rec.index): rec for r in reference.rounds for rec in r.records if rec.ok}
    pairs = [
        (r.index, rec, expected[(r.index, rec.index)])
        for r in result.rounds
        for rec in r.records
        if rec.ok and (r.index, rec.index) in expected
    ]
    if not pairs:
        return None
    mismatches = [(i, ours, theirs) for i, ours, theirs in pairs if ours.output_hash != theirs.output_hash]
    first = _first_divergence(*mismatches[0]) if mismatches else None
    return LosslessMatch(len(pairs) - len(mismatches), len(pairs), first)


def check_lossless(result: Measurement, reference: Measurement | None, required: float = 1.0) -> CheckResult:
    """At temperature 0, speculation must not change outputs: at least `required` of them equal the
    reference server's for the same prompt in the same round slot; the first mismatch is shown."""
    if reference is None:
        return CheckResult("lossless", Decision.MISSED, "lossless: no reference measurement to compare with")
    match = lossless_match(result, reference)
    if match is None:
        return CheckResult("lossless", Decision.MISSED, "lossless: no successful request pairs to compare")
    decision = Decision.MET if match.share >= required else Decision.MISSED
    message = (
        f"lossless: {match.equal} of {match.compared} outputs ({match.share:.1%}) equal the reference "
        f"server's ({reference.key.server}) output for the same prompt; required {required:.0%}"
    )
    if match.first_mismatch is not None:
        message += "; " + match.first_mismatch
    return CheckResult("lossless", decision, message, Estimate.exact(match.share))


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


# ---- all checks of a test ---------------------------------------------------------------------


@dataclass(frozen=True)
class Limits:
    """Tolerances in force for a test (marker > config > defaults)."""

    max_regression: float
    max_regression_accept_length: float
    max_error_rate: float
    rounds: int = 5
    run_to_run_cv: float = 0.02
    run_to_run_cv_accept_length: float = 0.005
    gate: str = "speedup"  # a speculative key is held to its speedup or its throughput (verdict/control.py)

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
            rounds=config.rounds,
            run_to_run_cv=config.run_to_run_cv,
            run_to_run_cv_accept_length=config.run_to_run_cv_accept_length,
            gate=config.gate,
        )

    @classmethod
    def tolerating(cls, max_regression: float, max_regression_accept_length: float) -> Limits:
        """A suite's tolerances with the default priors: how a history read after the fact (the dashboard,
        `specperf history`) judges its newest night when only the tolerances are given."""
        return cls(
            max_regression,
            max_regression_accept_length,
            0.0,
            run_to_run_cv=SpecperfConfig.run_to_run_cv,
            run_to_run_cv_accept_length=SpecperfConfig.run_to_run_cv_accept_length,
        )

    def tolerance(self, metric: str) -> Tolerance:
        """The history check's tolerance of a metric (throughput or accept length)."""
        if metric == "accept_length":
            return Tolerance(self.max_regression_accept_length, _direction(metric), self.run_to_run_cv_accept_length)
        return Tolerance(self.max_regression, _direction(metric), self.run_to_run_cv)


#: The metrics a stored history judges every night, and the ones whose changes are only reported.
JUDGED_METRICS = ("output_throughput", "accept_length")
#: How a person makes a change the level: the two acts that move it (verdict/level.py).
REPORTED_METRICS = ("mean_tpot_ms", "speedup")


def accept_length_only(marker: SpecperfMarker | None) -> bool:
    """The marker checks the accept length and nothing else a throughput history could answer for: an
    `accept_length` range, acceptance by draft position or their tolerance, and no speedup, throughput
    or latency bound, throughput tolerance or lossless check (docs/verdicts.md, "A test of the accept
    length"). Such a test is judged on the accept length's history, not on the throughput's: its row
    still shows the throughput's verdict, from the key's own evaluation (report/analysis.py)."""
    if marker is None:
        return False
    about_length = (
        "accept_length" in marker.ranges
        or marker.accept_per_position is not None
        or marker.max_regression_accept_length is not None
    )
    about_more = (
        marker.min_speedup is not None
        or bool(set(marker.ranges) - {"accept_length"})
        or marker.max_regression is not None
        or marker.lossless is not None
    )
    return about_length and not about_more


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
    strict: bool = False,
    searches: int = 1,
) -> Evaluation:
    """Every check of a test on its current measurement. `reference_baseline` is the reference's
    stored history of the same workload and level: with this one's it gives the recorded speedups.
    `searches` is how many key series the session searches for changes (keys x metrics)."""
    level = result.key.concurrency
    evaluation = Evaluation(baseline=baseline, updating=updating)
    checks = evaluation.checks
    checks.append(check_errors(result, limits.max_error_rate))
    usable = not updating and reference is not None and comparable(baseline, result)
    if not usable or reference is None or not comparable(reference_baseline, reference):
        reference_baseline = None  # recorded speedups need both histories, of this setup
    if reference is not None and not result.is_reference:
        spread, pairs = speedup_spread(baseline, reference_baseline)
        evaluation.speedup = speedup_interval(result, reference, limits.run_to_run_cv, spread, pairs)
    if marker is not None:
        minimum = marker.min_speedup_at(level)
        if (minimum is not None or marker.lossless is not None) and reference is not None:
            evaluation.unlike_reference = speedup_differences(reference.fingerprint, result.fingerprint)
        if minimum is not None:
            speedup = check_speedup(result, reference, minimum, evaluation.speedup, strict=strict)
            if speedup.beyond and reference is not None and (why := speedup_shortfall(result, reference)):
                speedup = replace(speedup, message=f"{speedup.message}; why: {why}")
            if evaluation.unlike_reference:
                speedup = replace(speedup, message=f"{speedup.message}; {unlike_message(evaluation)}")
            checks.append(speedup)
        for key in RANGE_METRICS:
            bounds = marker.range_at(key, level)
            if bounds is not None:
                checks.append(check_range(result, key, *bounds, strict=strict))
        floors = marker.floors_at(level)
        if floors == AGAINST_HISTORY:
            history = None if updating or not comparable(baseline, result) else baseline
            tolerance = limits.max_regression_accept_length
            found = check_positions_history(result, history, tolerance, strict=strict) if history else None
            checks.extend([found] if found is not None else [])
        elif floors is not None:
            checks.append(check_positions(result, floors, strict=strict))
        if marker.lossless is not None:
            checks.append(check_lossless(result, reference, marker.lossless))
    if baseline is not None and not updating:
        evaluation.drift = drift(baseline, result)
        if (evaluation.drift is None or evaluation.drift.comparable) and accept_length_only(marker):
            check = check_regression(
                result,
                baseline,
                "accept_length",
                limits.tolerance("accept_length"),
                strict=strict,
                searches=searches,
                rounds=limits.rounds,
            )
            checks.extend([check] if check is not None else [])
            evaluation.changes += night_changes(result, "accept_length", check, baseline) if check else []
        elif evaluation.drift is None or evaluation.drift.comparable:
            control = judge_speedup(
                result,
                reference,
                baseline,
                reference_baseline,
                limits.tolerance("output_throughput"),
                strict=strict,
                searches=searches,
                rounds=limits.rounds,
            )
            checks.extend([control.check] if control is not None else [])
            for metric in JUDGED_METRICS:
                check = check_regression(
                    result,
                    baseline,
                    metric,
                    limits.tolerance(metric),
                    strict=strict,
                    searches=searches,
                    rounds=limits.rounds,
                    floors=_floors(result, reference, reference_baseline, limits) if metric != "accept_length" else (),
                )
                if check is not None:
                    check = held_to(check, control, limits.gate) if metric == "output_throughput" else check
                    checks.append(check)
                    evaluation.changes += night_changes(result, metric, check, baseline)
            evaluation.changes += history_changes(
                result,
                baseline,
                REPORTED_METRICS,
                reference=reference,
                reference_baseline=reference_baseline,
                searches=searches,
            )
            evaluation.explanation = explanation_of(
                evaluation, result, baseline, reference, reference_baseline, limits.max_regression
            )
    return evaluation


def explanation_of(
    evaluation: Evaluation,
    result: Measurement,
    baseline: StoredBaseline,
    reference: Measurement | None,
    reference_baseline: StoredBaseline | None,
    tolerance: float | None = None,
) -> Explanation | None:
    """Why the key moved, when a history check lies beyond its tolerance (or its estimate does, by more
    than `tolerance`: a check the gate reports beside the speedup's, or one whose assumed spread the
    reference's movement widened): tonight against the runs the throughput level rests on, with the
    reference's runs of the same sessions beside them."""
    beyond = [c for c in evaluation.checks if c.name.startswith("regression:") and (c.beyond or _moved(c, tolerance))]
    throughput = next((c for c in evaluation.checks if c.name == "regression:output_throughput"), None)
    if not beyond or throughput is None or throughput.night is None or throughput.night.level is None:
        return None
    runs, _ = past_runs(baseline, "output_throughput")
    level = [runs[i] for i in throughput.night.level.level_runs if i < len(runs)]
    sessions = {run.provenance.session for run in level} - {None}
    beside = (
        [r.measurement for r in reference_baseline.runs if r.provenance.session in sessions]
        if (reference_baseline is not None)
        else []
    )
    environment = evaluation.drift.environment if evaluation.drift is not None else []
    return explain(
        result,
        [r.measurement for r in level],
        reference=reference,
        reference_level=beside,
        drift=environment,
        verdict=throughput.night.comparison.ratio if throughput.night.comparison is not None else None,
    )


def _floors(
    result: Measurement, reference: Measurement | None, reference_baseline: StoredBaseline | None, limits: Limits
) -> list[tuple[float, str]]:
    """What tonight shows of a speculative key's start-to-start spread besides its rounds: with `gate =
    "speedup"` the reference's movement (a node that moves is the noise of a shared pool); with
    `gate = "throughput"` the suite holds the node's speed to account, and it is signal."""
    return reference_floor(result, reference, reference_baseline) if limits.gate == "speedup" else []


def _moved(check: CheckResult, tolerance: float | None) -> bool:
    """The estimate of a history check's night lies beyond `tolerance` either way."""
    night = check.night
    if tolerance is None or night is None or night.comparison is None:
        return False
    return abs(math.log(night.comparison.ratio.value)) > -math.log(1.0 - tolerance)


def comparable(baseline: StoredBaseline | None, measurement: Measurement) -> bool:
    """A stored history measured on the same setup (environment drift allowed): its runs may be used."""
    if baseline is None:
        return False
    found = drift(baseline, measurement)
    return found is None or found.comparable


def drift(baseline: StoredBaseline, result: Measurement) -> FingerprintDiff | None:
    if result.fingerprint is None or baseline.measurement.fingerprint is None:
        return None
    return diff(baseline.measurement.fingerprint, result.fingerprint)


def unlike_message(evaluation: Evaluation) -> str:
    """The sentence a speedup that compares more than speculation carries, naming each difference."""
    changes = "; ".join(str(change) for change in evaluation.unlike_reference)
    return f"the reference and this server differ besides speculation (reference → this server): {changes}"
