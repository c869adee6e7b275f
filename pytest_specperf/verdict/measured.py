"""The checks of tonight's measurement on its own or beside the reference's, each a pure function of
the measurements: the error rate, the speedup (with the interval it is decided on), a metric's range,
acceptance by draft position against floors, and the lossless share. verdict/checks.py makes them the
checks of a test; the checks against a stored history are verdict/regression.py's.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from pytest_specperf.measure.records import METRICS, Measurement, RequestRecord
from pytest_specperf.verdict.history import MIN_RUNS, SpeedupSpread, speedup_estimate
from pytest_specperf.verdict.markers import RANGE_METRICS
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
