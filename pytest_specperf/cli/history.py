"""`specperf history [SERVER[/WORKLOAD]]`: each stored history as a series of runs, with its
segments, change points and rejected outliers, and the speedup over the reference run of the same session."""

from __future__ import annotations

import argparse
import math
from pathlib import Path
from typing import Any

from pytest_specperf.cli.common import (
    OK,
    STORE_HELP,
    add_tolerance_arguments,
    check_tolerances,
    mean_pm,
    opened_store,
    shown,
)
from pytest_specperf.config.settings import SpecperfConfig
from pytest_specperf.report.terminal import pm, text_table
from pytest_specperf.store import Store
from pytest_specperf.store.records import StoredBaseline, StoredRun, reference_history, runs_word
from pytest_specperf.verdict.changes import change_points
from pytest_specperf.verdict.checks import JUDGED_METRICS, Limits
from pytest_specperf.verdict.history import reject_outliers
from pytest_specperf.verdict.standing import change_in_force, judge_newest
from pytest_specperf.verdict.stats import Estimate, ratio_estimate
from pytest_specperf.verdict.trends import paired_runs


def add_parser(commands: Any, epilog: str, formatter: type[argparse.HelpFormatter]) -> None:
    history = commands.add_parser(
        "history",
        help="stored run histories with segments and change points",
        epilog=epilog,
        formatter_class=formatter,
    )
    history.add_argument("select", nargs="?", default="", metavar="SERVER[/WORKLOAD]", help="default: every key")
    history.add_argument("--store", default=".specperf", help=STORE_HELP)
    add_tolerance_arguments(history)
    history.set_defaults(run=run_history)


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
    runs = list(entry.runs)
    partners = {id(run): ref for run, ref in paired_runs(runs, reference.runs if reference is not None else ())}
    speedups: dict[int, Estimate] = {}
    for run in runs:
        partner = partners.get(id(run))
        if partner is not None:
            x, y = run.measurement.samples("output_throughput"), partner.measurement.samples("output_throughput")
            if x and y:
                speedups[id(run)] = ratio_estimate(x, y)

    def value(run: StoredRun, metric: str) -> float | None:
        if metric == "speedup":
            found = speedups.get(id(run))
            return found.value if found is not None else None
        return run.summary_value(metric)

    marks: dict[int, list[str]] = {}
    for index, run in enumerate(runs):
        if index and run.segment != runs[index - 1].segment:
            marks.setdefault(index, []).append(f"new segment ({run.acceptance or '--specperf-update'})")
    in_force = {}
    for metric in JUDGED_METRICS:
        found = change_in_force(entry, metric, judge_newest(entry, metric, limits))
        if found is not None:
            in_force[metric] = found
            kind = "drift " if found.change.kind == "drift" else ""
            name = dict(HISTORY_SERIES)[metric]
            marks.setdefault(found.run, []).append(f"{name} {kind}{found.change.percent} in force since here")
    for segment in sorted({r.segment for r in runs}):
        for metric, name in HISTORY_SERIES:
            members = [i for i, r in enumerate(runs) if r.segment == segment and value(r, metric) is not None]
            values = [value(runs[i], metric) for i in members]
            for change in change_points([v for v in values if v is not None]):
                held = in_force.get(metric)
                if held is not None and (held.run, held.change.kind) == (members[change.index], change.kind):
                    continue  # marked as in force above
                kind = "drift " if change.kind == "drift" else ""
                marks.setdefault(members[change.index], []).append(f"{name} {kind}{change.percent}")
        counted = [i for i, r in enumerate(runs) if r.segment == segment and r.status == "accepted"]
        levels = [math.log(v) for i in counted if (v := value(runs[i], "output_throughput")) is not None and v > 0]
        if len(levels) == len(counted):
            for rejection in reject_outliers(levels):
                marks.setdefault(counted[rejection.index], []).append(
                    f"rejected as an outlier ({rejection.ratio - 1:+.1%}): out of the level and spread"
                )
    rows = []
    for index, run in enumerate(runs):
        m = run.measurement
        rows.append(
            [
                str(index + 1),
                run.provenance.created[:10],
                (run.provenance.git_commit or "-")[:7],
                str(run.segment),
                run.status,
                mean_pm(m, "output_throughput", 1),
                mean_pm(m, "mean_tpot_ms", 2),
                mean_pm(m, "accept_length", 2),
                pm(speedups[id(run)], 3) if id(run) in speedups else "-",
                str(len(m.rounds)),
                "; ".join(marks.get(index, [])),
            ]
        )
    return rows
