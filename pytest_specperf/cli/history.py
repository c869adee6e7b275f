"""`specperf history [SERVER[/WORKLOAD]]`: each stored history as a series of runs, with its
segments, change points and rejected outliers, and the speedup over the reference run of the same session."""

from __future__ import annotations

import argparse
import dataclasses
import math
from dataclasses import dataclass
from pathlib import Path

from pytest_specperf.cli.common import OK, mean_pm, opened_store, shown
from pytest_specperf.cli.setup import Setup, StoreArgument, Tolerances, check_tolerances
from pytest_specperf.config.settings import SpecperfConfig
from pytest_specperf.report.blocks import pm, text_table
from pytest_specperf.store import Store
from pytest_specperf.store.file import verdict_window
from pytest_specperf.store.records import StoredBaseline, StoredRun, reference_history, runs_word
from pytest_specperf.verdict.changes import change_points
from pytest_specperf.verdict.checks import JUDGED_METRICS, Limits
from pytest_specperf.verdict.history import reject_outliers
from pytest_specperf.verdict.standing import ChangeInForce, change_in_force, judge_newest
from pytest_specperf.verdict.stats import Estimate, ratio_estimate
from pytest_specperf.verdict.trends import paired_runs

HISTORY_HEADERS = (
    "run",
    "stored",
    "commit",
    "segment",
    "status",
    "tok/s",
    "TPOT ms",
    "τ",
    "speedup",
    "rounds",
    "change",
)
#: the change column wraps, so a run with changes in several series keeps the table within 120 columns
HISTORY_WIDTHS = (None,) * 10 + (25,)
#: series searched for change points, with the short name the change column uses
HISTORY_SERIES = (
    ("output_throughput", "tok/s"),
    ("mean_tpot_ms", "TPOT"),
    ("accept_length", "τ"),
    ("speedup", "speedup"),
)


def history_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("select", nargs="?", default="", metavar="SERVER[/WORKLOAD]", help="default: every key")


def run_history(args: argparse.Namespace) -> int:
    check_tolerances(args)
    limits = Limits.tolerating(args.max_regression, args.max_regression_accept_length)
    root = shown(args.store)
    server, _, workload = args.select.partition("/")
    with opened_store(args.store) as store:
        select = getattr(store, "histories_of", None)  # the selected histories and their references only
        stored = select(server, workload) if select is not None else store.entries()
        where = {entry.path: _where(store, entry.path) for entry in stored}
    entries = [
        e for e in stored if server in ("", e.measurement.key.server) and workload in ("", e.measurement.key.workload)
    ]
    if not entries:
        print(f"no stored history{f' for {args.select}' if args.select else ''} in {root}")
        return OK
    for entry in entries:
        reference = reference_history(entry, stored)
        print(f"{entry.measurement.key.label}: {runs_word(entry.runs)}, {where[entry.path]}")
        if reference is not None:
            print(f"speedup over {reference.measurement.key.server}: its runs stored by the same session")
        for line in text_table(HISTORY_HEADERS, history_rows(entry, reference, limits), HISTORY_WIDTHS):
            print(line)
        print()
    return OK


SETUP = Setup(run_history, [history_arguments, StoreArgument(), Tolerances()])


def _where(store: Store, path: Path) -> str:
    """A history's file as the user can find it: a folder store's path, or a git store's branch and the
    file on it (its work tree is temporary and gone once the command ends)."""
    if store.location == str(store.root):
        return str(path)
    return f"{store.location}, file {path.relative_to(store.root).as_posix()}"


def history_rows(
    entry: StoredBaseline, reference: StoredBaseline | None = None, limits: Limits | None = None
) -> list[list[str]]:
    """One row per run, oldest first: throughput, TPOT, accept length and (with the reference's
    history) the speedup over the reference run of the same session; a run where a change point
    starts in one of these series (within its segment), or where a segment starts, says so. The change
    the newest night's verdict names (`standing.change_in_force`, judged with `limits`) is marked
    "in force" where it begins, whether or not the per-segment search finds it too."""
    limits = limits or Limits.tolerating(SpecperfConfig.max_regression, SpecperfConfig.max_regression_accept_length)
    series = _Series(list(entry.runs), _speedups(list(entry.runs), reference))
    marks: dict[int, list[str]] = {}
    for index, run in enumerate(series.runs):
        if index and run.segment != series.runs[index - 1].segment:
            marks.setdefault(index, []).append(f"new segment ({run.acceptance or '--specperf-update'})")
    in_force = _in_force_marks(entry, limits, marks)
    for segment in sorted({r.segment for r in series.runs}):
        _change_marks(series, segment, in_force, marks)
        _outlier_marks(series, segment, marks)
    return [
        _row(index, run, series.speedups.get(id(run)), marks.get(index, [])) for index, run in enumerate(series.runs)
    ]


@dataclass(frozen=True)
class _Series:
    """A history's runs, oldest first, with each run's speedup over its session's reference run (by id)."""

    runs: list[StoredRun]
    speedups: dict[int, Estimate]
    #: each run's value of each series, computed once: the change, outlier and in-force marks all read them
    _values: dict[tuple[int, str], float | None] = dataclasses.field(default_factory=dict)

    def value(self, run: StoredRun, metric: str) -> float | None:
        key = (id(run), metric)
        if key not in self._values:
            if metric == "speedup":
                found = self.speedups.get(id(run))
                self._values[key] = found.value if found is not None else None
            else:
                self._values[key] = run.summary_value(metric)
        return self._values[key]


def _speedups(runs: list[StoredRun], reference: StoredBaseline | None) -> dict[int, Estimate]:
    """Each run's throughput over the reference run of the same session, by the run's id."""
    partners = {id(run): ref for run, ref in paired_runs(runs, reference.runs if reference is not None else ())}
    speedups: dict[int, Estimate] = {}
    for run in runs:
        partner = partners.get(id(run))
        if partner is not None:
            x, y = run.measurement.samples("output_throughput"), partner.measurement.samples("output_throughput")
            if x and y:
                speedups[id(run)] = ratio_estimate(x, y)
    return speedups


def _in_force_marks(entry: StoredBaseline, limits: Limits, marks: dict[int, list[str]]) -> dict[str, ChangeInForce]:
    """The change the newest night names, per judged metric, marked where it begins. The night is judged
    on the window its session read (`verdict_window`, as the dashboard judges it): the level reads no
    further back, so a year of nights costs what 90 do and gives the same verdict."""
    in_force: dict[str, ChangeInForce] = {}
    window = verdict_window(entry)
    position = {id(run): index for index, run in enumerate(entry.runs)}
    for metric in JUDGED_METRICS:
        found = change_in_force(window, metric, judge_newest(window, metric, limits))
        if found is not None:
            found = dataclasses.replace(found, run=position[id(window.runs[found.run])])
            in_force[metric] = found
            kind = "drift " if found.change.kind == "drift" else ""
            name = dict(HISTORY_SERIES)[metric]
            marks.setdefault(found.run, []).append(f"{name} {kind}{found.change.percent} in force since here")
    return in_force


def _change_marks(
    series: _Series, segment: int, in_force: dict[str, ChangeInForce], marks: dict[int, list[str]]
) -> None:
    """The change points of each series within one segment (those in force are marked already)."""
    for metric, name in HISTORY_SERIES:
        members = [i for i, r in enumerate(series.runs) if r.segment == segment and series.value(r, metric) is not None]
        values = [series.value(series.runs[i], metric) for i in members]
        for change in change_points([v for v in values if v is not None]):
            held = in_force.get(metric)
            if held is not None and (held.run, held.change.kind) == (members[change.index], change.kind):
                continue  # marked as in force above
            kind = "drift " if change.kind == "drift" else ""
            marks.setdefault(members[change.index], []).append(f"{name} {kind}{change.percent}")


def _outlier_marks(series: _Series, segment: int, marks: dict[int, list[str]]) -> None:
    """The accepted runs of one segment that outlier rejection leaves out of its level."""
    counted = [i for i, r in enumerate(series.runs) if r.segment == segment and r.status == "accepted"]
    levels = [
        math.log(v) for i in counted if (v := series.value(series.runs[i], "output_throughput")) is not None and v > 0
    ]
    if len(levels) == len(counted):
        for rejection in reject_outliers(levels):
            marks.setdefault(counted[rejection.index], []).append(
                f"rejected as an outlier ({rejection.ratio - 1:+.1%}): out of the level and spread"
            )


def _row(index: int, run: StoredRun, speedup: Estimate | None, marks: list[str]) -> list[str]:
    m = run.measurement
    return [
        str(index + 1),
        run.provenance.created[:10],
        (run.provenance.git_commit or "-")[:7],
        str(run.segment),
        run.status,
        mean_pm(m, "output_throughput", 1),
        mean_pm(m, "mean_tpot_ms", 2),
        mean_pm(m, "accept_length", 2),
        pm(speedup, 3) if speedup is not None else "-",
        str(len(m.rounds)),
        "; ".join(marks),
    ]
