"""`specperf backtest FILE.csv`: replay a nightly series through the verdict engine the tests use
(pytest_specperf/backtest.py), night by night, and say what the gate would have said."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from pytest_specperf.cli.common import OK, REGRESSED
from pytest_specperf.cli.setup import Output, Setup
from pytest_specperf.common.jsonfile import atomic_write, clean
from pytest_specperf.config import values as check
from pytest_specperf.config.settings import SpecperfConfig
from pytest_specperf.report.backtest_plot import plot_replay, require_matplotlib
from pytest_specperf.store.records import VERDICT_NIGHTS
from pytest_specperf.verdict.backtest import (
    TTEST_RUNS,
    describe_summary,
    night_line,
    read_series,
    replay,
    to_json,
)
from pytest_specperf.verdict.backtest import __doc__ as BACKTEST_DOC
from pytest_specperf.verdict.stats import Direction, Tolerance
from pytest_specperf.verdict.verdicts import Verdict


def backtest_arguments(parser: argparse.ArgumentParser) -> None:
    """The series and how to read it, then the verdict's settings."""
    parser.add_argument("file", type=Path, help="CSV with a header, one row per run, oldest first")
    parser.add_argument("--value", metavar="COLUMN", help="the values (default: the only numeric column)")
    parser.add_argument("--commit", metavar="COLUMN", help="each run's commit")
    parser.add_argument("--time", metavar="COLUMN", help="each run's time")
    parser.add_argument("--rounds", metavar="COLUMN", help="per-round values, separated by ';'")
    parser.add_argument("--update", metavar="COLUMN", help="1 where a run starts a new segment (--specperf-update)")
    parser.add_argument(
        "--run", dest="run_column", metavar="COLUMN", help="each run's number (default: a column named 'run', if any)"
    )
    parser.add_argument("--allow-gaps", action="store_true", help="accept missing run numbers (not duplicates)")
    parser.add_argument(
        "--tolerance",
        type=check.from_command_line,
        default=SpecperfConfig.max_regression,
        metavar="F",
        help=f"tolerated change (default: max_regression, {SpecperfConfig.max_regression:g})",
    )
    parser.add_argument("--lower-is-better", action="store_true", help="the values are latencies (lower is better)")
    parser.add_argument(
        "--prior-cv",
        type=check.from_command_line,
        default=SpecperfConfig.run_to_run_cv,
        metavar="F",
        help=f"run-to-run CV while a segment has under 3 runs (default {SpecperfConfig.run_to_run_cv:g})",
    )
    parser.add_argument(
        "--history",
        type=check.from_command_line,
        default=VERDICT_NIGHTS,
        metavar="N",
        help=f"nights a night is judged against, as a stored history's verdict reads them (default {VERDICT_NIGHTS})",
    )


def comparison_arguments(parser: argparse.ArgumentParser) -> None:
    """What to show beside the verdicts."""
    parser.add_argument(
        "--compare",
        action="store_true",
        help=f"beside each night, a plain t-test's (99%%, newest {TTEST_RUNS} runs) and a fixed band's verdicts",
    )
    parser.add_argument(
        "--plot",
        type=Path,
        metavar="FILE.png",
        help="draw the series, the level and its band, the verdicts and the changes (needs matplotlib: the plot extra)",
    )


def run_backtest(args: argparse.Namespace) -> int:
    args.tolerance = check.setting("max_regression", args.tolerance, "--tolerance")  # max_regression's rule
    args.prior_cv = check.setting("run_to_run_cv", args.prior_cv, "--prior-cv")
    args.history = check.integer(args.history, "--history", minimum=2)  # a history needs a night before tonight
    if args.plot is not None:
        require_matplotlib("--plot")  # before a long replay, not after
    column, rows, missing = read_series(
        args.file,
        value=args.value,
        commit=args.commit,
        time=args.time,
        rounds=args.rounds,
        update=args.update,
        run=args.run_column,
        allow_gaps=args.allow_gaps,
    )
    direction = Direction.LOWER_IS_BETTER if args.lower_is_better else Direction.HIGHER_IS_BETTER
    tolerance = Tolerance(args.tolerance, direction, args.prior_cv)
    result = replay(rows, tolerance, history=args.history, compare=args.compare)
    better = "lower" if args.lower_is_better else "higher"
    print(f"{args.file}: {column} ({better} is better), tolerance {args.tolerance:.0%}, one server start a night")
    plain = f"{'t-test / band':<22} " if args.compare else ""
    print(f"{'run':>5}  {'time / commit':<28} {'value':>12}  {'vs level [90%]':<28} {plain}{'outcome':<12} notes")
    for night in result.nights:
        print(night_line(night))
    data = to_json(result, column, args.file, tolerance, missing)
    print()
    for line in describe_summary(data["summary"], tolerance, missing):
        print(line)
    if args.json is not None:
        atomic_write(args.json, json.dumps(clean(data), indent=2, allow_nan=False) + "\n")
        print(f"backtest JSON written to {args.json}")
    if args.plot is not None:
        plot_replay(result, args.plot, title=f"{args.file.name}: {column}", tolerance=tolerance)
        print(f"backtest plot written to {args.plot}")
    last = result.nights[-1].outcome if result.nights else None
    return REGRESSED if last is Verdict.REGRESSION else OK


SETUP = Setup(
    run_backtest,
    [backtest_arguments, Output("write the nights and the summary as JSON"), comparison_arguments],
    description=(BACKTEST_DOC or "").split("\n\n")[0],
)
