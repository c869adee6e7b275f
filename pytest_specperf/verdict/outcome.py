"""What a test's verdict becomes in pytest: passed, failed or skipped, with which message and warnings.

The policy in one pure function, so that it is read and tested without a pytest run, in the
precedence of verdict/verdicts.py: a MISSED check fails the test (whatever the baseline, so a row
that says REGRESSION is never skipped); an INCOMPARABLE baseline fails, skips or warns
(`--specperf-on-incomparable`); a SUSPECT check (and, under the strict reading, an INCONCLUSIVE
one) warns, or fails under `--specperf-strict`. The plugin only carries the outcome out.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Literal

from pytest_specperf.measure.records import Measurement
from pytest_specperf.verdict.checks import CheckResult, Evaluation, unlike_message


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


def failure_message(result: Measurement, evaluation: Evaluation, checks: Sequence[CheckResult]) -> str:
    """The text a failing test shows: verdict, the checks that decided it, and the drift."""
    lines = [f"{evaluation.verdict.value} {result.key.label}:"]
    lines += [f"  {message}" for message in _histories_said_once(checks)]
    if evaluation.drift is not None and evaluation.drift.environment:
        lines.append("  environment drift since the baseline (the comparison was still made):")
        lines += [f"    {change}" for change in evaluation.drift.environment]
    lines += [f"  change point: {change.sentence}" for change in evaluation.changes]
    if evaluation.explanation is not None:
        lines.append(f"  why: {why_sentence(evaluation)}")
    if evaluation.baseline is not None:
        newest = evaluation.baseline.provenance
        commit = f"commit {newest.git_commit[:7]}" if newest.git_commit else "no git commit"
        lines.append(f"  baseline: {evaluation.baseline.path} (newest run {newest.created[:10]}, {commit})")
    return "\n".join(lines)


#: what a check's message says in place of a history's description a line below gives
SAME_HISTORY = "(the same recorded runs and spread as below)"


def _histories_said_once(checks: Sequence[CheckResult]) -> list[str]:
    """Each check's message, with a history's description (its runs, its spread and where the spread
    came from) given once, on the last line that has it (the key's own throughput, after its speedup):
    both are judged against the runs of the same nights, and a message that said the same long
    parenthesis twice would hide what differs."""
    said: set[str] = set()
    messages = []
    for check in reversed(checks):
        message = check.message
        comparison = check.night.comparison if check.night is not None else None
        if comparison is not None:
            described = f"({comparison.describe()})"
            if described in said:
                message = message.replace(described, SAME_HISTORY, 1)
            said.add(described)
        messages.append(message)
    return messages[::-1]


def why_sentence(evaluation: Evaluation) -> str:
    """The explanation's sentence; the causes it names by name only when the drift lines above it give
    their old and new values already (each sentence once in a message)."""
    explanation = evaluation.explanation
    assert explanation is not None
    shown = set(evaluation.drift.environment) if evaluation.drift is not None else set()
    if not explanation.causes or not set(explanation.causes) <= shown:
        return explanation.sentence()
    names = ", ".join(change.name for change in explanation.causes)
    return f"{replace(explanation, causes=()).sentence()}; changed since the level, and able to act on it: {names}"


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
