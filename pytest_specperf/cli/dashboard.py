"""`specperf dashboard`: a static HTML site of a store's histories (report/dashboard/), written into
a folder or published onto a git store's branch."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from pytest_specperf.cli.common import add_tolerance_arguments, check_tolerances, opened_store, shown
from pytest_specperf.errors import SpecperfError
from pytest_specperf.report import dashboard


def add_parser(commands: Any, epilog: str, formatter: type[argparse.HelpFormatter]) -> None:
    parser = commands.add_parser(
        "dashboard",
        help="a static HTML site of the stored histories",
        epilog=epilog,
        formatter_class=formatter,
        description=(dashboard.__doc__ or "").split("\n\n")[0],
    )
    parser.add_argument(
        "--store",
        default=".specperf",
        help="store directory, or git:<branch> / git:<url>#<branch> (default: .specperf)",
    )
    parser.add_argument("-o", "--output", type=Path, metavar="DIR", help="where to write the pages")
    parser.add_argument(
        "--publish",
        action="store_true",
        help="a git store: write the pages at the root of its branch, commit and push them (GitHub Pages)",
    )
    parser.add_argument("--title", help="the pages' title (default: the suite's or the branch's name)")
    add_tolerance_arguments(parser)
    parser.set_defaults(run=run_dashboard)


def run_dashboard(args: argparse.Namespace) -> int:
    check_arguments(args)  # before the store is opened: a git store is fetched first
    with opened_store(args.store) as store:
        return dashboard.run(args, store, location=shown(args.store))


def check_arguments(args: argparse.Namespace) -> None:
    """The arguments alone, with the rules the suite's settings of the same names follow."""
    if args.output is None and not args.publish:
        raise SpecperfError("dashboard: give -o DIR (where to write the pages), or --publish for a git store")
    check_tolerances(args)
