"""`specperf backtest FILE`: replay a nightly series through the verdict engine the tests use.

Why: before a team trusts a nightly gate, it wants to know what the gate would have said on its own
history: how often it would have cried wolf, whether it would have caught the regressions the team
knows about, and which series are too noisy for the tolerance. Each row of the CSV is one night (one
run); night by night, the rows before it form the history, stored by the plugin's own rules
(verdict/nightly.py: a SUSPECT or REGRESSION night kept but not counted; `--update` rows start a new
segment, as `--specperf-update` does), and `judge_night` decides, exactly as in a test. A night
cannot be confirmed on a second server start here (there is none): the replay decides on the one
start it has and counts the restarts the plugin would have asked for.

Without per-round values (`--rounds`) each value is a run mean whose round noise is unknown: the
run-to-run spread then carries all of the noise, which is what a history of run means can know.
"""

from __future__ import annotations

import csv
import math
import statistics
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pytest_specperf.errors import SpecperfError
from pytest_specperf.verdict.changes import ChangePoint, change_percent, change_size
from pytest_specperf.verdict.history import bimodal, spread_lower_bound
from pytest_specperf.verdict.nightly import NightVerdict, PastRun, RunStatus, Tolerance, judge_night, stored_status
from pytest_specperf.verdict.stats import Decision
from pytest_specperf.verdict.verdicts import Verdict, verdict_of

#: A run-to-run CV credibly above tolerance / BLIND_RATIO cannot show a change of the tolerance.
BLIND_RATIO = 2.5


class BacktestError(SpecperfError):
    """Bad input: one line naming the file, the row and the column."""


@dataclass(frozen=True)
class Row:
    """One night of the series."""

    index: int
    samples: tuple[float, ...]
    time: str | None = None
    commit: str | None = None
    update: bool = False


@dataclass(frozen=True)
class Night:
    """What the gate said about one row."""

    row: Row
    outcome: Verdict
    verdict: NightVerdict | None
    change_point: int | None  # the row the change in force (or a flagged night's regression) began at
    restart: bool  # the plugin would have asked for a second server start
    status: RunStatus | None  # how the night entered the history (None: it started a new segment)


@dataclass
class Replay:
    """The nights of a series, and what the gate could see at the end."""

    nights: list[Night] = field(default_factory=list)

    def counts(self) -> Counter[str]:
        return Counter(n.outcome.value for n in self.nights)


def read_series(
    path: Path,
    *,
    value: str | None = None,
    commit: str | None = None,
    time: str | None = None,
    rounds: str | None = None,
    update: str | None = None,
) -> tuple[str, list[Row]]:
    """The rows of a CSV file with a header (the value column's name, the rows); BacktestError names
    the file, the row and the column of anything it cannot read."""
    try:
        with path.open(newline="", encoding="utf-8") as handle:
            reader = csv.DictReader(handle)
            header = list(reader.fieldnames or [])
            records = list(reader)
    except (OSError, UnicodeDecodeError, csv.Error) as exc:
        raise BacktestError(f"{path}: cannot read it as CSV ({exc})") from None
    if not header:
        raise BacktestError(f"{path}: no header row; the first line must name the columns")
    for option, column in (("--value", value), ("--commit", commit), ("--time", time), ("--rounds", rounds),
                           ("--update", update)):  # fmt: skip
        if column is not None and column not in header:
            raise BacktestError(f"{path}: no column {column!r} ({option}); the columns are {', '.join(header)}")
    if len(records) < 2:
        raise BacktestError(f"{path}: {len(records)} row(s); a backtest needs at least 2")
    named = {c for c in (commit, time, rounds, update) if c is not None}
    column = value if value is not None else _value_column(path, header, records, named)
    rows = [
        Row(i, _samples(path, i, record, column, rounds), _cell(record, time), _cell(record, commit),
            _flag(path, i, record, update))
        for i, record in enumerate(records)
    ]  # fmt: skip
    return column, rows


def _value_column(path: Path, header: list[str], records: list[dict[str, str]], named: set[str]) -> str:
    """The only numeric column besides the named ones and a run counter (0, 1, 2, ... or 1, 2, 3, ...)."""
    numeric = [c for c in header if c not in named and all(_number(r.get(c)) is not None for r in records)]
    values = [c for c in numeric if not _counter(records, c)]
    if len(values) == 1:
        return values[0]
    if not values:
        raise BacktestError(f"{path}: no numeric column to replay besides {', '.join(sorted(named)) or 'a run counter'}"
                            f"; the columns are {', '.join(header)} (choose one with --value)")  # fmt: skip
    raise BacktestError(f"{path}: several numeric columns ({', '.join(values)}); choose one with --value")


def _counter(records: list[dict[str, str]], column: str) -> bool:
    numbers = [_number(r.get(column)) for r in records]
    return numbers in ([float(i) for i in range(len(records))], [float(i + 1) for i in range(len(records))])


def _number(text: str | None) -> float | None:
    try:
        value = float(text) if text is not None and text.strip() else None
    except ValueError:
        return None
    return value if value is not None and math.isfinite(value) else None


def _samples(path: Path, index: int, record: dict[str, str], column: str, rounds: str | None) -> tuple[float, ...]:
    """The row's per-round values (`rounds`, separated by ';'), else its one value; positive numbers."""
    where = f"{path}: row {index + 2}, column {rounds or column!r}"  # row 1 is the header
    if rounds is not None and (record.get(rounds) or "").strip():
        parts = [p for p in (record.get(rounds) or "").split(";") if p.strip()]
        found = tuple(_number(p) for p in parts)
    else:
        found = (_number(record.get(column)),)
    if not found or any(v is None or v <= 0.0 for v in found):
        cell = record.get(rounds) if rounds is not None and (record.get(rounds) or "").strip() else record.get(column)
        raise BacktestError(f"{where}: {cell!r} is not a positive number{' (values separated by ;)' if rounds else ''}")
    return tuple(v for v in found if v is not None)


def _cell(record: dict[str, str], column: str | None) -> str | None:
    text = (record.get(column) or "").strip() if column is not None else ""
    return text or None


def _flag(path: Path, index: int, record: dict[str, str], column: str | None) -> bool:
    text = (record.get(column) or "").strip().lower() if column is not None else ""
    if text in ("", "0", "false", "no"):
        return False
    if text in ("1", "true", "yes"):
        return True
    raise BacktestError(f"{path}: row {index + 2}, column {column!r}: {text!r} is not 1 or 0")


def replay(rows: Sequence[Row], tolerance: Tolerance, *, history: int = 30) -> Replay:
    """Night by night: the history before it (the current segment, the newest `history` nights), then
    `judge_night` on its one start, then stored by the plugin's rules."""
    result = Replay()
    past: list[tuple[Row, PastRun]] = []
    for row in rows:
        if row.update or not past:  # a new segment: this night is the new normal, nothing to compare with
            past = [(row, PastRun(row.samples, RunStatus.ACCEPTED, str(row.index)))]
            result.nights.append(Night(row, Verdict.NEW, None, None, False, None))
            continue
        verdict = judge_night([row.samples], [p for _, p in past], tolerance, rounds=len(row.samples))
        outcome = verdict_of(
            missed=verdict.decision is Decision.MISSED, incomparable=False,
            suspect=verdict.decision is Decision.SUSPECT, inconclusive=verdict.decision is Decision.INCONCLUSIVE,
            improved=verdict.improved, new=False,
        )  # fmt: skip
        status = stored_status(verdict.decision)
        point = verdict.change if verdict.change is not None else verdict.since
        rows_in_series = [r.index for r, _ in past] + [row.index]
        at = rows_in_series[point.index] if point is not None else None
        restart = verdict.decision in (Decision.SUSPECT, Decision.MISSED)
        result.nights.append(Night(row, outcome, verdict, at, restart, status))
        past = [*past, (row, PastRun(row.samples, status, str(row.index)))][-history:]
    return result


# --- output ------------------------------------------------------------------------------------------


def night_line(night: Night) -> str:
    row = night.row
    when = " ".join(p for p in (row.time, (row.commit or "")[:7]) if p)
    value = f"{statistics.fmean(row.samples):.6g}"
    v = night.verdict
    if v is None or v.comparison is None:
        return f"{row.index:>5}  {when:<28} {value:>12}  {'':<28} NEW (a new segment starts here)"
    ratio = v.comparison.ratio
    shown = change_percent(ratio)
    notes = []
    if night.change_point is not None and v.decision is not Decision.MET:
        notes.append(f"since run {night.change_point}")
    elif v.change is not None and night.change_point is not None:
        notes.append(f"change since run {night.change_point}: {_size(v.change)}")
    notes += [f"rejected an outlier ({r.ratio - 1:+.1%})" for r in v.comparison.rejected]
    if night.restart:
        notes.append("a second start would be asked for")
    return f"{row.index:>5}  {when:<28} {value:>12}  {shown:<28} {night.outcome.value:<12} {'; '.join(notes)}"


def _size(change: ChangePoint) -> str:
    return change_size(change.change, change.kind, change.per_run)


def summary(result: Replay, tolerance: Tolerance) -> dict[str, Any]:
    """Counts per outcome, restarts asked for, and what the gate could see with its last history."""
    judged = [n for n in result.nights if n.verdict is not None and n.verdict.comparison is not None]
    last = judged[-1].verdict if judged else None
    comparison = last.comparison if last is not None else None
    low = spread_lower_bound(comparison) if comparison is not None else None
    groups = bimodal(list(last.values[:-1]), share=0.15) if last is not None else None
    return {
        "nights": len(result.nights),
        "outcomes": dict(sorted(result.counts().items())),
        "restarts": sum(n.restart for n in result.nights),
        "run_to_run_cv": comparison.run_cv if comparison is not None else None,
        "detectable_change": None if last is None or last.detectable is None else last.detectable - 1.0,
        "cannot_see_tolerance": (low is not None and low > tolerance.max_regression / BLIND_RATIO)
        or (last is not None and last.flapping),
        "bimodal": list(groups) if groups is not None else None,
    }


def describe_summary(data: dict[str, Any], tolerance: Tolerance) -> list[str]:
    counts = ", ".join(f"{k} {v}" for k, v in data["outcomes"].items())
    lines = [f"{data['nights']} nights: {counts}; {data['restarts']} second starts would have been asked for"]
    if data["run_to_run_cv"] is not None:
        sees = data["detectable_change"]
        seen = f"; the smallest change one night flags (80%): {sees:+.1%}" if sees is not None else ""
        lines.append(f"run-to-run CV at the end: {data['run_to_run_cv']:.1%}{seen}")
    if data["cannot_see_tolerance"]:
        lines.append(
            f"this series cannot show a {tolerance.max_regression:.0%} change: its run-to-run spread is too wide; "
            "raise rounds, raise the tolerance or fix the noise"
        )
    if data["bimodal"]:
        low, high = data["bimodal"]
        lines.append(f"its run means fall into two alternating groups ({low:.6g} and {high:.6g})")
    return lines


def to_json(result: Replay, column: str, path: Path, tolerance: Tolerance) -> dict[str, Any]:
    nights = []
    for night in result.nights:
        v = night.verdict
        ratio = v.comparison.ratio if v is not None and v.comparison is not None else None
        nights.append({
            "run": night.row.index,
            "time": night.row.time,
            "commit": night.row.commit,
            "value": statistics.fmean(night.row.samples),
            "outcome": night.outcome.value,
            "ratio": None if ratio is None else {"value": ratio.value, "low": ratio.low, "high": ratio.high},
            "change_point": night.change_point,
            "change": None if v is None or (v.change or v.since) is None else _size(v.change or v.since),  # type: ignore[arg-type]
            "restart": night.restart,
            "stored": None if night.status is None else night.status.value,
            "rejected": [r.ratio for r in v.comparison.rejected] if v is not None and v.comparison else [],
        })  # fmt: skip
    return {
        "file": str(path),
        "value": column,
        "tolerance": tolerance.max_regression,
        "direction": tolerance.direction.value,
        "nights": nights,
        "summary": summary(result, tolerance),
    }
