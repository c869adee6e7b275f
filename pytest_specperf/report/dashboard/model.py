"""What the dashboard shows of a store, computed by the verdict engine the tests run.

Nothing here is new statistics: each number comes from the function that makes it for a night or
for `specperf history` — a run's value and interval from `trends.series`, rejected runs from
`history.reject_outliers` over a segment's counted runs (as `specperf history` marks them), change
points and drifts from `changes.change_points` per segment and the one in force from what the newest
night's verdict names (`standing.change_in_force`), their "since" text from
`trends.HistoryChange.sentence`, the level the newest night was held against and what the gate can
see from `standing.judge_newest` (the newest night against the runs before it, as its session judged
it) and `analysis.blind_spots`, and
fingerprint drift from `fingerprint.diff`. Pure: no I/O, no HTML.
"""

from __future__ import annotations

import dataclasses
import functools
import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from pytest_specperf.measure.fingerprint import Fingerprint
from pytest_specperf.measure.records import METRICS, POSITIONS_LABEL, POSITIONS_MEANING, MeasurementKey
from pytest_specperf.report.analysis import blind_spots
from pytest_specperf.store.file import verdict_window
from pytest_specperf.store.records import StoredBaseline, StoredRun, is_simulated, reference_history
from pytest_specperf.verdict.changes import change_points, newest_change
from pytest_specperf.verdict.checks import JUDGED_METRICS, Limits, past_runs
from pytest_specperf.verdict.drift import diff
from pytest_specperf.verdict.history import reject_outliers
from pytest_specperf.verdict.nightly import NightVerdict
from pytest_specperf.verdict.standing import (
    ChangeInForce,
    change_in_force,
    explain_newest,
    judge_newest,
    newest_night,
)
from pytest_specperf.verdict.stats import Estimate
from pytest_specperf.verdict.trends import KEY_METRICS, HistoryChange, Point, paired_runs, series
from pytest_specperf.verdict.verdicts import Verdict, verdict_of

#: The two layers a store keeps apart (store/records.py): a real engine's runs and the simulator's.
ENGINE, SIMULATOR = "engine", "sim"
LAYER_TITLES = {ENGINE: "Measured on the engine", SIMULATOR: "Simulator (pytest_specperf.sim)"}
#: What a stored run's status means, and the night's verdict it records.
STATUS_TEXT = {
    "accepted": "accepted: counts in the level and the spread",
    "suspect": "suspect (a SUSPECT night: beyond the tolerance, not credibly): kept, out of the level and the spread",
    "refused": "refused (a REGRESSION night): kept, out of the level and the spread",
}
UNITS = {"speedup": "x"}
#: Runs a store may hold for every key's panel to share one page (`suite.html`, about 2 KB a run);
#: beyond them each key gets a page of its own, so no page a browser opens grows with the store.
PAGED_RUNS = 2500


@dataclass(frozen=True)
class RunMark:
    """One run of a key as one metric's chart shows it."""

    run: int  # position in the key's history, oldest 0
    value: Estimate
    point: Point  # what trends.series made of it (created, commit, segment, status)
    rejected: str | None = None  # why the run is left out of the level and the spread as an outlier


@dataclass(frozen=True)
class ChangeMark:
    """A change point of one metric's series within a segment: a step from `run` on, or a drift
    over `run` .. `end`."""

    run: int
    end: int
    kind: str
    change: Estimate
    per_run: float | None
    sentence: str
    in_force: bool  # the newest change of the current segment: what a night would act on


@dataclass(frozen=True)
class Chart:
    """One metric of one key: every run with a value, its change points, the level the newest night was
    held against (a judged metric's, when there was one)."""

    metric: str
    points: tuple[RunMark, ...]
    changes: tuple[ChangeMark, ...] = ()
    level: float | None = None

    @property
    def name(self) -> str:
        return KEY_METRICS[self.metric]

    @property
    def unit(self) -> str:
        return UNITS.get(self.metric) or METRICS[self.metric].unit

    @property
    def title(self) -> str:
        return f"{self.name} ({self.unit})"

    @property
    def higher_is_better(self) -> bool:
        return self.metric == "speedup" or METRICS[self.metric].higher_is_better


@dataclass(frozen=True)
class Gate:
    """The newest night of a key's throughput against the runs before it: what it was judged against
    and what the gate can see. `night` is None when there is nothing to judge it against (`why`)."""

    night: NightVerdict | None
    why: str | None = None
    blind: tuple[str, ...] = ()
    #: why the throughput moved, when the newest night lies beyond the tolerance (verdict/explain.py)
    explanation: str | None = None
    #: the newest night's acceptance by draft position, beside the level's (`acceptance_note`)
    positions: str | None = None


@dataclass(frozen=True)
class KeyView:
    """One (server, workload, level) of one layer: its runs, charts and gate."""

    key: MeasurementKey
    layer: str
    path: Path
    runs: tuple[StoredRun, ...]
    newest: frozenset[int]  # the runs of the newest night (a second server start adds one)
    charts: tuple[Chart, ...]
    gate: Gate
    drift: tuple[tuple[str, ...], ...]  # per run: fingerprint changes since the run before
    reference: str | None = None  # the server the speedup is over
    #: the runs of the history when `runs` holds only the newest (a key's summary row, made where its page was)
    total_runs: int | None = None

    @property
    def run_count(self) -> int:
        """The runs of the key's history."""
        return len(self.runs) if self.total_runs is None else self.total_runs

    @property
    def status(self) -> str:
        return self.runs[-1].status

    @property
    def anchor(self) -> str:
        return anchor(self.layer, self.key)

    @property
    def verdict(self) -> Verdict:
        """The newest night's verdict in the terminal's words (`verdict_of`): what its session stored
        (refused: REGRESSION, suspect: SUSPECT), else IMPROVED or PASS as the gate judged it, NEW with
        nothing to judge it against."""
        night = self.gate.night
        return verdict_of(
            missed=self.status == "refused",
            incomparable=False,
            suspect=self.status == "suspect",
            inconclusive=False,
            improved=night is not None and night.improved,
            new=night is None,
        )

    @property
    def segments(self) -> list[tuple[int, int, int]]:
        """(segment number, first run, last run), oldest first."""
        found: list[tuple[int, int, int]] = []
        for index, run in enumerate(self.runs):
            if found and found[-1][0] == run.segment:
                found[-1] = (run.segment, found[-1][1], index)
            else:
                found.append((run.segment, index, index))
        return found

    def chart(self, metric: str) -> Chart | None:
        return next((c for c in self.charts if c.metric == metric), None)

    @property
    def change_in_force(self) -> ChangeMark | None:
        """The throughput change in force, else any other metric's."""
        marks = [m for c in self.charts for m in c.changes if m.in_force]
        return marks[0] if marks else None


@dataclass(frozen=True)
class SiteHeader:
    """What every page says of the whole site under its title: a key's page needs it made before the
    other keys' pages are (each process of a large store writes its own keys' pages)."""

    title: str
    location: str
    keys: int
    newest_run: str
    limits: Limits


@dataclass(frozen=True)
class Dashboard:
    """Every key of a store. Nothing in it depends on when it was made: the same histories give the same
    pages, so publishing them again without a new run commits nothing."""

    title: str
    location: str
    keys: tuple[KeyView, ...]
    limits: Limits

    def layer(self, layer: str) -> list[KeyView]:
        return [k for k in self.keys if k.layer == layer]

    @property
    def layers(self) -> list[str]:
        return [layer for layer in (ENGINE, SIMULATOR) if self.layer(layer)]

    @property
    def regressed(self) -> list[KeyView]:
        return [k for k in self.keys if k.status == "refused"]

    @property
    def suspect(self) -> list[KeyView]:
        return [k for k in self.keys if k.status == "suspect"]

    @property
    def blind(self) -> list[KeyView]:
        return [k for k in self.keys if k.gate.blind]

    @functools.cached_property
    def newest_run(self) -> str:
        return max(k.runs[-1].provenance.created for k in self.keys)

    @property
    def header(self) -> SiteHeader:
        return SiteHeader(self.title, self.location, len(self.keys), self.newest_run, self.limits)

    @property
    def paged(self) -> bool:
        """Whether each key's panel gets a page of its own (more than `PAGED_RUNS` runs in all)."""
        return sum(k.run_count for k in self.keys) > PAGED_RUNS


def anchor(layer: str, key: MeasurementKey) -> str:
    """A stable HTML id for a key's panel."""
    text = f"{layer}-{key.server}-{key.workload}-c{key.concurrency}"
    return "".join(ch if ch.isalnum() or ch in "-_" else "_" for ch in text)


def build_dashboard(entries: Sequence[StoredBaseline], *, title: str, location: str, limits: Limits) -> Dashboard:
    """Every stored history of a store, as the dashboard shows it (engine's layer first)."""
    views = [key_view(entry, entries, limits) for entry in entries if entry.runs]
    return assemble(views, title=title, location=location, limits=limits)


def assemble(views: Sequence[KeyView], *, title: str, location: str, limits: Limits) -> Dashboard:
    """The keys' views as one dashboard, in its order (engine's layer first, each reference first)."""
    ordered = sorted(views, key=lambda v: (v.layer != ENGINE, not v.runs[-1].measurement.is_reference, *_order(v.key)))
    return Dashboard(title, location, tuple(ordered), limits)


def _order(key: MeasurementKey) -> tuple[str, str, int]:
    return key.server, key.workload, key.concurrency


def layer_of(entry: StoredBaseline) -> str:
    return SIMULATOR if is_simulated(entry.fingerprint) else ENGINE


def key_view(entry: StoredBaseline, stored: Sequence[StoredBaseline], limits: Limits) -> KeyView:
    """One key as the dashboard shows it: every run charted, the newest night judged on the window its
    session read (`verdict_window`: the level reads no further back, so a year of nights costs what
    90 do and gives the same verdict)."""
    reference = reference_history(entry, stored)
    window = verdict_window(entry)
    nights = {metric: judge_newest(window, metric, limits) for metric in JUDGED_METRICS}
    position = {id(run): index for index, run in enumerate(entry.runs)}
    charts = []
    for metric in KEY_METRICS:
        night = nights.get(metric)
        level = night.comparison.level if night and night.comparison else None
        in_force = _in_force(window, metric, night, position) if metric in JUDGED_METRICS else None
        chart = _chart(entry, metric, reference, level, in_force)
        if chart.points:
            charts.append(chart)
    first = len(entry.runs) - len(newest_night(entry.runs))
    return KeyView(
        key=entry.measurement.key,
        layer=layer_of(entry),
        path=entry.path,
        runs=entry.runs,
        newest=frozenset(range(first, len(entry.runs))),
        charts=tuple(charts),
        gate=gate(window, nights["output_throughput"], limits, reference and verdict_window(reference)),
        drift=_drift(entry.runs),
        reference=reference.measurement.key.server if reference is not None else None,
    )


def _in_force(
    window: StoredBaseline, metric: str, night: NightVerdict | None, position: dict[int, int]
) -> ChangeInForce | None:
    """The change the newest night names (`change_in_force` over the verdict's window), placed in the
    whole history (`position`: a run's index there, by identity)."""
    found = change_in_force(window, metric, night)
    if found is None:
        return None
    return dataclasses.replace(found, run=position[id(window.runs[found.run])])


def _chart(
    entry: StoredBaseline,
    metric: str,
    reference: StoredBaseline | None,
    level: float | None,
    in_force: ChangeInForce | None,
) -> Chart:
    marks = [RunMark(index, point.value, point) for index, point in _points(entry, metric, reference)]
    if metric in JUDGED_METRICS:
        marks = _with_rejections(marks)
    return Chart(metric, tuple(marks), tuple(_changes(entry, metric, marks, in_force)), level)


def _points(entry: StoredBaseline, metric: str, reference: StoredBaseline | None) -> list[tuple[int, Point]]:
    """Each run's point of `metric` by `trends.series` (its value and interval exactly as a night's report
    has them), with the run's index: the whole series at once when every run (every run paired with its
    session's reference run, for a speedup) has a value, else run by run."""
    position = {id(run): index for index, run in enumerate(entry.runs)}
    runs = entry.runs
    if metric == "speedup":
        runs = tuple(run for run, _ in paired_runs(entry.runs, reference.runs if reference else ()))
    whole = series(None, entry, metric, reference_baseline=reference, whole=True)
    if len(whole) == len(runs):
        return [(position[id(run)], point) for run, point in zip(runs, whole, strict=True)]
    partners = {r.provenance.session: r for r in reference.runs if r.provenance.session} if reference else {}
    found = []
    for run in runs:
        partner = partners.get(run.provenance.session or "")
        paired = dataclasses.replace(reference, runs=(partner,) if partner else ()) if reference else None
        points = series(None, dataclasses.replace(entry, runs=(run,)), metric, reference_baseline=paired, whole=True)
        found += [(position[id(run)], point) for point in points]
    return found


def _by_segment(marks: Sequence[RunMark]) -> list[list[RunMark]]:
    groups: list[list[RunMark]] = []
    for mark in marks:
        if groups and groups[-1][0].point.segment == mark.point.segment:
            groups[-1].append(mark)
        else:
            groups.append([mark])
    return groups


def _with_rejections(marks: list[RunMark]) -> list[RunMark]:
    """Counted runs that `reject_outliers` leaves out of their segment's level and spread, as
    `specperf history` marks them."""
    out = {}
    for group in _by_segment(marks):
        counted = [m for m in group if m.point.status == "accepted"]
        levels = [math.log(m.value.value) for m in counted if m.value.value > 0.0]
        if len(levels) != len(counted):
            continue
        for rejection in reject_outliers(levels):
            mark = counted[rejection.index]
            out[mark.run] = f"rejected as an outlier: {rejection.describe()}; kept, out of the level and the spread"
    return [dataclasses.replace(m, rejected=out[m.run]) if m.run in out else m for m in marks]


def _changes(
    entry: StoredBaseline, metric: str, marks: Sequence[RunMark], in_force: ChangeInForce | None
) -> list[ChangeMark]:
    """Change points of each segment's series (as `specperf history` finds them). The one in force is
    what the newest night's verdict names for a judged metric (`standing.change_in_force`), drawn even
    where the per-segment search does not find it; for the other metrics, the newest change of the
    newest segment (as a night's report finds it for them)."""
    found = []
    for group in _by_segment(marks):
        values = [m.value.value for m in group]
        points = [m.point for m in group]
        current = group[-1].point.segment == entry.runs[-1].segment
        newest = newest_change(values) if current and metric not in JUDGED_METRICS else None
        for point in change_points(values):
            sentence = HistoryChange.of(entry.measurement.key, metric, point, points).sentence
            run = group[point.index].run
            force = newest is not None and (newest.index, newest.kind) == (point.index, point.kind)
            if in_force is not None and (in_force.run, in_force.change.kind) == (run, point.kind):
                continue  # the verdict's own mark, below
            found.append(ChangeMark(run, group[-1].run, point.kind, point.change, point.per_run, sentence, force))
    if in_force is not None:
        change = in_force.change
        found.append(
            ChangeMark(
                in_force.run,
                len(entry.runs) - 1,
                change.kind,
                change.change,
                change.per_run,
                change.sentence,
                True,
            )
        )
    return sorted(found, key=lambda mark: mark.run)


def gate(
    entry: StoredBaseline, night: NightVerdict | None, limits: Limits, reference: StoredBaseline | None = None
) -> Gate:
    """What the throughput gate made of the newest night (`judge_newest`), what it cannot see, and why
    the key moved when it lies beyond the tolerance."""
    if night is None:
        runs = entry.runs
        newest = newest_night(runs)
        if len(newest) == len(runs):
            why = "one night recorded: nothing to judge it against yet"
        elif runs[len(runs) - len(newest) - 1].segment != newest[0].segment:
            why = "the newest night starts a new segment (--specperf-update): nothing to judge it against yet"
        else:
            why = "no counted run before the newest night"
        return Gate(None, why, positions=acceptance_note(entry, None))
    why_moved = explain_newest(entry, night, reference)
    sentence = why_moved.sentence() if why_moved is not None else None
    blind = tuple(blind_spots(night, limits.max_regression))
    return Gate(night, None, blind, sentence, acceptance_note(entry, night))


def acceptance_note(entry: StoredBaseline, night: NightVerdict | None) -> str | None:
    """The newest night's acceptance by draft position, and the level's it was judged against, in the
    words and the definition of the terminal report (docs/metrics.md); None for a plain server."""
    runs = entry.runs
    newest = newest_night(runs)
    now = _mean_shares([r.measurement.acceptance_per_position for r in newest])
    if now is None:
        return None
    text = f"{POSITIONS_LABEL} ({POSITIONS_MEANING}): newest night {_shares_text(now)}"
    if night is not None and night.level is not None:
        before = dataclasses.replace(entry, runs=runs[: len(runs) - len(newest)])
        judged, _ = past_runs(before, "output_throughput")
        level_runs = [judged[i] for i in night.level.level_runs if i < len(judged)]
        level = _mean_shares([r.measurement.acceptance_per_position for r in level_runs])
        if level is not None:
            text += f"; its level {_shares_text(level)}"
    return text


def _mean_shares(found: Sequence[tuple[float, ...] | None]) -> tuple[float, ...] | None:
    """Each position's mean over the runs that have acceptance by position (the positions all of them have)."""
    shares = [s for s in found if s]
    if not shares:
        return None
    depth = min(len(s) for s in shares)
    return tuple(math.fsum(s[i] for s in shares) / len(shares) for i in range(depth))


def _shares_text(shares: Sequence[float]) -> str:
    return " ".join(f"{a:.2f}" for a in shares)


def _drift(runs: Sequence[StoredRun]) -> tuple[tuple[str, ...], ...]:
    """Each run's fingerprint changes since the run before it (the first run has none to compare). Nights
    share a fingerprint (a store keeps each once): an equal one is no drift, and each distinct one is
    redacted once."""
    redacted: dict[int, Fingerprint] = {}

    def clean(fingerprint: Fingerprint) -> Fingerprint:
        if id(fingerprint) not in redacted:
            redacted[id(fingerprint)] = fingerprint.redacted()
        return redacted[id(fingerprint)]

    found: list[tuple[str, ...]] = [()]
    for before, after in itertools.pairwise(runs):
        old, new = before.measurement.fingerprint, after.measurement.fingerprint
        if isinstance(old, Fingerprint) and isinstance(new, Fingerprint) and not (old is new or old == new):
            changes = diff(clean(old), clean(new))
            found.append(tuple(changes.describe().splitlines()) if changes else ())
        else:
            found.append(())
    return tuple(found[: len(runs)])
