"""`specperf backtest FILE`: replay a nightly series through the verdict engine the tests use.

Why: before a team trusts a nightly gate, it wants to know what the gate would have said on its own
history: how often it would have cried wolf, whether it would have caught the regressions the team
knows about, and which series are too noisy for the tolerance. Each row of the CSV is one night (one
run); night by night, the rows of the current segment before it form the history (kept as the store
keeps it: the newest `history` nights and the accepted level's newest runs), and `judge_night`
decides, exactly as in a test. `--update` rows start a new segment, as `--specperf-update` does:
the only way the level moves. A night cannot be confirmed on a second server start here (there is
none): the replay decides on the one start it has and counts the restarts the plugin would have
asked for. `--compare` puts a plain t-test's and a fixed band's verdicts beside each night.

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
from typing import Any, NamedTuple

from scipy.special import stdtrit

from pytest_specperf.errors import SpecperfError
from pytest_specperf.store.records import kept_runs
from pytest_specperf.verdict.changes import ChangePoint, change_percent, change_size
from pytest_specperf.verdict.history import bimodal, spread_lower_bound
from pytest_specperf.verdict.nightly import (
    NightVerdict,
    PastRun,
    RunStatus,
    judge_night,
    stored_status,
)
from pytest_specperf.verdict.stats import Decision, Direction, Tolerance
from pytest_specperf.verdict.verdicts import Verdict, verdict_of

#: A run-to-run CV credibly above tolerance / BLIND_RATIO cannot show a change of the tolerance.
BLIND_RATIO = 2.5
#: The plain gate `--compare` shows beside the plugin's: a t-test over the newest runs of the segment.
TTEST_RUNS = 30
TTEST_QUANTILE = 0.99


class BacktestError(SpecperfError):
    """Bad input: one line naming the file, the row and the column."""


@dataclass(frozen=True)
class Row:
    """One night of the series."""

    index: int  # the run's number: the run column's value, else the row's position (0, 1, ...)
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
    change_point: int | None  # the run tonight's regression (or the change in force) began at
    restart: bool  # the plugin would have asked for a second server start
    status: RunStatus | None  # how the night entered the history (None: it started a new segment)
    level_runs: tuple[int, ...] = ()  # the runs the level rested on (run numbers)
    spread_runs: int = 0  # how many runs the spread rested on
    plain: dict[str, bool] = field(default_factory=dict)  # --compare: other gates' "red?" on this night


class Series(NamedTuple):
    """A CSV file's nights: the value column's name, the rows with a value, and the runs without one."""

    column: str
    rows: list[Row]
    missing: tuple[int, ...] = ()  # runs whose value cell is empty: no night to judge, reported and skipped


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
    run: str | None = None,
    allow_gaps: bool = False,
) -> Series:
    """The nights of a CSV file with a header; BacktestError names the file, the row and the column of
    anything it cannot read. The run column (`run`, else a column named "run" when there is one) must
    count up with no duplicate, no step back and — unless `allow_gaps` — no gap: a replay of rows out
    of order judges each night against the wrong past. A row whose value is empty is a night that was
    not measured (a CI job that failed, a node that was down): it is skipped and named in `missing`,
    and it leaves no gap in the run numbers."""
    try:
        with path.open(newline="", encoding="utf-8") as handle:
            reader = csv.DictReader(handle)
            header = list(reader.fieldnames or [])
            records = list(reader)
    except (OSError, UnicodeDecodeError, csv.Error) as exc:
        raise BacktestError(f"{path}: cannot read it as CSV ({exc})") from None
    if not header:
        raise BacktestError(f"{path}: no header row; the first line must name the columns")
    for option, column in (
        ("--value", value),
        ("--commit", commit),
        ("--time", time),
        ("--rounds", rounds),
        ("--update", update),
        ("--run", run),
    ):
        if column is not None and column not in header:
            raise BacktestError(f"{path}: no column {column!r} ({option}); the columns are {', '.join(header)}")
    if len(records) < 2:
        raise BacktestError(f"{path}: {len(records)} row(s); a backtest needs at least 2")
    run = run if run is not None else ("run" if "run" in header else None)
    numbers = _run_numbers(path, records, run, allow_gaps)
    named = {c for c in (commit, time, rounds, update, run) if c is not None}
    column = value if value is not None else _value_column(path, header, records, named)
    rows, missing = [], []
    for i, (number, record) in enumerate(zip(numbers, records, strict=True)):
        samples = _samples(path, i, record, column, rounds)
        if samples is None:
            missing.append(number)
            continue
        rows.append(Row(number, samples, _cell(record, time), _cell(record, commit), _flag(path, i, record, update)))
    if len(rows) < 2:
        raise BacktestError(f"{path}: {len(rows)} row(s) with a value in {column!r}; a backtest needs at least 2")
    return Series(column, rows, tuple(missing))


def _run_numbers(path: Path, records: list[dict[str, str]], column: str | None, allow_gaps: bool) -> list[int]:
    """Each row's run number, checked: duplicates, steps back and (unless allowed) gaps name their rows."""
    if column is None:
        return list(range(len(records)))
    numbers = []
    for i, record in enumerate(records):
        text = (record.get(column) or "").strip()
        try:
            numbers.append(int(text))
        except ValueError:
            raise BacktestError(f"{path}: row {i + 2}, column {column!r}: {text!r} is not a run number") from None
    problems = []
    for i in range(1, len(numbers)):
        before, now = numbers[i - 1], numbers[i]
        where = f"rows {i + 1} and {i + 2}"  # row 1 is the header
        if now == before:
            problems.append(f"{where} are both run {now}")
        elif now < before:
            problems.append(f"{where} go back from run {before} to {now}")
        elif now != before + 1 and not allow_gaps:
            problems.append(f"{where} skip from run {before} to {now}")
    if problems:
        more = f" (and {len(problems) - 3} more)" if len(problems) > 3 else ""
        hint = "; rows must be oldest first, one per run" + (
            "" if allow_gaps else " (--allow-gaps accepts missing runs)"
        )
        raise BacktestError(f"{path}: column {column!r}: {'; '.join(problems[:3])}{more}{hint}")
    return numbers


def _value_column(path: Path, header: list[str], records: list[dict[str, str]], named: set[str]) -> str:
    """The only mostly numeric column besides the named ones and a run counter: a bad cell in it is then
    named by its row (`_samples`), as with --value, not taken as a sign that the column is text."""
    numeric = [c for c in header if c not in named and _mostly_numbers(records, c)]
    values = [c for c in numeric if not _counter(records, c)]
    if len(values) == 1:
        return values[0]
    if not values:
        raise BacktestError(
            f"{path}: no numeric column to replay besides {', '.join(sorted(named)) or 'a run counter'}"
            f"; the columns are {', '.join(header)} (choose one with --value)"
        )
    raise BacktestError(f"{path}: several numeric columns ({', '.join(values)}); choose one with --value")


def _mostly_numbers(records: list[dict[str, str]], column: str) -> bool:
    """At least 9 filled cells in 10 are numbers (and at least 2 of them): a column of values with a typo.
    Empty cells are nights without a value, not text."""
    filled = [r for r in records if (r.get(column) or "").strip()]
    numbers = sum(_number(r.get(column)) is not None for r in filled)
    return numbers >= 2 and numbers >= 0.9 * len(filled)


def _counter(records: list[dict[str, str]], column: str) -> bool:
    numbers = [_number(r.get(column)) for r in records]
    return numbers in ([float(i) for i in range(len(records))], [float(i + 1) for i in range(len(records))])


def _number(text: str | None) -> float | None:
    try:
        value = float(text) if text is not None and text.strip() else None
    except ValueError:
        return None
    return value if value is not None and math.isfinite(value) else None


def _samples(
    path: Path, index: int, record: dict[str, str], column: str, rounds: str | None
) -> tuple[float, ...] | None:
    """The row's per-round values (`rounds`, separated by ';'), else its one value; positive numbers.
    None when both cells are empty: a night without a value."""
    if not (record.get(column) or "").strip() and not (rounds is not None and (record.get(rounds) or "").strip()):
        return None
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


def replay(rows: Sequence[Row], tolerance: Tolerance, *, history: int = 90, compare: bool = False) -> Replay:
    """Night by night: the segment's runs before it (kept as the store keeps them), then
    `judge_night` on its one start, then stored with its mark. `compare`: also the plain gates."""
    result = Replay()
    past: list[tuple[Row, PastRun]] = []
    earlier: list[PastRun] = []  # the segment before the current one: the key's spread until this one has its own
    for row in rows:
        if row.update or not past:  # a new segment: this night is the new normal, nothing to compare with
            earlier = [p for _, p in past] or earlier
            past = [(row, PastRun(row.samples, RunStatus.ACCEPTED, str(row.index)))]
            result.nights.append(Night(row, Verdict.NEW, None, None, False, None))
            continue
        verdict = judge_night([row.samples], [p for _, p in past], tolerance, rounds=len(row.samples), earlier=earlier)
        outcome = verdict_of(
            missed=verdict.decision is Decision.MISSED,
            incomparable=False,
            suspect=verdict.decision is Decision.SUSPECT,
            inconclusive=verdict.decision is Decision.INCONCLUSIVE,
            improved=verdict.improved,
            new=False,
        )
        status = stored_status(verdict.decision)
        point = verdict.since if verdict.since is not None else verdict.change
        rows_in_series = [r.index for r, _ in past] + [row.index]
        at = rows_in_series[point.index] if point is not None else None
        restart = verdict.decision in (Decision.SUSPECT, Decision.MISSED)
        level = verdict.level
        level_runs = tuple(rows_in_series[i] for i in level.level_runs) if level is not None else ()
        spread = len(level.spread_runs) if level is not None else 0
        plain = plain_gates([_mean(r.samples) for r, _ in past], _mean(row.samples), tolerance) if compare else {}
        result.nights.append(Night(row, outcome, verdict, at, restart, status, level_runs, spread, plain))
        past = kept_runs(
            [*past, (row, PastRun(row.samples, status, str(row.index)))],
            history,
            night_of=lambda p: p[1].night,
            counted=lambda p: p[1].status.counted,
        )
    return result


def plain_gates(past: Sequence[float], tonight: float, tolerance: Tolerance) -> dict[str, bool]:
    """Two plain gates on the same night, for `--compare`: a t-test (red beyond mean ± t_0.99(n-1) ·
    s · sqrt(1 + 1/n) of the newest `TTEST_RUNS` runs of the segment, every run kept, on the bad side)
    and a fixed band (red beyond the tolerance from the same runs' mean)."""
    window = list(past[-TTEST_RUNS:])
    n = len(window)
    mean = statistics.fmean(window)
    lower = tolerance.direction is Direction.HIGHER_IS_BETTER
    bound = mean * tolerance.regression_bound
    band = tonight < bound if lower else tonight > bound
    if n < 2:
        return {"t-test": False, "band": band}
    reach = float(stdtrit(n - 1, TTEST_QUANTILE)) * statistics.stdev(window) * math.sqrt(1.0 + 1.0 / n)
    return {"t-test": tonight < mean - reach if lower else tonight > mean + reach, "band": band}


def _mean(samples: Sequence[float]) -> float:
    return math.fsum(samples) / len(samples)


# --- output ------------------------------------------------------------------------------------------


def night_line(night: Night) -> str:
    row = night.row
    when = " ".join(p for p in (row.time, (row.commit or "")[:7]) if p)
    value = f"{statistics.fmean(row.samples):.6g}"
    v = night.verdict
    plain = "  ".join(f"{name} {'red' if red else '-'}" for name, red in night.plain.items())
    plain = f"{plain:<22} " if night.plain else ""
    if v is None or v.comparison is None:
        return f"{row.index:>5}  {when:<28} {value:>12}  {'':<28} {plain}NEW (the level starts here)"
    shown = change_percent(v.comparison.ratio)
    notes = []
    if night.outcome in (Verdict.REGRESSION, Verdict.SUSPECT) and night.change_point is not None:
        notes.append("since tonight" if night.change_point == row.index else f"since run {night.change_point}")
        notes.append(compared_with(night))
    elif v.change is not None and night.change_point is not None:
        notes.append(f"a change nobody accepted since run {night.change_point}: {_size(v.change)}")
    elif v.back_since is not None:
        notes.append("back to the accepted level")
    if v.by_change:
        notes.append("the change as a whole is beyond the tolerance")
    notes += [f"rejected an outlier ({r.ratio - 1:+.1%})" for r in v.comparison.rejected]
    if night.restart:
        notes.append("a second start would be asked for")
    return f"{row.index:>5}  {when:<28} {value:>12}  {shown:<28} {plain}{night.outcome.value:<12} {'; '.join(notes)}"


def compared_with(night: Night) -> str:
    """What a flagged night was held against: 'level 23650 of runs 0-14 (14 runs), spread 0.6% from 14 runs'."""
    v = night.verdict
    if v is None or v.comparison is None or not night.level_runs:
        return ""
    c = v.comparison
    first, last = night.level_runs[0], night.level_runs[-1]
    return (
        f"against level {c.level:.6g} of runs {first}-{last} ({c.runs} runs), "
        f"run-to-run CV {c.run_cv:.1%} from {night.spread_runs} runs"
    )


def _size(change: ChangePoint) -> str:
    return change_size(change.change, change.kind, change.per_run)


def summary(result: Replay, tolerance: Tolerance) -> dict[str, Any]:
    """Counts per outcome, restarts asked for, and what the gate could see with its last history."""
    judged = [n for n in result.nights if n.verdict is not None and n.verdict.comparison is not None]
    last = judged[-1].verdict if judged else None
    comparison = last.comparison if last is not None else None
    low = spread_lower_bound(comparison) if comparison is not None else None
    groups = bimodal(list(last.values[:-1]), share=0.15) if last is not None else None
    plain = (
        {name: sum(n.plain.get(name, False) for n in result.nights) for name in ("t-test", "band")}
        if any(n.plain for n in result.nights)
        else None
    )
    return {
        "nights": len(result.nights),
        "outcomes": dict(sorted(result.counts().items())),
        "restarts": sum(n.restart for n in result.nights),
        "run_to_run_cv": comparison.run_cv if comparison is not None else None,
        "detectable_change": None if last is None or last.detectable is None else last.detectable - 1.0,
        "cannot_see_tolerance": low is not None and low > tolerance.max_regression / BLIND_RATIO,
        "bimodal": list(groups) if groups is not None else None,
        "plain_red": plain,
        "last": result.nights[-1].outcome.value if result.nights else None,
    }


def describe_summary(data: dict[str, Any], tolerance: Tolerance, missing: Sequence[int] = ()) -> list[str]:
    counts = ", ".join(f"{k} {v}" for k, v in data["outcomes"].items())
    lines = [f"{data['nights']} nights: {counts}; {data['restarts']} second starts would have been asked for"]
    if missing:
        runs = ", ".join(str(run) for run in missing)
        lines.append(f"{len(missing)} night(s) without a value (an empty cell), skipped: run(s) {runs}")
    if data.get("plain_red") is not None:
        red = data["plain_red"]
        lines.append(
            f"the plain gates on the same nights: a t-test (99%, newest {TTEST_RUNS} runs) red on "
            f"{red['t-test']}, a fixed ±{tolerance.max_regression:.0%} band red on {red['band']}"
        )
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
        lines.append(
            f"its run means fall into two alternating groups ({low:.6g} and {high:.6g}): the spread holds both"
        )
    return lines


def to_json(
    result: Replay, column: str, path: Path, tolerance: Tolerance, missing: Sequence[int] = ()
) -> dict[str, Any]:
    nights = []
    for night in result.nights:
        v = night.verdict
        ratio = v.comparison.ratio if v is not None and v.comparison is not None else None
        nights.append(
            {
                "run": night.row.index,
                "time": night.row.time,
                "commit": night.row.commit,
                "value": statistics.fmean(night.row.samples),
                "outcome": night.outcome.value,
                "ratio": None if ratio is None else {"value": ratio.value, "low": ratio.low, "high": ratio.high},
                "change_point": night.change_point,
                "change": None if v is None or v.change is None else _size(v.change),
                "back_to_level": v is not None and v.back_since is not None,
                "level": None
                if v is None or v.comparison is None
                else {
                    "value": v.comparison.level,
                    "runs": list(night.level_runs),
                    "spread_runs": night.spread_runs,
                    "run_to_run_cv": v.comparison.run_cv,
                },
                "restart": night.restart,
                "stored": None if night.status is None else night.status.value,
                "rejected": [r.ratio for r in v.comparison.rejected] if v is not None and v.comparison else [],
                "plain": night.plain or None,
            }
        )
    return {
        "file": str(path),
        "value": column,
        "tolerance": tolerance.max_regression,
        "direction": tolerance.direction.value,
        "nights": nights,
        "missing": list(missing),
        "summary": summary(result, tolerance),
    }
