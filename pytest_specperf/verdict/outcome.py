"""What a test's verdict becomes in pytest: passed, failed or skipped, with which message and warnings.

The policy in one pure function, so that it is read and tested without a pytest run, in the
precedence of verdict/verdicts.py: a MISSED check fails the test (whatever the baseline, so a row
that says REGRESSION is never skipped); an INCOMPARABLE baseline fails, skips or warns
(`--specperf-on-incomparable`); a SUSPECT check (and, under the strict reading, an INCONCLUSIVE
one) warns, or fails under `--specperf-strict`. The plugin only carries the outcome out.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from pytest_specperf.measure.records import Measurement
from pytest_specperf.verdict.checks import Evaluation, failure_message, incomparable_message, unlike_message


@dataclass(frozen=True)
class Outcome:
    """`action` with its `message` (None for a pass); `warnings` are issued first, whatever the action."""

    action: Literal["pass", "fail", "skip"]
    message: str | None = None
    warnings: tuple[str, ...] = ()


def outcome_of(measurement: Measurement, evaluation: Evaluation, *, on_incomparable: str, strict: bool) -> Outcome:
    """The outcome of one evaluated test (`on_incomparable`: "fail", "skip" or "warn")."""
    warned: list[str] = []
    if evaluation.missed:
        if evaluation.incomparable:
            warned.append(incomparable_message(measurement, evaluation))
        named = [*evaluation.missed, *evaluation.suspect]  # a failure hides none of tonight's doubts
        return Outcome("fail", failure_message(measurement, evaluation, named), tuple(warned))
    if evaluation.incomparable:
        message = incomparable_message(measurement, evaluation)
        if on_incomparable in ("fail", "skip"):
            return Outcome("fail" if on_incomparable == "fail" else "skip", message)
        warned.append(message)
    if evaluation.unlike_reference:  # like a drift line: shown, and a failure only under --specperf-strict
        message = f"{measurement.key.label}: {unlike_message(evaluation)}"
        if strict:
            return Outcome("fail", message + "; --specperf-strict fails it", tuple(warned))
        warned.append(message)
    doubtful = [*evaluation.suspect, *evaluation.inconclusive]
    if doubtful:
        message = failure_message(measurement, evaluation, doubtful)
        if evaluation.suspect:
            message += "\n  an estimate lies beyond its threshold, not credibly: it passes with this warning"
        if strict:
            return Outcome("fail", message + "; --specperf-strict fails it", tuple(warned))
        warned.append(message)
    return Outcome("pass", None, tuple(warned))
