"""Where a stored history stands: its newest night judged against the runs before it, and the change
in force that judgement names.

A night's verdict names the change it belongs to ("since the run of 2026-11-12"): the change nobody
accepted (`NightVerdict.change`), else where a night beyond the tolerance began (`since`). The
dashboard and `specperf history` read a history after the fact; they judge its newest night the way
its session did (`nightly.judge_night` over the runs of its segment before it, as `checks.past_runs`
builds them) and show that same change, so the three never disagree on *since when*. Pure: no I/O.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass

from pytest_specperf.measure.fingerprint import Fingerprint
from pytest_specperf.store.records import StoredBaseline, StoredRun
from pytest_specperf.verdict.checks import Limits, past_runs
from pytest_specperf.verdict.drift import diff
from pytest_specperf.verdict.explain import Explanation, explain
from pytest_specperf.verdict.nightly import NightVerdict, judge_night
from pytest_specperf.verdict.stats import Decision, Estimate
from pytest_specperf.verdict.trends import HistoryChange, Point


@dataclass(frozen=True)
class ChangeInForce:
    """The change the newest night's verdict names, and the run of the history where it begins."""

    run: int  # position in the key's history, oldest 0
    change: HistoryChange


def newest_night(runs: Sequence[StoredRun]) -> tuple[StoredRun, ...]:
    """The newest run and the runs of the same session right before it (a second server start)."""
    session = runs[-1].provenance.session
    count = 1
    while session and count < len(runs) and runs[-1 - count].provenance.session == session:
        count += 1
    return tuple(runs[-count:])


def judge_newest(entry: StoredBaseline, metric: str, limits: Limits) -> NightVerdict | None:
    """The newest night against the runs of its segment before it, by `nightly.judge_night` (None with
    nothing to judge against, or no value of `metric`)."""
    runs = entry.runs
    night = newest_night(runs)
    before = runs[: len(runs) - len(night)]
    tonight = [s for r in night if (s := r.measurement.samples(metric)) and min(s) > 0.0]
    if not tonight or not before or before[-1].segment != night[0].segment:
        return None
    _, past = past_runs(dataclasses.replace(entry, runs=before), metric)
    if not any(p.status.counted for p in past):
        return None
    rounds = len(night[0].measurement.rounds)
    return judge_night(tonight, past, limits.tolerance(metric), rounds=rounds)


def change_in_force(entry: StoredBaseline, metric: str, night: NightVerdict | None) -> ChangeInForce | None:
    """The change `night` (the newest night's verdict, `judge_newest`) names, placed in the history."""
    point = None if night is None else (night.change if night.change is not None else night.since)
    if night is None or point is None:
        return None
    runs = entry.runs
    newest = newest_night(runs)
    judged, _ = past_runs(dataclasses.replace(entry, runs=runs[: len(runs) - len(newest)]), metric)
    judged.append(newest[0])  # the newest night is one value of the series, its first start's run
    points = [
        Point(Estimate.exact(value), run.provenance.created, run.provenance.git_commit, run.segment)
        for value, run in zip(night.values, judged, strict=True)
    ]
    first = judged[point.index]
    run = next(i for i, r in enumerate(runs) if r is first)
    return ChangeInForce(run, HistoryChange.of(entry.measurement.key, metric, point, points))


def explain_newest(
    entry: StoredBaseline, night: NightVerdict | None, reference: StoredBaseline | None
) -> Explanation | None:
    """Why the newest night's throughput moved, when it lies beyond the tolerance (`night`, its
    `judge_newest`): as a failing test says it (checks.explanation_of), from the stored runs alone:
    the level's runs, the reference's runs of the same sessions beside them and tonight's."""
    if night is None or night.level is None or night.decision is Decision.MET or night.improved:
        return None
    runs = entry.runs
    newest = newest_night(runs)
    judged, _ = past_runs(dataclasses.replace(entry, runs=runs[: len(runs) - len(newest)]), "output_throughput")
    level = [judged[i] for i in night.level.level_runs if i < len(judged)]
    if not level:
        return None
    sessions = {run.provenance.session for run in level} - {None}
    tonight = newest[0]
    stored = reference.runs if reference is not None else ()
    beside = [r.measurement for r in stored if r.provenance.session in sessions]
    session = tonight.provenance.session
    reference_tonight = next((r.measurement for r in stored if session and r.provenance.session == session), None)
    old, new = level[-1].measurement.fingerprint, tonight.measurement.fingerprint
    drift = diff(old, new).environment if isinstance(old, Fingerprint) and isinstance(new, Fingerprint) else []
    return explain(
        tonight.measurement,
        [r.measurement for r in level],
        reference=reference_tonight,
        reference_level=beside,
        drift=drift,
        verdict=night.comparison.ratio if night.comparison is not None else None,
    )
