"""A key's stored history as series of its key metrics, tonight appended, and the changes in them.

Four series per (server, workload, level): throughput, TPOT, accept length and, for a speculative
config, its speedup over the reference. A speedup needs both servers' runs of the *same session*
(one night's pair of server starts): runs are paired by the session id their provenance records
(store/records.py, Provenance.session), never by date, so two sessions of one night are not mixed up. Runs
stored before session ids existed have no partner, and no speedup in the series.

Change points (verdict/changes.py) are searched in the current segment's runs with tonight
appended: that is the series the verdict is about. `specperf history` and the plots show every
segment. Pure: no pytest, no I/O.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

from pytest_specperf.measure.records import Measurement, MeasurementKey
from pytest_specperf.store.records import StoredBaseline, StoredRun
from pytest_specperf.verdict.changes import ChangePoint, change_percent, change_size, newest_change
from pytest_specperf.verdict.history import SpeedupSpread
from pytest_specperf.verdict.stats import Estimate, mean_estimate, ratio_estimate

#: The key series of a history, with the name a report uses for each.
KEY_METRICS: Final = {
    "output_throughput": "throughput",
    "mean_tpot_ms": "TPOT",
    "accept_length": "accept length",
    "speedup": "speedup",
}


@dataclass(frozen=True)
class Point:
    """One run of a series: its value with the interval over its rounds, when, which commit, which segment."""

    value: Estimate
    created: str | None  # ISO time the run was stored; None for tonight (not stored yet, or not at all)
    commit: str | None
    segment: int | None  # None for tonight
    tonight: bool = False
    status: str | None = None  # how the stored run counts (accepted, suspect, refused); None for tonight


@dataclass(frozen=True)
class HistoryChange:
    """A change in a key's series: a step (the runs from `index` on against the runs before it) or a
    drift (a straight line through the series, from `index` on)."""

    key: MeasurementKey
    metric: str
    index: int  # first run after the change, in the series (current segment, tonight last)
    runs: int  # length of that series
    created: str | None  # when the first run after the change was stored; None when it is tonight
    commit: str | None
    change: Estimate  # step: ratio of means, after / before; drift: fitted last run / fitted first one
    p_value: float
    kind: str = "step"
    per_run: float | None = None  # a drift's change per run, as a ratio

    @classmethod
    def of(cls, key: MeasurementKey, metric: str, point: ChangePoint, points: Sequence[Point]) -> HistoryChange:
        """The change point `point` of the series `points` (tonight last), with its first run's provenance."""
        first = points[point.index]
        return cls(
            key,
            metric,
            point.index,
            len(points),
            first.created,
            first.commit,
            point.change,
            point.p_value,
            point.kind,
            point.per_run,
        )

    @property
    def tonight(self) -> bool:
        return self.index == self.runs - 1

    @property
    def percent(self) -> str:
        return change_percent(self.change)

    @property
    def sentence(self) -> str:
        """'eagle3-2step chat c1 throughput -8.1% [-9.5, -6.7] since the run of 2026-11-12 (commit abc1234)';
        a drift: '... throughput drifting -0.30% per run, -9.0% [-11.2, -6.8] since the run of ...'."""
        k = self.key
        name = KEY_METRICS.get(self.metric, self.metric)
        where = f"{k.server} {k.workload} c{k.concurrency} {name} {change_size(self.change, self.kind, self.per_run)}"
        if self.created is None:
            return f"{where} since tonight"
        commit = f"commit {self.commit[:7]}" if self.commit else "no git commit"
        return f"{where} since the run of {self.created[:10]} ({commit})"


def paired_runs(runs: Sequence[StoredRun], reference_runs: Sequence[StoredRun]) -> list[tuple[StoredRun, StoredRun]]:
    """(run, reference run) stored by the same session, oldest first; runs without a session id pair with none."""
    by_session = {r.provenance.session: r for r in reference_runs if r.provenance.session}
    return [(r, by_session[r.provenance.session]) for r in runs if r.provenance.session in by_session]


def _throughputs(run: StoredRun) -> list[float]:
    return run.measurement.samples("output_throughput")


def speedup_spread(
    baseline: StoredBaseline | None, reference: StoredBaseline | None
) -> tuple[SpeedupSpread | None, int]:
    """The recorded speedups' start-to-start spread (None below history.MIN_RUNS pairs) and the
    number of pairs: the current segments' runs of both servers stored by the same sessions."""
    if baseline is None or reference is None:
        return None, 0
    pairs = [
        (_throughputs(s), _throughputs(r))
        for s, r in paired_runs(baseline.current_segment, reference.current_segment)
        if _throughputs(s) and _throughputs(r) and min(_throughputs(s) + _throughputs(r)) > 0.0
    ]
    return SpeedupSpread.of(pairs), len(pairs)


def _value(measurement: Measurement, metric: str, reference: Measurement | None) -> Estimate | None:
    if metric == "speedup":
        if reference is None:
            return None
        x, y = measurement.samples("output_throughput"), reference.samples("output_throughput")
        return ratio_estimate(x, y) if x and y else None
    samples = measurement.samples(metric)
    return mean_estimate(samples) if samples and min(samples) > 0.0 else None


def series(
    tonight: Measurement | None,
    baseline: StoredBaseline | None,
    metric: str,
    *,
    reference: Measurement | None = None,
    reference_baseline: StoredBaseline | None = None,
    whole: bool = False,
) -> list[Point]:
    """The runs of the current segment (every segment with `whole`) with a value of `metric`, oldest
    first, then tonight. A speedup needs the reference's run of the same session (and tonight's
    reference measurement for tonight's point)."""
    runs: Sequence[StoredRun] = () if baseline is None else (baseline.runs if whole else baseline.current_segment)
    points = []
    if metric == "speedup":
        partners = paired_runs(runs, reference_baseline.runs if reference_baseline is not None else ())
        pairs: Sequence[tuple[StoredRun, StoredRun | None]] = partners
    else:
        pairs = [(r, None) for r in runs]
    for run, partner in pairs:
        value = _value(run.measurement, metric, partner.measurement if partner is not None else None)
        if value is not None:
            p = run.provenance
            points.append(Point(value, p.created, p.git_commit, run.segment, status=run.status))
    if tonight is not None:
        value = _value(tonight, metric, reference)
        if value is not None:
            points.append(Point(value, None, None, None, tonight=True))
    return points


def history_changes(
    tonight: Measurement,
    baseline: StoredBaseline,
    metrics: Sequence[str],
    *,
    reference: Measurement | None = None,
    reference_baseline: StoredBaseline | None = None,
    searches: int = 1,
) -> list[HistoryChange]:
    """The change in force in each of `metrics`' series (current segment, every run, tonight
    appended), for the series no nightly check judges (TPOT, speedup): reported, never failing."""
    found = []
    for metric in metrics:
        points = series(tonight, baseline, metric, reference=reference, reference_baseline=reference_baseline)
        change = newest_change([p.value.value for p in points], searches=searches)
        if change is not None:
            found.append(HistoryChange.of(tonight.key, metric, change, points))
    return found
