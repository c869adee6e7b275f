"""`specperf dashboard`: a static HTML site of a store's histories (report/dashboard/), written into
a folder or published onto a git store's branch."""

from __future__ import annotations

import argparse

from pytest_specperf.cli.common import opened_store, shown
from pytest_specperf.cli.setup import Output, Setup, StoreArgument, Tolerances, check_tolerances
from pytest_specperf.errors import SpecperfError
from pytest_specperf.report import dashboard


def dashboard_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--publish",
        action="store_true",
        help="a git store: write the pages at the root of its branch, commit and push them (GitHub Pages)",
    )
    parser.add_argument("--title", help="the pages' title (default: the suite's or the branch's name)")


def run_dashboard(args: argparse.Namespace) -> int:
    check_arguments(args)  # before the store is opened: a git store is fetched first
    with opened_store(args.store) as store:
        return dashboard.run(args, store, location=shown(args.store))


def check_arguments(args: argparse.Namespace) -> None:
    """The arguments alone, with the rules the suite's settings of the same names follow."""
    if args.output is None and not args.publish:
        raise SpecperfError("dashboard: give -o DIR (where to write the pages), or --publish for a git store")
    check_tolerances(args)


SETUP = Setup(
    run_dashboard,
    [
        StoreArgument(),
        Output("where to write the pages", flags=("-o", "--output"), metavar="DIR"),
        dashboard_arguments,
        Tolerances(),
    ],
    description=(dashboard.__doc__ or "").split("\n\n")[0],
)
