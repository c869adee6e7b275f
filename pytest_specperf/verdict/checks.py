"""Checks of one marked test, and the verdict they add up to.

A check is met, suspect or missed (stats.Decision; inconclusive too under the strict reading).
A test fails only on evidence: a missed check, or an incomparable baseline (by default); a
suspect check passes with a warning. Every message names the metric, the
current value with its interval, what it was held against, the rounds, and any environment
drift since the baseline: a number shown without its environment is how phantom baselines
happen.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Protocol

from pytest_specperf.config.settings import SpecperfConfig
from pytest_specperf.measure.records import METRICS, Measurement
from pytest_specperf.store.records import StoredBaseline
from pytest_specperf.verdict.control import held_to, judge_speedup, reference_floor
from pytest_specperf.verdict.drift import Change, FingerprintDiff, diff, speedup_differences
from pytest_specperf.verdict.explain import Explanation, explain, speedup_shortfall
from pytest_specperf.verdict.markers import RANGE_METRICS, AgainstHistory, SpecperfMarker
from pytest_specperf.verdict.measured import (
    LosslessMatch,
    SpeedupInterval,
    check_errors,
    check_lossless,
    check_positions,
    check_range,
    check_speedup,
    lossless_match,
    speedup_interval,
)
from pytest_specperf.verdict.nightly import NightVerdict
from pytest_specperf.verdict.regression import (
    ACKNOWLEDGE,
    check_positions_history,
    check_regression,
    night_changes,
    night_lines,
    past_runs,
    rejected_runs,
)
from pytest_specperf.verdict.results import CheckResult, fmt
from pytest_specperf.verdict.stats import (
    Decision,
    Direction,
    Tolerance,
)
from pytest_specperf.verdict.trends import HistoryChange, history_changes, speedup_spread
from pytest_specperf.verdict.verdicts import Verdict, verdict_of

__all__ = [
    "ACKNOWLEDGE",
    "CheckResult",
    "Evaluation",
    "Limits",
    "LosslessMatch",
    "SpeedupInterval",
    "check_errors",
    "check_lossless",
    "check_positions",
    "check_range",
    "check_regression",
    "check_speedup",
    "evaluate",
    "fmt",
    "lossless_match",
    "night_lines",
    "past_runs",
    "rejected_runs",
    "speedup_interval",
]


@dataclass(frozen=True)
class Evaluation:
    """All checks of a test plus the baseline comparison's context: built once (`evaluate`), from what
    each check found, and never changed after."""

    checks: tuple[CheckResult, ...] = ()
    baseline: StoredBaseline | None = None
    drift: FingerprintDiff | None = None
    updating: bool = False
    changes: tuple[HistoryChange, ...] = ()  # changes in force in the history, tonight included
    #: tonight's speedup over the reference as `min_speedup` decides on it (None: no reference, or it is one)
    speedup: SpeedupInterval | None = None
    #: what the reference and this server differ in besides speculation (for a test that checks against it)
    unlike_reference: tuple[Change, ...] = ()
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


# ---- each check of a test as an object: what it asks, and what it finds -----------------------------


@dataclass(frozen=True)
class Tonight:
    """What every check of a test reads: tonight's measurement and the reference's, the histories they
    may be held against, the limits in force and the reading (strict or not). Built once per look."""

    result: Measurement
    reference: Measurement | None
    limits: Limits
    #: the stored history of this key as the session read it (None: none yet, or not read while updating)
    baseline: StoredBaseline | None
    #: the reference's stored history, only where both histories are of this setup (the recorded speedups)
    reference_baseline: StoredBaseline | None
    drift: FingerprintDiff | None
    speedup: SpeedupInterval | None
    unlike_reference: tuple[Change, ...]
    updating: bool
    strict: bool
    searches: int
    keys: int = 1  # the keys the server measures tonight: a start is off or not for all of them
    speedup_keys: int = 1  # the keys the speedup's "is a start off?" is asked among (control.asked_among)

    @property
    def history(self) -> StoredBaseline | None:
        """The stored history tonight is held against: of this setup, and not while updating."""
        return None if self.updating or not comparable(self.baseline, self.result) else self.baseline


@dataclass(frozen=True)
class Found:
    """What one check found: its results (none where it had nothing to judge), and the report fields it
    fills (the changes in force it names, why the key moved)."""

    checks: tuple[CheckResult, ...] = ()
    changes: tuple[HistoryChange, ...] = ()
    explanation: Explanation | None = None


class Check(Protocol):
    """One check of a test: built from the marker, the limits and whether a history judges tonight; run
    once per look on what it reads (`Tonight`)."""

    def run(self, tonight: Tonight) -> Found: ...


@dataclass(frozen=True)
class ErrorRate:
    """Failed requests: at most `allowed` of them (every test has this check)."""

    allowed: float

    def run(self, tonight: Tonight) -> Found:
        return Found((check_errors(tonight.result, self.allowed),))


@dataclass(frozen=True)
class MinSpeedup:
    """`min_speedup`: the speedup over the reference, with why it fell short and what else differs."""

    minimum: float

    def run(self, tonight: Tonight) -> Found:
        result, reference = tonight.result, tonight.reference
        check = check_speedup(result, reference, self.minimum, tonight.speedup, strict=tonight.strict)
        if check.beyond and reference is not None and (why := speedup_shortfall(result, reference)):
            check = replace(check, message=f"{check.message}; why: {why}")
        if tonight.unlike_reference:
            check = replace(check, message=f"{check.message}; {unlike_sentence(tonight.unlike_reference)}")
        return Found((check,))


@dataclass(frozen=True)
class InRange:
    """A range argument (`throughput=`, `accept_length=`, `tpot_ms=`, `ttft_ms=`): its metric within bounds."""

    key: str
    low: float | None
    high: float | None

    def run(self, tonight: Tonight) -> Found:
        return Found((check_range(tonight.result, self.key, self.low, self.high, strict=tonight.strict),))


@dataclass(frozen=True)
class PositionFloors:
    """`accept_per_position=(0.6, 0.4, ...)`: each draft position's acceptance at least its floor."""

    floors: tuple[float, ...]

    def run(self, tonight: Tonight) -> Found:
        return Found((check_positions(tonight.result, self.floors, strict=tonight.strict),))


@dataclass(frozen=True)
class PositionsAgainstHistory:
    """`accept_per_position=True`: each draft position against the stored history's level (no check
    without a history of this setup)."""

    def run(self, tonight: Tonight) -> Found:
        history = tonight.history
        if history is None:
            return Found()
        tolerance = tonight.limits.max_regression_accept_length
        found = check_positions_history(tonight.result, history, tolerance, strict=tonight.strict)
        return Found(() if found is None else (found,))


@dataclass(frozen=True)
class Lossless:
    """`lossless`: at least `required` of the outputs equal the reference's."""

    required: float

    def run(self, tonight: Tonight) -> Found:
        return Found((check_lossless(tonight.result, tonight.reference, self.required),))


@dataclass(frozen=True)
class AcceptLengthHistory:
    """A test of the accept length alone (`accept_length_only`): tonight's accept length against its history."""

    def run(self, tonight: Tonight) -> Found:
        assert tonight.baseline is not None
        check = _against_history(tonight, "accept_length")
        if check is None:
            return Found()
        return Found((check,), tuple(night_changes(tonight.result, "accept_length", check, tonight.baseline)))


@dataclass(frozen=True)
class KeyHistory:
    """The key against its history: the speedup as a control, throughput (held to it by the `gate`) and
    accept length, the changes in force of the reported series, and why the key moved."""

    def run(self, tonight: Tonight) -> Found:
        result, reference, baseline = tonight.result, tonight.reference, tonight.baseline
        assert baseline is not None
        limits = tonight.limits
        control = judge_speedup(
            result,
            reference,
            baseline,
            tonight.reference_baseline,
            limits.tolerance("output_throughput"),
            strict=tonight.strict,
            searches=tonight.searches,
            rounds=limits.rounds,
            keys=tonight.speedup_keys,
        )
        checks = [control.check] if control is not None else []
        changes: list[HistoryChange] = []
        for metric in JUDGED_METRICS:
            check = _against_history(tonight, metric)
            if check is None:
                continue
            checks.append(held_to(check, control, limits.gate) if metric == "output_throughput" else check)
            changes += night_changes(result, metric, checks[-1], baseline)
        changes += history_changes(
            result,
            baseline,
            REPORTED_METRICS,
            reference=reference,
            reference_baseline=tonight.reference_baseline,
            searches=tonight.searches,
        )
        explanation = explanation_of(checks, tonight, limits.max_regression)
        return Found(tuple(checks), tuple(changes), explanation)


def _against_history(tonight: Tonight, metric: str) -> CheckResult | None:
    """One judged metric of tonight against its stored history (None: the history cannot judge it)."""
    assert tonight.baseline is not None
    limits = tonight.limits
    floors = [] if metric == "accept_length" else _floors(tonight, limits)
    return check_regression(
        tonight.result,
        tonight.baseline,
        metric,
        limits.tolerance(metric),
        strict=tonight.strict,
        searches=tonight.searches,
        rounds=limits.rounds,
        floors=floors,
        keys=tonight.keys,
    )


def marker_checks(marker: SpecperfMarker, level: int) -> list[Check]:
    """The checks a marker declares at one concurrency level, in the order a failure names them."""
    found: list[Check] = []
    if (minimum := marker.min_speedup_at(level)) is not None:
        found.append(MinSpeedup(minimum))
    found += [InRange(key, *bounds) for key in RANGE_METRICS if (bounds := marker.range_at(key, level)) is not None]
    floors = marker.floors_at(level)
    if isinstance(floors, AgainstHistory):
        found.append(PositionsAgainstHistory())
    elif floors is not None:
        found.append(PositionFloors(floors))
    if marker.lossless is not None:
        found.append(Lossless(marker.lossless))
    return found


def planned_checks(tonight: Tonight, marker: SpecperfMarker | None) -> list[Check]:
    """Every check of a test: the error rate, the marker's, and the history's where one of this setup
    judges tonight (the accept length's alone for a test of the accept length)."""
    found: list[Check] = [ErrorRate(tonight.limits.max_error_rate)]
    if marker is not None:
        found += marker_checks(marker, tonight.result.key.concurrency)
    judged = tonight.baseline is not None and not tonight.updating
    if judged and (tonight.drift is None or tonight.drift.comparable):
        found.append(AcceptLengthHistory() if accept_length_only(marker) else KeyHistory())
    return found


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
    keys: int = 1,
    speedup_keys: int = 1,
) -> Evaluation:
    """Every check of a test on its current measurement. `reference_baseline` is the reference's
    stored history of the same workload and level: with this one's it gives the recorded speedups.
    `searches` is how many key series the session searches for changes (keys x metrics); `keys` how
    many keys the server measures tonight (verdict/nightly.py `judge_night`); `speedup_keys` how many
    the speedup's question is asked among (verdict/control.py `asked_among`)."""
    tonight = _tonight(result, reference, marker, limits, baseline, reference_baseline, updating, strict, searches)
    tonight = replace(tonight, keys=keys, speedup_keys=max(keys, speedup_keys))
    found = [check.run(tonight) for check in planned_checks(tonight, marker)]
    return Evaluation(
        checks=tuple(check for f in found for check in f.checks),
        baseline=baseline,
        drift=tonight.drift,
        updating=updating,
        changes=tuple(change for f in found for change in f.changes),
        speedup=tonight.speedup,
        unlike_reference=tonight.unlike_reference,
        explanation=next((f.explanation for f in found if f.explanation is not None), None),
    )


def _tonight(
    result: Measurement,
    reference: Measurement | None,
    marker: SpecperfMarker | None,
    limits: Limits,
    baseline: StoredBaseline | None,
    reference_baseline: StoredBaseline | None,
    updating: bool,
    strict: bool,
    searches: int,
) -> Tonight:
    """What the checks of one look read: the recorded speedups need both histories, of this setup; the
    differences besides speculation are named for a test that checks against the reference."""
    both = reference is not None and comparable(baseline, result) and comparable(reference_baseline, reference)
    reference_history = reference_baseline if both and not updating else None
    speedup = None
    if reference is not None and not result.is_reference:
        spread, pairs = speedup_spread(baseline, reference_history)
        speedup = speedup_interval(result, reference, limits.run_to_run_cv, spread, pairs)
    level = result.key.concurrency
    asks = marker is not None and (marker.min_speedup_at(level) is not None or marker.lossless is not None)
    unlike = speedup_differences(reference.fingerprint, result.fingerprint) if asks and reference is not None else []
    return Tonight(
        result=result,
        reference=reference,
        limits=limits,
        baseline=baseline,
        reference_baseline=reference_history,
        drift=drift(baseline, result) if baseline is not None and not updating else None,
        speedup=speedup,
        unlike_reference=tuple(unlike),
        updating=updating,
        strict=strict,
        searches=searches,
    )


def explanation_of(
    checks: Sequence[CheckResult], tonight: Tonight, tolerance: float | None = None
) -> Explanation | None:
    """Why the key moved, when a history check lies beyond its tolerance (or its estimate does, by more
    than `tolerance`: a check the gate reports beside the speedup's, or one whose assumed spread the
    reference's movement widened): tonight against the runs the throughput level rests on, with the
    reference's runs of the same sessions beside them."""
    beyond = [c for c in checks if c.name.startswith("regression:") and (c.beyond or _moved(c, tolerance))]
    throughput = next((c for c in checks if c.name == "regression:output_throughput"), None)
    if not beyond or throughput is None or throughput.night is None or throughput.night.level is None:
        return None
    assert tonight.baseline is not None
    runs, _ = past_runs(tonight.baseline, "output_throughput")
    level = [runs[i] for i in throughput.night.level.level_runs if i < len(runs)]
    sessions = {run.provenance.session for run in level} - {None}
    reference_baseline = tonight.reference_baseline
    beside = (
        [r.measurement for r in reference_baseline.runs if r.provenance.session in sessions]
        if (reference_baseline is not None)
        else []
    )
    return explain(
        tonight.result,
        [r.measurement for r in level],
        reference=tonight.reference,
        reference_level=beside,
        drift=tonight.drift.environment if tonight.drift is not None else [],
        verdict=throughput.night.comparison.ratio if throughput.night.comparison is not None else None,
    )


def _floors(tonight: Tonight, limits: Limits) -> list[tuple[float, str]]:
    """What tonight shows of a speculative key's start-to-start spread besides its rounds: with `gate =
    "speedup"` the reference's movement (a node that moves is the noise of a shared pool); with
    `gate = "throughput"` the suite holds the node's speed to account, and it is signal."""
    if limits.gate != "speedup":
        return []
    return reference_floor(tonight.result, tonight.reference, tonight.reference_baseline)


def _moved(check: CheckResult, tolerance: float | None) -> bool:
    """The estimate of a history check's night lies beyond `tolerance` either way."""
    night = check.night
    if tolerance is None or night is None or night.comparison is None:
        return False
    return Tolerance(tolerance).moved(night.comparison.ratio.value)


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
    return unlike_sentence(evaluation.unlike_reference)


def unlike_sentence(changes: Sequence[Change]) -> str:
    """'the reference and this server differ besides speculation (reference → this server): ...'."""
    named = "; ".join(str(change) for change in changes)
    return f"the reference and this server differ besides speculation (reference → this server): {named}"
